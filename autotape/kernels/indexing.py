"""Indexing ops, compiled tier: reshape, strided views, index assignment,
concatenation, and gathers / scatter-adds by an index array.

A strided view (basic indexing, transpose, broadcast_to) is described by an offset and
one stride per output axis, in elements of the operand's flat C-order data; its VJP
scatter-adds the gradient back along the same pattern. Index assignment writes a
strided region of a copy of the base; concatenation places each operand in a band of
columns of the output viewed as (outer, width). Parameter layouts: tape_format.py.
"""
import numpy as np
from numba.extending import register_jitable

from ..opcodes import CONCAT, PUT_ADD, RESHAPE, SCATTER, SEARCHSORTED, SETITEM, STRIDED, TAKE
from ..tape_format import (A, B, OP, concat_dims, concat_part, setitem_region, setitem_view,
                           view_offset, view_strides)
from .context import (accumulator, adjoint, aux, broadcast_map, first_write_lane,
                      has_adjoint, lane_block, live, shape_of, size_of, strided_map, value)

PICKED_OUTSIDE = ("a take at computed positions met one outside its array (numpy raises "
                  "IndexError there; on a GPU the element is nan)")


@register_jitable
def picked(position, m):
    """The offset into an array of m elements that a position value computed by the
    program names (numpy's: a negative one from the end), or -1 outside ``-m .. m - 1``
    or not a whole number (never silently a neighbour: the callers raise
    PICKED_OUTSIDE)."""
    if not (-m <= position < m):
        return -1
    k = np.int64(position)
    if k != position:
        return -1
    return k + m if k < 0 else k


@register_jitable
def search(values, first, m, step, v):
    """How many of the m non-decreasing ``values[first + step * i]`` lie below v (numpy's
    searchsorted, side "left": a nan goes last), by bisection."""
    lo, hi = 0, m
    while lo < hi:
        mid = (lo + hi) // 2
        if values[first + step * mid] < v or (v != v and values[first + step * mid] ==
                                              values[first + step * mid]):
            lo = mid + 1
        else:
            hi = mid
    return np.float64(lo)


@register_jitable
def reshape_vjp(ctx, i, lanes=1):
    a = ctx.rows[i, A]
    if has_adjoint(ctx, a):
        ctx.lane[0] = 0
        g, ga, stride = lane_block(ctx, i, lanes), lane_block(ctx, a, lanes), ctx.lane[1]
        n = size_of(ctx, i)
        for lane in range(lanes):
            if not live(ctx, i, lane):
                continue
            base = lane * stride
            if first_write_lane(ctx, a, lane):
                for k in range(n):
                    ga[base + k] = g[base + k]
            else:
                for k in range(n):
                    ga[base + k] += g[base + k]


@register_jitable
def pattern_map(ctx, i, shape):
    """The flat indices of a STRIDED or SCATTER row's view of ``shape``."""
    p = aux(ctx, i)
    return strided_map(shape, view_offset(ctx.ipool, p), view_strides(ctx.ipool, p, shape.size))


# A gather and a scatter-add are each other's transposes. Both come in two forms, by a
# strided pattern (STRIDED / SCATTER) and by an index array (TAKE / PUT_ADD); the four
# VJPs differ only in where the index map comes from. The map depends on the row only,
# so all K lanes of a sweep share one.

@register_jitable
def _progression(m):
    """(first, step) when the index map is first + step * k with step != 0 (x[::2],
    x[1:], a column), else (0, 0)."""
    if m.size < 2:
        return 0, 0
    first, step = int(m[0]), int(m[1]) - int(m[0])
    if step == 0:
        return 0, 0
    for k in range(2, m.size):
        if int(m[k]) != first + step * k:
            return 0, 0
    return first, step


