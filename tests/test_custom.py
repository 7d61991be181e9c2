"""Custom ops (at.custom_op) and eager checkpointing (at.checkpoint): gradients, second
derivatives and batched Jacobians against finite differences, in eager code,
autotape.func and at.compile."""
import numpy as np
import pytest

import autotape as at
import autotape.func as F


def _forward(x, y):
    return np.sin(x) * y ** 2


def _vjp(inputs, output, g):
    # numpy functions: on arrays in the compiled sweep, recorded on Tensors under
    # create_graph, so second derivatives are exact too
    x, y = inputs
    return g * np.cos(x) * y ** 2, g * 2.0 * np.sin(x) * y


op = at.custom_op(_forward, _vjp, name="sin_times_square")


def model(u):
    return (op(u[:3], u[3:]) * u[:3]).sum() + op(u[0], u[5]) ** 2


U = np.array([0.3, -0.7, 1.1, 0.5, 1.5, -0.4])


def fd_grad(f, u, eps=1e-6):
    return np.array([(f(u + eps * e) - f(u - eps * e)) / (2 * eps) for e in np.eye(u.size)])


def value(u):
    return float(model(at.tensor(u)))


def test_gradient_matches_finite_differences():
    x = at.tensor(U, requires_grad=True)
    g, = at.grad(model(x), x)
    np.testing.assert_allclose(g.numpy(), fd_grad(value, U), rtol=1e-7, atol=1e-9)


def test_second_derivatives_through_the_vjp():
    hess = F.hessian(model)(U).numpy()
    grad = lambda u: F.grad(model)(u).numpy()                          # noqa: E731
    fd = np.array([(grad(U + 1e-6 * e) - grad(U - 1e-6 * e)) / 2e-6 for e in np.eye(6)])
    np.testing.assert_allclose(hess, fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-12, atol=1e-12)


def test_batched_jacobian_one_vjp_per_lane():
    jac = F.jacrev(lambda u: op(u[:3], u[3:]))(U).numpy()
    fd = np.array([(_forward(*np.split(U + 1e-6 * e, 2)) - _forward(*np.split(U - 1e-6 * e, 2)))
                   / 2e-6 for e in np.eye(6)]).T
    np.testing.assert_allclose(jac, fd, rtol=1e-7, atol=1e-9)


def test_in_a_compiled_function_replayed_at_new_arguments():
    f = at.compile(model, U)
    for u in (U, U[::-1].copy(), U * 0.5):
        assert abs(f(u).item() - value(u)) < 1e-12
        np.testing.assert_allclose(f.grad(u).numpy(), fd_grad(value, u), rtol=1e-7,
                                   atol=1e-9)
    np.testing.assert_allclose(f.hessian(U).numpy(), F.hessian(model)(U).numpy(),
                               rtol=1e-12)
    points = np.stack([U, U * 0.5])
    np.testing.assert_allclose(F.vmap(f.grad)(points).numpy()[1], f.grad(U * 0.5).numpy(),
                               rtol=1e-15)


def test_constant_inputs_and_no_gradient_for_an_input():
    scale = at.custom_op(lambda x, s: x * s, lambda xs, y, g: (g * xs[1], None))
    x = at.tensor([1.0, 2.0], requires_grad=True)
    s = at.tensor([3.0, 4.0], requires_grad=True)
    gx, gs = at.grad(scale(x, s).sum(), [x, s], allow_unused=True)
    assert gx.tolist() == [3.0, 4.0] and gs.tolist() == [0.0, 0.0]    # torch: None
    gx, = at.grad(scale(x, np.array([5.0, 6.0])).sum(), x)       # an array: a constant
    assert gx.tolist() == [5.0, 6.0]
    assert not scale(np.ones(2), np.ones(2)).requires_grad


def test_bad_vjps_are_named():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    wrong_shape = at.custom_op(lambda x: x * 2, lambda xs, y, g: (g.sum(),), name="w")
    with pytest.raises(RuntimeError, match=r"custom op 'w': vjp's cotangent for input 0 "
                                           r"has shape \(\), but the input has shape \(2,\)"):
        at.grad(wrong_shape(x).sum(), x)
    wrong_count = at.custom_op(lambda x: x * 2, lambda xs, y, g: (g, g), name="c")
    with pytest.raises(RuntimeError, match="vjp returned 2 cotangent"):
        at.grad(wrong_count(x).sum(), x)
    with pytest.raises(TypeError, match="callables"):
        at.custom_op(3, lambda *a: None)
    with pytest.raises(TypeError, match="numeric"):
        at.custom_op(lambda x: x, lambda *a: None)(np.array(["a"]))


