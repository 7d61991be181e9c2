"""Compiled programs (issue: compiled programs at machine speed): the workloads of
workloads.py, steady state, autotape's ``at.compile`` beside ``jax.jit`` (lax.fori_loop)
and a hand-written numba floor, same process, same inputs; every result is checked
against jax's (or numba's) before timing.

    python -m pytest benchmarks/test_compiled.py --benchmark-json=compiled.json
    AUTOTAPE_BENCH_THREADS=all python -m pytest benchmarks/test_compiled.py -k points \\
        --benchmark-json=points.json
"""
import numba
import numpy as np
import pytest

import autotape as at
import autotape.func as F
import workloads as W


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-9,
                               atol=1e-12)


# ---- scalar chain: 100,000 scalar ops ---------------------------------------------------

CHAIN = pytest.mark.benchmark(group="compiled: scalar chain, 100k ops, value + gradient")
X1 = np.array([0.3])


@CHAIN
def test_chain_autotape(benchmark):
    c = at.compile(W.chain_at, X1)
    benchmark.pedantic(lambda: c.value_and_grad(X1), rounds=20, warmup_rounds=5)


@CHAIN
def test_chain_jax(benchmark, jax):
    f = W.chain_jax(jax)
    value, g = f(X1)
    c = at.compile(W.chain_at, X1)
    _close(c.value_and_grad(X1)[0].item(), value)
    _close(c.grad(X1).numpy(), g)
    benchmark.pedantic(lambda: f(X1)[1].block_until_ready(), rounds=20, warmup_rounds=5)


@CHAIN
def test_chain_numba_floor(benchmark):
    W.chain_numba(X1)
    benchmark.pedantic(lambda: W.chain_numba(X1), rounds=20, warmup_rounds=5)


# ---- pendulum, RK4, 1000 steps -------------------------------------------------------------

PENDULUM = pytest.mark.benchmark(group="compiled: pendulum RK4 1000 steps, value + 4-gradient")
THETA = np.array([1.0, 0.0, 9.8, 0.1])


def _pendulum_1000(theta):
    return W.pendulum_at(theta, 1000)


@PENDULUM
def test_pendulum_autotape(benchmark):
    c = at.compile(_pendulum_1000, THETA)
    value, g = W.pendulum_numba(THETA, 1000)
    _close(c.value_and_grad(THETA)[0].item(), value)
    _close(c.grad(THETA).numpy(), g)
    benchmark.pedantic(lambda: c.value_and_grad(THETA), rounds=50, warmup_rounds=5)


DRIVEN = pytest.mark.benchmark(group="compiled: driven pendulum (forcing at t = i h), RK4 "
                                     "1000 steps, value + 4-gradient")


def _driven_1000(theta):
    return W.driven_pendulum_at(theta, 1000)


@DRIVEN
def test_driven_autotape(benchmark):
    c = at.compile(_driven_1000, THETA)
    value, g = W.driven_pendulum_numba(THETA, 1000)
    _close(c.value_and_grad(THETA)[0].item(), value)
    _close(c.grad(THETA).numpy(), g)
    for _ in range(5):                        # (past the calls before the body compiles)
        c.value_and_grad(THETA)
    benchmark.pedantic(lambda: c.value_and_grad(THETA), rounds=50, warmup_rounds=5)


@DRIVEN
def test_driven_jax(benchmark, jax):
    f = jax.jit(jax.value_and_grad(W.driven_pendulum_jax(jax, 1000)))
    _close(f(THETA)[1], W.driven_pendulum_numba(THETA, 1000)[1])
    benchmark.pedantic(lambda: f(THETA)[1].block_until_ready(), rounds=50, warmup_rounds=5)


@DRIVEN
def test_driven_numba_floor(benchmark):
    W.driven_pendulum_numba(THETA, 1000)
    benchmark.pedantic(lambda: W.driven_pendulum_numba(THETA, 1000), rounds=50,
                       warmup_rounds=5)


@PENDULUM
def test_pendulum_jax(benchmark, jax):
    f = jax.jit(jax.value_and_grad(W.pendulum_jax(jax, 1000)))
    _close(f(THETA)[1], W.pendulum_numba(THETA, 1000)[1])
    benchmark.pedantic(lambda: f(THETA)[1].block_until_ready(), rounds=50, warmup_rounds=5)


@PENDULUM
def test_pendulum_numba_floor(benchmark):
    W.pendulum_numba(THETA, 1000)
    benchmark.pedantic(lambda: W.pendulum_numba(THETA, 1000), rounds=50, warmup_rounds=5)


# ---- heat equation -----------------------------------------------------------------------------

HEAT = pytest.mark.benchmark(group="compiled: heat 200 cells x 2000 steps, gradient wrt 200 "
                                   "diffusivities")
D = 0.5 * np.random.default_rng(0).uniform(0.5, 1.5, W.HEAT_CELLS)


