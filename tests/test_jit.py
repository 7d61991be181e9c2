"""``at.jit``: numba functions written for floats, differentiated by recording inside
compiled code (jit.py, kernels/active.py). Gradients against the same model through
at.compile and against finite differences; loops, branches, helper functions, arrays
from np.zeros; errors that name the construct and the line."""
import math
import os
import subprocess
import sys
import threading

import importlib

import numba
import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.program import GENERATED_ENV
from autotape.thread_state import here
from fd import central_jacobian

jit_module = importlib.import_module("autotape.jit")

THETA = np.array([1.0, 0.2, 9.8, 0.1])


@numba.njit
def accel(theta, x, v):
    return -theta[2] * math.sin(x) - theta[3] * v


@numba.njit
def pendulum(theta):
    x, v, h = theta[0], theta[1], 0.01
    for _ in range(300):
        k1x, k1v = v, accel(theta, x, v)
        k2x, k2v = v + 0.5 * h * k1v, accel(theta, x + 0.5 * h * k1x, v + 0.5 * h * k1v)
        k3x, k3v = v + 0.5 * h * k2v, accel(theta, x + 0.5 * h * k2x, v + 0.5 * h * k2v)
        k4x, k4v = v + h * k3v, accel(theta, x + h * k3x, v + h * k3v)
        x = x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        v = v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    return x * x + v * v


def pendulum_at(theta):                       # the same model, as autotape ops
    def acc(x, v):
        return -theta[2] * at.sin(x) - theta[3] * v
    x, v, h = theta[0], theta[1], 0.01
    for _ in range(300):
        k1x, k1v = v, acc(x, v)
        k2x, k2v = v + 0.5 * h * k1v, acc(x + 0.5 * h * k1x, v + 0.5 * h * k1v)
        k3x, k3v = v + 0.5 * h * k2v, acc(x + 0.5 * h * k2x, v + 0.5 * h * k2v)
        k4x, k4v = v + h * k3v, acc(x + h * k3x, v + h * k3v)
        x = x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        v = v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    return x * x + v * v


def _fd_grad(f, x):
    return central_jacobian(lambda v: np.atleast_1d(f(v)), x)[0]


def test_pendulum_with_a_helper_function():
    value, g = at.jit(pendulum).value_and_grad(THETA)
    assert value.item() == pytest.approx(pendulum(THETA), rel=1e-14)
    want = at.compile(pendulum_at, THETA).grad(THETA).numpy()
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g.numpy(), _fd_grad(pendulum, THETA), rtol=1e-6)


@numba.njit
def heat(k):
    """Arrays from np.zeros / np.empty, loops over them, an accumulator from 0.0."""
    n = k.size
    u = np.zeros(n)
    for i in range(n):
        u[i] = math.sin(0.3 * i) + k[0]
    for _ in range(30):
        new = np.empty(n)
        for i in range(n):
            new[i] = u[i] + 0.1 * k[i] * (u[(i + 1) % n] - 2.0 * u[i] + u[(i - 1) % n])
        u = new
    s = 0.0
    for i in range(n):
        s += u[i] * u[i]
    return s


def test_model_allocating_arrays_matches_finite_differences():
    k = np.linspace(0.5, 1.5, 10)
    value, g = at.jit(heat).value_and_grad(k)
    assert value.item() == pytest.approx(heat(k), rel=1e-13)
    np.testing.assert_allclose(g.numpy(), _fd_grad(heat, k), rtol=1e-6, atol=1e-9)


@numba.njit
def fill(out, x):                             # a helper that writes into an array
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = x * (i + 1) - j
    return out


@numba.njit
def grid(x, w):
    a = fill(np.zeros((3, 2)), x)
    total = 0.0
    for i in range(3):
        row = a[i]                            # a view: writes through
        row[1] = row[1] * w
        total += max(a[i, 0], 0.0) * a[i, 1] + abs(a[i, 1]) ** 1.5
    return total


