"""The sweep context: how compiled kernels see a tape, and the helpers every kernel uses.

Rows follow the tape format (tape_format.py). Adjoints of the rows a sweep reaches
live in one flat buffer at ``adj_off[row]`` (-1: the row carries no gradient). That
buffer is not zeroed up front (on large arrays zeroing is a whole extra memory pass):
``touched[lane, row]`` says whether a row's adjoint holds data yet; the first
contribution writes it, later ones add to it, and a lane never written is zero, so
kernels pass nothing on from it (``live``).

A sweep with K lanes keeps K copies of the adjoints, lane k at ``k * stride``.
``lane = [k, stride]`` names the lane being swept; it is a mutable array (not a field
rebuilt per lane) because handing a kernel a new context costs more than small kernels.
With one lane, a row may instead have a buffer of its own, at ``row_addr[row]`` (0: none):
the engine gives large leaves one, so their gradients are written where the caller
receives them, not copied out of the shared buffer.
"""
from collections import namedtuple

import numpy as np
from numba import carray, types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable

from ..tape_format import AUX, SHAPE, VLOC, array_index


Sweep = namedtuple("Sweep", [
    "rows", "ipool", "shape_ndim", "shape_start", "shape_dims", "shape_size",
    "arena_addr", "big_addr", "adj_addr", "adj_off", "row_addr", "touched", "lane", "dgemm"])


@intrinsic
def f64_pointer(typingctx, address):
    """Reinterpret an integer address as ``float64*`` (the arrays stay owned by Python)."""
    if not isinstance(address, types.Integer):
        return None
    sig = types.CPointer(types.float64)(address)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return sig, codegen


@intrinsic
def borrowed(typingctx, arr):
    """The same array without its reference count (NULL meminfo): a context made of
    borrowed arrays passes into a kernel for free, where owned ones cost an atomic
    incref and decref each per call (~150 ns per call for a Sweep). The caller keeps
    the owner alive for as long as the borrowed view is used."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        out = context.make_array(signature.args[0])(context, builder, value=args[0])
        out.meminfo = cgutils.get_null_value(out.meminfo.type)
        out.parent = cgutils.get_null_value(out.parent.type)
        return out._getvalue()
    return arr(arr), codegen


@register_jitable
def sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
                  big_addr, adj_addr, adj_off, row_addr, touched, lane, dgemm):
    """A Sweep of borrowed arrays (see ``borrowed``)."""
    return Sweep(borrowed(rows), borrowed(ipool), borrowed(shape_ndim),
                 borrowed(shape_start), borrowed(shape_dims), borrowed(shape_size),
                 arena_addr, borrowed(big_addr), adj_addr, borrowed(adj_off),
                 borrowed(row_addr), borrowed(touched), borrowed(lane), dgemm)


@register_jitable
def size_of(ctx, r):
    return ctx.shape_size[ctx.rows[r, SHAPE]]


@register_jitable
def shape_of(ctx, r):
    s = ctx.rows[r, SHAPE]
    start = ctx.shape_start[s]
    return ctx.shape_dims[start:start + ctx.shape_ndim[s]]


@register_jitable
def value(ctx, r):
    """The row's value, flat, C order."""
    loc = ctx.rows[r, VLOC]
    if loc >= 0:
        return carray(f64_pointer(ctx.arena_addr + 8 * loc), size_of(ctx, r))
    return carray(f64_pointer(ctx.big_addr[array_index(loc)]), size_of(ctx, r))


@register_jitable
def value_address(ctx, r):
    loc = ctx.rows[r, VLOC]
    return ctx.arena_addr + 8 * loc if loc >= 0 else ctx.big_addr[array_index(loc)]


@register_jitable
def adjoint_address(ctx, r):
    if r < ctx.row_addr.size and ctx.row_addr[r] != 0:      # a buffer of its own
        return ctx.row_addr[r]
    return ctx.adj_addr + 8 * (ctx.lane[0] * ctx.lane[1] + ctx.adj_off[r])


@register_jitable
def has_adjoint(ctx, r):
    return ctx.adj_off[r] >= 0


@register_jitable
def adjoint(ctx, r):
    """The row's adjoint, flat, C order (a view into the sweep's adjoint buffer)."""
    return carray(f64_pointer(adjoint_address(ctx, r)), size_of(ctx, r))


