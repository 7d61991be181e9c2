"""Custom ops (issue: custom ops, hooks, forward mode and checkpointing): an existing
numba solver (the pendulum, 1000 RK4 steps, final state) and its hand-written VJP made
one differentiable op with ``at.custom_op(solver, solver_vjp)``, inside ``at.compile``
with a loss around it (x^2 + v^2), value + 4-gradient; beside calling the two njit
functions directly (the floor: forward, then the VJP at the loss's cotangent).

    python -m pytest benchmarks/test_custom.py --benchmark-json=custom.json
    python benchmarks/report.py custom.json
"""
import numba
import numpy as np
import pytest

import autotape as at
import workloads as W

STEPS = 1000
THETA = np.array([1.0, 0.0, 9.8, 0.1])
GROUP = pytest.mark.benchmark(group="custom op: a numba solver (pendulum RK4 1000 steps) "
                                    "as one op, value + 4-gradient")


@numba.njit
def solver(theta):
    return W.pendulum_state_numba(theta, STEPS)


@numba.njit
def solver_vjp(inputs, state, g):
    return (W.pendulum_state_vjp(inputs[0], STEPS, g),)


def _loss(theta):
    state = at.custom_op(solver, solver_vjp)(theta)
    return (state * state).sum()


def _direct(theta):
    state = solver(theta)
    return (state * state).sum(), solver_vjp((theta,), state, 2.0 * state)[0]


@GROUP
def test_custom_op_compiled_autotape(benchmark):
    c = at.compile(_loss, THETA)
    value, g = c.value_and_grad(THETA)
    want = W.pendulum_numba(THETA, STEPS)
    np.testing.assert_allclose(value.item(), want[0], rtol=1e-12)
    np.testing.assert_allclose(g.numpy(), want[1], rtol=1e-12)
    benchmark.pedantic(lambda: c.value_and_grad(THETA), rounds=300, warmup_rounds=5)


@GROUP
def test_custom_op_direct_njit_calls(benchmark):
    _direct(THETA)
    benchmark.pedantic(lambda: _direct(THETA), rounds=300, warmup_rounds=5)


@GROUP
def test_custom_op_paired_ratio(benchmark):
    """Both back to back per round: extra_info holds the median ratio (compiled /
    direct), the figure the issue's bar (<= 1.2) is about."""
    from conftest import run_paired
    c = at.compile(_loss, THETA)
    c.value_and_grad(THETA)
    run_paired(benchmark, lambda: c.value_and_grad(THETA), lambda: _direct(THETA),
               "compiled_over_direct", rounds=300)


@GROUP
def test_python_driver_paired_with_the_compiled_one(benchmark):
    """What a call costs while a helper compiles the program's driver: the same ranges
    and numba functions called from Python (kernels/calls.py's ``run_in_python``),
    paired round by round with the compiled driver (median ratio python / compiled)."""
    from conftest import run_paired
    compiled, by_python = at.compile(_loss, THETA), at.compile(_loss, THETA)
    want = compiled.value_and_grad(THETA)
    by_python.value_and_grad(THETA)
    driver = by_python._lean("value", [THETA]).lean.driver
    driver.runner = lambda args: None            # (as while the helper compiles)
    got = by_python.value_and_grad(THETA)
    assert got[0].item() == want[0].item() and got[1].numpy().tolist() == \
        want[1].numpy().tolist()
    run_paired(benchmark, lambda: by_python.value_and_grad(THETA),
               lambda: compiled.value_and_grad(THETA), "python_driver_over_compiled",
               rounds=300)
