"""autotape.func: every transform against finite differences, torch's verified values
(T59), torch.func and jax where installed, pytrees, nesting and errors."""
import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape import graph_backward
from fd import central_differences

rng = np.random.default_rng(11)
A = rng.uniform(-1, 1, (5, 5))


def stacked(x):                       # T59's f
    return at.stack([x[0] * x[1], x[0] ** 2, x[1] ** 3])


def cubic(x):                         # T59's s
    return x[0] ** 2 * x[1] + x[1] ** 3


def rosenbrock(x):
    a, b = x[0::2], x[1::2]
    return (100.0 * (b - a ** 2) ** 2 + (1.0 - a) ** 2).sum()


def layer(x):
    return at.tanh(at.tensor(A) @ x) * x


def value(f, x):
    with at.no_grad():
        return np.asarray(f(at.tensor(x)).numpy(), np.float64)


def fd_jacobian(f, x, eps=1e-6):
    out = value(f, x)
    jac = np.zeros(out.shape + x.shape)
    for idx in np.ndindex(out.shape):
        jac[idx] = central_differences(lambda xs: value(f, xs[0])[idx], [x], eps)[0]
    return jac


# ---- torch's verified values (T59) -------------------------------------------------------

def test_T59_values():
    x0 = at.tensor([1., 2.])
    for jac in (F.jacrev, F.jacfwd, F.jacobian):
        assert jac(stacked)(x0).tolist() == [[2.0, 1.0], [2.0, 0.0], [0.0, 12.0]]
    assert F.hessian(cubic)(x0).tolist() == [[4.0, 2.0], [2.0, 12.0]]
    assert F.hessian(lambda x: (3 * x).sum())(x0).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    out, vjp_fn = F.vjp(stacked, x0)
    assert out.tolist() == [2.0, 1.0, 8.0] and vjp_fn(at.ones(3))[0].tolist() == [4.0, 13.0]
    out, jt = F.jvp(stacked, (x0,), (at.tensor([1., 0.]),))
    assert jt.tolist() == [2.0, 2.0, 0.0]
    v = at.tensor([1., -1.])
    val, hv = F.hvp(cubic, (x0,), (v,))
    assert val.item() == 10.0 and hv.tolist() == [2.0, -10.0]
    assert F.vhp(cubic, (x0,), (v,))[1].tolist() == [2.0, -10.0]


# ---- finite differences -----------------------------------------------------------------

