"""Jacobian of y = tanh(A @ x) * x, 50 -> 50, at one point per call.

autotape: ``at.func.jacrev`` records f and sweeps its tape once with 50 cotangent lanes
(the rows of the identity), as torch's ``is_grads_batched`` and jax's vmap do;
``at.compile(f, x).jacobian`` records once and then replays the tape (compiled) and
sweeps it per call, the steady state that ``jax.jit`` measures.
"""
import numpy as np
import pytest

import autotape as at
from conftest import run_paired

N = 50
rng = np.random.default_rng(0)
A = rng.standard_normal((N, N)) / np.sqrt(N)
X = rng.standard_normal(N)
GROUP = pytest.mark.benchmark(group="Jacobian of tanh(A @ x) * x, 50 -> 50")


def f(lib, A_):
    return lambda x: lib.tanh(A_ @ x) * x


def check(J):
    t = np.tanh(A @ X)
    expected = np.diag(t) + ((1 - t ** 2) * X)[:, None] * A
    np.testing.assert_allclose(np.asarray(J), expected, rtol=1e-12, atol=1e-12)


@GROUP
def test_autotape(benchmark):
    jac = at.func.jacrev(f(at, at.tensor(A)))
    check(jac(X).numpy())
    benchmark.pedantic(lambda: jac(X), rounds=200, warmup_rounds=5)


@GROUP
def test_autotape_compiled(benchmark):
    """Steady state, as jax.jit: recorded once, replayed and swept per call."""
    jac = at.compile(f(at, at.tensor(A)), X).jacobian
    check(jac(X).numpy())
    benchmark.pedantic(lambda: jac(X), rounds=500, warmup_rounds=5)


@GROUP
def test_autotape_row_by_row(benchmark):
    Am = at.tensor(A)

    def rows():
        x = at.tensor(X, requires_grad=True)
        y = f(at, Am)(x)
        return [at.grad(y, x, at.tensor(np.eye(N)[i]), retain_graph=True)[0]
                for i in range(N)]
    benchmark.pedantic(rows, rounds=20, warmup_rounds=1)


@GROUP
def test_torch_functional_vectorized(benchmark, torch):
    from torch.autograd.functional import jacobian
    g, x = f(torch, torch.tensor(A)), torch.tensor(X)
    check(jacobian(g, x, vectorize=True))
    benchmark.pedantic(lambda: jacobian(g, x, vectorize=True), rounds=50, warmup_rounds=2)


@GROUP
def test_torch_func(benchmark, torch):
    jac, x = torch.func.jacrev(f(torch, torch.tensor(A))), torch.tensor(X)
    check(jac(x))
    benchmark.pedantic(lambda: jac(x), rounds=50, warmup_rounds=2)


@GROUP
def test_jax_jit(benchmark, jax):
    jac = jax.jit(jax.jacrev(f(jax.numpy, jax.numpy.asarray(A))))
    x = jax.numpy.asarray(X)
    check(jac(x))
    benchmark.pedantic(lambda: jac(x).block_until_ready(), rounds=500, warmup_rounds=5)


@GROUP
def test_hips_autograd(benchmark, hips):
    import autograd.numpy as anp
    jac = hips.jacobian(f(anp, A))
    check(jac(X))
    benchmark.pedantic(lambda: jac(X), rounds=20, warmup_rounds=1)


@GROUP
def test_paired_compiled_vs_torch_func(benchmark, torch):
    ours = at.compile(f(at, at.tensor(A)), X).jacobian
    jac, x = torch.func.jacrev(f(torch, torch.tensor(A))), torch.tensor(X)
    run_paired(benchmark, lambda: ours(X), lambda: jac(x),
               "median autotape compiled / torch.func.jacrev")


@GROUP
def test_paired_compiled_vs_jax_jit(benchmark, jax):
    ours = at.compile(f(at, at.tensor(A)), X).jacobian
    jac, x = jax.jit(jax.jacrev(f(jax.numpy, jax.numpy.asarray(A)))), jax.numpy.asarray(X)
    run_paired(benchmark, lambda: ours(X), lambda: jac(x).block_until_ready(),
               "median autotape compiled / jax.jit")
