"""Hessian of the 100-dimensional extended Rosenbrock function.

autotape: one recorded gradient (create_graph=True), then 100 compiled sweeps of it,
one per row (grad of the gradient with a one-hot grad_output).
"""
import numpy as np
import pytest

import autotape as at

N = 100
X = np.random.default_rng(0).uniform(-1.5, 1.5, N)
EYE = np.eye(N)
GROUP = pytest.mark.benchmark(group="Rosenbrock n=100: Hessian")


def rosenbrock(x):
    a, b = x[0::2], x[1::2]
    return (100.0 * (b - a ** 2) ** 2 + (1.0 - a) ** 2).sum()


@GROUP
def test_autotape(benchmark):
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
    benchmark.pedantic(lambda: hessian(rosenbrock, x, vectorize=True), rounds=10,
                       warmup_rounds=1)


@GROUP
def test_torch_func(benchmark, torch):
    h = torch.func.hessian(rosenbrock)
    x = torch.tensor(X)
    benchmark.pedantic(lambda: h(x), rounds=10, warmup_rounds=1)


@GROUP
def test_jax_jit(benchmark, jax):
    h = jax.jit(jax.hessian(rosenbrock))
    x = jax.numpy.asarray(X)
    h(x).block_until_ready()
    benchmark.pedantic(lambda: h(x).block_until_ready(), rounds=20)


@GROUP
def test_hips_autograd(benchmark, hips):
    h = hips.hessian(rosenbrock)
    benchmark.pedantic(lambda: h(X), rounds=5, warmup_rounds=1)
