"""Forward mode (issue: custom ops, hooks, forward mode and checkpointing): the Jacobian
of the pendulum's trajectory (1000 RK4 steps, all 2000 states) by its 4 parameters.
autotape's ``c.jacfwd`` (one pass, 4 tangent lanes) beside its reverse-mode
``c.jacrev`` (a sweep per state), ``jax.jit(jax.jacfwd)`` over ``lax.scan`` and a
hand-written numba forward-mode floor; every Jacobian is checked against numba's.

    python -m pytest benchmarks/test_forward.py --benchmark-json=forward.json
    python benchmarks/report.py forward.json
"""
import numpy as np
import pytest

import autotape as at
import workloads as W
from autotape.program import COMPILE_LOOP_AFTER

STEPS = 1000
THETA = np.array([1.0, 0.0, 9.8, 0.1])
TRAJECTORY = pytest.mark.benchmark(
    group="forward mode: pendulum trajectory Jacobian, 1000 RK4 steps, 2000 states x 4")


def _trajectory(theta):
    return W.pendulum_trajectory_at(theta, STEPS)


def _check(J):
    np.testing.assert_allclose(np.asarray(J), W.pendulum_trajectory_numba(THETA, STEPS)[1],
                               rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def compiled():
    c = at.compile(_trajectory, THETA)
    for _ in range(COMPILE_LOOP_AFTER + 1):   # (the loop body compiled, as in steady use)
        c.jacfwd(THETA)
    return c


@TRAJECTORY
def test_trajectory_jacfwd_autotape(benchmark, compiled):
    _check(compiled.jacfwd(THETA).numpy())
    benchmark.pedantic(lambda: compiled.jacfwd(THETA), rounds=200, warmup_rounds=5)


@TRAJECTORY
def test_trajectory_jacrev_autotape(benchmark, compiled):
    _check(compiled.jacrev(THETA).numpy())
    benchmark.pedantic(lambda: compiled.jacrev(THETA), rounds=3, warmup_rounds=1)


@TRAJECTORY
def test_trajectory_jacfwd_jax(benchmark, jax):
    f = jax.jit(jax.jacfwd(W.pendulum_trajectory_jax(jax, STEPS)))
    _check(f(THETA))
    benchmark.pedantic(lambda: f(THETA).block_until_ready(), rounds=200, warmup_rounds=5)


@TRAJECTORY
def test_trajectory_numba_floor(benchmark):
    W.pendulum_trajectory_numba(THETA, STEPS)
    benchmark.pedantic(lambda: W.pendulum_trajectory_numba(THETA, STEPS), rounds=200,
                       warmup_rounds=5)


# ---- eager: autotape.func.jacfwd over f's recording ------------------------------------------

EAGER_STEPS = 200
EAGER = pytest.mark.benchmark(
    group="forward mode, eager: pendulum trajectory Jacobian, 200 RK4 steps, 400 x 4")


def _trajectory_torch(torch, theta):
    return W.pendulum_trajectory(theta, EAGER_STEPS, torch.sin, torch.stack)


def _eager_check(J):
    np.testing.assert_allclose(np.asarray(J), W.pendulum_trajectory_numba(
        THETA, EAGER_STEPS)[1], rtol=1e-9, atol=1e-12)


@EAGER
def test_eager_jacfwd_autotape(benchmark):
    f = at.func.jacfwd(lambda t: W.pendulum_trajectory_at(t, EAGER_STEPS))
    _eager_check(f(THETA).numpy())
    benchmark.pedantic(lambda: f(THETA), rounds=20, warmup_rounds=2)


@EAGER
def test_eager_jacrev_autotape(benchmark):
    f = at.func.jacrev(lambda t: W.pendulum_trajectory_at(t, EAGER_STEPS))
    _eager_check(f(THETA).numpy())
    benchmark.pedantic(lambda: f(THETA), rounds=5, warmup_rounds=1)


@EAGER
def test_eager_jacfwd_torch(benchmark, torch):
    f = torch.func.jacfwd(lambda t: _trajectory_torch(torch, t))
    t = torch.tensor(THETA)
    _eager_check(f(t).numpy())
    benchmark.pedantic(lambda: f(t), rounds=20, warmup_rounds=2)
