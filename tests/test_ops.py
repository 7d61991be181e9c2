"""Every op's VJP against central finite differences, on 0-d, n-d and broadcast shapes."""
import numpy as np
import pytest

import autotape as at
from autotape.kernels.elementwise import _pow_partial, power
from fd import check_grads

rng = np.random.default_rng(1234)


def away_from_zero(shape, low=0.3, high=2.0):
    """Values bounded away from 0 with random signs (no kinks for abs/relu)."""
    return rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


def positive(shape):
    return rng.uniform(0.5, 2.0, shape)


def inside_unit(shape):
    return rng.uniform(-0.8, 0.8, shape)


def off_integers(shape):
    """Away from integers and halves: floor, ceil, round and sign are flat here."""
    return rng.integers(-3, 3, shape) + rng.uniform(0.1, 0.4, shape)


def quotient_dividend(shape):
    return rng.uniform(4.1, 4.9, shape) * rng.choice([-1.0, 1.0], shape)


def quotient_divisor(shape):
    return rng.uniform(1.7, 1.95, shape)        # |x / y| in (2.1, 2.9): no jumps


UNARY = {
    "negative": (at.negative, away_from_zero),
    "abs": (at.abs, away_from_zero),
    "exp": (at.exp, away_from_zero),
    "log": (at.log, positive),
    "sqrt": (at.sqrt, positive),
    "sin": (at.sin, away_from_zero),
    "cos": (at.cos, away_from_zero),
    "tan": (lambda x: at.tan(x * 0.5), away_from_zero),
    "tanh": (at.tanh, away_from_zero),
    "sigmoid": (at.sigmoid, away_from_zero),
    "relu": (at.relu, away_from_zero),
    "log1p": (at.log1p, lambda s: rng.uniform(-0.5, 2.0, s)),
    "expm1": (at.expm1, away_from_zero),
    "log2": (at.log2, positive),
    "log10": (at.log10, positive),
    "exp2": (at.exp2, away_from_zero),
    "square": (at.square, away_from_zero),
    "reciprocal": (at.reciprocal, away_from_zero),
    "sinh": (at.sinh, away_from_zero),
    "cosh": (at.cosh, away_from_zero),
    "arcsin": (at.arcsin, inside_unit),
    "arccos": (at.arccos, inside_unit),
    "arctan": (at.arctan, away_from_zero),
    "arcsinh": (at.arcsinh, away_from_zero),
    "arccosh": (at.arccosh, lambda s: rng.uniform(1.2, 3.0, s)),
    "arctanh": (at.arctanh, inside_unit),
    "softplus": (at.softplus, lambda s: away_from_zero(s) * 3),
    "erf": (at.erf, away_from_zero),
    "sign": (at.sign, off_integers),
    "floor": (at.floor, off_integers),
    "ceil": (at.ceil, off_integers),
    "round": (at.round, off_integers),
}

BINARY = {
    "add": (lambda x, y: x + y, away_from_zero, away_from_zero),
    "sub": (lambda x, y: x - y, away_from_zero, away_from_zero),
    "mul": (lambda x, y: x * y, away_from_zero, away_from_zero),
    "div": (lambda x, y: x / y, away_from_zero, away_from_zero),
    "pow": (lambda x, y: x ** y, positive, away_from_zero),
    "maximum": (at.maximum, away_from_zero, away_from_zero),
    "minimum": (at.minimum, away_from_zero, away_from_zero),
    "arctan2": (at.arctan2, away_from_zero, away_from_zero),
    "hypot": (at.hypot, away_from_zero, away_from_zero),
    "logaddexp": (at.logaddexp, away_from_zero, away_from_zero),
    "fmod": (at.fmod, quotient_dividend, quotient_divisor),
    "mod": (at.mod, quotient_dividend, quotient_divisor),
}

