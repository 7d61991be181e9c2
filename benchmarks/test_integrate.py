"""ODE solves (issue #29): Lotka-Volterra with adaptive Dormand-Prince steps, value and
gradient with respect to the four rates, 11 output times (and 101, 1001); autotape's compiled
solve_ivp paired round by round with diffrax's Dopri5 under jax.jit (same tolerances,
PID controller with its defaults, RecursiveCheckpointAdjoint), one thread each. The
issue's target: <= 1.0x diffrax. Stiff problems (Van der Pol with mu = 1000 on its
slow manifold, Robertson to t = 1e5): autotape's Rodas4 against diffrax's Kvaerno5
(ESDIRK, its stiff default), rtol 1e-8, atol 1e-10, value and gradient with respect to
the initial state and the parameters. A 1-D reaction-diffusion system of 1000 states
(the Brusselator): Rodas4 with the sparse Jacobian against Kvaerno5.

    python -m pytest benchmarks/test_integrate.py --benchmark-json=integrate.json
"""
import os
import runpy
import time
import tracemalloc

import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.integrate import solve_ivp
from conftest import run_paired

P0 = np.array([1.5, 1.0, 3.0, 1.0])
Y0 = np.array([1.0, 1.0])
TIMES = np.linspace(0.0, 10.0, 11)
RTOL, ATOL = 1e-6, 1e-8


def lotka_volterra(t, y, p):
    return at.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])


def misfit(p, times=TIMES):
    sol = solve_ivp(lotka_volterra, (0.0, 10.0), Y0, t_eval=times, args=(p,), rtol=RTOL,
                    atol=ATOL, max_steps=300)
    return (sol.y ** 2).sum()


def _their_misfit(jax, times=TIMES):
    """misfit with diffrax: Dopri5, its PID controller at the same tolerances."""
    diffrax = pytest.importorskip("diffrax")
    jnp = jax.numpy

    def field(t, y, p):
        return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])

    def their_misfit(p):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(field), diffrax.Dopri5(), 0.0, 10.0, None,
                                  jnp.asarray(Y0), args=p,
                                  saveat=diffrax.SaveAt(ts=jnp.asarray(times)),
                                  stepsize_controller=diffrax.PIDController(rtol=RTOL,
                                                                            atol=ATOL),
                                  max_steps=300)
        return jnp.sum(sol.ys ** 2)
    return their_misfit


def _paired_with_diffrax(benchmark, jax, times, rounds):
    """The misfit at ``times``, value and gradient, compiled against diffrax under
    jax.jit, round by round."""
    jnp = jax.numpy
    theirs = jax.jit(jax.value_and_grad(_their_misfit(jax, times)))
    compiled = at.compile(lambda p: misfit(p, times), P0)
    compiled.value_and_grad(P0)
    compiled.wait_compiled()
    value, grad = compiled.value_and_grad(P0)
    their_value, their_grad = theirs(jnp.asarray(P0))
    np.testing.assert_allclose(float(value), float(their_value), rtol=1e-5)
    # (different step sequences, the same problem: agreement to the tolerances)
    np.testing.assert_allclose(grad.numpy(), np.asarray(their_grad), rtol=1e-3)
    run_paired(benchmark, lambda: compiled.value_and_grad(P0),
               lambda: [a.block_until_ready() for a in theirs(jnp.asarray(P0))],
               "autotape_over_diffrax", rounds=rounds)


def test_lotka_volterra_paired_with_diffrax(benchmark, jax):
    benchmark.group = "Lotka-Volterra, adaptive Dopri5, value + gradient"
    _paired_with_diffrax(benchmark, jax, TIMES, rounds=100)


@pytest.mark.parametrize("count", [101, 1001])
def test_lotka_volterra_many_output_times_paired_with_diffrax(benchmark, jax, count):
    # t_eval as scientists give it (np.linspace(0, 10, 1001)): each output time is
    # interpolated once, from the attempt a search finds; until 2026-11-29 every time
    # was interpolated (masked) at every attempt: 401 times took 3.9x diffrax's time
    benchmark.group = f"Lotka-Volterra, {count} output times, value + gradient"
    _paired_with_diffrax(benchmark, jax, np.linspace(0.0, 10.0, count), rounds=50)


