"""The lean program (kernels/program.py) behind at.compile: every op it lowers gives the
tape kernels' answers, B points at once give B separate calls' answers, and rows it
cannot lower leave the recording on the tape path, still correct."""
import concurrent.futures
import importlib
import pickle
import sys
import types

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotape as at
import autotape.func as F
from autotape import opcodes
from autotape.kernels.loops import _broadcast_lanes
from autotape.kernels.lanes import contiguous_lane_sum
from autotape.kernels.program import lane_sum, lane_tree, live_sets, run_points
from autotape.tuning import POINTS_BODY_MAX
from test_op_table import SAMPLES, _recorded_ops

# the ops the lean program leaves to the tape's interpreting kernels
NOT_LOWERED = {opcodes.MAX, opcodes.MIN, opcodes.PROD, opcodes.CUMSUM, opcodes.CUMPROD,
               opcodes.INV, opcodes.SOLVE, opcodes.SLOGDET, opcodes.DET,
               opcodes.CHOLESKY, opcodes.EIGH, opcodes.SVD, opcodes.PINV}


def _results(c, x):
    value, g = c.value_and_grad(x)
    return value.numpy(), g.numpy(), c.jacobian(x).numpy(), c.hessian(x).numpy()


def _on_tape(c):
    for p in c._programs.values():
        p.lean = None


@pytest.mark.parametrize("code", sorted(SAMPLES), ids=opcodes.opcode_name)
def test_every_lowered_op_gives_the_tape_kernels_answers(code):
    f, x = SAMPLES[code]
    c = at.compile(f, x)
    points = [x, x * 0.7 + 0.05]
    lean = [_results(c, p) for p in points]
    lowered = all(p.lean is not None for p in c._programs.values())
    ops = _recorded_ops(f, x)
    assert lowered == (not ops & NOT_LOWERED), opcodes.opcode_name(code)
    _on_tape(c)
    for p, got in zip(points, lean):
        want = _results(c, p)
        for g, w in zip(got[:3], want[:3]):
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15, equal_nan=True)
        _same_hessian(got[3], want[3])


def _same_hessian(forward_over_reverse, reverse):
    """The lean Hessian is forward over reverse: where the tape's reverse sweep of the
    gradient multiplies a zero adjoint by a nan partial (an element outside its op's
    domain), a zero tangent carries nothing and the entry is the true 0. Elsewhere they
    agree, nan for nan."""
    h, r = forward_over_reverse, reverse
    assert not (np.isnan(h) & ~np.isnan(r)).any()
    both = ~np.isnan(r)
    np.testing.assert_allclose(h[both], r[both], rtol=1e-13, atol=1e-15)
    assert (h[np.isnan(r) & ~np.isnan(h)] == 0).all()


def pendulum(theta):
    x, v = theta[0], theta[1]
    for _ in range(40):
        a = -theta[2] * at.sin(x) - theta[3] * v
        x, v = x + 0.05 * v, v + 0.05 * a
    return at.where(x > 0, x * x, at.clip(-x, 0.0, 0.3)) + v * v


@pytest.mark.parametrize("points", [1, 5, 37])
def test_vmap_equals_separate_calls(points):
    rng = np.random.default_rng(points)
    thetas = np.array([1.0, 0.0, 9.8, 0.1]) * rng.uniform(0.5, 1.5, (points, 4))
    c = at.compile(pendulum, thetas[0])
    value, grad = F.vmap(c.value_and_grad)(thetas)
    hess = F.vmap(c.hessian)(thetas)
    assert value.shape == (points,) and grad.shape == (points, 4)
    assert hess.shape == (points, 4, 4)
    for k, t in enumerate(thetas):
        assert value.numpy()[k] == c(t).item()
        np.testing.assert_array_equal(grad.numpy()[k], c.grad(t).numpy())
        np.testing.assert_allclose(hess.numpy()[k], c.hessian(t).numpy(), rtol=1e-14)
    np.testing.assert_array_equal(F.vmap(c)(thetas).numpy(), value.numpy())
    np.testing.assert_array_equal(F.vmap(c.grad)(thetas).numpy(), grad.numpy())
    assert c.traces == 2                       # the value and the Hessian: once each


def test_vmap_of_several_arguments_and_outputs():
    def f(x, y):
        return {"a": x * y.sum(), "b": at.sin(x).sum()}
    c = at.compile(f, np.ones(3), np.ones(2))
    xs, ys = np.random.default_rng(0).normal(size=(6, 3)), np.random.default_rng(1).normal(
        size=(6, 2))
    out, jac = F.vmap(c)(xs, ys), F.vmap(c.jacobian)(xs, ys)
    assert out["a"].shape == (6, 3) and out["b"].shape == (6,)
    assert jac["a"][0].shape == (6, 3, 3) and jac["a"][1].shape == (6, 3, 2)
    for k in range(6):
        one = c.jacobian(xs[k], ys[k])
        np.testing.assert_array_equal(out["a"].numpy()[k], c(xs[k], ys[k])["a"].numpy())
        np.testing.assert_array_equal(jac["a"][1].numpy()[k], one["a"][1].numpy())
        np.testing.assert_array_equal(jac["b"][0].numpy()[k], one["b"][0].numpy())


def test_vmap_of_a_recording_on_the_tape_path_and_of_plain_functions():
    c = at.compile(lambda x: at.linalg.inv(x.reshape(2, 2) + 3 * np.eye(2)).sum(), np.ones(4))
    xs = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(F.vmap(c.grad)(xs).numpy(),
                                  np.stack([c.grad(x).numpy() for x in xs]))
    assert all(p.lean is None for p in c._programs.values())
    w = at.tensor([1.0, 2.0], requires_grad=True)
    out = F.vmap(lambda x: (x * w).sum())(np.ones((3, 2)))
    assert out.shape == (3,) and at.grad(out.sum(), w)[0].tolist() == [3.0, 3.0]


