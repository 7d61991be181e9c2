"""A compiled function on large arrays runs one call like eager code: the replay leaves
large elementwise rows to the eager forward's functions (numpy's, on threads) and the
sweep runs its segments, so values and gradients are eager's bit for bit, at one
thread and at two (a lean program would interpret one instruction per element)."""
import numpy as np
import pytest

import autotape as at
from autotape.compile import LOOP_WIDE_MIN
from autotape.executor import FUSE_MIN, NUMPY_ROW_MIN

N = FUSE_MIN + 4321
RNG = np.random.default_rng(3)
X = RNG.uniform(-2.0, 2.0, N)
M = RNG.uniform(0.5, 1.5, (300, 300))          # 90,000 elements, a broadcast row
B = RNG.uniform(-1.0, 1.0, 300)


@pytest.fixture(params=[1, 2])
def threads(request):
    saved = at.get_num_threads()
    at.set_num_threads(request.param)
    yield request.param
    at.set_num_threads(saved)


def mixed(x):
    return (at.sin(x) * x + x ** 2 / (1 + at.exp(-x)) - at.log1p(x * x)).sum()


def broadcast(m, b):
    return (at.tanh(m * b + 1.0) * at.sqrt(m) - at.maximum(m, b)).sum()


def branchy(x):
    """A decision on a value: a guard, checked at every replay."""
    return (at.exp(-x) * x).sum() if x.sum() > 0 else (at.cos(x) * x).sum()


def eager(f, *args):
    ts = [at.tensor(a, requires_grad=True) for a in args]
    out = f(*ts)
    return out.item(), [g.numpy() for g in at.grad(out, ts)]


@pytest.mark.parametrize("f, args", [(mixed, (X,)), (mixed, (X[:5000],)), (broadcast, (M, B)),
                                     (branchy, (X,)), (branchy, (-X - 1.0,))])
def test_compiled_wide_program_is_eager_bit_for_bit(f, args, threads):
    c = at.compile(f, *args)
    for _ in range(2):                          # the recording call, then a replay
        value, grads = c.value_and_grad(*args)
        grads = grads if isinstance(grads, tuple) else (grads,)
        want_value, want_grads = eager(f, *args)
        assert value.item() == want_value                # numpy's pairwise sum too
        for g, w in zip(grads, want_grads):
            np.testing.assert_array_equal(g.numpy(), w)
    assert c(*args).item() == want_value


def test_which_recordings_run_like_eager_code():
    wide = at.compile(mixed, X[:NUMPY_ROW_MIN])
    narrow = at.compile(mixed, X[:NUMPY_ROW_MIN - 1])
    for c, want in ((wide, True), (narrow, False)):
        c.grad(X[:NUMPY_ROW_MIN if want else NUMPY_ROW_MIN - 1])
        assert [p.wide for p in c._programs.values()] == [want]


def heat(d):
    h = at.cos(d)
    for _ in range(50):                            # (a loop: 350 instructions or more)
        h = h + 0.1 * d * (at.roll(h, 1) - 2.0 * h + at.roll(h, -1))
    return (h * h).sum()


def test_a_loop_runs_like_eager_code_only_on_larger_arrays():
    """The lean program compiles a loop's body, faster than eager-like runs below
    LOOP_WIDE_MIN elements; with checkpoints asked for, only the lean program keeps
    them."""
    for n, want in ((NUMPY_ROW_MIN, False), (LOOP_WIDE_MIN, True)):
        d0 = np.linspace(0.2, 0.6, n)
        c = at.compile(heat, d0)
        value, g = c.value_and_grad(d0)
        p, = c._programs.values()
        assert p.lean.loop is not None and p.wide == want
        want_value, (want_g,) = eager(heat, d0)
        if want:                                   # eager's functions: eager's bits
            assert value.item() == want_value
            np.testing.assert_array_equal(g.numpy(), want_g)
        else:
            np.testing.assert_allclose(g.numpy(), want_g, rtol=1e-12, atol=1e-12)
    c = at.compile(heat, d0, checkpoint="sqrt")
    c.grad(d0)
    assert [p.wide for p in c._programs.values()] == [False]


def test_a_replay_at_new_arguments_and_the_batched_path(threads):
    c = at.compile(mixed, X)
    c.grad(X)
    x2 = X[::-1].copy()
    np.testing.assert_array_equal(c.grad(x2).numpy(), eager(mixed, x2)[1][0])
    small = at.compile(lambda x: (at.sin(x) * x).sum(), np.ones(3))   # still lean
    points = RNG.normal(size=(4, 3))
    np.testing.assert_allclose(at.func.vmap(small.grad)(points).numpy(),
                               np.cos(points) * points + np.sin(points), rtol=1e-13)
