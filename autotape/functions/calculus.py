"""numpy's differences, integrals, interpolation, polynomials, cross products, sorting
and spaced ranges on Tensors, composed of slices, gathers and arithmetic: diff,
gradient, trapezoid, interp, polyval, cross, sort, argsort, partition, linspace (with
Tensor endpoints). Sorting orders are decisions (a permutation read from the values);
the sorted values are a gather, so their gradient goes back to where each came from."""
import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from ..creation import linspace as _linspace
from ..guards import observe
from ..ops.elementwise import compare, where
from ..ops.indexing import as_tensor, concatenate, reshape, stack
from ..ops.reduce import sum
from ..tensor import Tensor, leaf_of
from .shaping import moveaxis, take_along_axis

__all__ = ["diff", "gradient", "trapezoid", "interp", "polyval", "cross", "sort", "argsort",
           "partition", "argpartition", "linspace"]


def _along(a, axis, sl):
    """a[..., sl, ...] with sl on ``axis``."""
    return a[(slice(None),) * axis + (sl,)]


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The n-th discrete difference along ``axis`` (with numpy's prepend / append).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.diff(x * x)
    tensor([3., 5.], grad_fn=<SubtractBackward>)
    """
    a = as_tensor(a)
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    axis = normalize_axis_index(axis, a.ndim)
    parts = []
    for extra, where_ in ((prepend, 0), (append, 1)):
        if extra is not None:
            e = as_tensor(extra)
            if e.ndim == 0:
                shape = list(a.shape)
                shape[axis] = 1
                e = e * np.ones(tuple(shape))
            parts.append((where_, e))
    if parts:
        a = concatenate([e for w, e in parts if w == 0] + [a] +
                        [e for w, e in parts if w == 1], axis=axis)
    for _ in range(n):
        a = _along(a, axis, slice(1, None)) - _along(a, axis, slice(None, -1))
    return a


def gradient(f, *varargs, axis=None, edge_order=1):
    """numpy.gradient: second-order central differences inside, first or second order
    one-sided ones at the edges, for uniform spacings or coordinate arrays; one array
    per axis (a list when there are several).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.gradient(x * x)
    tensor([3., 4., 5.], grad_fn=<CatBackward>)
    """
    f = as_tensor(f)
    axes = list(range(f.ndim)) if axis is None else [
        normalize_axis_index(x, f.ndim) for x in ((axis,) if np.ndim(axis) == 0 else axis)]
    if len(varargs) == 0:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacing = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise TypeError("invalid number of arguments")
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    out = [_gradient_1d(f, ax, h, edge_order) for ax, h in zip(axes, spacing)]
    return out[0] if len(out) == 1 else out


def _gradient_1d(f, axis, h, edge_order):
    n = f.shape[axis]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at "
                         "least (edge_order + 1) elements are required.")
    shape = [1] * f.ndim
    shape[axis] = -1

    def s(lo, hi=None):
        return _along(f, axis, slice(lo, hi))

    def col(v):                                    # a per-position spacing, broadcastable
        return reshape(v, tuple(shape))
    if np.ndim(h) == 0:
        h = float(h) if not isinstance(h, Tensor) else h
        interior = (s(2) - s(None, -2)) / (2.0 * h)
        if edge_order == 1:
            first = (s(1, 2) - s(0, 1)) / h
            last = (s(-1) - s(-2, -1)) / h
        else:
            first = (-1.5 * s(0, 1) + 2.0 * s(1, 2) - 0.5 * s(2, 3)) / h
            last = (0.5 * s(-3, -2) - 2.0 * s(-2, -1) + 1.5 * s(-1)) / h
        return concatenate([first, interior, last], axis=axis)
    x = as_tensor(h)
    if x.ndim != 1 or x.shape[0] != n:
        raise ValueError("when 1d, distances must match the length of the corresponding "
                         "dimension")
    d = x[1:] - x[:-1]
    hm, hp = d[:-1], d[1:]                        # h_(i-1), h_i around interior point i
    a = col(-hp / (hm * (hm + hp)))
    b = col((hp - hm) / (hm * hp))
    c = col(hm / (hp * (hm + hp)))
    interior = a * s(None, -2) + b * s(1, -1) + c * s(2)
    if edge_order == 1:
        first = (s(1, 2) - s(0, 1)) / col(d[:1])
        last = (s(-1) - s(-2, -1)) / col(d[-1:])
    else:
        d1, d2 = d[0:1], d[1:2]
        first = (col(-(2.0 * d1 + d2) / (d1 * (d1 + d2))) * s(0, 1) +
                 col((d1 + d2) / (d1 * d2)) * s(1, 2) + col(-d1 / (d2 * (d1 + d2))) * s(2, 3))
        d1, d2 = d[-2:-1], d[-1:]
        last = (col(d2 / (d1 * (d1 + d2))) * s(-3, -2) + col(-(d2 + d1) / (d1 * d2)) *
                s(-2, -1) + col((2.0 * d2 + d1) / (d2 * (d1 + d2))) * s(-1))
    return concatenate([first, interior, last], axis=axis)


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The trapezoidal rule along ``axis``, with sample points x or spacing dx.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.grad(at.trapezoid(x * x), x)
    (tensor([1., 4., 3.]),)
    """
    y = as_tensor(y)
    axis = normalize_axis_index(axis, y.ndim)
    if x is None:
        d = dx
    else:
        x = as_tensor(x)
        d = diff(x, axis=-1 if x.ndim == 1 else axis)
        if x.ndim == 1:
            shape = [1] * y.ndim
            shape[axis] = d.shape[0]
            d = reshape(d, tuple(shape))
    return sum(d * (_along(y, axis, slice(1, None)) + _along(y, axis, slice(None, -1))),
               axis=axis) / 2.0


def polyval(p, x):
    """The polynomial with coefficients p (highest power first) at x, by Horner's rule.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.polyval(x, 2.0)
    tensor(11., grad_fn=<AddBackward>)
    """
    p = as_tensor(p)
    y = as_tensor(x) * 0.0
    for k in range(p.shape[0]):
        y = y * x + p[k]
    return y


def interp(x, xp, fp, left=None, right=None, period=None):
    """numpy.interp: piecewise-linear interpolation of (xp, fp) at x (xp increasing),
    with ``left`` / ``right`` outside; differentiable in x, xp and fp.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.interp([1.5, 2.5], [1.0, 2.0, 3.0], x)
    tensor([1.5, 2.5], grad_fn=<WhereBackward>)
    """
    if period is not None:
        raise ValueError("autotape's interp does not support period")
    x, xp, fp = as_tensor(x), as_tensor(xp), as_tensor(fp)
    if xp.ndim != 1 or fp.ndim != 1 or xp.shape != fp.shape:
        raise ValueError("fp and xp are not of the same length.")
    if xp.shape[0] == 0:
        raise ValueError("array of sample points is empty")
    n = xp.shape[0]
    if n == 1:
        out = fp[0] + x * 0.0
    else:
        hi = observe(lambda xv, xpv: np.clip(np.searchsorted(xpv, xv, side="right"), 1,
                                             n - 1), x, xp)
        lo = hi - 1
        x0, x1, f0, f1 = xp[lo], xp[hi], fp[lo], fp[hi]
        out = f0 + (x - x0) * ((f1 - f0) / (x1 - x0))
        # at a right end equal to xp[-1], numpy returns fp[-1] exactly
        out = where(compare(np.equal, x, xp[n - 1]), fp[n - 1] + x * 0.0, out)
    out = where(compare(np.less, x, xp[0]), fp[0] if left is None else left, out)
    return where(compare(np.greater, x, xp[n - 1]), fp[n - 1] if right is None else right,
                 out)


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """The cross product of 3-vectors (or the z component for 2-vectors) along an axis.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.cross(x, at.tensor([0.0, 0.0, 1.0]))
    tensor([ 2., -1.,  0.], grad_fn=<ViewBackward>)
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(as_tensor(a), axisa, -1)
    b = moveaxis(as_tensor(b), axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n(dimension must be 2 "
                         "or 3)")
    a0, a1 = a[..., 0], a[..., 1]
    b0, b1 = b[..., 0], b[..., 1]
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a0 * b1 - a1 * b0
    a2 = a[..., 2] if a.shape[-1] == 3 else a0 * 0.0
    b2 = b[..., 2] if b.shape[-1] == 3 else b0 * 0.0
    c = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return moveaxis(c, -1, axisc)


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """Indices that sort ``a`` along ``axis`` (an integer tensor: no gradient).

    >>> y = at.tensor([3.0, 1.0, 2.0])
    >>> at.argsort(y)
    tensor([1, 2, 0])
    """
    return leaf_of(observe(lambda v: np.argsort(v, axis=axis, kind=kind, stable=stable),
                           as_tensor(a)))


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """The values sorted along ``axis`` (None: flattened); each one's gradient goes
    back to the element it came from (ties: numpy's order).

    >>> y = at.tensor([3.0, 1.0, 2.0], requires_grad=True)
    >>> at.sort(y)
    tensor([1., 2., 3.], grad_fn=<IndexBackward>)
    """
    a = as_tensor(a)
    if axis is None:
        a, axis = reshape(a, (-1,)), -1
    return take_along_axis(a, argsort(a, axis, kind, stable=stable), axis)


def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    """numpy.argpartition (an integer tensor: no gradient).

    >>> y = at.tensor([3.0, 1.0, 2.0])
    >>> at.argpartition(y, 1)
    tensor([1, 2, 0])
    """
    return leaf_of(observe(lambda v: np.argpartition(v, kth, axis=axis), as_tensor(a)))


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """numpy.partition: the kth element in its sorted place, smaller ones before and
    larger after (a gather, like sort).

    >>> y = at.tensor([3.0, 1.0, 2.0])
    >>> at.partition(y, 1)
    tensor([1., 2., 3.])
    """
    a = as_tensor(a)
    if axis is None:
        a, axis = reshape(a, (-1,)), -1
    return take_along_axis(a, argpartition(a, kth, axis), axis)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             requires_grad=False):
    """numpy.linspace; with Tensor (or array) endpoints the samples are differentiable
    in them (start + k * step, the last one equal to stop when ``endpoint``).

    >>> a = at.tensor(1.0, requires_grad=True)
    >>> at.grad(at.linspace(0.0, a, 3).sum(), a)
    (tensor(1.5),)
    """
    if not isinstance(start, Tensor) and not isinstance(stop, Tensor) and \
            np.ndim(start) == 0 and np.ndim(stop) == 0 and axis == 0 and not retstep:
        if endpoint:
            return _linspace(start, stop, num, dtype=dtype, requires_grad=requires_grad)
        values = np.linspace(start, stop, num, endpoint=False, dtype=dtype)
        return as_tensor(values).requires_grad_(requires_grad)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    start, stop = as_tensor(start), as_tensor(stop)
    div = (num - 1) if endpoint else num
    lead = np.broadcast_shapes(start.shape, stop.shape)
    k = np.arange(num, dtype=np.float64).reshape((-1,) + (1,) * len(lead))
    delta = stop - start
    step = delta / div if div > 0 else delta * np.nan
    y = start + k * (step if div > 0 else delta * 0.0)
    if endpoint and num > 1:
        last = np.zeros((num,) + (1,) * len(lead), bool)
        last[-1] = True
        y = where(last, stop + y * 0.0, y)
    y = moveaxis(y, 0, axis) if axis != 0 else y
    if dtype is not None:
        y = y.astype(dtype)
    return (y, step) if retstep else y
