"""Implicit differentiation (autotape.implicit): roots, fixed points and linear solves,
their gradients against central differences (and closed forms), to second order, in
compiled functions and under vmap; and the errors that keep a gradient from being
silently wrong."""
import subprocess
import sys

import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.implicit import SparseMatrix, fixed_point, linear_solve, newton, root

sp = pytest.importorskip("scipy.sparse")
RNG = np.random.default_rng(3)


def fd_jacobian(fn, p, h=1e-6):
    return np.stack([(np.asarray(fn(p + h * e)) - np.asarray(fn(p - h * e))) / (2 * h)
                     for e in np.eye(p.size)], axis=-1)


def system(x, p):
    return at.stack([x[0] ** 2 + p[0] * x[1] - 3.0,
                     at.sin(x[1]) + p[1] * x[2] - 1.0,
                     x[2] ** 3 - p[2] + x[0]])


def solution(p):
    return root(system, np.ones(3), p)


P0 = np.array([1.0, 0.5, 2.0])


def test_newton_root_jacobian_matches_finite_differences():
    x = solution(at.tensor(P0)).numpy()
    assert np.abs(system(at.tensor(x), at.tensor(P0)).numpy()).max() < 1e-10
    exact = F.jacrev(solution)(P0).numpy()
    numeric = fd_jacobian(lambda p: solution(at.tensor(p)).numpy(), P0)
    np.testing.assert_allclose(exact, numeric, rtol=1e-6, atol=1e-9)


def test_root_second_derivatives():
    H = F.hessian(lambda p: (solution(p) ** 2).sum())(P0).numpy()
    grad = lambda p: F.grad(lambda q: (solution(q) ** 2).sum())(p).numpy()   # noqa: E731
    np.testing.assert_allclose(H, fd_jacobian(grad, P0, 1e-5), rtol=1e-6, atol=1e-8)


def test_fixed_point_and_a_users_solver():
    a = at.tensor(0.5, requires_grad=True)
    x = fixed_point(lambda x, a: a * x + 1.0, np.array(0.0), a)
    assert float(x.detach()) == pytest.approx(2.0)
    assert float(at.grad(x, a)[0]) == pytest.approx(4.0)        # d/da 1 / (1 - a)
    optimize = pytest.importorskip("scipy.optimize")
    x = root(system, np.ones(3), at.tensor(P0, requires_grad=True),
             solve=lambda fun, x0: optimize.root(fun, x0, tol=1e-13).x)
    np.testing.assert_allclose(x.detach().numpy(), solution(at.tensor(P0)).numpy(),
                               atol=1e-10)


def test_root_errors_never_a_silent_gradient():
    k = at.tensor(1.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="solve's answer is no root"):
        root(lambda x, k: x - k, np.array(0.0), k, solve=lambda fun, x0: x0)
    with pytest.raises(RuntimeError, match="no root within"):
        root(lambda x, k: x ** 2 + k, np.array(0.5), k)             # no real root
    with pytest.raises(RuntimeError, match="Jacobian is singular"):
        newton(lambda x: x ** 2 - 1.0, np.array(0.0))
    with pytest.raises(TypeError, match="give the parameters"):
        root(lambda x: x - 1.0, np.array(0.0))
    # a degenerate root: f = (x - k)^2 has df/dx = 0 there
    x = root(lambda x, k: (x - k) ** 3, np.array(1.0), k,
             solve=lambda fun, x0: np.array(1.0))
    with pytest.raises(RuntimeError, match="singular at the root"):
        at.grad(x, k)


def poisson_pattern(n):
    """The 5-point Laplacian's pattern on an n x n grid (Dirichlet boundary)."""
    one = sp.diags([np.ones(n - 1), np.ones(n - 1)], [-1, 1])
    eye = sp.eye(n)
    laplacian = sp.kron(eye, sp.diags([2.0 * np.ones(n)], [0]) - one) + \
        sp.kron(sp.diags([2.0 * np.ones(n)], [0]) - one, eye)
    csr = sp.csr_matrix(laplacian)
    csr.sort_indices()
    return csr


def conductivity_matrix(theta, pattern):
    """The Laplacian's values scaled by a conductivity per row, exp(theta) (recorded)."""
    return SparseMatrix(at.exp(theta)[np.repeat(np.arange(pattern.shape[0]),
                                                np.diff(pattern.indptr))] *
                        pattern.data, pattern)


def test_sparse_poisson_gradient_matches_finite_differences():
    n = 100                                       # 10^4 unknowns
    pattern = poisson_pattern(n)
    N = n * n
    b = RNG.standard_normal(N)
    theta0 = 0.1 * RNG.standard_normal(N)

    def loss(theta, rhs):
        x = linear_solve(conductivity_matrix(theta, pattern), rhs)
        return (x * x).mean()
    theta = at.tensor(theta0, requires_grad=True)
    rhs = at.tensor(b, requires_grad=True)
    g_theta, g_b = at.grad(loss(theta, rhs), [theta, rhs])
    value = lambda t, r: float(loss(at.tensor(t), at.tensor(r)))      # noqa: E731
    scale = np.abs(g_theta.numpy()).max()
    for k in (0, 4321, N - 1):
        e = np.zeros(N)
        e[k] = 1e-3
        numeric = (value(theta0 + e, b) - value(theta0 - e, b)) / 2e-3
        assert g_theta.numpy()[k] == pytest.approx(numeric, rel=1e-6, abs=1e-6 * scale)
        numeric = (value(theta0, b + e) - value(theta0, b - e)) / 2e-3   # (quadratic in b)
        assert g_b.numpy()[k] == pytest.approx(numeric, rel=1e-6)
    x = linear_solve(sp.csr_matrix(pattern), b)            # a constant scipy matrix
    np.testing.assert_allclose(pattern @ x.numpy(), b, atol=1e-9)


