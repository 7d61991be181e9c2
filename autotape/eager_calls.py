"""A compiled function's calls while its kernels compile: f run as eager code.

``at.compile`` replays a recording with the lean program's kernels (kernels/program.py)
and the tape replay's (kernels/replay.py): about a minute of compiling on a cold cache.
Until they are ready (compiled beside the calls by a helper process,
kernels/background.py), a call runs f itself on tensors and takes its derivatives with
the engine, whose own sweep has a Python tier (engine.py): no call waits for numba.

The answers are f's at the call's arguments, as a replay's are: a compiled function
records again where a decision taken in Python would differ, or where an array f
reads has changed (compile.py), so running f again computes what the replay would. The
numbers are equal within rounding (numpy's ufuncs where the kernels call libm), and
through ops whose derivative is zero everywhere (``sign``, ``floor``) zeros pass back
as on the engine's Python tier (docs/first-run.md). Only f's Python side effects show:
f runs at each such call, where a replay runs only its recording.
"""
import gc
import os

import numpy as np

from . import engine
from .grad_mode import enable_grad
from .kernels import background
from .kernels.cache import KERNELS, cache_dir, on_disk
from .program import KERNELS_JOB, kernels_beside
from .pytree import flatten
from .tape import tape_of_its_own
from .tensor import F64, Tensor, new_leaf
from .thread_state import here

# A helper compiles the kernels compiled functions' calls need, all at once (the warmup's
# steps for compiled functions, then its mark in the cache), and calls switch when it is
# done, or when these are on disk: what a call at one point needs. Until the others are
# there too, forward mode takes reverse sweeps and vmap's points run on one thread
# (program.kernel_ready), and a recording on the tape path stays eager code.
# (forward mode: by reverse meanwhile)
ONE_POINT = ("lower", "close_slot_gaps", "live_sets", "reached_by_any", "run_points")
TAPE_PATH = ("forward_replay", "replay_and_sweep")   # (for recordings it does not lower)
CALLS = ("forward_range", "reverse_range")   # (a program calling users' numba functions:
                                             # their driver's, compiled beside, kernels/calls.py)
_READY_MARK = "compiled-functions-ready"
_ready = set()        # what is ready: "one point", "tape path", "calls", or "all" (kept: it stays so)


def ready(tape_path=False, calls=False):
    """Whether compiled functions' calls run their kernels now (``tape_path``: the
    calls of a recording the lean program does not lower, which replay the tape;
    ``calls``: of a lean program that calls users' numba functions); when not, their
    compile has been started beside the calls (said once on stderr)."""
    if engine.FORCE_PYTHON_TIER[0]:
        return False
    level = "tape path" if tape_path else "calls" if calls else "one point"
    if "all" in _ready or level in _ready:
        return True
    if not background.enabled() or os.path.exists(mark_path()):
        _ready.add("all")
        return True
    names = ONE_POINT + (TAPE_PATH if tape_path else CALLS if calls else ())
    if all(k.signatures or on_disk(k) for k in KERNELS
           if k.py_func.__module__ in ("autotape.kernels.program", "autotape.kernels.replay")
           and k.py_func.__name__ in names):
        _ready.add(level)
        return True
    if kernels_beside():
        _ready.add("all")                      # done (or failed, and said so: the calls
        return True                            # then compile what they need themselves)
    return False


def wait():
    """Wait for the helper compiling compiled functions' kernels, where one runs (a
    benchmark's ``wait_compiled``)."""
    if "all" not in _ready and background.state(KERNELS_JOB) is not None:
        background.wait(KERNELS_JOB)
        _ready.add("all")


def mark_path():
    """A file the helper leaves in the cache once it has compiled every kernel that
    compiled functions' calls need on this machine (the threaded ones only with cores
    to run them)."""
    return os.path.join(cache_dir(), _READY_MARK)


def point(f, kind, args, derivative, output):
    """f run eagerly at one point: ``(targets, values, jacobian)``. The targets are what
    compile.py's recording keeps (f's outputs, each made a target by ``output``; for
    ``kind`` "hessian", its gradient), as ``(recorded, shape)``; ``values`` the
    recorded targets' elements one after another; ``jacobian`` (those elements, the
    arguments' elements) when ``derivative``, else None.

    Python's cyclic collector is paused for the call, as ``timeit`` pauses it: a call
    makes a tensor a row and frees nearly all of them by their counts, yet each
    several hundred young collections, and now and then a full one, which walks every
    object numba's import left (60-65 ms on the 2-core VM, a call of its own). What
    the collector would have found is found at its first collection after the call."""
    state = here()
    quiet, state.eager_call = state.eager_call, True
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        return _point(f, kind, args, derivative, output)
    finally:
        state.eager_call = quiet
        if collecting:
            gc.enable()


