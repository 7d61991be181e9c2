"""Reductions over an axis set: sum, mean, max, min, prod; cumsum and cumprod along one
axis.

The row's int parameter is a bitmask of the reduced axes of the operand. The VJP of sum
and mean broadcasts the output gradient back over those axes (times 1/count for mean);
that of max and min sends it to the elements equal to the result, split evenly among
ties (torch's amax rule); that of prod is z / x, computed so that zeros are exact: in
a group with one zero only that element gets a gradient (the product of the others),
with two or more none does. cumprod's VJP is a backward recurrence that never divides,
so it is exact at zeros too.
"""
import numpy as np
from numba.extending import register_jitable

from ..guards import observe
from .codes import CUMPROD, CUMSUM, MAX, MEAN, MIN, PROD, SUM
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
def prod_vjp(ctx, i, a, g):
    x, z = value(ctx, a), value(ctx, i)
    m = _kept_map(ctx, i, a)
    zeros = np.zeros(z.size)
    others = np.ones(z.size)                  # product of the non-zero elements
    for k in range(x.size):
        if x[k] == 0:
            zeros[m[k]] += 1.0
        else:
            others[m[k]] *= x[k]
    ga = accumulator(ctx, a)
    for k in range(x.size):
        j = m[k]
        if zeros[j] == 0:
            ga[k] += g[j] * others[j] / x[k]
        elif zeros[j] == 1 and x[k] == 0:
            ga[k] += g[j] * others[j]


@register_jitable
def cumsum_vjp(ctx, i):
    """z = cumsum(x) along an axis viewed as (outer, length, inner): the gradient is the
    reversed cumulative sum of g."""
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a):
        return
    outer, length, inner = param(ctx, i, 0), param(ctx, i, 1), param(ctx, i, 2)
    g, ga = adjoint(ctx, i), accumulator(ctx, a)
    for o in range(outer):
        for c in range(inner):
            s = 0.0
            for j in range(length - 1, -1, -1):
                k = (o * length + j) * inner + c
                s += g[k]
                ga[k] += s


@register_jitable
def cumprod_vjp(ctx, i):
    """z = cumprod(x) along an axis viewed as (outer, length, inner):
    dx_j = z_(j-1) r_j, where r_j = g_j + x_(j+1) r_(j+1) is the sum over k >= j of g_k
    times the product of x over j < t <= k. No division: exact where x has zeros."""
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a):
        return
    outer, length, inner = param(ctx, i, 0), param(ctx, i, 1), param(ctx, i, 2)
    x, z, g, ga = value(ctx, a), value(ctx, i), adjoint(ctx, i), accumulator(ctx, a)
    for o in range(outer):
        for c in range(inner):
            r, x_next = 0.0, 0.0
            for j in range(length - 1, -1, -1):
                k = (o * length + j) * inner + c
                r = g[k] + x_next * r
                x_next = x[k]
                ga[k] += (z[k - inner] if j > 0 else 1.0) * r


@register_jitable
def reduce_forward(ctx, i):
    """Recompute a reduction or scan row's value (a compiled replay of the tape)."""
    op, a = ctx.rows[i, 0], ctx.rows[i, A]
    x, z = value(ctx, a), value(ctx, i)
    if op == CUMSUM or op == CUMPROD:
        outer, length, inner = param(ctx, i, 0), param(ctx, i, 1), param(ctx, i, 2)
        for o in range(outer):
            for c in range(inner):
                acc = 0.0 if op == CUMSUM else 1.0
                for j in range(length):
                    k = (o * length + j) * inner + c
                    acc = acc + x[k] if op == CUMSUM else acc * x[k]
                    z[k] = acc
        return
    if (op == SUM or op == MEAN) and z.size == 1:          # the whole array
        s = 0.0
        for k in range(x.size):
            s += x[k]
        z[0] = s / x.size if op == MEAN else s
        return
    start = 1.0 if op == PROD else (-np.inf if op == MAX else (np.inf if op == MIN else 0.0))
    z[:] = start
    m = _kept_map(ctx, i, a)
    for k in range(x.size):
        j, v = m[k], x[k]
        if op == SUM or op == MEAN:
            z[j] += v
        elif op == PROD:
            z[j] *= v
        elif v != v or (op == MAX and v > z[j]) or (op == MIN and v < z[j]):
            z[j] = v                           # max / min propagate nan, as numpy's
    if op == MEAN:
        scale = z.size / x.size if x.size > 0 else np.nan
        for j in range(z.size):
            z[j] *= scale


