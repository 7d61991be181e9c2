"""Functions composed of table ops. They have no derivative rules of their own (the chain
rule through the ops they use gives them), and are written so that values are stable:
shifts by a constant maximum, means subtracted before squaring."""
import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from .ops import codes
from .ops.shape import _c_strides
from .creation import full
from .record import (_UNARY_FUNCTIONS, broadcast_to, concatenate, gather, matmul, mean,
                     reshape, sum, take_flat, transpose, where)
from .record import max as record_max, min as record_min
from .tensor import Tensor, _array_value, _canonical, _plain, as_tensor

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


# ---- shape ---------------------------------------------------------------------------------

def expand_dims(a, axis):
    """Insert size-1 axes at ``axis`` (an int or a tuple), as numpy."""
    a = as_tensor(a)
    axes = normalize_axis_tuple(axis, a.ndim + (len(axis) if isinstance(axis, tuple) else 1))
    shape = iter(a.shape)
    return reshape(a, tuple(1 if d in axes else next(shape)
                            for d in range(a.ndim + len(axes))))


unsqueeze = expand_dims


def squeeze(a, axis=None):
    """Remove size-1 axes (all, or those in ``axis``)."""
    a = as_tensor(a)
    axes = tuple(d for d, n in enumerate(a.shape) if n == 1) if axis is None else \
        normalize_axis_tuple(axis, a.ndim)
    if any(a.shape[d] != 1 for d in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal "
                         "to one")
    return reshape(a, tuple(n for d, n in enumerate(a.shape) if d not in axes))


def ravel(a):
    """The elements as a 1-D tensor, C order."""
    return reshape(a, (-1,))


flatten = ravel


def swapaxes(a, axis1, axis2):
    a = as_tensor(a)
    perm = list(range(a.ndim))
    i, j = normalize_axis_tuple((axis1, axis2), a.ndim, allow_duplicate=True)
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, tuple(perm))


def moveaxis(a, source, destination):
    a = as_tensor(a)
    src = normalize_axis_tuple(source, a.ndim)
    dst = normalize_axis_tuple(destination, a.ndim)
    if len(src) != len(dst):
        raise ValueError("`source` and `destination` arguments must have the same number "
                         "of elements")
    order = [d for d in range(a.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, tuple(order))


def flip(a, axis=None):
    """Reverse the order of elements along ``axis`` (all axes when None)."""
    a = as_tensor(a)
    axes = _axes(a, axis)
    return a[tuple(slice(None, None, -1) if d in axes else slice(None)
                   for d in range(a.ndim))]


def split(a, indices_or_sections, axis=0):
    """A list of sub-tensors, as numpy.split."""
    a = as_tensor(a)
    axis = normalize_axis_tuple(axis, a.ndim)[0]
    n = a.shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        if n % indices_or_sections:
            raise ValueError("array split does not result in an equal division")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step)) if step else [0] * (indices_or_sections + 1)
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    lead = (slice(None),) * axis
    return [a[lead + (slice(lo, hi),)] for lo, hi in zip(bounds[:-1], bounds[1:])]


def roll(a, shift, axis=None):
    """Shift elements along ``axis`` cyclically (on the flattened tensor when None)."""
    a = as_tensor(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes = normalize_axis_tuple(axis, a.ndim, allow_duplicate=True)
    for s, d in zip(np.broadcast_to(shifts, len(axes)), axes):
        k = int(s) % a.shape[d] if a.shape[d] else 0
        if k:
            lead = (slice(None),) * d
            a = concatenate([a[lead + (slice(-k, None),)], a[lead + (slice(None, -k),)]],
                            axis=d)
    return a


def tile(a, reps):
    """Repeat the whole tensor ``reps`` times per axis (one broadcast and a reshape)."""
    a = as_tensor(a)
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    nd = max(a.ndim, len(reps))
    shape = (1,) * (nd - a.ndim) + a.shape
    reps = (1,) * (nd - len(reps)) + reps
    interleaved = tuple(x for n in shape for x in (1, n))
    target = tuple(x for r, n in zip(reps, shape) for x in (r, n))
    return reshape(broadcast_to(reshape(a, interleaved), target),
                   tuple(r * n for r, n in zip(reps, shape)))


def repeat(a, repeats, axis=None):
    """Repeat each element ``repeats`` times along ``axis`` (flattened when None)."""
    a = as_tensor(a)
    if not isinstance(repeats, (int, np.integer)):
        raise TypeError("autotape's repeat takes an int number of repeats")
    if axis is None:
        a, axis = ravel(a), 0
    d = normalize_axis_tuple(axis, a.ndim)[0]
    widened = reshape(a, a.shape[:d + 1] + (1,) + a.shape[d + 1:])
    target = a.shape[:d + 1] + (int(repeats),) + a.shape[d + 1:]
    return reshape(broadcast_to(widened, target),
                   a.shape[:d] + (a.shape[d] * int(repeats),) + a.shape[d + 1:])


def pad(a, pad_width, mode="constant", constant_values=0):
    """Pad with a constant (numpy's pad_width forms); index assignment into a filled
    tensor, so the gradient of the padding is zero."""
    if mode != "constant" or np.ndim(constant_values) != 0:
        raise ValueError("autotape's pad supports mode='constant' with one constant value")
    a = as_tensor(a)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2))
    out = full(tuple(int(n + lo + hi) for n, (lo, hi) in zip(a.shape, widths)),
               constant_values, dtype=a.dtype)
    out[tuple(slice(int(lo), int(lo) + n) for n, (lo, _) in zip(a.shape, widths))] = a
    return out


def triu(m, k=0):
    """Upper triangle of the last two axes (below the k-th diagonal set to 0)."""
    m = as_tensor(m)
    return where(np.triu(np.ones(m.shape[-2:], bool), k), m, 0.0)


