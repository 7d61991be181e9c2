"""Statistics and norms composed of table ops, written so that values are stable: shifts
by a constant maximum, means subtracted before squaring. They have no derivative rules
of their own: the chain rule through the ops they use gives them."""
import builtins
from collections import namedtuple

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from ..guards import current_trace, observe
from ..ops.elementwise import abs, exp, log, sqrt, where
from ..ops.indexing import as_tensor, reshape
from ..ops.linalg import svd
from ..ops.reduce import amax, amin, mean, normalize_axes, sum, torch_axis
from ..tensor import array_of, leaf_of
from .shaping import expand_dims, moveaxis, take_along_axis

__all__ = ["logsumexp", "softmax", "log_softmax", "var", "std", "var_mean", "median",
           "nanmedian", "average", "argmax", "argmin", "norm"]


SAFE_SHIFT = 30.0   # how far a recorded shift may be from the data's maximum: exp(+-30)
                    # stays far inside float32's range too


def _shift(x, axes):
    """The maximum over axes (kept), as a constant; 0 where it is not finite. Any
    shift gives the same value and gradient up to rounding, so a compiled recording
    keeps the one it saw and guards only that the maximum stays within SAFE_SHIFT of
    it: a replay records again only when the data moves that far, not at every call."""
    def shift(v):
        m = np.max(v, axis=axes, keepdims=True) if v.size else np.zeros(())
        return np.where(np.isfinite(m), m, 0.0)
    m = shift(np.asarray(array_of(x)))
    if current_trace() is not None:
        observe(lambda v: bool(np.all(np.abs(shift(v) - m) <= SAFE_SHIFT)), x)
    return m


