"""The tape: a flat, struct-of-arrays record of differentiable ops.

One row per recorded op (see kernels/layout.py for the columns). 0-d values live in a
float64 arena; array values stay in their own float64 buffers, which the tape keeps
alive and hands to compiled code by address. Every shape used is interned once in a
shape table.

Lifetime. A result Tensor holds its tape; a tape holds the leaves it snapshotted and
the older tapes it imported values from, never the results recorded on it, so a tape
is freed as soon as no result on it is alive. Recording goes to the open tape. A tape
closes when a sweep releases it (a backward without retain_graph) or when it is full;
later ops start a new tape, and an operand that lives on an older tape enters the new
one as an IMPORT row. The engine sweeps tapes newest first and passes each IMPORT
row's adjoint to the row it came from, so a graph may span any number of tapes.
"""
import itertools
import weakref
from array import array

import numpy as np

from .kernels.layout import ROW_WIDTH
from .kernels.runtime import address_of
from .ops.codes import CONST, IMPORT, LEAF

MAX_ROWS = 1 << 20               # rows before a tape closes and a new one starts
MAX_ARRAY_BYTES = 1 << 29        # bytes of array values before the same

_tape_ids = itertools.count()


class Tape:
    __slots__ = ("id", "rows", "ipool", "arena", "arrays", "big_addr", "shape_ids",
                 "shape_ndim", "shape_start", "shape_dims", "shape_size", "released",
                 "leaves", "retained", "imports", "import_rows", "consts", "open",
                 "nrows", "array_bytes", "__weakref__")

    def __init__(self):
        self.id = next(_tape_ids)
        self.rows = array("q")           # ROW_WIDTH int64 per row
        self.ipool = array("q")          # int parameters and extra operands
        self.arena = array("d")          # 0-d values
        self.arrays = []                 # array values, flat float64, C order
        self.big_addr = array("q")       # their addresses
        self.shape_ids = {}
        self.shape_ndim = array("q")
        self.shape_start = array("q")
        self.shape_dims = array("q")
        self.shape_size = array("q")
        self.released = bytearray()      # 1 where a sweep without retain_graph passed
        self.leaves = {}                 # LEAF row -> leaf Tensor
        self.retained = {}               # row -> weakref to a retain_grad() Tensor
        self.imports = {}                # IMPORT row -> (older tape, row there)
        self.import_rows = {}            # (older tape id, row there) -> IMPORT row
        self.consts = {}                 # Python number -> CONST row
        self.open = True
        self.nrows = 0
        self.array_bytes = 0
        self.shape_id(())

    def __repr__(self):
        return f"<Tape {self.id}: {self.nrows} rows{'' if self.open else ', closed'}>"

    def shape_id(self, shape):
        sid = self.shape_ids.get(shape)
        if sid is None:
            sid = self.shape_ids[shape] = len(self.shape_size)
            self.shape_ndim.append(len(shape))
            self.shape_start.append(len(self.shape_dims))
            self.shape_dims.extend(shape)
            self.shape_size.append(int(np.prod(shape, dtype=np.int64)))
        return sid

    def push(self, op, a, b, shape, aux, value):
        """Append a row; ``value`` is a float (0-d) or a flat C-order float64 array."""
        row = self.nrows
        if type(value) is float:
            loc = len(self.arena)
            self.arena.append(value)
        else:
            loc = -1 - len(self.arrays)
            self.arrays.append(value)
            self.big_addr.append(address_of(value))
            self.array_bytes += value.nbytes
            if self.array_bytes > MAX_ARRAY_BYTES:
                self.open = False
        sid = self.shape_ids.get(shape)
        if sid is None:
            sid = self.shape_id(shape)
        self.rows.extend((op, a, b, sid, aux, loc))
        self.nrows = row + 1
        if row + 1 >= MAX_ROWS:
            self.open = False
        return row

    def params(self, values):
        """Store int parameters; returns the aux index of the first."""
        start = len(self.ipool)
        self.ipool.extend(values)
        return start

    # -- rows that bring values onto the tape ---------------------------------------------

    def leaf(self, t, value):
        row = self.push(LEAF, -1, -1, t._shape, -1, value)
        self.leaves[row] = t
        return row

    def const(self, value, shape):
        if type(value) is float and value:         # 0.0 and -0.0 must stay distinct
            row = self.consts.get(value)
            if row is None:
                row = self.consts[value] = self.push(CONST, -1, -1, (), -1, value)
            return row
        return self.push(CONST, -1, -1, shape, -1, value)

    def import_row(self, t, value):
        key = (t._tape.id, t._row)
        row = self.import_rows.get(key)
        if row is None:
            row = self.push(IMPORT, -1, -1, t._shape, -1, value)
            self.imports[row] = (t._tape, t._row)
            self.import_rows[key] = row
        return row

    # -- views for compiled code (drop them before the next push) -------------------------

    def columns(self):
        n = self.nrows
        if len(self.released) < n:
            self.released.extend(bytes(n - len(self.released)))
        i64 = np.int64
        return (np.frombuffer(self.rows, i64).reshape(n, ROW_WIDTH),
                np.frombuffer(self.ipool, i64) if len(self.ipool) else np.zeros(1, i64),
                np.frombuffer(self.shape_ndim, i64), np.frombuffer(self.shape_start, i64),
                np.frombuffer(self.shape_dims, i64) if len(self.shape_dims) else np.zeros(1, i64),
                np.frombuffer(self.shape_size, i64),
                self.arena.buffer_info()[0],
                np.frombuffer(self.big_addr, i64) if len(self.big_addr) else np.zeros(1, i64),
                np.frombuffer(self.released, np.uint8))

    def row_value(self, row, shape):
        """A row's value as a float64 array of ``shape`` (a copy for 0-d values)."""
        loc = self.rows[row * ROW_WIDTH + 5]
        if loc >= 0:
            return np.array(self.arena[loc], np.float64)
        return self.arrays[-loc - 1].reshape(shape)


class _Current:
    """The open tape that new recordings go to (process-wide, held weakly)."""
    ref = None


def open_tape(*tapes):
    """The tape to record on, given the tapes the operands live on (None for leaves).

    The current open tape, unless an operand lives on a newer one (then it starts a
    new tape, so IMPORT rows always point to older tapes)."""
    current = _Current.ref() if _Current.ref is not None else None
    if current is None or not current.open or any(
            t is not None and t.id > current.id for t in tapes):
        current = Tape()
        _Current.ref = weakref.ref(current)
    return current
