"""The compiled forward replay: a recorded tape re-evaluated at new input values.

The rows are a program in topological order; each row's family kernel recomputes its
value from its operands' values, in place in the tape's own buffers (the op table's
``*_forward`` kernels, beside each family's VJPs). numpy.linalg rows need LAPACK, which
compiled code does not call here: the replay stops at such a row and hands it back, and
the caller (compile.py) computes it with numpy before resuming.
"""
import numpy as np

from ..ops.codes import (BINARY_LAST, LAYOUT_FIRST, LAYOUT_LAST, MATMUL, REDUCE_FIRST,
                         REDUCE_LAST, SOURCE_LAST, WHERE)
from ..ops.elementwise import elementwise_forward, where_forward
from ..ops.linalg import matmul_forward
from ..ops.reduce import reduce_forward
from ..ops.shape import layout_forward
from .cache import cached_njit
from .layout import OP, sweep_context


@cached_njit()
def forward_replay(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                   arena_addr, big_addr, start, stop, dgemm):
    """Recompute rows ``start .. stop - 1`` (sources keep their values). Returns the
    first row left to the caller, or ``stop`` when all are done."""
    no_rows = np.zeros(1, np.int64)
    touched = np.zeros((1, 1), np.bool_)
    lane = np.zeros(2, np.int64)
    ctx = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                        arena_addr, big_addr, 0, no_rows, no_rows, touched, lane, dgemm)
    for i in range(start, stop):
        op = rows[i, OP]
        if op <= SOURCE_LAST:
            continue
        if op <= BINARY_LAST:
            elementwise_forward(ctx, i)
        elif op == WHERE:
            where_forward(ctx, i)
        elif REDUCE_FIRST <= op <= REDUCE_LAST:
            reduce_forward(ctx, i)
        elif LAYOUT_FIRST <= op <= LAYOUT_LAST:
            layout_forward(ctx, i)
        elif op == MATMUL:
            matmul_forward(ctx, i)
        else:
            return i
    lane[0] = touched[0, 0]                  # the owners of ctx's arrays live to here
    return stop
