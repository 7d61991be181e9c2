"""The numpy functions of issue #13, each through np.<name> on Tensors, autotape.numpy
and (where numpy has one) the ndarray method: values equal numpy's, gradients match
central differences, and jax.numpy's gradients where jax is installed."""
import numpy as np
import pytest

import autotape as at
import autotape.numpy as anp
from fd import check_grads

rng = np.random.default_rng(13)


def u(*shape):
    return rng.uniform(-1, 1, shape)


def increasing(n):
    return np.cumsum(rng.uniform(0.2, 1.0, n))


def first(r):
    return r[0] if isinstance(r, (list, tuple)) else r


def joined(r):
    """A list result as one array (to compare and weight), in the pieces' own library."""
    if isinstance(r, (list, tuple)):
        xp = anp if isinstance(r[0], at.Tensor) else r[0].__array_namespace__()
        return xp.concatenate([p.reshape(-1) for p in r])
    return r


# name -> (f(xp, *arrays) written against a numpy-like module xp, input arrays, method)
CASES = {
    "hstack": (lambda xp, a, b: xp.hstack([a, b]), [u(2, 3), u(2, 2)], None),
    "vstack": (lambda xp, a, b: xp.vstack([a, b]), [u(3), u(2, 3)], None),
    "column_stack": (lambda xp, a, b: xp.column_stack([a, b]), [u(3), u(3, 2)], None),
    "dstack": (lambda xp, a, b: xp.dstack([a, b]), [u(2, 3), u(2, 3)], None),
    "hsplit": (lambda xp, a: joined(xp.hsplit(a, 2)) * xp.arange(8.0), [u(2, 4)], None),
    "vsplit": (lambda xp, a: xp.vsplit(a, [1])[1], [u(3, 2)], None),
    "dsplit": (lambda xp, a: xp.dsplit(a, 2)[0], [u(2, 2, 4)], None),
    "array_split": (lambda xp, a: xp.array_split(a, 3)[0], [u(7)], None),
    "atleast_1d": (lambda xp, a: xp.atleast_1d(a) * 2.0, [u()], None),
    "atleast_2d": (lambda xp, a: xp.atleast_2d(a), [u(3)], None),
    "atleast_3d": (lambda xp, a: xp.atleast_3d(a), [u(2, 3)], None),
    "diag": (lambda xp, a: xp.diag(a, 1), [u(3)], None),
    "diag of matrix": (lambda xp, a: xp.diag(a, -1), [u(3, 3)], None),
    "diagflat": (lambda xp, a: xp.diagflat(a), [u(2, 2)], None),
    "fliplr": (lambda xp, a: xp.fliplr(a) * xp.arange(6.0).reshape(2, 3), [u(2, 3)], None),
    "flipud": (lambda xp, a: xp.flipud(a) * xp.arange(6.0).reshape(2, 3), [u(2, 3)], None),
    "rot90": (lambda xp, a: xp.rot90(a, 3, (1, 2)) * xp.arange(24.0).reshape(2, 4, 3),
              [u(2, 3, 4)], None),
    "diff": (lambda xp, a: xp.diff(a, 2, axis=0), [u(4, 3)], None),
    "gradient": (lambda xp, a: xp.gradient(a, 0.5, axis=1), [u(3, 5)], None),
    "gradient coordinates": (lambda xp, a, x: xp.gradient(a, x, edge_order=2),
                             [u(6), increasing(6)], None),
    "append": (lambda xp, a, b: xp.append(a, b), [u(2, 2), u(3)], None),
    "cross": (lambda xp, a, b: xp.cross(a, b), [u(4, 3), u(4, 3)], None),
    "kron": (lambda xp, a, b: xp.kron(a, b), [u(2, 3), u(3, 2)], None),
    "sort": (lambda xp, a: xp.sort(a, axis=0) * xp.arange(12.0).reshape(3, 4), [u(3, 4)],
             None),
    "argsort": (lambda xp, a: a[xp.argsort(a)] * xp.arange(5.0), [u(5)], "argsort"),
    "partition": (lambda xp, a: xp.partition(a, 2)[2], [u(6)], None),
    "select": (lambda xp, a: xp.select([a > 0.3, a < -0.2], [a ** 2, 3 * a], 0.5), [u(8)],
               None),
    "linspace": (lambda xp, a, b: xp.linspace(a, b, 5), [u(), u(2)], None),
    "nan_to_num": (lambda xp, a: xp.nan_to_num(a * 2.0), [u(4)], None),
    "fabs": (lambda xp, a: xp.fabs(a), [u(4)], None),
    "fmax": (lambda xp, a, b: xp.fmax(a, b), [u(2, 3), u(3)], None),
    "fmin": (lambda xp, a, b: xp.fmin(a, b), [u(2, 3), u(3)], None),
    "logaddexp2": (lambda xp, a, b: xp.logaddexp2(a, b), [u(3), u(3)], None),
    "deg2rad": (lambda xp, a: xp.deg2rad(a * 90.0), [u(3)], None),
    "rad2deg": (lambda xp, a: xp.rad2deg(a), [u(3)], None),
    "degrees": (lambda xp, a: xp.degrees(a), [u(3)], None),
    "radians": (lambda xp, a: xp.radians(a), [u(3)], None),
    "sinc": (lambda xp, a: xp.sinc(a * 3.0), [u(5)], None),
    "interp": (lambda xp, x, xs, ys: xp.interp(x, xs, ys),
               [np.array([0.3, 1.1, 2.2]), increasing(5) - 0.1, u(5)], None),
    "trapezoid": (lambda xp, y, x: xp.trapezoid(y, x, axis=0), [u(5, 2), increasing(5)],
                  None),
    "polyval": (lambda xp, p, x: xp.polyval(p, x), [u(4), u(3)], None),
    "meshgrid": (lambda xp, a, b: xp.meshgrid(a, b)[0] * xp.meshgrid(a, b)[1], [u(3), u(2)],
                 None),
    "zeros_like": (lambda xp, a: xp.zeros_like(a) + a, [u(3)], None),
    # (empty_like's contents are whatever memory held: nan * 0.0 is nan. Its shape and
    # dtype are what it promises)
    "empty_like": (lambda xp, a: xp.ones_like(xp.empty_like(a)) * a, [u(3)], None),
    "copy": (lambda xp, a: xp.copy(a) * 2.0, [u(3)], "copy"),
    "rollaxis": (lambda xp, a: xp.rollaxis(a, 2) * xp.arange(24.0).reshape(4, 2, 3),
                 [u(2, 3, 4)], None),
    "minimum.accumulate": (lambda xp, a: xp.minimum.accumulate(a, axis=1), [u(2, 5)], None),
    "maximum.accumulate": (lambda xp, a: xp.maximum.accumulate(a), [u(6)], None),
    "add.accumulate": (lambda xp, a: xp.add.accumulate(a), [u(4)], None),
    "add.reduce": (lambda xp, a: xp.add.reduce(a, axis=1), [u(3, 4)], None),
    "multiply.reduce": (lambda xp, a: xp.multiply.reduce(a), [u(4)], None),
    "multiply.outer": (lambda xp, a, b: xp.multiply.outer(a, b), [u(3), u(2, 2)], None),
    "svd values": (lambda xp, a: xp.linalg.svd(a, compute_uv=False), [u(4, 3)], None),
    "svd thin": (lambda xp, a: _usv(xp.linalg.svd(a, full_matrices=False)), [u(3, 4)],
                 None),
    "svd full": (lambda xp, a: _usv(xp.linalg.svd(a)), [u(3, 3)], None),
    "pinv": (lambda xp, a: xp.linalg.pinv(a), [u(4, 3)], None),
    "lstsq": (lambda xp, a, b: xp.linalg.lstsq(a, b)[0], [u(5, 3), u(5, 2)], None),
    "qr": (lambda xp, a: xp.linalg.qr(a)[0] * xp.linalg.qr(a)[1][0, 0], [u(4, 3)], None),
    "qr r": (lambda xp, a: xp.linalg.qr(a, mode="r"), [u(3, 4)], None),
    "qr complete": (lambda xp, a: xp.linalg.qr(a, mode="complete")[1], [u(4, 2)], None),
    "matrix_power": (lambda xp, a: xp.linalg.matrix_power(a, 3), [u(3, 3)], None),
    "matrix_power negative": (lambda xp, a: xp.linalg.matrix_power(a + 3 * xp.eye(3), -2),
                              [u(3, 3)], None),
    "norm nuc": (lambda xp, a: xp.linalg.norm(a, "nuc"), [u(3, 4)], None),
    "norm 2": (lambda xp, a: xp.linalg.norm(a, 2), [u(4, 3)], None),
    "norm -2 batched": (lambda xp, a: xp.linalg.norm(a, -2, axis=(1, 2)), [u(2, 3, 3)], None),
}


