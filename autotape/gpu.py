"""Compiled programs evaluated on a CUDA GPU: ``autotape.func.vmap(c.grad,
device="cuda")(points)``.

A lean program (program.py) runs at B points in one kernel launch
(kernels/gpu.py): one thread per point, forward and reverse fused. Points given as a
host array come back as host arrays; points given as a device array (anything with
``__cuda_array_interface__``: numba device arrays, CuPy arrays, torch CUDA tensors)
stay on the device, and so do the results. The program's arrays are copied to the
device once and kept with it.

Needs ``numba.cuda``: install the extra ``.[cuda]`` (NVIDIA's ``numba-cuda`` with the
CUDA 12 wheels) on a machine with an NVIDIA GPU, or set ``NUMBA_ENABLE_CUDASIM=1`` to
run the same kernels in numba's simulator (slow: for tests).
"""
import importlib
import math
import os
import sys
import threading

import numpy as np

from . import codegen
from .kernels.program import live_sets
from .tuning import GENERATED_THREADS, INTERPRETER_THREADS, MAX_LANES, SCRATCH_BYTES

__all__ = ["run_points", "run_tangents", "explain_gpu", "is_device_array", "as_device",
           "cuda_module"]



def cuda_module():
    """``numba.cuda``, usable here, or a RuntimeError saying what to install."""
    if _CUDA:
        return _CUDA[0]
    try:
        cuda = importlib.import_module("numba.cuda")   # (optional: imported on demand)
    except ImportError as e:
        raise RuntimeError("autotape: the GPU needs numba.cuda: pip install "
                           "'autotape[cuda]' (NVIDIA's numba-cuda with the CUDA 12 "
                           f"wheels) ({e})") from None
    except Exception as e:                     # (numba-cuda 0.30 with numpy 2.5: no
        raise RuntimeError(                    #  np.row_stack)
            f"autotape: numba.cuda failed to import ({type(e).__name__}: {e}): a "
            f"numba-cuda release older than this numpy ({np.__version__})? Install a "
            f"numba-cuda that supports it, or a numpy it supports") from e
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if not simulated and not cuda.is_available():
        raise RuntimeError("autotape: no CUDA GPU is available (numba.cuda.is_available() "
                           "is False): install the extra .[cuda] (numba-cuda with the CUDA "
                           "12 wheels) on a machine with an NVIDIA GPU and driver, or set "
                           "NUMBA_ENABLE_CUDASIM=1 to run the kernels in numba's simulator")
    _CUDA.append(cuda)
    return cuda


_CUDA = []                  # numba.cuda once found usable (a check per call costs ~10 us)


def is_device_array(a):
    """Whether a lives on a CUDA device (it has ``__cuda_array_interface__``; in the
    simulator, a simulated device array)."""
    if hasattr(a, "__cuda_array_interface__"):
        return True
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and not isinstance(
            a, (np.ndarray, np.generic, int, float, list, tuple)):
        simulator = importlib.import_module("numba.cuda.simulator.cudadrv.devicearray")
        return bool(simulator.is_cuda_ndarray(a))
    return False


def as_device(a):
    """A device array of a's (a view: no copy, no trip through the host)."""
    cuda = cuda_module()
    if cuda.devicearray.is_cuda_ndarray(a):   # numba's own (wrapping costs ~20 us)
        return a
    if hasattr(cuda, "as_cuda_array"):
        return cuda.as_cuda_array(a)
    return a                                   # (the simulator's own arrays)