def test_vmap_errors():
    c = at.compile(lambda x: (x * x).sum(), np.ones(2))
    with pytest.raises(ValueError, match="leading axis"):
        F.vmap(c)(3.0)
    with pytest.raises(ValueError, match="leading axes differ"):
        at.compile(lambda x, y: (x * y).sum(), np.ones(2), np.ones(2)).map_points(
            "grad", (np.ones((3, 2)), np.ones((4, 2))))
    with pytest.raises(ValueError, match="in_axes"):
        F.vmap(c, in_axes=1)
    with pytest.raises(RuntimeError, match="single scalar"):
        F.vmap(at.compile(lambda x: x * 2.0, np.ones(2)).grad)(np.ones((3, 2)))


def test_dead_instructions_pass_nothing():
    """A Jacobian row swept from one output never runs the instructions only another
    output needs: sqrt'(0) = inf there must not make the first row nan. (Within one
    output, as torch, a zero adjoint meets the inf: stack([2x, sqrt(x)]) gives nan.)"""
    c = at.compile(lambda x: (x[0] * 2.0, at.sqrt(x[0])), np.ones(1))
    first, second = c.jacobian(np.zeros(1))
    assert first.tolist() == [2.0] and second.tolist() == [np.inf]
    assert c._programs[("value", (1,))].lean is not None


def test_masks_select_and_where_differentiates_both_branches():
    """relu's mask passes 0 to sqrt's inf (torch's answer too); where sends a zero
    adjoint into the untaken branch, which log'(0) = inf makes nan (as torch)."""
    c = at.compile(lambda x: at.sqrt(at.relu(x)).sum() + at.where(x > 0, at.log(x), 0.0).sum(),
                   np.ones(3))
    g = c.grad(np.array([-1.0, 0.0, 4.0])).numpy()
    np.testing.assert_array_equal(g, [0.0, np.nan, 0.25 + 0.25])
    _on_tape(c)
    np.testing.assert_array_equal(c.grad(np.array([-1.0, 0.0, 4.0])).numpy(), g)


# ---- a program is data: it pickles and runs in other processes --------------------------------

def _grad_in_worker(c, thetas):
    return c.grad(thetas[0]).numpy(), F.vmap(c.value_and_grad)(thetas)[1].numpy()


def test_compiled_pickles_and_runs_in_a_process_pool():
    import concurrent.futures
    import multiprocessing
    import pickle
    thetas = np.array([1.0, 0.0, 9.8, 0.1]) * np.random.default_rng(3).uniform(
        0.5, 1.5, (5, 4))
    c = at.compile(pendulum, thetas[0])
    c.hessian(thetas[0])
    copy = pickle.loads(pickle.dumps(c))
    assert copy.f is pendulum and copy.traces == 2
    np.testing.assert_array_equal(copy.hessian(thetas[1]).numpy(), c.hessian(thetas[1]).numpy())
    np.testing.assert_array_equal(copy.jacobian(thetas[2]).numpy(), c.grad(thetas[2]).numpy())
    with concurrent.futures.ProcessPoolExecutor(    # (spawn: numba's OpenMP threads
            2, mp_context=multiprocessing.get_context("spawn")) as pool:   # do not fork)
        g, batch = pool.submit(_grad_in_worker, c, thetas).result()
    np.testing.assert_array_equal(g, c.grad(thetas[0]).numpy())
    np.testing.assert_array_equal(batch, F.vmap(c.grad)(thetas).numpy())


def test_a_lambda_pickles_whole_with_cloudpickle():
    import pickle
    pytest.importorskip("cloudpickle")
    c = at.compile(lambda x: (at.sin(x) * x).sum(), np.ones(3))
    copy = pickle.loads(pickle.dumps(c))
    np.testing.assert_array_equal(copy.grad(np.ones(4)).numpy(), c.grad(np.ones(4)).numpy())


def test_a_lambda_pickles_with_its_recordings_only(monkeypatch):
    import pickle
    monkeypatch.setattr(importlib.import_module("autotape.pickling"), "cloudpickle", None)
    c = at.compile(lambda x: (at.sin(x) * x).sum(), np.ones(3))
    copy = pickle.loads(pickle.dumps(c))
    np.testing.assert_array_equal(copy.grad(np.arange(3.0)).numpy(),
                                  c.grad(np.arange(3.0)).numpy())
    with pytest.raises(RuntimeError, match="pickled without its function"):
        copy.grad(np.ones(4))                  # a new shape needs f
    with pytest.raises(RuntimeError, match="pickled without its function"):
        copy.hessian(np.ones(3))               # so does a new kind of recording


# ---- float32 programs ----------------------------------------------------------------------