def _usv(r):
    """Signs of singular vectors are arbitrary; u_i s_i v_i^T is not."""
    u_, s, vh = r
    return u_[:, :1] * vh[:1, :] * s[0] + u_[:, 1:2] * vh[1:2, :]


def _namespace(xp_fn):
    """autotape.numpy as the numpy-like module (xp.linalg, ufunc methods through np)."""
    return xp_fn


class _Anp:
    """autotape.numpy, with numpy's ufunc objects for the ufunc-method cases."""
    def __getattr__(self, name):
        value = getattr(anp, name)
        return getattr(np, name) if name in ("minimum", "maximum", "add", "multiply") \
            else value


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients(name):
    f, arrays, _ = CASES[name]
    want = joined(f(np, *arrays))
    got = joined(f(np, *[at.tensor(a, requires_grad=True) for a in arrays]))
    assert got.requires_grad
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-11, atol=1e-12)
    got_anp = joined(f(_Anp(), *[at.tensor(a) for a in arrays]))
    np.testing.assert_allclose(got_anp.numpy(), want, rtol=1e-11, atol=1e-12)
    plain = joined(f(np, *[at.tensor(a) for a in arrays]))     # no gradient: numpy's own
    np.testing.assert_allclose(np.asarray(plain), want, rtol=1e-11, atol=1e-12)
    check_grads(lambda *xs: joined(f(np, *xs)), *arrays, rtol=1e-5, atol=1e-6)


