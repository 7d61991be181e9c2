"""Reductions: sum and mean over an axis set.

The row's int parameter is a bitmask of the reduced axes of the operand. The VJP
broadcasts the output gradient back over those axes (times 1/count for mean).
"""
import numpy as np
from numba.extending import register_jitable

from .codes import MEAN, SUM
from ..kernels.layout import (A, adjoint, broadcast_map, first_write, has_adjoint, param,
                              shape_of, size_of)


def axes_mask(axes):
    mask = 0
    for ax in axes:
        mask |= 1 << ax
    return mask


@register_jitable
def reduce_vjp(ctx, i):
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a):
        return
    g, ga = adjoint(ctx, i), adjoint(ctx, a)
    assign = first_write(ctx, a)          # every element of ga is written below
    n = ga.size
    scale = 1.0
    if ctx.rows[i, 0] == MEAN and n > 0:
        scale = size_of(ctx, i) / n
    if g.size == 1:
        v = g[0] * scale
        if assign:
            ga[:] = v
        else:
            for k in range(n):
                ga[k] += v
        return
    mask = param(ctx, i, 0)
    kept = shape_of(ctx, a).copy()
    for d in range(kept.size):
        if (mask >> d) & 1:
            kept[d] = 1
    m = broadcast_map(kept, shape_of(ctx, a))
    if assign:
        for k in range(n):
            ga[k] = g[m[k]] * scale
    else:
        for k in range(n):
            ga[k] += g[m[k]] * scale


reductions = {SUM: np.sum, MEAN: np.mean}


# ---- for create_graph=True (see elementwise.graph_vjps) --------------------------------

def _expand(at, g, r):
    """g back over the reduced axes of the operand."""
    mask = int(r.params[0])
    kept = tuple(1 if (mask >> d) & 1 else n for d, n in enumerate(r.x.shape))
    return at.broadcast_to(g.reshape(kept), r.x.shape)


graph_vjps = {
    SUM:  lambda at, g, r, k: _expand(at, g, r),
    MEAN: lambda at, g, r, k: _expand(at, g, r) * (r.z.size / max(r.x.size, 1)),
}