SHAPES = [(), (1,), (4,), (2, 3), (2, 1, 3)]
BROADCAST = [((), (3,)), ((2, 3), ()), ((2, 3), (3,)), ((2, 1, 3), (4, 1)),
             ((1,), (2, 2)), ((3, 1), (1, 4))]


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary(name, shape):
    fn, gen = UNARY[name]
    check_grads(fn, gen(shape))


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [(s, s) for s in SHAPES] + BROADCAST, ids=str)
def test_binary(name, shapes):
    fn, gx, gy = BINARY[name]
    check_grads(fn, gx(shapes[0]), gy(shapes[1]))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_python_numbers(name):
    fn, gx, _ = BINARY[name]
    check_grads(lambda x: fn(x, 1.7), gx((3,)))
    check_grads(lambda x: fn(1.7, x), gx((3,)) if name != "pow" else away_from_zero((3,)))
    check_grads(lambda x: fn(x, 1.7), gx(()))


def test_where():
    c = np.array([[True, False, True]])
    check_grads(lambda x, y: at.where(c, x, y), away_from_zero((2, 3)),
                away_from_zero((3,)))
    check_grads(lambda x: at.where(x > 0, x * x, -x), away_from_zero((5,)))
    check_grads(lambda x: at.where(np.array(True), x, 2.0), away_from_zero(()))


@pytest.mark.parametrize("reduce", [at.sum, at.mean])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (None, True), (0, False),
                                            (1, True), (-1, False), ((0, 2), False),
                                            ((0, 2), True), ((), False)])
def test_reductions(reduce, axis, keepdims):
    check_grads(lambda x: reduce(x, axis=axis, keepdims=keepdims),
                away_from_zero((2, 3, 4)))


def test_reductions_of_0d_and_empty():
    check_grads(lambda x: x.sum(), away_from_zero(()))
    check_grads(lambda x: x.mean(), away_from_zero(()))
    x = at.zeros(0, 3, requires_grad=True)
    g, = at.grad(x.sum(), x)
    assert g.shape == (0, 3)


def test_matmul_all_ranks():
    for sa, sb in [((3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)),
                   ((1, 1), (1, 1))]:
        check_grads(lambda x, y: x @ y, away_from_zero(sa), away_from_zero(sb))


def test_matmul_with_constant_operand():
    w = rng.normal(size=(3, 2))
    check_grads(lambda x: x @ w, away_from_zero((4, 3)))
    check_grads(lambda x: w.T @ x, away_from_zero((3,)))


@pytest.mark.parametrize("shape, new", [((2, 3), (3, 2)), ((2, 3), (-1,)), ((), (1, 1)),
                                        ((6,), (2, 1, 3))])
def test_reshape(shape, new):
    check_grads(lambda x: x.reshape(new), away_from_zero(shape))


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1)])
def test_transpose(axes):
    check_grads(lambda x: x.transpose(axes), away_from_zero((2, 3, 4)))


def test_T_of_matrix():
    check_grads(lambda x: x.T @ x, away_from_zero((3, 2)))


@pytest.mark.parametrize("index", [0, -1, (1, 2), slice(1, None), slice(None, None, -1),
                                   (Ellipsis, 0), (slice(0, 2), None, slice(None, None, 2)),
                                   (0, Ellipsis, slice(1, 3)), (Ellipsis,)], ids=str)
def test_basic_indexing(index):
    check_grads(lambda x: x[index], away_from_zero((3, 4, 5)))


def test_indexing_twice_accumulates():
    check_grads(lambda x: x[0] * x[1] + x[0] ** 2, away_from_zero((2, 3)))


def test_broadcast_to():
    check_grads(lambda x: at.broadcast_to(x, (4, 2, 3)), away_from_zero((2, 1)))


def test_index_assignment():
    def f(x, v):
        y = at.zeros(3, 4)
        y[0] = x[0] * 2
        y[1:, 1:3] = v
        y[2, 3] = x[1, 3] ** 2
        return y
    check_grads(f, away_from_zero((2, 4)), away_from_zero((2, 1)))