JAX_LACKS = {"gradient coordinates": "jnp.gradient has no edge_order"}


@pytest.mark.parametrize("name", sorted(n for n in CASES if "." not in n and CASES[n][1]))
def test_gradients_match_jax(name):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    f, arrays, _ = CASES[name]
    if name in JAX_LACKS:
        pytest.skip(JAX_LACKS[name])
    weights = rng.uniform(0.5, 1.5, np.shape(joined(f(np, *arrays))))
    argnums = tuple(range(len(arrays)))

    def loss(*xs):
        return jnp.sum(joined(f(jnp, *xs)) * weights)
    theirs = jax.grad(loss, argnums)(*arrays)
    xs = [at.tensor(a, requires_grad=True) for a in arrays]
    ours = at.grad((joined(f(np, *xs)) * weights).sum(), xs, allow_unused=True,
                   materialize_grads=True)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.numpy(), np.asarray(t), rtol=1e-9, atol=1e-11)


def test_methods_where_numpy_has_them():
    a = u(3, 4)
    x = at.tensor(a, requires_grad=True)
    np.testing.assert_array_equal(x.argsort(axis=0).numpy(), a.argsort(axis=0))
    np.testing.assert_array_equal(x.copy().numpy(), a)
    y = x * 1.0
    y.sort(axis=1)                       # in place, as ndarray.sort
    np.testing.assert_array_equal(y.numpy(), np.sort(a, axis=1))
    assert at.grad((y * np.arange(4.0)).sum(), x)[0].numpy()[np.arange(3)[:, None],
                                                             np.argsort(a, 1)].tolist() == \
        [[0.0, 1.0, 2.0, 3.0]] * 3
    z = x[0] * 1.0
    z.partition(1)
    assert z.numpy()[1] == np.partition(a[0], 1)[1]
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.sort()


