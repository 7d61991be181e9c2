"""Hessian of the 100-dimensional extended Rosenbrock function, at one point per call.

autotape: ``at.func.hessian`` records f, records its gradient (create_graph=True), then
sweeps the gradient's tape once with 100 cotangent lanes. ``row_by_row`` is the same
with 100 separate compiled sweeps. ``at.compile(rosenbrock, x).hessian`` records f and
its gradient once and replays them (compiled) per call: the steady state that jax.jit
measures.
"""
import numpy as np
import pytest

import autotape as at
from conftest import run_paired

N = 100
X = np.random.default_rng(0).uniform(-1.5, 1.5, N)
EYE = np.eye(N)
GROUP = pytest.mark.benchmark(group="Rosenbrock n=100: Hessian")


def rosenbrock(x):
    a, b = x[0::2], x[1::2]
    return (100.0 * (b - a ** 2) ** 2 + (1.0 - a) ** 2).sum()


def check(H):
    a, b = X[0::2], X[1::2]
    expected = np.zeros((N, N))
    i = np.arange(0, N, 2)
    expected[i, i] = 1200 * a ** 2 - 400 * b + 2
    expected[i, i + 1] = expected[i + 1, i] = -400 * a
    expected[i + 1, i + 1] = 200
    np.testing.assert_allclose(np.asarray(H), expected, rtol=1e-12, atol=1e-10)


@GROUP
def test_autotape(benchmark):
    hess = at.func.hessian(rosenbrock)
    check(hess(X).numpy())
    benchmark.pedantic(lambda: hess(X), rounds=50, warmup_rounds=2)


@GROUP
def test_autotape_compiled(benchmark):
    """Steady state, as jax.jit: f and its gradient recorded once, then a compiled
    replay of that tape and one sweep with 100 lanes per call."""
    hess = at.compile(rosenbrock, X).hessian
    check(hess(X).numpy())
    benchmark.pedantic(lambda: hess(X), rounds=300, warmup_rounds=5)


@GROUP
def test_autotape_row_by_row(benchmark):
    def hessian():
        x = at.tensor(X, requires_grad=True)
        g, = at.grad(rosenbrock(x), x, create_graph=True)
        return [at.grad(g, x, grad_outputs=at.tensor(EYE[i]), retain_graph=True)[0]
                for i in range(N)]
    benchmark.pedantic(hessian, rounds=10, warmup_rounds=1)


@GROUP
def test_torch_functional_rows(benchmark, torch):
    from torch.autograd.functional import hessian
    x = torch.tensor(X)
    benchmark.pedantic(lambda: hessian(rosenbrock, x, vectorize=False), rounds=5,
                       warmup_rounds=1)


@GROUP
def test_torch_functional_vectorized(benchmark, torch):
    from torch.autograd.functional import hessian
    x = torch.tensor(X)
    check(hessian(rosenbrock, x, vectorize=True))
    benchmark.pedantic(lambda: hessian(rosenbrock, x, vectorize=True), rounds=20,
                       warmup_rounds=1)


@GROUP
def test_torch_func(benchmark, torch):
    h = torch.func.hessian(rosenbrock)
    x = torch.tensor(X)
    check(h(x))
    benchmark.pedantic(lambda: h(x), rounds=10, warmup_rounds=1)


@GROUP
def test_jax_jit(benchmark, jax):
    h = jax.jit(jax.hessian(rosenbrock))
    x = jax.numpy.asarray(X)
    check(h(x))
    benchmark.pedantic(lambda: h(x).block_until_ready(), rounds=200, warmup_rounds=2)


@GROUP
def test_hips_autograd(benchmark, hips):
    h = hips.hessian(rosenbrock)
    check(h(X))
    benchmark.pedantic(lambda: h(X), rounds=5, warmup_rounds=1)


@GROUP
def test_paired_compiled_vs_torch_vectorized(benchmark, torch):
    from torch.autograd.functional import hessian
    ours, x = at.compile(rosenbrock, X).hessian, torch.tensor(X)
    run_paired(benchmark, lambda: ours(X), lambda: hessian(rosenbrock, x, vectorize=True),
               "median autotape compiled / torch functional vectorized")


@GROUP
def test_paired_compiled_vs_jax_jit(benchmark, jax):
    ours, h, x = at.compile(rosenbrock, X).hessian, jax.jit(jax.hessian(rosenbrock)), \
        jax.numpy.asarray(X)
    run_paired(benchmark, lambda: ours(X), lambda: h(x).block_until_ready(),
               "median autotape compiled / jax.jit")
