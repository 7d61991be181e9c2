"""The zoo (zoo.py): nine simulations written as scientists write them, value +
gradient with ``at.compile`` beside ``jax.jit`` (the loop a ``lax.fori_loop``) and a
numba forward-only run (the floor), each group one model; gradients checked against
jax's. ``at.jit`` of the numba versions where it records them; the ensemble: 1024
driven pendulums through vmap.

    python -m pytest benchmarks/test_zoo.py --benchmark-json=zoo.json
    python benchmarks/report.py zoo.json
"""
import time

import numpy as np
import pytest

import autotape as at
import autotape.func as F
import zoo

ROUNDS = dict(rounds=20, warmup_rounds=3)
ROUND_MIN = 200e-6          # s: a round of a few-microsecond model repeats its call (one
                            # call a round timed the timer and cold caches: the epidemic's
                            # floor read 1.8 us a call, 1.4 in a loop)


def _timed(benchmark, fn):
    """benchmark.pedantic of fn, each round calling it enough times to last ROUND_MIN."""
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    benchmark.pedantic(fn, iterations=max(1, round(ROUND_MIN / max(once, 1e-9))), **ROUNDS)


def _group(name):
    return pytest.mark.benchmark(group=f"zoo: {name}, value + gradient")


def _compiled(name):
    p = zoo.PARAMS[name]
    c = at.compile(getattr(zoo, name), p)
    c.value_and_grad(p)
    return c.wait_compiled(), p


@pytest.mark.parametrize("name", zoo.MODELS)
def test_autotape(benchmark, name):
    benchmark.group = f"zoo: {name}, value + gradient"
    c, p = _compiled(name)
    lean = next(iter(c._programs.values())).lean
    benchmark.extra_info["loop"] = None if lean is None else lean.loop
    _timed(benchmark, lambda: c.value_and_grad(p))


@pytest.mark.parametrize("name", zoo.MODELS)
def test_jax(benchmark, jax, name):
    benchmark.group = f"zoo: {name}, value + gradient"
    p = zoo.PARAMS[name]
    f = jax.jit(jax.value_and_grad(getattr(zoo, name + "_jax")(jax)))
    value, g = f(p)
    c, _ = _compiled(name)
    mine, my_g = c.value_and_grad(p)
    np.testing.assert_allclose(mine.item(), float(value), rtol=1e-9)
    np.testing.assert_allclose(my_g.numpy(), np.asarray(g), rtol=1e-7, atol=1e-12)
    _timed(benchmark, lambda: f(p)[1].block_until_ready())


@pytest.mark.parametrize("name", zoo.MODELS)
def test_numba_forward_floor(benchmark, name):
    benchmark.group = f"zoo: {name}, value + gradient"
    p = zoo.PARAMS[name]
    f = getattr(zoo, name + "_numba")
    c, _ = _compiled(name)
    np.testing.assert_allclose(f(p), c(p).item(), rtol=1e-9)
    _timed(benchmark, lambda: f(p))


@pytest.mark.parametrize("name", zoo.MODELS)
def test_at_jit_of_the_numba_version(benchmark, name):
    benchmark.group = f"zoo: {name}, value + gradient"
    p = zoo.PARAMS[name]
    f = at.jit(getattr(zoo, name + "_numba"))
    try:
        f.value_and_grad(p)                  # (records; its recorder compiles, per process)
    except TypeError as e:                   # a construct at.jit does not record yet
        pytest.skip(str(e).splitlines()[0][:200])
    c, _ = _compiled(name)
    np.testing.assert_allclose(f.grad(p).numpy(), c.grad(p).numpy(), rtol=1e-9, atol=1e-12)
    for program in f._programs.values():
        if program:
            program[0].wait_compiled()
    start = time.perf_counter()
    f.value_and_grad(p)
    if time.perf_counter() - start > 0.5:    # array code written element by element
        pytest.skip(f"at.jit of {name}_numba records its arrays element by element: "
                    f"{time.perf_counter() - start:.2f} s a call")
    _timed(benchmark, lambda: f.value_and_grad(p))


# ---- the ensemble: 1024 driven pendulums through vmap ------------------------------------------

ENSEMBLE = pytest.mark.benchmark(group="zoo: ensemble of 1024 driven pendulums, value + "
                                       "gradient")
POINTS = zoo.PARAMS["driven_pendulum"] * np.random.default_rng(1).uniform(0.8, 1.2, (1024, 4))


@ENSEMBLE
def test_ensemble_autotape(benchmark):
    c, _ = _compiled("driven_pendulum")
    run = F.vmap(c.value_and_grad)
    run(POINTS)
    c.wait_compiled()
    benchmark.pedantic(lambda: run(POINTS), rounds=5, warmup_rounds=1)


@ENSEMBLE
def test_ensemble_jax(benchmark, jax):
    f = jax.jit(jax.vmap(jax.value_and_grad(zoo.driven_pendulum_jax(jax))))
    value, g = f(POINTS)
    c, _ = _compiled("driven_pendulum")
    np.testing.assert_allclose(F.vmap(c.grad)(POINTS[:8]).numpy(), np.asarray(g)[:8],
                               rtol=1e-7)
    benchmark.pedantic(lambda: f(POINTS)[1].block_until_ready(), rounds=5, warmup_rounds=1)
