"""GPU rows (issue: CUDA backend): the driven pendulum ensemble (200 RK4 steps with a
forcing term from the step index, loss and 4-gradient) at 65,536 parameter sets,
``vmap(c.value_and_grad, device="cuda")`` beside the CPU batched path and two
hand-written numba.cuda kernels for the same model: forward mode (4 tangent lanes) and
forward + adjoint (the trajectory kept per thread, swept back by hand). Skipped without
a GPU (the simulator's times mean nothing); results are checked against the CPU's
(float64, 1e-12).

    python -m pytest benchmarks/test_gpu.py --benchmark-json=gpu.json

The CPU row uses every core numba has: for the 2-core figure, run it alone with
``NUMBA_NUM_THREADS=2 taskset -c 0,1 python -m pytest benchmarks/test_gpu.py -k cpu_batched``.
"""
import math
import os

import numpy as np
import pytest
from numba import cuda as numba_cuda

import autotape as at
import autotape.func as F
import workloads as W
import zoo
from autotape import gpu

STEPS, POINTS = 200, 65_536
GROUP = pytest.mark.benchmark(group="GPU: 65,536 driven pendulums (200 RK4 steps), loss + "
                                    "4-gradient each")
H, AMP, OMEGA = W.DT, W.AMP, W.OMEGA


@pytest.fixture(scope="module")
def cuda():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the CUDA simulator: no timings")
    try:
        return gpu.cuda_module()
    except RuntimeError as e:
        pytest.skip(str(e))


def _pendulum(theta):
    return W.driven_pendulum_at(theta, STEPS)


@numba_cuda.jit(device=True, inline=True)
def _accel(g, c, x, v, s):
    return -g * math.sin(x) - c * v + AMP * math.cos(OMEGA * s)


@numba_cuda.jit
def hand_forward_mode(thetas, values, grads):
    """One thread per parameter set: the RK4 steps with 4 tangent lanes."""
    p = numba_cuda.grid(1)
    if p >= thetas.shape[0]:
        return
    x, v, g, c = thetas[p, 0], thetas[p, 1], thetas[p, 2], thetas[p, 3]
    dx = numba_cuda.local.array(4, np.float64)
    dv = numba_cuda.local.array(4, np.float64)
    for k in range(4):
        dx[k] = 1.0 if k == 0 else 0.0
        dv[k] = 1.0 if k == 1 else 0.0
    h = H
    for i in range(STEPS):
        t = i * h
        x1, v1 = x, v
        a1 = _accel(g, c, x1, v1, t)
        x2, v2 = x + 0.5 * h * v1, v + 0.5 * h * a1
        a2 = _accel(g, c, x2, v2, t + 0.5 * h)
        x3, v3 = x + 0.5 * h * v2, v + 0.5 * h * a2
        a3 = _accel(g, c, x3, v3, t + 0.5 * h)
        x4, v4 = x + h * v3, v + h * a3
        a4 = _accel(g, c, x4, v4, t + h)
        for k in range(4):
            # d accel = -g cos(x) dx - c dv - [k=2] sin x - [k=3] v
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


