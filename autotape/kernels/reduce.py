"""Reductions and scans, compiled tier: forward and VJP kernels.

The VJP of sum and mean broadcasts the output gradient back over the reduced axes
(times 1/count for mean); that of max and min sends it to the elements equal to the
result, split evenly among ties (torch's amax rule); that of prod is z / x, computed so
that zeros are exact: in a group with one zero only that element gets a gradient (the
product of the others), with two or more none does. cumprod's VJP is a backward
recurrence that never divides, so it is exact at zeros too.
"""
import numpy as np
from numba.extending import register_jitable

from ..opcodes import CUMPROD, CUMSUM, MAX, MEAN, MIN, PROD, SUM
from ..tape_format import A, OP, reduces_axis, scan_dims
from .context import (accumulator, adjoint, aux, broadcast_map, first_write, has_adjoint,
                      shape_of, size_of, value)


@register_jitable
def kept_map(ctx, i, a):
    """For each element of the operand, the flat index of its group's result."""
    kept = shape_of(ctx, a).copy()
    for d in range(kept.size):
        if reduces_axis(ctx.ipool, aux(ctx, i), d):
            kept[d] = 1
    return broadcast_map(kept, shape_of(ctx, a))


@register_jitable
def extreme_vjp(ctx, i, a, g):
    """max / min: the gradient goes to the elements equal to the result, split evenly."""
    x, z = value(ctx, a), value(ctx, i)
    m = kept_map(ctx, i, a)
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
    m = kept_map(ctx, i, a)
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
    outer, length, inner = scan_dims(ctx.ipool, aux(ctx, i))
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
    outer, length, inner = scan_dims(ctx.ipool, aux(ctx, i))
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
    """Recompute a reduction or scan row's value (a compiled replay of the tape); False
    for an opcode it does not know."""
    op, a = ctx.rows[i, OP], ctx.rows[i, A]
    if not (op == SUM or op == MEAN or op == MAX or op == MIN or op == PROD or
            op == CUMSUM or op == CUMPROD):
        return False
    x, z = value(ctx, a), value(ctx, i)
    if op == CUMSUM or op == CUMPROD:
        outer, length, inner = scan_dims(ctx.ipool, aux(ctx, i))
        for o in range(outer):
            for c in range(inner):
                acc = 0.0 if op == CUMSUM else 1.0
                for j in range(length):
                    k = (o * length + j) * inner + c
                    acc = acc + x[k] if op == CUMSUM else acc * x[k]
                    z[k] = acc
        return True
    if (op == SUM or op == MEAN) and z.size == 1:          # the whole array
        s = 0.0
        for k in range(x.size):
            s += x[k]
        z[0] = s / x.size if op == MEAN else s
        return True
    start = 1.0 if op == PROD else (-np.inf if op == MAX else (np.inf if op == MIN else 0.0))
    z[:] = start
    m = kept_map(ctx, i, a)
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
    return True


@register_jitable
def reduce_vjp(ctx, i):
    """The VJP of a reduction or scan row; False for an opcode it does not know."""
    op, a = ctx.rows[i, OP], ctx.rows[i, A]
    if not (op == SUM or op == MEAN or op == MAX or op == MIN or op == PROD or
            op == CUMSUM or op == CUMPROD):
        return False
    if not has_adjoint(ctx, a):
        return True
    if op == MAX or op == MIN:
        extreme_vjp(ctx, i, a, adjoint(ctx, i))
    elif op == PROD:
        prod_vjp(ctx, i, a, adjoint(ctx, i))
    elif op == CUMSUM:
        cumsum_vjp(ctx, i)
    elif op == CUMPROD:
        cumprod_vjp(ctx, i)
    else:
        _sum_vjp(ctx, i, a)
    return True


@register_jitable
def _sum_vjp(ctx, i, a):
    """sum and mean: g broadcast back over the reduced axes (times 1/count for mean)."""
    g, ga = adjoint(ctx, i), adjoint(ctx, a)
    assign = first_write(ctx, a)          # every element of ga is written below
    n = ga.size
    scale = 1.0
    if ctx.rows[i, OP] == MEAN and n > 0:
        scale = size_of(ctx, i) / n
    if g.size == 1:
        v = g[0] * scale
        if assign:
            ga[:] = v
        else:
            for k in range(n):
                ga[k] += v
        return
    m = kept_map(ctx, i, a)
    if assign:
        for k in range(n):
            ga[k] = g[m[k]] * scale
    else:
        for k in range(n):
            ga[k] += g[m[k]] * scale
