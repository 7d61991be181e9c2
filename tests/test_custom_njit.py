"""Custom ops made of ``numba.njit`` functions (custom.py, kernels/calls.py): the same
numbers eagerly, in compiled programs (called from the compiled driver, no Python per
call) and in batches; what they cannot do (be differentiated again) is said."""
import numba
import numpy as np
import pytest

import autotape as at
import autotape.func as F
import importlib
from autotape import engine
from fd import central_jacobian

recording_module = importlib.import_module("autotape.recording")


@numba.njit
def decay_forward(theta, x0):
    """x' = -k x + c sin(x) from x0, 200 Euler steps; returns the final state (2,)."""
    x = x0.copy()
    for _ in range(200):
        x = x + 0.01 * (-theta[0] * x + theta[1] * np.sin(x))
    return x


@numba.njit
def decay_vjp(inputs, out, g):
    """g @ d out / d (theta, x0), by forward-mode duals through the same steps."""
    theta, x0 = inputs
    x = x0.copy()
    dx_dtheta = np.zeros((2, 2))
    dx_dx0 = np.eye(2)
    for _ in range(200):
        jac = 1.0 + 0.01 * (-theta[0] + theta[1] * np.cos(x))
        step_theta = np.empty((2, 2))
        step_theta[:, 0] = -0.01 * x
        step_theta[:, 1] = 0.01 * np.sin(x)
        dx_dtheta = jac[:, None] * dx_dtheta + step_theta
        dx_dx0 = jac[:, None] * dx_dx0
        x = x + 0.01 * (-theta[0] * x + theta[1] * np.sin(x))
    return (g @ dx_dtheta, g @ dx_dx0)


decay = at.custom_op(decay_forward, decay_vjp)


@numba.njit
def scale_forward(s, v):
    return s * v


@numba.njit
def scale_vjp(inputs, out, g):
    s, v = inputs
    return ((g * v).sum(), s * g)


scale = at.custom_op(scale_forward, scale_vjp)      # a 0-d input arrives as a float

THETA, X0 = np.array([0.7, 0.4]), np.array([1.0, -0.5])


def model(theta, x0):
    y = decay(theta, x0)
    return (scale(theta[0] * 2.0, y) ** 2).sum() + at.sin(y[0])


def _eager(theta, x0):
    return model(at.tensor(theta), at.tensor(x0)).item()


def test_compiled_ops_are_marked():
    assert decay.compiled and scale.compiled
    assert not at.custom_op(lambda x: x, lambda xs, y, g: (g,)).compiled


def test_eager_gradient_matches_finite_differences():
    t, x = at.tensor(THETA, requires_grad=True), at.tensor(X0, requires_grad=True)
    gt, gx = at.grad(model(t, x), (t, x))
    fd = central_jacobian(lambda v: _eager(v[:2], v[2:]), np.concatenate([THETA, X0]))
    np.testing.assert_allclose(np.concatenate([gt.numpy(), gx.numpy()]), fd[0], rtol=1e-6)


def test_compiled_program_calls_them_from_compiled_code(monkeypatch):
    c = at.compile(model, THETA, X0)
    lean = c._lean("value", [THETA, X0]).lean
    assert lean is not None and len(lean.user_calls) == 2
    eager_t, eager_x = (at.tensor(THETA, requires_grad=True), at.tensor(X0, requires_grad=True))
    want = at.grad(model(eager_t, eager_x), (eager_t, eager_x))

    def no_python(*args):
        raise AssertionError("a Python path ran for a compiled custom op")
    monkeypatch.setattr(engine, "_custom_vjp", no_python)
    monkeypatch.setattr(recording_module, "_replay_row", no_python)
    theta2, x2 = THETA * 1.3, X0 * 0.8
    value, (gt, gx) = c.value_and_grad(theta2, x2)
    assert value.item() == pytest.approx(_eager(theta2, x2), rel=1e-13)
    fd = central_jacobian(lambda v: _eager(v[:2], v[2:]), np.concatenate([theta2, x2]))
    np.testing.assert_allclose(np.concatenate([gt.numpy(), gx.numpy()]), fd[0], rtol=1e-6)
    gt, gx = c.grad(THETA, X0)
    np.testing.assert_allclose(gt.numpy(), want[0].numpy(), rtol=1e-13)
    np.testing.assert_allclose(gx.numpy(), want[1].numpy(), rtol=1e-13)


@pytest.mark.parametrize("threads", [1, 2])
def test_batches_equal_separate_calls(threads):
    if threads > at.parallel.usable_cores():
        pytest.skip("one core")
    c = at.compile(model, THETA, X0)
    thetas = THETA * np.linspace(0.5, 1.5, 9)[:, None]
    x0s = X0 * np.linspace(1.2, 0.8, 9)[:, None]
    saved = at.get_num_threads()
    at.set_num_threads(threads)
    try:
        gt, gx = F.vmap(c.grad)(thetas, x0s)
        values = F.vmap(c)(thetas, x0s)
    finally:
        at.set_num_threads(saved)
    for k in range(9):
        want_t, want_x = c.grad(thetas[k], x0s[k])
        np.testing.assert_array_equal(gt.numpy()[k], want_t.numpy())
        np.testing.assert_array_equal(gx.numpy()[k], want_x.numpy())
        assert values.numpy()[k] == c(thetas[k], x0s[k]).item()


