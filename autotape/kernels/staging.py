"""Small compiled helpers the tape calls while recording: an array's address, and the
staged rows assembled into the columns of the tape format."""
import numpy as np

from ..tape_format import A, AUX, B, NO_ROW, OP, ROW_WIDTH, SHAPE, VLOC, array_location
from .cache import cached_njit


@cached_njit()
def address_of(a):
    """Data address of a float64 array (a numba call is 5x cheaper than ``a.ctypes``)."""
    return a.ctypes.data


@cached_njit()
def bits_equal(a, b):
    """Whether two C-contiguous float64 arrays of one shape hold the same bits (0.0
    and -0.0 differ; a NaN equals only a NaN of the same payload): a constant's check
    at every compiled call, where numpy's calls would cost more than the comparison."""
    if a.shape != b.shape:
        return False
    x, y = a.reshape(a.size).view(np.int64), b.reshape(b.size).view(np.int64)
    for i in range(x.size):
        if x[i] != y[i]:
            return False
    return True


@cached_njit()
def decode_rows(staged, extra, shape_size, first_row, arena):
    """Assemble the staged rows ``first_row``... (see tape.py; ``staged`` is (opcode,
    operand a, operand b) per row) into the int64 columns of the tape format. ``extra``
    is flat (row, shape id, aux, array index) entries in row order, from the first one
    not used yet; ``arena``: the 0-d values before these rows. Returns the columns, the
    0-d values after them, the total size of these rows' values, and how many ints of
    ``extra`` they used (entries past the staged rows: a tape still growing, read by
    another thread, are left for the next call)."""
    n = staged.shape[0]
    rows = np.empty((n, ROW_WIDTH), np.int64)
    big = np.full(n, -1, np.int64)
    for i in range(n):
        rows[i, OP] = staged[i, 0]
        rows[i, A] = staged[i, 1]
        rows[i, B] = staged[i, 2]
        rows[i, SHAPE] = 0
        rows[i, AUX] = NO_ROW
    used = 0
    for e in range(0, extra.size - extra.size % 4, 4):
        r = extra[e] - first_row
        if r >= n:
            break
        rows[r, SHAPE] = extra[e + 1]
        rows[r, AUX] = extra[e + 2]
        big[r] = extra[e + 3]
        used = e + 4
    total = 0
    for i in range(n):
        if big[i] >= 0:
            rows[i, VLOC] = array_location(big[i])
        else:
            rows[i, VLOC] = arena
            arena += 1
        total += shape_size[rows[i, SHAPE]]
    return rows, arena, total, used
