"""GPU rows for device tensors (issue: CUDA backend, item 2): eager value + gradient of
1M float64 elements, and a 4096 x 4096 matrix product's gradient, autotape's device
tensors beside torch CUDA eager in the same run; and the reverse sweep's fused kernel
alone, timed with CUDA events, as a share of the memory bandwidth. Skipped without a
GPU (the simulator's times mean nothing) and, for the torch rows, without torch CUDA.

    python -m pytest benchmarks/test_gpu_tensors.py --benchmark-json=gpu_tensors.json
"""
import importlib
import os

import numpy as np
import pytest

import autotape as at
from autotape import device_kernels

N, M = 1 << 20, 4096
ELEMENTWISE = pytest.mark.benchmark(group="GPU device tensors: 1M float64 elements, value + "
                                          "gradient")
MATMUL = pytest.mark.benchmark(group="GPU device tensors: 4096 x 4096 float64 matmul, "
                                     "(A @ B).sum() value + gradients")
FUNCTIONS = {
    "sin_x_times_x": lambda np_, x: (np_.sin(x) * x).sum(),
    "eager_arrays_function": lambda np_, x: (np_.sin(x) * x + x ** 2
                                             / (1 + np_.exp(-x))).sum(),
}


@pytest.fixture(scope="module")
def cupy():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator: no timings")
    try:
        device_kernels.array_module()
    except RuntimeError as e:
        pytest.skip(str(e))
    return importlib.import_module("cupy")


@pytest.fixture(scope="module")
def torch():
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    return torch


def _sync(cupy):
    cupy.cuda.Device().synchronize()


@pytest.mark.parametrize("launcher", ["cupy", "numba"])
@pytest.mark.parametrize("name", FUNCTIONS)
@ELEMENTWISE
def test_device_tensors_elementwise(benchmark, cupy, name, launcher, monkeypatch):
    # launcher "numba": the generated kernels launched by numba instead of CuPy
    monkeypatch.setattr(device_kernels, "RAW_LAUNCH", [launcher == "cupy"])
    f = FUNCTIONS[name]
    a = np.linspace(-2.0, 2.0, N)
    x = at.tensor(a, device="cuda", requires_grad=True)
    f(at, x).backward()
    xc = at.tensor(a, requires_grad=True)
    f(at, xc).backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), xc.grad.numpy(), rtol=1e-12,
                               atol=1e-14)

    def run():
        x.grad = None
        f(at, x).backward()
        _sync(cupy)
    benchmark.pedantic(run, rounds=50, warmup_rounds=5)


@pytest.mark.parametrize("name", FUNCTIONS)
@ELEMENTWISE
def test_torch_cuda_elementwise(benchmark, torch, name):
    f = FUNCTIONS[name]
    x = torch.tensor(np.linspace(-2.0, 2.0, N), device="cuda", requires_grad=True)

    def run():
        x.grad = None
        f(torch, x).backward()
        torch.cuda.synchronize()
    benchmark.pedantic(run, rounds=50, warmup_rounds=5)


@pytest.mark.parametrize("name", FUNCTIONS)
@ELEMENTWISE
def test_sweep_kernel_bandwidth(benchmark, cupy, name, monkeypatch):
    """The fused reverse kernel alone (CUDA events around its launch, the GPU kept busy
    before it so that the host's work is not timed): bytes it must move (every full
    array it is passed, read once, and its outputs, written once) over its time, as a
    share of the device's memory bandwidth (its clock x bus width). The benchmark's own
    time (a backward() call after filling 512 MB) means nothing: read extra_info."""
    f = FUNCTIONS[name]
    x = at.tensor(np.linspace(-2.0, 2.0, N), device="cuda", requires_grad=True)
    y = f(at, x)
    timed, real = [], device_kernels.launch

    busy = cupy.empty(1 << 26)

    def launch(kernel, n, args):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        busy.fill(0.0)                  # (the GPU busy while the host prepares the
        start.record()                  #  launch: the events time the kernel alone)
        real(kernel, n, args)
        stop.record()
        timed.append((start, stop, sum(a.nbytes for a in args if hasattr(a, "nbytes")
                                       and a.size == n)))
    monkeypatch.setattr(device_kernels, "launch", launch)

    def run():
        x.grad = None
        y.backward(retain_graph=True)
        _sync(cupy)
    benchmark.pedantic(run, rounds=50, warmup_rounds=5)
    times = [cupy.cuda.get_elapsed_time(a, b) * 1e-3 for a, b, _ in timed[5:]]
    moved = timed[-1][2]
    props = cupy.cuda.runtime.getDeviceProperties(0)
    peak = 2 * props["memoryClockRate"] * 1e3 * props["memoryBusWidth"] / 8
    best = float(np.median(times))
    benchmark.extra_info.update(kernel_s=best, bytes=moved, GBps=moved / best / 1e9,
                                peak_GBps=peak / 1e9, share=moved / best / peak,
                                launches_per_sweep=len(timed) // 55)


def _matmul_inputs():
    rng = np.random.default_rng(0)
    return rng.standard_normal((M, M)), rng.standard_normal((M, M))


@MATMUL
def test_device_tensors_matmul(benchmark, cupy):
    a, b = _matmul_inputs()
    A = at.tensor(a, device="cuda", requires_grad=True)
    B = at.tensor(b, device="cuda", requires_grad=True)
    (A @ B).sum().backward()
    np.testing.assert_allclose(A.grad.cpu().numpy()[:2, :3],
                               np.tile(b.sum(axis=1), (2, 1))[:, :3], rtol=1e-10)

    def run():
        A.grad = B.grad = None
        (A @ B).sum().backward()
        _sync(cupy)
    benchmark.pedantic(run, rounds=10, warmup_rounds=2)


@MATMUL
def test_torch_cuda_matmul(benchmark, torch):
    a, b = _matmul_inputs()
    A = torch.tensor(a, device="cuda", requires_grad=True)
    B = torch.tensor(b, device="cuda", requires_grad=True)

    def run():
        A.grad = B.grad = None
        (A @ B).sum().backward()
        torch.cuda.synchronize()
    benchmark.pedantic(run, rounds=10, warmup_rounds=2)
