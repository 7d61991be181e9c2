"""ODE solves (issue #29): Lotka-Volterra with adaptive Dormand-Prince steps, value and
gradient with respect to the four rates, 11 output times; autotape's compiled
solve_ivp paired round by round with diffrax's Dopri5 under jax.jit (same tolerances,
PID controller with its defaults, RecursiveCheckpointAdjoint), one thread each. The
issue's target: <= 1.0x diffrax.

    python -m pytest benchmarks/test_integrate.py --benchmark-json=integrate.json
"""
import numpy as np
import pytest

import autotape as at
from autotape.integrate import solve_ivp
from conftest import run_paired

P0 = np.array([1.5, 1.0, 3.0, 1.0])
Y0 = np.array([1.0, 1.0])
TIMES = np.linspace(0.0, 10.0, 11)
RTOL, ATOL = 1e-6, 1e-8


def lotka_volterra(t, y, p):
    return at.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])


def misfit(p):
    sol = solve_ivp(lotka_volterra, (0.0, 10.0), Y0, t_eval=TIMES, args=(p,), rtol=RTOL,
                    atol=ATOL, max_steps=300)
    return (sol.y ** 2).sum()


def test_lotka_volterra_paired_with_diffrax(benchmark, jax):
    diffrax = pytest.importorskip("diffrax")
    jnp = jax.numpy

    def field(t, y, p):
        return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])

    def their_misfit(p):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(field), diffrax.Dopri5(), 0.0, 10.0, None,
                                  jnp.asarray(Y0), args=p,
                                  saveat=diffrax.SaveAt(ts=jnp.asarray(TIMES)),
                                  stepsize_controller=diffrax.PIDController(rtol=RTOL,
                                                                            atol=ATOL),
                                  max_steps=300)
        return jnp.sum(sol.ys ** 2)
    theirs = jax.jit(jax.value_and_grad(their_misfit))
    compiled = at.compile(misfit, P0)
    compiled.value_and_grad(P0)
    compiled.wait_compiled()
    value, grad = compiled.value_and_grad(P0)
    their_value, their_grad = theirs(jnp.asarray(P0))
    np.testing.assert_allclose(float(value), float(their_value), rtol=1e-5)
    # (different step sequences, the same problem: agreement to the tolerances)
    np.testing.assert_allclose(grad.numpy(), np.asarray(their_grad), rtol=1e-3)
    benchmark.group = "Lotka-Volterra, adaptive Dopri5, value + gradient"
    run_paired(benchmark, lambda: compiled.value_and_grad(P0),
               lambda: [a.block_until_ready() for a in theirs(jnp.asarray(P0))],
               "autotape_over_diffrax", rounds=100)
