"""A compiled function's tape as a lean program (kernels/program.py): lowered once,
then evaluated at one point or at B points at once, on every core. compile.py uses it
for every recording it can lower (``at.compile``, ``autotape.func.vmap``)."""
import concurrent.futures
import os
import threading
import time

import numpy as np

from . import codegen
from .kernels import background
from .kernels.blas import DGEMM
from .kernels.cache import cache_dir, compile_notice, on_disk
from .kernels.calls import call_rows, driver
from .kernels.elementwise import passes_nothing
from .parallel import for_numba, on_threads, parallel_launch
from .kernels.loops import GROUPS as LOOP_GROUPS
from .kernels.instruction_format import COPY, I_N, I_OP, I_OUT, may_read, read_runs
from .kernels.loops import constant_table, find_loop, loop_kernels, loop_source
from .kernels.pieces import aligned_pieces
from .kernels.driver import tangents_driver
from .kernels.program import (LOWERED, close_slot_gaps, forward_range, forward_range_points,
                              live_sets, lower, reached_by_any, run_points,
                              run_points_parallel, run_tangents, run_tangents_parallel,
                              tangent_range, tangent_range_points)
from .sparsity import colour_seeds, column_colours, dependency_pattern
from .thread_state import here
from .checkpointing import NotCheckpointable, Segments
from .tuning import (COMPILE_LOOP_AFTER, COMPRESS_MAX_INSTRUCTIONS, COMPRESS_MIN_INPUTS,
                     GENERATED_CELLS_MAX, GENERATED_SCRATCH_BYTES, GENERATED_SLICE,
                     KEEP_LIVE_BYTES, KEEP_PROGRAM_SCRATCH_BYTES, LOOK_EVERY, MAX_LANES,
                     OWN_SCRATCH_MAX, POINTS_BODY_MAX, POINTS_CHUNK_MIN,
                     SETTLE_BEFORE_MAX)


GENERATED_ENV = "AUTOTAPE_GENERATED"   # =0: programs run without codegen.py's kernels
FLOAT64 = np.dtype(np.float64)
POISON_SCRATCH = False       # tests set it: scratch starts as nan, not as the last call's
_SOURCE_LOCK = threading.Lock()       # (LeanProgram._loop_code)


def _in_forked_child():
    """A lock another thread of the parent held at a fork stays held in the child."""
    global _SOURCE_LOCK
    _SOURCE_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)


def loop_of(f):
    """What messages call the loop of the user's function f: "the loop in pendulum
    (model.py, line 12)"."""
    code = getattr(getattr(f, "py_func", f), "__code__", None)
    name = getattr(f, "__name__", None) or type(f).__name__
    if code is None:
        return f"the loop in {name}"
    return f"the loop in {name} ({os.path.basename(code.co_filename)}, line " \
           f"{code.co_firstlineno})"


def kernel_ready(kernel):
    """Whether a kernel a call could do without runs it: compiled, on disk, or compiled
    here (background compiling off), or the helper compiling compiled functions' kernels
    is done. Otherwise the call takes another way to the same numbers while the helper
    gets to it (started here if need be): the points on one thread for the threaded
    kernels, a reverse sweep per output for forward mode's. A call never waits on it."""
    if kernel in _KERNELS_READY:
        return True
    if kernel.signatures or on_disk(kernel) or not background.enabled() or \
            kernels_beside():
        _KERNELS_READY.add(kernel)
        return True
    return False


KERNELS_JOB = "compiled functions"
_KERNELS_HELPER = "from autotape import warmup\nwarmup.compiled_function_kernels()"


def kernels_beside():
    """Start the helper that compiles every kernel compiled functions' calls use (once
    per process; said once on stderr) or poll it: True once it is done (or failed: the
    calls then compile what they need themselves)."""
    return background.beside(KERNELS_JOB, background.state(KERNELS_JOB), _KERNELS_HELPER,
                             (), "the kernels of compiled functions (at.compile, vmap)",
                             False, KERNELS_JOB, cache_dir(), "which run as eager code "
                             "(or vmap's points on one thread) until they are ready")


_KERNELS_READY = set()


def chunk_size(nslots, least=4):
    """Points per chunk when many are evaluated at once: 32 (the per-instruction cost
    spread over them), fewer where a chunk's values and adjoints would pass 16 MiB,
    down to ``least`` (a compiled loop body has no per-instruction cost to spread: a
    solve of 300 attempts, 4.4 MB of slots a point, took 1.2 ms a point in chunks of 4
    and 0.45 ms one point at a time)."""
    c = 32
    while c > least and 16 * nslots * c > 16 << 20:
        c //= 2
    return c


