"""The tape: a flat, struct-of-arrays record of differentiable ops.

One row per recorded op. While recording, a row is three list entries (opcode and two
operand rows) plus, for rows with a shape, parameters or an array value, an entry in
``extra``; ``columns()`` assembles the int64 columns of the tape format
(tape_format.py) that compiled code reads, and the row accessors (``op``, ``operands``,
``params``, ``shape``, ``value``, ``write``) read a row for the Python side. 0-d values
live in a float64 arena; array values stay in their own float64 buffers, which the
tape keeps alive and hands to compiled code by address. Every shape used is interned
once in a shape table.

Threads. Each thread records on its own open tape (``Tape.owner`` is its
ThreadState): only the owner appends, and an op in another thread on a tensor of that
tape imports it into its own tape. Another thread may still sweep or read a tape
whose owner keeps appending (a graph shared between threads), so the structures it
reads only grow, the staged rows are published as one tuple (``rows_log``) read first,
and a sweep from another thread gets a private copy of the arena (``kernel_args``):
compiled code never reads a buffer that an append may move.

Lifetime. A result Tensor holds its tape; a tape holds the leaves it snapshotted and
the older tapes it imported values from, never the results recorded on it, so a tape
is freed as soon as no result on it is alive. Recording goes to the open tape. A tape
closes when a sweep releases it (a backward without retain_graph); once it is full
(MAX_ROWS), the next op that starts from leaves opens a new one. Later ops use the new
tape, and an operand that lives on an older tape enters it as an IMPORT row. The engine
sweeps tapes newest first and passes each IMPORT row's adjoint to the row it came from,
so a graph may span any number of tapes.
"""
import contextlib
import itertools
import math
import threading
import weakref
from array import array
from collections import namedtuple

import numpy as np

from .thread_state import here
from .kernels import background
from .kernels.cache import on_disk
from .kernels.staging import address_of, bits_equal, decode_rows
from .kernels.sweep import FAMILY_OF, families_of
from .opcodes import BINARY_LAST, CONST, IMPORT, LEAF, UNARY_FIRST
from .tape_format import (A, AUX, B, NO_ROW, OP, ROW_WIDTH, SHAPE, VLOC, array_index,
                          array_location, operand_list)
from .tuning import (BYTES_COMPARE_MAX, FLUSH_ROWS, HARD_ROWS_FACTOR, MAX_ARRAY_BYTES,
                     MAX_ROWS, ROWS_OF_THE_LARGEST)


_tape_ids = itertools.count()


# A row is staged as three list entries: opcode, operand a, operand b (-1: none), one
# ``extend`` per row (ints that already exist cost less than one packed int). Every
# FLUSH_ROWS rows the staged list moves into an int64 chunk, so a sweep converts at
# most that many. Rows with a shape, parameters or an array value also get an entry
# in ``extra``.