def test_sinc_derivatives_at_zero_are_exact():
    x = at.tensor(0.0, requires_grad=True)
    g, = at.grad(np.sinc(x), x, create_graph=True)
    h, = at.grad(g, x)
    assert g.item() == 0.0 and float(h) == pytest.approx(-np.pi ** 2 / 3, rel=1e-12)


def test_fmax_fmin_nan_to_num_ignore_nans_like_numpy():
    a = np.array([1.0, np.nan, 2.0, np.nan])
    b = np.array([np.nan, 3.0, 1.0, np.nan])
    for fn in (np.fmax, np.fmin):
        np.testing.assert_array_equal(fn(at.tensor(a), at.tensor(b)).numpy(), fn(a, b))
    c = np.array([np.nan, np.inf, -np.inf, 2.0])
    x = at.tensor(c, requires_grad=True)
    y = np.nan_to_num(x, nan=-1.0, posinf=9.0)
    np.testing.assert_array_equal(y.numpy(), np.nan_to_num(c, nan=-1.0, posinf=9.0))
    assert at.grad(y.sum(), x)[0].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_interp_outside_and_at_the_ends():
    xs, ys = np.array([0.0, 1.0, 3.0]), np.array([1.0, -1.0, 2.0])
    q = np.array([-1.0, 0.0, 0.5, 3.0, 4.0])
    for kw in ({}, {"left": -7.0, "right": 9.0}):
        got = np.interp(at.tensor(q, requires_grad=True), xs, ys, **kw)
        np.testing.assert_array_equal(got.detach().numpy(), np.interp(q, xs, ys, **kw))


def test_svd_full_matrices_of_a_non_square_matrix_warns_when_differentiated():
    a = u(4, 2)
    r = anp.linalg.svd(at.tensor(a))
    assert r.U.shape == (4, 4) and r.Vh.shape == (2, 2)
    np.testing.assert_allclose((r.U[:, :2] * r.S) @ r.Vh, a, atol=1e-13)
    with pytest.warns(UserWarning, match="full_matrices=False"):
        np.linalg.svd(at.tensor(a, requires_grad=True))


def test_svd_singular_values_have_a_gradient_at_repeated_and_zero_ones():
    a = np.diag([2.0, 2.0, 0.0])
    x = at.tensor(a, requires_grad=True)
    g, = at.grad(np.linalg.svd(x, compute_uv=False).sum(), x)   # nuclear norm: U Vh
    u_, _, vh = np.linalg.svd(a)
    np.testing.assert_allclose(g.numpy(), u_ @ vh, atol=1e-15)


def test_qr_matches_torch_at_a_triangular_matrix():
    torch = pytest.importorskip("torch")
    a = np.triu(u(3, 3))
    w = u(3, 3)
    for part in (0, 1):
        x = at.tensor(a, requires_grad=True)
        g, = at.grad((np.linalg.qr(x)[part] * w).sum(), x)
        t = torch.tensor(a, requires_grad=True)
        gt, = torch.autograd.grad((torch.linalg.qr(t)[part] * torch.tensor(w)).sum(), t)
        np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-10, atol=1e-12)


def test_pinv_and_lstsq_of_a_rank_deficient_matrix_match_torch():
    torch = pytest.importorskip("torch")
    a = np.outer(u(4), u(3))
    w = u(3, 4)
    x = at.tensor(a, requires_grad=True)
    g, = at.grad((np.linalg.pinv(x) * w).sum(), x)
    t = torch.tensor(a, requires_grad=True)
    gt, = torch.autograd.grad((torch.linalg.pinv(t) * torch.tensor(w)).sum(), t)
    np.testing.assert_allclose(np.linalg.pinv(x).numpy(), np.linalg.pinv(a), atol=1e-12)
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-8, atol=1e-10)
    r = anp.linalg.lstsq(at.tensor(a), at.tensor(u(4)))
    assert r.rank == 1 and r.residuals.shape == (0,)


