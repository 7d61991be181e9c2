"""Intra-op threads (at.set_num_threads): large elementwise ops and the sweep's large
rows split among threads give exactly the one-thread results, also when Python threads
sweep at once; the setting is validated and also limits BLAS."""
import threading

import numpy as np
import pytest

import autotape as at
from autotape.parallel import PARALLEL_MIN

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
    results, errors = [None] * 3, []

    def work(k):
        try:
            x, y = at.tensor(X, requires_grad=True), at.tensor(Y, requires_grad=True)
            out = program(x, y)
            gx, gy = at.grad(out, [x, y])
            results[k] = (float(out.item()), gx.numpy(), gy.numpy())
        except BaseException as e:            # pragma: no cover (reported below)
            errors.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for r in results:
        assert r[0] == want[0]
        np.testing.assert_array_equal(r[1], want[1])
        np.testing.assert_array_equal(r[2], want[2])


def test_set_num_threads_checks_its_argument(threads):
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="positive integer"):
            at.set_num_threads(bad)
    threads(1)
    assert at.get_num_threads() == 1