def _step(h, k):
    return h + 0.1 * at.tanh(k * h) * at.cos(h)


def _chain(k, checkpointed, steps):
    h = k * 1.0
    for _ in range(steps):
        h = at.checkpoint(_step, h, k) if checkpointed else _step(h, k)
    return h.sum()


def test_checkpoint_equals_the_plain_gradient_and_keeps_few_rows():
    def run(k, checkpointed):
        return _chain(k, checkpointed, 20)

    k = at.tensor(np.linspace(0.5, 1.5, 8), requires_grad=True)
    plain = run(k, False)
    rows_plain = plain._tape.nrows
    ckpt = run(k, True)
    rows_ckpt = ckpt._tape.nrows - (rows_plain if ckpt._tape is plain._tape else 0)
    assert rows_ckpt < rows_plain / 3                          # internals not kept
    g1, = at.grad(plain, k)
    g2, = at.grad(ckpt, k)
    np.testing.assert_allclose(g2.numpy(), g1.numpy(), rtol=1e-13)
    h1, = at.grad(at.grad(run(k, False), k, create_graph=True)[0].sum(), k)
    h2, = at.grad(at.grad(run(k, True), k, create_graph=True)[0].sum(), k)
    np.testing.assert_allclose(h2.numpy(), h1.numpy(), rtol=1e-12)


def test_a_sweep_inside_a_custom_vjp_keeps_the_outer_sweep_intact():
    # checkpoint's VJP sweeps a tape of its own in the middle of the outer sweep
    x = at.tensor(np.linspace(0.0, 1.0, 300), requires_grad=True)
    y = at.sin(x) * 2.0
    z = at.checkpoint(lambda u: at.exp(u) * u, y) + y * y
    g, = at.grad(z.sum(), x)
    xs = np.linspace(0.0, 1.0, 300)
    ys = 2 * np.sin(xs)
    want = (np.exp(ys) * (1 + ys) + 2 * ys) * 2 * np.cos(xs)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-13)


def test_checkpoint_inside_a_compiled_function():
    def run(k, checkpointed):
        return _chain(k, checkpointed, 10)

    k0 = np.linspace(0.5, 1.5, 4)
    ckpt = at.compile(lambda k: run(k, True), k0)
    plain = at.compile(lambda k: run(k, False), k0)
    for k in (k0, k0 * 1.3):
        assert ckpt(k).item() == plain(k).item()
        np.testing.assert_allclose(ckpt.grad(k).numpy(), plain.grad(k).numpy(), rtol=1e-14)
    np.testing.assert_allclose(ckpt.hessian(k0).numpy(), plain.hessian(k0).numpy(),
                               rtol=1e-13, atol=1e-15)


def test_forward_returning_none_or_another_shape_at_a_replay_raises():
    with pytest.raises(TypeError, match="forward must return an array or a number, not "
                                        "NoneType"):
        at.custom_op(lambda x: None, lambda xs, y, g: (g,))(at.tensor([1.0]))
    # a forward whose output shape depends on its input's values
    shrink = at.custom_op(lambda x: x[x > 0], lambda xs, y, g: (np.ones_like(xs[0]),))
    c = at.compile(lambda x: shrink(x * 1.0).sum(), np.array([1.0, 2.0, 3.0]))
    assert c(np.array([1.0, 2.0, 3.0])).item() == 6.0
    with pytest.raises(RuntimeError, match=r"forward returned shape \(1,\) where it was "
                                           r"recorded with shape \(3,\)"):
        c(np.array([-1.0, -2.0, 3.0]))
    scalar = at.custom_op(lambda x: x[:1], lambda xs, y, g: (np.ones_like(xs[0]),))
    c = at.compile(lambda x: scalar(x * 1.0).sum(), np.array([1.0, 2.0]))
    assert c(np.array([4.0, 2.0])).item() == 4.0