def test_index_assignment_into_a_result():
    def f(x):
        y = x * 1.0
        y[0] = y[1] * 3
        return y
    check_grads(f, away_from_zero((3, 2)))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_stack(axis):
    check_grads(lambda a, b: at.stack([a, b * 2, a * b], axis=axis),
                away_from_zero((2, 3)), away_from_zero((2, 3)))


def test_stack_scalars_and_constants():
    check_grads(lambda a, b: at.stack([a, 3.0, a * b, at.tensor(2.0)]), away_from_zero(()),
                away_from_zero(()))


@pytest.mark.parametrize("axis", [0, 1])
def test_concatenate(axis):
    shape_b = (1, 3) if axis == 0 else (2, 4)
    check_grads(lambda a, b: at.concatenate([a, b, a], axis=axis), away_from_zero((2, 3)),
                away_from_zero(shape_b))


def test_in_place_arithmetic_on_results():
    def f(x):
        y = x * 1.0
        y += x
        y *= x
        y -= 1.0
        y /= x + 3
        return y
    check_grads(f, away_from_zero((4,)))


def test_in_place_on_constant_with_requiring_operand():
    def f(x):
        y = at.zeros(2)
        y += x
        y *= x
        return y
    check_grads(f, np.array([1.5, -2.0]))
    x = at.tensor([1.5, -2.0], requires_grad=True)
    assert at.grad(f(x).sum(), x)[0].tolist() == [3.0, -4.0]     # d(x*x)/dx


def test_float32_values_and_gradients():
    x = at.tensor([0.1, 0.2, 0.3], dtype="float32", requires_grad=True)
    y = at.sin(x) * x + x ** 2
    assert y.dtype == np.float32
    np.testing.assert_array_equal(
        y.numpy(), (np.sin(x.numpy()) * x.numpy() + x.numpy() ** 2).astype(np.float32))
    g, = at.grad(y.sum(), x)
    assert g.dtype == np.float32
    xv = x.numpy().astype(np.float64)
    np.testing.assert_allclose(g.numpy(), np.cos(xv) * xv + np.sin(xv) + 2 * xv, rtol=1e-6)


def test_float32_scalar_path_rounds_each_op():
    x = at.tensor(0.1, dtype="float32", requires_grad=True)
    y = x * 3.0 + 1.0
    assert y.dtype == np.float32
    assert y.item() == float(np.float32(np.float32(0.1) * np.float32(3.0)) + np.float32(1.0))


@pytest.fixture(params=["blas", "loops"])
def matmul_path(request, monkeypatch):
    from autotape import executor
    if request.param == "loops":
        monkeypatch.setattr(executor.cpu, "dgemm", 0)
    elif executor.cpu.dgemm == 0:
        pytest.skip("no ILP64 CBLAS in this numpy build")
    return request.param


@pytest.mark.parametrize("sa, sb", [((40, 30), (30, 20)), ((30,), (30, 50)),
                                    ((50, 30), (30,)), ((200,), (200,))])
