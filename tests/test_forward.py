"""Forward mode in compiled programs (kernels/program.py ``tangent``, the compiled loop
body's ``tangent`` in kernels/loops.py): ``Compiled.jvp``, ``Compiled.jacfwd``, the
Jacobians ``jacobian`` takes forward, and Hessians forward over reverse. Every op the
lean program lowers gives the reverse sweep's Jacobian; a compiled loop body gives the
interpreter's tangents; batches give separate calls' answers."""
import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape import program
from fd import central_jacobian
from test_op_table import SAMPLES
from test_program import _same_hessian


def _reverse_jacobian(c, x):
    """The reverse Jacobian (a sweep per output), (outputs, inputs)."""
    return c.jacrev(x).numpy().reshape(-1, x.size)


@pytest.mark.parametrize("code", sorted(SAMPLES), ids=at.opcodes.opcode_name)
def test_every_lowered_op_gives_the_reverse_jacobian(code):
    f, x = SAMPLES[code]
    c = at.compile(lambda v: f(v) * 1.0, x)
    if c._lean("value", [x]) is None:
        pytest.skip("not lowered: the tape path sweeps in reverse")
    for point in (x, x * 0.7 + 0.05):
        forward = c.jacfwd(point).numpy().reshape(-1, x.size)
        _same_hessian(forward, _reverse_jacobian(c, point))


def trajectory(theta, steps=60):
    x, v = theta[0], theta[1]
    states = []
    for _ in range(steps):
        a = -theta[2] * at.sin(x) - theta[3] * v
        x, v = x + 0.05 * v, v + 0.05 * at.tanh(a)
        states += [x, v * v]
    return at.stack(states)


THETA = np.array([1.0, 0.2, 9.8, 0.1])


def test_trajectory_jacobian_forward_equals_reverse_and_finite_differences():
    c = at.compile(trajectory, THETA)
    forward = c.jacfwd(THETA).numpy()
    assert forward.shape == (120, 4)
    np.testing.assert_allclose(forward, _reverse_jacobian(c, THETA), rtol=1e-12, atol=1e-14)
    fd = central_jacobian(lambda t: trajectory(at.tensor(t)).numpy(), THETA)
    np.testing.assert_allclose(forward, fd, rtol=1e-6, atol=1e-8)
    # jacobian goes forward by itself here (4 inputs, 120 outputs): the same numbers
    np.testing.assert_array_equal(c.jacobian(THETA).numpy(), forward)


