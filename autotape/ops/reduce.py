"""Reductions over an axis set: sum, mean, max, min.

The row's int parameter is a bitmask of the reduced axes of the operand. The VJP of sum
and mean broadcasts the output gradient back over those axes (times 1/count for mean);
that of max and min sends it to the elements equal to the result, split evenly among
ties (torch's amax rule).
"""
import numpy as np
from numba.extending import register_jitable

from .codes import MAX, MEAN, MIN, SUM
from ..kernels.layout import (A, accumulator, adjoint, broadcast_map, first_write,
                              has_adjoint, param, shape_of, size_of, value)


def axes_mask(axes):
    mask = 0
    for ax in axes:
        mask |= 1 << ax
    return mask


@register_jitable
def _kept_map(ctx, i, a):
    """For each element of the operand, the flat index of its group's result."""
    mask = param(ctx, i, 0)
    kept = shape_of(ctx, a).copy()
    for d in range(kept.size):
        if (mask >> d) & 1:
            kept[d] = 1
    return broadcast_map(kept, shape_of(ctx, a))


@register_jitable
def extreme_vjp(ctx, i, a, g):
    """max / min: the gradient goes to the elements equal to the result, split evenly."""
    x, z = value(ctx, a), value(ctx, i)
    m = _kept_map(ctx, i, a)
    ties = np.zeros(z.size)
    for k in range(x.size):
        if x[k] == z[m[k]]:
            ties[m[k]] += 1.0
    ga = accumulator(ctx, a)
    for k in range(x.size):
        if x[k] == z[m[k]]:
            ga[k] += g[m[k]] / ties[m[k]]


@register_jitable
def reduce_vjp(ctx, i):
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a):
        return
    if ctx.rows[i, 0] == MAX or ctx.rows[i, 0] == MIN:
        extreme_vjp(ctx, i, a, adjoint(ctx, i))
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
    m = _kept_map(ctx, i, a)
    if assign:
        for k in range(n):
            ga[k] = g[m[k]] * scale
    else:
        for k in range(n):
            ga[k] += g[m[k]] * scale


reductions = {SUM: np.sum, MEAN: np.mean, MAX: np.max, MIN: np.min}


# ---- for create_graph=True (see elementwise.graph_vjps) --------------------------------

def _expand(at, g, r):
    """g back over the reduced axes of the operand."""
    mask = int(r.params[0])
    kept = tuple(1 if (mask >> d) & 1 else n for d, n in enumerate(r.x.shape))
    return at.broadcast_to(g.reshape(kept), r.x.shape)


def _tie_share(r):
    """1/ties at the elements equal to their group's max or min, 0 elsewhere."""
    mask = int(r.params[0])
    kept = tuple(1 if (mask >> d) & 1 else n for d, n in enumerate(r.x.shape))
    hit = r.x.numpy() == r.z.numpy().reshape(kept)
    axes = tuple(d for d in range(len(kept)) if (mask >> d) & 1)
    return hit / np.sum(hit, axis=axes, keepdims=True)


graph_vjps = {
    SUM:  lambda at, g, r, k: _expand(at, g, r),
    MEAN: lambda at, g, r, k: _expand(at, g, r) * (r.z.size / max(r.x.size, 1)),
    MAX:  lambda at, g, r, k: _expand(at, g, r) * _tie_share(r),
    MIN:  lambda at, g, r, k: _expand(at, g, r) * _tie_share(r),
}
