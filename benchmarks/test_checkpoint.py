"""Checkpointing (issue: custom ops, hooks, forward mode and checkpointing): the
pendulum, RK4, 10^4 steps, value + 4-gradient, compiled with every value stored and
with ``checkpoint="sqrt"`` (segments of sqrt(steps) repetitions, recomputed in the
sweep). Each benchmark records its call's peak allocation (tracemalloc: every array
the call allocates, values and adjoints) in extra_info, in bytes and in repetitions'
worth (one repetition's slots x 8 bytes); results are checked equal.

    python -m pytest benchmarks/test_checkpoint.py --benchmark-json=checkpoint.json
    python benchmarks/report.py checkpoint.json
"""
import tracemalloc

import numpy as np
import pytest

import autotape as at
import workloads as W
from autotape import program
from autotape.thread_state import here

STEPS = 10_000
THETA = np.array([1.0, 0.0, 9.8, 0.1])
GROUP = pytest.mark.benchmark(group="checkpointing: pendulum RK4 10^4 steps, value + "
                                    "4-gradient")


def _pendulum(theta):
    return W.pendulum_at(theta, STEPS)


@pytest.fixture(scope="module")
def programs():
    plain = at.compile(_pendulum, THETA)
    segmented = at.compile(_pendulum, THETA, checkpoint="sqrt")
    for _ in range(program.COMPILE_LOOP_AFTER + 1):
        plain.value_and_grad(THETA)
        segmented.value_and_grad(THETA)
    want = W.pendulum_numba(THETA, STEPS)[1]
    np.testing.assert_allclose(plain.grad(THETA).numpy(), want, rtol=1e-9)
    np.testing.assert_array_equal(segmented.grad(THETA).numpy(), plain.grad(THETA).numpy())
    return plain, segmented


def _peak(benchmark, c):
    saved = program.KEEP_PROGRAM_SCRATCH_BYTES
    program.KEEP_PROGRAM_SCRATCH_BYTES = 0             # (the call allocates its scratch afresh)
    here().program_scratch = None
    try:
        tracemalloc.start()
        c.value_and_grad(THETA)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        program.KEEP_PROGRAM_SCRATCH_BYTES = saved
    delta = c._lean("value", [THETA]).lean.loop[3]
    benchmark.extra_info["peak_bytes"] = peak
    benchmark.extra_info["peak_repetitions"] = round(peak / (8 * delta), 1)
    benchmark.extra_info["bar_3_sqrt_steps"] = round(3 * STEPS ** 0.5)


@GROUP
def test_pendulum_10k_every_value_stored(benchmark, programs):
    _peak(benchmark, programs[0])
    benchmark.pedantic(lambda: programs[0].value_and_grad(THETA), rounds=50, warmup_rounds=3)


@GROUP
def test_pendulum_10k_checkpoint_sqrt(benchmark, programs):
    _peak(benchmark, programs[1])
    benchmark.pedantic(lambda: programs[1].value_and_grad(THETA), rounds=50, warmup_rounds=3)