def test_sparse_solve_second_derivatives():
    pattern = poisson_pattern(4)
    b = RNG.standard_normal(16)
    f = lambda t: (linear_solve(conductivity_matrix(t, pattern), b) ** 2).sum()  # noqa: E731
    theta0 = 0.1 * RNG.standard_normal(16)
    H = F.hessian(f)(theta0).numpy()
    grad = lambda t: F.grad(f)(t).numpy()                          # noqa: E731
    np.testing.assert_allclose(H, fd_jacobian(grad, theta0, 1e-5), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("method, symmetric", [("cg", True), ("gmres", False)])
def test_matrix_free_solves_and_their_derivatives(method, symmetric):
    m = np.arange(1.0, 6.0)
    M = np.diag(m) + (0.0 if symmetric else 0.3 * np.eye(5, k=1))

    def matvec(v, theta):
        return theta * v + at.tensor(M) @ v
    theta = at.tensor(2.0, requires_grad=True)
    x = linear_solve(matvec, np.ones(5), (theta,), method=method, symmetric=symmetric)
    A = 2.0 * np.eye(5) + M
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.solve(A, np.ones(5)),
                               atol=1e-9)
    g, = at.grad(x.sum(), theta, create_graph=True)
    gg, = at.grad(g, theta)
    Ainv = np.linalg.inv(A)
    ones = np.ones(5)
    assert float(g.detach()) == pytest.approx(-ones @ Ainv @ Ainv @ ones, rel=1e-8)
    assert float(gg) == pytest.approx(2 * ones @ Ainv @ Ainv @ Ainv @ ones, rel=1e-7)


def test_matrix_free_refuses_what_would_go_wrong():
    theta = at.tensor(2.0, requires_grad=True)
    with pytest.raises(ValueError, match="pass them as params"):
        linear_solve(lambda v: theta * v, np.ones(3))
    with pytest.raises(RuntimeError, match="did not converge"):
        linear_solve(lambda v: at.tensor(np.diag([1.0, -1.0, 1e-9])) @ v, np.ones(3),
                     method="cg", maxiter=2)
    with pytest.raises(ValueError, match="'cg' or 'gmres'"):
        linear_solve(lambda v: v, np.ones(3), method="bicg")


def test_roots_in_compiled_functions_and_under_vmap():
    def loss(p):
        return (solution(p) ** 2).sum()
    c = at.compile(loss, P0)
    assert float(c(P0)) == pytest.approx(float(loss(at.tensor(P0))))
    np.testing.assert_allclose(c.grad(P0).numpy(), F.grad(loss)(P0).numpy(), rtol=1e-10)
    points = P0 + 0.05 * RNG.standard_normal((3, 3))
    grads = F.vmap(c.grad)(points)
    for k in range(3):
        np.testing.assert_allclose(grads.numpy()[k], F.grad(loss)(points[k]).numpy(),
                                   rtol=1e-9)


def test_a_sparse_solves_vjp_uses_its_own_values_factors():
    # compiled replays share the op and its kept LU factors: a VJP that follows another
    # values' forward must not use that forward's factors
    pattern = poisson_pattern(5)
    b = RNG.standard_normal(25)
    thetas = 0.2 * RNG.standard_normal((2, 25))
    x = linear_solve(conductivity_matrix(at.tensor(thetas[0], requires_grad=True),
                                         pattern), b)
    op, row = x._tape.customs[x._row], x._row
    values = [x._tape.read(r)[2] for r in x._tape.row(row).operands]
    other = np.exp(thetas[1])[np.repeat(np.arange(25), np.diff(pattern.indptr))] * \
        pattern.data
    op.forward(other, b)                                  # another replay's forward
    g = RNG.standard_normal(25)
    cot_values, cot_b = op.cotangents(values, x.detach().numpy(), g)
    A = SparseMatrix(values[0], pattern).scipy().toarray()
    np.testing.assert_allclose(cot_b, np.linalg.solve(A.T, g), rtol=1e-10)


def test_at_implicit_and_at_sparse_need_no_import_of_their_own():
    code = ("import sys, numpy as np, autotape as at\n"
            "assert 'autotape.implicit' not in sys.modules\n"
            "x = at.implicit.root(lambda x, t: x ** 3 - t, np.array(1.0), at.tensor(8.0))\n"
            "assert abs(float(x) - 2.0) < 1e-12 and callable(at.sparse.hessian)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
