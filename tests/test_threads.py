"""Threads: torch's model. Grad mode and the tape being recorded are per thread;
independent graphs record and sweep at once (the kernels release the GIL); a graph or
a compiled function shared between threads gives every thread the serial answer.

Each test runs its workers for a fixed count of iterations with a tiny switch interval,
so the threads interleave inside recording and sweeps, and compares every result with
the one computed serially first. A crash, a lost gradient or a wrong number fails.
"""
import sys
import threading

import numpy as np
import pytest

import autotape as at
from concurrency import run_threads

THREADS = 4


@pytest.fixture(autouse=True)
def fast_switching():
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(saved)


def array_program(seed, n=20_000):
    x = at.tensor(np.random.default_rng(seed).normal(size=n), requires_grad=True)
    y = at.sin(x) * x + at.exp(-x * x) * 0.5
    loss = (y * y).sum() + (y[1:] * y[:-1]).sum()
    g, = at.grad(loss, x)
    return loss.item(), g.numpy()


def scalar_chain(seed, n=3000):
    x = at.tensor(0.1 + 0.01 * seed, requires_grad=True)
    y = x
    for i in range(n):
        y = at.sin(y) * 0.99 + x * 0.01
    g, = at.grad(y, x)
    return y.item(), float(g)


def test_independent_array_graphs_in_threads():
    serial = [array_program(k) for k in range(THREADS)]
    for _ in range(3):
        for got, want in zip(run_threads(array_program, THREADS), serial):
            assert got[0] == want[0]
            np.testing.assert_array_equal(got[1], want[1])


def test_independent_scalar_chains_in_threads():
    serial = [scalar_chain(k) for k in range(THREADS)]
    for _ in range(2):
        assert run_threads(scalar_chain, THREADS) == serial


def test_grad_mode_is_per_thread():
    serial = [scalar_chain(k, 500) for k in range(THREADS)]

    def work(k):
        if k == 0:                             # toggles grad mode the whole time
            seen = []
            for _ in range(300):
                with at.no_grad():
                    seen.append(at.is_grad_enabled())
                    y = at.tensor(1.0, requires_grad=True) * 2
                    seen.append(y.requires_grad)
            return seen
        return [scalar_chain(k, 500) for _ in range(3)]
    results = run_threads(work, THREADS)
    assert not any(results[0])
    for k in range(1, THREADS):
        assert results[k] == [serial[k]] * 3
    assert at.is_grad_enabled()                # overlapping blocks left it on here


def test_overlapping_no_grad_in_two_threads_leaves_grad_mode_alone():
    """The interleaving that left grad mode off for the whole process when it was
    global: thread 0 enters, thread 1 enters, thread 0 leaves, thread 1 leaves."""
    entered = [threading.Event(), threading.Event()]
    left0 = threading.Event()

    def holder(k):
        if k == 1:
            entered[0].wait()
        with at.no_grad():
            entered[k].set()
            if k == 0:
                entered[1].wait()
            else:
                left0.wait()
            inside = at.is_grad_enabled()
        if k == 0:
            left0.set()
        return inside, at.is_grad_enabled()
    assert run_threads(holder, 2) == [(False, True), (False, True)]
    assert at.is_grad_enabled()
    x = at.tensor(2.0, requires_grad=True)
    assert (x * x).requires_grad


def test_graph_shared_between_threads():
    w = at.tensor(np.linspace(-1, 1, 5000), requires_grad=True)
    shared = at.tanh(w) * w                    # on the main thread's open tape
    want = at.grad((shared * shared).sum(), w, retain_graph=True)[0].numpy()

    def work(k):
        out = []
        for _ in range(10):
            loss = (shared * shared).sum()     # recorded on this thread's tape
            out.append(at.grad(loss, w, retain_graph=True)[0].numpy())
        return out
    for per_thread in run_threads(work, THREADS):
        for g in per_thread:
            np.testing.assert_array_equal(g, want)