FUNCTIONS = {"rosenbrock": (rosenbrock, 6), "layer": (lambda x: layer(x).sum(), 5),
             "cubic": (cubic, 2),
             "mixed": (lambda x: (at.sin(x) * at.exp(-x ** 2)).sum() * at.norm(x), 4)}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_grad_and_hessian_match_finite_differences(name):
    f, n = FUNCTIONS[name]
    x = rng.uniform(-1, 1, n)
    g = F.grad(f)(x)
    fd = central_differences(lambda xs: value(f, xs[0]), [x])[0]
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-6)
    H = F.hessian(f)(x)
    assert H.shape == (n, n)
    np.testing.assert_allclose(H.numpy(), fd_jacobian(F.grad(f), x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(H.numpy(), H.numpy().T, rtol=1e-12, atol=1e-12)
    t = rng.uniform(-1, 1, n)
    val, hv = F.hvp(f, (x,), (t,))
    np.testing.assert_allclose(hv.numpy(), H.numpy() @ t, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(val.item(), value(f, x), rtol=1e-15)


@pytest.mark.parametrize("f", [layer, stacked, lambda x: at.cumsum(x, 0)[1:] * x[:-1] ** 2,
                               lambda x: at.softmax(x.reshape(-1, 1) * x, axis=0)])
def test_jacobians_and_directional_derivatives_match_finite_differences(f):
    x = rng.uniform(-1, 1, 5 if f is layer else 2 if f is stacked else 4)
    J = F.jacrev(f)(x)
    np.testing.assert_allclose(J.numpy(), fd_jacobian(f, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(F.jacfwd(f)(x).numpy(), J.numpy(), rtol=1e-13, atol=1e-15)
    t = rng.uniform(-1, 1, x.shape)
    out, jt = F.jvp(f, (x,), (t,))
    np.testing.assert_allclose(jt.numpy(), np.tensordot(J.numpy(), t, axes=x.ndim),
                               rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(out.numpy(), value(f, x))
    out, vjp_fn = F.vjp(f, x)
    u = rng.uniform(-1, 1, out.shape)
    np.testing.assert_allclose(vjp_fn(u)[0].numpy(),
                               np.tensordot(u, J.numpy(), axes=out.ndim), rtol=1e-12,
                               atol=1e-13)


def test_jacobian_rows_equal_separate_gradients_to_1e_14():
    x = rng.uniform(-1, 1, 5)
    J = F.jacrev(layer)(x).numpy()
    for i in range(5):
        g = F.grad(lambda v: layer(v)[i])(x).numpy()
        np.testing.assert_allclose(J[i], g, rtol=0, atol=1e-14)


# ---- arguments, structures, options -----------------------------------------------------

def test_argnums_pytrees_and_plain_inputs():
    def loss(params, data):
        w, b = params["w"], params["b"]
        return ((data[0] @ w + b - data[1]) ** 2).mean()
    X, y = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, 4)
    params = {"w": rng.uniform(-1, 1, 3), "b": 0.5}
    g = F.grad(loss)(params, (X, y))
    assert set(g) == {"w", "b"} and g["w"].shape == (3,) and g["b"].shape == ()
    r = X @ params["w"] + 0.5 - y
    np.testing.assert_allclose(g["w"].numpy(), 2 * X.T @ r / 4, rtol=1e-13)
    np.testing.assert_allclose(g["b"].item(), 2 * r.mean(), rtol=1e-13)
    gp, gd = F.grad(loss, argnums=(0, 1))(params, [X, y])
    assert isinstance(gd, list) and gd[0].shape == (4, 3)
    np.testing.assert_allclose(gd[1].numpy(), -2 * r / 4, rtol=1e-13)
    assert F.grad(lambda x, y: x * y, argnums=-1)(3, 4.0).item() == 3.0


def test_has_aux_and_value_and_grad():
    def f(x):
        y = (x ** 2).sum()
        return y, {"y": y.detach(), "n": 2}
    x = at.tensor([1., 2.])
    (val, aux), g = F.value_and_grad(f, has_aux=True)(x)
    assert val.item() == 5.0 and aux["n"] == 2 and g.tolist() == [2.0, 4.0]
    g, aux = F.grad(f, has_aux=True)(x)
    assert g.tolist() == [2.0, 4.0] and aux["y"].item() == 5.0
    J, aux = F.jacrev(lambda x: (x * 3, "aux"), has_aux=True)(x)
    assert aux == "aux" and J.tolist() == [[3.0, 0.0], [0.0, 3.0]]
    out, vjp_fn, aux = F.vjp(lambda x: (x * 2, 7), x, has_aux=True)
    assert aux == 7 and vjp_fn(at.ones(2))[0].tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="should be a tuple: \\(output, aux\\)"):
        F.grad(lambda x: x.sum(), has_aux=True)(x)


def test_several_outputs_and_arguments_nest_like_torch_func():
    def f(x, y):
        return x * y, (x ** 2).sum()
    x, y = at.tensor([1., 2.]), at.tensor([3., 4.])
    (jxy, jyy), (jsx, jsy) = F.jacrev(f, argnums=(0, 1))(x, y)
    assert jxy.tolist() == [[3.0, 0.0], [0.0, 4.0]] and jyy.tolist() == [[1.0, 0.0],
                                                                         [0.0, 2.0]]
    assert jsx.tolist() == [2.0, 4.0] and jsy.tolist() == [0.0, 0.0]
    H = F.hessian(lambda x, y: (x * x * y).sum(), argnums=(0, 1))(x, y)
    assert H[0][0].tolist() == [[6.0, 0.0], [0.0, 8.0]]
    assert H[0][1].tolist() == [[2.0, 0.0], [0.0, 4.0]] == H[1][0].tolist()
    assert H[1][1].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    out, vjp_fn = F.vjp(f, x, y)
    gx, gy = vjp_fn((at.ones(2), at.tensor(1.0)))
    assert gx.tolist() == [5.0, 8.0] and gy.tolist() == [1.0, 2.0]
    out, (jt1, jt2) = F.jvp(f, (x, y), (at.ones(2), at.zeros(2)))
    assert jt1.tolist() == [3.0, 4.0] and jt2.item() == 6.0


def test_transforms_nest_and_stay_differentiable():
    f = lambda x: at.sin(x) * x ** 3                                   # noqa: E731
    d3 = F.grad(F.grad(F.grad(f)))(0.7)
    x = 0.7
    expected = (-np.cos(x) * x ** 3 - 9 * np.sin(x) * x ** 2 + 18 * np.cos(x) * x
                + 6 * np.sin(x))
    np.testing.assert_allclose(d3.item(), expected, rtol=1e-13)
    v = rng.uniform(-1, 1, 4)
    np.testing.assert_allclose(F.jacrev(F.jacrev(rosenbrock))(v).numpy(),
                               F.hessian(rosenbrock)(v).numpy(), rtol=1e-13)
    w = at.tensor([1.0, 2.0], requires_grad=True)            # torch.func: keeps the graph
    g = F.grad(lambda x: (x ** 3).sum())(w)
    assert g.requires_grad
    assert at.grad(g.sum(), w)[0].tolist() == [6.0, 12.0]


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "jvp"])
def test_transforms_inside_a_compiled_function_are_recorded_with_it(transform):
    """A Jacobian taken inside at.compile's f (a Rosenbrock step's df/dy) is part of
    the one recording: compiled, its value and the gradient through it (second
    derivatives) are the eager ones, and no decision is left in Python."""
    def field(y, k):
        return at.stack([y[1], k * (1 - y[0] ** 2) * y[1] - y[0]])

    def f(y, k):
        if transform == "jvp":
            J = at.stack([F.jvp(lambda v: field(v, k), (y,), (at.tensor(e),))[1]
                          for e in np.eye(2)], axis=1)
        else:
            J = getattr(F, transform)(field)(y, k)
        return (at.sin(J) * J).sum() + (J @ y).sum()
    y, k = np.array([2.0, 0.5]), np.array(3.0)
    c = at.compile(f, y, k)
    assert "decision" not in c.explain(y, k)
    value, (gy, gk) = c.value_and_grad(y, k)
    ev, (ey, ek) = F.value_and_grad(f, argnums=(0, 1))(y, k)
    np.testing.assert_allclose(value.numpy(), ev.numpy(), rtol=1e-14)
    np.testing.assert_allclose(gy.numpy(), ey.numpy(), rtol=1e-13)
    np.testing.assert_allclose(gk.numpy(), ek.numpy(), rtol=1e-13)


def test_per_sample_gradients_in_one_sweep():
    """The recipe in the README: the Jacobian of the per-sample losses."""
    X, y = rng.uniform(-1, 1, (6, 3)), rng.uniform(-1, 1, 6)
    w = rng.uniform(-1, 1, 3)

    def losses(w):
        return (at.tanh(at.tensor(X) @ w) - at.tensor(y)) ** 2
    P = F.jacrev(losses)(w)
    assert P.shape == (6, 3)
    for i in range(6):
        gi = F.grad(lambda w: losses(w)[i])(w)
        np.testing.assert_allclose(P.numpy()[i], gi.numpy(), rtol=0, atol=1e-14)


def test_errors():
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar "
                                           "Tensor, got tensor with 1 dims"):
        F.grad(lambda x: x * 2)(at.ones(2))
    with pytest.raises(TypeError, match="only floating point inputs"):
        F.grad(lambda x: x.sum())(np.array([True, False]))
    with pytest.raises(TypeError, match="expected a Tensor, a numpy array or a Python "
                                        "number, but got str"):
        F.grad(lambda x: x)("1.0")
    with pytest.raises(RuntimeError, match="argnums"):
        F.grad(lambda x: x.sum(), argnums=2)(at.ones(2))
    with pytest.raises(RuntimeError, match="same shape"):
        F.jvp(lambda x: x, (at.ones(2),), (at.ones(3),))
    out, vjp_fn = F.vjp(lambda x: x * 2, at.ones(2))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        vjp_fn(at.ones(3))
    with pytest.raises(RuntimeError, match="Expected f to return Tensors or float arrays"):
        F.jacrev(lambda x: "3.0")(at.ones(2))


def test_unused_and_constant_outputs_give_zeros():
    assert F.grad(lambda x, y: (x * 2).sum(), argnums=1)(at.ones(2), at.ones(3)).tolist() \
        == [0.0, 0.0, 0.0]
    assert F.jacrev(lambda x: at.ones(2))(at.ones(3)).tolist() == [[0.0] * 3] * 2
    assert F.hessian(lambda x: x.sum() * 0 + 1.0)(at.ones(2)).tolist() == [[0.0, 0.0]] * 2


def test_float32_stays_float32():
    x = at.tensor([1.0, 2.0], dtype="float32")
    assert F.grad(lambda x: (x ** 2).sum())(x).dtype == np.float32
    assert F.jacrev(lambda x: x ** 2)(x).dtype == np.float32


# ---- oracles ------------------------------------------------------------------------------

def _oracle_functions(lib, tanh):
    Am = lib(A)
    return {
        "layer": lambda x: tanh(Am @ x) * x,
        "rosenbrock": lambda x: (100.0 * (x[1::2] - x[0::2] ** 2) ** 2
                                 + (1.0 - x[0::2]) ** 2).sum(),
    }


def test_against_torch_func():
    torch = pytest.importorskip("torch")
    x0 = rng.uniform(-1, 1, 6)[:5]
    ours = _oracle_functions(at.tensor, at.tanh)
    theirs = _oracle_functions(torch.tensor, torch.tanh)
    xt = torch.tensor(x0)
    np.testing.assert_allclose(F.jacrev(ours["layer"])(x0).numpy(),
                               torch.func.jacrev(theirs["layer"])(xt).numpy(), rtol=1e-13)
    x4 = rng.uniform(-1, 1, 4)
    np.testing.assert_allclose(F.hessian(ours["rosenbrock"])(x4).numpy(),
                               torch.func.hessian(theirs["rosenbrock"])(
                                   torch.tensor(x4)).numpy(), rtol=1e-12)
    t = rng.uniform(-1, 1, 5)
    np.testing.assert_allclose(F.jvp(ours["layer"], (x0,), (t,))[1].numpy(),
                               torch.func.jvp(theirs["layer"], (xt,), (torch.tensor(t),))[1]
                               .numpy(), rtol=1e-12)


def test_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    ours = _oracle_functions(at.tensor, at.tanh)
    theirs = _oracle_functions(jnp.asarray, jnp.tanh)
    x0 = rng.uniform(-1, 1, 5)
    np.testing.assert_allclose(F.jacrev(ours["layer"])(x0).numpy(),
                               np.asarray(jax.jacrev(theirs["layer"])(jnp.asarray(x0))),
                               rtol=1e-13)
    x4 = rng.uniform(-1, 1, 4)
    np.testing.assert_allclose(F.hessian(ours["rosenbrock"])(x4).numpy(),
                               np.asarray(jax.hessian(theirs["rosenbrock"])(jnp.asarray(x4))),
                               rtol=1e-12)


def test_outputs_that_do_not_depend_on_the_inputs_have_zero_derivatives():
    assert F.grad(lambda x: 3.0)(at.ones(2)).tolist() == [0.0, 0.0]
    assert F.jacrev(lambda x: np.ones(3))(at.ones(2)).tolist() == [[0.0, 0.0]] * 3
    assert F.jvp(lambda x: np.ones(2), (at.ones(2),), (at.ones(2),))[1].tolist() == [0.0, 0.0]


def test_every_transform_against_torch_func():
    torch = pytest.importorskip("torch")
    tf = torch.func
    x0, v0 = rng.uniform(-1, 1, 5), rng.uniform(-1, 1, 5)
    ours, theirs = _oracle_functions(at.tensor, at.tanh), _oracle_functions(torch.tensor,
                                                                            torch.tanh)
    xt, vt = torch.tensor(x0), torch.tensor(v0)

    def scalar(lib_f):
        return lambda x: (lib_f(x) ** 2).sum()
    close = lambda a, b: np.testing.assert_allclose(np.asarray(a), b.detach().numpy(),  # noqa
                                                    rtol=1e-12, atol=1e-14)
    close(F.grad(scalar(ours["layer"]))(x0).numpy(), tf.grad(scalar(theirs["layer"]))(xt))
    value, g = F.value_and_grad(scalar(ours["layer"]))(x0)
    gt, vt_ = tf.grad_and_value(scalar(theirs["layer"]))(xt)
    close(value.numpy(), vt_)
    close(g.numpy(), gt)
    close(F.vjp(ours["layer"], x0)[1](v0)[0].numpy(), tf.vjp(theirs["layer"], xt)[1](vt)[0])
    close(F.jacfwd(ours["layer"])(x0).numpy(), tf.jacfwd(theirs["layer"])(xt))
    hv = F.hvp(scalar(ours["layer"]), (x0,), (v0,))[1]
    close(hv.numpy(), tf.hessian(scalar(theirs["layer"]))(xt) @ vt)


def test_every_transform_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    x0, v0 = rng.uniform(-1, 1, 5), rng.uniform(-1, 1, 5)
    ours, theirs = _oracle_functions(at.tensor, at.tanh), _oracle_functions(jnp.asarray,
                                                                            jnp.tanh)
    xj, vj = jnp.asarray(x0), jnp.asarray(v0)

    def close(a, b):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-14)
    scalar_ours = lambda x: (ours["layer"](x) ** 2).sum()                        # noqa
    scalar_theirs = lambda x: (theirs["layer"](x) ** 2).sum()                    # noqa
    close(F.grad(scalar_ours)(x0).numpy(), jax.grad(scalar_theirs)(xj))
    close(F.jvp(ours["layer"], (x0,), (v0,))[1].numpy(),
          jax.jvp(theirs["layer"], (xj,), (vj,))[1])
    close(F.vjp(ours["layer"], x0)[1](v0)[0].numpy(), jax.vjp(theirs["layer"], xj)[1](vj)[0])
    close(F.jacfwd(ours["layer"])(x0).numpy(), jax.jacfwd(theirs["layer"])(xj))
    close(F.hvp(scalar_ours, (x0,), (v0,))[1].numpy(),
          jax.jvp(jax.grad(scalar_theirs), (xj,), (vj,))[1])


