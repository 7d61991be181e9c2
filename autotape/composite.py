"""Functions composed of table ops. They have no derivative rules of their own (the chain
rule through the ops they use gives them), and are written so that values are stable:
shifts by a constant maximum, means subtracted before squaring."""
import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from .ops import codes
from .ops.shape import _c_strides
from .record import _UNARY_FUNCTIONS, gather, mean, reshape, sum
from .tensor import _array_value, _canonical, _plain, as_tensor

_exp, _log, _sqrt = (_UNARY_FUNCTIONS[c] for c in (codes.EXP, codes.LOG, codes.SQRT))


def _axes(x, axis):
    return tuple(range(x.ndim)) if axis is None else normalize_axis_tuple(axis, x.ndim)


def _shift(x, axes):
    """The maximum over axes (kept), as a constant; 0 where it is not finite."""
    m = np.max(_array_value(x), axis=axes, keepdims=True) if x.size else np.zeros(())
    return np.where(np.isfinite(m), m, 0.0)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) over ``axis``, without overflow. Its gradient is softmax(x).

    >>> at.logsumexp(at.tensor([1000.0, 1000.0])).item()
    1000.6931471805599
    """
    x = as_tensor(x)
    axes = _axes(x, axis)
    m = _shift(x, axes)
    out = _log(sum(_exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else reshape(out, tuple(n for d, n in enumerate(out.shape)
                                                   if d not in axes))


def softmax(x, axis=None):
    """exp(x) / sum(exp(x)) over ``axis`` (all axes when None, as scipy), stable."""
    x = as_tensor(x)
    axes = _axes(x, axis)
    e = _exp(x - _shift(x, axes))
    return e / sum(e, axis=axes, keepdims=True)


def log_softmax(x, axis=None):
    """log(softmax(x)) over ``axis``, computed as x - logsumexp(x) (stable)."""
    return as_tensor(x) - logsumexp(x, axis=axis, keepdims=True)


def var(x, axis=None, ddof=0, keepdims=False):
    """Variance over ``axis`` with numpy's default ddof=0 (torch's var is ddof=1)."""
    x = as_tensor(x)
    axes = _axes(x, axis)
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    d = x - mean(x, axis=axes, keepdims=True)
    return sum(d * d, axis=axes, keepdims=keepdims) / max(n - ddof, 0)


def std(x, axis=None, ddof=0, keepdims=False):
    """Standard deviation, sqrt(var); the gradient is nan where it is 0, as in torch."""
    return _sqrt(var(x, axis=axis, ddof=ddof, keepdims=keepdims))


def average(a, axis=None, weights=None, keepdims=False):
    """Weighted mean, numpy's rules (1-D weights along an axis of an n-D array)."""
    a = as_tensor(a)
    if weights is None:
        return mean(a, axis=axis, keepdims=keepdims)
    w = as_tensor(weights)
    if w.ndim == 1 and a.ndim > 1 and axis is not None and not isinstance(axis, tuple):
        shape = [1] * a.ndim
        shape[normalize_axis_tuple(axis, a.ndim)[0]] = w.shape[0]
        w = reshape(w, tuple(shape))
    return sum(a * w, axis=axis, keepdims=keepdims) / sum(w * np.ones(a.shape), axis=axis,
                                                        keepdims=keepdims)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal of the (axis1, axis2) planes, as numpy (a gather: its gradient is a
    scatter back onto the diagonal)."""
    a = as_tensor(a)
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), a.shape,
                                           _c_strides(a.shape, 1), writeable=False)
    view = np.diagonal(base, offset, axis1, axis2)
    start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return gather(a, (view.shape, start, view.strides))


def trace(a, offset=0, axis1=0, axis2=1):
    """Sum of the diagonal."""
    return sum(diagonal(a, offset, axis1, axis2), axis=-1)


def argmax(a, axis=None, keepdims=False):
    """Index of the largest element (an integer tensor: no gradient)."""
    return _plain(*_canonical(np.argmax(_array_value(as_tensor(a)), axis=axis,
                                        keepdims=keepdims)))


def argmin(a, axis=None, keepdims=False):
    """Index of the smallest element (an integer tensor: no gradient)."""
    return _plain(*_canonical(np.argmin(_array_value(as_tensor(a)), axis=axis,
                                        keepdims=keepdims)))


__all__ = ["logsumexp", "softmax", "log_softmax", "var", "std", "average", "diagonal",
           "trace", "argmax", "argmin"]
