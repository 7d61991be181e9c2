"""Intra-op threads (at.set_num_threads): large elementwise ops and the sweep's large
rows split among threads give exactly the one-thread results, also when Python threads
sweep at once; the setting is validated and also limits BLAS."""
import importlib
import multiprocessing

import numba
import numpy as np
import pytest

import autotape as at
from autotape.parallel import PARALLEL_MIN
from concurrency import run_threads

N = PARALLEL_MIN + 12345                   # above the split size, not a multiple of it
X = np.random.default_rng(5).uniform(-2.0, 2.0, N)
Y = np.random.default_rng(6).uniform(0.5, 2.0, N)


@pytest.fixture
def threads():
    saved = at.get_num_threads()
    yield lambda n: at.set_num_threads(n)
    at.set_num_threads(saved)


def program(x, y):
    """Unary, binary (same shape, a number on either side, x ** 2), reuse of a leaf,
    a broadcast row, and a reduction: every kind of row the split sweep meets."""
    a = at.sin(x) * y + x ** 2 / (1.0 + at.exp(-x)) - 2.0 * at.tanh(y)
    b = at.log(y) * a + at.sqrt(y) - x / y + at.arctan2(x, y)
    c = b.reshape(-1, 1)[: (N // 5) * 5].reshape(-1, 5) * np.arange(1.0, 6.0)
    return (a * a).sum() + c.sum() + (b ** 3.0).mean()


def values_and_grads(n_threads, threads):
    threads(n_threads)
    x, y = at.tensor(X, requires_grad=True), at.tensor(Y, requires_grad=True)
    out = program(x, y)
    gx, gy = at.grad(out, [x, y])
    return float(out.item()), gx.numpy(), gy.numpy()


def test_threads_give_the_one_thread_results_exactly(threads):
    one = values_and_grads(1, threads)
    two = values_and_grads(2, threads)
    assert one[0] == two[0]
    np.testing.assert_array_equal(one[1], two[1])
    np.testing.assert_array_equal(one[2], two[2])


def test_split_sweep_accumulates_into_a_reused_leaf(threads):
    threads(2)
    x = at.tensor(X, requires_grad=True)
    g, = at.grad((x * x + at.sin(x) * x + x).sum(), x)
    np.testing.assert_allclose(g.numpy(), 2 * X + np.cos(X) * X + np.sin(X) + 1.0,
                               rtol=1e-13, atol=1e-13)


def test_python_threads_sweeping_large_graphs_at_once(threads):
    threads(2)
    want = values_and_grads(2, threads)
    def work(k):
        x, y = at.tensor(X, requires_grad=True), at.tensor(Y, requires_grad=True)
        out = program(x, y)
        gx, gy = at.grad(out, [x, y])
        return float(out.item()), gx.numpy(), gy.numpy()
    for r in run_threads(work, 3):
        assert r[0] == want[0]
        np.testing.assert_array_equal(r[1], want[1])
        np.testing.assert_array_equal(r[2], want[2])


def test_set_num_threads_checks_its_argument(threads):
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="positive integer"):
            at.set_num_threads(bad)
    threads(1)
    assert at.get_num_threads() == 1


UFUNC_OPS = ["exp", "log", "sqrt", "tan", "arctan", "log1p", "expm1", "cosh", "abs",
             "negative", "arcsinh", "sign", "floor"]


@pytest.mark.parametrize("name", UFUNC_OPS)
def test_threaded_forwards_are_numpys_values_bit_for_bit(name, threads, recwarn):
    """numpy's own loop on pieces of the array (helper threads, where numpy's error
    state is the thread's own: no warning may leak from them), numba's for -x."""
    threads(2)
    v = np.concatenate([X, [-1.0, 0.0, -0.0, np.inf, -np.inf, np.nan]])
    got = getattr(at, name)(at.tensor(v, requires_grad=True))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    with np.errstate(all="ignore"):
        want = getattr(np, name)(v)
    np.testing.assert_array_equal(got.numpy(), want)
    assert np.signbit(got.numpy()).tolist() == np.signbit(want).tolist()


@pytest.mark.parametrize("expr", [
    lambda lib, x, y: lib.maximum(x, y), lambda lib, x, y: lib.arctan2(x, y),
    lambda lib, x, y: lib.hypot(x, 2.0), lambda lib, x, y: x ** 2.5,
    lambda lib, x, y: x ** 2, lambda lib, x, y: 1 + x, lambda lib, x, y: 3 * x - y,
    lambda lib, x, y: lib.logaddexp(y, x), lambda lib, x, y: x / 7])
def test_threaded_binary_forwards_are_numpys_values(expr, threads):
    threads(2)
    got = expr(at, at.tensor(X, requires_grad=True), at.tensor(Y))
    np.testing.assert_array_equal(got.numpy(), expr(np, X, Y))


@pytest.mark.parametrize("n", [7, N])
def test_a_cube_is_x_times_x_times_x_as_torch_computes_it(n, threads):
    # (numpy's power calls pow, which differs in the last bit for a quarter of x)
    threads(2)
    x = X[:n]
    want = x * x * x
    for got in (at.tensor(x, requires_grad=True) ** 3, at.tensor(x) ** 3.0,
                at.power(at.tensor(x), at.tensor(np.full(n, 3.0))),
                at.compile(lambda u: u ** 3, x)(x)):
        np.testing.assert_array_equal(got.numpy(), want)
    assert at.tensor(x[0]) ** 3 == want[0] and (at.tensor(x[0]) ** 3).item() == want[0]
    mixed = at.power(at.tensor(x), at.tensor(np.where(np.arange(n) % 2, 3.0, 2.5)))
    np.testing.assert_array_equal(mixed.numpy()[1::2], want[1::2])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(mixed.numpy()[::2], x[::2] ** 2.5)
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(torch.from_numpy(x).pow(3).numpy(), want)


@pytest.mark.parametrize("shape", [(N,), (N // 3, 3), (3, N // 3)])
def test_threaded_sum_and_mean_are_numpys_to_the_bit(shape, threads):
    threads(2)
    v = (X * np.exp(Y * 10.0))[: np.prod(shape)].reshape(shape)
    x = at.tensor(v, requires_grad=True)
    assert at.sum(x).item() == np.sum(v)
    assert at.mean(x).item() == np.mean(v)
    assert at.sum(x, keepdims=True).shape == np.sum(v, keepdims=True).shape
    g, = at.grad(at.mean(x), x)
    np.testing.assert_array_equal(g.numpy(), np.full(shape, 1.0 / v.size))


def test_threaded_tensor_copy_is_a_copy(threads):
    threads(2)
    v = X.copy()
    x = at.tensor(v)
    v[0] = 99.0
    assert x.numpy()[0] == X[0] and x.numpy().tobytes() == X.tobytes()


def _exp_in_a_child(queue):
    if numba.threading_layer() == "omp":      # one thread, and a clear error for more
        try:
            at.set_num_threads(2)
            queue.put(False)
            return
        except RuntimeError as e:
            assert "spawn" in str(e)
    x = at.tensor(X, requires_grad=True)
    y = at.exp(x)
    g, = at.grad((y * x).sum(), x)
    queue.put(y.numpy().tobytes() == np.exp(X).tobytes() and
              g.numpy().tobytes() == GRAD_EXP_X.tobytes())


GRAD_EXP_X = np.exp(X) * X + np.exp(X)


def test_a_forked_child_runs_large_ops(threads):
    """A child forked after the parent's threads ran: the helper threads of numpy
    pieces exist in the parent only (the child makes its own, else its first large exp
    would wait forever), and GNU OpenMP aborts a forked child that uses it (the child
    runs on one thread, numba's serial kernels)."""
    threads(2)
    x = at.tensor(X, requires_grad=True)      # the parent's helper and numba threads ran
    at.grad((at.exp(x) * x).sum(), x)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_exp_in_a_child, args=(queue,))
    child.start()
    child.join(60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and queue.get(timeout=5)


def test_python_threads_run_threaded_forwards_at_once(threads):
    threads(2)
    results = run_threads(lambda k: at.log1p(at.tensor(Y * (k + 1))).numpy(), 4)
    for k in range(4):
        np.testing.assert_array_equal(results[k], np.log1p(Y * (k + 1)))


def _pendulum_loss(theta):
    x, v = theta[0] * 1.0, theta[1] * 0.0
    for _ in range(20):
        x, v = x + 0.05 * v, v - 0.05 * at.sin(x) * theta[1]
    return x * x


_POINTS = np.random.default_rng(3).uniform(0.5, 1.5, (4000, 2))


def test_vmap_uses_the_thread_count_set(threads, monkeypatch):
    program_module = importlib.import_module("autotape.program")
    c = at.compile(_pendulum_loss, np.ones(2))
    seen = []
    real = program_module.for_numba
    monkeypatch.setattr(program_module, "for_numba", lambda: seen.append(real()) or seen[-1])
    threads(1)
    one = at.func.vmap(c.value_and_grad)(_POINTS)
    assert seen and set(seen) == {1} and numba.get_num_threads() == 1
    threads(2)
    seen.clear()
    two = at.func.vmap(c.value_and_grad)(_POINTS)
    assert set(seen) == {min(2, numba.config.NUMBA_NUM_THREADS)}
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _vmap_in_a_child(queue):
    c = at.compile(_pendulum_loss, np.ones(2))
    values, grads = at.func.vmap(c.value_and_grad)(_POINTS)
    queue.put((values.numpy().tobytes(), grads.numpy().tobytes()))


def test_a_forked_child_runs_vmap(threads):
    c = at.compile(_pendulum_loss, np.ones(2))
    threads(1)
    at.func.vmap(c.value_and_grad)(_POINTS)     # (the one-thread kernels the child runs,
    threads(2)                                  # compiled here: the child inherits them)
    values, grads = at.func.vmap(c.value_and_grad)(_POINTS)   # the parent's threads ran
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_vmap_in_a_child, args=(queue,))
    child.start()
    try:
        got = queue.get(timeout=120)           # (before join: the result fills the pipe)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    assert got == (values.numpy().tobytes(), grads.numpy().tobytes())
