"""A compiled function's calls while its kernels compile beside them (eager_calls.py):
f run as eager code gives the replay's answers, for every method and under vmap; the
first call after the kernels are ready lowers the recording and runs it; a call whose
outputs come out structured otherwise records f again; at.jit records per call
meanwhile."""
import gc
import math
import weakref

import numba
import numpy as np
import pytest

import autotape as at
import autotape.engine as engine
import autotape.func as F
from autotape import eager_calls
from autotape.program import LeanProgram
from autotape.pytree import flatten


@pytest.fixture
def eager(monkeypatch):
    """Calls run as while the kernels compile (the engine's sweeps on the Python tier)."""
    monkeypatch.setattr(engine, "FORCE_PYTHON_TIER", [True])


def rosen(u):
    return (100 * (u[1:] - u[:-1] ** 2) ** 2 + (1 - u[:-1]) ** 2).sum()


def two_args(x, k):
    return {"energy": (at.sin(x) * k).sum() + k ** 2, "state": at.stack([x[0] * k, x[1]])}


def with_constant(x):
    return x[0] * x[1], np.ones(2)                   # (a constant output)


def scalar_arg(t):
    return at.exp(-t) * at.cos(3.0 * t)


def oscillator(p):
    x, v, xs = at.tensor(1.0), at.tensor(0.0), []
    for _ in range(20):
        x, v = x + 0.1 * v, v - 0.1 * (p[0] * x + p[1] * v)
        xs.append(x)
    return at.stack(xs)


CASES = [(rosen, (np.linspace(-0.5, 1.5, 6),)),
         (two_args, (np.array([0.3, -0.7]), 1.5)),
         (with_constant, (np.array([2.0, 3.0]),)),
         (scalar_arg, (0.4,)),
         (oscillator, (np.array([4.0, 0.2]),))]


def _close(got, want, rtol=1e-12):
    g, w = flatten(got)[0], flatten(want)[0]
    assert len(g) == len(w)
    for a, b in zip(g, w):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-12)


def _methods(f, args):
    scalar = f in (rosen, scalar_arg)
    out = {"call": lambda c: c(*args), "jacobian": lambda c: c.jacobian(*args),
           "jacfwd": lambda c: c.jacfwd(*args), "jacrev": lambda c: c.jacrev(*args),
           "jvp": lambda c: c.jvp(args, tuple(np.ones_like(np.asarray(a)) for a in args))}
    if scalar:
        out.update(value_and_grad=lambda c: c.value_and_grad(*args),
                   grad=lambda c: c.grad(*args), hessian=lambda c: c.hessian(*args))
    return out


@pytest.mark.parametrize("f, args", CASES, ids=[f.__name__ for f, _ in CASES])
def test_every_method_gives_the_replays_answers(f, args, monkeypatch):
    compiled = at.compile(f, *args)
    want = {name: call(compiled) for name, call in _methods(f, args).items()}
    monkeypatch.setattr(engine, "FORCE_PYTHON_TIER", [True])
    waiting = at.compile(f, *args)
    for name, call in _methods(f, args).items():
        _close(call(waiting), want[name])
    assert all(p.pending and isinstance(p.lean, eager_calls.EagerProgram)
               for p in waiting._programs.values())


@pytest.mark.parametrize("f, args", CASES[:2] + CASES[3:], ids=lambda v: getattr(
    v, "__name__", ""))
def test_vmap_gives_the_replays_answers(f, args, monkeypatch):
    rng = np.random.default_rng(0)
    points = tuple(np.asarray(a) + 0.1 * rng.normal(size=(5,) + np.shape(a)) for a in args)
    compiled = at.compile(f, *args)
    methods = ["__call__", "jacobian", "jacfwd"] + (
        ["grad", "value_and_grad", "hessian"] if f in (rosen, scalar_arg) else [])
    want = [F.vmap(getattr(compiled, m) if m != "__call__" else compiled)(*points)
            for m in methods]
    monkeypatch.setattr(engine, "FORCE_PYTHON_TIER", [True])
    waiting = at.compile(f, *args)
    for m, w in zip(methods, want):
        _close(F.vmap(getattr(waiting, m) if m != "__call__" else waiting)(*points), w)