def tril(m, k=0):
    """Lower triangle of the last two axes (above the k-th diagonal set to 0)."""
    m = as_tensor(m)
    return where(np.tril(np.ones(m.shape[-2:], bool), k), m, 0.0)


# ---- products ------------------------------------------------------------------------------

def dot(a, b):
    """numpy.dot for operands of at most 2 dimensions (a 0-d operand multiplies)."""
    a, b = as_tensor(a), as_tensor(b)
    return a * b if a.ndim == 0 or b.ndim == 0 else matmul(a, b)


def vdot(a, b):
    """Dot product of the flattened operands."""
    return sum(ravel(a) * ravel(b))


def outer(a, b):
    """Outer product of the flattened operands."""
    return reshape(ravel(a), (-1, 1)) * reshape(ravel(b), (1, -1))


def tensordot(a, b, axes=2):
    """Sum over the given axes of a and b, as numpy: transposes, reshapes and one matmul."""
    a, b = as_tensor(a), as_tensor(b)
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    else:
        axes_a, axes_b = ((x,) if isinstance(x, (int, np.integer)) else tuple(x)
                          for x in axes)
    axes_a, axes_b = normalize_axis_tuple(axes_a, a.ndim), normalize_axis_tuple(axes_b, b.ndim)
    if [a.shape[i] for i in axes_a] != [b.shape[i] for i in axes_b]:
        raise ValueError("shape-mismatch for sum")
    free_a = [d for d in range(a.ndim) if d not in axes_a]
    free_b = [d for d in range(b.ndim) if d not in axes_b]
    k = int(np.prod([a.shape[d] for d in axes_a], dtype=np.int64))
    at_ = reshape(transpose(a, tuple(free_a) + axes_a), (-1, k))
    bt_ = reshape(transpose(b, axes_b + tuple(free_b)), (k, -1))
    return reshape(matmul(at_, bt_), tuple(a.shape[d] for d in free_a) +
                   tuple(b.shape[d] for d in free_b))


def inner(a, b):
    """Sum over the last axes of a and b."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, axes=((-1,), (-1,)))


__all__ += ["expand_dims", "unsqueeze", "squeeze", "ravel", "flatten", "swapaxes",
            "moveaxis", "flip", "split", "roll", "tile", "repeat", "pad", "triu", "tril",
            "dot", "vdot", "outer", "tensordot", "inner"]


# ---- indexing by arrays --------------------------------------------------------------------

def _index_array(indices):
    return np.asarray(_array_value(indices) if isinstance(indices, Tensor) else indices)


def take(a, indices, axis=None):
    """Elements at ``indices`` along ``axis`` (of the flattened tensor when None); the
    gradient of a repeated index accumulates."""
    a = as_tensor(a)
    return take_flat(a, np.take(np.arange(a.size).reshape(a.shape), _index_array(indices),
                                axis=axis))


def take_along_axis(arr, indices, axis):
    """numpy.take_along_axis: ``indices`` picks along ``axis`` position by position."""
    arr = as_tensor(arr)
    return take_flat(arr, np.take_along_axis(np.arange(arr.size).reshape(arr.shape),
                                             _index_array(indices), axis))


__all__ += ["take", "take_along_axis"]


# ---- norms ---------------------------------------------------------------------------------

def _safe_sqrt(s):
    """sqrt(s), with gradient 0 (not nan) where s == 0: the norm of a zero vector."""
    positive = _array_value(as_tensor(s)) > 0
    return where(positive, _sqrt(where(positive, s, 1.0)), 0.0)


def norm(x, ord=None, axis=None, keepdims=False):
    """numpy.linalg.norm: vectors (ord None/2, 1, inf, -inf, 0 < p) and matrices
    ('fro', 1, inf, -1, -inf). The gradient at a zero vector is 0 (torch's rule)."""
    x = as_tensor(x)
    abs_ = _UNARY_FUNCTIONS[codes.ABS]
    if axis is None and ord is None:
        return _safe_sqrt(sum(x * x, keepdims=keepdims))
    axes = _axes(x, axis) if axis is not None else tuple(range(x.ndim))
    if len(axes) == 1:
        if ord is None or ord == 2:
            return _safe_sqrt(sum(x * x, axis=axes, keepdims=keepdims))
        if ord == np.inf:
            return record_max(abs_(x), axis=axes, keepdims=keepdims)
        if ord == -np.inf:
            return record_min(abs_(x), axis=axes, keepdims=keepdims)
        if ord == 1:
            return sum(abs_(x), axis=axes, keepdims=keepdims)
        if isinstance(ord, (int, float)) and ord > 0:
            return sum(abs_(x) ** ord, axis=axes, keepdims=keepdims) ** (1.0 / ord)
        raise ValueError(f"autotape's norm does not support ord={ord!r} for vectors")
    if len(axes) == 2:
        rows, cols = axes
        if ord is None or ord == "fro":
            return _safe_sqrt(sum(x * x, axis=axes, keepdims=keepdims))
        if ord in (1, -1, np.inf, -np.inf):
            summed, other = (rows, cols) if ord in (1, -1) else (cols, rows)
            s = sum(abs_(x), axis=summed, keepdims=True)
            pick = record_max if ord > 0 else record_min
            out = pick(s, axis=other, keepdims=True)
            return out if keepdims else reshape(out, tuple(
                n for d, n in enumerate(out.shape) if d not in axes))
        raise ValueError(f"autotape's norm does not support ord={ord!r} for matrices "
                         "(the spectral and nuclear norms need an SVD)")
    raise ValueError("Improper number of dimensions to norm.")


__all__ += ["norm"]
