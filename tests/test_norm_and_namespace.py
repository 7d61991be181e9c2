"""norm against numpy.linalg.norm; the autotape.numpy namespace."""
import inspect

import numpy as np
import pytest

import autotape as at
import autotape.numpy as anp
from fd import check_grads, check_second_order

rng = np.random.default_rng(3)

NORMS = [((5,), None, None), ((5,), 1, None), ((5,), np.inf, None), ((5,), -np.inf, None),
         ((5,), 3, None), ((2, 3), None, None), ((2, 3), "fro", None), ((2, 3), 1, None),
         ((2, 3), np.inf, None), ((2, 3), -1, None), ((3, 4), 2, 1), ((3, 4), None, 0),
         ((2, 3, 4), "fro", (0, 2))]


@pytest.mark.parametrize("shape, ord, axis", NORMS, ids=str)
def test_norm(shape, ord, axis):
    x = rng.normal(size=shape)
    want = np.linalg.norm(x, ord=ord, axis=axis)
    np.testing.assert_allclose(at.norm(at.tensor(x), ord, axis).numpy(), want, rtol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(at.tensor(x, requires_grad=True), ord=ord,
                                              axis=axis).detach().numpy(), want, rtol=1e-14)
    check_grads(lambda t: at.norm(t, ord, axis), x)
    check_second_order(lambda t: at.norm(t, ord, axis) * t.sum(), x)


def test_norm_of_zero_vector_has_zero_gradient():
    z = at.zeros(3, requires_grad=True)
    assert at.grad(at.norm(z), z)[0].tolist() == [0.0, 0.0, 0.0]     # research T60
    assert at.grad(anp.linalg.norm(z * 2.0), z)[0].tolist() == [0.0, 0.0, 0.0]


def test_unsupported_norms_raise():
    with pytest.raises(ValueError, match="ord=3"):
        at.norm(at.ones(2, 2), 3)
    with pytest.raises(ValueError, match="ord=-1"):
        at.norm(at.ones(3), -1)


def test_numpy_namespace():
    x = at.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    y = anp.sum(anp.sin(x) * anp.exp(x), axis=0) + anp.linalg.norm(x) + anp.absolute(x).mean()
    g, = at.grad(y.sum(), x)
    x0 = x.numpy()
    want = (np.cos(x0) + np.sin(x0)) * np.exp(x0) + 2 * (       # y has 2 elements:
        x0 / np.linalg.norm(x0) + np.sign(x0) / 4)              # the scalars count twice
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-13)
    assert anp.array([1, 2]).dtype == np.int64 and anp.pi == np.pi
    assert anp.zeros_like(x).shape == (2, 2) and inspect.unwrap(anp.remainder) is inspect.unwrap(at.mod)
    with pytest.raises(AttributeError, match="numpy.nanprod"):
        anp.nanprod(x)


def test_numpy_array_of_tensors_keeps_the_gradient():
    import autotape.numpy as anp
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = anp.array([x * 2.0, [3.0, x[0]]])
    assert y.shape == (2, 2) and y.requires_grad
    assert at.grad(y.sum(), x)[0].tolist() == [3.0, 2.0]
    assert anp.asarray(x) is x
    assert anp.array([1.0, 2.0]).tolist() == [1.0, 2.0]


def test_array_methods():
    x = at.tensor(np.arange(6.0).reshape(2, 3, 1), requires_grad=True)
    assert x.ravel().shape == (6,) and x.flatten().shape == (6,)
    assert x.squeeze().shape == (2, 3) and x.swapaxes(0, 1).shape == (3, 2, 1)
    assert x.squeeze().dot(np.ones(3)).tolist() == [3.0, 12.0]
    assert x.take([0, 5]).tolist() == [0.0, 5.0] and x.ravel().repeat(2).shape == (12,)
    c = x.copy()
    assert c.requires_grad and at.grad(c.sum(), x)[0].numpy().sum() == 6.0
    assert x.conj() is x
