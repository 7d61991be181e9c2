"""Reductions and scans, Python tier: recorders and create_graph rules. The compiled
tier is kernels/reduce.py (whose docstring states each VJP and its exact zeros).
"""
import builtins
import math
import warnings

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from ..errstate import ignore_fp_errors
from ..guards import observe
from ..opcodes import CUMPROD, CUMSUM, MAX, MEAN, MIN, PROD, SUM
from ..tape_format import reduce_params, reduced_axes, scan_dims, scan_params
from ..tensor import array_of
from .indexing import as_tensor, reshape
from .recording import record

reductions = {SUM: np.sum, MEAN: np.mean, MAX: np.max, MIN: np.min, PROD: np.prod}


def normalize_axes(x, axis):
    """``axis`` (None: all axes; an int or a tuple) as a tuple of axes of x."""
    return tuple(range(x.ndim)) if axis is None else normalize_axis_tuple(axis, x.ndim)


def reduction(code, x, axis, keepdims):
    """Record the reduction ``code`` of x over ``axis`` (None: all axes)."""
    x = as_tensor(x)
    axes = normalize_axes(x, axis)
    with ignore_fp_errors(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        z = reductions[code](array_of(x), axis=axes, keepdims=keepdims)
    return record(code, z, x, params=reduce_params(axes))


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (None: all axes; an int or a tuple of ints)."""
    return reduction(SUM, x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """Mean over ``axis`` (None: all axes; an int or a tuple of ints)."""
    return reduction(MEAN, x, axis, keepdims)


def max(x, axis=None, keepdims=False):
    """Largest element over ``axis``; the gradient is split evenly among ties."""
    return reduction(MAX, x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """Smallest element over ``axis``; the gradient is split evenly among ties."""
    return reduction(MIN, x, axis, keepdims)


def prod(x, axis=None, keepdims=False):
    """Product over ``axis``; exact gradients with zeros (see ops/reduce.py)."""
    return reduction(PROD, x, axis, keepdims)


def cumsum(x, axis=None):
    """Cumulative sum along ``axis`` (of the flattened tensor when None)."""
    return _scan(CUMSUM, np.cumsum, x, axis)


def cumprod(x, axis=None):
    """Cumulative product along ``axis`` (of the flattened tensor when None). Its
    gradient never divides by x, so it is exact where x has zeros.

    >>> x = at.tensor([2.0, 0.0, 3.0], requires_grad=True)
    >>> at.grad(at.cumprod(x).sum(), x)
    (tensor([1., 8., 0.]),)
    """
    return _scan(CUMPROD, np.cumprod, x, axis)


def _scan(code, np_fn, x, axis):
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = normalize_axis_index(axis, x.ndim)
    outer, inner = math.prod(x._shape[:axis]), math.prod(x._shape[axis + 1:])
    return record(code, np_fn(array_of(x), axis=axis), x,
                  params=scan_params(outer, x._shape[axis], inner))


amax, amin = max, min            # (sum, max and min shadow the builtins below: builtins.max)


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
