"""Executors: who runs a tape. The engine, compile.py and nothing else call one.

A tape is data (tape.py, in the format of tape_format.py); an executor runs the three
things done with it: the reverse sweep (seeds in, adjoints out, K lanes at once), the
forward replay (new input values in, every row recomputed in place), and both in one
call. ``CpuExecutor`` runs them as numba-compiled kernels (kernels/); a CUDA executor
implements the same three methods with ``numba.cuda`` kernels built from the same
``register_jitable`` op math (kernels/elementwise.py and its peers), and
``executor_for`` is where a tape would be matched to its device.
"""
import abc
import ctypes
import weakref

import numpy as np

from .kernels.blas import DGEMM
from .memory import KEPT, busy, on_idle
from .parallel import for_numba, get_num_threads, parallel_launch, pieces
from .kernels.replay import forward_replay, replay_and_sweep
from .kernels.sweep import (HOOK_ROW, LINALG, LINALG_ROW, OK, ONE_ROW_MIN, PYTHON,
                            PYTHON_ROW, RELEASED, RESUME, SEGMENT_BOTTOM, SEGMENT_SIZE, SPLIT,
                            SPLIT_STATE, STOP_DONE, STOPPED, STRIDE, UNKNOWN_OP,
                            linalg_row_vjp, segment_vjp, segment_vjp_serial, sweep_for)
from .opcodes import opcode_name
from .thread_state import here
from .tuning import FUSE_MIN, KEEP_SWEEP_SCRATCH_BYTES, NUMPY_ROW_MIN, PARALLEL_MIN

RELEASED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")

NO_ROWS = np.zeros(0, np.int64)
# The state of a sweep that never splits (split_min 0): the kernel only reads it (its
# state[RESUME] < 0), so all threads share this one.
FRESH_STATE = np.full(SPLIT_STATE, -1, np.int64)
NO_MARKS = np.zeros((0, 0), np.bool_)
NO_STOPS = np.zeros(0, np.uint8)


class Executor(abc.ABC):
    """What a backend implements (see the module's docstring)."""

    @abc.abstractmethod
    def sweep(self, tape, seed_rows, seed_vals, seed_off, lanes, retain, row_addr=NO_ROWS,
              read=NO_ROWS, stops=NO_STOPS, on_stop=None, on_custom=None):
        """The reverse sweep of ``tape`` from the seeds. Returns ``(adj, adj_off,
        stride)``: lane k of row r's adjoint is ``adj[k * stride + adj_off[r]:][:size]``
        (``adj_off[r] < 0``: no gradient reached r). ``read``: the rows the caller
        reads (all when empty); ``row_addr``: rows with a buffer of their own.
        ``stops`` (uint8 per row): at each such row the sweep reaches, once its adjoint
        is complete and before it passes on, ``on_stop(row, adjoint)`` is called with
        the adjoint as a writable (lanes, size) array (zeros where no gradient came).
        At a CUSTOM row (a user's op), ``on_custom(row, adjoint, accumulate)`` runs its
        VJP: ``accumulate(operand_row, values)`` adds (lanes, size) values to an
        operand's adjoint."""

    @abc.abstractmethod
    def replay(self, tape, in_rows, in_vals, python_row):
        """Write ``in_vals`` into the rows ``in_rows`` and recompute every other row;
        ``python_row(row)`` computes a row no kernel can (numpy.linalg) and the large
        elementwise rows (numpy's functions on threads are faster)."""

    @abc.abstractmethod
    def replay_and_sweep(self, tape, in_rows, in_vals, seeds, lanes, out):
        """replay, then sweep, in one call, for a tape whose rows all have kernels; the
        input rows' adjoints land in ``out[lane, columns of that input]``."""