def run_points(lean, X, jacobian, shapes=None):
    """Values (B, outputs) and, with ``jacobian``, d output / d input (B, outputs,
    inputs) of the lean program at the points X (B, inputs), on the GPU: host arrays
    for a host X, device arrays for a device X (``shapes``: the shapes to hand those
    out in, the same elements). The program runs as a kernel written for it
    (codegen.py); one it cannot write (``explain_gpu`` says why) runs on the
    instruction interpreter kernel."""
    cuda = cuda_module()
    if lean.user_calls is not None:
        raise ValueError("autotape: a program calling numba-compiled custom ops runs on "
                         "the CPU only (their functions are CPU code)")
    on_device, Xd = _points(cuda, X)
    B, outs, ins = Xd.shape[0], lean.out_slots.size, lean.in_slots.size
    state = _state(lean)
    values = _result(state, cuda, "values", (B, outs))
    jac = _result(state, cuda, "jacobian", (B, outs, ins)) if jacobian else \
        _result(state, cuda, "no jacobian", (1, 1, 1))     # (never handed out)
    try:
        plan = codegen.plan(lean)
        kernels = _generated(state, ("cuda", "reverse"), lambda: codegen.reverse_source(plan))
    except codegen.Unsupported:
        _interpret(lean, cuda, Xd, values, jac, jacobian)
    else:
        tab = _table(state, cuda, plan)
        per_point = plan.bytes_per_point() if jacobian else 0
        step = max(1, min(B, SCRATCH_BYTES // max(per_point, 1)))
        ck, sg = plan.scratch("cuda")
        CK = _scratch(state, cuda, "checkpoints", max(1, ck * step))
        SG = _scratch(state, cuda, "segment", max(1, sg * step))
        for p0 in range(0, B, step):
            p1 = min(B, p0 + step)
            blocks = max(1, math.ceil((p1 - p0) / GENERATED_THREADS))
            # (one launch: the arrays themselves; a slice costs ~40 us of host time)
            X_, v_, j_ = (Xd, values, jac) if p1 - p0 == B else \
                (Xd[p0:p1], values[p0:p1], jac[p0:p1])
            if jacobian:
                kernels.run_reverse[blocks, GENERATED_THREADS](X_, tab, v_, j_, CK, SG)
            else:
                kernels.run_values[blocks, GENERATED_THREADS](X_, tab, v_)
    return _hand_out(on_device, (values, jac if jacobian else None), shapes)


def run_tangents(lean, X, S, shapes=None):
    """Forward mode on the GPU: values (B, outputs) and tangents (B, outputs, K) in
    the K directions S (K, inputs), each thread carrying its K lanes in registers.
    Host or device arrays, and ``shapes``, as ``run_points``."""
    cuda = cuda_module()
    if lean.user_calls is not None:
        raise ValueError("autotape: a program calling numba-compiled custom ops runs on "
                         "the CPU only (their functions are CPU code)")
    plan = codegen.plan(lean)             # (raises Unsupported: the caller reverses)
    K = S.shape[0]
    if K > MAX_LANES:
        raise codegen.Unsupported(f"{K} forward-mode lanes (at most {MAX_LANES} "
                                  f"fit in registers)")
    on_device, Xd = _points(cuda, X)
    B, outs = Xd.shape[0], lean.out_slots.size
    state = _state(lean)
    kernels = _generated(state, ("cuda", "tangent", K),
                         lambda: codegen.tangent_source(plan, K))
    values = _result(state, cuda, "values", (B, outs))
    tangents = _result(state, cuda, "tangents", (B, outs, K))
    if B:
        kernels.run_tangent[max(1, math.ceil(B / GENERATED_THREADS)), GENERATED_THREADS](
            Xd, _table(state, cuda, plan), _directions(state, cuda, S), values, tangents)
    return _hand_out(on_device, (values, tangents), shapes)


def explain_gpu(lean):
    """How the GPU runs this lean program: as a kernel written for it (with the memory
    a point's reverse sweep needs), or why it runs on the interpreter kernel."""
    try:
        plan = codegen.plan(lean)
        codegen.reverse_source(plan)
    except codegen.Unsupported as e:
        return f"the instruction interpreter kernel, because {e}"
    loop = "" if plan.loop is None else (
        f", its loop of {plan.loop[2]} repetitions a loop in the kernel carrying "
        f"{len(plan.carried)} values, " + (
            "every repetition's state kept" if plan.stride_for("cuda") == 1 else
            f"checkpointed every {plan.stride_for('cuda')}"))
    return (f"a kernel written for it{loop}; a point's reverse sweep keeps "
            f"{plan.bytes_per_point()} bytes")


Unsupported = codegen.Unsupported


def _points(cuda, X):
    on_device = is_device_array(X)
    Xd = as_device(X) if on_device else cuda.to_device(np.ascontiguousarray(X, np.float64))
    if Xd.dtype != np.float64 or Xd.ndim != 2:
        raise TypeError(f"autotape: GPU points must be a float64 (points, inputs) array, "
                        f"got {Xd.dtype} with shape {Xd.shape}")
    return on_device, Xd


def _state(lean):
    """What the GPU keeps with a lean program (beside codegen's plan): its generated
    modules ("cuda", kind), device arrays."""
    if lean.codegen is None:
        lean.codegen = {}
    return lean.codegen


def _generated(state, kind, source):
    """The CUDA module of ``kind``, written and imported once; raises Unsupported (kept:
    a program's code too long to compile is not written again at every call)."""
    found = state.get(kind)
    if found is None:
        try:
            found = codegen.module(*source())
        except codegen.Unsupported as e:
            found = e
        state[kind] = found
    if isinstance(found, codegen.Unsupported):
        raise codegen.Unsupported(*found.args)   # (a fresh one: a kept one's traceback
    return found                                 # would grow by a frame every call)


def _table(state, cuda, plan):
    """The per-repetition constants on the device, copied once."""
    found = state.get("table")
    if found is None:
        found = state["table"] = cuda.to_device(np.ascontiguousarray(plan.table, np.float64))
    return found


def _scratch(state, cuda, name, size):
    """A device buffer of at least ``size`` doubles, kept per program and per thread
    (a call's allocations cost more than its kernel; a thread's launches run in its
    order on its stream, so its next call may reuse what its last one used). The
    kernels index it by their own sizes, so it is handed over whole (not sliced)."""
    mine = state.setdefault("scratch", threading.local()).__dict__
    found = mine.get(name)
    if found is None or found.size < size:
        found = mine[name] = cuda.device_array(size)
    return found


def _result(state, cuda, name, shape):
    """A result array of ``shape``, from memory kept per program and thread: on an H100
    allocating one and freeing the last call's cost ~0.1 ms of host time, more than
    the rest of a call's Python. Kept memory is written again only once nothing else
    holds it (``_unshared``): a result the caller keeps, or a view, a slice or a CuPy or
    torch array of it, makes the next call take new memory. The kernels are launched
    on this thread's stream after the last call's, so they never overlap."""
    mine = state.setdefault("results", threading.local()).__dict__
    kept = mine.get(name)
    if kept is None or kept.shape != shape or not _unshared(kept):
        kept = mine[name] = cuda.device_array(shape)
    return kept


def _unshared(kept):
    """Whether nothing but the pool holds a kept result's memory. Every array handed
    out is a new wrapper of it (``_hand_out``), so each holds its owner object (numba:
    ``gpu_data``; the simulator: the numpy array inside), and a slice holds another
    owner that numba counts on the allocation (``refct``). CPython's reference counts
    say how many hold the owner. A numba whose arrays are built otherwise gets new
    memory at every call: never shared memory."""
    try:
        if hasattr(kept, "gpu_data"):
            return sys.getrefcount(kept.gpu_data) == 2 and kept.gpu_data._mem.refct == 1
        return sys.getrefcount(kept._ary) == 2        # (numba's simulator)
    except AttributeError:
        return False


def _hand_out(on_device, arrays, shapes):
    """The results for the caller: new wrappers of the kept arrays (never the kept ones
    themselves, whose holders ``_unshared`` could not see), in ``shapes`` where given
    (None there: not wanted); host copies for host points."""
    if not on_device:
        return tuple(None if a is None else a.copy_to_host() for a in arrays)
    shapes = shapes or tuple(None if a is None else a.shape for a in arrays)
    return tuple(None if a is None or s is None else a.reshape(s)
                 for a, s in zip(arrays, shapes))


def _directions(state, cuda, S):
    """The forward-mode directions on the device, kept while they stay the same (the
    identity of jacfwd and hessian, every call)."""
    S = np.ascontiguousarray(S, np.float64)
    kept = state.get("directions")
    if kept is None or kept[0].shape != S.shape or not np.array_equal(kept[0], S):
        kept = state["directions"] = (S.copy(), cuda.to_device(S))
    return kept[1]


def _interpret(lean, cuda, Xd, values, jac, jacobian):
    """The interpreter kernel (kernels/gpu.py): every slot of every point in global
    memory, points in launches of at most SCRATCH_BYTES of them."""
    kernels = importlib.import_module("autotape.kernels.gpu")   # (needs numba.cuda)
    B = Xd.shape[0]
    arrays = _device_program(lean, cuda, jacobian)
    per_point = 8 * max(lean.nslots, 1) * (2 if jacobian else 1)
    step = max(1, min(B, SCRATCH_BYTES // per_point))
    V = cuda.device_array(max(lean.nslots, 1) * step)
    G = cuda.device_array(max(lean.nslots, 1) * step if jacobian else 1)
    for p0 in range(0, B, step):
        p1 = min(B, p0 + step)
        n = p1 - p0
        blocks = max(1, math.ceil(n / INTERPRETER_THREADS))
        kernels.run_points_cuda[blocks, INTERPRETER_THREADS](
            *arrays, Xd[p0:p1], values[p0:p1], jac[p0:p1] if jacobian else jac, jacobian,
            V[:max(lean.nslots, 1) * n], G[:max(lean.nslots, 1) * n] if jacobian else G)


def _device_program(lean, cuda, jacobian):
    """The program's arrays on the device, copied once and kept with it."""
    state = _state(lean)
    kept = state.get("interpreter")            # (arrays, whether they hold reach marks)
    if kept is None or (jacobian and not kept[1]):
        live = live_sets(lean.instr, lean.pool, lean.nslots, lean.out_slots) if jacobian \
            else np.zeros((1, 1), np.uint8)
        kept = state["interpreter"] = (tuple(cuda.to_device(a) for a in (
            lean.instr, lean.pool, lean.divisor, live, lean.const_slots, lean.const_vals,
            lean.in_slots, lean.out_slots)), jacobian)
    return kept[0]
