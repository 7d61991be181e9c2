"""Sparse Jacobians (autotape/sparse.py): the pattern found from the recording equals the
true one, the colouring is proper and small, and the values equal the dense Jacobian's,
for several arguments and outputs, reductions, gathers and where; a function that does
not run as a lean program gets its dense Jacobian's nonzeros."""
import numpy as np
import pytest
import scipy.sparse

import autotape as at
import autotape.sparse as ats
from fd import central_jacobian

K = np.array([0.3, 1.5])


def reaction_diffusion(u):
    lap = np.roll(u, 1) - 2.0 * u + np.roll(u, -1)
    return K[0] * lap + K[1] * u * (1.0 - u) + at.sin(u)


def _dense(c, *args):
    blocks = c.jacobian(*args)
    return blocks.numpy().reshape(-1, sum(a.size for a in args))


def _proper(pattern, colours):
    """No two columns of one colour share a row."""
    for r in range(pattern.shape[0]):
        cols = pattern.indices[pattern.indptr[r]:pattern.indptr[r + 1]]
        assert len(set(colours[cols].tolist())) == cols.size


def test_a_periodic_stencil_has_its_band():
    n = 50
    u = np.random.default_rng(0).uniform(0, 1, n)
    c = at.compile(reaction_diffusion, u)
    pattern = ats.sparsity(c, u)
    i = np.arange(n)
    want = np.zeros((n, n), bool)
    want[i, i] = want[i, (i + 1) % n] = want[i, (i - 1) % n] = True
    assert isinstance(pattern, scipy.sparse.csr_matrix)
    np.testing.assert_array_equal(pattern.toarray(), want)
    colours = ats.colours(c, u)
    assert colours.max() + 1 <= 5                     # (3, and 2 more where it wraps)
    _proper(pattern, colours)
    J = ats.jacobian(c, u)
    assert isinstance(J, scipy.sparse.csr_matrix) and J.nnz == 3 * n
    np.testing.assert_allclose(J.toarray(), _dense(c, u), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(J.toarray(), central_jacobian(
        lambda v: reaction_diffusion(at.tensor(v)).numpy(), u), rtol=1e-6, atol=1e-9)
    u2 = u[::-1].copy()                               # (another point, the same pattern)
    np.testing.assert_allclose(ats.jacobian(c, u2).toarray(), _dense(c, u2), rtol=1e-13,
                               atol=1e-15)


def test_a_band_with_boundaries_takes_three_colours_for_ten_thousand_columns():
    def heat(u):                                      # (fixed ends: concatenate)
        inner = u[:-2] - 2.0 * u[1:-1] + u[2:]
        return at.concatenate([u[:1] * 0.0, inner, u[-1:] * 0.0]) + at.tanh(u)
    u = np.linspace(0.0, 1.0, 10_000)
    c = at.compile(heat, u)
    colours = ats.colours(c, u)
    assert colours.max() + 1 == 3
    pattern = ats.sparsity(c, u)
    assert pattern.nnz == 3 * 10_000 - 4
    _proper(pattern, colours)
    J = ats.jacobian(c, u)
    i = np.arange(1, 9_999)
    np.testing.assert_allclose(J[i, i].A1, -2.0 + 1.0 - np.tanh(u[i]) ** 2, rtol=1e-14)
    np.testing.assert_array_equal(J[i, i + 1].A1, 1.0)
    np.testing.assert_array_equal(J[i, i - 1].A1, 1.0)


def test_several_arguments_and_outputs_sums_and_where():
    def f(u, w):
        blocks = u.reshape(3, 4).sum(axis=1)          # rows: 4 inputs each
        gated = at.where(u > 0.5, u * w[0], 0.0)      # the condition passes nothing
        return blocks * w[1], gated, (u * u).sum()
    u = np.random.default_rng(1).uniform(0, 1, 12)
    w = np.array([2.0, 3.0])
    c = at.compile(f, u, w)
    J = ats.jacobian(c, u, w).toarray()
    dense = ats._dense(c, [u, w])
    np.testing.assert_allclose(J, dense, rtol=1e-13, atol=1e-15)
    pattern = ats.sparsity(c, u, w).toarray()
    assert pattern.shape == (3 + 12 + 1, 14)
    for r in range(3):                                # block sums and w[1]
        assert pattern[r].nonzero()[0].tolist() == list(range(4 * r, 4 * r + 4)) + [13]
    for e in range(12):                               # u[e] and w[0], never another u
        assert pattern[3 + e].nonzero()[0].tolist() == [e, 12]
    assert pattern[15].nonzero()[0].tolist() == list(range(12))
    _proper(ats.sparsity(c, u, w), ats.colours(c, u, w))


def test_a_function_off_the_lean_program_gets_its_dense_jacobians_nonzeros():
    def guarded(u):
        return u * 2.0 if u.sum() > 0 else u * 3.0    # a guard: the tape path
    u = np.array([1.0, 2.0, 3.0])
    c = at.compile(guarded, u)
    np.testing.assert_array_equal(ats.jacobian(c, u).toarray(), 2.0 * np.eye(3))
    np.testing.assert_array_equal(ats.sparsity(c, u).toarray(), np.eye(3, dtype=bool))


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="expected a Compiled"):
        ats.jacobian(lambda u: u, np.ones(2))


def test_usable_as_jac_for_solve_ivp_and_least_squares():
    integrate = pytest.importorskip("scipy.integrate")
    optimize = pytest.importorskip("scipy.optimize")
    n = 200

    def rhs(u):                                       # stiff: fast diffusion
        inner = 400.0 * (u[:-2] - 2.0 * u[1:-1] + u[2:]) + u[1:-1] * (1.0 - u[1:-1])
        return at.concatenate([u[:1] * 0.0, inner, u[-1:] * 0.0])
    u0 = np.sin(np.linspace(0.0, np.pi, n)) ** 2
    c = at.compile(rhs, u0)
    solved = integrate.solve_ivp(lambda t, y: c(y).numpy(), (0.0, 0.05), u0, method="BDF",
                                 jac=lambda t, y: ats.jacobian(c, y), rtol=1e-8, atol=1e-10)
    plain = integrate.solve_ivp(lambda t, y: c(y).numpy(), (0.0, 0.05), u0, method="BDF",
                                rtol=1e-8, atol=1e-10)
    assert solved.success and solved.njev >= 1
    np.testing.assert_allclose(solved.y[:, -1], plain.y[:, -1], rtol=1e-5, atol=1e-7)

    target = rhs(at.tensor(u0 * 0.9)).numpy()         # u with rhs(u) = target
    fit = optimize.least_squares(lambda v: c(v).numpy() - target, u0, method="trf",
                                 jac=lambda v: ats.jacobian(c, v), x_scale="jac")
    assert fit.success
    np.testing.assert_allclose(c(fit.x).numpy(), target, atol=1e-6)
