"""at.compile: a recording replayed at new arguments equals recording afresh there (values,
gradients, Jacobians, Hessians), for every op family; guards send a call whose Python
decisions would differ back to be recorded; errors are clear."""
import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotape as at
from test_batched import FAMILIES
from test_ops import BINARY, UNARY

rng = np.random.default_rng(11)


def nearby(a, r=rng):
    """A new point near a (1% away: the same signs, masks and branches)."""
    return a * (1.0 + 0.01 * r.uniform(-1.0, 1.0, np.shape(a)))


def eager_jacobian(f, arrays, k):
    return at.func.jacrev(f, argnums=k)(*[at.tensor(a) for a in arrays]).numpy()


def check_compiled(f, arrays, hessian=True):
    """Replays at a second point give what recording there gives."""
    cf = at.compile(f, *arrays)
    new = [nearby(a) for a in arrays]
    tol = dict(rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(cf(*new).numpy(), f(*[at.tensor(a) for a in new]).numpy(),
                               **tol)
    jac = cf.jacobian(*new)
    jac = jac if isinstance(jac, tuple) else (jac,)
    for k, j in enumerate(jac):
        np.testing.assert_allclose(j.numpy(), eager_jacobian(f, new, k), **tol)
    if hessian:
        shape = f(*[at.tensor(a) for a in arrays]).shape
        w = np.random.default_rng(0).uniform(0.5, 1.5, shape)
        scalar = at.compile(lambda *xs: (f(*xs) * w).sum(), *arrays)
        h = scalar.hessian(*new)
        nums = 0 if len(arrays) == 1 else tuple(range(len(arrays)))
        expected = at.func.hessian(lambda *xs: (f(*xs) * w).sum(), argnums=nums)(*new)
        if len(arrays) == 1:
            h, expected = ((h,),), ((expected,),)
        for hr, er in zip(h, expected):
            for a, b in zip(hr, er):
                np.testing.assert_allclose(a.numpy(), b.numpy(), **tol)
        g = scalar.grad(*new)
        g = g if isinstance(g, tuple) else (g,)
        eg = at.func.grad(lambda *xs: (f(*xs) * w).sum(), argnums=nums)(*new)
        eg = eg if isinstance(eg, tuple) else (eg,)
        for a, b in zip(g, eg):
            np.testing.assert_allclose(a.numpy(), b.numpy(), **tol)
    return cf


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_replay(name):
    f, domain = UNARY[name]
    check_compiled(f, [domain((3, 4))])
    check_compiled(f, [domain(())])


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_replay(name):
    f, dx, dy = BINARY[name]
    check_compiled(f, [dx((2, 3)), dy((3,))])
    check_compiled(f, [dx((2, 1, 3)), dy((4, 1))])          # index-map broadcasting
    check_compiled(f, [dx(()), dy(())])


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_op_family_replays(name):
    f, shapes = FAMILIES[name]
    arrays = [rng.uniform(0.3, 1.5, s) * rng.choice([-1.0, 1.0], s) for s in shapes]
    check_compiled(f, arrays)


MORE = {
    "min prod cumprod": (lambda x: at.min(x, axis=1) * at.prod(x) + at.cumprod(x, axis=1)[:, -1],
                         [(2, 3)]),
    "mean keepdims": (lambda x: x / at.mean(x * x, axis=0, keepdims=True), [(3, 2)]),
    "broadcast_to transpose": (lambda x: at.broadcast_to(x, (2, 3)).T * x[0], [(3,)]),
    "stack take": (lambda x, y: at.stack([x, y]).reshape(-1)[np.array([5, 0, 3])], [(3,), (3,)]),
    "clip": (lambda x: at.clip(x, -0.5, 0.7) * x, [(5,)]),
    "logsumexp": (lambda x: at.logsumexp(x, axis=0) + x[0], [(3, 2)]),
    "inv det": (lambda a: at.linalg.inv(a) * at.linalg.det(a), [(3, 3)]),
    "solve": (lambda a, b: at.linalg.solve(a + 3.0 * at.eye(3), b), [(3, 3), (3,)]),
    "slogdet": (lambda a: at.linalg.slogdet(a + 3.0 * at.eye(2)).logabsdet, [(2, 2)]),
    "cholesky": (lambda a: at.linalg.cholesky(a @ a.T + at.eye(3)), [(3, 3)]),
    "eigh": (lambda a: at.linalg.eigvalsh(a + a.T), [(3, 3)]),
    "svd": (lambda a: at.linalg.svd(a, compute_uv=False) * at.linalg.svd(a[:2], False).U[0, 0],
            [(3, 3)]),
    "einsum": (lambda a, b: at.einsum("ij,jk->ik", a, b), [(2, 3), (3, 2)]),
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_functions_replay(name):
    f, shapes = MORE[name]
    arrays = [rng.uniform(0.3, 1.5, s) * rng.choice([-1.0, 1.0], s) for s in shapes]
    check_compiled(f, arrays)


SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.integers(0, 2 ** 31))
def test_random_programs_replay(seed):
    from programs import OPS
    r = np.random.default_rng(seed)
    steps = [(r.integers(len(OPS)), r.integers(0, 100, 2)) for _ in range(7)]

    def f(a, b):
        pool = [a, b]
        for op, picks in steps:
            name, arity, fn = OPS[op]
            pool.append(fn(at, *[pool[p % len(pool)] for p in picks[:arity]]))
        return pool[-1] + 0.0 * a * b
    check_compiled(f, [r.uniform(-1, 1, (2, 3)), r.uniform(-1, 1, 3)])


# ---- the benchmark functions, and recording once ---------------------------------------

def rosenbrock(x):
    a, b = x[0::2], x[1::2]
    return (100.0 * (b - a ** 2) ** 2 + (1.0 - a) ** 2).sum()


def test_rosenbrock_hessian_and_jacobian_replay_without_recording_again():
    x0 = rng.uniform(-1.5, 1.5, 100)
    cf = at.compile(rosenbrock, x0)
    for _ in range(3):
        x = rng.uniform(-1.5, 1.5, 100)
        np.testing.assert_allclose(cf.hessian(x).numpy(),
                                   at.func.hessian(rosenbrock)(x).numpy(), rtol=1e-13)
        np.testing.assert_allclose(cf.grad(x).numpy(), at.func.grad(rosenbrock)(x).numpy(),
                                   rtol=1e-13)
    assert cf.traces == 2                    # f once; f and its gradient once
    A = rng.standard_normal((50, 50))
    cj = at.compile(lambda x: at.tanh(A @ x) * x, rng.standard_normal(50))
    for _ in range(3):
        x = rng.standard_normal(50)
        np.testing.assert_allclose(cj.jacobian(x).numpy(),
                                   at.func.jacrev(lambda x: at.tanh(A @ x) * x)(x).numpy(),
                                   rtol=1e-12, atol=1e-14)
    assert cj.traces == 1


def test_outputs_structure_leaf_and_constant_outputs():
    cf = at.compile(lambda x, y: {"s": (x * y).sum(), "x": x, "c": np.ones(2)},
                    np.ones(2), 3.0)
    out = cf(np.array([1.0, 2.0]), 4.0)
    assert set(out) == {"s", "x", "c"}
    assert out["s"].item() == 12.0 and out["x"].tolist() == [1.0, 2.0]
    assert out["c"].tolist() == [1.0, 1.0]
    j = cf.jacobian(np.array([1.0, 2.0]), 4.0)
    np.testing.assert_array_equal(j["x"][0].numpy(), np.eye(2))
    np.testing.assert_array_equal(j["c"][1].numpy(), np.zeros(2))
    assert j["s"][1].item() == 3.0
    np.testing.assert_array_equal(j["s"][0].numpy(), [4.0, 4.0])


def test_unused_argument_has_zero_derivatives():
    cf = at.compile(lambda x, y: (x ** 2).sum(), np.ones(2), np.ones(3))
    gx, gy = cf.grad(np.array([1.0, 2.0]), np.ones(3))
    assert gx.tolist() == [2.0, 4.0] and gy.tolist() == [0.0, 0.0, 0.0]
    h = cf.hessian(np.ones(2), np.ones(3))
    assert h[1][1].shape == (3, 3) and not h[1][1].numpy().any()
    np.testing.assert_array_equal(h[0][0].numpy(), 2 * np.eye(2))


def test_a_new_shape_records_once_and_is_kept():
    cf = at.compile(lambda x: (x ** 3).sum(), np.ones(2))
    assert cf.grad(np.ones(3) * 2).tolist() == [12.0] * 3
    assert cf.grad(np.ones(2)).tolist() == [3.0] * 2
    assert cf.grad(np.ones(3)).tolist() == [3.0] * 3
    assert cf.traces == 2


def test_arguments_are_copied_in_and_results_are_the_callers():
    cf = at.compile(lambda x: x * 2.0, np.ones(2))
    x = np.array([1.0, 2.0])
    first = cf(x)
    x[0] = 10.0
    second = cf(x)
    assert first.tolist() == [2.0, 4.0] and second.tolist() == [20.0, 4.0]


# ---- guards: Python decisions taken while recording ------------------------------------

def test_conditions_are_data_not_guards():
    """where's condition is a recorded comparison: points that flip it replay."""
    cf = at.compile(lambda x: at.where(x > 0, x, -2.0 * x).sum(), np.array([1.0, -1.0]))
    assert cf(np.array([2.0, -3.0])).item() == 8.0 and cf.traces == 1
    assert cf(np.array([-2.0, 3.0])).item() == 7.0 and cf.traces == 1
    assert cf.grad(np.array([-2.0, 3.0])).tolist() == [-2.0, 1.0]
    assert cf.grad(np.array([2.0, -3.0])).tolist() == [1.0, -2.0] and cf.traces == 1


@pytest.mark.parametrize("name, f", [
    ("where", lambda x: at.where(x > 0.5, x * x, 3.0 * x).sum()),
    ("where both constant", lambda x: (at.where(x < 0, 1.0, 2.0) * x).sum()),
    ("clip", lambda x: (at.clip(x, -0.5, 0.5) ** 2).sum()),
    ("clip one side", lambda x: (at.clip(x * 2, None, 0.3) * x).sum()),
    ("maximum", lambda x: (at.maximum(x, 0.2) * x).sum()),
    ("minimum", lambda x: (at.minimum(x, x[::-1]) ** 3).sum()),
    ("abs", lambda x: (at.abs(x) ** 3).sum()),
    ("relu", lambda x: (at.relu(x) ** 3).sum()),
    ("sign", lambda x: (at.sign(x) * x ** 3).sum()),
    ("pow", lambda x: (at.abs(x) ** x).sum()),
    ("mod", lambda x: (at.mod(x * x, x + 3.0) * x).sum()),
    ("comparison chain", lambda x: at.where(x > 0, at.where(x > 1, x ** 3, x ** 2), -x).sum()),
    ("mask arithmetic", lambda x: (x ** 3 * (x > 0) + (x <= 0.5) * 2.0 * x).sum()),
    ("sliced mask", lambda x: at.where((x > 0.5)[::-1], x ** 2, 2.0 * x).sum()),
    ("broadcast mask", lambda x: at.where((x > 0)[:, None], at.stack([x, x ** 3]).T,
                                          0.0).sum()),
])
def test_flipping_conditions_records_once(name, f):
    """Value, gradient and Hessian at points on both sides of every condition: each
    is what a fresh recording at that point gives, from one recording per kind."""
    rng = np.random.default_rng(0)
    cf = at.compile(f, np.array([0.7, -0.4, 1.3]))
    for _ in range(6):
        x = rng.uniform(-2, 2, 3)
        fresh = at.compile(f, x)
        assert cf(x).item() == fresh(x).item()
        np.testing.assert_array_equal(cf.grad(x).numpy(), fresh.grad(x).numpy())
        np.testing.assert_array_equal(cf.hessian(x).numpy(), fresh.hessian(x).numpy())
    assert cf.traces == 2, name                # the value and the Hessian, once each


def test_a_comparison_read_from_python_is_still_a_guard():
    def f(x):
        positive = x.sum() > 0
        return x * 2.0 if positive.item() else x * 3.0
    cf = at.compile(f, np.ones(2))
    assert cf(np.array([-1.0, -2.0])).tolist() == [-3.0, -6.0] and cf.traces == 2
    def g(x):
        mask = x > 0
        return at.where(mask, x, 0.0) + (1.0 if bool(mask[0]) else 2.0)
    cg = at.compile(g, np.ones(2))
    assert cg(np.array([-1.0, 5.0])).tolist() == [2.0, 7.0] and cg.traces == 2


@pytest.mark.filterwarnings("ignore:at.compile. float")
def test_python_branch_on_a_value_is_guarded():
    def f(x):
        s = x.sum()
        return s * 2.0 if float(s) > 0 else s * 3.0
    cf = at.compile(f, np.ones(2))
    assert cf(np.array([1.0, 2.0])).item() == 6.0
    assert cf(np.array([-1.0, -2.0])).item() == -9.0
    assert cf.grad(np.array([-1.0, -2.0])).tolist() == [3.0, 3.0]


def test_second_derivative_masks_are_data():
    """abs's recorded derivative multiplies by a mask of recorded comparisons."""
    f = lambda x: (at.abs(x) ** 3).sum()            # noqa: E731
    cf = at.compile(f, np.array([1.0, -1.0]))
    h1 = cf.hessian(np.array([2.0, -1.0]))
    h2 = cf.hessian(np.array([2.0, -3.0]))          # same signs: no new recording
    assert cf.traces == 2
    h3 = cf.hessian(np.array([-2.0, 1.0]))          # signs flip: the masks are data
    assert cf.traces == 2
    for h, x in ((h1, [2.0, -1.0]), (h2, [2.0, -3.0]), (h3, [-2.0, 1.0])):
        np.testing.assert_allclose(h.numpy(), np.diag(6 * np.abs(x)))
    g = at.compile(lambda x: at.maximum(x, 0.5).sum(), np.array([1.0, 0.0]))
    assert g.grad(np.array([0.0, 1.0])).tolist() == [0.0, 1.0]


def test_argmax_index_is_guarded():
    cf = at.compile(lambda x: x[int(at.argmax(x))] * 2.0, np.array([1.0, 0.0]))
    assert cf(np.array([0.0, 5.0])).item() == 10.0
    assert cf.grad(np.array([0.0, 5.0])).tolist() == [0.0, 2.0]


def test_captured_values_are_read_at_every_call():
    scale = np.array([2.0])
    cf = at.compile(lambda x: x * scale, np.ones(1))
    scale[0] = 3.0                         # f records again (see below)
    assert cf(np.ones(1)).tolist() == [3.0]


# ---- errors ---------------------------------------------------------------------------

def test_errors():
    with pytest.raises(TypeError, match="expected a function"):
        at.compile(3.0, np.ones(2))
    with pytest.raises(TypeError, match="float64 or float32"):
        at.compile(lambda x: x, np.ones(2, np.float16))
    with pytest.raises(TypeError, match="lean program"):
        at.compile(lambda x: at.linalg.inv(x.reshape(2, 2)).sum(), np.eye(2, dtype=np.float32))
    with pytest.raises(TypeError, match="argument 0 must be"):
        at.compile(lambda x: x, "abc")
    with pytest.raises(TypeError, match="at least one argument"):
        at.compile(lambda: at.ones(2))
    cf = at.compile(lambda x: x * 2.0, np.ones(2))
    with pytest.raises(RuntimeError, match="single scalar"):
        cf.grad(np.ones(2))
    with pytest.raises(RuntimeError, match="single scalar"):
        cf.hessian(np.ones(2))

    def sweeps_itself(x):
        y = (x ** 2).sum()
        g, = at.grad(y, x)
        return g * x
    with pytest.raises(RuntimeError, match="create_graph"):
        at.compile(sweeps_itself, np.ones(2))
    with pytest.raises(TypeError, match="dtype"):
        at.compile(lambda x: x.astype(np.float32), np.ones(2))
    with pytest.raises(TypeError, match="float Tensors"):
        at.compile(lambda x: "no", np.ones(2))


def test_recording_does_not_disturb_open_recordings():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3.0
    cf = at.compile(lambda v: v ** 2, np.ones(2))
    cf(np.ones(2))
    (y * y).sum().backward()
    assert x.grad.tolist() == [18.0, 36.0]
    assert cf(np.full(2, 3.0)).tolist() == [9.0, 9.0]     # and the recording still replays


@pytest.mark.filterwarnings("ignore:at.compile. float")
def test_recording_again_and_again_warns_once_naming_the_line():
    def f(x):
        return x * 2.0 if float(x.sum()) > 0 else x * 3.0     # the guard's line
    cf = at.compile(f, np.ones(2))
    with pytest.warns(RuntimeWarning) as caught:
        for k in range(20):
            cf(np.full(2, (-1.0) ** k))
    messages = [str(w.message) for w in caught if w.category is RuntimeWarning and
                "recorded again" in str(w.message)]
    assert len(messages) == 1
    assert "test_compile.py:" in messages[0] and "float(x.sum())" not in messages[0]
    line = f.__code__.co_firstlineno + 1
    assert f"test_compile.py:{line}" in messages[0]


# ---- values that leave the graph under at.compile ------------------------------------------

def test_a_value_leaving_the_graph_under_compile_warns_at_the_users_line():
    import math
    import warnings

    def f(k):
        return math.exp(-k * 2.0) + k          # float(k * 2.0): the gradient of exp is lost
    with pytest.warns(UserWarning, match=r"float\(\) reads a traced value") as caught:
        c = at.compile(f, np.float64(0.5))
    assert any(w.filename == __file__ for w in caught)
    assert float(c.grad(np.float64(0.5))) == 1.0    # torch's eager answer, as warned

    def g(x):
        return x * 2 if x > 0 else -x           # a branch is a decision: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(at.compile(g, np.float64(0.5)).grad(np.float64(0.5))) == 2.0
        assert float(at.compile(lambda x: at.exp(-x * 2.0) + x, np.float64(0.5)).grad(
            np.float64(0.5))) == pytest.approx(1 - 2 * np.exp(-1.0))


def test_item_and_numpy_inside_compile_warn_too():
    with pytest.warns(UserWarning, match=r"\.item\(\) reads"):
        at.compile(lambda x: x * x.sum().item(), np.ones(2))
    with pytest.warns(UserWarning, match=r"\.numpy\(\) reads"):
        at.compile(lambda x: x * np.sum(x.numpy()), np.ones(2))


# ---- what f reads besides its arguments: always the value it would read now -------------

def test_branch_on_a_formatted_value_records_again():
    def f(x):
        if "-" in f"{x[0]}":
            return (x * 2).sum()
        return (x * 3).sum()

    def g(x):
        return (x * 2).sum() if str(x[0]).startswith("tensor(-") else (x * 3).sum()

    def h(x):
        return (x * 2).sum() if f"{x[0].sum():+.1f}"[0] == "-" else (x * 3).sum()

    for fn in (f, g, h):
        with pytest.warns(UserWarning, match="reads a traced value"):
            c = at.compile(fn, np.ones(2))
        assert c(np.ones(2)).item() == 6.0
        assert c(-np.ones(2)).item() == -4.0          # (was replayed stale: -6)
    assert f"{at.tensor(3.14159):.2f}" == "3.14"
    with pytest.raises(TypeError, match="needs a 0-d tensor"):
        f"{at.tensor([1.0, 2.0]):.2f}"


def _captured_cases():
    data = np.array([1.0, 2.0])
    const = at.tensor([1.0, 2.0])
    scalar = at.tensor(2.0)
    coeffs = [1.0, 2.0]

    def change_data():
        data[0] = 5.0

    def change_const():
        const.__iadd__(1.0)

    def change_scalar():
        scalar.__iadd__(1.0)

    def change_coeffs():
        coeffs[0] = -1.0

    def change_view():
        view = data[:]
        view[1] = -3.0

    return [(lambda x: (x * data).sum(), change_data),
            (lambda x: (x * const).sum(), change_const),
            (lambda x: (x * scalar).sum(), change_scalar),
            (lambda x: (x * at.tensor(coeffs)).sum(), change_coeffs),
            (lambda x: (x * data * data).sum(), change_view)]


@pytest.mark.parametrize("case", range(5))
def test_a_changed_array_or_tensor_that_f_reads_is_read_again(case):
    f, change = _captured_cases()[case]
    x = np.array([0.5, 1.5])
    c = at.compile(f, x)
    c.value_and_grad(x)
    change()
    fresh = at.compile(f, x)                          # (what recording now gives)
    want_value, want_grad = fresh.value_and_grad(x)
    value, grad = c.value_and_grad(x)
    assert value.item() == want_value.item()
    np.testing.assert_array_equal(grad.numpy(), want_grad.numpy())
    np.testing.assert_array_equal(c(x).numpy(), fresh(x).numpy())


def test_unchanged_constants_do_not_record_again():
    data = np.linspace(0.0, 1.0, 50)
    c = at.compile(lambda x: (x * data).sum() + (x * np.arange(50.0)).sum(), np.ones(50))
    for _ in range(4):
        c.grad(np.ones(50))
    assert c.traces == 1


def test_writing_through_a_view_of_a_constant_tensor_leaves_a_recorded_gradient():
    c = at.tensor([1.0, 2.0])
    x = at.tensor([1.0, 1.0], requires_grad=True)
    view = c.numpy()[:]                               # a view handed out before recording
    y = (x * c).sum()
    view[0] = 100.0                                   # c changes, as numpy's views do
    assert c.numpy()[0] == 100.0
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0])   # the values used