def _point(f, kind, args, derivative, output):
    dtype = args[0].dtype
    with tape_of_its_own(), enable_grad():
        leaves = [new_leaf(a.copy() if a.ndim else float(a), a.shape, dtype)
                  .requires_grad_() for a in args]
        outs, _ = flatten(f(*leaves))
        if not outs or any(o is None for o in outs):
            raise TypeError("compile: f must return a Tensor, an array, or a tuple / list "
                            f"/ dict of them, but returned {outs!r}")
        targets = [output(o, leaves) for o in outs]
        if kind == "hessian":
            out = targets[0]
            if len(targets) != 1 or not isinstance(out, Tensor) or out.size != 1:
                raise RuntimeError("hessian: f must return a single scalar Tensor")
            grads = engine.grad(out, leaves, create_graph=True, allow_unused=True,
                                materialize_grads=True) if out.requires_grad else \
                [None] * len(leaves)
            targets = [output(g, leaves, zeros_like=leaf) for g, leaf in zip(grads, leaves)]
        recorded = [t for t in targets if isinstance(t, Tensor)]
        values = np.concatenate([np.asarray(t._value, np.float64).reshape(-1)
                                 for t in recorded]) if recorded else np.zeros(0)
        jac = _jacobian(recorded, leaves, values.size) if derivative else None
    return [(isinstance(t, Tensor), tuple(t.shape)) for t in targets], values, jac


def _jacobian(recorded, leaves, m):
    """d (the recorded targets' elements) / d (the leaves' elements): one sweep with a
    lane per element (a lane at a time on the engine's Python tier)."""
    n = sum(leaf.size for leaf in leaves)
    if not m:
        return np.zeros((0, n))
    seeds, start = [], 0
    for t in recorded:
        block = np.zeros((m, t.size))
        block[start:start + t.size] = np.eye(t.size)
        seeds.append(new_leaf(block.reshape((m,) + tuple(t.shape)), (m,) + tuple(t.shape),
                              F64))
        start += t.size
    live = [k for k, t in enumerate(recorded) if t.requires_grad]
    if not live:
        return np.zeros((m, n))
    grads = engine.grad([recorded[k] for k in live], leaves, [seeds[k] for k in live],
                        is_grads_batched=True, allow_unused=True, materialize_grads=True)
    return np.concatenate([np.asarray(g._value, np.float64).reshape(m, -1) for g in grads],
                          axis=1)


class RecordAgain(RuntimeError):
    """f run eagerly returned outputs of another structure (recorded or constant, or
    their shapes) than its recording at these argument shapes: a decision taken in
    Python from values differs, so compile.py records f again."""


class EagerProgram:
    """A recording's stand-in for its lean program while the kernels compile: the same
    ``run`` and ``tangents``, computed by running f eagerly at each point (``point``).
    ``targets`` are the recording's (compile.py's ``("row" | "const", value, shape)``),
    ``output`` how the recording made f's outputs targets."""
    user_calls = None                          # (no users' compiled ops to call)

    def __init__(self, f, kind, targets, shapes, output):
        self.f, self.kind, self.shapes, self.output = f, kind, shapes, output
        self.structure = [(k == "row", tuple(shape)) for k, _, shape in targets]
        self.out_slots = np.arange(sum(int(np.prod(shape)) for k, _, shape in targets
                                       if k == "row"))

    def run(self, X, jacobian=False):
        """Values ``(B, outputs)`` and, with ``jacobian``, ``(B, outputs, inputs)`` at the
        points X ``(B, inputs)``."""
        B, m = X.shape[0], self.out_slots.size
        values = np.empty((B, m))
        jac = np.empty((B, m, X.shape[1])) if jacobian else None
        for b in range(B):
            args, start = [], 0
            for shape in self.shapes:
                n = int(np.prod(shape))
                args.append(np.array(X[b, start:start + n]).reshape(shape))
                start += n
            structure, v, j = point(self.f, self.kind, args, jacobian, self.output)
            if structure != self.structure:
                raise RecordAgain(
                    f"compile: {getattr(self.f, '__name__', 'f')} returned outputs of "
                    f"another structure ({structure}) than when recorded at the same "
                    f"argument shapes ({self.structure})")
            values[b] = v
            if jacobian:
                jac[b] = j
        return values, jac

    def tangents(self, X, T):
        """Values and ``J @ T`` at the points X: T is ``(1 or B, inputs, lanes)``."""
        values, jac = self.run(X, jacobian=True)
        return values, jac @ T

    def compression(self):
        """None: its Jacobian comes whole from each point's reverse sweeps (see
        LeanProgram.compression)."""
        return None