def test_lstsq_values_and_residuals_like_numpy():
    a, b = u(5, 3), u(5)
    r, want = anp.linalg.lstsq(at.tensor(a), at.tensor(b)), np.linalg.lstsq(a, b)
    np.testing.assert_allclose(r.x.numpy(), want[0], rtol=1e-12)
    np.testing.assert_allclose(r.residuals.numpy(), want[1], rtol=1e-12)
    assert r.rank == want[2]
    np.testing.assert_allclose(r.s.numpy(), want[3], rtol=1e-12)
    check_grads(lambda a_, b_: np.linalg.lstsq(a_, b_)[1], a, b)


def test_predicates_return_plain_numpy():
    x = at.tensor([1.0, np.inf, np.nan], requires_grad=True)
    for fn in (np.isfinite, np.isnan, np.isinf):
        r = fn(x)
        assert type(r) is np.ndarray and r.dtype == bool
        np.testing.assert_array_equal(r, fn(np.array([1.0, np.inf, np.nan])))
        assert type(getattr(anp, fn.__name__)(x)) is np.ndarray
    y = at.tensor([1.0, 2.0], requires_grad=True)
    assert np.allclose(y, [1.0, 2.0]) is True
    assert np.array_equal(y, y) is True
    assert type(np.isclose(y, 1.0)) is np.ndarray


def test_tensors_without_grad_pass_through_other_numpy_functions():
    x = at.tensor([3.0, 1.0, 2.0], requires_grad=True)
    g, = at.grad((x ** 2).sum(), x)
    assert np.allclose(g, [6.0, 2.0, 4.0])
    assert np.median(g) == 4.0 and np.percentile(g, 100) == 6.0
    assert np.searchsorted(at.tensor([1.0, 2.0]), 1.5) == 1
    assert np.histogram(g, bins=2)[0].tolist() == [1, 2]
    with pytest.raises(TypeError, match="numpy.percentile on Tensors that require grad"):
        np.percentile(x, 50)
    assert at.grad(np.median(x), x)[0].tolist() == [0.0, 0.0, 1.0]   # (recorded)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires"):
        np.histogram([x, x])          # (a list: numpy converts it, and the Tensor refuses)
    assert type(np.atleast_1d(g)) is np.ndarray and type(np.hstack([g, g])) is np.ndarray


def test_scipy_optimize_with_value_and_grad_and_compiled():
    optimize = pytest.importorskip("scipy.optimize")
    import autotape.func as F

    def rosen(x):
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
    x0 = np.array([-1.2, 1.0, 0.8])
    for fun in (F.value_and_grad(rosen), at.compile(rosen, x0).value_and_grad):
        r = optimize.minimize(fun, x0, jac=True, method="BFGS")
        assert r.success and np.allclose(r.x, 1.0, atol=1e-5)
    r = optimize.minimize(lambda x: float(rosen(at.tensor(x))), x0,
                          jac=lambda x: F.grad(rosen)(x), method="L-BFGS-B")
    assert np.allclose(r.x, 1.0, atol=1e-4)


def test_second_derivatives_through_a_zero_singular_value_of_a_square_matrix():
    """pinv(X^T X) has a zero singular value: the SVD rule skips the terms that vanish
    for square U and Vh (rounding over the tiny value made them O(1) in the second
    derivative)."""
    from fd import check_second_order
    x = u(5, 6)
    check_grads(lambda a: np.linalg.pinv(a.T @ a), x)
    check_second_order(lambda a: np.linalg.pinv(a.T @ a), x)
    check_second_order(lambda a: (lambda r: (r.U[:, :5] * r.S[:5]) @ r.Vh[:5])(
        np.linalg.svd(a.T @ a)), x)
    a, b = u(4, 2), u(2, 3)                          # rank 2, not square, staying so
    check_second_order(lambda a_, b_: np.linalg.pinv(a_ @ b_), a, b)
    check_second_order(lambda a_, b_: np.linalg.pinv((a_ @ b_).T), a, b)