def test_hvp_with_pytree_primals():
    def f(p, s):
        return (p["a"] ** 2 * p["b"]).sum() + s ** 3
    p = {"a": at.tensor([1.0, 2.0]), "b": at.tensor([3.0, 4.0])}
    t = {"a": at.tensor([1.0, 0.0]), "b": at.tensor([0.0, 1.0])}
    value, (hp, hs) = F.hvp(f, (p, 2.0), (t, 1.0))
    assert value.item() == 3.0 + 16.0 + 8.0
    # d2/da2 = 2b, d2/dadb = 2a: H t for a-part = 2b*ta + 2a*tb; b-part = 2a*ta
    assert hp["a"].tolist() == [6.0, 4.0] and hp["b"].tolist() == [2.0, 0.0]
    assert hs.item() == 12.0


# ---- nested transforms that close over an outer variable (perturbation confusion) --------

@pytest.mark.parametrize("f, x, expected", [
    # d/dx [x * d/dy (x y)] = d/dx x^2 = 2x
    (lambda x: x * F.grad(lambda y: x * y)(2.0), 1.0, 2.0),
    # d/dx d/dy d/dz (x^2 y z) = 2x, a third derivative through two closures
    (lambda x: F.grad(lambda y: F.grad(lambda z: x * x * y * z)(3.0))(2.0), 1.5, 3.0),
    # d/dx d^2/dy^2 (x y^3) at y = 3 = 18
    (lambda x: F.hessian(lambda y: x * y ** 3)(3.0), 1.0, 18.0),
    (lambda x: F.jacrev(lambda y: x * y * y)(3.0), 1.0, 6.0),
    (lambda x: F.jvp(lambda y: x * y * y, (3.0,), (1.0,))[1], 1.0, 6.0),
    (lambda x: F.vjp(lambda y: x * y, 2.0)[1](1.0)[0], 1.0, 1.0),
    (lambda x: F.value_and_grad(lambda y: x * y * y)(2.0)[0], 3.0, 4.0),
    (lambda x: F.hvp(lambda y: x * y ** 3, (2.0,), (1.0,))[1], 1.0, 12.0),
    # at.grad with create_graph inside a transform
    (lambda x: at.grad(x ** 3, x, create_graph=True)[0], 2.0, 12.0),
])
def test_nested_transforms_closing_over_outer_values_are_exact(f, x, expected):
    assert float(F.grad(f)(x)) == pytest.approx(expected, rel=1e-12)