def test_large_matmul_gradients_match_numpy(matmul_path, sa, sb):
    a0, b0 = rng.normal(size=sa), rng.normal(size=sb)
    a, b = at.tensor(a0, requires_grad=True), at.tensor(b0, requires_grad=True)
    out = a @ b
    w = rng.normal(size=out.shape)
    ga, gb = at.grad((out * at.tensor(w)).sum() + (a * a).sum(), [a, b])
    A = a0.reshape(-1, sa[-1]) if len(sa) == 2 else a0.reshape(1, -1)
    B = b0 if len(sb) == 2 else b0.reshape(-1, 1)
    W = w.reshape(A.shape[0], B.shape[1])
    np.testing.assert_allclose(ga.numpy(), (W @ B.T).reshape(sa) + 2 * a0, rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(gb.numpy(), (A.T @ W).reshape(sb), rtol=1e-12, atol=1e-12)


def test_large_matmul_operand_used_twice(matmul_path):
    # its own draw (the module's rng gave another matrix under ``-k``, with an entry
    # near zero that rtol alone could not pass: the loops and BLAS sum in other orders)
    w0 = np.random.default_rng(30).normal(size=(30, 30))
    w = at.tensor(w0, requires_grad=True)
    g, = at.grad((w @ w).sum(), w)              # both BLAS calls add into one adjoint
    ones = np.ones((30, 30))
    np.testing.assert_allclose(g.numpy(), ones @ w0.T + w0.T @ ones, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_match_numpy(name):
    fn, gen = UNARY[name]
    x = gen((5,))
    want = {"negative": np.negative, "relu": lambda v: np.maximum(v, 0),
            "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "softplus": lambda v: np.log1p(np.exp(v)),
            "erf": np.vectorize(__import__("math").erf),
            "tan": lambda v: np.tan(v * 0.5)}.get(name) or getattr(np, name)
    np.testing.assert_allclose(fn(at.tensor(x)).numpy(), want(x), rtol=1e-14)
    for v in x[:2]:                                   # the 0-d path (Python floats)
        np.testing.assert_allclose(fn(at.tensor(v)).item(), want(v), rtol=1e-14)


def test_special_values_follow_numpy():
    with np.errstate(all="ignore"):
        for name, v in [("log1p", -1.0), ("log2", 0.0), ("log10", -1.0), ("arcsin", 2.0),
                        ("arccosh", 0.5), ("arctanh", 1.0), ("reciprocal", 0.0),
                        ("exp2", 2000.0), ("cosh", 1000.0)]:
            got = getattr(at, name)(at.tensor(v)).item()
            want = float(getattr(np, name)(v))
            assert got == want or (np.isnan(got) and np.isnan(want)), name
        assert np.isnan(at.mod(at.tensor(1.0), 0.0).item())
        assert at.round(at.tensor(2.5)).item() == 2.0 and at.sign(at.tensor(-0.0)).item() == 0


def test_clip_follows_torch_at_the_bounds():
    x = at.tensor([0.0, 1.0, 1.5, 2.0, 3.0], requires_grad=True)
    g, = at.grad(at.clip(x, 1.0, 2.0).sum(), x)
    assert g.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    lo = at.tensor(0.5, requires_grad=True)
    y = x.clip(lo, None)
    assert y.tolist() == [0.5, 1.0, 1.5, 2.0, 3.0]
    assert at.grad(y.sum(), lo)[0].item() == 1.0
    np.testing.assert_array_equal(at.clip(at.tensor([1.0, 5.0]), 3.0, 2.0).numpy(),
                                  np.clip([1.0, 5.0], 3.0, 2.0))


BATCHED = [((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
           ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (2, 4, 2))]


@pytest.mark.parametrize("sa, sb", BATCHED, ids=str)
def test_batched_matmul(sa, sb):
    check_grads(lambda x, y: x @ y, away_from_zero(sa), away_from_zero(sb))


def sum_to(arr, shape):
    """Sum a broadcast array back to ``shape`` (the reference for batched gradients)."""
    lead = arr.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(shape)
                                      if n == 1 and arr.shape[lead + d] != 1)
    return arr.sum(axis=axes, keepdims=True).reshape(shape)


@pytest.mark.parametrize("sa, sb", [((3, 20, 30), (30, 25)), ((2, 1, 40, 30), (3, 30, 20))],
                         ids=str)
def test_large_batched_matmul_matches_numpy(matmul_path, sa, sb):
    a0, b0 = rng.normal(size=sa), rng.normal(size=sb)
    a, b = at.tensor(a0, requires_grad=True), at.tensor(b0, requires_grad=True)
    out = a @ b
    w = rng.normal(size=out.shape)
    ga, gb = at.grad((out * at.tensor(w)).sum(), [a, b])
    want_a = sum_to(np.matmul(w, np.swapaxes(b0, -1, -2)), sa)
    want_b = sum_to(np.matmul(np.swapaxes(a0, -1, -2), w), sb)
    np.testing.assert_allclose(ga.numpy(), want_a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb.numpy(), want_b, rtol=1e-12, atol=1e-12)


def test_binary_functions_of_plain_numbers():
    """at.hypot(3.0, 4.0) and friends with no Tensor argument compute plainly."""
    assert at.hypot(3.0, 4.0).item() == 5.0
    assert at.maximum(np.float64(1.0), np.float64(2.0)).item() == 2.0
    assert not at.arctan2(1.0, 1.0).requires_grad


def test_mod_operator_and_power_conventions_to_second_order():
    x = at.tensor([5.5, -3.5], requires_grad=True)
    assert (x % 2.0).tolist() == [1.5, 0.5] and (7.0 % at.tensor(4.0)).item() == 3.0
    assert at.grad((x % 2.0).sum(), x)[0].tolist() == [1.0, 1.0]
    import autotape.func as F
    assert F.grad(F.grad(lambda t: t ** 0.0))(0.0).item() == 0.0        # x**0 at 0: 0
    assert F.grad(F.grad(lambda y: at.power(0.0, y)))(0.5).item() == 0.0  # 0**y: 0


@pytest.mark.parametrize("name", ["floor", "ceil", "round"])
def test_integral_rounding_keeps_the_sign_of_zero_as_numpy(name):
    # the 0-d path (Python's math) returned +0.0 where numpy's float gives -0.0
    for v in (-0.5, -0.4, -0.0, 0.0, 0.4, -1.5, 2.5):
        got = getattr(at, name)(at.tensor(v)).item()
        want = float(getattr(np, name)(v))
        assert got == want and np.signbit(got) == np.signbit(want), (v, got, want)


def test_a_powers_partial_where_pow_is_not_needed_again():
    # d x ** y / dx = y * (z / x) from the value z where y is not a small integer
    # (no second pow), and y * x ** (y - 1) where x is 0 or z is not finite
    x = at.tensor([0.0, 4.0, 2.25, -1.0, np.inf, 1e-300], requires_grad=True)
    with np.errstate(all="ignore"):
        g, = at.grad((x ** 1.5).sum(), x)
        want = np.array([0.0, 3.0, 2.25, np.nan, np.inf, 1.5 * 1e-150])
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-15)
    h, = at.grad((x[1:3] ** 0.5).sum(), x)
    np.testing.assert_array_equal(h.numpy()[1:3], 0.5 * (np.sqrt([4.0, 2.25]) / [4.0, 2.25]))


def test_a_square_and_a_cube_have_powers_partials_bit_for_bit():
    """The partials of x ** 2 and x ** 3 are written out (2 x, 3 (x x)) where the
    repeated squaring's loop kept loop bodies scalar: the same bits as ``power``'s, at
    signed zeros, infinities, nan, subnormals and random doubles."""
    rng_ = np.random.default_rng(5)
    xs = np.concatenate([[0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1e-310, 1e154, -3.0],
                         rng_.normal(size=200) * 10.0 ** rng_.integers(-5, 5, 200)])
    with np.errstate(all="ignore"):
        for x in xs:
            for y in (2.0, 3.0):
                got = _pow_partial(x, y, x ** y)
                want = y * power(x, y - 1.0)
                assert np.array_equal(np.float64(got), np.float64(want), equal_nan=True) and \
                    np.signbit(got) == np.signbit(want), (x, y)
    x = at.tensor(xs[9:], requires_grad=True)
    g, = at.grad((x ** 3).sum() + (x ** 2).sum(), x)
    np.testing.assert_array_equal(g.numpy(), 3.0 * (xs[9:] * xs[9:]) + 2.0 * xs[9:])