@HEAT
def test_heat_autotape(benchmark):
    c = at.compile(W.heat_at, D)
    benchmark.pedantic(lambda: c.value_and_grad(D), rounds=10, warmup_rounds=5)


@HEAT
def test_heat_jax(benchmark, jax):
    f = W.heat_jax(jax)
    c = at.compile(W.heat_at, D)
    value, g = f(D)
    _close(c.value_and_grad(D)[0].item(), value)
    _close(c.grad(D).numpy(), g)
    benchmark.pedantic(lambda: f(D)[1].block_until_ready(), rounds=10, warmup_rounds=5)


# ---- many points: the pendulum (200 steps) at B parameter sets -----------------------------

def _pendulum_200(theta):
    return W.pendulum_at(theta, 200)


@pytest.mark.parametrize("points", [256, 4096])
def test_points_autotape(benchmark, points):
    thetas = W.thetas(points)
    vg = F.vmap(at.compile(_pendulum_200, thetas[0]).value_and_grad)
    values, grads = W.ensemble_numba(thetas, 200)
    got = vg(thetas)
    _close(got[0].numpy(), values)
    _close(got[1].numpy(), grads)
    benchmark.group = f"compiled: {points} points, pendulum 200 steps, loss + gradient each"
    benchmark.pedantic(lambda: vg(thetas), rounds=10, warmup_rounds=5)


@pytest.mark.parametrize("points", [256, 4096])
def test_points_jax(benchmark, jax, points):
    thetas = W.thetas(points)
    f = jax.jit(jax.vmap(jax.value_and_grad(W.pendulum_jax(jax, 200))))
    _close(f(thetas)[1], W.ensemble_numba(thetas, 200)[1])
    benchmark.group = f"compiled: {points} points, pendulum 200 steps, loss + gradient each"
    benchmark.pedantic(lambda: f(thetas)[1].block_until_ready(), rounds=10, warmup_rounds=5)


@pytest.mark.parametrize("points", [256, 4096])
def test_points_numba_floor(benchmark, points):
    thetas = W.thetas(points)
    W.ensemble_numba(thetas, 200)
    benchmark.group = f"compiled: {points} points, pendulum 200 steps, loss + gradient each"
    benchmark.pedantic(lambda: W.ensemble_numba(thetas, 200), rounds=10, warmup_rounds=5)


@pytest.mark.parametrize("threads", [1, 2])
def test_points_scaling_autotape(benchmark, threads):
    """4096 points on 1 and on 2 of numba's threads (run with AUTOTAPE_BENCH_THREADS=all
    on a machine with 2 cores or more)."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("fewer cores than threads")
    thetas = W.thetas(4096)
    vg = F.vmap(at.compile(_pendulum_200, thetas[0]).value_and_grad)
    numba.set_num_threads(threads)
    vg(thetas)
    benchmark.group = "compiled: 4096 points on 1 and 2 threads (scaling)"
    benchmark.pedantic(lambda: vg(thetas), rounds=10, warmup_rounds=5)


# ---- many points: 4096 driven pendulums (forcing from the loop index), both cores ---------------
# (issue #27: against jax.jit(jax.vmap(...)) and a hand-written numba forward-mode loop over
# the points, each on the machine's cores; autotape on one thread and on two)

DRIVEN = "compiled: 4096 driven pendulums (200 steps), loss + gradient each, all cores"


def _driven_200(theta):
    return W.driven_pendulum_at(theta, 200)


def _driven_points():
    return W.thetas(4096)


@pytest.mark.parametrize("threads", [1, 2])
def test_driven_points_autotape(benchmark, threads):
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("fewer cores than threads")
    thetas = _driven_points()
    c = at.compile(_driven_200, thetas[0])
    vg = F.vmap(c.value_and_grad)
    numba.set_num_threads(threads)
    at.set_num_threads(threads)
    got = vg(thetas)
    c.wait_compiled()
    values, grads = W.ensemble_numba(thetas, 200, True)
    _close(vg(thetas)[1].numpy(), grads)
    _close(got[0].numpy(), values)
    benchmark.group = DRIVEN
    benchmark.pedantic(lambda: vg(thetas), rounds=10, warmup_rounds=3)


def test_driven_points_jax(benchmark, jax):
    thetas = _driven_points()
    f = jax.jit(jax.vmap(jax.value_and_grad(W.driven_pendulum_jax(jax, 200))))
    _close(f(thetas)[1], W.ensemble_numba(thetas, 200, True)[1])
    benchmark.group = DRIVEN
    benchmark.pedantic(lambda: f(thetas)[1].block_until_ready(), rounds=10, warmup_rounds=3)


def test_driven_points_numba_forward_mode(benchmark):
    """The floor: forward mode by hand (4 lanes), the points over numba's threads."""
    thetas = _driven_points()
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    W.ensemble_numba(thetas, 200, True)
    benchmark.group = DRIVEN
    benchmark.pedantic(lambda: W.ensemble_numba(thetas, 200, True), rounds=10,
                       warmup_rounds=3)