@register_jitable
def lane_block(ctx, r, lanes):
    """Row r's adjoints in every lane, from lane ``ctx.lane[0]``: lane k's element e
    is at ``k * stride + e`` (stride = ``ctx.lane[1]``)."""
    return carray(f64_pointer(adjoint_address(ctx, r)),
                  (lanes - 1) * ctx.lane[1] + size_of(ctx, r))


@register_jitable
def first_write(ctx, r):
    """True if r's adjoint holds no data yet: the caller assigns it instead of adding.
    Marks it written, so only a kernel that covers every element may use this."""
    fresh = not ctx.touched[ctx.lane[0], r]
    ctx.touched[ctx.lane[0], r] = True
    return fresh


@register_jitable
def live(ctx, r, lane):
    """Whether row r's adjoint in ``lane`` holds data. A lane never written is zero
    there (a Jacobian's lanes often are: lane k starts as e_k), so kernels skip it."""
    return ctx.touched[lane, r]


@register_jitable
def first_write_lane(ctx, r, lane):
    """first_write for one lane of a kernel that takes all lanes."""
    fresh = not ctx.touched[lane, r]
    ctx.touched[lane, r] = True
    return fresh


@register_jitable
def dense_lanes(ctx, r, lanes):
    """Make every lane of row r's adjoint hold data (zeros where none was written), for
    kernels such as a GEMM that take all lanes as one matrix. True when no lane held any
    before (the caller may assign instead of adding)."""
    ctx.lane[0] = 0
    block, stride, n = lane_block(ctx, r, lanes), ctx.lane[1], size_of(ctx, r)
    fresh = True
    for k in range(lanes):
        fresh = fresh and not ctx.touched[k, r]
    for k in range(lanes):
        if not ctx.touched[k, r] and not fresh:
            block[k * stride:k * stride + n] = 0.0
        ctx.touched[k, r] = True
    return fresh


@register_jitable
def accumulator(ctx, r):
    """r's adjoint for kernels that add into part of it: zeroed the first time."""
    out = adjoint(ctx, r)
    if not ctx.touched[ctx.lane[0], r]:
        out[:] = 0.0
        ctx.touched[ctx.lane[0], r] = True
    return out


@register_jitable
def aux(ctx, r):
    """Where row r's parameters start in the int pool (decoded by tape_format)."""
    return ctx.rows[r, AUX]


@register_jitable
def strided_map(shape, offset, strides):
    """Flat source index of every element of a strided view of ``shape``, C order."""
    n = 1
    for d in range(shape.size):
        n *= shape[d]
    out = np.empty(n, np.int64)
    nd = shape.size
    idx = np.zeros(nd, np.int64)
    pos = offset
    for k in range(n):
        out[k] = pos
        d = nd - 1
        while d >= 0:
            idx[d] += 1
            pos += strides[d]
            if idx[d] < shape[d]:
                break
            pos -= strides[d] * shape[d]
            idx[d] = 0
            d -= 1
    return out


@register_jitable
def broadcast_map(small, big):
    """For each element of ``big`` (C order), the flat index of the element of
    ``small`` that numpy broadcasting reads there."""
    nb = big.size
    ns = small.size
    strides = np.zeros(nb, np.int64)
    s = 1
    for d in range(ns - 1, -1, -1):
        if small[d] != 1:
            strides[d + nb - ns] = s
        s *= small[d]
    return strided_map(big, 0, strides)


@register_jitable
def trailing(ctx, r, out):
    """Whether row r's shape, leading 1s dropped, is the last axes of row out's shape:
    then broadcasting repeats it whole, and element k of out reads element k % size."""
    small, big = shape_of(ctx, r), shape_of(ctx, out)
    lead = 0
    while lead < small.size and small[lead] == 1:
        lead += 1
    m = small.size - lead
    if m > big.size:
        return False
    for d in range(m):
        if small[lead + d] != big[big.size - m + d]:
            return False
    return True


@register_jitable
def operand_map(ctx, r, out):
    """Index map from output row ``out`` to operand row ``r`` under broadcasting."""
    return broadcast_map(shape_of(ctx, r), shape_of(ctx, out))
