"""GPU rows (issue: CUDA backend): the pendulum ensemble (200 RK4 steps, loss and
4-gradient) at 65,536 parameter sets, ``vmap(c.value_and_grad, device="cuda")`` beside
the CPU batched path and a hand-written numba.cuda forward-mode kernel for the same
model. Skipped without a GPU (the simulator's times mean nothing); results are checked
against the CPU's (float64, 1e-12).

    python -m pytest benchmarks/test_gpu.py --benchmark-json=gpu.json
"""
import math
import os

import numpy as np
import pytest
from numba import cuda as numba_cuda

import autotape as at
import autotape.func as F
import workloads as W
from autotape import gpu

STEPS, POINTS = 200, 65_536
GROUP = pytest.mark.benchmark(group="GPU: 65,536 pendulums (200 RK4 steps), loss + "
                                    "4-gradient each")


@pytest.fixture(scope="module")
def cuda():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator: no timings")
    try:
        return gpu.cuda_module()
    except RuntimeError as e:
        pytest.skip(str(e))


def _pendulum(theta):
    return W.pendulum_at(theta, STEPS)


def hand_kernel():
    """One thread per parameter set: the RK4 steps with 4 tangent lanes (forward mode),
    then loss and gradient; the floor a generated kernel is measured against."""
    return _hand_kernel


@numba_cuda.jit(device=True, inline=True)
def _accel(g, c, x, v):
    return -g * math.sin(x) - c * v


@numba_cuda.jit
def _hand_kernel(thetas, values, grads):
    p = numba_cuda.grid(1)
    if p >= thetas.shape[0]:
        return
    x, v, g, c = thetas[p, 0], thetas[p, 1], thetas[p, 2], thetas[p, 3]
    dx = numba_cuda.local.array(4, np.float64)
    dv = numba_cuda.local.array(4, np.float64)
    for k in range(4):
        dx[k] = 1.0 if k == 0 else 0.0
        dv[k] = 1.0 if k == 1 else 0.0
    h = W.DT
    for _ in range(STEPS):
        x1, v1 = x, v
        a1 = _accel(g, c, x1, v1)
        x2, v2 = x + 0.5 * h * v1, v + 0.5 * h * a1
        a2 = _accel(g, c, x2, v2)
        x3, v3 = x + 0.5 * h * v2, v + 0.5 * h * a2
        a3 = _accel(g, c, x3, v3)
        x4, v4 = x + h * v3, v + h * a3
        a4 = _accel(g, c, x4, v4)
        for k in range(4):
            # tangents of the stages (d accel = -g cos(x) dx - c dv - [k=2] sin x
            # - [k=3] v)
            dx1, dv1 = dx[k], dv[k]
            da1 = -g * math.cos(x1) * dx1 - c * dv1 - (math.sin(x1) if k == 2 else 0.0) \
                - (v1 if k == 3 else 0.0)
            dx2, dv2 = dx1 + 0.5 * h * dv1, dv1 + 0.5 * h * da1
            da2 = -g * math.cos(x2) * dx2 - c * dv2 - (math.sin(x2) if k == 2 else 0.0) \
                - (v2 if k == 3 else 0.0)
            dx3, dv3 = dx1 + 0.5 * h * dv2, dv1 + 0.5 * h * da2
            da3 = -g * math.cos(x3) * dx3 - c * dv3 - (math.sin(x3) if k == 2 else 0.0) \
                - (v3 if k == 3 else 0.0)
            dx4, dv4 = dx1 + h * dv3, dv1 + h * da3
            da4 = -g * math.cos(x4) * dx4 - c * dv4 - (math.sin(x4) if k == 2 else 0.0) \
                - (v4 if k == 3 else 0.0)
            dx[k] = dx1 + h / 6.0 * (dv1 + 2.0 * dv2 + 2.0 * dv3 + dv4)
            dv[k] = dv1 + h / 6.0 * (da1 + 2.0 * da2 + 2.0 * da3 + da4)
        x = x + h / 6.0 * (v1 + 2.0 * v2 + 2.0 * v3 + v4)
        v = v + h / 6.0 * (a1 + 2.0 * a2 + 2.0 * a3 + a4)
    values[p] = x * x + v * v
    for k in range(4):
        grads[p, k] = 2.0 * x * dx[k] + 2.0 * v * dv[k]


@pytest.fixture(scope="module")
def thetas():
    return W.thetas(POINTS)


@pytest.fixture(scope="module")
def cpu_result(thetas):
    c = at.compile(_pendulum, thetas[0])
    values, grads = F.vmap(c.value_and_grad)(thetas)
    return values.numpy(), grads.numpy()


@GROUP
def test_gpu_autotape(benchmark, cuda, thetas, cpu_result):
    c = at.compile(_pendulum, thetas[0])
    d = cuda.to_device(thetas)
    values, grads = F.vmap(c.value_and_grad, device="cuda")(d)
    np.testing.assert_allclose(grads.copy_to_host(), cpu_result[1], rtol=1e-12, atol=1e-12)

    def run():
        F.vmap(c.value_and_grad, device="cuda")(d)
        cuda.synchronize()
    benchmark.pedantic(run, rounds=20, warmup_rounds=2)


@GROUP
def test_gpu_hand_written_kernel(benchmark, cuda, thetas, cpu_result):
    kernel = hand_kernel()
    d = cuda.to_device(thetas)
    values, grads = cuda.device_array(POINTS), cuda.device_array((POINTS, 4))
    blocks = (POINTS + 127) // 128
    kernel[blocks, 128](d, values, grads)
    np.testing.assert_allclose(grads.copy_to_host(), cpu_result[1], rtol=1e-12, atol=1e-12)

    def run():
        kernel[blocks, 128](d, values, grads)
        cuda.synchronize()
    benchmark.pedantic(run, rounds=20, warmup_rounds=2)


@GROUP
def test_cpu_batched_autotape(benchmark, thetas):
    c = at.compile(_pendulum, thetas[0])
    for _ in range(5):
        F.vmap(c.value_and_grad)(thetas[:64])
    benchmark.pedantic(lambda: F.vmap(c.value_and_grad)(thetas), rounds=3, warmup_rounds=1)