class LeanProgram:
    """Instructions over value slots for the rows ``out_rows`` of a closed tape, with
    the slots of its inputs and outputs. Plain arrays: it pickles, and calls from many
    threads share it (each call has scratch of its own)."""
    __slots__ = ("instr", "pool", "divisor", "live", "const_slots", "const_vals",
                 "in_slots", "out_slots", "nslots", "loop", "loop_kernels", "loop_slots",
                 "loop_table", "loop_code", "loop_ready", "loop_unswept", "loop_wanted",
                 "what", "calls", "segments", "reached", "user_calls", "driver", "codegen",
                 "next_look", "made_by", "compressed", "loop_point")

    @classmethod
    def lower(cls, tape, in_rows, out_rows, loops=True, why=None):
        """The program, or None when a row has no lean form (the tape's interpreting
        kernels then run it; that row appended to ``why`` where given). ``loops=False``:
        a program run once, whose loops are not worth looking for."""
        args, held = tape.kernel_args()
        rows, ipool, ndim, start, dims, size, arena, _, big, _ = args
        in_rows, out_rows = np.asarray(in_rows, np.int64), np.asarray(out_rows, np.int64)
        compiled_ops = np.zeros(tape.nrows, np.uint8)
        for row, op in tape.customs.items():
            compiled_ops[row] = getattr(op, "compiled", False)
        (status, detail, instr, pool, divisor, in_slots, out_slots, nslots, const_slots,
         const_vals, made_by) = lower(rows, ipool, ndim, start, dims, size, arena, big,
                                      in_rows, out_rows, compiled_ops, DGEMM)
        if status != LOWERED:
            if why is not None:
                why.append(int(detail))
            return None
        instr, divisor, origin = aligned_pieces(instr, divisor)
        user_calls = [_user_call(tape, row) for row in call_rows(instr)] or None
        p = cls.of(instr, pool, divisor, in_slots, out_slots, int(nslots), const_slots,
                   const_vals, loops and user_calls is None, user_calls)
        p.made_by = np.asarray(made_by, np.int64)[origin]   # (Compiled.explain's; not pickled)
        return p

    @classmethod
    def of(cls, instr, pool, divisor, in_slots, out_slots, nslots, const_slots, const_vals,
           loops=True, user_calls=None):
        """The program made of these instructions (``lower``'s, or at.jit's tape, which
        jit.py writes as instructions directly)."""
        p = cls.__new__(cls)
        p.user_calls, p.driver, p.codegen, p.made_by = user_calls, None, None, None
        p.compressed = None                 # (compression(): found at its first use)
        p.loop_point = None                 # (_loop_point(): made at its first use)
        p.instr, p.pool, p.divisor, p.nslots = instr, pool, divisor, nslots
        p.const_slots, p.const_vals = const_slots, const_vals
        p.in_slots, p.out_slots = in_slots, out_slots
        p.live = None
        # (start, period, repeats, delta) or None; a program with users' compiled ops
        # runs in their driver (kernels/calls.py), its loops interpreted
        constant = np.zeros(nslots, bool)
        constant[const_slots] = True
        p.loop = find_loop(instr, constant, pool) if loops else None
        slots = _loop_slots(instr, p.loop) if p.loop is not None else None
        if slots is None:
            p.loop = None                   # (code around it writes amid its values)
        p.loop_kernels = None               # compiled after COMPILE_LOOP_AFTER calls
        p.loop_slots = p.segments = p.reached = p.loop_table = p.loop_code = None
        p.loop_unswept = None               # found with the body's code
        p.loop_wanted = set()               # the kernel groups calls have asked for
        p.loop_ready = None                 # {(dtype, kernel group)} compiled
        p.what = "a loop"                   # (what the messages call it: compile.py's f)
        if p.loop is not None:
            p.loop_slots = slots
            # constant operands whose value changes with the repetition: a table of
            # their values, more constant slots after the others, that the compiled
            # body reads by the repetition's index (the interpreter reads the slots
            # the instructions name, as recorded)
            entries, values = constant_table(instr, p.loop, constant, const_slots,
                                             const_vals)
            # (the constants no instruction reads any more, left out of every call's
            # loading: a solve's 35,000 per-attempt 0.0s took 22 us a point)
            read = may_read(instr, p.pool, nslots)
            read[out_slots] = True
            if not read[const_slots].all():
                gone = const_slots[~read[const_slots]]
                const_slots, const_vals = const_slots[read[const_slots]], \
                    const_vals[read[const_slots]]
                p.const_slots, p.const_vals = const_slots, const_vals
                nslots = p._close_gaps(gone)
                const_slots = p.const_slots
            if entries:
                width = values.shape[1]
                p.loop_table = (nslots, width, entries)
                p.const_slots = np.concatenate([const_slots, nslots + np.arange(
                    values.size, dtype=np.int64)])
                p.const_vals = np.concatenate([const_vals, values.reshape(-1).astype(
                    const_vals.dtype)])
                p.nslots = nslots + values.size
        p.calls, p.next_look = 0, 0.0
        return p

    def _close_gaps(self, gone):
        """Leave the slots ``gone`` (constants no instruction reads: a mask recorded
        afresh in each repetition, constant_table's) out of the numbering, where they all
        lie before the instructions' outputs (lowering's sources), so that the loop's
        repetitions stay as far apart; the new slot count. Left in, a 2-D heat loop's
        two constant grids a step took 1.4 MB of its 1.5 MB of slots outside the loop,
        which every call's seed zeroes (25 us of a 500 us gradient)."""
        if gone.size == 0 or self.instr.shape[0] == 0 or \
                gone.max() >= self.instr[:, I_OUT].min():
            return self.nslots
        left_out = np.zeros(self.nslots, bool)
        left_out[gone] = True
        renumber = np.arange(self.nslots) - np.cumsum(left_out)
        self.instr, self.pool = self.instr.copy(), self.pool.copy()
        close_slot_gaps(self.instr, self.pool, renumber)
        self.const_slots, self.in_slots, self.out_slots = (
            renumber[self.const_slots], renumber[self.in_slots], renumber[self.out_slots])
        self.nslots -= int(gone.size)
        self.loop_slots = _loop_slots(self.instr, self.loop)
        return self.nslots

    def checkpoint(self, budget):
        """Sweep the loop in segments from now on (checkpointing.py): ``budget`` the
        repetitions' worth of values kept at once, or None for the least. Raises
        NotCheckpointable (why not) or ValueError (a budget too small)."""
        if self.user_calls is not None:
            raise NotCheckpointable("it calls numba-compiled custom ops, whose driver keeps "
                                    "every value")
        if self.loop is None:
            raise NotCheckpointable("f's recording has no repeating loop body (a loop of "
                                    "elementwise ops, gathers and sums) to sweep in "
                                    "segments")
        self.segments = Segments(self, budget)

    def compression(self):
        """(seeds (inputs, K), rows, columns, lanes) for the Jacobian of the outputs by
        forward mode in K lanes, K at most half the inputs: inputs that never meet in an
        output element share a lane (sparsity.py), and entry (rows[e], columns[e]) is
        lane lanes[e] of its row; the other entries are zero. None where that does not
        pay: few inputs, a dense pattern, or a program too long to analyse at once."""
        found = self.compressed
        if found is None:
            found = self.compressed = _compression(self) or False
        return found or None

    def __getstate__(self):
        state = {name: getattr(self, name) for name in self.__slots__
                 if name not in ("loop_kernels", "calls", "segments", "reached", "driver",
                                 "codegen", "loop_code", "loop_ready", "loop_unswept",
                                 "loop_wanted", "next_look", "made_by", "compressed",
                                 "loop_point")}
        state["budget"] = self.segments.budget if self.segments is not None else False
        return state

    def __setstate__(self, state):
        budget = state.pop("budget")
        for name, value in state.items():
            setattr(self, name, value)
        self.loop_kernels = self.segments = self.reached = self.driver = None
        self.codegen = self.loop_code = self.loop_ready = self.made_by = None
        self.compressed = self.loop_point = None
        self.loop_unswept, self.loop_wanted = None, set()
        self.calls, self.next_look = 0, 0.0
        if budget is not False:
            self.checkpoint(budget)

    def run(self, X, jacobian=False):
        """Values (B, outputs) at the points X (B, inputs) and, with ``jacobian``, d
        output / d input (B, outputs, inputs), in X's dtype (float64 or float32)."""
        B = X.shape[0]
        values = np.empty((B, self.out_slots.size), X.dtype)
        jac = np.empty((B, self.out_slots.size, self.in_slots.size) if jacobian
                       else (0, 0, 0), X.dtype)
        if self.user_calls is None:
            whole = self._generated(X.dtype)
            if whole is not None:
                self._run_generated(whole, X, values, jac, jacobian)
                return values, (jac if jacobian else None)
        live = self.live
        if live is None:
            live = live_sets(self.instr, self.pool, self.nslots, self.out_slots) \
                if jacobian else np.zeros((0, 0), np.uint8)
            if jacobian and live.size <= KEEP_LIVE_BYTES:
                self.live = live            # (a race computes it twice, both right)
        chunk = 1 if B == 1 else chunk_size(self.nslots)
        workers = 1 if B == 1 else min(for_numba(), (B + chunk - 1) // chunk)
        if self.user_calls is not None:
            self._run_driver(X, values, jac, jacobian, live)
            return values, (jac if jacobian else None)
        if not self._generating(X.dtype) and \
                self._loop_ready(X.dtype, "reverse" if self._most_points(B) == 1
                                 else "reverse_points"):
            compiled = self._loop_reached_by(live) if jacobian else []
            segments = self.segments if all(compiled) else None
            slots = segments.size if segments is not None else self.nslots
            chunk = self._most_points(B, slots=slots)
            workers = 1 if B == 1 else min(for_numba(), (B + chunk - 1) // chunk)
            if segments is None:
                self._run_loop(X, chunk, workers, values, jac, jacobian, live, compiled)
                return values, (jac if jacobian else None)

            def work(V, G, p0, C):
                segments.run(X, p0, C, V, G, values, jac if jacobian else None, live)
            self._each_chunk(B, chunk, workers, slots, (1, 1), X.dtype, work)
            return values, (jac if jacobian else None)
        args = (self.instr, self.pool, self.divisor, live, self.const_slots,
                self.const_vals, self.in_slots, self.out_slots, X, values, jac, jacobian,
                chunk)
        if workers > 1 and kernel_ready(run_points_parallel):
            with parallel_launch():
                run_points_parallel(*args, workers, self.nslots)
        else:
            scratch = _scratch(2 * self.nslots * chunk, X.dtype)
            run_points(*args, scratch[:self.nslots * chunk],
                       scratch[self.nslots * chunk:2 * self.nslots * chunk])
        return values, (jac if jacobian else None)

    def _run_driver(self, X, values, jac, jacobian, live):
        """A program with users' compiled ops: their driver, the points split between
        numba's thread count of Python threads (the driver releases the GIL); by Python
        while a helper compiles it (kernels/calls.py)."""
        if self.driver is None:
            self.driver = driver(self.instr, self.user_calls)
        B = X.shape[0]
        code = (self.instr, self.pool, self.divisor, live, self.const_slots, self.const_vals,
                self.in_slots, self.out_slots)
        scratch = _scratch(2 * self.nslots, X.dtype)
        V, G = scratch[:self.nslots], scratch[self.nslots:2 * self.nslots]
        runner = self.driver.runner(code + (X[:1], values[:1], jac[:1], jacobian, V, G))
        if runner is None:
            self.driver.run_in_python(*code, X, values, jac, jacobian, V, G)
            return
        run, first = runner
        workers = min(for_numba(), B)

        def work(p0, p1, V, G):
            run(*code, X[p0:p1], values[p0:p1], jac[p0:p1] if jacobian else jac, jacobian,
                V, G)
        if first:                              # (its first call compiles or loads it)
            with compile_notice(f"the driver of custom op(s) {self.driver.names}",
                                once="once per process: it calls your numba functions"):
                work(0, 1, V, G)
            if B == 1:
                return
        if workers == 1:
            work(int(first), B, V, G)
            return
        cuts = np.linspace(int(first), B, workers + 1).astype(int)
        on_threads(workers, lambda w: work(cuts[w], cuts[w + 1], np.empty(self.nslots, X.dtype),
                                           np.empty(self.nslots, X.dtype)))

    def tangents(self, X, S):
        """Forward mode: values (B, outputs) at the points X (B, inputs) and their
        tangents (B, outputs, K) in the K directions S (B or 1, inputs, K: one set per
        point, or one for all), from one pass over the program carrying K lanes."""
        if self.user_calls is not None:
            raise RuntimeError("autotape internal error: forward mode through a user's "
                               "compiled op (it has a VJP only); please report this")
        B, K = X.shape[0], S.shape[2]
        values = np.empty((B, self.out_slots.size), X.dtype)
        tangents = np.empty((B, self.out_slots.size, K), X.dtype)
        shared = S.shape[0] == 1 and K <= MAX_LANES     # (one set for all points)
        whole = self._generated(X.dtype, K) if shared else None
        if whole is not None:
            directions = np.ascontiguousarray(S[0].T, np.float64)
            self._each_slice(B, lambda a, b: whole.run_tangent(
                X[a:b], self._table(), directions, values[a:b], tangents[a:b]))
            return values, tangents
        if not (shared and self._generating(X.dtype, ("cpu", "tangent", K))) and \
                self._loop_ready(X.dtype, "tangent" if self._most_points(B, K) == 1
                                 else "tangent_points"):
            segments = self.segments
            slots = segments.size if segments is not None else self.nslots
            chunk = self._most_points(B, K)
            workers = min(for_numba(), (B + chunk - 1) // chunk)

            def work(V, D, p0, C):
                if segments is not None:
                    segments.tangents(X, S, p0, C, V, D, values, tangents)
                else:
                    self._loop_tangent_chunk(X, S, p0, C, V, D, values, tangents)
            self._each_chunk(B, chunk, workers, slots, (1, K), X.dtype, work)
            return values, tangents
        chunk = 1 if B == 1 else chunk_size(self.nslots * (1 + K) // 2)
        workers = min(for_numba(), (B + chunk - 1) // chunk)
        args = (self.instr, self.pool, self.divisor, self.const_slots, self.const_vals,
                self.in_slots, self.out_slots, X, S, values, tangents, chunk)
        if workers > 1 and kernel_ready(run_tangents_parallel):
            with parallel_launch():
                run_tangents_parallel(*args, workers, self.nslots)
        elif kernel_ready(run_tangents):
            n = self.nslots * chunk
            scratch = _scratch((1 + K) * n, X.dtype)
            run_tangents(*args, scratch[:n], scratch[n:(1 + K) * n])
        else:                                  # (J @ S by reverse sweeps meanwhile)
            values, jac = self.run(X, jacobian=True)
            return values, np.matmul(jac, S).astype(X.dtype, copy=False)
        return values, tangents

    # -- the whole program as generated code (codegen.py) ----------------------------------

    def compiled_code(self):
        """What compiled code the calls run now besides the interpreter: "generated"
        (the whole program, codegen.py), "loop body" (kernels/loops.py) or None."""
        if self.codegen and any(isinstance(k, tuple) and k[0] == "cpu" for k in self.codegen):
            return "generated"
        return "loop body" if self.loop_kernels is not None else None

    def _generating(self, dtype, kind=("cpu", "reverse")):
        """Whether this program runs as generated code of ``kind`` once it is compiled
        (float64, a loop found, codegen takes it, no segment budget asked for): its loop
        body alone is then never compiled for it."""
        if dtype != np.float64 or self.loop is None or self.segments is not None or \
                os.environ.get(GENERATED_ENV) == "0" or not codegen.supported(self) or \
                (kind[1] == "reverse" and self._wide_body()):
            return False
        return self.codegen.get(kind) is not False

    def _wide_body(self):
        """Whether the loop body's instructions are elementwise and average
        GENERATED_CELLS_MAX cells or more: its element loops then run a gradient faster
        than generated scalar code. A gather or a scatter keeps the generated code: there
        it is free (each cell a local), in element loops a pass of its own (Lorenz-96
        written cell by cell for at.jit, 20-cell instructions, 6 of 20 gathers: 38 us
        generated, 83 in element loops)."""
        body = self.instr[self.loop[0]:self.loop[0] + self.loop[1]]
        elementwise = (body[:, I_OP] >= 0) | (body[:, I_OP] == COPY)
        return bool(elementwise.all()) and body[:, I_N].mean() >= GENERATED_CELLS_MAX

    def _generated(self, dtype, lanes=0):
        """The generated module (reverse: run_values and run_reverse; with ``lanes``,
        run_tangent), once compiled; None meanwhile, or where its code would be too
        long (then False is kept: the loop body runs it). As ``_loop_ready``: from the
        COMPILE_LOOP_AFTER-th call on it compiles beside the calls."""
        kind = ("cpu", "tangent", lanes) if lanes else ("cpu", "reverse")
        found = self.codegen.get(kind) if self.codegen else None
        if found and dtype == np.float64 and self.segments is None:
            return found      # (compiled: what _generating checks held when it was found)
        if not self._generating(dtype, kind):
            return None
        if found is not None:
            return found
        self.calls += 1
        wait = not background.enabled()
        if not wait and (self.calls < COMPILE_LOOP_AFTER or not self._may_look()):
            return None
        written = self.codegen.get(("source",) + kind)   # (writing it takes ~2 ms: once)
        if written is None:
            plan = codegen.plan(self)
            try:
                written = codegen.tangent_source(plan, lanes, "cpu") if lanes else \
                    codegen.reverse_source(plan, "cpu")
            except codegen.Unsupported:
                self.codegen[kind] = False
                return None
            self.codegen[("source",) + kind] = written
        found = codegen.cpu_module(*written, wait=wait, what=self.what)
        if found is not None:
            self.codegen[kind] = found
        else:
            self._looked_in_vain()
        return found

    def _one_point(self):
        """(generated module, its table, scratch sizes) where generated code runs this
        program and is compiled; else None."""
        kept = self.codegen.get("one_point") if self.codegen else None
        if kept is None:
            whole = self.codegen.get(("cpu", "reverse")) if self.codegen else None
            if not whole or self.user_calls is not None:
                return None
            plan = codegen.plan(self)
            ck, sg = plan.scratch("cpu")
            kept = self.codegen["one_point"] = (whole, plan.table, max(1, ck), max(1, sg),
                                                getattr(whole, "run_one", None))
        return kept if self.segments is None else None

    def values_at(self, x):
        """The output values (1, outputs) at one point x (its inputs' float64 elements,
        contiguous) by the generated code straight away (a small model's call: ~1 us of
        Python beside its kernel, where ``run`` takes ~3), or by the compiled loop
        body's driver (``_loop_point``); None where neither is compiled (yet) or runs
        this program."""
        kept = self._one_point()
        values = np.empty((1, self.out_slots.size))
        if kept is None:
            return values if self._loop_at(x, values, None) else None
        kept[0].run_values(x.reshape(1, x.size), kept[1], values)
        return values

    def gradient_at(self, x, grad):
        """The value of a one-output program at one point x (its inputs' float64
        elements, contiguous), its gradient written into ``grad`` (as many float64
        elements, contiguous, any shape), in one call of the generated code (~1 us of
        Python beside the kernel, where ``run`` takes ~5) or of the compiled loop body's
        driver (``_loop_point``); None where that does not run it. The caller makes
        ``grad``: numba's boxing of an array it returns costs ~0.7 us. A ``grad`` that
        is not C-contiguous gives None (its reshape would be a copy, the gradient
        written into that copy and lost)."""
        if not grad.flags.c_contiguous:
            return None
        kept = self._one_point()
        if kept is None:
            value = np.empty((1, 1))
            return value[0, 0] if self.out_slots.size == 1 and \
                self._loop_at(x, value, grad) else None
        if kept[4] is None:
            return None
        _, tab, ck, sg, run_one = kept
        if x.ndim != 1:
            x, grad = x.reshape(x.size), grad.reshape(grad.size)    # (views)
        if ck + sg <= OWN_SCRATCH_MAX:
            return run_one(x, tab, grad)
        return run_one(x, tab, grad, _scratch(ck + sg, FLOAT64))  # (the thread's: fresh
                                                                  # pages cost more)

    def _loop_at(self, x, values, grad):
        """Values (and, with ``grad``, the one output's gradient) at one point by the
        loop body's driver (kernels/loops.py ``run``) once it is compiled, its other
        arguments made once (``_loop_point``): through ``run`` they and the checks cost
        ~25 us of Python a call (Burgers' 300 steps: ~250 us of kernel). False where
        the body does not run this call yet."""
        point = self._loop_point(grad is not None)
        if point is None:
            return False
        kernel, head, middle, tail = point
        n = self.nslots
        scratch = _scratch(2 * n, FLOAT64)
        kernel(*head, x.reshape(1, x.size), values,
               grad.reshape(1, 1, grad.size) if grad is not None else middle[0],
               *middle[1:], scratch[:n], scratch[n:2 * n], *tail)
        return True

    def _loop_point(self, jacobian):
        """(the body's driver, its arguments before the point, between the results and
        the scratch (for values only: the empty Jacobian first), after the scratch) for
        ``_loop_at``: where this program's loop body runs its calls at one point and is
        compiled, as ``run`` finds them (float64, no segments, no users' ops, not taken
        by codegen; for gradients its reach marks kept); else None: ``run`` takes it."""
        kept = self.loop_point
        if kept is not None and jacobian in kept:
            return kept[jacobian]
        ready = self.loop_ready
        if ready is None or (FLOAT64, "reverse") not in ready or self.segments is not None \
                or self.user_calls is not None or self._generating(FLOAT64):
            return None
        live = self.live if jacobian else np.zeros((0, 0), np.uint8)
        if live is None:
            return None                   # (kept by run() when small enough)
        start, period, repeats, delta = self.loop
        head = (self.instr, self.pool, self.divisor, live, self.const_slots,
                self.const_vals, self.in_slots, self.out_slots)
        compiled = np.array(self._loop_reached_by(live) if jacobian else [], np.bool_)
        middle = ((), True, compiled, 0, 1, 1) if jacobian else \
            (np.empty((0, 0, 0)), False, compiled, 0, 1, 1)
        tail = (start, start + period * repeats, delta, repeats, self._table_base(),
                *self.loop_slots)
        point = (self.loop_kernels[0][4], head, middle, tail)
        self.loop_point = {**(kept or {}), jacobian: point}
        return point

    def _table(self):
        return codegen.plan(self).table

    def _run_generated(self, whole, X, values, jac, jacobian):
        plan = codegen.plan(self)
        tab = plan.table
        ck, sg = plan.scratch("cpu")
        if X.shape[0] == 1:         # one point: no slices, no threads (~5 us of a call)
            if jacobian:            # (the thread's scratch: fresh pages cost more)
                buf = _scratch(max(1, ck) + max(1, sg), np.dtype(np.float64))
                whole.run_reverse(X, tab, values, jac, buf[:max(1, ck)], buf[max(1, ck):])
            else:
                whole.run_values(X, tab, values)
            return
        # points in runs whose kept states fit GENERATED_SCRATCH_BYTES
        run = max(1, GENERATED_SCRATCH_BYTES // max(8 * (ck + sg), 1))

        def work(a, b):
            if not jacobian:
                whole.run_values(X[a:b], tab, values[a:b])
                return
            n = min(run, b - a)
            CK, SG = np.empty(max(1, ck * n)), np.empty(max(1, sg * n))
            for c in range(a, b, run):
                d = min(b, c + run)
                whole.run_reverse(X[c:d], tab, values[c:d], jac[c:d],
                                  CK[:max(1, ck * (d - c))], SG[:max(1, sg * (d - c))])
        self._each_slice(X.shape[0], work)

    def _each_slice(self, B, work):
        """``work(a, b)`` for slices of the B points, one per worker thread (the
        generated kernels release the GIL)."""
        workers = min(for_numba(), max(1, B // GENERATED_SLICE))
        cuts = np.linspace(0, B, workers + 1).astype(int)
        on_threads(workers, lambda w: work(cuts[w], cuts[w + 1]))

    def _loop_ready(self, dtype, group):
        """Whether this call runs the loop's compiled body (its kernels of ``group``:
        kernels/loops.GROUPS). From the COMPILE_LOOP_AFTER-th call on, the body is
        compiled beside the calls (kernels/background.py), which run on the interpreter
        until it is ready; a checkpointed loop (only the compiled body runs in segments)
        or ``AUTOTAPE_BACKGROUND_COMPILE=0`` waits for it."""
        if self.loop is None:
            return False
        self.loop_wanted.add(group)
        ready = self.loop_ready
        if ready is not None and (dtype, group) in ready:
            return True
        self.calls += 1
        wait = self.segments is not None or not background.enabled()
        if not wait and (self.calls < COMPILE_LOOP_AFTER or not self._may_look()):
            return False
        if self._compile_loop(dtype, group, wait):
            return True
        self._looked_in_vain()
        return False

    def _may_look(self):
        """Whether this call looks for code compiling beside the calls: at most once
        every LOOK_EVERY seconds after a look that found it not ready (a look that finds
        it switches the program for good; a later process finds every kind on disk at
        its first calls)."""
        return time.monotonic() >= self.next_look

    def _looked_in_vain(self):
        self.next_look = time.monotonic() + LOOK_EVERY

    def _compile_loop(self, dtype, group, wait):
        code = self._loop_code(dtype, group, wait)
        if code is None:
            return False
        kernels = loop_kernels(*code, dtype, group, wait=wait, what=self.what)
        if kernels is None:
            return False
        self.loop_kernels = kernels
        self.loop_ready = (self.loop_ready or frozenset()) | {(dtype, group)}
        return True

    def _loop_code(self, dtype, group, wait):
        """The loop body's (key, source) (kernels/loops.loop_source), written once per
        program; unless ``wait``, on a thread beside the calls (Gray-Scott's 24 x 24 step:
        ~0.2 s of Python, which stalled the call that asked for it), which then starts
        the body's compile (or loads it from disk): None until the source is written.
        (A daemon: a program that ends meanwhile does not wait for it.)"""
        code = self.loop_code
        if isinstance(code, concurrent.futures.Future) and not code.done() and \
                code.pid != os.getpid():
            self.loop_code = code = None        # (a forked child: the parent's writing
        if code is None:                        # thread does not exist here)
            written = concurrent.futures.Future()
            written.pid = os.getpid()
            with _SOURCE_LOCK:
                if self.loop_code is None:
                    self.loop_code = written
                code = self.loop_code
            if code is written:
                def write():
                    try:
                        written.set_result(self._loop_source(dtype, group, wait))
                    except BaseException as error:      # (raised by the call that
                        written.set_exception(error)    # takes the result)
                if wait:
                    write()
                else:
                    threading.Thread(target=write, name="autotape-source",
                                     daemon=True).start()
        if isinstance(code, concurrent.futures.Future):
            if not wait and not code.done():
                return None
            self.loop_code = code = code.result()
        return code

    def _loop_source(self, dtype, group, wait):
        end = self.loop[0] + self.loop[1] * self.loop[2]
        code = loop_source(self.instr, self.loop, self.const_slots, self._read_after(end),
                           self.loop_table, self.pool, self.divisor,
                           self.loop[0] + np.nonzero(self._unswept())[0],
                           self._active_before_loop(), self.const_vals)
        if not wait:
            loop_kernels(*code, dtype, group, wait=False, what=self.what)
        return code

    def _active_before_loop(self):
        """Per slot, whether its value depends on the inputs, marked for the
        instructions before the loop (what a settling loop compares: kernels/settling.py);
        None for a loop with more than SETTLE_BEFORE_MAX instructions before it (marked
        in Python: the loop then never settles)."""
        start = self.loop[0]
        if start > SETTLE_BEFORE_MAX:
            return None
        active = np.zeros(self.nslots + 1, bool)
        active[self.in_slots] = True
        for q in range(start):
            if any(active[s:s + n].any() for s, n in read_runs(self.instr, self.pool, q,
                                                                adjoint_only=True)):
                out = int(self.instr[q, I_OUT])
                active[out:out + int(self.instr[q, I_N])] = True
        return active

    def wait_compiled(self, dtype=np.float64):
        """Compile (or load) now what later calls would run interpreted until a compile
        beside them finished: the generated program (its reverse kernels and forward
        mode with a lane per input), or the loop body's kernels for what the calls so
        far have asked for (one point or chunks, gradients or forward mode; gradients
        at one point always)."""
        if self._generating(np.dtype(dtype)):
            plan = codegen.plan(self)
            lanes = self.in_slots.size
            kinds = [(("cpu", "reverse"), lambda: codegen.reverse_source(plan, "cpu"))]
            if lanes <= MAX_LANES:           # (more: tangents() never uses it)
                kinds.append((("cpu", "tangent", lanes),
                              lambda: codegen.tangent_source(plan, lanes, "cpu")))
            for kind, make in kinds:
                try:
                    key, source = make()
                except codegen.Unsupported:
                    self.codegen[kind] = False          # (its loop body, below)
                    continue
                found = codegen.cpu_module(key, source, wait=True, what=self.what)
                codegen.compile_kernels(found)
                self.codegen[kind] = found
            if all(self.codegen.get(kind) is not False for kind, _ in kinds):
                return
        if self.loop is not None and self.user_calls is None:
            # what the calls so far have asked for (a benchmark's warm-up calls): a
            # large body's forward-mode kernels take most of its minutes to compile
            for group in LOOP_GROUPS:
                if group == "reverse" or group in self.loop_wanted:
                    self._compile_loop(np.dtype(dtype), group, "every")

    def _most_points(self, B, K=None, slots=None):
        """The most points a chunk of the compiled loop's gradient (or, with K, of its
        forward mode's K lanes a value) takes for B points: at 1 (a program too large
        for more), its chunk-of-points kernels are never run, so never compiled (they
        would double a large body's minutes). (1-D heat, 3.6M slots, 64 points: one at
        a time 152 ms for gradients, 517 ms for forward mode; in chunks of 4, 318 and
        854 ms.) Fewer than POINTS_CHUNK_MIN points fill too little of a vector to pay
        for the chunk's layout (and a chunk's loop stops only once all its points have
        settled, kernels/settling.py): one at a time then; so too for a body of more
        than POINTS_BODY_MAX instructions a repetition (its chunk kernels would take
        numba many minutes to compile)."""
        if self.loop is not None and self.loop[1] > POINTS_BODY_MAX:
            return 1
        if slots is None:
            slots = self.segments.size if self.segments is not None else self.nslots
        if K is not None:
            slots = slots * (1 + K) // 2
        chunk = 1 if B == 1 else chunk_size(slots, least=1)
        return chunk if chunk >= POINTS_CHUNK_MIN else 1

    def _each_chunk(self, B, chunk, workers, slots, lanes, dtype, work):
        """``work(V, W, p0, C)`` for the chunks of B points, spread over ``workers``
        Python threads (the compiled parts release the GIL), each with scratch V and W
        of lanes[0] and lanes[1] times ``slots`` per point."""
        if B == 1:
            n = slots
            scratch = _scratch((lanes[0] + lanes[1]) * n, dtype)
            work(scratch[:lanes[0] * n], scratch[lanes[0] * n:(lanes[0] + lanes[1]) * n], 0, 1)
            return
        chunks = (B + chunk - 1) // chunk

        def run(w):
            V = np.empty(lanes[0] * slots * chunk, dtype)
            W = np.empty(lanes[1] * slots * chunk, dtype)
            for t in range(w, chunks, workers):
                work(V, W, t * chunk, chunk)
        on_threads(workers, run)

    def _loop_tangent_chunk(self, X, S, p0, C, V, D, values, tangents):
        """Forward mode for points p0 .. p0 + C - 1 of a program with a loop, by the one
        driver (kernels/driver.py) over ``_loop_tangents``."""
        _DRIVE_TANGENTS(self, self.const_slots, self.const_vals, self.in_slots,
                        self.out_slots, X, S, values, tangents, p0, C, 0, C, V, D)

    def _read_after(self, end):
        return np.concatenate([_read_slots(self.instr, self.pool, end), self.out_slots])

    def _loop_reached_by(self, live):
        """For each output, whether the compiled body may sweep it (``_loop_reached``:
        found once per program, a pass over every instruction)."""
        start, period, repeats, _ = self.loop
        end = start + period * repeats
        known = self.reached
        if known is None or known[0] is not live:
            known = self.reached = (live, [self._loop_reached(live[o], start, end)
                                           for o in range(self.out_slots.size)])
        return known[1]

    def _table_base(self):
        """The slot where the loop's table of per-repetition constants starts (0: none)."""
        return 0 if self.loop_table is None else self.loop_table[0]

    def _run_loop(self, X, chunk, workers, values, jac, jacobian, live, compiled):
        """The points in chunks of ``chunk`` by the body's own driver (``run`` of its
        module, kernels/loops.py: the interpreter before and after the loop, the body
        between, both ways, for every chunk in one call), each of ``workers`` threads
        taking every workers-th chunk with scratch of its own."""
        start, period, repeats, delta = self.loop
        one = chunk == 1
        run = self.loop_kernels[0 if one else 1][4]
        B = X.shape[0]
        chunks = (B + chunk - 1) // chunk
        args = (self.instr, self.pool, self.divisor, live, self.const_slots, self.const_vals,
                self.in_slots, self.out_slots, np.ascontiguousarray(X), values, jac,
                jacobian, np.array(compiled, np.bool_))
        tail = (start, start + period * repeats, delta, repeats, self._table_base(),
                *self.loop_slots) + (() if one else (chunk,))
        n = self.nslots * chunk
        if workers == 1:
            scratch = _scratch(2 * n, X.dtype)
            run(*args, 0, chunks, 1, scratch[:n], scratch[n:2 * n], *tail)
            return

        on_threads(workers, lambda w: run(*args, w, chunks, workers, np.empty(n, X.dtype),
                                          np.empty(n, X.dtype), *tail))

    def _unswept(self):
        """Per instruction of the loop's first repetition: whether no output's reverse
        sweep reaches it in any repetition (an adaptive solve's step control, frozen,
        whose error norms pass nothing back). The body's reverse leaves them out: their
        adjoints are zero, and zero times an inf partial would make nan."""
        if self.loop_unswept is None:
            start, period, repeats, _ = self.loop
            reached = reached_by_any(self.instr, self.pool, self.nslots, self.out_slots)
            self.loop_unswept = ~reached[start:start + period * repeats].reshape(
                repeats, period).any(axis=0)
        return self.loop_unswept

    def _loop_reached(self, live, start, end):
        """Whether the compiled body may sweep for this output: every instruction of
        the loop the body sweeps (all but ``_unswept``) is reached in every repetition,
        or passes nothing back (a comparison, a step function)."""
        repeats = (end - start) // self.loop[1]
        skipped = (live[start:end] == 0) & ~np.tile(self._unswept(), repeats)
        return not skipped.any() or bool(passes_nothing_mask(
            self.instr[start:end, I_OP][skipped]).all())


def _loop_tangents(lean, V, D, C, K, lane):
    """The tangents driver's hook for a program with a loop: the interpreter before and
    after it, its compiled body (values and tangents) in between."""
    start, period, repeats, delta = lean.loop
    end, count = start + period * repeats, lean.instr.shape[0]
    tangent = lean.loop_kernels[0 if C == 1 else 1][3]
    code = (lean.instr, lean.pool, lean.divisor)
    for q0, q1 in ((0, start), (end, count)):
        if q0 == end:
            tangent(V, D, delta, 0, repeats, K, 0, lean._table_base(),
                    *(() if C == 1 else (C,)))
        if C == 1:
            forward_range(*code, V, q0, q1)
            tangent_range(*code, V, D, K, q0, q1)
        else:
            forward_range_points(*code, V, C, q0, q1)
            tangent_range_points(*code, V, D, C, K, q0, q1)


_DRIVE_TANGENTS = tangents_driver(_loop_tangents, in_python=True)[0]


def _user_call(tape, row):
    """What the driver needs of a user's compiled op at ``row``: (forward, vjp, name,
    operand shapes, output shape)."""
    op = tape.customs[row]
    shapes = [tuple(tape.shape(r)) for r in tape.row(row).operands]
    out_shape = tuple(tape.shape(row))
    # its vjp called once here, from Python, so that one returning the wrong thing is
    # told in the op's words (compiled into the driver, it is a numba typing error)
    op.cotangents([np.zeros(shape) for shape in shapes], np.zeros(out_shape),
                  np.zeros(out_shape))
    return (op.forward, op.vjp, op.name, shapes, out_shape)


def passes_nothing_mask(ops):
    """Which opcodes pass nothing back (elementwise.passes_nothing, on an array)."""
    return np.array([passes_nothing(int(op)) for op in ops], bool)


def _compression(lean):
    n = lean.in_slots.size
    if n < COMPRESS_MIN_INPUTS or lean.instr.shape[0] > COMPRESS_MAX_INSTRUCTIONS:
        return None
    pattern = dependency_pattern(lean)
    if pattern is None:
        return None
    colour = column_colours(pattern)
    lanes = int(colour.max(initial=-1)) + 1
    if 2 * lanes > n:
        return None
    seeds = colour_seeds(colour)
    rows = np.repeat(np.arange(pattern.shape[0]), np.diff(pattern.indptr))
    return seeds, rows, pattern.indices, colour[pattern.indices]


def _read_slots(instr, pool, first):
    """Every slot that instructions from ``first`` on read (operands and pool sources)."""
    reads = [np.arange(s, s + n) for q in range(first, instr.shape[0])
             for s, n in read_runs(instr, pool, q)]
    return np.concatenate(reads) if reads else np.zeros(0, np.int64)


def _loop_slots(instr, loop):
    """[first, last): the slots of a loop's repetitions, whose adjoints its kernels
    clear (the calls zero the others'). A repetition's slots can end in some its body
    never writes (a per-repetition constant's, read from a table once compiled), and
    the code after the loop may write into the last repetition's: the range ends there,
    else those adjoints would never be zeroed (stale terms from the last call: a wrong
    gradient). None where code around the loop writes amid the repetitions' values."""
    start, period, repeats, delta = loop
    body = instr[start:start + period]
    first = int(body[:, I_OUT].min())
    last = first + repeats * delta
    around = np.concatenate([instr[:start], instr[start + period * repeats:]])
    out, n = around[:, I_OUT], around[:, I_N]
    inside = (out < last) & (out + n > first)
    if inside.any():
        cut = int(out[inside].min())
        if cut < (repeats - 1) * delta + int((body[:, I_OUT] + body[:, I_N]).max()):
            return None
        last = cut
    return first, last


def _scratch(size, dtype):
    """The calling thread's scratch for one-thread runs, reused from call to call (fresh
    pages cost more to touch than a small program's arithmetic) up to KEEP_PROGRAM_SCRATCH_BYTES."""
    state = here()
    buf = state.program_scratch
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = np.empty(size, dtype)
        state.program_scratch = buf if buf.nbytes <= KEEP_PROGRAM_SCRATCH_BYTES else None
    if POISON_SCRATCH:
        buf.fill(np.nan)                   # (tests: a value read before written is nan)
    return buf
