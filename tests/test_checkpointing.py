"""Compiled programs with ``checkpoint=``: a long loop swept in segments
(checkpointing.py) gives the same numbers as storing every value, bit for bit, for
gradients, Jacobians both ways, Hessian-free calls and batches; it keeps about
2 sqrt(steps) repetitions' worth; what it cannot segment is said, and still right."""
import pickle
import tracemalloc

import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape import program
from autotape.thread_state import here

THETA = np.array([1.0, 0.2, 9.8, 0.1])


def pendulum(theta, steps=400):
    x, v = theta[0], theta[1]
    for _ in range(steps):
        a = -theta[2] * at.sin(x) - theta[3] * v
        x, v = x + 0.01 * v, v + 0.01 * a
    return x * x + v * v


def three_step(theta, steps=300):
    """Each step reads the state three steps back: however the recorded loop body is
    rotated, a repetition reads two before it (back = 2)."""
    hist = [theta[0], theta[0] * 1.01, theta[0] * 1.02]
    for _ in range(steps):
        hist.append(hist[-1] + 0.01 * (theta[1] * hist[-3] - theta[2] * at.sin(hist[-1])))
    return at.stack([hist[-1] * hist[-2], hist[-1] * theta[3], at.tanh(hist[-3])])


def forced(theta, steps=300):
    """A constant of its own in every step (the forcing's time): constants inside the
    loop's slots, loaded per segment."""
    x = theta[0]
    for k in range(steps):
        x = x + 0.01 * (-theta[1] * x + theta[2] * np.sin(0.05 * k))
    return x * x * theta[3]


def rolled(theta, steps=60):
    """The state is read only through 2-D rolls (gathers, not copies): the checkpoints
    must keep it. They kept nothing, and the gradient came out wrong, until the carried
    slots were found by the instruction format's one walk, which knows gathers."""
    u = np.outer(np.linspace(0.1, 1, 12), np.linspace(0.2, 0.8, 12)) * theta[0]
    for _ in range(steps):
        u = np.sin(np.roll(u, 1, 1) * 0.9 + np.roll(u, 3, 1) * theta[1] + 0.3)
    return (u * u).sum() * theta[3]


def _both(f, **kw):
    plain, segmented = at.compile(f, THETA), at.compile(f, THETA, checkpoint="sqrt", **kw)
    assert segmented._lean("value", [THETA]).lean.segments is not None
    return plain, segmented


@pytest.mark.parametrize("f", [pendulum, three_step, forced, rolled])
def test_segmented_sweep_equals_storing_everything(f, monkeypatch):
    monkeypatch.setattr(program, "POISON_SCRATCH", True)  # (a value read unwritten: nan)
    plain, segmented = _both(f)
    points = THETA * np.linspace(0.8, 1.2, 37)[:, None]
    for _ in range(program.COMPILE_LOOP_AFTER + 1):      # the plain one's loop compiled
        plain.jacobian(THETA)
        F.vmap(plain.jacrev)(points)
    for method in ("__call__", "jacrev", "jacfwd"):
        want = getattr(plain, method)(THETA)
        got = getattr(segmented, method)(THETA)
        for w, g in zip(at.func.flatten(want)[0], at.func.flatten(got)[0]):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
        np.testing.assert_array_equal(F.vmap(getattr(segmented, method))(points).numpy(),
                                      F.vmap(getattr(plain, method))(points).numpy())


def test_two_step_method_carries_two_repetitions():
    segments = at.compile(three_step, THETA, checkpoint="sqrt")._lean(
        "value", [THETA]).lean.segments
    assert segments.back == 2


def test_a_forcing_constant_is_not_carried_state():
    """Each step's forcing constant changes slot like state, but lives with the
    constants: the checkpoints carry x alone, one repetition back (32 back and a
    constant's slot before: 10x the segment memory)."""
    segments = at.compile(forced, THETA, checkpoint="sqrt")._lean("value", [THETA]).lean.segments
    assert segments.back == 1 and segments.carry.size == 1


def test_gradient_matches_finite_differences():
    c = at.compile(pendulum, THETA, checkpoint="sqrt")
    g = c.grad(THETA).numpy()
    eps = 1e-6
    for k in range(4):
        e = np.zeros(4)
        e[k] = eps
        fd = (pendulum(at.tensor(THETA + e)).item() - pendulum(at.tensor(THETA - e)).item()) \
            / (2 * eps)
        np.testing.assert_allclose(g[k], fd, rtol=1e-6, atol=1e-9)