def test_inner_transform_over_a_user_tensor_stays_differentiable():
    x = at.tensor(2.0, requires_grad=True)
    inner = F.grad(lambda y: x * y * y)(3.0)          # 2 x y = 12
    assert inner.item() == 12.0
    assert float(at.grad(inner, x)[0]) == 6.0


def test_unnested_transforms_return_plain_results():
    g = F.grad(lambda x: F.grad(lambda y: y ** 3)(x) * 1.0)(2.0)   # d/dx 3x^2 = 12
    assert float(g) == 12.0 and not g.requires_grad
    h = F.grad(lambda y: (y ** 2).sum())(at.tensor([1.0, 2.0]))
    assert not h.requires_grad


def test_nested_closure_matches_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)

    def f(lib, g):
        return lambda x: g(lambda y: lib.sin(x * y) * y)(0.7) * x
    ours = F.grad(f(at, F.grad))(1.3)
    theirs = jax.grad(f(jax.numpy, jax.grad))(1.3)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-12)


def test_vmap_over_no_points_gives_empty_results():
    c = at.compile(lambda x: (x ** 2).sum() * x, np.ones(2))
    values = F.vmap(c)(np.zeros((0, 2)))
    assert values.shape == (0, 2)
    s = at.compile(lambda x: (x ** 2).sum(), np.ones(2))
    value, grads = F.vmap(s.value_and_grad)(np.zeros((0, 2)))
    assert value.shape == (0,) and grads.shape == (0, 2)
    assert F.vmap(s.jacobian)(np.zeros((0, 2))).shape == (0, 2)
    assert F.vmap(lambda x: x * 2.0)(np.zeros((0, 3))).shape == (0, 3)
    assert F.vmap(lambda x, y: (x + y, x.sum()))(np.zeros((0, 3)), np.zeros((0, 3)))[1] \
        .shape == (0,)


def test_recorded_jvp_does_not_walk_the_graph_behind_its_inputs(monkeypatch):
    """jvp of f at a point with a long history, differentiably (the point requires
    grad): its two recorded sweeps stop at f's inputs and at its cotangents, so the rows
    they visit do not grow with the history (they walked all of it at every call: an
    implicit solver's step was quadratic in the steps)."""
    visited = []
    plain = graph_backward.RowView

    class Counted(plain):
        def __init__(self, tape, i):
            visited.append(i)
            super().__init__(tape, i)
    monkeypatch.setattr(graph_backward, "RowView", Counted)
    p = at.tensor(0.5, requires_grad=True)
    rows = {}
    for length in (10, 1000):
        y = at.tensor([1.0, 2.0]) * p
        for _ in range(length):                       # the history
            y = at.sin(y) + 0.1 * y
        visited.clear()
        _, jt = F.jvp(lambda y: y * y * y, (y,), (at.ones(2),))
        rows[length] = len(visited)
        np.testing.assert_allclose(jt.detach().numpy(), 3 * y.detach().numpy() ** 2)
        assert jt.requires_grad                       # (differentiable: the history's p)
    assert rows[1000] == rows[10] < 60