def test_two_dimensional_arrays_views_and_helpers():
    g = at.jit(grid).grad(0.7, 1.3)
    fd = _fd_grad(lambda v: grid(v[0], v[1]), np.array([0.7, 1.3]))
    np.testing.assert_allclose([g[0].item(), g[1].item()], fd, rtol=1e-6)


@numba.njit
def piecewise(x):
    if x > 1.0:                               # a branch on a value
        return x * x
    elif x > 0.0:
        return math.sqrt(x) + math.exp(-x)
    return -x


@pytest.mark.parametrize("x, want", [(2.0, 4.0), (0.25, 0.5 / 0.5 - math.exp(-0.25)),
                                     (-3.0, -1.0)])
def test_branches_follow_the_values(x, want):
    assert at.jit(piecewise).grad(x).item() == pytest.approx(want, rel=1e-12)


@numba.njit
def spiral(t):
    out = np.empty(2 * t.size)
    for i in range(t.size):
        out[2 * i] = t[i] * math.cos(t[i])
        out[2 * i + 1] = t[i] * math.sin(t[i])
    return out


def test_array_output_jacobian_and_value():
    t = np.array([0.3, 1.1, 2.0])
    J = at.jit(spiral).jacobian(t)
    assert J.shape == (6, 3)
    np.testing.assert_allclose(J.numpy(), central_jacobian(spiral, t), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(at.jit(spiral)(t).numpy(), spiral(t), rtol=1e-14)


def test_a_long_chain_fills_the_tape_more_than_once(monkeypatch):
    monkeypatch.setattr(jit_module, "START_ROWS", 64)
    here().jit_tape = None                    # (no larger buffers from earlier tests)

    @numba.njit
    def chain(y):
        for _ in range(5000):
            y = math.exp(math.sin(y * 1.0001 + 0.5)) / 2.5
        return y
    f = at.jit(chain)
    g = f.grad(0.3).item()
    assert f._rows >= 15000
    assert g == pytest.approx(_fd_grad(lambda v: chain(v[0]), np.array([0.3]))[0], rel=1e-6)


def test_threads_record_at_once():
    f = at.jit(pendulum)
    points = THETA * np.linspace(0.8, 1.2, 8)[:, None]
    want = [f.grad(p).numpy() for p in points]
    got = [None] * len(points)

    def work(k):
        for _ in range(5):
            got[k] = f.grad(points[k]).numpy()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(points))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_vmap_over_points():
    points = THETA * np.linspace(0.8, 1.2, 5)[:, None]
    f = at.jit(pendulum)
    values, grads = F.vmap(f.value_and_grad)(points)
    for k in range(5):
        v, g = f.value_and_grad(points[k])
        assert values.numpy()[k] == v.item()
        np.testing.assert_array_equal(grads.numpy()[k], g.numpy())


def test_what_cannot_be_recorded_is_named_with_its_line():
    @numba.njit
    def drops(x):
        return float(x) * 2.0

    @numba.njit
    def sorts(x):
        a = np.zeros(3)
        for i in range(3):
            a[i] = x * i
        return np.sort(a)[0]
    with pytest.raises(TypeError, match=r"at.jit\(drops\): cannot record at .*test_jit.py:"
                                        r"\d+: float\(\) of a differentiable value"):
        at.jit(drops).grad(1.0)
    with pytest.raises(TypeError, match=r"at.jit\(sorts\): cannot record at .*test_jit.py"):
        at.jit(sorts).grad(1.0)
    with pytest.raises(RuntimeError, match="needs spiral to return a scalar"):
        at.jit(spiral).grad(np.ones(2))
    with pytest.raises(TypeError, match="argument 0 must be a float or a float array"):
        at.jit(pendulum).grad("theta")
    with pytest.raises(TypeError, match="argument 0 is an integer array"):
        at.jit(pendulum).grad(np.arange(4))
    with pytest.raises(TypeError, match="expected a function"):
        at.jit(3)