def test_float32_program_runs_in_float32():
    """Float32 arguments make a float32 program: every op computes in float64 and
    rounds its result, as float32 tensors do, so it agrees with eager float32 to a few
    ulps (constants are stored rounded) and with float64 to float32's precision."""
    theta = np.array([1.0, 0.2, 9.8, 0.1], np.float32)
    c32 = at.compile(pendulum, theta)
    c64 = at.compile(pendulum, theta.astype(np.float64))
    value, g = c32.value_and_grad(theta)
    assert value.dtype == np.float32 and g.dtype == np.float32
    eager = at.tensor(theta, requires_grad=True)
    out = pendulum(eager)
    np.testing.assert_allclose(value.item(), out.item(), rtol=1e-5)
    np.testing.assert_allclose(g.numpy(), at.grad(out, eager)[0].numpy(), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(g.numpy(), c64.grad(theta.astype(np.float64)).numpy(),
                               rtol=1e-3, atol=1e-4)
    batch = np.stack([theta, theta * 1.1]).astype(np.float32)
    vg = F.vmap(c32.value_and_grad)(batch)
    assert vg[1].dtype == np.float32 and vg[1].shape == (2, 4)
    np.testing.assert_array_equal(vg[1].numpy()[0], g.numpy())
    assert c32.hessian(theta).dtype == np.float32
    assert c64.traces == 1 and c32.traces == 2


# ---- loops found again and compiled (kernels/loops.py) ----------------------------------------

def _long_pendulum(theta):
    x, v = theta[0], theta[1]
    for _ in range(300):
        a = -theta[2] * at.sin(x) - theta[3] * v
        x, v = x + 0.02 * v, at.clip(v + 0.02 * a, -3.0, 3.0)   # a condition in the body
    return x * x + v * v


def _driven(theta):
    """A forced pendulum: the forcing reads t = i * h, a constant that is new at every
    step (and sometimes equals one made before: the recording keeps one per value)."""
    x, v, h = theta[0] * 1.0, theta[1] * 0.0, 0.02
    for i in range(300):
        t = i * h
        a = -theta[2] * at.sin(x) - theta[3] * v + 0.5 * float(np.cos(1.3 * t))
        x, v = x + h * v, v + h * a
    return x * x + v * v


def _heat(d):
    h = np.exp(-np.linspace(-2, 2, 16) ** 2).astype(d.dtype)
    for _ in range(60):
        h = h + 0.2 * d * (np.roll(h, 1) - 2.0 * h + np.roll(h, -1))
    return (h * h).sum()


def _reaction_diffusion_2d(p):
    """np.roll on both axes: a 2-D roll is ~60 row copies a step, each of one kind, so
    the loop finder measures periods from a rarer instruction."""
    grid = np.linspace(-2, 2, 12)
    u = np.exp(-grid[:, None] ** 2 - grid[None, :] ** 2).astype(p.dtype)
    for _ in range(80):
        lap = np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) \
            - 4 * u
        u = u + 0.1 * (p[0] * lap + p[1] * u * (1 - u))
    return (u * u).sum()


def _n_body(q0):
    """Pairwise forces by broadcasting and sums over an axis: gathers and scatters in
    the body (the broadcast copies' slots lie in each step's stretch)."""
    x = q0.reshape(5, 2)
    v = np.zeros((5, 2), q0.dtype)
    for _ in range(60):
        d = x[:, None, :] - x[None, :, :]
        r2 = (d * d).sum(axis=-1) + 0.1
        f = (d / r2[:, :, None] ** 1.5).sum(axis=1)
        v = v - 0.01 * f
        x = x + 0.01 * v
    return (x * x).mean() + (v[:, 0] * x[::-1, 1]).sum()


def _burgers(p):
    """Slices and np.concatenate for the boundaries."""
    u = np.sin(np.linspace(0, 2 * np.pi, 24)).astype(p.dtype)
    for _ in range(60):
        ux = np.concatenate([u[1:2] - u[0:1], u[2:] - u[:-2], u[-1:] - u[-2:-1]])
        uxx = np.concatenate([np.zeros(1, p.dtype), u[2:] - 2 * u[1:-1] + u[:-2],
                              np.zeros(1, p.dtype)])
        u = u - 0.01 * u * ux + p[0] * 0.01 * uxx
    return (u * u).sum()


_STATE_MATRIX = np.array([[0.9, 0.1, 0.0], [-0.2, 0.8, 0.1], [0.05, 0.0, 0.95]])


def _state_space(p):
    """A linear state-space model with a nonlinear read-out: a small matmul a step."""
    x = p[:3]
    for _ in range(60):
        x = _STATE_MATRIX.astype(p.dtype) @ x + p[3] * np.tanh(x)
    return (x * x).sum()


def _with_dead_work(theta):
    """Two outputs; the body's sqrt(0) (derivative inf) reaches only the second."""
    x, other = theta[0], theta[1] * 0.0
    for _ in range(200):
        other = other + at.sqrt(x - x)
        x = at.sin(x) * 0.9 + theta[1]
    return x, other


@pytest.fixture
def poisoned(monkeypatch):
    """Scratch that starts as nan: a slot read before this call wrote it shows."""
    monkeypatch.setattr(importlib.import_module("autotape.program"), "POISON_SCRATCH", True)


def _on_interpreter(c):
    for p in c._programs.values():
        p.lean.loop = None


