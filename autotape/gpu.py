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

import numpy as np

from .kernels.program import live_sets

__all__ = ["run_points", "is_device_array", "as_device", "cuda_module"]

SCRATCH_BYTES = 4 << 30     # device memory for the points' slots, per launch


def cuda_module():
    """``numba.cuda``, usable here, or a RuntimeError saying what to install."""
    try:
        cuda = importlib.import_module("numba.cuda")   # (optional: imported on demand)
    except ImportError as e:
        raise RuntimeError("autotape: the GPU needs numba.cuda: pip install "
                           "'autotape[cuda]' (NVIDIA's numba-cuda with the CUDA 12 "
                           f"wheels) ({e})") from None
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if not simulated and not cuda.is_available():
        raise RuntimeError("autotape: no CUDA GPU is available (numba.cuda.is_available() "
                           "is False): install the extra .[cuda] (numba-cuda with the CUDA "
                           "12 wheels) on a machine with an NVIDIA GPU and driver, or set "
                           "NUMBA_ENABLE_CUDASIM=1 to run the kernels in numba's simulator")
    return cuda


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
    if hasattr(cuda, "as_cuda_array"):
        return cuda.as_cuda_array(a)
    return a                                   # (the simulator's own arrays)


def run_points(lean, X, jacobian):
    """Values (B, outputs) and, with ``jacobian``, d output / d input (B, outputs,
    inputs) of the lean program at the points X (B, inputs), on the GPU: host arrays
    for a host X, device arrays for a device X."""
    cuda = cuda_module()
    if lean.user_calls is not None:
        raise ValueError("autotape: a program calling numba-compiled custom ops runs on "
                         "the CPU only (their functions are CPU code)")
    kernels = importlib.import_module("autotape.kernels.gpu")   # (needs numba.cuda)
    on_device = is_device_array(X)
    Xd = as_device(X) if on_device else cuda.to_device(
        np.ascontiguousarray(X, np.float64))
    if Xd.dtype != np.float64 or Xd.ndim != 2:
        raise TypeError(f"autotape: GPU points must be a float64 (points, inputs) array, "
                        f"got {Xd.dtype} with shape {Xd.shape}")
    B, outs, ins = Xd.shape[0], lean.out_slots.size, lean.in_slots.size
    arrays = _device_program(lean, cuda, jacobian)
    values = cuda.device_array((B, outs))
    jac = cuda.device_array((B, outs, ins) if jacobian else (1, 1, 1))
    # every point keeps all its slots (values, adjoints): points go in launches of at
    # most SCRATCH_BYTES of them
    per_point = 8 * max(lean.nslots, 1) * (2 if jacobian else 1)
    step = max(1, min(B, SCRATCH_BYTES // per_point))
    V = cuda.device_array(max(lean.nslots, 1) * step)
    G = cuda.device_array(max(lean.nslots, 1) * step if jacobian else 1)
    for p0 in range(0, B, step):
        p1 = min(B, p0 + step)
        n = p1 - p0
        blocks = max(1, math.ceil(n / kernels.THREADS))
        kernels.run_points_cuda[blocks, kernels.THREADS](
            *arrays, Xd[p0:p1], values[p0:p1], jac[p0:p1] if jacobian else jac, jacobian,
            V[:max(lean.nslots, 1) * n], G[:max(lean.nslots, 1) * n] if jacobian else G)
    if on_device:
        return values, (jac if jacobian else None)
    return values.copy_to_host(), (jac.copy_to_host() if jacobian else None)


def _device_program(lean, cuda, jacobian):
    """The program's arrays on the device, copied once and kept with it."""
    kept = lean.device_arrays                  # (arrays, whether they hold reach marks)
    if kept is None or (jacobian and not kept[1]):
        live = live_sets(lean.instr, lean.pool, lean.nslots, lean.out_slots) if jacobian \
            else np.zeros((1, 1), np.uint8)
        kept = lean.device_arrays = (tuple(cuda.to_device(a) for a in (
            lean.instr, lean.pool, lean.divisor, live, lean.const_slots, lean.const_vals,
            lean.in_slots, lean.out_slots)), jacobian)
    return kept[0]
