"""Implicit differentiation (issue #29): the VJP of a sparse linear solve against the
solve itself, a 2-D Poisson problem with 10^4 unknowns whose conductivities are
differentiated (target: VJP <= 2.5x the forward solve). The forward factorises
(scipy's SuperLU) and solves; the VJP solves once with the same factors, transposed,
and gathers -(A^-T g) x^T onto the nonzeros.

    python -m pytest benchmarks/test_implicit.py --benchmark-json=implicit.json
"""
import numpy as np
import pytest

import autotape as at
from conftest import run_paired

sp = pytest.importorskip("scipy.sparse")
N_SIDE = 100


def laplacian(n):
    one = sp.diags([np.ones(n - 1), np.ones(n - 1)], [-1, 1])
    diag = sp.diags([2.0 * np.ones(n)], [0]) - one
    csr = sp.csr_matrix(sp.kron(sp.eye(n), diag) + sp.kron(diag, sp.eye(n)))
    csr.sort_indices()
    return csr


def test_sparse_solve_vjp_paired_with_the_solve(benchmark):
    pattern = laplacian(N_SIDE)
    rows = np.repeat(np.arange(pattern.shape[0]), np.diff(pattern.indptr))
    rng = np.random.default_rng(0)
    theta = at.tensor(0.1 * rng.standard_normal(pattern.shape[0]), requires_grad=True)
    b = rng.standard_normal(pattern.shape[0])

    def solve():
        A = at.implicit.SparseMatrix(at.exp(theta)[rows] * pattern.data, pattern)
        return at.implicit.linear_solve(A, b)
    x = solve()
    loss = (x * x).sum()

    def vjp():
        return at.grad(loss, theta, retain_graph=True)
    benchmark.group = "sparse solve, 2-D Poisson 10^4 unknowns"
    run_paired(benchmark, vjp, solve, "vjp_over_solve", rounds=60)