def test_lotka_volterra_1024_points_paired_with_diffrax_vmap(benchmark, jax):
    # 1024 parameter points, each with its own adaptive steps: autotape's compiled solve
    # under vmap (every point runs all max_steps attempts, those after its end doing
    # nothing) against jax.jit(jax.vmap(...)) of diffrax (a batched while loop that runs
    # until the slowest point is done); value + gradient of each point's misfit
    jnp = jax.numpy
    points = P0 * np.random.default_rng(0).uniform(0.9, 1.1, (1024, 4))
    theirs = jax.jit(jax.vmap(jax.value_and_grad(_their_misfit(jax))))
    compiled = at.compile(misfit, P0)
    compiled.value_and_grad(P0)
    compiled.wait_compiled()
    ours = F.vmap(compiled.value_and_grad)
    values, grads = ours(points)
    their_values, their_grads = theirs(jnp.asarray(points))
    np.testing.assert_allclose(values.numpy(), np.asarray(their_values), rtol=1e-5)
    their_grads = np.asarray(their_grads)        # (different steps: to the tolerances)
    assert np.abs(grads.numpy() - their_grads).max() <= 1e-3 * np.abs(their_grads).max()
    benchmark.group = "Lotka-Volterra, 1024 points under vmap, value + gradient"
    run_paired(benchmark, lambda: ours(points),
               lambda: [a.block_until_ready() for a in theirs(jnp.asarray(points))],
               "autotape_over_diffrax", rounds=5)


def _van_der_pol(np_):
    def field(t, y, p):
        return np_.stack([y[1], p[0] * (1 - y[0] ** 2) * y[1] - y[0]])
    return field


def _robertson(np_):
    def field(t, y, k):
        return np_.stack([-k[0] * y[0] + k[2] * y[1] * y[2],
                          k[0] * y[0] - k[2] * y[1] * y[2] - k[1] * y[1] ** 2,
                          k[1] * y[1] ** 2])
    return field


STIFF = {"van_der_pol": (_van_der_pol, np.array([2.0, 0.0]), np.array([1000.0]), 500.0),
         "robertson": (_robertson, np.array([1.0, 0.0, 0.0]), np.array([0.04, 3e7, 1e4]),
                       1e5)}


@pytest.mark.parametrize("name", sorted(STIFF))
def test_stiff_paired_with_diffrax(benchmark, jax, name):
    diffrax = pytest.importorskip("diffrax")
    jnp = jax.numpy
    make, y0, p0, t1 = STIFF[name]
    times = np.linspace(0.0, t1, 6)
    rtol, atol = 1e-8, 1e-10

    def misfit(y, p):
        sol = solve_ivp(make(at), (0.0, t1), y, method="Rodas4", t_eval=times, args=(p,),
                        rtol=rtol, atol=atol, max_steps=1500)
        return (sol.y ** 2).sum() + sol.status

    def their_misfit(y, p):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(make(jnp)), diffrax.Kvaerno5(), 0.0, t1,
                                  None, y, args=p, saveat=diffrax.SaveAt(ts=jnp.asarray(times)),
                                  stepsize_controller=diffrax.PIDController(rtol=rtol,
                                                                            atol=atol),
                                  max_steps=100000)
        return jnp.sum(sol.ys ** 2)
    theirs = jax.jit(jax.value_and_grad(their_misfit, argnums=(0, 1)))
    compiled = at.compile(misfit, y0, p0)
    compiled.value_and_grad(y0, p0)
    compiled.wait_compiled()
    value, grads = compiled.value_and_grad(y0, p0)
    their_value, their_grads = theirs(jnp.asarray(y0), jnp.asarray(p0))
    np.testing.assert_allclose(float(value), float(their_value), rtol=1e-7)
    for ours, their in zip(grads, their_grads):
        scale = np.abs(np.asarray(their)).max()
        np.testing.assert_allclose(ours.numpy(), np.asarray(their), rtol=1e-4,
                                   atol=1e-5 * scale)
    benchmark.group = f"{name}, stiff, value + gradient"
    run_paired(benchmark, lambda: compiled.value_and_grad(y0, p0),
               lambda: jax.tree_util.tree_map(
                   lambda a: a.block_until_ready(),
                   theirs(jnp.asarray(y0), jnp.asarray(p0))),
               "autotape_over_diffrax", rounds=30)


