"""The zoo's ratios timed in pairs: this VM's speed swings by half within minutes, so a
model's ``at.compile`` call, its ``at.jit`` call (of the numba version) and the numba
forward floor are timed in turn, round after round, in one process, and the fastest of
each compared:

    PYTHONPATH=benchmarks python benchmarks/zoo_pairs.py [model ...]

prints, per model, at.jit / at.compile and at.compile / the floor (value + gradient
against a value alone). The pytest-benchmark suite (``test_zoo.py``) holds the
comparisons with jax; this script is for ratios that must hold through the noise.
"""
import sys
import time

import numpy as np

import autotape as at
import zoo

ROUNDS, CALLS = 15, 3


def fastest(call, p):
    """The fastest of CALLS calls."""
    best = float("inf")
    for _ in range(CALLS):
        start = time.perf_counter()
        call(p)
        best = min(best, time.perf_counter() - start)
    return best


def pairs(name):
    """(at.jit / at.compile, at.compile / floor, at.compile's time in us) for a model."""
    p = zoo.PARAMS[name]
    floor = getattr(zoo, name + "_numba")
    jitted = at.jit(floor)
    compiled = at.compile(getattr(zoo, name), p)
    jitted.value_and_grad(p)
    for program in jitted._programs.values():
        if program:
            program[0].wait_compiled()
    compiled.value_and_grad(p)
    compiled.wait_compiled()
    np.testing.assert_allclose(jitted.grad(p).numpy(), compiled.grad(p).numpy(), rtol=1e-9,
                               atol=1e-12)
    floor(p)
    times = np.array([[fastest(f, p) for f in (jitted.value_and_grad,
                                               compiled.value_and_grad, floor)]
                      for _ in range(ROUNDS)]).min(axis=0)
    return times[0] / times[1], times[1] / times[2], times[1] * 1e6


if __name__ == "__main__":
    for model in sys.argv[1:] or zoo.MODELS:
        by_jit, by_floor, us = pairs(model)
        print(f"{model:20s} at.jit / at.compile {by_jit:5.2f}   at.compile / floor "
              f"{by_floor:5.2f}   ({us:8.1f} us)", flush=True)