def test_compiled_loop_body_gives_the_interpreters_tangents(monkeypatch, loop_bodies):
    monkeypatch.setattr(program, "POISON_SCRATCH", True)   # (a value read unwritten: nan)
    c = at.compile(lambda t: trajectory(t, 300), THETA)
    lean = c._lean("value", [THETA]).lean
    assert lean.loop is not None
    points = THETA * np.linspace(0.8, 1.2, 7)[:, None]
    interpreted = [c.jacfwd(p).numpy() for p in points[:2]]
    batch_interpreted = F.vmap(c.jacfwd)(points).numpy()
    for _ in range(program.COMPILE_LOOP_AFTER):
        c.jacfwd(THETA)
    assert lean.loop_kernels is not None
    np.testing.assert_allclose([c.jacfwd(p).numpy() for p in points[:2]], interpreted,
                               rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(F.vmap(c.jacfwd)(points).numpy(), batch_interpreted,
                               rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(batch_interpreted[1], interpreted[1], rtol=1e-14, atol=1e-15)
    value, tangent = c.jvp((points[3],), (np.array([0.0, 0.0, 1.0, -2.0]),))
    np.testing.assert_allclose(tangent.numpy(), batch_interpreted[3] @ [0, 0, 1.0, -2.0],
                               rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(value.numpy(), c(points[3]).numpy())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("points", [1, 5, 45])
def test_batched_jacfwd_equals_separate_calls(points, threads):
    if threads > at.get_num_threads() and threads > at.parallel.usable_cores():
        pytest.skip("one core")
    rng = np.random.default_rng(points)
    thetas = THETA * rng.uniform(0.5, 1.5, (points, 4))
    c = at.compile(trajectory, THETA)
    saved = at.get_num_threads()
    at.set_num_threads(threads)
    try:
        batch = F.vmap(c.jacfwd)(thetas).numpy()
    finally:
        at.set_num_threads(saved)
    assert batch.shape == (points, 120, 4)
    for k in range(points):
        np.testing.assert_array_equal(batch[k], c.jacfwd(thetas[k]).numpy())


def test_jvp_several_arguments_and_outputs():
    def f(x, s):
        return {"a": at.sin(x) * s, "b": (x ** 2).sum() + s}
    x, s = np.array([0.3, -1.2, 2.0]), 1.5
    c = at.compile(f, x, s)
    tx, ts = np.array([1.0, 0.5, -2.0]), 0.25
    value, tangent = c.jvp((x, s), (tx, ts))
    np.testing.assert_allclose(value["a"].numpy(), np.sin(x) * s)
    np.testing.assert_allclose(tangent["a"].numpy(), np.cos(x) * tx * s + np.sin(x) * ts)
    np.testing.assert_allclose(tangent["b"].numpy(), (2 * x * tx).sum() + ts)
    jx, js = c.jacfwd(x, s)["a"]
    np.testing.assert_allclose(jx.numpy(), np.diag(np.cos(x) * s))
    np.testing.assert_allclose(js.numpy(), np.sin(x))


def test_jvp_matches_torch():
    torch = pytest.importorskip("torch")

    def f(t, lib):
        return lib.tanh(t[:3] * t[1:]) / (1.0 + t[:3] ** 2)
    x, v = np.array([0.4, -0.8, 1.3, 0.2]), np.array([1.0, -1.0, 0.5, 2.0])
    _, want = torch.func.jvp(lambda t: f(t, torch), (torch.tensor(x),), (torch.tensor(v),))
    _, got = at.compile(lambda t: f(t, at), x).jvp((x,), (v,))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-14)


def test_a_value_that_does_not_depend_on_an_input_has_zero_derivative_not_nan():
    # sqrt at 0 has an inf partial; the lane of x[1] carries a zero tangent through it,
    # and 0 * inf must not become nan (the reverse sweep gives the same numbers)
    c = at.compile(lambda x: at.stack([at.sqrt(x[0]) * x[1], x[1] * 2.0, x[1] * 3.0]),
                   np.array([0.0, 1.0]))
    J = c.jacfwd(np.array([0.0, 1.0])).numpy()
    assert np.isinf(J[0, 0]) and J[0, 1] == 0.0
    np.testing.assert_array_equal(J[1:], [[0.0, 2.0], [0.0, 3.0]])
    _same_hessian(J, _reverse_jacobian(c, np.array([0.0, 1.0])))


def test_float32_program_tangents_in_float32():
    c = at.compile(lambda t: trajectory(t, 10), THETA.astype(np.float32))
    J = c.jacfwd(THETA.astype(np.float32))
    assert J.dtype == np.float32
    np.testing.assert_allclose(J.numpy(), at.compile(lambda t: trajectory(t, 10), THETA)
                               .jacfwd(THETA).numpy(), rtol=2e-4, atol=1e-5)


def test_tape_path_programs_give_the_same_numbers():
    # max is not lowered: the tape's reverse sweep gives jacfwd and jvp
    def f(x):
        m = x.reshape(2, 2)
        return (m @ m).reshape(-1) * x.max()
    x = np.array([1.0, 2.0, -0.5, 0.3])
    c = at.compile(f, x)
    assert c._lean("value", [x]) is None
    want = central_jacobian(lambda v: f(at.tensor(v)).numpy(), x)
    np.testing.assert_allclose(c.jacfwd(x).numpy(), want, rtol=1e-7)
    value, tangent = c.jvp((x,), (np.array([1.0, 0.0, 0.0, 1.0]),))
    np.testing.assert_allclose(tangent.numpy(), want @ [1.0, 0, 0, 1.0], rtol=1e-7)
    np.testing.assert_allclose(value.numpy(), f(at.tensor(x)).numpy())


def test_jvp_bad_tangents_are_named():
    c = at.compile(lambda x: x * 2.0, np.ones(3))
    with pytest.raises(RuntimeError, match="same shape, got \\(3,\\) and \\(2,\\)"):
        c.jvp((np.ones(3),), (np.ones(2),))
    with pytest.raises(RuntimeError, match="same structure, got 1 primals and 2"):
        c.jvp((np.ones(3),), (np.ones(3), np.ones(3)))
    with pytest.raises(TypeError, match="tangents must be float arrays"):
        c.jvp((np.ones(3),), (np.array(["a", "b", "c"]),))


# ---- eager: autotape.func.jvp / jacfwd / hessian over f's recording ----------------------

def test_eager_jacfwd_runs_forward_and_equals_jacrev(monkeypatch):
    import autotape.func as func_module
    J_rev = F.jacrev(trajectory)(at.tensor(THETA)).numpy()

    def no_reverse(*args):
        raise AssertionError("jacfwd took the reverse sweep")
    monkeypatch.setattr(func_module, "_jacobian_rows", no_reverse)
    J = F.jacfwd(trajectory)(at.tensor(THETA))
    assert J.shape == (120, 4) and not J.requires_grad
    np.testing.assert_allclose(J.numpy(), J_rev, rtol=1e-12, atol=1e-14)
    value, tangent = F.jvp(trajectory, (at.tensor(THETA),), (at.tensor([1.0, 0, 0, -1.0]),))
    np.testing.assert_allclose(tangent.numpy(), J_rev @ [1.0, 0, 0, -1.0], rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_array_equal(value.numpy(), trajectory(at.tensor(THETA)).numpy())


def test_eager_forward_mode_several_inputs_and_outputs():
    def f(x, s):
        return {"a": at.sin(x) * s, "b": x.sum() * 2.0, "same": s}
    x, s = at.tensor([[0.3, -1.2], [2.0, 0.5]]), at.tensor(1.5)
    J = F.jacfwd(f, argnums=(0, 1))(x, s)
    Jr = F.jacrev(f, argnums=(0, 1))(x, s)
    for key in ("a", "b", "same"):
        for got, want in zip(J[key], Jr[key]):
            assert got.shape == want.shape
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-14)


def test_eager_forward_mode_falls_back_where_it_cannot_run():
    def f(x):                                  # inv: not lowered
        m = x.reshape(2, 2)
        return at.linalg.inv(m @ m).reshape(-1)
    x = np.array([1.0, 2.0, -0.5, 0.3])
    np.testing.assert_allclose(F.jacfwd(f)(at.tensor(x)).numpy(),
                               central_jacobian(lambda v: f(at.tensor(v)).numpy(), x),
                               rtol=1e-7)
    # derivatives that must stay differentiable (an input requiring grad): reverse,
    # recorded, so a second derivative flows
    w = at.tensor([0.5, -1.0], requires_grad=True)
    J = F.jacfwd(lambda v: v ** 3)(w)
    assert J.requires_grad
    (g,) = at.grad(J.sum(), w)
    np.testing.assert_allclose(g.numpy(), 6 * w.numpy())


def test_eager_jvp_matches_torch():
    torch = pytest.importorskip("torch")
    x, v = np.array([0.4, -0.8, 1.3]), np.array([1.0, -1.0, 0.5])

    def f(t, lib):
        return lib.tanh(t * t[0]) / (1.0 + t ** 2)
    _, want = torch.func.jvp(lambda t: f(t, torch), (torch.tensor(x),), (torch.tensor(v),))
    _, got = F.jvp(lambda t: f(t, at), (at.tensor(x),), (at.tensor(v),))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-14)
    want = torch.func.jacfwd(lambda t: f(t, torch))(torch.tensor(x))
    np.testing.assert_allclose(F.jacfwd(lambda t: f(t, at))(at.tensor(x)).numpy(),
                               want.numpy(), rtol=1e-14)