@pytest.mark.parametrize("f, x", [
    (_long_pendulum, np.array([1.0, 0.3, 9.8, 0.1])),
    (_driven, np.array([1.0, 0.3, 9.8, 0.1])),
    (_heat, np.full(16, 0.4)),
    (_reaction_diffusion_2d, np.array([0.2, 0.5])),
    (_n_body, np.random.default_rng(0).normal(size=10)),
    (_burgers, np.array([0.5])),
    (_state_space, np.array([1.0, -0.5, 0.3, 0.05])),
], ids=["pendulum", "driven", "heat", "2-D roll", "n-body", "burgers", "matmul"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_loops_give_the_interpreters_answers(f, x, dtype, poisoned, loop_bodies):
    x = x.astype(dtype)
    c, plain = at.compile(f, x), at.compile(f, x)
    lean = c._programs[next(iter(c._programs))].lean
    assert lean.loop is not None and lean.loop[2] >= 50
    points = [x * s for s in (1.0, 0.9, 1.1, 0.8, 1.2)]       # past COMPILE_LOOP_AFTER
    got = [(c(p).numpy(), c.grad(p).numpy()) for p in points]
    assert lean.loop_kernels is not None
    _on_interpreter(plain)
    for p, (value, g) in zip(points, got):           # (bit for bit, fused runs too)
        np.testing.assert_array_equal(value, plain(p).numpy())
        np.testing.assert_array_equal(g, plain.grad(p).numpy())
        assert np.isfinite(g).all()


def test_a_forcing_term_from_the_loop_index_is_a_loop():
    """t = i * h makes a new constant at every step: the body reads it from a table of
    the repetitions' constants, so the loop covers every step."""
    x = np.array([1.0, 0.3, 9.8, 0.1])
    c = at.compile(_driven, x)
    lean = c._programs[next(iter(c._programs))].lean
    assert lean.loop is not None and lean.loop[2] >= 295
    assert lean.loop_table is not None and lean.loop_table[1] >= 1
    plain = at.compile(_driven, x)
    _on_interpreter(plain)
    for _ in range(6):
        np.testing.assert_allclose(c.jacfwd(x).numpy(), plain.jacfwd(x).numpy(), rtol=1e-14)
    eager = at.tensor(x, requires_grad=True)
    np.testing.assert_allclose(c.grad(x).numpy(), at.grad(_driven(eager), eager)[0].numpy(),
                               rtol=1e-13)
    segmented = at.compile(_driven, x, checkpoint="sqrt")      # (its segments too)
    assert segmented._lean("value", [x]).lean.segments is not None
    np.testing.assert_array_equal(segmented.grad(x).numpy(), c.grad(x).numpy())
    np.testing.assert_array_equal(segmented.jacfwd(x).numpy(), c.jacfwd(x).numpy())


def test_a_loop_whose_body_a_row_does_not_reach_sweeps_it_interpreted(poisoned):
    """The Jacobian row of x must not run the body's sqrt VJP (0 * inf = nan)."""
    x = np.array([0.5, 0.1])
    c = at.compile(_with_dead_work, x)
    assert c._programs[("value", (2,))].lean.loop is not None
    for _ in range(5):
        first, second = c.jacobian(x)
    assert np.isfinite(first.numpy()).all() and np.isnan(second.numpy()[0])
    eager = at.tensor(x, requires_grad=True)
    np.testing.assert_allclose(first.numpy(), at.grad(_with_dead_work(eager)[0], eager)[0]
                               .numpy(), rtol=1e-14)


def _frozen_step_control(p):
    """An adaptive-looking step: its size h from an error estimate (a sqrt of 0:
    derivative inf) frozen through a floor, as integrate._frozen does. No output's
    reverse sweep reaches the estimate, in any repetition."""
    u = np.linspace(0.5, 1.0, 4) * p[1]
    h = p[0] * 0.0 + 0.05
    loss = p[0] * 0.0
    for _ in range(40):
        u_new = u - h * p[0] * u * u
        err = np.sqrt((u_new - u) * 0.0).sum()
        h = np.exp2(np.floor(np.log2(h * (0.99 + err)) * 2.0 ** 32) * 2.0 ** -32)
        u = u_new
        loss = loss + (u * u).sum() * h
    return loss


def test_a_body_sweeps_without_what_no_output_reaches(loop_bodies, poisoned):
    # the step control is left out of the body's reverse (instead of the whole loop
    # sweeping on the interpreter): the gradient is the interpreter's, finite (the
    # sqrt's zero adjoint times its inf partial would be nan)
    x = np.array([0.7, 1.1])
    c, plain = at.compile(_frozen_step_control, x), at.compile(_frozen_step_control, x)
    points = [x * s for s in (1.0, 0.9, 1.1, 0.8, 1.2)]
    got = [c.value_and_grad(p) for p in points]
    lean = c._lean("value", [x]).lean
    assert lean.loop_kernels is not None and lean._unswept().any()
    assert all(lean._loop_reached_by(lean.live))              # (the body sweeps it)
    assert "SQRT" not in lean.loop_code[1].split("def reverse(")[1].split("def ")[0]
    _on_interpreter(plain)
    for p, (value, g) in zip(points, got):
        want, want_g = plain.value_and_grad(p)
        assert np.isfinite(g.numpy()).all()
        np.testing.assert_array_equal(value.numpy(), want.numpy())
        np.testing.assert_array_equal(g.numpy(), want_g.numpy())
    np.testing.assert_array_equal(F.vmap(c.grad)(np.stack(points)).numpy(),
                                  np.stack([g.numpy() for _, g in got]))
    # (eagerly, as in torch, the floor passes zeros back and 0 * inf makes nan: compiled
    # programs sweep only what passes something back: docs/torch.md)


@pytest.mark.parametrize("chunk, threads", [(1, 1), (1, 2), (4, 1), (4, 2)])
def test_the_body_runs_a_threads_points_in_one_call(chunk, threads, loop_bodies, poisoned,
                                                   monkeypatch):
    """vmap of a program with a compiled body: each thread's points (one at a time, or in
    chunks, a short last one included) in one call of the body's driver (kernels/loops.py
    ``run``: no Python per point), bit for bit the interpreter's answers, an output the
    body may not sweep included."""
    prog = importlib.import_module("autotape.program")
    monkeypatch.setattr(prog, "chunk_size", lambda nslots, least=4: chunk)
    monkeypatch.setattr(prog, "for_numba", lambda: threads)
    x = np.array([0.5, 0.1])
    c = at.compile(_with_dead_work, x)
    points = x * np.linspace(0.8, 1.2, 9)[:, None]
    for p in points[:4]:
        c.jacobian(p)                                         # (compiles the body)
    plain = at.compile(_with_dead_work, x)
    _on_interpreter(plain)
    singles = [plain.jacobian(p) for p in points]
    F.vmap(c.jacobian)(points)                                # (compiles a chunk's body)
    lean = c._lean("value", [x]).lean
    assert lean.loop_kernels is not None
    assert not all(lean._loop_reached_by(lean.live))         # (the dead work's output)
    calls = []
    kernels = lean.loop_kernels[0 if chunk == 1 else 1]
    driver = kernels[4]
    monkeypatch.setattr(lean, "loop_kernels", tuple(
        group if group is not kernels else group[:4] + (
            lambda *a: calls.append(a[13]) or driver(*a),) for group in lean.loop_kernels))
    first, second = F.vmap(c.jacobian)(points)
    assert sorted(calls) == list(range(threads))              # (chunk0: one per thread)
    for k, (f, s) in enumerate(singles):
        np.testing.assert_array_equal(first.numpy()[k], f.numpy())
        np.testing.assert_array_equal(second.numpy()[k], s.numpy())


def _wide_heat(d):
    """A program of 3.6M slots (2000 cells, 300 steps): chunks of points would not fit."""
    u = np.sin(np.linspace(0.0, np.pi, 2000)) * d[0]
    loss = d[0] * 0.0
    for _ in range(300):
        u = u + d[1] * (np.roll(u, 1) - 2.0 * u + np.roll(u, -1))
        loss = loss + (u * u).mean()
    return loss


def test_a_program_too_wide_for_chunks_maps_one_point_at_a_time(loop_bodies):
    # its points go through the one-point body, gradients and forward mode (chunks of 4
    # took 2.1x and 1.65x as long), and the chunk-of-points kernels are never compiled
    x = np.array([1.0, 0.2])
    c = at.compile(_wide_heat, x)
    points = x * np.array([[1.0, 1.0], [0.9, 1.1], [1.1, 0.8]])
    for _ in range(5):
        grads, jacs = F.vmap(c.grad)(points), F.vmap(c.jacfwd)(points)
    lean = c._lean("value", [x]).lean
    assert lean._most_points(3) == 1 and lean._most_points(3, 2) == 1
    assert {group for _, group in lean.loop_ready} == {"reverse", "tangent"}
    for k, p in enumerate(points):
        np.testing.assert_array_equal(grads.numpy()[k], c.grad(p).numpy())
        np.testing.assert_array_equal(jacs.numpy()[k], c.jacfwd(p).numpy())
    np.testing.assert_allclose(grads.numpy(), jacs.numpy(), rtol=1e-11)



def test_a_loop_bodys_calls_at_one_point_go_straight_to_its_driver(loop_bodies):
    # once the body is compiled, value_and_grad and the value at one point call the
    # body's driver with arguments made once (~25 us of Python less a call): run()'s
    # bits, at every point, from several threads at once
    x = np.array([1.0, 0.3, 9.8, 0.1])
    c = at.compile(_long_pendulum, x)
    for _ in range(5):
        c.value_and_grad(x)
    c.wait_compiled()
    lean = c._lean("value", [x]).lean
    assert lean._loop_point(True) is not None and lean._loop_point(False) is not None
    points = x * np.random.default_rng(2).uniform(0.8, 1.2, (12, 4))

    def straight(p):
        value, grad = c.value_and_grad(p)
        return float(value), grad.numpy(), float(c(p))
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        got = list(pool.map(straight, points))
    for p, (value, grad, alone) in zip(points, got):
        values, jac = lean.run(p[None], jacobian=True)
        assert value == alone == values[0, 0] and np.array_equal(grad, jac[0, 0])
        assert lean.run(p[None])[0][0, 0] == alone
    # not for a program whose loop body is not compiled (yet)
    fresh = at.compile(_long_pendulum, x)._lean("value", [x]).lean
    assert fresh._loop_point(True) is None and fresh.gradient_at(x, np.empty(4)) is None
    assert fresh.values_at(x) is None
    # a gradient array the kernel cannot write in place is refused, not written to a copy
    strided = np.empty(8)[::2]
    assert lean.gradient_at(x, strided) is None

# a repetition of ~200 scalar instructions in no repeating order (a solver's step): 4 ops
# drawn at random, each two instructions
_STEP_OPS = [(lambda y, a: y * a + 0.25), (lambda y, a: at.sin(y) - a),
             (lambda y, a: y - a * y), (lambda y, a: at.cos(y * a))]
_LONG_STEP = [_STEP_OPS[k] for k in np.random.default_rng(3).integers(0, 4, 100)]


def _long_body(p):
    y = p[0]
    for _ in range(12):
        for op in _LONG_STEP:
            y = op(y, p[1])
    return y


def test_a_body_too_long_for_chunks_maps_one_point_at_a_time():
    # numba takes minutes for a long body's chunk-of-points kernels (a Rodas4 step's):
    # its points go through the one-point body; a short body's go in chunks
    x = np.array([0.3, 0.9])
    lean = at.compile(_long_body, x)._lean("value", [x]).lean
    assert lean.loop is not None and lean.loop[1] > POINTS_BODY_MAX
    assert lean._most_points(64) == 1 and lean._most_points(64, 2) == 1
    theta = np.array([1.0, 0.3, 9.8, 0.1])
    short = at.compile(_long_pendulum, theta)._lean("value", [theta]).lean
    assert short.loop[1] <= POINTS_BODY_MAX and short._most_points(64) >= 4


def test_a_loop_survives_pickling():
    import pickle
    x = np.array([1.0, 0.3, 9.8, 0.1])
    c = at.compile(_long_pendulum, x)
    for _ in range(5):
        c.grad(x)
    copy = pickle.loads(pickle.dumps(c))
    for _ in range(5):
        g = copy.grad(x)
    np.testing.assert_array_equal(g.numpy(), c.grad(x).numpy())


def _loop_matmul(a, b):
    """numpy's matmul as the tape's replay computes a small one: per output element,
    the products in the order of the inner index, summed from 0.0."""
    a2 = a.reshape((1,) * (b.ndim - a.ndim) + a.shape) if a.ndim > 1 else a[None, :]
    b2 = b.reshape((1,) * (a.ndim - b.ndim) + b.shape) if b.ndim > 1 else b[:, None]
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    out = np.zeros(batch + (a2.shape[-2], b2.shape[-1]))
    for t in np.ndindex(*batch):
        for r in range(a2.shape[-2]):
            for c in range(b2.shape[-1]):
                s = 0.0
                for p in range(a2.shape[-1]):
                    s += a2[t + (r, p)] * b2[t + (p, c)]
                out[t + (r, c)] = s
    return out.reshape(np.matmul(a, b).shape)


@pytest.mark.parametrize("sa, sb", [
    ((4, 5), (5,)), ((5,), (5, 3)), ((3, 5), (5, 4)), ((7,), (7,)), ((2, 3, 4), (4,)),
    ((2, 1, 3, 4), (3, 4, 2)), ((3, 1), (1, 4)), ((1, 4), (4, 1)), ((3, 0), (0, 2)),
], ids=str)
def test_a_small_matmul_is_lowered_with_the_replays_bits(sa, sb):
    """A matmul below BLAS's size becomes products and a sum over the inner index in
    the replay's order: the same bits as its loops, the gradient of every operand, the
    forward-mode and batched runners alike."""
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    na = int(np.prod(sa))

    def f(x):
        a, b = x[:na].reshape(sa), x[na:].reshape(sb)
        return (a @ b) * 2.0

    x = rng.standard_normal(na + int(np.prod(sb)))
    c = at.compile(f, x)
    out = c(x).numpy()
    assert all(p.lean is not None for p in c._programs.values())
    np.testing.assert_array_equal(out, _loop_matmul(x[:na].reshape(sa), x[na:].reshape(sb))
                                  * 2.0)
    eager = at.tensor(x, requires_grad=True)
    want = at.func.jacrev(f)(x).numpy()
    np.testing.assert_allclose(c.jacobian(x).numpy(), want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(c.jacfwd(x).numpy(), want, rtol=1e-13, atol=1e-15)
    xs = x + 0.1 * rng.standard_normal((5, x.size))
    batched = F.vmap(c)(xs).numpy()
    for k in range(5):
        np.testing.assert_array_equal(batched[k], c(xs[k]).numpy())
    if out.size:
        loss = at.compile(lambda x: (np.tanh(f(x)) ** 2).sum(), x)
        np.testing.assert_allclose(loss.grad(x).numpy(),
                                   at.grad((np.tanh(f(eager)) ** 2).sum(), eager)[0].numpy(),
                                   rtol=1e-13, atol=1e-14)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_matmuls_are_lowered_with_the_replays_bits(data):
    """Random 1-D, 2-D and batched operands, their batch axes broadcast: the compiled
    value has the replay loops' bits and its gradient is eager's."""
    n, k, m = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch = data.draw(st.lists(st.integers(1, 3), max_size=2))
    sa = tuple(data.draw(st.sampled_from([1, d])) for d in batch) + (n, k) \
        if data.draw(st.booleans()) else (k,)
    sb = tuple(batch[len(batch) - data.draw(st.integers(0, len(batch))):]) + (k, m) \
        if data.draw(st.booleans()) else (k,)
    na = int(np.prod(sa))
    x = np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal(
        na + int(np.prod(sb)))

    def f(x):
        return np.sin(x[:na].reshape(sa) @ x[na:].reshape(sb) * 1.0).sum()

    def product(x):
        return x[:na].reshape(sa) @ x[na:].reshape(sb) * 1.0

    c = at.compile(product, x)
    np.testing.assert_array_equal(c(x).numpy(), _loop_matmul(x[:na].reshape(sa),
                                                             x[na:].reshape(sb)))
    assert all(p.lean is not None for p in c._programs.values())
    eager = at.tensor(x, requires_grad=True)
    np.testing.assert_allclose(at.compile(f, x).grad(x).numpy(),
                               at.grad(f(eager), eager)[0].numpy(), rtol=1e-12, atol=1e-14)


def test_a_matmul_of_blas_size_replays_its_tape_and_explain_says_why():
    """From BLAS_MIN_FLOPS multiply-adds a block the replay calls BLAS, whose rounding
    lean instructions would not repeat: that program stays on the tape."""
    n = 16                                              # 16^3 = BLAS_MIN_FLOPS
    x = np.random.default_rng(0).standard_normal(n * n)
    c = at.compile(lambda x: (x.reshape(n, n) @ x.reshape(n, n)).sum(), x)
    c(x)
    assert all(p.lean is None for p in c._programs.values())
    assert "multiply-adds" in c.explain(x)
    small = at.compile(lambda x: (x.reshape(n, n) @ x.reshape(n, n)[:, :15]).sum(), x)
    small(x)
    assert all(p.lean is not None for p in small._programs.values())


def test_no_loop_in_short_or_irregular_programs():
    c = at.compile(lambda x: (at.sin(x) * x).sum(), np.ones(3))
    assert c._programs[("value", (3,))].lean.loop is None


@pytest.mark.parametrize("f, x", [
    (_long_pendulum, np.array([1.0, 0.3, 9.8, 0.1])),
    (_driven, np.array([1.0, 0.3, 9.8, 0.1])),
    (_heat, np.full(16, 0.4)),
    (_reaction_diffusion_2d, np.array([0.2, 0.5])),
    (_n_body, np.random.default_rng(0).normal(size=10)),
    (_state_space, np.array([1.0, -0.5, 0.3, 0.05])),
], ids=["pendulum", "driven", "heat", "2-D roll", "n-body", "matmul"])
def test_compiled_loops_at_many_points(f, x, poisoned, loop_bodies):
    """vmap through a compiled loop body (chunks of points, threads): the interpreter's
    answers, for every point of an uneven last chunk too."""
    c, plain = at.compile(f, x), at.compile(f, x)
    _on_interpreter(plain)
    xs = x * np.random.default_rng(5).uniform(0.8, 1.2, (45, x.size))
    for _ in range(4):
        value, g = F.vmap(c.value_and_grad)(xs)
    assert c._programs[next(iter(c._programs))].lean.loop_kernels is not None
    want_value, want_g = F.vmap(plain.value_and_grad)(xs)
    np.testing.assert_allclose(value.numpy(), want_value.numpy(), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(g.numpy(), want_g.numpy(), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(g.numpy()[44], c.grad(xs[44]).numpy(), rtol=1e-13)
    np.testing.assert_allclose(F.vmap(c.jacfwd)(xs[:5]).numpy(),
                               F.vmap(plain.jacfwd)(xs[:5]).numpy(), rtol=1e-12, atol=1e-13)


def test_a_copy_whose_function_cannot_be_imported_still_replays_its_recordings():
    """A worker that cannot import f's module (a script's, a notebook's) runs the
    recordings it was sent, and names the import error when it would need f."""
    module = types.ModuleType("autotape_vanishing_module")
    exec("def f(x):\n    return (x * x).sum()\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        blob = pickle.dumps(at.compile(module.f, np.ones(2)))
    finally:
        del sys.modules[module.__name__]
    copy = pickle.loads(blob)
    np.testing.assert_array_equal(copy.grad(np.array([1.0, 3.0])).numpy(), [2.0, 6.0])
    with pytest.raises(RuntimeError, match="No module named 'autotape_vanishing_module'"):
        copy.grad(np.ones(3))


@pytest.mark.parametrize("f, x", [
    (_reaction_diffusion_2d, np.array([0.2, 0.5])),
    (_n_body, np.random.default_rng(0).normal(size=10)),
    (_state_space, np.array([1.0, -0.5, 0.3, 0.05])),
], ids=["2-D roll", "n-body", "matmul"])
def test_loops_with_gathers_and_sums_in_segments(f, x):
    """A body with gathers and scatter-adds swept in checkpointed segments: the same
    bits as the whole compiled loop."""
    c, segmented = at.compile(f, x), at.compile(f, x, checkpoint="sqrt")
    for _ in range(3):
        g = c.grad(x)
    assert segmented._lean("value", [x]).lean.segments is not None
    np.testing.assert_array_equal(segmented.grad(x).numpy(), g.numpy())
    np.testing.assert_array_equal(segmented.jacfwd(x).numpy(), c.jacfwd(x).numpy())


def test_a_body_too_long_to_compile_stays_with_the_interpreter(monkeypatch):
    """at.jit of array code written element by element repeats ~15,000 instructions a
    step; such a body would take minutes to compile, so no loop is made of it."""
    loops = importlib.import_module("autotape.kernels.loops")
    x = np.array([1.0, 0.3, 9.8, 0.1])
    assert at.compile(_long_pendulum, x)._lean("value", [x]).lean.loop is not None
    monkeypatch.setattr(loops, "MAX_PERIOD", 3)
    c = at.compile(_long_pendulum, x)
    assert c._lean("value", [x]).lean.loop is None
    np.testing.assert_allclose(c.grad(x).numpy(), at.compile(_long_pendulum, x).grad(x)
                               .numpy(), rtol=1e-14)


def test_a_broadcast_operands_adjoint_is_summed_in_lanes(loop_bodies):
    # c * u in a loop body: c's adjoint gets a term at every element; the generated
    # reverse sums them in lanes after the loop, as the interpreter sums them: the bits
    # are the interpreter's
    x = np.array([0.5])
    c, plain = at.compile(_burgers, x), at.compile(_burgers, x)
    for s in (1.0, 0.9, 1.1):
        c.grad(x * s)
    lean = c._programs[next(iter(c._programs))].lean
    assert lean.loop_kernels is not None
    assert "+= contiguous_lane_sum(W, " in lean.loop_code[1]     # (the body's source)
    _on_interpreter(plain)
    for s in (1.0, 0.7):
        np.testing.assert_array_equal(c.grad(x * s).numpy(), plain.grad(x * s).numpy())


def test_a_broadcast_term_goes_to_the_buffer_and_is_summed_in_lanes_after_the_loop():
    loop = ["for k in range(20):"]
    body = ["gx, gy = f64(Go[20 + k]) * f64(T[3 + k]), f64(Go[20 + k]) * f64(T[9])",
            "GT[9] += gx", "GT[3 + k] = gy"]
    scratch = [10]
    lines, after = _broadcast_lanes(loop, body, scratch, False)
    assert lines == [body[0], "W[10 + k] = gx", body[2]] and scratch == [30]
    assert after == ["GT[9] += contiguous_lane_sum(W, 10, 20)"]
    where = ["if f64(T[k]) != 0:", "    G[2] += f64(Go[5 + k])", "else:",
             "    GT[4 + k] += f64(Go[5 + k])  # WHERE"]
    lines, after = _broadcast_lanes(loop, where, [0], False)   # (the other branch: 0.0)
    assert lines[:3] == ["W[0 + k] = 0.0", "if f64(T[k]) != 0:", "    W[0 + k] = f64(Go[5 + k])"]
    points = ["gx = f64(Go[(20 + k) * C + j])", "GT[(9) * C + j] += gx"]
    lines, after = _broadcast_lanes(loop + ["for j in range(C):"], points, [0], True)
    assert lines[1] == "W[(0 + k) * C + j] = gx"
    assert after == ["for j in range(C):", "    GT[(9) * C + j] += lane_sum(W, 0 * C + j, 20, C)"]
    few = ["for k in range(15):"]                  # (under LANES_MIN: one after another)
    assert _broadcast_lanes(few, body, [0], False) == (body, [])


def test_a_broadcast_operands_terms_are_summed_in_eight_lanes():
    # c * X over 37 cells: c's adjoint from every cell, summed as LANES partial sums
    # (element k into lane k % 8, in order), added once in pairs, then pairs of pairs: a
    # running sum made every addition wait on the last, four lanes each on 1/4 of them
    rng = np.random.default_rng(2)     # (scaled by powers of two: the same X whatever
    X = rng.uniform(-1.0, 1.0, 37) * 2.0 ** rng.integers(-26, 27, 37)   # numpy's pow)
    c = at.compile(lambda p: (p[0] * X).sum() + p[1], np.ones(2))
    g = c.grad(np.array([0.5, 1.0])).numpy()
    lanes = [0.0] * 8
    for k in range(37):
        lanes[k % 8] += X[k]
    assert g[0] == ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + \
        ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
    four = [0.0] * 4
    for k in range(37):
        four[k % 4] += X[k]
    assert (four[0] + four[1]) + (four[2] + four[3]) != g[0]
    running = 0.0
    for k in range(37):
        running += X[k]
    assert running != g[0]                  # (the data tell the two orders apart)
    few = at.compile(lambda p: (p[0] * X[:7]).sum() + p[1], np.ones(2))   # (< LANES_MIN)
    running = 0.0
    for k in range(7):
        running += X[k]
    assert few.grad(np.array([0.5, 1.0])).numpy()[0] == running


@pytest.mark.parametrize("n", [16, 17, 23, 24, 31, 37, 126])
@pytest.mark.parametrize("step", [1, 3])
def test_lane_sum_adds_lane_k_mod_8_in_order_then_lane_trees_pairs(n, step):
    rng = np.random.default_rng(n)
    W = rng.uniform(-1.0, 1.0, 5 + n * step) * 10.0 ** rng.uniform(-8.0, 8.0, 5 + n * step)
    lanes = [0.0] * 8
    for k in range(n):
        lanes[k % 8] += W[5 + k * step]
    expected = eval(lane_tree(f"lanes[{j}]" for j in range(8)))
    assert lane_sum(W, 5, n, step) == expected
    assert _compiled_lane_sum(W, 5, n, step) == expected      # (inlined, as loops use it)
    if step == 1:                                             # (one point's loop bodies)
        assert _vector_lane_sum(W, 5, n) == expected


@numba.njit(error_model="numpy")
def _compiled_lane_sum(W, first, n, step):
    return lane_sum(W, first, n, step)


@numba.njit(error_model="numpy")
def _vector_lane_sum(W, first, n):
    return contiguous_lane_sum(W, first, n)


def test_the_vector_lane_sum_is_lane_sums_bits_at_any_start_and_length():
    # one vector addition per block of 8 terms: the same additions, any alignment,
    # a tail of 0 to 7 terms, signed zeros, infinities and nan where lane_sum has them
    rng = np.random.default_rng(5)
    for _ in range(400):
        W = rng.uniform(-1.0, 1.0, 90) * 10.0 ** rng.uniform(-300.0, 300.0, 90)
        W[rng.integers(0, 90, 4)] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], 4)
        first, n = int(rng.integers(0, 12)), int(rng.integers(0, 78))
        assert np.array_equal(_vector_lane_sum(W, first, n),
                              _compiled_lane_sum(W, first, n, 1), equal_nan=True), (first, n)
    assert str(_vector_lane_sum(np.full(16, -0.0), 0, 16)) == "0.0"   # (lanes start at 0.0)




@numba.njit
def _libm_square(x, two):
    return x ** two               # (two a runtime value: libm's pow, not LLVM's fold)


def test_a_square_is_x_times_x_in_every_runner():
    """numpy, torch and jax square as x * x (correctly rounded); libm's pow(x, 2) is
    not always (0.08% of random doubles differ in the last bit). The interpreter, a
    loop body and generated code square alike, so all agree with the eager path."""
    x = np.random.default_rng(7).normal(size=20_000)
    x = x[np.array([_libm_square(v, 2.0) != v * v for v in x])][:8]
    assert x.size == 8                                   # (values where they differ)
    want = x * x
    eager = (at.tensor(x) ** 2).numpy()
    np.testing.assert_array_equal(eager, want)
    whole = at.compile(lambda v: v ** 2, x)
    np.testing.assert_array_equal(whole(x).numpy(), want)
    for k in range(x.size):                              # scalar code: each point
        point = np.array([x[k], 1.0])
        c = at.compile(lambda p: (p[0] ** 2) * p[1], point)
        assert c(point).item() == want[k]
        assert F.vmap(c)(point[None])[0].item() == want[k]


def test_a_loop_body_squares_as_the_eager_path_does(loop_bodies):
    x = np.random.default_rng(8).normal(size=20_000)
    x = x[np.array([_libm_square(v, 2.0) != v * v for v in x])][:3]

    def f(p):
        s = p[0]
        for _ in range(300):
            s = (s * 0.5) ** 2 + p[1]
        return s
    for v in x:
        point = np.array([v, 0.25])
        c, plain = at.compile(f, point), at.compile(f, point)
        _on_interpreter(plain)
        for _ in range(4):                                # (past COMPILE_LOOP_AFTER)
            c.grad(point)
        c.wait_compiled()
        lean = c._programs[next(iter(c._programs))].lean
        assert lean.loop_kernels is not None or any(
            isinstance(m, types.ModuleType) for m in (lean.codegen or {}).values())
        want = f(at.tensor(point)).item()
        assert c(point).item() == plain(point).item() == want


def _one_point_and_chunk(c, X):
    """(values, Jacobians) of c's lean program at the points X by the interpreter's
    one-point kernel (C = 1: its views) and by its chunk kernel (C = 4: indexed loops)."""
    lean = next(iter(c._programs.values())).lean
    live = live_sets(lean.instr, lean.pool, lean.nslots, lean.out_slots)
    out = []
    for C in (1, 4):
        values = np.empty((X.shape[0], lean.out_slots.size), X.dtype)
        jac = np.empty((X.shape[0], lean.out_slots.size, lean.in_slots.size), X.dtype)
        V, G = (np.full(lean.nslots * C, np.nan, X.dtype) for _ in range(2))
        run_points(lean.instr, lean.pool, lean.divisor, live, lean.const_slots,
                   lean.const_vals, lean.in_slots, lean.out_slots, X, values, jac, True, C,
                   V, G)
        out.append((values, jac))
    return out


@given(st.integers(1, 40), st.lists(st.tuples(st.sampled_from("+-*"), st.integers(0, 3),
                                              st.integers(0, 3)), min_size=1, max_size=6),
       st.sampled_from([np.float64, np.float32]))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_sums_and_products_at_one_point_are_the_chunk_kernels_bits(n, steps, dtype):
    """The interpreter at one point runs sums, differences and products over cells
    through views (kernels/program.py, ``_cells_forward``, ``_cells_reverse``, the
    broadcast operand's lanes): the same bits as its chunk kernel's indexed loops, for
    either operand broadcast, both, an operand read twice, any cell count."""
    def f(x):
        vals = [x[:n], x[n] * 1.0, x[n + 1:2 * n + 1] * 0.5, x[2 * n + 1] + 0.25]
        for op, i, j in steps:
            u, w = vals[i % len(vals)], vals[j % len(vals)]
            vals.append(u + w if op == "+" else u - w if op == "-" else u * w)
        return (vals[-1] * x[:n]).sum() + vals[-2].sum() * 0.5
    x = np.random.default_rng(n).uniform(-2.0, 2.0, 2 * n + 2).astype(dtype)
    c = at.compile(f, x)
    (v1, j1), (v4, j4) = _one_point_and_chunk(c, np.stack([x, x * 0.75, -x]))
    np.testing.assert_array_equal(v1, v4)
    np.testing.assert_array_equal(j1, j4)
    assert np.isfinite(j1).all()