@register_jitable
def _scatter_add_into(ctx, i, a, m, lanes):
    """Operand a's adjoint += row i's adjoint scattered to positions m (repeats add)."""
    ctx.lane[0] = 0
    g, ga, stride = lane_block(ctx, i, lanes), lane_block(ctx, a, lanes), ctx.lane[1]
    n, na = size_of(ctx, i), size_of(ctx, a)
    first, step = _progression(m)
    for lane in range(lanes):          # per-lane slices: the loops see contiguous arrays
        if not live(ctx, i, lane):
            continue
        fresh = first_write_lane(ctx, a, lane)
        src = g[lane * stride:lane * stride + n]
        dst = ga[lane * stride:lane * stride + na]
        if fresh:
            dst[:] = 0.0
        if step != 0:                  # an arithmetic progression: no index loads
            for k in range(n):
                dst[first + step * k] += src[k]
        else:
            for k in range(n):
                dst[int(m[k])] += src[k]


@register_jitable
def _gather_into(ctx, i, a, m, lanes):
    """Operand a's adjoint (=, or += if written) row i's adjoint at positions m."""
    ctx.lane[0] = 0
    g, ga, stride = lane_block(ctx, i, lanes), lane_block(ctx, a, lanes), ctx.lane[1]
    n, na = size_of(ctx, i), size_of(ctx, a)
    first, step = _progression(m)
    for lane in range(lanes):
        if not live(ctx, i, lane):
            continue
        fresh = first_write_lane(ctx, a, lane)
        src = g[lane * stride:lane * stride + n]
        dst = ga[lane * stride:lane * stride + na]
        if fresh:                      # a lane that gathers only zeros stays unwritten
            nonzero = 0
            for k in range(na):
                dst[k] = src[first + step * k] if step != 0 else src[int(m[k])]
                nonzero += dst[k] != 0.0
            ctx.touched[lane, a] = nonzero > 0
        elif step != 0:
            for k in range(na):
                dst[k] += src[first + step * k]
        else:
            for k in range(na):
                dst[k] += src[int(m[k])]


@register_jitable
def strided_vjp(ctx, i, lanes=1):
    """z = gather(x, pattern): the VJP scatter-adds along the pattern."""
    a = ctx.rows[i, A]
    if has_adjoint(ctx, a):
        _scatter_add_into(ctx, i, a, pattern_map(ctx, i, shape_of(ctx, i)), lanes)


@register_jitable
def scatter_vjp(ctx, i, lanes=1):
    """z = scatter-add of x into zeros at the pattern (x has the pattern's shape): the
    VJP gathers."""
    a = ctx.rows[i, A]
    if has_adjoint(ctx, a):
        _gather_into(ctx, i, a, pattern_map(ctx, i, shape_of(ctx, a)), lanes)


@register_jitable
def take_vjp(ctx, i, lanes=1):
    """z = x.flat[idx], idx held by operand b: the VJP scatter-adds back."""
    a = ctx.rows[i, A]
    if has_adjoint(ctx, a):
        _scatter_add_into(ctx, i, a, value(ctx, ctx.rows[i, B]), lanes)


@register_jitable
def put_add_vjp(ctx, i, lanes=1):
    """z = zeros with x added at idx (operand b): the VJP gathers."""
    a = ctx.rows[i, A]
    if has_adjoint(ctx, a):
        _gather_into(ctx, i, a, value(ctx, ctx.rows[i, B]), lanes)


@register_jitable
def indexing_vjp(ctx, i, lanes):
    """Every lane of an indexing row: gathers and scatters share one index map across
    lanes; index assignment and concatenation go lane by lane. Returns False for an
    opcode it does not know."""
    op = ctx.rows[i, OP]
    if op == RESHAPE:
        reshape_vjp(ctx, i, lanes)
    elif op == STRIDED:
        strided_vjp(ctx, i, lanes)
    elif op == SCATTER:
        scatter_vjp(ctx, i, lanes)
    elif op == TAKE:
        take_vjp(ctx, i, lanes)
    elif op == PUT_ADD:
        put_add_vjp(ctx, i, lanes)
    elif op == SEARCHSORTED:
        pass                                    # (piecewise constant: no gradient)
    elif op == SETITEM or op == CONCAT:
        for k in range(lanes):
            if not live(ctx, i, k):
                continue
            ctx.lane[0] = k
            if op == SETITEM:
                setitem_vjp(ctx, i)
            else:
                concat_vjp(ctx, i)
    else:
        return False
    return True


