"""The CUDA kernels written for a lean program (codegen.py): every slot a local, the
loop a loop in the kernel, the reverse sweep checkpointed per thread, forward mode in
registers. Each answer is checked against the CPU's (kernels/program.py, loops.py) and
against the interpreter kernel it replaces. Without a GPU these run in numba's CUDA
simulator (CI sets NUMBA_ENABLE_CUDASIM=1); on a GPU: ``pytest -m cuda``."""
import concurrent.futures
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import autotape as at
import autotape.func as F
from autotape import gpu, codegen, program
from programs import LOOP_BODIES, loop_model, loss_in_the_loop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import workloads as W  # noqa: E402

pytestmark = pytest.mark.cuda
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


@pytest.fixture(autouse=True)
def cuda():
    try:
        return gpu.cuda_module()
    except RuntimeError as e:
        pytest.skip(str(e))


def _lean(c, x, kind="value"):
    return c._lean(kind, [x]).lean


def _interpreted(c, x, kind="value"):
    """A twin of c whose programs run on the interpreter kernel."""
    twin = at.compile(c.f, x)
    _lean(twin, x, kind).codegen = {"plan": gpu.Unsupported("the test's interpreter twin")}
    return twin


METHODS = ("__call__", "value_and_grad", "jacobian", "jacfwd", "jacrev")
VECTOR = ("__call__", "jacobian", "jacfwd", "jacrev")          # (f returns several)


def _same_everywhere(c, points, methods=METHODS, rtol=1e-12):
    """Every method on the GPU (generated kernel) equals the CPU's and the interpreter
    kernel's. (The interpreter kernel has no forward mode: its jacfwd is a reverse
    sweep, equal to jacrev's, which differs from forward mode only where a derivative
    is undefined: 0 * inf is nan in reverse, a zero tangent carries 0 forward.)"""
    twin = _interpreted(c, points[0])
    for method in methods:
        want = at.func.flatten(F.vmap(getattr(c, method))(points))[0]
        want_old = at.func.flatten(F.vmap(c.jacrev)(points))[0] if method == "jacfwd" \
            else want
        got = at.func.flatten(F.vmap(getattr(c, method), device="cuda")(points))[0]
        old = at.func.flatten(F.vmap(getattr(twin, method), device="cuda")(points))[0]
        for w, wo, g, o in zip(want, want_old, got, old):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=1e-13,
                                       equal_nan=True, err_msg=method)
            np.testing.assert_allclose(o.numpy(), wo.numpy(), rtol=rtol, atol=1e-13,
                                       equal_nan=True, err_msg=method)


def test_the_driven_pendulum_is_a_kernel_with_its_loop_and_table():
    th = W.thetas(5)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 40), th[0])
    plan = codegen.plan(_lean(c, th[0]))
    assert plan.loop is not None and plan.loop[2] >= 38
    assert plan.table.shape == (plan.loop[2], 4)          # the forcing, per repetition
    assert len(plan.carried) == 2                           # x and v
    assert "a kernel written for it" in gpu.explain_gpu(_lean(c, th[0]))
    _same_everywhere(c, th)


def test_hessian_on_the_gpu_equals_the_cpu():
    th = W.thetas(4)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 12), th[0])
    np.testing.assert_allclose(F.vmap(c.hessian, device="cuda")(th).numpy(),
                               F.vmap(c.hessian)(th).numpy(), rtol=1e-12, atol=1e-13)


def test_the_memory_of_65536_pendulums_of_200_steps():
    # the bound: under 1 GB of device memory by the kernel's own accounting;
    # 200 states of (x, v) fit KEEP_ALL_BYTES, so every one is kept
    th = W.thetas(1)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 200), th[0])
    plan = codegen.plan(_lean(c, th[0]))
    assert plan.stride_for("cuda") == 1
    assert plan.bytes_per_point() == 8 * 2 * plan.loop[2] <= codegen.KEEP_ALL_BYTES
    assert plan.bytes_per_point() * 65_536 < 1 << 30


def test_a_long_loop_is_checkpointed_every_sqrt_steps(monkeypatch):
    # past KEEP_ALL_BYTES a point keeps every ~sqrt(R)-th state and one segment's: the
    # sweep re-runs each segment from its checkpoint; answers as the CPU's
    monkeypatch.setattr(codegen, "KEEP_ALL_BYTES", 0)
    th = W.thetas(4)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 30), th[0])
    plan = codegen.plan(_lean(c, th[0]))
    stride = plan.stride_for("cuda")
    assert stride * stride >= plan.loop[2] > (stride - 1) ** 2 and stride > 1
    assert plan.bytes_per_point() == 8 * 2 * (plan.segments + stride)
    assert "checkpointed every" in gpu.explain_gpu(_lean(c, th[0]))
    _same_everywhere(c, th, ("value_and_grad", "jacrev"))