def test_reaction_diffusion_1000_states_against_diffrax(benchmark, jax):
    """1000 states (500 cells, two species), t in [0, 10], rtol 1e-6: autotape's
    compiled Rodas4 with jac_sparsity="auto" (6 reverse lanes for J, a sparse LU per
    step) against diffrax's Kvaerno5 (dense J and LU: it has no sparse solver), value and
    gradient of the final state's squares with respect to y0 and (A, B, alpha).
    diffrax runs once (compiled ahead, not timed): about 3 minutes."""
    diffrax = pytest.importorskip("diffrax")
    jnp = jax.numpy
    example = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "examples",
                                          "reaction_diffusion.py"))
    cells = 500
    y0, p0 = example["initial_state"](cells), np.array([1.0, 3.0, 0.02])
    ours_field = example["brusselator"](cells)
    their_field = example["brusselator"](cells, jnp.concatenate)

    def misfit(y, p):
        sol = solve_ivp(ours_field, (0.0, 10.0), y, method="Rodas4", args=(p,), rtol=1e-6,
                        atol=1e-8, jac_sparsity="auto", max_steps=200)
        return (sol.y[:, -1] ** 2).sum() + sol.status

    def their_misfit(y, p):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(their_field), diffrax.Kvaerno5(), 0.0,
                                  10.0, None, y, args=p,
                                  stepsize_controller=diffrax.PIDController(rtol=1e-6,
                                                                            atol=1e-8),
                                  max_steps=4096)
        return jnp.sum(sol.ys[-1] ** 2)
    compiled = at.compile(misfit, y0, p0)
    value, grads = compiled.value_and_grad(y0, p0)
    theirs = jax.jit(jax.value_and_grad(their_misfit, argnums=(0, 1))).lower(
        jnp.asarray(y0), jnp.asarray(p0)).compile()
    start = time.perf_counter()
    their_value, their_grads = jax.block_until_ready(theirs(jnp.asarray(y0),
                                                            jnp.asarray(p0)))
    their_time = time.perf_counter() - start
    # two methods' discretisations at rtol 1e-6: they agree to about that
    np.testing.assert_allclose(float(value), float(their_value), rtol=1e-6)
    for ours, their in zip(grads, their_grads):
        np.testing.assert_allclose(ours.numpy(), np.asarray(their), rtol=1e-5,
                                   atol=1e-5 * np.abs(np.asarray(their)).max())
    benchmark.group = "reaction-diffusion, 1000 states, stiff, value + gradient"
    benchmark.pedantic(lambda: compiled.value_and_grad(y0, p0), rounds=5, warmup_rounds=1)
    if benchmark.stats is not None:            # (None under --benchmark-disable)
        benchmark.extra_info["autotape_over_diffrax"] = round(
            benchmark.stats.stats.median / their_time, 4)
    benchmark.extra_info["diffrax_seconds"] = round(their_time, 1)


def _grad_peak_memory(steps, adjoint):
    """(peak bytes numpy and Python allocate while a gradient is taken, steps taken): a
    harmonic oscillator over a horizon long enough for ``steps`` RK45 steps at rtol 1e-8
    (tracemalloc sees numpy's allocations)."""

    def field(t, y, k):
        return at.stack([y[1], -k * y[0]])
    horizon = steps / 13.4                    # (~13.4 steps per unit time at rtol 1e-8)
    k = at.tensor(1.0, requires_grad=True)
    tracemalloc.start()
    sol = solve_ivp(field, (0.0, horizon), np.array([1.0, 0.0]), args=(k,), rtol=1e-8,
                    atol=1e-10, max_steps=4 * steps, adjoint=adjoint)
    at.grad(sol.y[0, -1], k)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, solve_ivp(field, (0.0, horizon), np.array([1.0, 0.0]), args=(1.0,),
                           rtol=1e-8, atol=1e-10, max_steps=4 * steps).nsteps


@pytest.mark.parametrize("adjoint", [None, "backsolve"])
def test_gradient_memory_against_steps(benchmark, adjoint):
    # peak memory of one eager gradient at 500 and 4000 steps: through the solver it
    # grows with the steps (the recording), with the continuous adjoint it does not
    benchmark.group = "solve_ivp gradient: peak memory against steps"
    figures = {}
    for steps in (500, 4000):
        peak, taken = _grad_peak_memory(steps, adjoint)
        figures[f"MB_at_{taken}_steps"] = round(peak / 2 ** 20, 2)
    benchmark.extra_info.update(figures)
    benchmark.pedantic(lambda: None, rounds=1)


def test_backsolve_gradient_of_100000_steps(benchmark):
    """A harmonic oscillator over ~10^5 RK45 steps at rtol 1e-8: the backsolve gradient's
    time (each attempt one call of the compiled step, forward and backward) and, in a
    second run under tracemalloc, its peak memory. Exact: y0(T) = cos T, d/dk = -T sin(T) / 2."""
    def field(t, y, k):
        return at.stack([y[1], -k * y[0]])
    horizon = 100_000 / 13.4

    def gradient():
        k = at.tensor(1.0, requires_grad=True)
        sol = solve_ivp(field, (0.0, horizon), np.array([1.0, 0.0]), args=(k,), rtol=1e-8,
                        atol=1e-10, max_steps=400_000, adjoint="backsolve")
        return at.grad(sol.y[0, -1], k)[0]
    tracemalloc.start()
    g = gradient()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_allclose(float(g), -horizon * np.sin(horizon) / 2, rtol=1e-4)
    benchmark.group = "solve_ivp backsolve gradient, ~10^5 steps"
    benchmark.extra_info["peak_MB_tracemalloc"] = round(peak / 2 ** 20, 1)
    benchmark.pedantic(gradient, rounds=2)