class Tape:
    __slots__ = ("id", "staged", "rows_log", "flushed", "flush_at", "extra", "arena", "arrays", "big_addr", "shape_ids", "shapes",
                 "shape_ndim", "shape_dims", "shape_size", "released", "leaves", "frozen",
                 "retained", "imports", "import_rows", "consts", "owner", "nrows",
                 "array_bytes", "array_limit", "ipool", "hooks", "customs", "replaced", "resolved", "stale", "_columns", "_kernel_args",
                 "_decoded", "_decoding", "whole", "__weakref__")

    def __init__(self, owner=None):
        self.id = next(_tape_ids)
        self.whole = False               # a compiled program's recording: one tape of
                                         # any size (nothing is freed early)
        self.staged = []                 # staged rows: opcode, operand a, operand b, ...
        self.rows_log = ((), self.staged)   # (flushed (n, 3) int64 chunks, staged list)
        self.flushed = 0
        self.flush_at = self._next_flush()   # row at which to flush, check size
        self.extra = []                  # row, shape id, aux, array index: 4 ints per row
                                         # that needs them
        self.ipool = []                  # int parameters and extra operands
        self.arena = array("d")          # 0-d values
        self.arrays = []                 # array values, flat float64, C order
        self.big_addr = []               # their addresses
        self.shape_ids = {(): 0}
        self.shapes = [()]               # shape id -> shape tuple
        self.shape_ndim = [0]
        self.shape_dims = []
        self.shape_size = [1]
        self.released = np.zeros(0, np.uint8)   # 1 where a sweep without retain passed
        self.leaves = {}                 # LEAF row -> leaf Tensor
        self.retained = {}               # row -> weakref to a retain_grad() Tensor
        self.imports = {}                # IMPORT row -> (older tape, row there)
        self.import_rows = {}            # (older tape id, row there) -> IMPORT row
        self.consts = {}                 # Python number -> CONST row
        self.frozen = {}                 # id(constant array) -> (it, its CONST row, value)
        self.hooks = {}                  # row -> (dtype, hooks) (Tensor.register_hook)
        self.customs = {}                # CUSTOM row -> its CustomOp (custom.py)
        self.replaced = []               # values in-place ops replaced, noted (and
        self.resolved = 0                # how many of them were looked at); row -> what
        self.stale = {}                  # it read, for rows whose derivative reads one
                                         # (ops/versions.py)
        self.owner = owner               # the ThreadState recording here; None: closed
        self.nrows = 0
        self.array_bytes = 0
        self.array_limit = MAX_ARRAY_BYTES     # (grows with the largest row, see above)
        self._columns = None
        self._kernel_args = None
        self._decoded = None             # what columns() decoded so far (_Decoded)
        self._decoding = threading.Lock()

    def __repr__(self):
        return f"<Tape {self.id}: {self.nrows} rows{'' if self.owner else ', closed'}>"

    @property
    def open(self):
        """Whether rows are still appended here (by the owner thread)."""
        return self.owner is not None

    def close(self):
        """No more rows (called by the owner thread, or on a tape no thread records)."""
        self.owner = None

    def shape_id(self, shape):
        sid = self.shape_ids.get(shape)
        if sid is None:
            sid = self.shape_ids[shape] = len(self.shape_size)
            self.shapes.append(tuple(int(d) for d in shape))
            self.shape_ndim.append(len(shape))
            self.shape_dims.extend(shape)
            self.shape_size.append(math.prod(shape))
        return sid

    def push_scalar(self, op, a, b, value):
        """Append a row whose value is a 0-d float; returns the row. (The 0-d recorders
        in ops/elementwise.py write these same lines inline: the hot path of scalar code.)"""
        self.arena.append(value)
        return self._stage(op, a, b)

    def _stage(self, op, a, b):
        """Append a row's opcode and operands; returns the row."""
        row = self.nrows
        self.staged.extend((op, a, b))
        self.nrows = row + 1
        if row >= self.flush_at:
            self.flush_staged()
        return row

    def flush_staged(self):
        """Flush the staged rows; close the tape if one expression has made it huge."""
        chunk = np.array(self.staged, np.int64).reshape(-1, 3)
        fresh = []                       # (the old list is never cleared: a reader may
        self.rows_log = (self.rows_log[0] + (chunk,), fresh)   # hold it; one store
        self.staged = fresh              # publishes the chunk and the new list at once)
        self.flushed += chunk.shape[0]
        self.flush_at = self._next_flush()
        if self.flushed >= HARD_ROWS_FACTOR * MAX_ROWS and not self.whole:
            self.owner = None

    def _next_flush(self):
        if self.whole:                   # (a compiled recording: one tape, any size)
            return self.flushed + FLUSH_ROWS - 1
        return min(self.flushed + FLUSH_ROWS, HARD_ROWS_FACTOR * MAX_ROWS) - 1

    def push(self, op, a, b, shape, aux, value):
        """Append a row; ``value`` is a float (0-d) or a flat C-order float64 array."""
        row = self.nrows
        if type(value) is float:
            self.arena.append(value)
            big = -1
        else:
            big = len(self.arrays)
            self.arrays.append(value)
            self.big_addr.append(address_of(value))
            self.array_bytes += value.nbytes
            if value.nbytes * ROWS_OF_THE_LARGEST > self.array_limit:
                self.array_limit = value.nbytes * ROWS_OF_THE_LARGEST
            if self.array_bytes > HARD_ROWS_FACTOR * self.array_limit and not self.whole:
                self.owner = None
        sid = self.shape_ids.get(shape)
        if sid is None:
            sid = self.shape_id(shape)
        if sid or aux >= 0 or big >= 0:
            self.extra.extend((row, sid, aux, big))
        return self._stage(op, a, b)

    def add_params(self, values):
        """Store a row's int parameters (a tape_format layout); returns its aux."""
        start = len(self.ipool)
        self.ipool.extend(values)
        return start

    def opcode(self, row):
        """A row's opcode, without assembling the columns."""
        chunks, staged = self.rows_log
        if row >= len(chunks) * FLUSH_ROWS:
            return staged[3 * (row - len(chunks) * FLUSH_ROWS)]
        return int(chunks[row // FLUSH_ROWS][row % FLUSH_ROWS, 0])

    def rows_between(self, start, stop):
        """Rows start..stop-1 as an (n, 3) int64 array of opcode, operand a, operand b
        (without assembling the columns)."""
        return _rows_of(*self.rows_log, start, stop)

    # -- rows that bring values onto the tape ---------------------------------------------

    def leaf(self, t, value):
        row = self.push(LEAF, NO_ROW, NO_ROW, t._shape, NO_ROW, value)
        self.leaves[row] = t
        return row

    def const(self, value, shape):
        if type(value) is float and value:         # 0.0 and -0.0 must stay distinct
            row = self.consts.get(value)
            if row is None:
                row = self.consts[value] = self.push_scalar(CONST, NO_ROW, NO_ROW, value)
            return row
        return self.push(CONST, NO_ROW, NO_ROW, shape, NO_ROW, value)

    def const_array(self, v):
        """The CONST row of a read-only, C-contiguous float64 array that owns its data
        (it can never change), made once per tape: a constant used by every step of a
        loop (a roll's index map, a tensor that does not require grad) is one row."""
        hit = self.frozen.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1]
        row = self.push(CONST, NO_ROW, NO_ROW, v.shape, NO_ROW, v.reshape(-1))
        self.frozen[id(v)] = (v, row, v)
        return row

    def const_copy(self, v):
        """(row, value): the CONST row of a copy of array ``v`` (float64, C order), one
        per tape while ``v`` holds the same values."""
        hit = self.frozen.get(id(v))
        if hit is not None and hit[0] is v and same_bits(hit[2], v):
            return hit[1], hit[2]
        value = np.array(v, np.float64, order="C")
        value.flags.writeable = False
        row = self.push(CONST, NO_ROW, NO_ROW, v.shape, NO_ROW, value.reshape(-1))
        self.frozen[id(v)] = (v, row, value)
        return row, value

    def import_row(self, t, value):
        key = (t._tape.id, t._row)
        row = self.import_rows.get(key)
        if row is None:
            row = self.push(IMPORT, NO_ROW, NO_ROW, t._shape, NO_ROW, value)
            self.imports[row] = (t._tape, t._row)
            self.import_rows[key] = row
        return row

    # -- the tape as compiled code reads it -------------------------------------------------

    def columns(self):
        """The tape as int64 columns for the compiled sweep.

        Decoded incrementally: only the rows added since the last call (a recording that
        takes gradients with create_graph as it goes reads its tape after every one of
        them). Safe while the owner thread appends: the staged rows are read first, in
        one store's snapshot, and every list read after them only grew since, so it
        holds all that those rows name (push writes a row's staged entry last); threads
        reading one tape decode in turn, and earlier Columns stay valid (the buffers
        are only written past what they show)."""
        cols = self._columns
        if cols is not None and cols.nrows == self.nrows:
            return cols
        with self._decoding:
            d = self._decoded
            if d is None:
                d = self._decoded = _Decoded()
            chunks, staged = self.rows_log
            n = len(chunks) * FLUSH_ROWS + len(staged) // 3
            if d.nrows == n and self._columns is not None:
                return self._columns
            fresh = _rows_of(chunks, staged, d.nrows, n)
            released = self.released
            if released.size < n:
                grown = np.zeros(max(n, 2 * released.size), np.uint8)
                grown[:released.size] = released
                self.released = grown
            size = d.shape_size.add(self.shape_size)
            ndim = d.shape_ndim.add(self.shape_ndim)
            extra = np.array(self.extra[d.extra_used:], np.int64)
            decoded, d.arena, total, used = _reader(decode_rows, decode_rows_numpy)(
                fresh, extra, size, d.nrows, d.arena)
            d.extra_used += used
            rows = d.rows.add(decoded)
            first, d.nrows, d.total = d.nrows, n, d.total + total
            d.families |= int(_reader(families_of, families_of_numpy)(rows, first))
            start = d.shape_start.add(_starts(ndim, d.shape_start.n))
            ipool, dims = d.ipool.add(self.ipool, 1), d.shape_dims.add(self.shape_dims, 1)
            cols = self._columns = Columns(
                n, rows, ipool, ndim, start, dims, size, d.big_addr.add(self.big_addr, 1),
                d.total, (rows, ipool, ndim, start, dims, size), d.families)
            return cols

    def kernel_args(self):
        """``(args, arena)``: the tape as every compiled kernel takes it (rows, ipool,
        shape_ndim, shape_start, shape_dims, shape_size, arena address, arena length,
        array addresses, released marks) and the arena those addresses point into,
        which the caller holds until the kernel returns. Called from a thread other than
        the one still recording here, that arena is a private copy: an append may move
        the live one."""
        owner = self.owner
        if owner is not None and owner is not here():
            c = self.columns()
            arena = self.arena[:]               # one C call: a consistent copy
            return c.kernel_prefix + (arena.buffer_info()[0], len(arena), c.big_addr,
                                      self.released), arena
        cached = self._kernel_args
        if cached is not None and cached[0] == self.nrows and cached[1] == len(self.arena):
            return cached[2], self.arena        # (the arena moves only when it grows)
        c = self.columns()
        args = c.kernel_prefix + (self.arena.buffer_info()[0], len(self.arena), c.big_addr,
                                  self.released)
        self._kernel_args = (self.nrows, len(self.arena), args)
        return args, self.arena

    # -- one row, for the Python side ------------------------------------------------------
    # A row never changes once written (only its value, in a replay), so the columns
    # decoded when it was already there serve, though rows were added since (the
    # create_graph walk records onto the tape it reads).

    def _columns_with(self, row):
        cols = self._columns
        return cols if cols is not None and row < cols.nrows else self.columns()

    def row(self, i):
        """Row i's opcode, operand rows, int parameters (a tape_format layout decodes
        them) and shape, read at once."""
        c = self._columns_with(i)
        op, a, b, sid, aux, _ = c.rows[i].tolist()
        params = c.ipool[aux:] if aux >= 0 else c.ipool[:0]
        return Row(op, operand_list(op, a, b, params), params, self.shapes[sid])

    def read(self, i):
        """(opcode, shape, value) of row i; the value is a float (0-d, from the arena)
        or a view of its array."""
        op, _, _, sid, _, loc = self._columns_with(i).rows[i].tolist()
        shape = self.shapes[sid]
        if loc >= 0:
            return op, shape, self.arena[loc]
        return op, shape, self.arrays[array_index(loc)].reshape(shape)

    def op(self, i):
        return int(self._columns_with(i).rows[i, OP])

    def shape(self, i):
        return self.shapes[self._columns_with(i).rows[i, SHAPE]]

    def size(self, i):
        c = self._columns_with(i)
        return int(c.shape_size[c.rows[i, SHAPE]])

    def value(self, i):
        return self.read(i)[2]

    def own_values(self):
        """Give the tape private copies of its array values: a replay rewrites them in
        place, and the tensors recorded on it (which a traced function may keep) must
        keep theirs. The tape is closed; its columns are decoded again."""
        assert self.owner is None
        self.arrays = [a.copy() for a in self.arrays]
        self.big_addr = [address_of(a) for a in self.arrays]
        self._columns = self._kernel_args = self._decoded = None

    def twin(self):
        """A closed tape's twin: the same rows, values of its own. Concurrent replays of
        one recording each take a twin (compile.py), so none rewrites values another
        is reading."""
        assert self.owner is None
        twin = Tape.__new__(Tape)
        for name in _SLOTS:
            setattr(twin, name, getattr(self, name))
        twin._decoding = threading.Lock()
        twin.arena = self.arena[:]
        twin.released = self.released.copy()
        twin.own_values()
        return twin

    def has_ops(self, first, last):
        """Whether any row's opcode is in [first, last]."""
        ops = self.columns().rows[:, OP]
        return bool(((ops >= first) & (ops <= last)).any())

    def large_arrays(self, rows, min_size):
        """Those of ``rows`` whose value is an array of at least ``min_size`` elements,
        and their sizes (numpy, one pass)."""
        c = self.columns()
        rows = rows[rows < c.nrows]            # (leaves another thread added since)
        sizes = c.shape_size[c.rows[rows, SHAPE]]
        big = (c.rows[rows, VLOC] < 0) & (sizes >= min_size)
        return rows[big], sizes[big]

    def buffer(self, row):
        """The row's array value itself (flat, C order), for a replay to overwrite in
        place; None for a 0-d value (those live in the arena)."""
        loc = int(self._columns_with(row).rows[row, VLOC])
        return None if loc >= 0 else self.arrays[array_index(loc)]

    def write(self, row, data):
        """Overwrite the row's value in place (a replay's inputs and numpy rows)."""
        loc = int(self._columns_with(row).rows[row, VLOC])
        data = np.asarray(data, np.float64).reshape(-1)
        if loc >= 0:
            self.arena[loc] = float(data[0]) if data.size else 0.0
        else:
            self.arrays[array_index(loc)][:] = data


_READERS_READY = set()


def _reader(kernel, twin):
    """``kernel`` (decode_rows, families_of), or its numpy twin (the same integers)
    while it is neither compiled nor on disk: a cold cache's eager calls never wait on
    numba for it (its code run by Python cost 2-4 us a row, 18-33 ms a call of an
    8,000-row model; the twin ~0.1 us)."""
    if kernel in _READERS_READY:
        return kernel
    if kernel.signatures or on_disk(kernel) or not background.enabled():
        _READERS_READY.add(kernel)
        return kernel
    return twin


def decode_rows_numpy(staged, extra, shape_size, first_row, arena):
    """kernels/staging.decode_rows, in numpy calls."""
    n = staged.shape[0]
    rows = np.empty((n, ROW_WIDTH), np.int64)
    rows[:, OP], rows[:, A], rows[:, B] = staged[:, 0], staged[:, 1], staged[:, 2]
    rows[:, SHAPE], rows[:, AUX] = 0, NO_ROW
    entries = extra[:extra.size - extra.size % 4].reshape(-1, 4)
    at = entries[:, 0] - first_row
    m = int(np.searchsorted(at, n))             # (in row order: past the staged rows, left)
    at, entries = at[:m], entries[:m]
    rows[at, SHAPE], rows[at, AUX] = entries[:, 1], entries[:, 2]
    big = np.full(n, -1, np.int64)
    big[at] = entries[:, 3]
    in_arena = big < 0
    rows[:, VLOC] = array_location(big)
    rows[in_arena, VLOC] = arena + np.arange(int(in_arena.sum()))
    total = int(shape_size[rows[:, SHAPE]].sum()) if n else 0
    return rows, arena + int(in_arena.sum()), total, 4 * m


def families_of_numpy(rows, first):
    """kernels/sweep.families_of, in numpy calls."""
    tail = rows[first:]
    op = tail[:, OP]
    elementwise = (op >= UNARY_FIRST) & (op <= BINARY_LAST)
    a, b = np.where(elementwise, tail[:, A], 0), tail[:, B]
    scalar = elementwise & (tail[:, VLOC] >= 0) & (rows[a, VLOC] >= 0) & \
        ((b < 0) | (rows[np.maximum(b, 0), VLOC] >= 0))
    need = op[(op >= UNARY_FIRST) & ~scalar]
    return int(np.bitwise_or.reduce(FAMILY_OF[need])) if need.size else 0


_SLOTS = [name for name in Tape.__slots__ if name != "__weakref__"]


class _Growing:
    """An int64 copy of a list that only grows (or of a row array's rows), extended by
    what was added since: ``add`` writes only past what earlier views show, so a view
    handed out before stays valid (a larger buffer is a new one)."""
    __slots__ = ("buffer", "n")

    def __init__(self, width=None):
        self.buffer = np.zeros((16, width) if width else 16, np.int64)
        self.n = 0

    def add(self, values, at_least=0):
        """Take in values[n:] (a list, or an array of only the new entries when it is
        an array); returns the view of all entries (at least ``at_least`` of them: zeros
        past the end, where compiled code wants a non-empty array)."""
        new = values[self.n:] if type(values) is list else values
        need = self.n + len(new)
        if need > len(self.buffer):
            grown = np.zeros((max(need, 2 * len(self.buffer)),) + self.buffer.shape[1:],
                             np.int64)
            grown[:self.n] = self.buffer[:self.n]
            self.buffer = grown
        if len(new):
            self.buffer[self.n:need] = new
        self.n = need
        return self.buffer[:max(need, at_least)]


class _Decoded:
    """What Tape.columns decoded so far: the rows, the lists' int64 copies, where the
    next row's 0-d value goes in the arena, how much of ``extra`` was used, the values'
    total size and the kernel families met."""
    __slots__ = ("rows", "ipool", "shape_ndim", "shape_start", "shape_dims", "shape_size",
                 "big_addr", "nrows", "arena", "extra_used", "total", "families")

    def __init__(self):
        self.rows = _Growing(ROW_WIDTH)
        self.ipool, self.shape_ndim, self.shape_start = _Growing(), _Growing(), _Growing()
        self.shape_dims, self.shape_size, self.big_addr = _Growing(), _Growing(), _Growing()
        self.nrows = self.arena = self.extra_used = self.total = self.families = 0


def _rows_of(chunks, staged, start, stop):
    """Rows start..stop-1 of a rows_log snapshot, as an (n, 3) int64 array."""
    flushed = len(chunks) * FLUSH_ROWS
    parts = [chunks[c][max(start - c * FLUSH_ROWS, 0):stop - c * FLUSH_ROWS]
             for c in range(start // FLUSH_ROWS, min(len(chunks), -(-stop // FLUSH_ROWS)))]
    if stop > flushed:
        parts.append(np.array(staged[3 * max(start - flushed, 0):3 * (stop - flushed)],
                              np.int64).reshape(-1, 3))
    if not parts:
        return np.zeros((0, 3), np.int64)
    return np.concatenate(parts) if len(parts) > 1 else np.ascontiguousarray(parts[0])


def _starts(ndim, known):
    """Where the dims of shapes known... start in the shape table (ndim: all shapes')."""
    ends = np.cumsum(ndim)
    return (ends - ndim)[known:]
Row = namedtuple("Row", "op operands params shape")
Columns = namedtuple("Columns", "nrows rows ipool shape_ndim shape_start shape_dims "
                                "shape_size big_addr total_size kernel_prefix families")


def same_bits(value, v):
    """Whether array ``v`` holds exactly the C-contiguous float64 ``value`` (0.0 and
    -0.0 differ, a NaN equals only a NaN of the same payload)."""
    if type(v) is not np.ndarray or v.dtype != np.float64 or not v.flags.c_contiguous:
        v = np.ascontiguousarray(v, np.float64)
    if value.shape != v.shape:
        return False
    return value.tobytes() == v.tobytes() if value.size <= BYTES_COMPARE_MAX else \
        bits_equal(value, v)


def close_open_tape():
    """Close this thread's open tape: its next op starts a new one (a compiled
    recording gets a tape of its own)."""
    state = here()
    current = state.tape() if state.tape is not None else None
    if current is not None:
        current.close()


@contextlib.contextmanager
def tape_of_its_own():
    """Record on a new tape meanwhile, then on this thread's open tape again: no op
    inside appends to a tape that was open before (an operand of it is imported)."""
    state = here()
    saved = state.tape() if state.tape is not None else None
    mine = saved is not None and saved.owner is state
    if mine:
        saved.owner = None
    state.tape = None
    try:
        yield
    finally:
        close_open_tape()
        if mine:
            saved.owner = state
        state.tape = weakref.ref(saved) if saved is not None else None


def open_tape(*tapes):
    """The tape this thread records on, given the tapes the operands live on (None for
    leaves); held weakly, so it dies with its results.

    The thread's open tape, unless an operand lives on a newer one (then it starts a
    new tape, so IMPORT rows always point to older tapes)."""
    state = here()
    current = state.tape() if state.tape is not None else None
    if current is None or current.owner is not state or (
            current.nrows >= MAX_ROWS and not current.whole) or \
            (current.array_bytes >= current.array_limit and not current.whole) or any(
                t is not None and t.id > current.id for t in tapes):
        if current is not None and current.owner is state:
            current.close()            # one open tape per thread: its newest
        current = Tape(state)
        state.tape = weakref.ref(current)
    return current
