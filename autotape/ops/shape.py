"""Layout ops: reshape, strided views, index assignment, concatenation.

A strided view (basic indexing, transpose, broadcast_to) is described by an offset and
one stride per output axis, in elements of the operand's flat C-order data; its VJP
scatter-adds the gradient back along the same pattern. Index assignment writes a
strided region of a copy of the base; concatenation places each operand in a band of
columns of the output viewed as (outer, width).
"""
import numpy as np
from numba.extending import register_jitable

from .codes import CONCAT, PUT_ADD, RESHAPE, SCATTER, SETITEM, STRIDED, TAKE
from ..kernels.layout import (A, B, OP, accumulator, adjoint, broadcast_map, first_write_lane,
                              has_adjoint, lane_block, live, param, shape_of, size_of,
                              strided_map, value)


def view_pattern(shape, index):
    """Offset and strides (in elements) of ``x[index]`` for a C-contiguous ``x`` of ``shape``.

    Computed by indexing a zero-size-backed array of the same shape and strides, so
    no data is touched.
    """
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape,
                                           _c_strides(shape, 1), writeable=False)
    view = base[index]
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return view.shape, offset, view.strides


def _c_strides(shape, itemsize):
    strides, s = [], itemsize
    for d in reversed(shape):
        strides.append(s)
        s *= max(d, 1)
    return tuple(reversed(strides))


def index_map(base_size, shape, offset, strides):
    """numpy: the flat index into the base of every element of a strided view."""
    base = np.arange(max(base_size, 1), dtype=np.int64)
    return np.lib.stride_tricks.as_strided(base[offset:], shape, [s * 8 for s in strides],
                                           writeable=False)


def transpose_pattern(shape, axes):
    c = _c_strides(shape, 1)
    return tuple(shape[a] for a in axes), 0, tuple(c[a] for a in axes)


def broadcast_pattern(shape, target):
    c = _c_strides(shape, 1)
    lead = len(target) - len(shape)
    strides = [0] * lead + [0 if shape[d] == 1 else c[d] for d in range(len(shape))]
    return tuple(target), 0, tuple(strides)


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
def _pattern(ctx, i, first, ndim):
    """Offset and strides stored at int parameters first, first+1 .. first+ndim."""
    offset = param(ctx, i, first)
    strides = np.empty(ndim, np.int64)
    for d in range(ndim):
        strides[d] = param(ctx, i, first + 1 + d)
    return offset, strides


@register_jitable
def _pattern_map(ctx, i, shape):
    """The flat indices of a row's strided pattern (params [offset, strides...])."""
    offset, strides = _pattern(ctx, i, 0, shape.size)
    return strided_map(shape, offset, strides)


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
        _scatter_add_into(ctx, i, a, _pattern_map(ctx, i, shape_of(ctx, i)), lanes)