def test_a_users_array_is_never_made_read_only():
    data = np.array([1.0, 2.0])
    x = at.tensor([1.0, 1.0], requires_grad=True)
    (x * data).sum().backward()
    at.compile(lambda u: (u * data).sum(), np.ones(2)).grad(np.ones(2))
    data[0] = 3.0                                     # (no "read-only" error)


def test_cloudpickle_carries_a_compiled_lambda():
    cloudpickle = pytest.importorskip("cloudpickle")
    import pickle
    scale = 3.0
    c = at.compile(lambda x: (scale * x ** 2).sum(), np.ones(2))
    c(np.ones(2))
    copy = pickle.loads(cloudpickle.dumps(c))
    np.testing.assert_array_equal(copy.grad(np.ones(3)).numpy(), [6.0, 6.0, 6.0])


def test_softmax_and_logsumexp_replay_without_recording_again():
    rng = np.random.default_rng(0)
    for fn in (at.softmax, at.logsumexp, at.log_softmax):
        c = at.compile(lambda x: (fn(x) * x).sum(), np.ones(5))
        for _ in range(6):
            x = rng.normal(size=5) * 3.0
            value, grad = c.value_and_grad(x)
            eager = at.tensor(x, requires_grad=True)
            want = (fn(eager) * eager).sum()
            want.backward()
            np.testing.assert_allclose(value.item(), want.item(), rtol=1e-13)
            np.testing.assert_allclose(grad.numpy(), eager.grad.numpy(), rtol=1e-12,
                                       atol=1e-15)
        assert c.traces == 1
        c(np.full(5, 100.0))                           # the data moved far: recorded again
        assert c.traces == 2
        far = at.tensor(np.full(5, 100.0))
        np.testing.assert_allclose(c(far.numpy()).item(), (fn(far) * far).sum().item())


