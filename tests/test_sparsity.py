"""Compiled Jacobians and Hessians by forward mode take a tangent lane per colour of the
inputs where the pattern is sparse (sparsity.py, LeanProgram.compression): the same
bits as a lane per input, in a fraction of the lanes; a dense pattern keeps a lane per
input."""
import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.sparsity import Pattern, column_colours


def rosenbrock(x):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def chain(x):
    """A periodic chain with a where and a pow: neighbours two apart meet."""
    d = np.roll(x, 1) - x
    return (at.where(d > 0, d ** 3, at.sin(d)) + x * np.roll(x, -2)).sum()


def dense(x):
    return (x * x).sum() ** 2


def _identity_lanes(c, kind, x):
    p = c._lean(kind, [x])
    return p.lean.tangents(x[None], np.eye(x.size)[None])[1][0]


@pytest.mark.parametrize("f, lanes", [(rosenbrock, 3), (chain, 5)])
def test_a_sparse_hessian_takes_a_lane_per_colour_with_the_same_bits(f, lanes):
    x = np.linspace(-1.2, 1.3, 40)
    c = at.compile(f, x)
    H = c.hessian(x).numpy()
    p = c._lean("hessian", [x])
    assert p.lean.compression()[0].shape == (40, lanes)
    np.testing.assert_array_equal(H, _identity_lanes(c, "hessian", x))
    eager = F.hessian(f)(at.tensor(x)).numpy()
    np.testing.assert_allclose(H, eager, rtol=1e-12, atol=1e-12)
    points = x * np.linspace(0.9, 1.1, 5)[:, None]
    batch = F.vmap(c.hessian)(points).numpy()
    for k in range(5):
        np.testing.assert_array_equal(batch[k], c.hessian(points[k]).numpy())


def test_a_sparse_jacobian_by_forward_mode_has_the_same_bits():
    def rhs(u):
        return np.roll(u, 1) - 2.0 * u + np.roll(u, -1) + at.sin(u) * u[0]
    u = np.linspace(0.0, 1.0, 30)
    c = at.compile(rhs, u)
    J = c.jacfwd(u).numpy()
    p = c._lean("value", [u])
    assert p.lean.compression()[0].shape[1] < 15         # (u[0] meets every row)
    np.testing.assert_array_equal(J, _identity_lanes(c, "value", u))


def test_a_dense_pattern_or_few_inputs_keep_a_lane_per_input():
    x = np.linspace(0.1, 1.0, 20)
    c = at.compile(dense, x)
    c.hessian(x)
    assert c._lean("hessian", [x]).lean.compression() is None
    small = at.compile(rosenbrock, x[:4])
    small.hessian(x[:4])
    assert small._lean("hessian", [x[:4]]).lean.compression() is None


def test_columns_that_share_a_row_never_share_a_colour():
    rng = np.random.default_rng(1)
    mask = rng.uniform(size=(30, 25)) < 0.1
    indptr = np.concatenate([[0], np.cumsum(mask.sum(axis=1))])
    colour = column_colours(Pattern(indptr, np.nonzero(mask)[1], mask.shape))
    for row in mask:
        seen = colour[np.nonzero(row)[0]]
        assert seen.size == np.unique(seen).size
