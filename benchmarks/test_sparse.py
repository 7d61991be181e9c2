"""Sparse Jacobians (autotape.sparse): the 1-D reaction-diffusion right-hand side with
10^4 states (periodic: np.roll), its whole Jacobian as a scipy.sparse matrix (the pattern
found from the recording, four colours, one forward pass with a lane per colour), paired
round by round with one reverse gradient of its sum (issue #29: <= 5x).

    python -m pytest benchmarks/test_sparse.py --benchmark-json=sparse.json
"""
import numpy as np
import pytest

import autotape as at
from conftest import run_paired

ats = pytest.importorskip("autotape.sparse")
N = 10_000
RATES = np.array([0.3, 1.5])


def rhs(u):
    lap = np.roll(u, 1) - 2.0 * u + np.roll(u, -1)
    return RATES[0] * lap + RATES[1] * u * (1.0 - u)


def test_jacobian_paired_with_one_gradient(benchmark):
    u = np.random.default_rng(0).uniform(0.0, 1.0, N)
    c, g = at.compile(rhs, u), at.compile(lambda v: rhs(v).sum(), u)
    J = ats.jacobian(c, u)
    assert J.nnz == 3 * N and int(ats.colours(c, u).max()) + 1 <= 4
    np.testing.assert_allclose(np.asarray(J.sum(axis=0)).ravel(), g.grad(u).numpy(),
                               rtol=1e-12, atol=1e-12)
    c.wait_compiled(), g.wait_compiled()
    benchmark.group = "sparse Jacobian: reaction-diffusion, 10^4 states"
    run_paired(benchmark, lambda: ats.jacobian(c, u), lambda: g.grad(u),
               "jacobian_over_one_gradient", rounds=300)


def chain_energy(x):
    return ((x[1:] - x[:-1] ** 2) ** 2).sum() + at.cos(x).sum()


def test_hessian_paired_with_one_gradient(benchmark):
    # a chain's tridiagonal Hessian, 10^4 variables: three colours of a star colouring,
    # one forward-over-reverse pass with three lanes
    x = np.random.default_rng(0).uniform(-1.0, 1.0, N)
    c = at.compile(chain_energy, x)
    H = ats.hessian(c, x)
    assert H.nnz == 3 * N - 2 and int(ats.star_colours(c, x).max()) + 1 == 3
    c.wait_compiled()
    benchmark.group = "sparse Hessian: a chain, 10^4 variables"
    run_paired(benchmark, lambda: ats.hessian(c, x), lambda: c.grad(x),
               "hessian_over_one_gradient", rounds=200)