def test_jacobians_both_ways_and_jvp_through_a_vjp_only_op():
    def state(theta):
        return decay(theta, at.tensor(X0)) * theta[1]
    c = at.compile(state, THETA)
    want = central_jacobian(lambda t: state(at.tensor(t)).numpy(), THETA)
    for J in (c.jacobian(THETA), c.jacfwd(THETA), c.jacrev(THETA)):
        np.testing.assert_allclose(J.numpy(), want, rtol=1e-6)
    _, tangent = c.jvp((THETA,), (np.array([1.0, -2.0]),))
    np.testing.assert_allclose(tangent.numpy(), want @ [1.0, -2.0], rtol=1e-6)


def test_next_to_a_python_custom_op_the_tape_path_calls_them():
    double = at.custom_op(lambda x: 2 * x, lambda xs, y, g: (2 * g,))
    c = at.compile(lambda t, x: model(t, double(x)), THETA, X0)
    assert c._lean("value", [THETA, X0]) is None
    gt, gx = c.grad(THETA, X0)
    fd = central_jacobian(lambda v: _eager(v[:2], 2 * v[2:]), np.concatenate([THETA, X0]))
    np.testing.assert_allclose(np.concatenate([gt.numpy(), gx.numpy()]), fd[0], rtol=1e-6)


def test_higher_derivatives_are_refused_with_the_reason():
    x = at.tensor(THETA, requires_grad=True)
    with pytest.raises(RuntimeError, match="numba-compiled, so it cannot be differentiated "
                                           "again"):
        at.grad(decay(x, at.tensor(X0)).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        at.compile(model, THETA, X0).hessian(THETA, X0)


def test_bad_compiled_vjps_are_named():
    @numba.njit
    def fwd(x):
        return x * 2.0

    @numba.njit
    def not_a_tuple(inputs, out, g):
        return 2.0 * g

    @numba.njit
    def wrong_size(inputs, out, g):
        return (np.zeros(3),)
    x = at.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="must return a tuple of cotangents"):
        at.grad(at.custom_op(fwd, not_a_tuple)(x).sum(), x)
    with pytest.raises(RuntimeError, match="cotangent for input 0 has shape \\(3,\\)"):
        at.grad(at.custom_op(fwd, wrong_size)(x).sum(), x)
    with pytest.raises(RuntimeError, match="cotangent for input 0 has shape \\(3,\\)"):
        at.compile(lambda v: at.custom_op(fwd, wrong_size)(v).sum(), np.ones(2)).grad(
            np.ones(2))


@numba.njit
def _double(x):
    return x * 2.0


@numba.njit
def _vjp_returning_none(xs, y, g):
    return None


def test_a_compiled_vjp_returning_none_is_named_in_a_compiled_function():
    op = at.custom_op(_double, _vjp_returning_none)
    with pytest.raises(TypeError, match="custom op '_double': a numba-compiled vjp must "
                                        "return a tuple of cotangents"):
        at.compile(lambda x: op(x).sum(), np.ones(2)).grad(np.ones(2))


@numba.njit
def affine_forward(a, b):
    """(2, 3) @ (3,) -> a (2, 3) output of tanh(a * b) (operands and output not 1-D)."""
    return np.tanh(a * b[None, :]) + a.sum()


@numba.njit
def affine_vjp(inputs, out, g):
    a, b = inputs
    d = g * (1.0 - np.tanh(a * b[None, :]) ** 2)
    ga = d * b[None, :] + g.sum()
    gb = (d * a).sum(axis=0)
    return ga, gb


affine = at.custom_op(affine_forward, affine_vjp)


def test_matrix_operands_and_outputs_pass_through_the_driver_element_by_element():
    """Operands and outputs of two axes are copied in C order between the program's
    slots and the user's arrays, and back (kernels/calls.py)."""
    A, b = np.arange(6.0).reshape(2, 3) * 0.1 - 0.2, np.array([0.5, -1.0, 2.0])

    def f(a, v):
        y = affine(a * 1.5, v)
        return (y * np.arange(6.0).reshape(2, 3)).sum()
    c = at.compile(f, A, b)
    assert c._lean("value", [A, b]).lean.user_calls
    value, (ga, gb) = c.value_and_grad(A, b)
    ta, tb = at.tensor(A, requires_grad=True), at.tensor(b, requires_grad=True)
    want = f(ta, tb)
    wa, wb = at.grad(want, (ta, tb))
    assert value.item() == pytest.approx(want.item(), rel=1e-14)
    np.testing.assert_allclose(ga.numpy(), wa.numpy(), rtol=1e-13)
    np.testing.assert_allclose(gb.numpy(), wb.numpy(), rtol=1e-13)
    fd = central_jacobian(lambda v: np.atleast_1d(f(v[:6].reshape(2, 3), v[6:])),
                          np.concatenate([A.ravel(), b]))
    np.testing.assert_allclose(np.concatenate([ga.numpy().ravel(), gb.numpy()]), fd[0],
                               rtol=1e-6, atol=1e-9)
