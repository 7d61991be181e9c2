"""Reductions and scans, Python tier: recorders and create_graph rules. The compiled
tier is kernels/reduce.py (whose docstring states each VJP and its exact zeros).
"""
import builtins
import math
import warnings
from collections import namedtuple

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from ..errstate import ignore_fp_errors
from ..guards import observe
from ..kernels.reduce import sum_in_threads
from ..parallel import for_numba, parallel_launch, pieces
from ..opcodes import CUMPROD, CUMSUM, MAX, MEAN, MIN, PROD, SUM
from ..tape_format import reduce_params, reduced_axes, scan_dims, scan_params
from ..tensor import array_of, leaf_of
from .indexing import as_tensor, reshape, take_flat
from .recording import record

reductions = {SUM: np.sum, MEAN: np.mean, MAX: np.max, MIN: np.min, PROD: np.prod}


def normalize_axes(x, axis):
    """``axis`` (None: all axes; an int or a tuple) as a tuple of axes of x."""
    return tuple(range(x.ndim)) if axis is None else normalize_axis_tuple(axis, x.ndim)


def reduction(code, x, axis, keepdims):
    """Record the reduction ``code`` of x over ``axis`` (None: all axes)."""
    x = as_tensor(x)
    axes = normalize_axes(x, axis)
    return record(code, reduction_values(code, array_of(x), axes, keepdims), x,
                  params=reduce_params(axes))


def reduction_values(code, v, axes, keepdims=False):
    """numpy's reduction ``code`` of the array v over ``axes``; a whole sum or mean of
    a large array on threads, with numpy's value (kernels/reduce.py sum_in_threads). A
    compiled function's replay computes its large sums so, as their recording did."""
    count = pieces(v.size)
    if count > 1 and (code == SUM or code == MEAN) and len(axes) == v.ndim and \
            v.dtype == np.float64 and v.flags.c_contiguous:
        for_numba()
        with parallel_launch():
            s = sum_in_threads(v.reshape(-1), (count - 1).bit_length())
        z = np.float64(s if code == SUM else s / v.size)
        return np.full((1,) * v.ndim, z) if keepdims else z
    if v.size:
        with ignore_fp_errors():
            return reductions[code](v, axis=axes, keepdims=keepdims)
    with ignore_fp_errors(), warnings.catch_warnings():   # ("Mean of empty slice")
        warnings.simplefilter("ignore", RuntimeWarning)
        return reductions[code](v, axis=axes, keepdims=keepdims)


# Each reduction takes numpy's ``axis`` / ``keepdims`` and torch's ``dim`` / ``keepdim``
# (``x.sum(dim=1, keepdim=True)``), so torch code ports unchanged.

def torch_axis(axis, keepdims, dim, keepdim):
    """(axis, keepdims) from numpy's spelling or torch's (a list of dims is a tuple)."""
    if dim is not None:
        if axis is not None:
            raise TypeError("give the axis as axis= (numpy) or dim= (torch), not both")
        axis = tuple(dim) if isinstance(dim, list) else dim
    return axis, keepdims if keepdim is None else bool(keepdim)


