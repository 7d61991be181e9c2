"""Composed shape and product functions: numpy's values, and gradients by finite
differences (each is a composition of table ops, so this checks the composition)."""
import numpy as np
import pytest

import autotape as at
from fd import check_grads

rng = np.random.default_rng(11)

CASES = [
    ("expand_dims", (2, 3), lambda m, x: m.expand_dims(x, (0, 2))),
    ("squeeze", (2, 1, 3, 1), lambda m, x: m.squeeze(x)),
    ("squeeze_axis", (2, 1, 3, 1), lambda m, x: m.squeeze(x, axis=-1)),
    ("ravel", (2, 3), lambda m, x: m.ravel(x)),
    ("swapaxes", (2, 3, 4), lambda m, x: m.swapaxes(x, 0, 2)),
    ("moveaxis", (2, 3, 4), lambda m, x: m.moveaxis(x, [0, 1], [-1, 0])),
    ("flip", (2, 3), lambda m, x: m.flip(x)),
    ("flip_axis", (2, 3), lambda m, x: m.flip(x, 1)),
    ("roll", (2, 3), lambda m, x: m.roll(x, 1, axis=1)),
    ("roll_flat", (2, 3), lambda m, x: m.roll(x, -4)),
    ("roll_two_axes", (2, 3), lambda m, x: m.roll(x, (1, 2), axis=(0, 1))),
    ("tile", (2, 3), lambda m, x: m.tile(x, (2, 1, 2))),
    ("repeat", (2, 3), lambda m, x: m.repeat(x, 2, axis=1)),
    ("repeat_flat", (2, 3), lambda m, x: m.repeat(x, 3)),
    ("pad", (2, 3), lambda m, x: m.pad(x, ((1, 0), (2, 1)), constant_values=0.5)),
    ("triu", (3, 4), lambda m, x: m.triu(x, 1)),
    ("tril", (2, 3, 3), lambda m, x: m.tril(x)),
    ("vdot", (2, 3), lambda m, x: m.vdot(x, x * 2)),
    ("outer", (3,), lambda m, x: m.outer(x, x[:2])),
    ("tensordot", (2, 3, 4), lambda m, x: m.tensordot(x, x, axes=([0, 1], [0, 1]))),
    ("tensordot_int", (2, 3), lambda m, x: m.tensordot(x.T, x, axes=1)),
    ("inner", (2, 3), lambda m, x: m.inner(x, x)),
    ("dot", (3, 3), lambda m, x: m.dot(x, x)),
]


@pytest.mark.parametrize("name, shape, f", CASES, ids=[c[0] for c in CASES])
def test_matches_numpy_and_finite_differences(name, shape, f):
    x = rng.normal(size=shape)
    want = f(np, x)
    got = f(at, at.tensor(x))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-13, atol=1e-14)
    assert not isinstance(f(np, at.tensor(x)), at.Tensor)   # np.<f> of plain tensors: numpy's
    check_grads(lambda t: f(at, t), x)
    check_grads(lambda t: f(np, t), x)                             # numpy names record too


def test_split():
    x0 = rng.normal(size=(4, 6))
    x = at.tensor(x0, requires_grad=True)
    for parts, want in ((at.split(x, 3, axis=1), np.split(x0, 3, axis=1)),
                        (np.split(x, [1, 3]), np.split(x0, [1, 3]))):
        assert len(parts) == len(want)
        for p, w in zip(parts, want):
            np.testing.assert_array_equal(p.numpy(), w)
    g, = at.grad(sum((k + 1) * p.sum() for k, p in enumerate(at.split(x, 2))), x)
    assert g.tolist() == [[1.0] * 6] * 2 + [[2.0] * 6] * 2
    with pytest.raises(ValueError, match="equal division"):
        at.split(x, 4, axis=1)


def test_errors():
    with pytest.raises(ValueError, match="squeeze out"):
        at.squeeze(at.ones(2, 3), axis=0)
    with pytest.raises(ValueError, match="mode='constant'"):
        at.pad(at.ones(2), 1, mode="edge")
    with pytest.raises(TypeError, match="int number of repeats"):
        at.repeat(at.ones(2), [1, 2])
    with pytest.raises(ValueError, match="shape-mismatch"):
        at.tensordot(at.ones((2, 3)), at.ones((2, 3)), axes=([1], [0]))