@register_jitable
def scatter_vjp(ctx, i, lanes=1):
    """z = scatter-add of x into zeros at the pattern (x has the pattern's shape): the
    VJP gathers."""
    a = ctx.rows[i, A]
    if has_adjoint(ctx, a):
        _gather_into(ctx, i, a, _pattern_map(ctx, i, shape_of(ctx, a)), lanes)


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
def layout_vjp(ctx, i, lanes):
    """Every lane of a layout row: gathers and scatters share one index map across
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
    """SETITEM's region shape and its flat positions in the base. Params: [ndim,
    dims..., offset, strides...]."""
    ndim = param(ctx, i, 0)
    region = np.empty(ndim, np.int64)
    for d in range(ndim):
        region[d] = param(ctx, i, 1 + d)
    offset, strides = _pattern(ctx, i, 1 + ndim, ndim)
    rmap = strided_map(region, offset, strides)
    return region, rmap


@register_jitable
def layout_forward(ctx, i):
    """Recompute a layout row's value (a compiled replay of the tape). Each op is the
    transpose of another's VJP: a gather for STRIDED and TAKE, a scatter-add for
    SCATTER and PUT_ADD."""
    op, a = ctx.rows[i, OP], ctx.rows[i, A]
    z = value(ctx, i)
    if op == CONCAT:
        outer, width, count = param(ctx, i, 0), param(ctx, i, 1), param(ctx, i, 2)
        for t in range(count):
            v = value(ctx, param(ctx, i, 3 + 3 * t))
            col, band = param(ctx, i, 4 + 3 * t), param(ctx, i, 5 + 3 * t)
            for o in range(outer):
                for c in range(band):
                    z[o * width + col + c] = v[o * band + c]
        return
    x = value(ctx, a)
    if op == RESHAPE:
        for k in range(z.size):                 # (the same memory when a view was kept)
            z[k] = x[k]
    elif op == STRIDED:
        m = _pattern_map(ctx, i, shape_of(ctx, i))
        for k in range(z.size):
            z[k] = x[m[k]]
    elif op == SCATTER:
        m = _pattern_map(ctx, i, shape_of(ctx, a))
        z[:] = 0.0
        for k in range(x.size):
            z[m[k]] += x[k]
    elif op == TAKE:
        idx = value(ctx, ctx.rows[i, B])
        for k in range(z.size):
            z[k] = x[int(idx[k])]
    elif op == PUT_ADD:
        idx = value(ctx, ctx.rows[i, B])
        z[:] = 0.0
        for k in range(x.size):
            z[int(idx[k])] += x[k]
    elif op == SETITEM:
        v = value(ctx, ctx.rows[i, B])
        region, rmap = _setitem_region(ctx, i)
        vmap = broadcast_map(shape_of(ctx, ctx.rows[i, B]), region)
        for k in range(z.size):
            z[k] = x[k]
        for k in range(rmap.size):
            z[rmap[k]] = v[vmap[k]]


@register_jitable
def setitem_vjp(ctx, i):
    """z = base with region := v. Params: [ndim, dims..., offset, strides...]."""
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
    """Params: [outer, width, count, (row, column, band width) * count]."""
    outer, width, count = param(ctx, i, 0), param(ctx, i, 1), param(ctx, i, 2)
    g = adjoint(ctx, i)
    for t in range(count):
        r = param(ctx, i, 3 + 3 * t)
        if not has_adjoint(ctx, r):
            continue
        col, band = param(ctx, i, 4 + 3 * t), param(ctx, i, 5 + 3 * t)
        gr = accumulator(ctx, r)
        for o in range(outer):
            for c in range(band):
                gr[o * band + c] += g[o * width + col + c]


# ---- for create_graph=True (see elementwise.graph_vjps) --------------------------------

def _own_pattern(r):
    """STRIDED: (output shape, offset, strides) into the operand."""
    return r.shape, int(r.params[0]), tuple(int(s) for s in r.params[1:1 + len(r.shape)])


def _scatter_pattern(r):
    """SCATTER: (operand shape, offset, strides) into the output."""
    nd = len(r.x.shape)
    return r.x.shape, int(r.params[0]), tuple(int(s) for s in r.params[1:1 + nd])


def _region(r):
    """SETITEM: (region shape, offset, strides) into the base."""
    nd = int(r.params[0])
    region = tuple(int(d) for d in r.params[1:1 + nd])
    return region, int(r.params[1 + nd]), tuple(int(s) for s in r.params[2 + nd:2 + 2 * nd])


def _outside_region(r):
    keep = np.ones(int(np.prod(r.shape, dtype=np.int64)))
    keep[index_map(keep.size, *_region(r)).reshape(-1)] = 0.0
    return keep.reshape(r.shape)


def _flat_index(r):
    """TAKE / PUT_ADD: the index operand as ints."""
    return r.y.numpy().astype(np.int64)


def _band(at, g, r, k):
    outer, width = int(r.params[0]), int(r.params[1])
    col, band = int(r.params[4 + 3 * k]), int(r.params[5 + 3 * k])
    return at.gather(g, ((outer, band), col, (width, 1))).reshape(r.value(k).shape)


graph_vjps = {
    RESHAPE: lambda at, g, r, k: g.reshape(r.x.shape),
    STRIDED: lambda at, g, r, k: at.scatter(g, _own_pattern(r), r.x.shape),
    SCATTER: lambda at, g, r, k: at.gather(g, _scatter_pattern(r)),
    SETITEM: lambda at, g, r, k: (g * _outside_region(r) if k == 0
                                  else at.gather(g, _region(r))),
    CONCAT: _band,
    TAKE: lambda at, g, r, k: at.put_add(g, _flat_index(r), r.x.shape),
    PUT_ADD: lambda at, g, r, k: at.take_flat(g, _flat_index(r)),
}