@register_jitable
def reduce_vjp(ctx, i):
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a):
        return
    if ctx.rows[i, 0] == MAX or ctx.rows[i, 0] == MIN:
        extreme_vjp(ctx, i, a, adjoint(ctx, i))
        return
    if ctx.rows[i, 0] == PROD:
        prod_vjp(ctx, i, a, adjoint(ctx, i))
        return
    if ctx.rows[i, 0] == CUMSUM:
        cumsum_vjp(ctx, i)
        return
    if ctx.rows[i, 0] == CUMPROD:
        cumprod_vjp(ctx, i)
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


reductions = {SUM: np.sum, MEAN: np.mean, MAX: np.max, MIN: np.min, PROD: np.prod}


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
    axes = tuple(d for d in range(len(kept)) if (mask >> d) & 1)

    def share(x, z):
        hit = x == z.reshape(kept)
        return hit / np.sum(hit, axis=axes, keepdims=True)
    return observe(share, r.x, r.z)


def _prod_rule(at, g, r):
    """g times the product of the other elements: z / x at non-zero elements (through
    the recorded z, so correct to any order), and at each zero the recorded product of
    the others (zeros are few; one product each)."""
    mask = int(r.params[0])
    axes = tuple(d for d in range(r.x.ndim) if (mask >> d) & 1)
    x, ge = r.x, _expand(at, g, r)
    zero = observe(lambda v: v == 0, x)
    out = at.where(zero, 0.0, ge * _expand(at, r.z, r) / at.where(zero, 1.0, x))
    for p in map(tuple, np.argwhere(zero)):         # (argwhere: also for 0-d)
        here = np.zeros(zero.shape, bool)
        here[p] = True
        others = at.prod(at.where(here, 1.0, x), axis=axes, keepdims=True)
        out = out + at.where(here, ge * at.broadcast_to(others, x.shape), 0.0)
    return out


def _reverse_cumsum(at, g, r):
    outer, length, inner = (int(v) for v in r.params[:3])
    g3 = g.reshape(outer, length, inner)
    return at.flip(at.cumsum(at.flip(g3, 1), axis=1), 1).reshape(r.x.shape)


def _cumprod_rule(at, g, r):
    """The compiled recurrence as recorded ops, without division (exact at zeros, to any
    order): with Q[j, k] = prod of x over j < t <= k (a cumprod of x with the first j+1
    entries set to 1), dx_j = z_(j-1) sum_(k >= j) g_k Q[j, k]. Costs length^2."""
    outer, length, inner = (int(v) for v in r.params[:3])
    x3, g3, z3 = (t.reshape(outer, 1, length, inner) for t in (r.x, g, r.z))
    j = np.arange(length)
    later = (j[None, :] > j[:, None])[None, :, :, None]          # [j, t]: t > j
    q = at.cumprod(at.where(later, x3, 1.0), axis=2)
    r_j = at.where(~later & (j[None, :] != j[:, None])[None, :, :, None], 0.0,
                   g3 * q).sum(axis=2)                              # sum over k >= j
    z_prev = at.concatenate([at.ones((outer, 1, inner)), z3[:, 0, :-1]], axis=1)
    return (z_prev * r_j).reshape(r.x.shape)


graph_vjps = {
    PROD: lambda at, g, r, k: _prod_rule(at, g, r),
    CUMPROD: lambda at, g, r, k: _cumprod_rule(at, g, r),
    CUMSUM: lambda at, g, r, k: _reverse_cumsum(at, g, r),
    SUM:  lambda at, g, r, k: _expand(at, g, r),
    MEAN: lambda at, g, r, k: _expand(at, g, r) * (r.z.size / max(r.x.size, 1)),
    MAX:  lambda at, g, r, k: _expand(at, g, r) * _tie_share(r),
    MIN:  lambda at, g, r, k: _expand(at, g, r) * _tie_share(r),
}