def test_sweeping_a_tape_that_another_thread_is_still_recording():
    """Thread 0 keeps appending to its open tape (scalar rows, which grow and move its
    arena) while the others differentiate results it hands over from that same tape."""
    x = at.tensor(0.3, requires_grad=True)
    handed, done = [], threading.Event()

    def expected(k):
        y = x
        for _ in range(k):
            y = at.sin(y) + x * 0.5
        return float(at.grad(y, x)[0])
    want = [expected(k) for k in range(1, 200)]

    def work(k):
        if k == 0:
            y = x
            for i in range(1, 200):
                y = at.sin(y) + x * 0.5
                handed.append((i, y))
                for _ in range(50):            # grow the tape between hand-overs
                    at.exp(y * 0.0)
            done.set()
            return None
        got = []
        while not done.is_set() or len(got) < len(handed):
            if len(got) < len(handed):
                i, y = handed[len(got)]
                got.append((i, float(at.grad(y, x, retain_graph=True)[0])))
        return got
    for per_thread in run_threads(work, THREADS)[1:]:
        for i, g in per_thread:
            assert g == want[i - 1]


def test_grad_accumulates_into_a_shared_leaf_from_threads():
    w = at.tensor(np.ones(100), requires_grad=True)

    def work(k):
        for _ in range(25):
            (w * (k + 1.0)).sum().backward()
    run_threads(work, THREADS)
    np.testing.assert_array_equal(w.grad.numpy(), np.full(100, 25.0 * (1 + 2 + 3 + 4)))


def pendulum(theta):
    x, v = theta[0], theta[1]
    for _ in range(30):
        a = -at.sin(x) - theta[2] * v
        x, v = x + 0.05 * v, v + 0.05 * a
    return x * x + v * v


def test_compiled_function_shared_between_threads():
    points = [np.array([0.5 + 0.1 * k, 0.1 * k, 0.2]) for k in range(8)]
    c = at.compile(pendulum, points[0])
    serial = [(float(c(p)), c.grad(p).numpy(), c.hessian(p).numpy()) for p in points]

    def work(k):
        out = []
        for _ in range(5):
            for p in points[k::THREADS] + points:
                out.append((float(c(p)), c.grad(p).numpy(), c.hessian(p).numpy()))
        return out
    for k, per_thread in enumerate(run_threads(work, THREADS)):
        order = (points[k::THREADS] + points) * 5
        for p, (value, g, h) in zip(order, per_thread):
            want = serial[next(i for i, q in enumerate(points) if q is p)]
            assert value == want[0]
            np.testing.assert_array_equal(g, want[1])
            np.testing.assert_array_equal(h, want[2])
    assert c.traces == 2                       # value and Hessian: recorded once each


def test_compiled_calls_record_in_their_own_thread():
    """A thread recording its own graph while another calls (and so replays and maybe
    re-records) a compiled function: neither sees the other's tape."""
    c = at.compile(lambda v: (v ** 3).sum(), np.ones(3))

    def work(k):
        if k % 2:
            return [c.grad(np.full(3, float(i))).numpy().tolist() for i in range(50)]
        return [scalar_chain(k, 200) for _ in range(5)]
    results = run_threads(work, THREADS)
    for k, r in enumerate(results):
        if k % 2:
            assert r == [[3.0 * i * i] * 3 for i in range(50)]
        else:
            assert r == [scalar_chain(k, 200)] * 5


def test_many_point_calls_from_threads():
    """vmap of one compiled function from several threads: each call's parallel
    kernel (or its Python-thread chunks) gives the serial answer."""
    import autotape.func as F
    c = at.compile(pendulum, np.array([0.5, 0.1, 0.2]))
    batches = [np.random.default_rng(k).uniform(0.1, 1.0, (40, 3)) for k in range(THREADS)]
    serial = [F.vmap(c.grad)(b).numpy() for b in batches]

    def work(k):
        return [F.vmap(c.grad)(batches[k]).numpy() for _ in range(6)]
    for k, results in enumerate(run_threads(work, THREADS)):
        for got in results:
            np.testing.assert_array_equal(got, serial[k])