class CpuExecutor(Executor):
    """The numba-compiled CPU kernels. ``dgemm`` is the address of numpy's CBLAS dgemm
    (0: the kernels' own loops)."""

    def __init__(self):
        self.dgemm = DGEMM

    @staticmethod
    def scratch(size):
        """Adjoint space for a sweep, the calling thread's own (the kernels run without
        the GIL, so threads sweep at once), reused from call to call (fresh pages cost
        more to touch than a sweep's arithmetic, and two threads faulting them in at
        once cost ten times more). Up to KEEP_SWEEP_SCRATCH_BYTES it is kept for good; a
        larger one (memory.KEPT) until the program goes idle, or, without that policy,
        only for its own sweep."""
        state = here()
        buf = state.scratch
        if buf is None or buf.size < size:
            old = 0 if buf is None else buf.size
            buf = np.empty(max(size, int(old * 1.5)))
            if buf.nbytes <= KEEP_SWEEP_SCRATCH_BYTES or KEPT:
                state.scratch = buf
                if buf.nbytes > KEEP_SWEEP_SCRATCH_BYTES:
                    _LARGE_SCRATCH.add(state)
        return buf

    def sweep(self, tape, seed_rows, seed_vals, seed_off, lanes, retain, row_addr=NO_ROWS,
              read=NO_ROWS, stops=NO_STOPS, on_stop=None, on_custom=None):
        busy()
        columns = tape.columns()
        adj = self.scratch(lanes * columns.total_size)
        args, held = tape.kernel_args()        # held: what args' addresses point into
        # runs of large elementwise rows are swept in tiles, on threads (one lane: a
        # Jacobian's lanes already give each row enough work)
        split = FUSE_MIN if lanes == 1 and columns.total_size >= FUSE_MIN else 0
        families = columns.families
        reverse_sweep = sweep_for(families)    # compiled for what the tape's ops need
        state = np.full(SPLIT_STATE, -1, np.int64) if split or families & (LINALG | PYTHON) \
            or stops.size else FRESH_STATE
        if split:
            state[ONE_ROW_MIN] = PARALLEL_MIN if get_num_threads() > 1 else \
                np.iinfo(np.int64).max
        status, detail, adj_off, touched = reverse_sweep(
            *args, retain, seed_rows, seed_vals, seed_off, lanes, adj, row_addr, self.dgemm,
            read, NO_ROWS, NO_MARKS, state, split, stops)
        head = args[:7] + (args[8],)           # rows .. arena address, big_addr
        while status == SPLIT:
            kind, resume = state[STOPPED], detail - 1
            if kind == PYTHON_ROW or kind == HOOK_ROW:     # Python: a VJP or hooks
                stride, off, size = state[STRIDE], adj_off[detail], tape.size(detail)
                view = adj[:lanes * stride].reshape(lanes, stride)[:, off:off + size]
                view[~touched[:, detail]] = 0.0            # a lane no gradient reached
                if kind == PYTHON_ROW:
                    _in_python(on_custom, detail, view, _accumulator(
                        tape, adj, adj_off, touched, row_addr, lanes, stride))
                else:                                      # the row itself runs after
                    touched[:, detail] = True
                    _in_python(on_stop, detail, view)
                    resume = state[STOP_DONE] = detail
            elif kind == LINALG_ROW:             # a numpy.linalg row: its own kernel
                if not linalg_row_vjp(*head, adj, adj_off, row_addr, touched, self.dgemm,
                                      detail, lanes, state[STRIDE]):
                    self._raise(tape, UNKNOWN_OP, detail)
            else:                                # a segment, in tiles, among threads
                bottom, n = state[SEGMENT_BOTTOM], state[SEGMENT_SIZE]
                count = pieces(n)
                if count == 1:
                    segment_vjp_serial(*head, adj, adj_off, row_addr, touched, self.dgemm,
                                       detail, bottom, n, state[STRIDE], read, 1)
                else:
                    for_numba()
                    with parallel_launch():
                        segment_vjp(*head, adj, adj_off, row_addr, touched, self.dgemm,
                                    detail, bottom, n, state[STRIDE], read, count)
                resume = bottom - 1
            state[RESUME] = resume
            status, detail, adj_off, touched = reverse_sweep(
                *args, retain, seed_rows, seed_vals, seed_off, lanes, adj, row_addr,
                self.dgemm, read, adj_off, touched, state, split, stops)
        if status != OK:
            self._raise(tape, status, detail)
        return adj, adj_off, detail

    def replay(self, tape, in_rows, in_vals, python_row):
        if in_vals.size >= NUMPY_ROW_MIN:     # large inputs: numpy's copy (memcpy speed)
            pos = 0
            for row in in_rows:
                n = tape.size(int(row))
                tape.write(int(row), in_vals[pos:pos + n])
                pos += n
            in_rows = in_rows[:0]
        (rows, ipool, ndim, start, dims, size, arena, _, big, _), held = tape.kernel_args()
        i, stop = 0, tape.nrows
        while i < stop:
            i = forward_replay(rows, ipool, ndim, start, dims, size, arena, big, in_rows,
                               in_vals, i, stop, self.dgemm, NUMPY_ROW_MIN)
            in_rows = in_rows[:0]              # written: later stretches only compute
            if i < stop:
                python_row(i)
                i += 1

    def replay_and_sweep(self, tape, in_rows, in_vals, seeds, lanes, out):
        seed_rows, seed_vals, seed_off = seeds
        adj = self.scratch(lanes * tape.columns().total_size)
        args, held = tape.kernel_args()        # held: what args' addresses point into
        status, detail = replay_and_sweep(*args, in_rows, in_vals, seed_rows, seed_vals,
                                          seed_off, lanes, adj, out, self.dgemm)
        if status < 0:
            raise RuntimeError(f"autotape internal error: a fused replay met op "
                               f"{opcode_name(tape.op(detail))}, which needs Python; "
                               "please report this")
        if status != OK:
            self._raise(tape, status, detail)

    @staticmethod
    def _raise(tape, status, unknown_row):
        if status == RELEASED:
            raise RuntimeError(RELEASED_MSG)
        assert status == UNKNOWN_OP, status
        raise RuntimeError(f"autotape internal error: no compiled VJP for op "
                           f"{opcode_name(tape.op(unknown_row))} (row {unknown_row}); "
                           "please report this")


