"""The sweep's segments (kernels/sweep.py segment_vjp): a run of large elementwise rows
swept tile by tile, on threads. Every gradient must be the unfused sweep's bit for bit
(one row at a time over whole arrays), at one thread and at two, whatever the run
holds: shared operands, numbers, whole sums and means, rows that pass nothing, rows
the caller reads (retain_grad, a non-leaf input), hooks, nan and inf."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autotape as at
from autotape import executor
from autotape.kernels.sweep import TILE

from programs import OPS

N = executor.FUSE_MIN + TILE + 777          # several tiles, the last one partial
RNG = np.random.default_rng(11)
X = RNG.uniform(-2.0, 2.0, N)
Y = RNG.uniform(0.5, 2.0, N)


@pytest.fixture
def threads():
    saved = at.get_num_threads()
    yield at.set_num_threads
    at.set_num_threads(saved)


def gradients(program, n_threads, fused, monkeypatch, threads):
    """program(x, y) -> (loss, extra tensors whose .grad to read), swept fused or not."""
    threads(n_threads)
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(executor, "FUSE_MIN", 1 << 62)
        x, y = at.tensor(X, requires_grad=True), at.tensor(Y, requires_grad=True)
        loss, kept = program(x, y)
        loss.backward()
        return [None if t.grad is None else t.grad.numpy() for t in (x, y, *kept)]


def assert_fused_is_unfused(program, monkeypatch, threads):
    want = gradients(program, 1, False, monkeypatch, threads)
    for n_threads in (1, 2):
        got = gradients(program, n_threads, True, monkeypatch, threads)
        for g, w in zip(got, want):
            assert (g is None) == (w is None)
            if g is not None:
                np.testing.assert_array_equal(g, w)


def chain(x, y):
    return (at.sin(x) * x + x ** 2 / (1 + at.exp(-x))).sum(), []


def mixed_ops(x, y):
    """Shared operands, numbers on either side, generic ops (arctan2, pow 3), and a
    mean and a sum of the same rows."""
    a = at.tanh(y) * x - 2.0 * at.log(y) + x * x
    b = at.arctan2(a, y) + a ** 3.0 - 1.0 / y + at.sqrt(y) * a
    return a.mean() + (b * b).sum() + b.sum(), []


def retained(x, y):
    """Rows the caller reads (retain_grad) keep their adjoints in memory."""
    a = at.sin(x) * y
    a.retain_grad()
    b = at.exp(a) - a * x
    b.retain_grad()
    return (b * y).sum(), [a, b]


def passes_nothing(x, y):
    """floor and sign pass nothing: x's gradient is through the products only."""
    return (at.floor(x * 3.0) * x + at.sign(y - 1.0) * y + at.relu(x) * y).sum(), []


def number_with_a_gradient(x, y):
    """A 0-d operand that needs a gradient ends a segment (it is a sum over elements)."""
    s = (x * y).sum()
    return (at.cos(x) * s + y * s).sum(), []


def nan_and_inf(x, y):
    """log of negatives (nan), 1 / 0 (inf): the same nan and inf as the unfused sweep."""
    z = at.log(x) * y + 1.0 / (x - x) + at.sqrt(x) * x
    return z.sum(), []


def constant_operands(x, y):
    """Ops on a constant array are constants themselves (not recorded): a run meets
    them as constant operands of its rows, which take no gradient."""
    c = at.tensor(Y * 0.5)
    k = at.exp(c) * at.sum(at.cos(c)) / N
    return (k * x + at.tanh(c) * y + at.sin(x) * at.sqrt(c)).sum(), []


