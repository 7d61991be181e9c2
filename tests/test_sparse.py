"""Sparse Jacobians and Hessians (autotape/sparse.py): the pattern found from the
recording equals the true one, the colouring is proper (a star colouring for Hessians)
and small, and the values equal the dense Jacobian's / Hessian's, for several arguments
and outputs, reductions, gathers and where; a function that does not run as a lean
program gets its dense Jacobian's nonzeros."""
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
    def guarded(u):                                   # a guard: the tape path, and the
        return u * 2.0 if u.sum() > 0 else u * np.roll(u, 1)    # other branch's pattern
    u = np.array([1.0, 2.0, 3.0])                               # is not this one's
    c = at.compile(guarded, u)
    np.testing.assert_array_equal(ats.jacobian(c, u).toarray(), 2.0 * np.eye(3))
    assert ats.sparsity(c, u).toarray().all()         # no pattern holds everywhere
    assert ats.recorded_sparsity(c, u) is None
    energy = at.compile(lambda u: guarded(u).sum(), u)
    assert ats.hessian_sparsity(energy, u).toarray().all()


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


# ---- sparse Hessians: a star colouring, symmetry recovers every entry --------------------------

def _star(pattern, colours):
    """Adjacent vertices differ, and every path of four vertices has three colours: no
    two-coloured path w-x-y-z (checked by brute force)."""
    n = pattern.shape[0]
    nb = [set(pattern.indices[pattern.indptr[v]:pattern.indptr[v + 1]].tolist()) - {v}
          for v in range(n)]
    for v in range(n):
        assert all(colours[v] != colours[w] for w in nb[v])
        for w in nb[v]:
            for x in nb[w] - {v}:
                for y in nb[x] - {w, v}:
                    assert not (colours[v] == colours[x] and colours[w] == colours[y]), \
                        (v, w, x, y)


def chain_energy(x):
    return ((x[1:] - x[:-1] ** 2) ** 2).sum() + at.cos(x).sum()


def test_a_chains_hessian_is_tridiagonal_in_three_colours():
    n = 200
    c = at.compile(chain_energy, np.zeros(n))
    x = np.random.default_rng(0).uniform(-1, 1, n)
    pattern = ats.hessian_sparsity(c, x)
    truth = scipy.sparse.diags([1, 1, 1], [-1, 0, 1], shape=(n, n), dtype=bool)
    assert (pattern != truth).nnz == 0
    colours = ats.star_colours(c, x)
    assert colours.max() + 1 == 3
    _star(pattern, colours)
    H = ats.hessian(c, x)
    np.testing.assert_allclose(H.toarray(), c.hessian(x).numpy(), rtol=1e-13, atol=1e-13)
    assert (H - H.T).nnz == 0


def test_an_arrowhead_takes_two_colours_where_its_columns_take_all():
    def arrow(x):
        return x[0] * (x[1:] ** 2).sum() + (x ** 3).sum()
    n = 60
    c = at.compile(arrow, np.ones(n))
    x = np.linspace(0.5, 1.5, n)
    assert ats.star_colours(c, x).max() + 1 == 2
    gradient = at.compile(lambda x: at.func.grad(arrow)(x), x)
    assert ats.colours(gradient, x).max() + 1 == n        # (distance-1: every column)
    np.testing.assert_allclose(ats.hessian(c, x).toarray(), c.hessian(x).numpy(),
                               rtol=1e-13)


def test_a_2d_stencil_and_several_arguments_equal_the_dense_hessian():
    def grid(u, k):
        u = u.reshape(10, 10)
        return (k[0] * (np.roll(u, 1, 0) - u) ** 2 * (1 + u ** 2)).sum() + (
            k[1] * (np.roll(u, 1, 1) - u) ** 2).sum()
    rng = np.random.default_rng(1)
    u, k = rng.random(100), np.array([0.7, 1.3])
    c = at.compile(grid, u, k)
    H = ats.hessian(c, u, k)
    dense = c.hessian(u, k)
    whole = np.block([[dense[0][0].numpy().reshape(100, 100), dense[0][1].numpy()],
                      [dense[1][0].numpy(), dense[1][1].numpy()]])
    np.testing.assert_allclose(H.toarray(), whole, rtol=1e-12, atol=1e-12)
    _star(ats.hessian_sparsity(c, u, k), ats.star_colours(c, u, k))


def test_star_colourings_of_random_graphs_recover_every_entry():
    rng = np.random.default_rng(2)
    for _ in range(20):
        n = int(rng.integers(2, 30))
        a = scipy.sparse.random(n, n, density=float(rng.uniform(0.05, 0.4)),
                                random_state=rng, format="csr") != 0
        pattern = ((a + a.T + scipy.sparse.eye(n, dtype=bool)) > 0).tocsr()
        pattern.sort_indices()
        colours = ats._star_colour(pattern)
        _star(pattern, colours)
        h = scipy.sparse.random(n, n, density=1.0, random_state=rng).toarray()
        h = (h + h.T) * pattern.toarray()
        seeds = np.eye(int(colours.max()) + 1)[colours]
        rows, cols = ats._recovery(pattern, colours)
        got = (h @ seeds)[rows, cols]
        np.testing.assert_allclose(got, h[pattern.nonzero()], rtol=1e-13)


def test_a_hessian_needs_a_scalar():
    c = at.compile(lambda x: x * 2.0, np.ones(3))
    with pytest.raises(ValueError, match="must return a scalar"):
        ats.hessian(c, np.ones(3))