def _in_python(callback, *args):
    """Run a hook or a custom op's VJP in the middle of a sweep. It may sweep itself
    (``at.grad`` inside a hook, a checkpointed segment): that sweep must not take this
    one's adjoint scratch, so the thread's scratch is set aside meanwhile."""
    state = here()
    mine = state.scratch
    state.scratch = None
    try:
        callback(*args)
    finally:
        state.scratch = mine


def _accumulator(tape, adj, adj_off, touched, row_addr, lanes, stride):
    """``accumulate(row, values)``: add (lanes, size) values to a row's adjoint (written
    the first time in a lane, added to after), where the sweep keeps it."""
    def accumulate(row, values):
        off, size = adj_off[row], tape.size(row)
        if off < 0:                            # (every operand of a reached row has one)
            raise RuntimeError(f"autotape internal error: row {row}, an operand of a "
                               "custom op, has no adjoint; please report this")
        values = np.asarray(values, np.float64).reshape(lanes, size)
        if lanes == 1 and row < row_addr.size and row_addr[row]:
            targets = [np.ctypeslib.as_array(
                (ctypes.c_double * size).from_address(int(row_addr[row])))]
        else:
            targets = adj[:lanes * stride].reshape(lanes, stride)[:, off:off + size]
        for k in range(lanes):
            if touched[k, row]:
                targets[k] += values[k]
            else:
                targets[k][:] = values[k]
                touched[k, row] = True
    return accumulate


_LARGE_SCRATCH = weakref.WeakSet()     # thread states keeping a large scratch


def _drop_large_scratch():
    for state in list(_LARGE_SCRATCH):
        buf = state.scratch
        if buf is not None and buf.nbytes > KEEP_SWEEP_SCRATCH_BYTES:
            state.scratch = None               # (a sweep running holds its own reference)
    _LARGE_SCRATCH.clear()


on_idle(_drop_large_scratch)
cpu = CpuExecutor()


def executor_for(tape):
    """The executor that runs ``tape`` (every tape lives on the CPU today)."""
    return cpu