def two_sizes(x, y):
    """A slice (not elementwise) between two runs of different sizes."""
    head = x[: N // 2] * y[: N // 2]
    return (at.sin(head) * head).sum() + (at.cos(x) * y).mean(), []


@pytest.mark.parametrize("program", [chain, mixed_ops, retained, passes_nothing,
                                     number_with_a_gradient, nan_and_inf,
                                     constant_operands, two_sizes])
def test_fused_sweep_is_the_unfused_sweep_bit_for_bit(program, monkeypatch, threads):
    assert_fused_is_unfused(program, monkeypatch, threads)


def test_constant_operands_give_the_calculus(threads):
    threads(2)
    x, y = at.tensor(X, requires_grad=True), at.tensor(Y, requires_grad=True)
    gx, gy = at.grad(constant_operands(x, y)[0], [x, y])
    c = Y * 0.5
    k = np.exp(c) * np.sum(np.cos(c)) / N
    np.testing.assert_allclose(gx.numpy(), k + np.cos(X) * np.sqrt(c), rtol=1e-12)
    np.testing.assert_allclose(gy.numpy(), np.tanh(c), rtol=1e-12)


def test_fused_gradient_is_the_calculus(threads):
    threads(2)
    x = at.tensor(X, requires_grad=True)
    g, = at.grad(chain(x, None)[0], x)
    s = 1.0 / (1.0 + np.exp(-X))
    want = np.cos(X) * X + np.sin(X) + 2 * X * s + X ** 2 * s * (1 - s)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-12, atol=1e-12)


def test_hook_in_a_run_sees_and_changes_its_gradient(monkeypatch, threads):
    seen = []

    def program(x, y):
        a = at.sin(x) * y
        a.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2.0)
        return (at.exp(a) * x).sum(), []
    assert_fused_is_unfused(program, monkeypatch, threads)
    for g in seen[1:]:
        np.testing.assert_array_equal(g, seen[0])


def test_grad_of_a_non_leaf_input_and_accumulation(monkeypatch, threads):
    for n_threads, fused in ((1, False), (1, True), (2, True)):
        threads(n_threads)
        with monkeypatch.context() as m:
            if not fused:
                m.setattr(executor, "FUSE_MIN", 1 << 62)
            x = at.tensor(X, requires_grad=True)
            a = at.tanh(x) * x
            loss = (at.exp(-a) * a).sum()
            ga, gx = at.grad(loss, [a, x], retain_graph=True)
            loss.backward(retain_graph=True)
            loss.backward()                       # .grad accumulates: twice the gradient
            got = (ga.numpy(), gx.numpy(), x.grad.numpy())
        if not fused:
            want = got
            np.testing.assert_array_equal(want[2], 2 * want[1])
        else:
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(OPS) - 1), st.integers(0, 50),
                          st.integers(0, 50)), min_size=1, max_size=8),
       st.integers(0, 2), st.integers(1, 2))
def test_random_elementwise_programs(steps, extra_seed, n_threads):
    """Random chains of the property tests' ops on large arrays: fused == unfused."""
    saved = at.get_num_threads(), executor.FUSE_MIN

    def run(fuse_min, threads):
        at.set_num_threads(threads)
        executor.FUSE_MIN = fuse_min
        x, y = at.tensor(X, requires_grad=True), at.tensor(Y, requires_grad=True)
        pool = [x, y]
        for op, i, j in steps:
            name, arity, f = OPS[op]
            args = (pool[i % len(pool)], pool[j % len(pool)])[:arity]
            pool.append(f(at, *args))
        loss = pool[-1].sum() + pool[len(pool) // 2 + extra_seed % 2].mean()
        return [g if g is None else g.numpy()
                for g in at.grad(loss, [x, y], allow_unused=True)]
    try:
        want = run(1 << 62, 1)
        got = run(saved[1], n_threads)
    finally:
        at.set_num_threads(saved[0])
        executor.FUSE_MIN = saved[1]
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            np.testing.assert_array_equal(g, w)


def test_a_run_of_rows_is_one_segment(monkeypatch, threads):
    """The chain's eight rows below its sum are swept as one segment, at one thread too
    (so the tests above compare the tiled sweep, not the unfused one twice)."""
    calls = []

    def spy(sweep):
        def run(*args):
            calls.append(args[13:15])             # top, bottom
            return sweep(*args)
        return run
    monkeypatch.setattr(executor, "segment_vjp", spy(executor.segment_vjp))
    monkeypatch.setattr(executor, "segment_vjp_serial", spy(executor.segment_vjp_serial))
    for n_threads in (1, 2):
        threads(n_threads)
        x = at.tensor(X, requires_grad=True)
        loss, _ = chain(x, None)
        at.grad(loss, x)
        assert len(calls) == 1 and calls[0][0] - calls[0][1] >= 8
        calls.clear()