def test_the_first_call_once_the_kernels_are_ready_lowers_the_recording(monkeypatch):
    x = np.linspace(-0.5, 1.5, 6)
    monkeypatch.setattr(engine, "FORCE_PYTHON_TIER", [True])
    c = at.compile(rosen, x)
    v0, g0 = c.value_and_grad(x)
    p, = c._programs.values()
    assert p.pending
    monkeypatch.setattr(engine, "FORCE_PYTHON_TIER", [False])
    v1, g1 = c.value_and_grad(x)
    assert not p.pending and isinstance(p.lean, LeanProgram) and c.traces == 1
    np.testing.assert_allclose(g1.numpy(), g0.numpy(), rtol=1e-13)
    assert v1.item() == pytest.approx(v0.item(), rel=1e-14)


def test_wait_compiled_lowers_what_waits(eager):
    c = at.compile(rosen, np.ones(4))
    engine.FORCE_PYTHON_TIER[0] = False
    assert c.wait_compiled() is c
    assert not any(p.pending for p in c._programs.values())


def test_outputs_structured_otherwise_record_again(eager):
    def branchy(x):                                    # (a decision in Python)
        return x.sum() * 2.0 if x[0].item() > 0 else at.tensor(1.0)
    with pytest.warns(UserWarning):
        c = at.compile(branchy, np.array([1.0, 2.0]))
    assert c(np.array([1.0, 2.0])).item() == 6.0
    with pytest.warns(UserWarning):
        assert c(np.array([-1.0, 2.0])).item() == 1.0   # (a constant now: recorded again)
        _, g = c.value_and_grad(np.array([-1.0, 2.0]))
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0])


def test_errors_are_the_replays(eager):
    c = at.compile(lambda x: x * 2.0, np.ones(2))
    with pytest.raises(RuntimeError, match="single scalar"):
        c.value_and_grad(np.ones(2))
    with pytest.raises(RuntimeError, match="single scalar"):
        c.hessian(np.ones(2))


def test_float32_programs_compile_their_kernels(eager):
    c = at.compile(lambda x: (x * x).sum(), np.ones(2, np.float32))
    p, = c._programs.values()
    assert not p.pending and isinstance(p.lean, LeanProgram)


def test_jit_records_each_call_meanwhile(eager):
    @numba.njit
    def energy(q):
        e = 0.0
        for i in range(q.size - 1):
            e += (q[i + 1] - q[i]) ** 2 * (1.0 + 0.1 * i)
        return e
    q = np.array([0.0, 1.0, 3.0, 2.5])
    waiting = at.jit(energy)
    got = waiting.value_and_grad(q), waiting.jacfwd(q), F.vmap(waiting.grad)(
        np.stack([q, q + 1.0]))
    engine.FORCE_PYTHON_TIER[0] = False
    ready = at.jit(energy)
    want = ready.value_and_grad(q), ready.jacfwd(q), F.vmap(ready.grad)(
        np.stack([q, q + 1.0]))
    _close(got, want, rtol=1e-14)
    assert ready._program([q]) is not None


def test_a_warm_cache_is_ready_at_once(monkeypatch, tmp_path):
    """The helper's mark in the cache says so (and with the helper off, always)."""
    from autotape.kernels import background
    monkeypatch.setattr(eager_calls, "_ready", set())
    monkeypatch.setenv(background.ENABLED_ENV, "0")
    assert eager_calls.ready()
    monkeypatch.setattr(eager_calls, "_ready", set())
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    monkeypatch.setattr(eager_calls, "mark_path", lambda: str(tmp_path / "mark"))
    (tmp_path / "mark").write_text("ok\n")
    assert eager_calls.ready()


def test_threads_call_it_at_once(eager):
    import concurrent.futures
    c = at.compile(rosen, np.ones(6))
    points = [np.linspace(-1.0, 1.0, 6) * s for s in np.linspace(0.5, 1.5, 16)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: c.value_and_grad(x)[1].numpy(), points))
    engine.FORCE_PYTHON_TIER[0] = False
    for x, g in zip(points, got):
        np.testing.assert_allclose(g, c.grad(x).numpy(), rtol=1e-13)


def test_jit_sweep_run_by_python_gives_the_compiled_numbers(eager):
    """at.jit's first call on a cold cache sweeps its recording with the sweep kernel's
    own code run by Python while a helper compiles it."""
    @numba.njit
    def pendulum(p):
        x, v = p[0], p[1]
        for i in range(200):
            a = -p[2] * math.sin(x) - 0.1 * v + 0.3 * math.cos(0.01 * i) * math.exp(-x * x)
            x, v = x + 0.01 * v, v + 0.01 * a
        return x * x + math.tanh(v) + abs(x - v) ** 1.5 / (1.0 + v * v)
    p = np.array([0.4, -0.2, 1.3])
    by_python = at.jit(pendulum).value_and_grad(p)
    engine.FORCE_PYTHON_TIER[0] = False
    compiled = at.jit(pendulum).value_and_grad(p)
    assert by_python[0].item() == compiled[0].item()
    np.testing.assert_allclose(by_python[1].numpy(), compiled[1].numpy(), rtol=1e-14)


