"""numpy functions and ufuncs on Tensors record on the tape, or raise naming themselves."""
import numpy as np
import pytest

import autotape as at
from fd import check_grads


def test_ufuncs_record_and_differentiate():
    def f(x, y):
        return np.sin(x) * np.exp(y) + np.arctan2(x, y) - np.sqrt(np.abs(x) + 1) / y
    check_grads(f, np.array([0.3, -1.2, 2.0]), np.array([1.5, 0.7, -0.9]))


def test_numpy_functions_record_and_differentiate():
    def f(x):
        y = np.where(x > 0, x ** 2, -x)
        z = np.concatenate([y, np.stack([x, x]).sum(axis=0)])
        return np.mean(np.reshape(z, (2, 3)), axis=1) + np.dot(x, x) + np.clip(x, -1, 1).sum()
    check_grads(f, np.array([0.3, -1.7, 2.2]))


def test_ndarray_on_the_left_defers_to_tensor():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    a = np.array([3.0, 4.0])
    for y in (a * x, a + x, a - x, a / x, a ** x, a @ x):
        assert isinstance(y, at.Tensor) and y.requires_grad
    g, = at.grad((a * x).sum() + a @ x, x)
    assert g.tolist() == [6.0, 8.0]
    assert (a > x).dtype == np.bool_ and not (a > x).requires_grad


def test_unsupported_functions_and_arguments_raise():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="numpy.nanprod"):
        np.nanprod(x)
    with pytest.raises(TypeError, match="numpy.logaddexp.reduce"):
        np.logaddexp.reduce(x)
    with pytest.raises(TypeError, match="numpy.percentile on Tensors that require grad"):
        np.percentile(x, 50)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires"):
        np.sin(x, out=np.empty(2))           # (the gradient would be lost in the array)
    with pytest.raises(TypeError, match="argument\\(s\\) dtype of numpy.sum"):
        np.sum(x, dtype=np.float32)
    with pytest.raises(TypeError, match="numpy.bitwise_and"):
        np.bitwise_and(at.tensor([1, 2], dtype=float, requires_grad=True), 1)


def test_shape_queries():
    x = at.ones(2, 3)
    assert (np.shape(x), np.ndim(x), np.size(x)) == ((2, 3), 2, 6)
    assert np.round(at.tensor([0.4, 1.6])).tolist() == [0.0, 2.0]


def test_float_of_a_tensor_that_requires_grad_warns_as_torch():
    import math
    x = at.tensor(0.5, requires_grad=True)
    with pytest.warns(UserWarning, match="Converting a tensor with requires_grad=True to a "
                                         "scalar"):
        y = math.exp(-x * 2.0) + x           # the silent drop: now said
    assert float(at.grad(y, x)[0]) == 1.0
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.item() == 0.5 and float(x.detach()) == 0.5 and float(at.tensor(2.0)) == 2.0