def test_a_recording_larger_than_a_tape_holds_stays_whole(monkeypatch):
    # (the limits scaled down: eager code opens a new tape past them; a compiled
    # recording is one tape of any size)
    tape_module = importlib.import_module("autotape.tape")
    monkeypatch.setattr(tape_module, "MAX_ARRAY_BYTES", 1 << 16)
    monkeypatch.setattr(tape_module, "MAX_ROWS", 64)

    def f(x):
        total = 0.0
        for k in range(40):
            total = total + (at.sin(x * (k + 1.0))).sum()
        return total

    x = np.linspace(0.0, 1.0, 4000)
    value, grad = at.compile(f, x).value_and_grad(x)
    eager = at.tensor(x, requires_grad=True)
    want = f(eager)
    want.backward()
    np.testing.assert_allclose(value.item(), want.item(), rtol=1e-14)
    np.testing.assert_allclose(grad.numpy(), eager.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_a_value_read_in_python_tells_signed_zeros_apart():
    import math

    def f(x):
        s = x[0] * 0.0                           # +0.0 or -0.0, by the sign of x
        return x.sum() * math.copysign(1.0, float(s))

    c = at.compile(f, np.array([1.0]))
    assert c(np.array([2.0])).item() == 2.0
    assert c(np.array([-2.0])).item() == 2.0    # -0.0: the branch is the other one
    assert c.traces == 2


def test_lists_and_int_arrays_are_arguments_as_in_autotape_func():
    f = lambda t: (t ** 2).sum()
    c = at.compile(f, np.ones(3))
    assert c.grad([1.0, 2.0, 3.0]).tolist() == [2.0, 4.0, 6.0]
    assert c.grad(np.array([1, 2, 3])).tolist() == [2.0, 4.0, 6.0]
    assert at.func.grad(f)(np.array([1, 2, 3])).tolist() == [2.0, 4.0, 6.0]


def test_a_traced_value_stored_into_a_numpy_array_says_the_gradient_is_lost_there():
    start = np.array([1.0, 2.0])

    def f(k):
        x = start.copy()
        x[0] = x[0] + k[0]                     # (numpy keeps the number only)
        return (x * x).sum() + (k * k).sum()
    with pytest.warns(UserWarning, match=r"at.compile: a tensor that requires grad, stored "
                                         r"into a numpy array \(x\[i\] = t\), leaves only its "
                                         "number there: the gradient is lost at this line"):
        at.compile(f, np.ones(2))


def test_eager_storing_into_a_numpy_array_says_the_gradient_is_lost_there():
    x, t = np.zeros(2), at.tensor(1.0, requires_grad=True) * 2
    with pytest.warns(UserWarning, match="stored into a numpy array") as caught:
        x[0] = t
    assert caught[0].filename == __file__
    with pytest.warns(UserWarning, match="to a scalar may lead to unexpected behavior"):
        float(t)                               # (a plain conversion: torch's words)


def test_masks_added_inside_a_trace():
    # two comparison masks combined by arithmetic: numpy's bool sum, a guard (it
    # recursed: a Condition reached numpy as an operand)
    c = at.compile(lambda x: at.where((x < 1.0) + (x > 0.0) > 0.5, x, -x).sum(), np.ones(3))
    assert float(c(np.array([0.5, 2.0, -1.0]))) == 1.5
