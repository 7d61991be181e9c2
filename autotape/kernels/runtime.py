"""Small compiled helpers the Python side calls while recording."""
import numpy as np

from .cache import cached_njit
from .layout import ROW_WIDTH


@cached_njit()
def address_of(a):
    """Data address of a float64 array (a numba call is 5x cheaper than ``a.ctypes``)."""
    return a.ctypes.data


@cached_njit()
def decode_rows(codes, opa, opb, extra, shape_size, shape_ndim):
    """Assemble staged rows (see tape.py) into the sweep's int64 columns; returns the
    columns, where each shape's dims start in the shape table, and the total size of
    all rows' values. ``extra`` is flat: (row, shape id, aux, array index) per entry."""
    n = codes.size
    rows = np.empty((n, ROW_WIDTH), np.int64)
    big = np.full(n, -1, np.int64)
    for i in range(n):
        rows[i, 0] = codes[i]
        rows[i, 1] = opa[i]
        rows[i, 2] = opb[i]
        rows[i, 3] = 0
        rows[i, 4] = -1
    for e in range(0, extra.size, 4):
        r = extra[e]
        rows[r, 3] = extra[e + 1]
        rows[r, 4] = extra[e + 2]
        big[r] = extra[e + 3]
    arena = 0
    total = 0
    for i in range(n):
        if big[i] >= 0:
            rows[i, 5] = -1 - big[i]
        else:
            rows[i, 5] = arena
            arena += 1
        total += shape_size[rows[i, 3]]
    start = np.zeros(shape_ndim.size, np.int64)
    for s in range(1, shape_ndim.size):
        start[s] = start[s - 1] + shape_ndim[s - 1]
    return rows, start, total