@numba_cuda.jit
def hand_adjoint(thetas, values, grads):
    """One thread per parameter set: the RK4 steps keeping each step's state (x, v) in
    thread-local memory, then the adjoint swept back step by step, each step's stages
    recomputed from its state."""
    p = numba_cuda.grid(1)
    if p >= thetas.shape[0]:
        return
    x, v, g, c = thetas[p, 0], thetas[p, 1], thetas[p, 2], thetas[p, 3]
    xs = numba_cuda.local.array(STEPS, np.float64)
    vs = numba_cuda.local.array(STEPS, np.float64)
    h = H
    for i in range(STEPS):
        t = i * h
        xs[i], vs[i] = x, v
        a1 = _accel(g, c, x, v, t)
        x2, v2 = x + 0.5 * h * v, v + 0.5 * h * a1
        a2 = _accel(g, c, x2, v2, t + 0.5 * h)
        x3, v3 = x + 0.5 * h * v2, v + 0.5 * h * a2
        a3 = _accel(g, c, x3, v3, t + 0.5 * h)
        x4, v4 = x + h * v3, v + h * a3
        a4 = _accel(g, c, x4, v4, t + h)
        x, v = x + h / 6.0 * (v + 2.0 * v2 + 2.0 * v3 + v4), \
            v + h / 6.0 * (a1 + 2.0 * a2 + 2.0 * a3 + a4)
    values[p] = x * x + v * v
    gx, gv, gg, gc = 2.0 * x, 2.0 * v, 0.0, 0.0
    for i in range(STEPS - 1, -1, -1):
        t = i * h
        x, v = xs[i], vs[i]
        a1 = _accel(g, c, x, v, t)
        x2, v2 = x + 0.5 * h * v, v + 0.5 * h * a1
        a2 = _accel(g, c, x2, v2, t + 0.5 * h)
        x3, v3 = x + 0.5 * h * v2, v + 0.5 * h * a2
        a3 = _accel(g, c, x3, v3, t + 0.5 * h)
        x4, v4 = x + h * v3, v + h * a3
        # x' = x + h/6 (v + 2 v2 + 2 v3 + v4), v' = v + h/6 (a1 + 2 a2 + 2 a3 + a4)
        gv1, gv2, gv3, gv4 = h / 6.0 * gx, h / 3.0 * gx, h / 3.0 * gx, h / 6.0 * gx
        ga1, ga2, ga3, ga4 = h / 6.0 * gv, h / 3.0 * gv, h / 3.0 * gv, h / 6.0 * gv
        gx_, gv_ = gx, gv + gv1
        # a = -g sin(x) - c v + forcing
        gx4, gv4 = -g * math.cos(x4) * ga4, gv4 - c * ga4
        gg -= math.sin(x4) * ga4
        gc -= v4 * ga4
        gx_, gv3, gv_, ga3 = gx_ + gx4, gv3 + h * gx4, gv_ + gv4, ga3 + h * gv4
        gx3, gv3 = -g * math.cos(x3) * ga3, gv3 - c * ga3
        gg -= math.sin(x3) * ga3
        gc -= v3 * ga3
        gx_, gv2, gv_, ga2 = gx_ + gx3, gv2 + 0.5 * h * gx3, gv_ + gv3, ga2 + 0.5 * h * gv3
        gx2, gv2 = -g * math.cos(x2) * ga2, gv2 - c * ga2
        gg -= math.sin(x2) * ga2
        gc -= v2 * ga2
        gx_, gv_, ga1 = gx_ + gx2, gv_ + gv2, ga1 + 0.5 * h * gv2
        gv_ += 0.5 * h * gx2
        gx_, gv_ = gx_ - g * math.cos(x) * ga1, gv_ - c * ga1
        gg -= math.sin(x) * ga1
        gc -= v * ga1
        gx, gv = gx_, gv_
    grads[p, 0], grads[p, 1], grads[p, 2], grads[p, 3] = gx, gv, gg, gc


@pytest.fixture(scope="module")
def thetas():
    return W.thetas(POINTS)


@pytest.fixture(scope="module")
def cpu_result(thetas):
    c = at.compile(_pendulum, thetas[0])
    values, grads = F.vmap(c.value_and_grad)(thetas)
    return values.numpy(), grads.numpy()


