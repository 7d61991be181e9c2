"""Reductions and scans, compiled tier: forward and VJP kernels.

The VJP of sum and mean broadcasts the output gradient back over the reduced axes
(times 1/count for mean); that of max and min sends it to the elements equal to the
result, split evenly among ties (torch's amax rule); that of prod is z / x, computed so
that zeros are exact: in a group with one zero only that element gets a gradient (the
product of the others), with two or more none does. cumprod's VJP is a backward
recurrence that never divides, so it is exact at zeros too.
"""
import numba
import numpy as np
from numba.extending import register_jitable

from ..opcodes import CUMPROD, CUMSUM, MAX, MEAN, MIN, PROD, SUM
from ..tape_format import A, OP, reduces_axis, scan_dims
from .cache import cached_njit
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


# ---- a whole sum on threads, numpy's to the bit ------------------------------------------

@register_jitable
def _pairwise_block(a, lo, n):
    """numpy's sum of up to 128 elements: under 8 in order; else 8 accumulators combined
    as a tree, then the remainder in order."""
    if n < 8:
        s = -0.0
        for k in range(lo, lo + n):
            s += a[k]
        return s
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    m = lo + n - n % 8
    for k in range(lo + 8, m, 8):
        r0 += a[k]
        r1 += a[k + 1]
        r2 += a[k + 2]
        r3 += a[k + 3]
        r4 += a[k + 4]
        r5 += a[k + 5]
        r6 += a[k + 6]
        r7 += a[k + 7]
    s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for k in range(m, lo + n):
        s += a[k]
    return s


@register_jitable
def pairwise_sum(a, lo, n):
    """numpy's pairwise summation of a[lo:lo + n] (its float add loop's reduce): blocks
    of up to 128 as _pairwise_block; above, the two halves (the first a multiple of 8)
    summed so, then added. The recursion runs on explicit stacks (numba compiles no
    recursive register_jitable), with the same additions in the same order."""
    todo_lo, todo_n = np.empty(128, np.int64), np.empty(128, np.int64)
    todo_join = np.empty(128, np.bool_)
    sums = np.empty(128)
    todo_lo[0], todo_n[0], todo_join[0] = lo, n, False
    top, nsums = 1, 0
    while top > 0:
        top -= 1
        start, size = todo_lo[top], todo_n[top]
        if todo_join[top]:                      # both halves summed: add them
            nsums -= 1
            sums[nsums - 1] = sums[nsums - 1] + sums[nsums]
        elif size <= 128:
            sums[nsums] = _pairwise_block(a, start, size)
            nsums += 1
        else:
            half = size // 2
            half -= half % 8
            todo_join[top] = True               # (after the two halves below it)
            todo_lo[top + 1], todo_n[top + 1], todo_join[top + 1] = start + half, size - half, False
            todo_lo[top + 2], todo_n[top + 2], todo_join[top + 2] = start, half, False
            top += 3
    return sums[0]


@cached_njit(parallel=True)
def sum_in_threads(a, depth):
    """np.sum(a) of a flat float64 array of at least 128 * 2**depth elements: the
    2**depth subtrees at that depth of numpy's pairwise recursion summed on numba's
    threads, then combined as numpy combines them, so bit for bit numpy's sum."""
    leaves = 1 << depth
    lo, size = np.zeros(leaves, np.int64), np.zeros(leaves, np.int64)
    size[0] = a.size
    for level in range(depth):
        for k in range((1 << level) - 1, -1, -1):     # node k -> children 2k, 2k + 1
            n, start = size[k], lo[k]
            half = n // 2
            half -= half % 8
            lo[2 * k], size[2 * k] = start, half
            lo[2 * k + 1], size[2 * k + 1] = start + half, n - half
    part = np.empty(leaves)
    for k in numba.prange(leaves):
        part[k] = pairwise_sum(a, lo[k], size[k])
    while leaves > 1:
        leaves //= 2
        for k in range(leaves):
            part[k] = part[2 * k] + part[2 * k + 1]
    return 0.0 + part[0]            # numpy starts from its identity, 0.0