def test_one_function_across_branches_records_at_every_call():
    f = at.jit(piecewise)
    for _ in range(3):
        for x, want in [(2.0, 4.0), (-3.0, -1.0), (0.25, 1.0 - math.exp(-0.25))]:
            assert f.grad(x).item() == pytest.approx(want, rel=1e-12)
    assert f._programs[((),)] is False          # decisions taken: never replayed


def test_without_decisions_later_calls_replay_the_lean_program(monkeypatch):
    f = at.jit(pendulum)
    first = f.value_and_grad(THETA)
    lean, _ = f._programs[((4,),)]

    def no_recording(*args):
        raise AssertionError("recorded again")
    monkeypatch.setattr(f, "_record", no_recording)
    for point in (THETA, THETA * 1.1, THETA * 0.9, THETA, THETA * 1.05, THETA):
        value, g = f.value_and_grad(point)
        np.testing.assert_allclose(g.numpy(), at.compile(pendulum_at, THETA).grad(point)
                                   .numpy(), rtol=1e-12, atol=1e-13)
    assert lean.loop is not None and lean.compiled_code() is not None   # compiled
    assert value.item() == first[0].item()
    np.testing.assert_array_equal(g.numpy(), first[1].numpy())
    Js = F.vmap(f.jacobian)(np.stack([THETA, THETA * 1.1]))
    assert Js.shape == (2, 4)
    np.testing.assert_allclose(Js.numpy()[1], f.grad(THETA * 1.1).numpy(), rtol=1e-15)


def test_vmap_with_decisions_goes_point_by_point():
    xs = np.array([2.0, -3.0, 0.25, 1.5])
    grads = F.vmap(at.jit(piecewise).grad)(xs).numpy()
    np.testing.assert_allclose(grads, [4.0, -1.0, 1.0 - math.exp(-0.25), 3.0], rtol=1e-12)


@numba.njit
def smooth(u, w):
    """np.zeros_like / np.full / np.ones_like of arguments and of values."""
    out = np.zeros_like(u)
    acc = np.full(u.size, w)
    ones = np.ones_like(u)
    for i in range(1, u.size - 1):
        out[i] = (u[i - 1] + u[i + 1]) * acc[i] + u[i] * ones[i]
    idx = np.zeros(3, np.int64)                # an integer array stays integer
    idx[0] = 1
    return out[idx[0]] * out[u.size - 2] + acc[0]


def test_like_allocators_and_integer_arrays():
    u, w = np.array([0.3, -1.0, 2.0, 0.7]), 0.4
    g = at.jit(smooth).grad(u, w)
    fd = _fd_grad(lambda v: smooth(v[:4], v[4]), np.append(u, w))
    np.testing.assert_allclose(np.append(g[0].numpy(), g[1].item()), fd, rtol=1e-6, atol=1e-9)