@pytest.mark.parametrize("kernel", ["generated", "interpreter"])
@GROUP
def test_gpu_autotape(benchmark, cuda, thetas, cpu_result, kernel):
    c = at.compile(_pendulum, thetas[0])
    lean = c._lean("value", [thetas[0]]).lean
    if kernel == "interpreter":                # (the kernel before codegen.py)
        lean.codegen = {"plan": gpu.Unsupported("the benchmark's interpreter row")}
    benchmark.extra_info["kernel"] = gpu.explain_gpu(lean)
    if kernel == "generated":
        benchmark.extra_info["device_bytes"] = gpu.codegen.plan(lean).bytes_per_point() \
            * POINTS
    d = cuda.to_device(thetas)
    values, grads = F.vmap(c.value_and_grad, device="cuda")(d)
    np.testing.assert_allclose(grads.copy_to_host(), cpu_result[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(values.copy_to_host(), cpu_result[0], rtol=1e-12)

    def run():
        F.vmap(c.value_and_grad, device="cuda")(d)
        cuda.synchronize()
    benchmark.pedantic(run, rounds=20, warmup_rounds=2)


@GROUP
def test_gpu_autotape_checkpointed(benchmark, cuda, thetas, cpu_result, monkeypatch):
    # the reverse sweep checkpointed every ~sqrt(steps) (what a longer loop gets past
    # codegen.KEEP_ALL_BYTES): 464 bytes a point, each step run three times
    monkeypatch.setattr(gpu.codegen, "KEEP_ALL_BYTES", 0)
    c = at.compile(_pendulum, thetas[0])
    benchmark.extra_info["kernel"] = gpu.explain_gpu(c._lean("value", [thetas[0]]).lean)
    d = cuda.to_device(thetas)
    np.testing.assert_allclose(F.vmap(c.value_and_grad, device="cuda")(d)[1].copy_to_host(),
                               cpu_result[1], rtol=1e-12, atol=1e-12)

    def run():
        F.vmap(c.value_and_grad, device="cuda")(d)
        cuda.synchronize()
    benchmark.pedantic(run, rounds=20, warmup_rounds=2)


def _launch_alone(cuda, c, d, points):
    """The generated reverse kernel launched directly into kept arrays: the kernel's own
    time, without vmap's host work (finding the program, allocating the results)."""
    lean = c._lean("value", [np.zeros(d.shape[1])]).lean
    F.vmap(c.value_and_grad, device="cuda")(d)      # (writes and compiles the kernel)
    plan, kernels, tab = gpu.codegen.plan(lean), lean.codegen[("cuda", "reverse")], lean.codegen["table"]
    values, jac = cuda.device_array((points, 1)), cuda.device_array((points, 1, d.shape[1]))
    ck, sg = plan.scratch("cuda")
    CK, SG = cuda.device_array(ck * points), cuda.device_array(sg * points)
    blocks = (points + gpu.GENERATED_THREADS - 1) // gpu.GENERATED_THREADS

    def launch():
        kernels.run_reverse[blocks, gpu.GENERATED_THREADS](d, tab, values, jac, CK, SG)
    return launch, values, jac


@GROUP
def test_gpu_autotape_kernel_alone(benchmark, cuda, thetas, cpu_result):
    c = at.compile(_pendulum, thetas[0])
    d = cuda.to_device(thetas)
    launch, values, jac = _launch_alone(cuda, c, d, POINTS)
    launch()
    np.testing.assert_allclose(jac.copy_to_host()[:, 0], cpu_result[1], rtol=1e-12,
                               atol=1e-12)

    def run():
        launch()
        cuda.synchronize()
    benchmark.pedantic(run, rounds=20, warmup_rounds=2)


@pytest.mark.parametrize("kernel", [hand_forward_mode, hand_adjoint],
                         ids=["forward_mode", "adjoint"])
@GROUP
def test_gpu_hand_written_kernel(benchmark, cuda, thetas, cpu_result, kernel):
    d = cuda.to_device(thetas)
    values, grads = cuda.device_array(POINTS), cuda.device_array((POINTS, 4))
    blocks = (POINTS + 127) // 128
    kernel[blocks, 128](d, values, grads)
    np.testing.assert_allclose(grads.copy_to_host(), cpu_result[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(values.copy_to_host(), cpu_result[0], rtol=1e-12)

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


@GROUP
def test_gpu_autotape_forward_mode(benchmark, cuda, thetas, cpu_result):
    # jacfwd: 4 tangent lanes in registers, the generated twin of hand_forward_mode
    c = at.compile(_pendulum, thetas[0])
    d = cuda.to_device(thetas)
    np.testing.assert_allclose(F.vmap(c.jacfwd, device="cuda")(d).copy_to_host(),
                               cpu_result[1], rtol=1e-12, atol=1e-12)

    def run():
        F.vmap(c.jacfwd, device="cuda")(d)
        cuda.synchronize()
    benchmark.pedantic(run, rounds=20, warmup_rounds=2)


# ---- zoo models (benchmarks/zoo.py) as ensembles: models the kernel was not tuned on --------

ZOO_POINTS = 16_384
ZOO_GPU = ("epidemic", "implicit_euler")       # (the others compile for 20 s or more)


def _zoo_points(model):
    p = np.asarray(zoo.PARAMS[model], float)
    return p * np.random.default_rng(5).uniform(0.9, 1.1, (ZOO_POINTS, p.size))


@pytest.mark.parametrize("model", ZOO_GPU)
@pytest.mark.parametrize("where", ["gpu", "cpu"])
def test_zoo_ensemble(benchmark, cuda, model, where):
    benchmark.group = f"GPU zoo: {ZOO_POINTS:,} points of {model}, loss + gradient"
    points = _zoo_points(model)
    c = at.compile(getattr(zoo, model), points[0])
    want = F.vmap(c.value_and_grad)(points)[1].numpy()
    if where == "gpu":
        benchmark.extra_info["kernel"] = gpu.explain_gpu(c._lean("value", [points[0]]).lean)
        d = cuda.to_device(points)
        got = F.vmap(c.value_and_grad, device="cuda")(d)[1].copy_to_host()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)

        def run():
            F.vmap(c.value_and_grad, device="cuda")(d)
            cuda.synchronize()
        benchmark.pedantic(run, rounds=10, warmup_rounds=1)
    else:
        benchmark.pedantic(lambda: F.vmap(c.value_and_grad)(points), rounds=3,
                           warmup_rounds=1)
