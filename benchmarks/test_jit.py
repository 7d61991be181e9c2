"""at.jit (issue: differentiate simulations that are already numba-compiled): the
pendulum (1000 RK4 steps) written as an ``@numba.njit`` function, value + 4-gradient,
beside the hand-written numba forward-mode adjoint; and the cost of recording inside
compiled code per op on a 10^5-op scalar chain; and the recording by Python that a
function's first calls on a machine make while its recorder compiles (jit_python.py),
against the compiled recorder.

    python -m pytest benchmarks/test_jit.py --benchmark-json=jit.json
    python benchmarks/report.py jit.json
"""
import math

import numba
import numpy as np
import pytest

import autotape as at
import workloads as W

THETA = np.array([1.0, 0.0, 9.8, 0.1])
PENDULUM = pytest.mark.benchmark(group="at.jit: pendulum RK4 1000 steps as an @njit "
                                       "function, value + 4-gradient")
CHAIN = pytest.mark.benchmark(group="at.jit: recording a 100k-op scalar chain inside "
                                    "compiled code (per op: time / 1e5)")


@numba.njit
def accel(theta, x, v):
    return -theta[2] * math.sin(x) - theta[3] * v


@numba.njit
def rk4(theta, x, v, h):
    """One RK4 step (a helper njit function: at.jit compiles it the same way)."""
    k1x, k1v = v, accel(theta, x, v)
    k2x, k2v = v + 0.5 * h * k1v, accel(theta, x + 0.5 * h * k1x, v + 0.5 * h * k1v)
    k3x, k3v = v + 0.5 * h * k2v, accel(theta, x + 0.5 * h * k2x, v + 0.5 * h * k2v)
    k4x, k4v = v + h * k3v, accel(theta, x + h * k3x, v + h * k3v)
    return (x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x),
            v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v))


@numba.njit
def pendulum(theta):
    x, v = theta[0], theta[1]
    for _ in range(1000):
        x, v = rk4(theta, x, v, W.DT)
    return x * x + v * v


@numba.njit
def clamped_pendulum(theta):
    """The same with a decision on a value every step (a clamp that never bites): a
    recording with decisions is made again at every call."""
    x, v = theta[0], theta[1]
    for _ in range(1000):
        x, v = rk4(theta, x, v, W.DT)
        if v > 1e6:
            v = v * 0.0 + 1e6
    return x * x + v * v


def _check(f):
    value, g = f.value_and_grad(THETA)
    want = W.pendulum_numba(THETA, 1000)
    np.testing.assert_allclose(value.item(), want[0], rtol=1e-12)
    np.testing.assert_allclose(g.numpy(), want[1], rtol=1e-12, atol=1e-12)


@PENDULUM
def test_pendulum_at_jit_replayed(benchmark):
    f = at.jit(pendulum)
    for _ in range(6):                         # (recorded once, the loop body compiled)
        _check(f)
    benchmark.pedantic(lambda: f.value_and_grad(THETA), rounds=100, warmup_rounds=3)


@PENDULUM
def test_pendulum_at_jit_recorded_every_call(benchmark):
    f = at.jit(clamped_pendulum)
    _check(f)
    benchmark.pedantic(lambda: f.value_and_grad(THETA), rounds=100, warmup_rounds=3)


@PENDULUM
def test_pendulum_hand_adjoint_numba(benchmark):
    W.pendulum_numba(THETA, 1000)
    benchmark.pedantic(lambda: W.pendulum_numba(THETA, 1000), rounds=100, warmup_rounds=3)


@numba.njit
def chain(y):
    for _ in range(W.CHAIN_STEPS):
        y = math.exp(math.sin(y * 1.0001 + 0.5)) / 2.5
    return y


@CHAIN
def test_chain_recording_only(benchmark):
    f = at.jit(chain)
    f.grad(0.3)
    x = [np.array(0.3)]
    benchmark.pedantic(lambda: f._record(x), rounds=50, warmup_rounds=3)


@CHAIN
def test_chain_plain_njit_floats(benchmark):
    chain(0.3)
    benchmark.pedantic(lambda: chain(0.3), rounds=50, warmup_rounds=3)


@numba.njit
def long_loop(x):
    s = x[0]
    for _ in range(1_000_000):
        s = s * 0.999999 + x[1] * 1e-7
    return s


FIRST = pytest.mark.benchmark(group="at.jit: the first call on a 1M-step scalar loop "
                                    "(record, sweep, find the loop, lower; recorder "
                                    "compiled already)")


@FIRST
def test_first_call_1m_step_loop(benchmark):
    X = np.array([1.0, 2.0])
    at.jit(long_loop).value_and_grad(X)        # (numba's compile of the recorder, once)

    def first_call():
        g = at.jit(long_loop)
        g._recorders = warm._recorders         # (each at.jit compiles its recorder)
        g.value_and_grad(X)
    warm = at.jit(long_loop)
    warm.value_and_grad(X)
    benchmark.pedantic(first_call, rounds=3, warmup_rounds=0)


@FIRST
def test_recording_1m_step_loop(benchmark):
    g = at.jit(long_loop)
    X = [np.array([1.0, 2.0])]
    g.value_and_grad(X[0])
    benchmark.pedantic(lambda: g._record(X), rounds=5, warmup_rounds=1)


RECORDING = pytest.mark.benchmark(group="at.jit: recording the pendulum by Python (while "
                                        "its recorder compiles beside) against compiled")


def _recording(benchmark, in_python):
    f = at.jit(pendulum)
    arrays = f._arguments((THETA,))
    f._record(arrays)                        # (the compiled recorder: loaded or compiled)
    tree, = f._trees.values()
    if in_python:
        rows = benchmark(f._record_in_python, tree, [1], [arrays[0]])[2][2]
    else:
        rows = benchmark(f._record, arrays)[2][2]
    benchmark.extra_info["rows"] = rows


@RECORDING
def test_recording_by_python(benchmark):
    _recording(benchmark, True)


@RECORDING
def test_recording_compiled(benchmark):
    _recording(benchmark, False)