def test_jacfwd_forward_when_replayed_and_arrays_of_values():
    @numba.njit
    def polar(t):
        return np.array([t[0] * math.cos(t[1]), t[0] * math.sin(t[1]), t[0] * 2.0])
    f = at.jit(polar)
    t = np.array([1.5, 0.4])
    want = central_jacobian(polar, t)
    np.testing.assert_allclose(f.jacobian(t).numpy(), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(f.jacfwd(t).numpy(), want, rtol=1e-7, atol=1e-9)
    assert f._programs[((2,),)]                # replayed: forward mode ran on it
    np.testing.assert_allclose(at.jit(piecewise).jacfwd(2.0).item(), 4.0)   # reverse


@numba.njit
def array_model(x0, k):
    """Array expressions, as much numba code is written: arithmetic between arrays and
    with scalars, in-place updates, ufuncs, sums, means and dot products."""
    x = x0.copy()
    v = np.zeros_like(x0)
    for _ in range(20):
        a = -k[0] * np.sin(x) - k[1] * v
        v += 0.05 * a
        x = x + 0.05 * v
    return np.sum(x * x) + v.mean() + np.dot(x, v) + np.exp(-x).sum() + (2.0 - x / 3.0).sum()


def test_array_expressions_match_finite_differences():
    x0, k = np.array([0.3, -1.2, 0.8]), np.array([9.8, 0.4])
    g = at.jit(array_model).grad(x0, k)
    fd = _fd_grad(lambda v: array_model(v[:3], v[3:]), np.concatenate([x0, k]))
    np.testing.assert_allclose(np.concatenate([g[0].numpy(), g[1].numpy()]), fd,
                               rtol=1e-6, atol=1e-8)
    value = at.jit(array_model)(x0, k).item()
    assert value == pytest.approx(array_model(x0, k), rel=1e-13)


_STATE = np.array([[0.9, 0.1, 0.0], [-0.2, 0.8, 0.1], [0.05, 0.0, 0.95]])


@numba.njit
def matmul_model(p):
    """Matrix products in every form numpy spells them: @ and np.dot, matrix by vector,
    vector by matrix, matrix by matrix, a transpose, a dot of two vectors."""
    x = p[:3].copy()
    for _ in range(60):
        x = _STATE @ x + p[3] * np.tanh(x)
    w = p[4:10].reshape(2, 3)
    y = np.dot(w, x)
    z = x @ w.T @ y.reshape(2, 1) + np.dot(y, w) @ np.ones((3, 1))
    return (y * y).sum() + np.dot(x, x) + z[0] * 0.5 + (w @ w.T).sum()


def _matmul_model_numpy(p):
    x = p[:3]
    for _ in range(60):
        x = _STATE @ x + p[3] * np.tanh(x)
    w = p[4:10].reshape(2, 3)
    y = w @ x
    z = x @ w.T @ y.reshape(2, 1) + (y @ w) @ np.ones((3, 1))
    return (y * y).sum() + x @ x + z[0] * 0.5 + (w @ w.T).sum()


def test_matrix_products_record_one_multiply_add_at_a_time():
    """@ and np.dot of arrays of differentiable values (at most 2-D): the gradient of
    the numpy model's, a loop found over the products, sizes checked."""
    p = np.concatenate([[1.0, -0.5, 0.3, 0.05], np.linspace(-1.0, 1.0, 6)])
    f = at.jit(matmul_model)
    for _ in range(3):
        value, g = f.value_and_grad(p)
    eager = at.tensor(p, requires_grad=True)
    want = _matmul_model_numpy(eager)
    assert value.item() == pytest.approx(want.item(), rel=1e-13)
    np.testing.assert_allclose(g.numpy(), at.grad(want, eager)[0].numpy(), rtol=1e-12)
    np.testing.assert_allclose(g.numpy(), _fd_grad(matmul_model, p), rtol=1e-6, atol=1e-8)
    program = next(iter(f._programs.values()))[0]
    assert program.loop is not None and program.loop[2] >= 50

    @numba.njit
    def mismatched(p):
        return (p[:4].reshape(2, 2) @ p[:3]).sum()
    with pytest.raises(ValueError, match="inner sizes differ"):
        at.jit(mismatched).grad(p)


_STATE4 = np.eye(4) * 0.9 + 0.02


@numba.njit
def _four_states(p):
    x = p[:4].copy()
    for _ in range(100):
        x = _STATE4 @ x + p[4] * np.tanh(x)
    return (x * x).sum()


def test_a_step_with_a_run_of_like_ops_is_found_whole(monkeypatch):
    """Element by element, the step's four tanh in a row repeat with period 1: the loop
    finder still looks at the multiples of that period (the step, 4 * 4 * 2 + 12
    instructions), and finds it (the scalar program, its products not rolled)."""
    monkeypatch.setattr(jit_module, "reroll", lambda *a: None)
    p = np.array([1.0, -0.5, 0.3, 0.2, 0.05])
    f = at.jit(_four_states)
    f.grad(p)
    program = next(iter(f._programs.values()))[0]
    assert program.loop is not None and program.loop[1] == 44 and program.loop[2] >= 95


@numba.njit
def _signed_zero(x):
    return math.atan2(0.0 * x[0], -0.0) + math.atan2(0.0 * x[0], 0.0) + x[0]


def test_replay_keeps_signed_zero_constants_apart():
    # 0.0 and -0.0 are two constants (atan2 tells them apart): the first call and the
    # replays give pi + 0 + x
    g = at.jit(_signed_zero)
    for _ in range(3):
        value, grad = g.value_and_grad(np.array([1.0]))
        assert value.item() == math.pi + 1.0
        assert grad.numpy()[0] == 1.0


def test_pickles_with_its_function():
    import pickle
    g = at.jit(pendulum)
    g.value_and_grad(THETA)
    copy = pickle.loads(pickle.dumps(g))
    for a, b in zip(copy.value_and_grad(THETA), g.value_and_grad(THETA)):
        np.testing.assert_array_equal(np.asarray(a.numpy()), np.asarray(b.numpy()))


def test_large_recordings_give_their_buffers_back():
    @numba.njit
    def long_chain(x):
        s = x[0]
        for _ in range(400_000):
            s = s * 0.999999 + 1e-7
        return s

    at.jit(long_chain).value_and_grad(np.array([1.0]))
    state = here()
    for kept in (state.jit_tape, state.jit_sweep):
        assert kept is None or sum(a.nbytes for a in kept) <= jit_module.KEEP_TAPE_BYTES


@numba.njit
def _with_objmode(x):
    with numba.objmode(y="float64"):
        y = float(np.sin(x[0]))
    return y * x[0]


def test_objmode_is_refused_naming_its_line():
    line = _with_objmode.py_func.__code__.co_firstlineno + 2     # (the with)
    with pytest.raises(TypeError, match=rf"test_jit.py:{line}: numba.objmode runs Python"):
        at.jit(_with_objmode).grad(np.ones(1))


def test_the_loop_finder_scans_the_whole_program_once_or_twice(monkeypatch):
    # it looked at up to 64 candidate periods with a pass over every instruction each
    # (46 s on a 1M-step loop); a candidate must now repeat around the middle first
    loops = importlib.import_module("autotape.kernels.loops")
    full, real = [], loops._matches

    def counting(instr, sig, period, *rest):
        if instr.shape[0] > 10_000:
            full.append(period)
        return real(instr, sig, period, *rest)
    monkeypatch.setattr(loops, "_matches", counting)

    @numba.njit
    def stepping(x):
        a, b, c = x[0], x[1], x[2]
        for _ in range(20_000):
            a = a * 0.999 + b * 1e-3
            b = b * 0.999 - a * 1e-3 + c
            c = c * 0.5
        return a + b
    g = at.jit(stepping)
    X = np.array([1.0, 0.5, 0.1])
    g.value_and_grad(X)
    program = g._program([X])
    assert program is not None and program[0].loop is not None
    assert len(full) <= 2


@numba.njit
def _driven(theta):
    x, v, h = theta[0], theta[1], 0.02
    for i in range(300):
        t = i * h
        a = -theta[2] * math.sin(x) - theta[3] * v + 0.5 * math.cos(1.3 * t)
        x, v = x + h * v, v + h * a
    return x * x + v * v


def test_a_forcing_term_from_the_loop_index_is_a_loop():
    g = at.jit(_driven)
    X = np.array([1.0, 0.3, 9.8, 0.1])
    first = g.value_and_grad(X)
    lean, _ = g._program([X])
    assert lean.loop is not None and lean.loop[2] >= 295
    for _ in range(6):                         # (the body compiled, then replayed)
        value, grad = g.value_and_grad(X)
    assert lean.compiled_code() is not None
    np.testing.assert_allclose(value.item(), first[0].item(), rtol=1e-14)
    np.testing.assert_allclose(grad.numpy(), first[1].numpy(), rtol=1e-13)
    np.testing.assert_allclose(grad.numpy(), central_jacobian(
        lambda t: np.array([_driven(t)]), X)[0], rtol=1e-6)


def test_a_gradient_at_one_point_goes_straight_to_the_generated_kernel():
    g = at.jit(_driven)
    X = np.array([1.0, 0.3, 9.8, 0.1])
    g.value_and_grad(X)
    lean, _ = g._program([X])
    lean.wait_compiled(np.dtype(np.float64))
    for _ in range(6):
        value, grad = g.value_and_grad(X * 1.1)
    assert lean.gradient_at(X * 1.1, np.empty(4)) is not None   # (the path those calls took)
    values, jac = lean.run((X * 1.1)[None], jacobian=True)
    assert value.item() == values[0, 0]
    np.testing.assert_array_equal(grad.numpy(), jac[0, 0])


@numba.njit
def _misfit(k, data, index):
    s = 0.0
    for i in range(index.size):
        s += (k[0] * data[index[i]] + k[1] - 1.0) ** 2
    return s


def test_argnums_differentiates_the_arguments_named_and_takes_data_as_given():
    k, data, index = np.array([2.0, 0.5]), np.array([0.5, 1.0, 3.0]), np.array([2, 0])
    f = at.jit(_misfit, argnums=0)
    want = at.jit(_misfit, argnums=(0, 1))
    residual = k[0] * data[index] + k[1] - 1.0
    expect = np.array([2 * residual @ data[index], 2 * residual.sum()])
    for _ in range(3):                                   # recorded, then replayed
        value, g = f.value_and_grad(k, data, index)
        assert value.item() == pytest.approx((residual ** 2).sum())
        np.testing.assert_allclose(g.numpy(), expect, rtol=1e-14)
    both = want.grad(k, data, index.astype(np.int64))
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(both[0].numpy(), expect, rtol=1e-14)
    np.testing.assert_allclose(both[1].numpy(), [2 * k[0] * residual[1], 0.0,
                                                 2 * k[0] * residual[0]], rtol=1e-14)
    assert isinstance(at.jit(_misfit, argnums=(0,)).grad(k, data, index), tuple)
    np.testing.assert_allclose(f.jacfwd(k, data, index).numpy(), expect, rtol=1e-14)


def test_argnums_records_again_when_the_data_change():
    """The data's values are constants of the recording: a replay at other data would
    be silently wrong, so other data (same shape) is another program."""
    k, index = np.array([2.0, 0.5]), np.array([0, 1])
    f = at.jit(_misfit, argnums=0)
    for scale in (1.0, 2.0, 1.0, 3.0):
        data = np.array([0.5, 1.0]) * scale
        residual = k[0] * data + k[1] - 1.0
        np.testing.assert_allclose(f.grad(k, data, index).numpy(),
                                   [2 * residual @ data, 2 * residual.sum()], rtol=1e-14)
    points = np.stack([k, k * 1.5])
    got = F.vmap(f.grad)(points, np.stack([data, data * 2]), np.stack([index, index]))
    for p in range(2):
        np.testing.assert_allclose(got[p].numpy(), f.grad(points[p], data * (1 + p),
                                                          index).numpy(), rtol=1e-14)


def test_argnums_errors():
    with pytest.raises(TypeError, match="argnums must be a non-negative int"):
        at.jit(_misfit, argnums=-1)
    with pytest.raises(TypeError, match="argnums must be a non-negative int"):
        at.jit(_misfit, argnums="0")
    with pytest.raises(ValueError, match=r"argnums \(3,\) names an argument past the 3"):
        at.jit(_misfit, argnums=3).grad(np.ones(2), np.ones(2), np.array([0]))
    with pytest.raises(TypeError, match="argument 2 is an integer array, and it is "
                                        "differentiated; name the arguments"):
        at.jit(_misfit).grad(np.ones(2), np.ones(2), np.array([0]))


X0 = np.array([1.0, 2.0, 3.0])


@numba.njit
def _updated_copy(k):
    x = X0.copy()
    for j in range(3):
        x[j] = x[j] + k[j]
    return (x * x).sum()


@numba.njit
def _swapped_buffers(k):
    u = X0.copy()
    un = np.empty_like(u)
    for _ in range(4):
        for j in range(3):
            un[j] = u[j] * k[j] + 0.1 * u[(j + 1) % 3]
        u, un = un, u
    return u.sum()


@pytest.mark.parametrize("fn", [_updated_copy, _swapped_buffers])
def test_a_copied_array_takes_differentiable_values(fn):
    """x = X0.copy(); x[j] = ... and two buffers swapped each step (u, un = un, u):
    a float array's copy holds differentiable values (issue #27 found both refused)."""
    k = np.array([0.5, 1.5, 2.0])
    f = at.jit(fn)
    for _ in range(3):                       # recorded, then replayed
        value, g = f.value_and_grad(k)
    np.testing.assert_allclose(value.item(), fn(k), rtol=1e-14)
    step = 1e-6 * np.eye(3)
    central = [(fn(k + e) - fn(k - e)) / 2e-6 for e in step]
    np.testing.assert_allclose(g.numpy(), central, rtol=1e-7)


@numba.njit
def _reshaped(q):
    x = q.reshape(2, 2)
    y = q.reshape((2, 2)).copy()
    return x[1, 0] * y[0, 1] + y.reshape(4)[3] ** 2


def test_reshape_of_differentiable_arrays():
    q = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(at.jit(_reshaped).grad(q).numpy(), [0.0, 3.0, 2.0, 8.0])


def test_a_call_with_tensors_that_require_grad_joins_their_graph():
    @numba.njit
    def f(x, k):
        s = 0.0
        for i in range(x.size):
            s += np.sin(x[i]) * k
        return s

    jf = at.jit(f)
    x = at.tensor([0.1, 0.2, 0.3], requires_grad=True)
    k = at.tensor(2.0, requires_grad=True)
    (jf(x, k) * 3.0).backward()
    np.testing.assert_allclose(x.grad.numpy(), 6.0 * np.cos([0.1, 0.2, 0.3]), rtol=1e-12)
    np.testing.assert_allclose(k.grad.item(), 3.0 * np.sin([0.1, 0.2, 0.3]).sum(), rtol=1e-12)
    gx, = at.grad(jf(x, 2.0), x)                       # (a number as data, beside)
    np.testing.assert_allclose(gx.numpy(), 2.0 * np.cos([0.1, 0.2, 0.3]), rtol=1e-12)
    assert not jf(x.detach(), 2.0).requires_grad
    with at.no_grad():
        assert not jf(x, k).requires_grad
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        at.grad(jf(x, k), x, create_graph=True)
    only_x = at.jit(f, argnums=0)                      # (k is data: no gradient for it)
    gx, = at.grad(only_x(x, k), x)
    np.testing.assert_allclose(gx.numpy(), 2.0 * np.cos([0.1, 0.2, 0.3]), rtol=1e-12)


def test_the_first_call_says_it_compiles(monkeypatch, capfd):
    from autotape.kernels import cache
    monkeypatch.setattr(cache, "NOTICE_AFTER", 0.0)
    namespace = {}
    exec("def typed_at_a_prompt(t):\n    return t * t + 0.5\n", namespace)
    f = at.jit(numba.njit(namespace["typed_at_a_prompt"]))   # (no source: not kept)
    f(1.5)
    err = capfd.readouterr().err
    assert "for at.jit" in err and "in each process" in err
    f(2.5)                                            # (compiled: nothing more said)
    assert "for at.jit" not in capfd.readouterr().err


KEPT_SCRIPT = """
import sys, numba, numpy as np, autotape as at
from autotape.kernels import cache
SCALE = np.array([SCALE_VALUE])
@numba.njit
def energy(q):
    return SCALE[0] * (q[0] - 1.0) ** 2 + q[1] ** 2
g = at.jit(energy)
value, grad = g.value_and_grad(np.array([0.5, 2.0]))
kept = [k for k in g._recorders.values()]
print(repr(float(value)), sum(kept[0].stats.cache_hits.values()), int(cache.on_disk(kept[0])))
"""


def test_a_recorder_is_kept_on_disk_and_named_after_what_it_reads(tmp_path):
    """A second process loads at.jit's recorder from the cache, and one whose function
    reads another global value compiles a recorder of its own (never a stale one)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def run(scale):
        script = tmp_path / "model.py"                # (a file: at.jit reads fn's source)
        script.write_text(KEPT_SCRIPT.replace("SCALE_VALUE", repr(scale)))
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()                     # value, loaded from disk, kept
    first, second, other = run(2.0), run(2.0), run(3.0)
    assert first[:2] == [repr(2.0 * 0.25 + 4.0), "0"]
    assert second[:2] == [repr(2.0 * 0.25 + 4.0), "1"]
    assert other[:2] == [repr(3.0 * 0.25 + 4.0), "0"]   # (SCALE changed: its own)
    assert first[2] == second[2] == other[2] == "1"


@numba.extending.register_jitable
def _doubled(x):
    return 2.0 * x


@numba.njit
def _calls_a_plain_helper(x):
    return _doubled(x) * x


def test_a_recorder_that_reads_a_function_of_the_users_is_not_kept_on_disk():
    """A register_jitable helper is compiled into the recorder, but no digest of names
    follows its code: such a recorder is compiled in each process (never stale)."""
    from numba.core.caching import NullCache
    f = at.jit(_calls_a_plain_helper)
    assert f.grad(3.0).item() == 12.0
    recorder, = f._recorders.values()
    assert isinstance(recorder._cache, NullCache)
    g = at.jit(numba.njit(lambda x: np.sin(x) * x))         # (library names only: kept)
    g.grad(1.0)
    recorder, = g._recorders.values()
    assert not isinstance(recorder._cache, NullCache)


@numba.njit
def implicit_euler(p):
    y = p[2]
    for n in range(60):
        forcing = p[1] * math.sin((n + 1) * 0.05)
        z = y
        for _ in range(3):
            g = z - y - 0.05 * (-p[0] * z ** 3 + forcing)
            z = z - g / (1.0 + 3.0 * 0.05 * p[0] * z ** 2)
        y = z
    w = y * y
    return w * p[0] + w


@pytest.mark.parametrize("code", ["generated", "loop body"])
def test_code_after_the_loop_writing_into_a_gap_of_its_last_repetition(monkeypatch, code):
    # each repetition's slots hold one its body never writes (the forcing's time, read
    # from the table of per-repetition constants) and w = y * y after the loop landed
    # in the last repetition's: the generated code read it as the loop's value (a
    # NameError when it compiled, since the loop finder took the last repetition too),
    # and a loop body's calls never zeroed its adjoint, left from the call before (a
    # gradient off by more at every call)
    if code == "loop body":
        monkeypatch.setenv(GENERATED_ENV, "0")
    p = np.array([2.0, 1.5, 1.2])
    f, c = at.jit(implicit_euler), at.compile(implicit_euler.py_func, p)   # (the
    # same Python: math.sin of the step's time is a float there too)
    f.value_and_grad(p)
    lean, _ = f._programs[((3,),)]
    lean.wait_compiled()
    for scale in (1.1, 0.9, 1.0, 1.2):
        got, got_g = f.value_and_grad(p * scale)
        want, want_g = c.value_and_grad(p * scale)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-13)
        np.testing.assert_allclose(got_g.numpy(), want_g.numpy(), rtol=1e-12, atol=1e-14)
    assert lean.compiled_code() == code
    np.testing.assert_allclose(got_g.numpy(), _fd_grad(implicit_euler, p * 1.2), rtol=1e-6,
                               atol=1e-9)