def sum(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Sum over ``axis`` (None: all axes; an int or a tuple of ints).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.grad(at.sum(x * x), x)
    (tensor([2., 4., 6.]),)
    """
    return reduction(SUM, x, *torch_axis(axis, keepdims, dim, keepdim))


def mean(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Mean over ``axis`` (None: all axes; an int or a tuple of ints).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.mean(x)
    tensor(2., grad_fn=<MeanBackward>)
    """
    return reduction(MEAN, x, *torch_axis(axis, keepdims, dim, keepdim))


MaxMin = namedtuple("MaxMin", "values indices")


def _extreme(code, pick, x, axis, keepdims, dim, keepdim):
    """max / min; with torch's ``dim=`` (one axis), torch's (values, indices) pair, the
    values gathered at the indices, so the gradient goes to the picked element of a
    tie, as in torch (numpy's spelling splits it evenly)."""
    if dim is None:
        return reduction(code, x, *torch_axis(axis, keepdims, None, keepdim))
    x = as_tensor(x)
    if axis is not None or not isinstance(dim, (int, np.integer)):
        raise TypeError("max / min with dim= take one int dim (torch's signature)")
    d = normalize_axis_index(int(dim), x.ndim) if x.ndim else 0
    keep = bool(keepdim)
    picked = observe(lambda v: pick(v, axis=d if v.ndim else None, keepdims=True), x)
    flat = np.arange(x.size).reshape(x.shape)
    at_index = np.take_along_axis(flat, picked, d) if x.ndim else flat
    values = take_flat(x, at_index if keep else np.squeeze(at_index, d if x.ndim else None))
    return MaxMin(values, leaf_of(picked if keep else np.squeeze(picked, d if x.ndim
                                                                    else None)))


def max(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Largest element over ``axis``; the gradient is split evenly among ties. With
    torch's ``dim=``, torch's ``(values, indices)``.

    >>> at.max(at.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1)
    MaxMin(values=tensor([5., 7.]), indices=tensor([1, 0]))
    """
    return _extreme(MAX, np.argmax, x, axis, keepdims, dim, keepdim)


def min(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Smallest element over ``axis``; the gradient is split evenly among ties. With
    torch's ``dim=``, torch's ``(values, indices)``.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.grad(at.min(x), x)
    (tensor([1., 0., 0.]),)
    """
    return _extreme(MIN, np.argmin, x, axis, keepdims, dim, keepdim)


def prod(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Product over ``axis``; exact gradients with zeros (see ops/reduce.py).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.grad(at.prod(x), x)
    (tensor([6., 3., 2.]),)
    """
    return reduction(PROD, x, *torch_axis(axis, keepdims, dim, keepdim))


def cumsum(x, axis=None, *, dim=None):
    """Cumulative sum along ``axis`` (of the flattened tensor when None).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.cumsum(x)
    tensor([1., 3., 6.], grad_fn=<CumsumBackward>)
    """
    return _scan(CUMSUM, np.cumsum, x, torch_axis(axis, False, dim, None)[0])


def cumprod(x, axis=None, *, dim=None):
    """Cumulative product along ``axis`` (of the flattened tensor when None). Its
    gradient never divides by x, so it is exact where x has zeros.

    >>> x = at.tensor([2.0, 0.0, 3.0], requires_grad=True)
    >>> at.grad(at.cumprod(x).sum(), x)
    (tensor([1., 8., 0.]),)
    """
    return _scan(CUMPROD, np.cumprod, x, torch_axis(axis, False, dim, None)[0])


def _scan(code, np_fn, x, axis):
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = normalize_axis_index(axis, x.ndim)
    outer, inner = math.prod(x._shape[:axis]), math.prod(x._shape[axis + 1:])
    return record(code, np_fn(array_of(x), axis=axis), x,
                  params=scan_params(outer, x._shape[axis], inner))


def amax(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Largest element over ``axis`` (values only, also with torch's ``dim=``).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.amax(m, axis=0)
    tensor([3., 4.], grad_fn=<MaxBackward>)
    """
    return reduction(MAX, x, *torch_axis(axis, keepdims, dim, keepdim))


def amin(x, axis=None, keepdims=False, *, dim=None, keepdim=None):
    """Smallest element over ``axis`` (values only, also with torch's ``dim=``).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.amin(m, axis=1)
    tensor([1., 3.], grad_fn=<MinBackward>)
    """
    return reduction(MIN, x, *torch_axis(axis, keepdims, dim, keepdim))
# (sum, max and min shadow the builtins in this module: builtins.max)


# ---- the derivatives written with autotape ops, for create_graph=True ------------------------
# (at, g, r, k) -> the gradient of operand k; see ops/elementwise.py.

def _kept_shape(r):
    """The operand's shape with the reduced axes kept as 1s."""
    axes = reduced_axes(r.params, r.x.ndim)
    return tuple(1 if d in axes else n for d, n in enumerate(r.x.shape))


def _expand(at, g, r):
    """g back over the reduced axes of the operand."""
    kept = _kept_shape(r)
    return at.broadcast_to(g.reshape(kept), r.x.shape)


def _tie_share(r):
    """1/ties at the elements equal to their group's max or min, 0 elsewhere."""
    kept, axes = _kept_shape(r), reduced_axes(r.params, r.x.ndim)

    def share(x, z):
        hit = x == z.reshape(kept)
        return hit / np.sum(hit, axis=axes, keepdims=True)
    return observe(share, r.x, r.z)


def _prod_rule(at, g, r):
    """g times the product of the other elements: z / x at non-zero elements (through
    the recorded z, so correct to any order), and at each zero the recorded product of
    the others (zeros are few; one product each)."""
    axes = reduced_axes(r.params, r.x.ndim)
    x, ge = r.x, _expand(at, g, r)
    zero = observe(lambda v: v == 0, x)
    out = at.where(zero, 0.0, ge * _expand(at, r.z, r) / at.where(zero, 1.0, x))
    for p in map(tuple, np.argwhere(zero)):         # (argwhere: also for 0-d)
        here = np.zeros(zero.shape, bool)
        here[p] = True
        others = at.prod(at.where(here, 1.0, x), axis=axes, keepdims=True)
        out = out + at.where(here, ge * at.broadcast_to(others, x.shape), 0.0)
    return out


def _reverse_cumsum(at, g, r):
    outer, length, inner = (int(v) for v in scan_dims(r.params, 0))
    g3 = g.reshape(outer, length, inner)
    return at.flip(at.cumsum(at.flip(g3, 1), axis=1), 1).reshape(r.x.shape)


def _cumprod_rule(at, g, r):
    """The compiled recurrence as recorded ops, without division (exact at zeros, to any
    order): with Q[j, k] = prod of x over j < t <= k (a cumprod of x with the first j+1
    entries set to 1), dx_j = z_(j-1) sum_(k >= j) g_k Q[j, k]. Costs length^2."""
    outer, length, inner = (int(v) for v in scan_dims(r.params, 0))
    x3, g3, z3 = (t.reshape(outer, 1, length, inner) for t in (r.x, g, r.z))
    j = np.arange(length)
    later = (j[None, :] > j[:, None])[None, :, :, None]          # [j, t]: t > j
    q = at.cumprod(at.where(later, x3, 1.0), axis=2)
    r_j = at.where(~later & (j[None, :] != j[:, None])[None, :, :, None], 0.0,
                   g3 * q).sum(axis=2)                              # sum over k >= j
    z_prev = at.concatenate([at.ones((outer, 1, inner)), z3[:, 0, :-1]], axis=1)
    return (z_prev * r_j).reshape(r.x.shape)


graph_vjps = {
    PROD: lambda at, g, r, k: _prod_rule(at, g, r),
    CUMPROD: lambda at, g, r, k: _cumprod_rule(at, g, r),
    CUMSUM: lambda at, g, r, k: _reverse_cumsum(at, g, r),
    SUM:  lambda at, g, r, k: _expand(at, g, r),
    MEAN: lambda at, g, r, k: _expand(at, g, r) * (r.z.size / builtins.max(r.x.size, 1)),
    MAX:  lambda at, g, r, k: _expand(at, g, r) * _tie_share(r),
    MIN:  lambda at, g, r, k: _expand(at, g, r) * _tie_share(r),
}