@register_jitable
def _setitem_region(ctx, i):
    """SETITEM's region shape and its flat positions in the base."""
    region = setitem_region(ctx.ipool, aux(ctx, i))
    offset, strides = setitem_view(ctx.ipool, aux(ctx, i))
    return region, strided_map(region, offset, strides)


@register_jitable
def indexing_forward(ctx, i):
    """Recompute an indexing row's value (a compiled replay of the tape). Each op is the
    transpose of another's VJP: a gather for STRIDED and TAKE, a scatter-add for
    SCATTER and PUT_ADD. False for an opcode it does not know."""
    op, a = ctx.rows[i, OP], ctx.rows[i, A]
    z = value(ctx, i)
    if op == CONCAT:
        outer, width, count = concat_dims(ctx.ipool, aux(ctx, i))
        for t in range(count):
            r, col, band = concat_part(ctx.ipool, aux(ctx, i), t)
            v = value(ctx, r)
            for o in range(outer):
                for c in range(band):
                    z[o * width + col + c] = v[o * band + c]
        return True
    x = value(ctx, a)
    if op == SEARCHSORTED:
        v = value(ctx, ctx.rows[i, B])
        for k in range(z.size):
            z[k] = search(x, 0, x.size, 1, v[k])
        return True
    if op == RESHAPE:
        for k in range(z.size):                 # (the same memory when a view was kept)
            z[k] = x[k]
    elif op == STRIDED:
        m = pattern_map(ctx, i, shape_of(ctx, i))
        for k in range(z.size):
            z[k] = x[m[k]]
    elif op == SCATTER:
        m = pattern_map(ctx, i, shape_of(ctx, a))
        z[:] = 0.0
        for k in range(x.size):
            z[m[k]] += x[k]
    elif op == TAKE:                   # (positions the program computes are checked here,
        idx = value(ctx, ctx.rows[i, B])   # before the VJP reads them: numba wraps a
        for k in range(z.size):            # negative one as numpy does)
            j = picked(idx[k], x.size)
            if j < 0:
                raise IndexError(PICKED_OUTSIDE)
            z[k] = x[j]
    elif op == PUT_ADD:
        idx = value(ctx, ctx.rows[i, B])
        z[:] = 0.0
        for k in range(x.size):
            j = picked(idx[k], z.size)
            if j < 0:
                raise IndexError(PICKED_OUTSIDE)
            z[j] += x[k]
    elif op == SETITEM:
        v = value(ctx, ctx.rows[i, B])
        region, rmap = _setitem_region(ctx, i)
        vmap = broadcast_map(shape_of(ctx, ctx.rows[i, B]), region)
        for k in range(z.size):
            z[k] = x[k]
        for k in range(rmap.size):
            z[rmap[k]] = v[vmap[k]]
    else:
        return False
    return True


@register_jitable
def setitem_vjp(ctx, i):
    """z = base with region := v."""
    a, b = ctx.rows[i, A], ctx.rows[i, B]
    region, rmap = _setitem_region(ctx, i)
    g = adjoint(ctx, i)
    if has_adjoint(ctx, a):
        keep = np.ones(g.size, np.bool_)
        for k in range(rmap.size):
            keep[rmap[k]] = False
        ga = accumulator(ctx, a)
        for k in range(g.size):
            if keep[k]:
                ga[k] += g[k]
    if has_adjoint(ctx, b):
        vmap = broadcast_map(shape_of(ctx, b), region)
        gb = accumulator(ctx, b)
        for k in range(rmap.size):
            gb[vmap[k]] += g[rmap[k]]


@register_jitable
def concat_vjp(ctx, i):
    """Each operand's band of columns of the output's gradient."""
    outer, width, count = concat_dims(ctx.ipool, aux(ctx, i))
    g = adjoint(ctx, i)
    for t in range(count):
        r, col, band = concat_part(ctx.ipool, aux(ctx, i), t)
        if not has_adjoint(ctx, r):
            continue
        gr = accumulator(ctx, r)
        for o in range(outer):
            for c in range(band):
                gr[o * band + c] += g[o * width + col + c]