def test_points_run_on_one_thread_until_the_threaded_kernels_are_ready(monkeypatch):
    """... and forward mode by reverse sweeps until its kernel is ready."""
    import autotape.program as program
    c = at.compile(rosen, np.ones(6))
    points = np.random.default_rng(1).normal(size=(300, 6))
    calls = [lambda: F.vmap(c.value_and_grad)(points), lambda: F.vmap(c.jacfwd)(points),
             lambda: c.jacfwd(points[0]), lambda: c.hessian(points[0]),
             lambda: c.jvp((points[0],), (points[1],))]
    want = [call() for call in calls]
    monkeypatch.setattr(program, "kernel_ready", lambda kernel: False)
    for call, w in zip(calls, want):
        _close(call(), w, rtol=1e-12)


TRIPLE = at.custom_op(numba.njit(lambda x: x * 3.0), numba.njit(
    lambda inputs, y, g: (3.0 * g,)), name="triple")


def _peaked(x):                                      # (max: the lean program has no row)
    return x.max() * 2.0 + (x * x).sum()


def _calls_numba(x):
    return (TRIPLE(at.sin(x)) * x).sum()


@pytest.mark.parametrize("f, waits_for", [(_peaked, "tape_path"), (_calls_numba, "calls")])
def test_a_program_waits_for_the_kernels_its_kind_of_call_runs(f, waits_for, monkeypatch):
    """A recording the lean program does not lower waits for the tape replay's kernels
    (``tape_path``); one calling numba custom ops for the interpreter's ranges its driver
    calls, or the Python driver while a helper compiles it (``calls``,
    kernels/calls.py): f runs as eager code until then."""
    x = np.array([0.5, 2.0, -1.0])
    want = at.compile(f, x).value_and_grad(x)
    waiting = [True]
    monkeypatch.setattr(eager_calls, "ready", lambda tape_path=False, calls=False: not (
        {"tape_path": tape_path, "calls": calls}[waits_for] and waiting[0]))
    c = at.compile(f, x)
    p, = c._programs.values()
    _close(c.value_and_grad(x), want)
    assert p.pending and getattr(p, waits_for) and isinstance(p.lean,
                                                               eager_calls.EagerProgram)
    waiting[0] = False
    _close(c.value_and_grad(x), want)
    assert not p.pending
    if waits_for == "calls":
        assert p.lean.user_calls
    else:
        assert p.lean is None                       # (the tape path replays it now)


def test_points_on_one_thread_start_the_helper_that_compiles_the_threaded_kernels(
        monkeypatch):
    """A cache that has the one-point kernels but not the threaded ones (filled with
    background compiling off) still gets them: the first call that wants them starts
    the helper."""
    import autotape.program as program
    started = []
    monkeypatch.setattr(program, "_KERNELS_READY", set())
    monkeypatch.setattr(program, "on_disk", lambda kernel: False)
    monkeypatch.setattr(program.background, "enabled", lambda: True)
    monkeypatch.setattr(program, "kernels_beside", lambda: started.append(1) or False)
    fake = type("NotCompiled", (), {"signatures": ()})()
    assert not program.kernel_ready(fake) and started == [1]


def test_an_eager_call_pauses_the_cyclic_collector_and_restores_it(eager):
    """Python's collector is off while f runs as eager code (a full collection during a
    call walked numba's objects for 60 ms), and as it was after the call: on again, or
    still off where the program turned it off; a cycle f leaves is collected after."""
    seen, left = [], []

    class Node:
        pass

    def f(x):
        seen.append(gc.isenabled())
        node = Node()
        node.self = node                       # (a cycle only the collector frees)
        left.append(weakref.ref(node))
        return (x * x).sum()
    c = at.compile(f, np.ones(3))
    assert gc.isenabled()
    c.value_and_grad(np.ones(3))
    assert seen[-1] is False and gc.isenabled()
    gc.collect()
    assert all(ref() is None for ref in left)
    gc.disable()
    try:
        c.value_and_grad(np.ones(3))
        assert seen[-1] is False and not gc.isenabled()
    finally:
        gc.enable()
