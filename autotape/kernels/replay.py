"""The compiled forward replay: a recorded tape re-evaluated at new input values.

The rows are a program in topological order; each row's family kernel recomputes its
value from its operands' values, in place in the tape's own buffers (the op table's
``*_forward`` kernels, beside each family's VJPs). numpy.linalg rows need LAPACK, which
compiled code does not call here: the replay stops at such a row and hands it back, and
the caller (executor.py) computes it with numpy before resuming.
"""
import numpy as np

from ..opcodes import (BINARY_LAST, INDEX_FIRST, INDEX_LAST, MATMUL, MEAN, REDUCE_FIRST,
                       REDUCE_LAST, SOURCE_LAST, SUM, WHERE)
from ..tape_format import A, OP, SHAPE
from .cache import cached_njit
from .context import size_of, sweep_context, value
from .elementwise import elementwise_forward, where_forward
from .indexing import indexing_forward
from .linalg import matmul_forward
from .reduce import reduce_forward
from .sweep import SPLIT_STATE, reverse_sweep


@cached_njit()
def forward_replay(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                   arena_addr, big_addr, in_rows, in_vals, start, stop, dgemm, python_min):
    """Give the rows ``in_rows`` the values ``in_vals`` (one after another), then
    recompute rows ``start .. stop - 1`` (other sources keep their values). Returns the
    first row left to the caller, or ``stop`` when all are done: numpy.linalg rows,
    and (``python_min`` > 0) elementwise rows and sums or means of at least that many
    elements, which the eager forward's functions compute faster, on threads, and with
    numpy's values (ops/elementwise.py, ops/reduce.py)."""
    no_rows = np.zeros(1, np.int64)
    touched = np.zeros((1, 1), np.bool_)
    lane = np.zeros(2, np.int64)
    ctx = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                        arena_addr, big_addr, 0, no_rows, no_rows, touched, lane, dgemm)
    pos = 0
    for j in range(in_rows.size):
        v = value(ctx, in_rows[j])
        for e in range(v.size):
            v[e] = in_vals[pos + e]
        pos += v.size
    for i in range(start, stop):
        op = rows[i, OP]
        if op <= SOURCE_LAST:
            continue
        if op <= BINARY_LAST:
            if python_min > 0 and size_of(ctx, i) >= python_min:
                return i
            elementwise_forward(ctx, i)
        elif op == WHERE:
            where_forward(ctx, i)
        elif REDUCE_FIRST <= op <= REDUCE_LAST:
            if python_min > 0 and (op == SUM or op == MEAN) and \
                    size_of(ctx, rows[i, A]) >= python_min:
                return i                        # numpy's pairwise sum, as recorded
            if not reduce_forward(ctx, i):
                return i
        elif INDEX_FIRST <= op <= INDEX_LAST:
            if not indexing_forward(ctx, i):
                return i
        elif op == MATMUL:
            matmul_forward(ctx, i)
        else:
            return i
    lane[0] = touched[0, 0]                  # the owners of ctx's arrays live to here
    return stop


@cached_njit()
def replay_and_sweep(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                     arena_addr, arena_size, big_addr, released, in_rows, in_vals,
                     seed_rows, seed_vals, seed_off, lanes, adj, out, dgemm):
    """One call for a compiled function's derivatives: ``forward_replay`` of the whole
    tape at the inputs, then ``reverse_sweep`` with the seeds; the adjoints of the input
    rows land in ``out[lane, columns of that input]``. Returns the sweep's (status,
    stride or unknown row), or (-1, row) when a row needs Python (numpy.linalg)."""
    n = rows.shape[0]
    # (zero and retain are not the literals 0 and True: numba would compile a replay and
    # a sweep specialised for those, ~12 s more of cold compile, where these calls take
    # the ones executor.py's and compile.py's calls compile)
    zero, retain = n - n, n >= 0
    stop = forward_replay(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                          arena_addr, big_addr, in_rows, in_vals, zero, n, dgemm, zero)
    if stop != n:
        return -1, stop
    state = np.full(SPLIT_STATE, -1, np.int64)
    status, stride, adj_off, _ = reverse_sweep(
        rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
        arena_size, big_addr, released, retain, seed_rows, seed_vals, seed_off, lanes, adj,
        in_rows[:0], dgemm, in_rows, in_rows[:0], np.empty((0, 0), np.bool_), state, zero,
        np.zeros(0, np.uint8))
    col = 0
    for j in range(in_rows.size):
        r = in_rows[j]
        size = shape_size[rows[r, SHAPE]]
        for k in range(lanes):
            for e in range(size):
                out[k, col + e] = adj[k * stride + adj_off[r] + e] if adj_off[r] >= 0 else 0.0
        col += size
    return status, stride