def logsumexp(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """log(sum(exp(x))) over ``axis``, without overflow. Its gradient is softmax(x).

    >>> at.logsumexp(at.tensor([1000.0, 1000.0])).item()
    1000.6931471805599
    """
    axis, keepdims = torch_axis(axis, keepdims, dim, keepdim)
    x = as_tensor(x)
    axes = normalize_axes(x, axis)
    m = _shift(x, axes)
    out = log(sum(exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else reshape(out, tuple(n for d, n in enumerate(out.shape)
                                                   if d not in axes))


def softmax(x, axis=None, *, dim=None):
    """exp(x) / sum(exp(x)) over ``axis`` (all axes when None, as scipy), stable.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.softmax(x)
    tensor([0.09003057, 0.24472847, 0.66524096], grad_fn=<DivideBackward>)
    """
    axis = torch_axis(axis, False, dim, None)[0]
    x = as_tensor(x)
    axes = normalize_axes(x, axis)
    e = exp(x - _shift(x, axes))
    return e / sum(e, axis=axes, keepdims=True)


def log_softmax(x, axis=None, *, dim=None):
    """log(softmax(x)) over ``axis``, computed as x - logsumexp(x) (stable).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.log_softmax(x)
    tensor([-2.40760596, -1.40760596, -0.40760596], grad_fn=<SubtractBackward>)
    """
    axis = torch_axis(axis, False, dim, None)[0]
    return as_tensor(x) - logsumexp(x, axis=axis, keepdims=True)


def var(x, axis=None, ddof=0, keepdims=False, *, dim=None, keepdim=None, correction=None,
        unbiased=None):
    """Variance over ``axis`` with numpy's default ddof=0. Spelled as torch (``dim=``,
    ``correction=`` or ``unbiased=``), torch's default correction 1 applies.

    >>> x = at.tensor([1.0, 2.0, 3.0, 4.0])
    >>> at.var(x).item(), x.var(dim=0).item()
    (1.25, 1.6666666666666667)
    """
    ddof = _ddof(ddof, dim, correction, unbiased)
    axis, keepdims = torch_axis(axis, keepdims, dim, keepdim)
    x = as_tensor(x)
    axes = normalize_axes(x, axis)
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    d = x - mean(x, axis=axes, keepdims=True)
    return sum(d * d, axis=axes, keepdims=keepdims) / builtins.max(n - ddof, 0)


def _ddof(ddof, dim, correction, unbiased):
    """numpy's ddof, or torch's correction (default 1 when spelled as torch)."""
    if correction is not None and unbiased is not None:
        raise TypeError("give correction= or unbiased=, not both")
    if correction is not None:
        return correction
    if unbiased is not None:
        return 1 if unbiased else 0
    return 1 if dim is not None else ddof


def std(x, axis=None, ddof=0, keepdims=False, *, dim=None, keepdim=None, correction=None,
        unbiased=None):
    """Standard deviation, sqrt(var); the gradient is 0 where it is 0 (equal values), as
    in torch.

    >>> x = at.tensor([2.0, 2.0, 2.0], requires_grad=True)
    >>> at.grad(at.std(x), x)
    (tensor([0., 0., 0.]),)
    """
    return _safe_sqrt(var(x, axis=axis, ddof=ddof, keepdims=keepdims, dim=dim,
                          keepdim=keepdim, correction=correction, unbiased=unbiased))


def average(a, axis=None, weights=None, keepdims=False):
    """Weighted mean, numpy's rules (1-D weights along an axis of an n-D array).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.average(x, weights=[1.0, 1.0, 2.0])
    tensor(2.25, grad_fn=<DivideBackward>)
    """
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


def argmax(a, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Index of the largest element (an integer tensor: no gradient).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.argmax(x)
    tensor(2)
    """
    axis, keepdims = torch_axis(axis, keepdims, dim, keepdim)
    return leaf_of(observe(lambda v: np.argmax(v, axis=axis, keepdims=keepdims),
                           as_tensor(a)))


def argmin(a, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Index of the smallest element (an integer tensor: no gradient).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.argmin(x)
    tensor(0)
    """
    axis, keepdims = torch_axis(axis, keepdims, dim, keepdim)
    return leaf_of(observe(lambda v: np.argmin(v, axis=axis, keepdims=keepdims),
                           as_tensor(a)))


def _safe_sqrt(s):
    """sqrt(s), with gradient 0 (not nan) where s == 0: the norm of a zero vector."""
    positive = observe(lambda v: v > 0, as_tensor(s))
    return where(positive, sqrt(where(positive, s, 1.0)), 0.0)


def _p_norm(x, p, axes, keepdims):
    """sum(|x| ** p) ** (1 / p), with gradient 0 (not nan) where the norm is 0: there
    x is replaced by ones on a branch that ``where`` then leaves untaken."""
    zero = observe(lambda v: np.all(v == 0, axis=axes, keepdims=True), x)
    safe = where(zero, 1.0, abs(x))
    out = where(zero, 0.0, sum(safe ** p, axis=axes, keepdims=True) ** (1.0 / p))
    return out if keepdims else reshape(out, tuple(n for d, n in enumerate(out.shape)
                                                   if d not in axes))


def norm(x, ord=None, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """numpy.linalg.norm: vectors (ord None/2, 1, inf, -inf, 0 < p) and matrices
    ('fro', 'nuc', 2, -2, 1, inf, -1, -inf). The gradient at a zero vector is 0 (torch's
    rule).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.grad(at.norm(x), x)
    (tensor([0.26726124, 0.53452248, 0.80178373]),)
    """
    axis, keepdims = torch_axis(axis, keepdims, dim, keepdim)
    x = as_tensor(x)
    if axis is None and ord is None:
        return _safe_sqrt(sum(x * x, keepdims=keepdims))
    axes = normalize_axes(x, axis) if axis is not None else tuple(range(x.ndim))
    if len(axes) == 1:
        if ord is None or ord == 2:
            return _safe_sqrt(sum(x * x, axis=axes, keepdims=keepdims))
        if ord == np.inf:
            return amax(abs(x), axis=axes, keepdims=keepdims)
        if ord == -np.inf:
            return amin(abs(x), axis=axes, keepdims=keepdims)
        if ord == 1:
            return sum(abs(x), axis=axes, keepdims=keepdims)
        if isinstance(ord, (int, float)) and ord > 0:
            return _p_norm(x, ord, axes, keepdims)
        raise ValueError(f"autotape's norm does not support ord={ord!r} for vectors")
    if len(axes) == 2:
        rows, cols = axes
        if ord is None or ord == "fro":
            return _safe_sqrt(sum(x * x, axis=axes, keepdims=keepdims))
        if ord in (1, -1, np.inf, -np.inf):
            summed, other = (rows, cols) if ord in (1, -1) else (cols, rows)
            s = sum(abs(x), axis=summed, keepdims=True)
            pick = amax if ord > 0 else amin
            out = pick(s, axis=other, keepdims=True)
            return out if keepdims else reshape(out, tuple(
                n for d, n in enumerate(out.shape) if d not in axes))
        if ord in ("nuc", 2, -2):
            moved = moveaxis(x, (rows, cols), (-2, -1))
            s = svd(moved, compute_uv=False)
            out = sum(s, axis=-1) if ord == "nuc" else (amax if ord == 2 else amin)(s, axis=-1)
            if keepdims:
                out = expand_dims(out, tuple(sorted((rows, cols))))
            return out
        raise ValueError(f"autotape's norm does not support ord={ord!r} for matrices")
    raise ValueError("Improper number of dimensions to norm.")


Median = namedtuple("Median", "values indices")


def median(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """numpy's median: the middle element along ``axis`` (None: of all), the mean of
    the two middle ones for an even count, NaN where a NaN is among them; the gradient
    goes to the element(s) picked. With torch's ``dim=``, torch's ``(values, indices)``
    of the lower middle element (``t.median()`` is torch's too).

    >>> x = at.tensor([3.0, 1.0, 4.0, 2.0], requires_grad=True)
    >>> at.grad(at.median(x), x)
    (tensor([0.5, 0. , 0. , 0.5]),)
    """
    if dim is not None:
        return _median(x, dim, bool(keepdim), lower=True, skip_nan=False, indices=True)
    return _median(x, axis, keepdims, lower=False, skip_nan=False, indices=False)


def nanmedian(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """numpy's nanmedian: the median of the elements that are not NaN (NaN where all
    are). With torch's ``dim=``, torch's ``(values, indices)`` of the lower middle one.

    >>> at.nanmedian(at.tensor([3.0, np.nan, 1.0]))
    tensor(2.)
    """
    if dim is not None:
        return _median(x, dim, bool(keepdim), lower=True, skip_nan=True, indices=True)
    return _median(x, axis, keepdims, lower=False, skip_nan=True, indices=False)


def _median(x, axis, keepdims, lower, skip_nan, indices):
    x = as_tensor(x)
    shape = x.shape
    work, axis = (reshape(x, (-1,)), 0) if axis is None else (x, axis % builtins.max(x.ndim, 1))
    if work.shape[axis] == 0:
        raise ValueError("median of an empty axis")

    def middle(v, high):
        """Each slice's middle element's index along axis (a decision: guards.py)."""
        order = np.argsort(v, axis=axis, kind="stable")          # (NaNs last)
        count = (~np.isnan(v)).sum(axis=axis, keepdims=True) if skip_nan else \
            np.full(order.shape[:axis] + (1,) + order.shape[axis + 1:], v.shape[axis])
        k = np.maximum(count // 2 if high else (count - 1) // 2, 0)
        return np.take_along_axis(order, k, axis)

    low = observe(lambda v: middle(v, False), work)
    values = take_along_axis(work, low, axis)
    if not lower:
        values = (values + take_along_axis(work, observe(lambda v: middle(v, True), work),
                                           axis)) * 0.5
    undefined = observe(lambda v: (np.isnan(v).all(axis=axis, keepdims=True) if skip_nan
                                   else np.isnan(v).any(axis=axis, keepdims=True)), work)
    if undefined.any():
        values = where(undefined, np.nan, values)
    if x.ndim == 0:
        out = reshape(values, ())
    elif keepdims:
        out = values if work is x else reshape(values, (1,) * len(shape))
    else:
        out = reshape(values, tuple(n for d, n in enumerate(work.shape) if d != axis))
    if not indices:
        return out
    picked = low if keepdims else np.squeeze(low, axis)
    return Median(out, leaf_of(picked))


def var_mean(x, dim=None, *, correction=1, keepdim=False, unbiased=None):
    """torch's ``var_mean``: ``(var, mean)`` over ``dim``, torch's correction 1 unless
    given.

    >>> at.var_mean(at.tensor([1.0, 2.0, 3.0, 4.0]))
    (tensor(1.66666667), tensor(2.5))
    """
    if unbiased is not None:
        correction = int(bool(unbiased))
    axis = tuple(dim) if isinstance(dim, list) else dim
    return (var(x, axis, correction, keepdim),
            mean(x, axis=axis, keepdims=keepdim))
