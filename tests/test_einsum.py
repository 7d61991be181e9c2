"""einsum for any subscripts: values equal numpy's, gradients match finite differences
and torch (where installed)."""
import numpy as np
import pytest

import autotape as at
from fd import check_grads, check_second_order

rng = np.random.default_rng(5)

CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),                    # implicit output
    ("ii", [(3, 3)]),                               # trace
    ("ii->i", [(3, 3)]),                            # diagonal
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("i,i", [(4,), (4,)]),                          # dot
    ("i,j->ij", [(2,), (3,)]),                      # outer
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...i,...i->...", [(2, 3), (3,)]),
    ("i...->...", [(3, 2, 2)]),
    ("iij->j", [(2, 2, 3)]),
    ("ijk,kl,lm->im", [(2, 3, 4), (4, 5), (5, 2)]),
    ("abc,cd,bd->a", [(2, 3, 4), (4, 5), (3, 5)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ij,ij,ij->", [(2, 3), (2, 3), (2, 3)]),
    ("i,i,i->i", [(3,), (3,), (3,)]),
    ("ijij->ij", [(2, 3, 2, 3)]),
    ("i->", [(5,)]),
    (",i->i", [(), (3,)]),
]


@pytest.mark.parametrize("subscripts,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_values_and_gradients(subscripts, shapes):
    arrays = [rng.uniform(-1, 1, s) for s in shapes]
    out = at.einsum(subscripts, *[at.tensor(a) for a in arrays])
    expected = np.einsum(subscripts, *arrays)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-13, atol=1e-14)
    check_grads(lambda *ts: at.einsum(subscripts, *ts), *arrays)


def test_einsum_second_order_and_numpy_dispatch():
    a, b = rng.uniform(-1, 1, (3, 3)), rng.uniform(-1, 1, (3,))
    check_second_order(lambda x, y: at.einsum("ij,j,i->", x, y, y) * at.einsum("ii", x),
                       a, b)
    t = at.tensor(a, requires_grad=True)
    y = np.einsum("ij,jk->ik", t, t)
    assert isinstance(y, at.Tensor) and y.requires_grad
    np.testing.assert_allclose(y.numpy(), a @ a, rtol=1e-14)


def test_einsum_errors():
    x = at.ones((2, 3))
    with pytest.raises(ValueError, match="operand subscripts for 1 operands"):
        at.einsum("ij,jk", x)
    with pytest.raises(ValueError, match="does not appear in the inputs"):
        at.einsum("ij->k", x)
    with pytest.raises(ValueError, match="size 2 in one operand and 3"):
        at.einsum("ij,ij->", x, at.ones((2, 2)))
    with pytest.raises(ValueError, match="no '...' ellipsis"):
        at.einsum("...i->i", at.ones((2, 3, 4)))
    with pytest.raises(ValueError, match="subscripts 'ijk' give 3"):
        at.einsum("ijk", x)


def test_einsum_matches_torch():
    torch = pytest.importorskip("torch")
    a, b = rng.uniform(-1, 1, (2, 3, 4)), rng.uniform(-1, 1, (4, 3))
    ta, tb = (torch.tensor(v, requires_grad=True) for v in (a, b))
    gt = torch.autograd.grad(torch.einsum("bij,ji->b", ta, tb).sum(), [ta, tb])
    xa, xb = (at.tensor(v, requires_grad=True) for v in (a, b))
    g = at.grad(at.einsum("bij,ji->b", xa, xb).sum(), [xa, xb])
    for mine, theirs in zip(g, gt):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-13)


def test_einsum_sublist_form():
    a, b = rng.uniform(-1, 1, (2, 3)), rng.uniform(-1, 1, (3, 4))
    np.testing.assert_allclose(at.einsum(a, [0, 1], b, [1, 2], [0, 2]).numpy(),
                               np.einsum(a, [0, 1], b, [1, 2], [0, 2]), rtol=1e-14)
    np.testing.assert_allclose(at.einsum(a, [Ellipsis, 1], b, [1, 2]).numpy(),
                               np.einsum(a, [Ellipsis, 1], b, [1, 2]), rtol=1e-14)
    check_grads(lambda x, y: at.einsum(x, [0, 1], y, [1, 2], [2]), a, b)