def test_results_on_the_device_are_reused_only_once_nothing_holds_them(cuda):
    # the result pool: memory a caller (or a view, or a slice) still holds is never
    # written again; memory nothing holds is
    th = W.thetas(8)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 10), th[0])
    call = F.vmap(c.value_and_grad, device="cuda")
    d1, d2 = cuda.to_device(th), cuda.to_device(th * 1.01)
    v1, g1 = call(d1)
    want_v, want_g = v1.copy_to_host(), g1.copy_to_host()
    kept = gpu._state(_lean(c, th[0]))["results"].__dict__
    first = kept["jacobian"]
    v2, g2 = call(d2)                            # g1 and v1 held: new memory
    assert kept["jacobian"] is not first
    np.testing.assert_array_equal(g1.copy_to_host(), want_g)
    np.testing.assert_array_equal(v1.copy_to_host(), want_v)
    second, want2, want_v2 = kept["jacobian"], g2.copy_to_host(), v2.copy_to_host()
    part, shaped = g2[2:5], v2.reshape(2, 4)
    del v1, g1, v2, g2
    g3 = call(d1)[1]                             # a slice, a view hold the memory
    assert kept["jacobian"] is not second
    np.testing.assert_array_equal(part.copy_to_host(), want2[2:5])
    np.testing.assert_array_equal(g3.copy_to_host(), want_g)
    third = kept["jacobian"]
    del g3
    np.testing.assert_array_equal(call(d2)[1].copy_to_host(), want2)
    assert kept["jacobian"] is third             # nothing held it: written again
    np.testing.assert_array_equal(shaped.copy_to_host().ravel(), want_v2)   # (a view)


_loss_in_the_loop = loss_in_the_loop(at)


def test_a_loop_whose_loss_and_state_are_read_after_it():
    th = W.thetas(6)
    c = at.compile(_loss_in_the_loop, th[0])
    plan = codegen.plan(_lean(c, th[0]))
    assert plan.loop is not None and plan.live_out
    _same_everywhere(c, th, VECTOR)


def test_outputs_that_reach_part_of_the_loop():
    # output 1 is the state after 10 of the 40 steps: its sweep reaches only those
    # repetitions (a guard on t), output 0 all of them
    def f(t):
        x, kept = t[0], None
        for i in range(40):
            x = at.sin(x) * t[1] + 0.1
            if i == 9:
                kept = x
        return at.stack([x, kept * 2.0])
    th = W.thetas(4)[:, :2]
    c = at.compile(f, th[0])
    _same_everywhere(c, th, VECTOR)


def test_arrays_in_the_loop_gathers_and_sums():
    # a spring chain on arrays: slices (gathers), a sum (a scatter) in every step
    def f(k):
        x = np.linspace(0.0, 1.0, 6) * k[0]
        x = at.tensor(x) if not isinstance(x, at.Tensor) else x
        v = x * 0.0
        for _ in range(25):
            force = at.concatenate([x[1:] - x[:-1], x[:1] * 0.0]) * k[1] - x * k[2]
            v = v + 0.01 * force
            x = x + 0.01 * v
        return (x * x).sum() + v.mean()
    ks = np.array([1.0, 2.0, 0.5]) * np.random.default_rng(1).uniform(0.8, 1.2, (4, 3))
    c = at.compile(f, ks[0])
    assert codegen.plan(_lean(c, ks[0])).loop is not None
    _same_everywhere(c, ks, methods=("__call__", "value_and_grad", "jacfwd"))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # (the simulator's numpy: 1/0)
def test_nan_and_inf_as_the_cpu_gives_them():
    # a branch the output does not reach would multiply 0 by an inf partial: the live
    # sets leave it out, as on the CPU; log(0) and 1/0 give inf and nan where they do
    def f(t):
        dead = at.log(t[0] - t[0]) * 3.0                  # -inf, never reaching out 0
        return at.stack([at.sqrt(t[1] * t[1]) * t[0], dead, t[0] / t[2]])
    points = np.array([[1.0, 0.0, 0.0], [2.0, -1.0, 3.0]])
    c = at.compile(f, points[1])
    _same_everywhere(c, points, VECTOR)