def rk4_pendulum(theta, steps):
    def accel(x, v):
        return -theta[2] * at.sin(x) - theta[3] * v
    x, v, h = theta[0], theta[1], 0.01
    for _ in range(steps):
        k1x, k1v = v, accel(x, v)
        k2x, k2v = v + 0.5 * h * k1v, accel(x + 0.5 * h * k1x, v + 0.5 * h * k1v)
        k3x, k3v = v + 0.5 * h * k2v, accel(x + 0.5 * h * k2x, v + 0.5 * h * k2v)
        k4x, k4v = v + h * k3v, accel(x + h * k3x, v + h * k3v)
        x = x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        v = v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    return x * x + v * v


def test_memory_grows_like_the_square_root_of_the_steps(monkeypatch):
    """The issue's bar: a 10^4-step gradient within 3 sqrt(steps) repetitions' worth
    (every allocation of the call counted, the adjoints too); 4x the steps, 2x the
    memory."""
    monkeypatch.setattr(program, "KEEP_PROGRAM_SCRATCH_BYTES", 0)
    peaks, plain = {}, at.compile(lambda t: rk4_pendulum(t, 2500), THETA)
    for steps in (2500, 10000):
        c = at.compile(lambda t: rk4_pendulum(t, steps), THETA, checkpoint="sqrt")
        g = c.grad(THETA)
        segments = c._lean("value", [THETA]).lean.segments
        here().program_scratch = None
        tracemalloc.start()
        c.grad(THETA)
        peaks[steps] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peaks[steps] / (segments.delta * 8) < 3 * np.sqrt(steps)
    np.testing.assert_array_equal(g.numpy(), at.compile(lambda t: rk4_pendulum(t, 10000),
                                                        THETA).grad(THETA).numpy())
    assert peaks[10000] < 2.5 * peaks[2500]
    here().program_scratch = None
    tracemalloc.start()
    plain.grad(THETA)
    assert tracemalloc.get_traced_memory()[1] > 10 * peaks[2500]   # (what it saves)
    tracemalloc.stop()


def test_budget_is_kept_or_refused():
    c = at.compile(pendulum, THETA, checkpoint=60)
    segments = c._lean("value", [THETA]).lean.segments
    assert segments.states() <= 60
    np.testing.assert_array_equal(c.grad(THETA).numpy(),
                                  at.compile(pendulum, THETA).grad(THETA).numpy())
    with pytest.raises(ValueError, match="too little for this loop of 39. repetitions"):
        at.compile(pendulum, THETA, checkpoint=10)
    for bad in (0, -3, "all", 2.5, True):
        with pytest.raises(ValueError, match="checkpoint must be None, 'sqrt' or a positive"):
            at.compile(pendulum, THETA, checkpoint=bad)


def trajectory(theta, steps=100):
    """Every step's state read after the loop: kept out of the segments' window."""
    x, states = theta[0], []
    for _ in range(steps):
        x = x - 0.01 * theta[1] * at.sin(x) + theta[2] * 0.001
        states.append(x * theta[3])
    return (at.stack(states) * np.linspace(-1.0, 1.0, steps)).sum()


def test_what_the_code_after_the_loop_reads_of_every_step_is_kept():
    plain, segmented = _both(trajectory)
    lean = segmented._lean("value", [THETA]).lean
    assert lean.segments.kept.size == 1 and lean.segments.size < lean.nslots / 2
    points = THETA * np.linspace(0.8, 1.2, 9)[:, None]
    for _ in range(program.COMPILE_LOOP_AFTER + 1):
        plain.jacobian(THETA)
        F.vmap(plain.jacrev)(points)
    for method in ("__call__", "grad", "jacfwd"):
        np.testing.assert_array_equal(getattr(segmented, method)(THETA).numpy(),
                                      getattr(plain, method)(THETA).numpy())
    np.testing.assert_array_equal(F.vmap(segmented.grad)(points).numpy(),
                                  F.vmap(plain.grad)(points).numpy())


def test_what_cannot_be_segmented_warns_and_stays_right():
    with pytest.warns(RuntimeWarning, match="no repeating loop body"):
        at.compile(lambda t: (t * t).sum(), THETA, checkpoint="sqrt")
    with pytest.warns(RuntimeWarning, match="tape path"):
        at.compile(lambda t: t.max() * t[0], THETA, checkpoint="sqrt")


def test_pickled_program_stays_segmented():
    c = at.compile(pendulum, THETA, checkpoint="sqrt")
    want = c.grad(THETA).numpy()
    back = pickle.loads(pickle.dumps(c))
    lean = back._lean("value", [THETA]).lean
    assert lean.segments is not None
    np.testing.assert_array_equal(back.grad(THETA).numpy(), want)


def test_float32_segmented():
    x32 = THETA.astype(np.float32)
    c = at.compile(pendulum, x32, checkpoint="sqrt")
    g = c.grad(x32)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g.numpy(), at.compile(pendulum, x32).grad(x32).numpy())