@settings(max_examples=12, deadline=None)
@given(*LOOP_BODIES)
def test_random_loop_bodies(ops, steps):
    # a random update of a three-value state, repeated: the loop finder, the carried
    # values and the sweep against the CPU
    f = loop_model(at, ops, steps)
    points = np.random.default_rng(2).uniform(-1.0, 1.0, (3, 3))
    c = at.compile(f, points[0])
    want = F.vmap(c.value_and_grad)(points)
    got = F.vmap(c.value_and_grad, device="cuda")(points)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-12,
                                   equal_nan=True)


def test_a_program_too_long_to_unroll_runs_on_the_interpreter(monkeypatch):
    monkeypatch.setattr(codegen, "MAX_STRAIGHT", 10)
    c = at.compile(lambda t: (at.sin(t) * t).sum() * t[0] + at.cos(t[1]), np.ones(12))
    lean = _lean(c, np.ones(12))
    assert "interpreter kernel, because" in gpu.explain_gpu(lean)
    points = np.random.default_rng(3).uniform(size=(3, 12))
    for method in ("value_and_grad", "jacfwd"):         # (forward mode in reverse there)
        want = at.func.flatten(F.vmap(getattr(c, method))(points))[0]
        got = at.func.flatten(F.vmap(getattr(c, method), device="cuda")(points))[0]
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)


def test_more_lanes_than_registers_take_the_reverse_sweep(monkeypatch):
    monkeypatch.setattr(gpu, "MAX_LANES", 2)
    monkeypatch.setattr(program, "MAX_LANES", 2)
    c = at.compile(lambda t: at.sin(t) * t[0], np.ones(3))
    points = np.random.default_rng(4).uniform(size=(2, 3))
    np.testing.assert_allclose(F.vmap(c.jacfwd, device="cuda")(points).numpy(),
                               F.vmap(c.jacfwd)(points).numpy(), rtol=1e-12)


def test_device_points_for_every_method(cuda):
    th = W.thetas(3)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 10), th[0])
    d = cuda.to_device(th)
    for method, want in (("jacfwd", F.vmap(c.jacfwd)(th)), ("hessian", F.vmap(c.hessian)(th)),
                         ("grad", F.vmap(c.grad)(th))):
        got = F.vmap(getattr(c, method), device="cuda")(d)
        assert gpu.is_device_array(got)
        np.testing.assert_allclose(got.copy_to_host(), want.numpy(), rtol=1e-12, atol=1e-13)


def test_kept_scratch_serves_other_sizes_and_threads(cuda):
    # a call's checkpoint buffers are kept per program and thread: a larger call grows
    # them, a smaller one uses part, and threads calling at once each have their own
    th = W.thetas(9)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 16), th[0])
    want = F.vmap(c.grad)(th).numpy()
    for n in (3, 9, 2):
        np.testing.assert_allclose(F.vmap(c.grad, device="cuda")(th[:n]).numpy(), want[:n],
                                   rtol=1e-12)

    # each thread its own buffers (the simulator cannot launch from several threads at
    # once: there the buffers are checked, on a GPU the calls run concurrently too)
    lean = _lean(c, th[0])

    def buffers(out):
        gpu._scratch(lean.codegen, cuda, "checkpoints", 8)
        out.append(lean.codegen["scratch"].checkpoints)       # (this thread's own)
    kept = []
    threads = [threading.Thread(target=buffers, args=(kept,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    buffers(kept)
    assert len({id(b) for b in kept}) == 3
    if SIMULATED:
        return

    def call(k):
        return F.vmap(c.grad, device="cuda")(th[k:k + 4]).numpy()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(call, range(3)))
    for k, got in enumerate(results):
        np.testing.assert_allclose(got, want[k:k + 4], rtol=1e-12)


def test_code_too_long_to_compile_runs_on_the_interpreter_kernel(monkeypatch):
    monkeypatch.setattr(codegen, "MAX_LINES", 100)
    th = W.thetas(3)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 12), th[0])
    assert "lines (more than 100" in gpu.explain_gpu(_lean(c, th[0]))
    for method in ("value_and_grad", "jacfwd"):
        want = at.func.flatten(F.vmap(getattr(c, method))(th))[0]
        for _ in range(2):                          # (the second call: the kept refusal)
            got = at.func.flatten(F.vmap(getattr(c, method), device="cuda")(th))[0]
            for w, g in zip(want, got):
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-13)
