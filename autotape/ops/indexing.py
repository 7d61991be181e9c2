"""Indexing ops, Python tier: reshape, strided views (basic indexing, transpose,
broadcast_to), gathers and scatter-adds by an index array, and concatenation, with
their recorders and create_graph rules. The compiled tier is kernels/indexing.py.

A strided view is described by an offset and one stride per output axis, in elements
of the operand's flat C-order data; its VJP scatter-adds the gradient back along the
same pattern. Concatenation places each operand in a band of columns of the output
viewed as (outer, width). Lists that hold Tensors are stacked on the tape wherever a
Tensor is expected (``as_tensor``), so ``np.mean([x, 1.0])`` keeps x's gradient.
"""
import functools
import itertools
import math
import numbers

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from ..guards import observe
from ..opcodes import CONCAT, PUT_ADD, RESHAPE, SCATTER, SEARCHSORTED, SETITEM, STRIDED, TAKE
from ..tape_format import (concat_params, concat_part, concat_dims, setitem_region,
                           setitem_view, view_offset, view_params, view_strides)
from ..tensor import F64, Tensor, array_of, holds_tensor, leaf_of, new_leaf, tensor_from
from .recording import record, record_listed, recording


# ---- index maps -----------------------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def c_strides(shape, itemsize):
    """The strides of a C-contiguous array of ``shape``."""
    strides, s = [], itemsize
    for d in reversed(shape):
        strides.append(s)
        s *= max(d, 1)
    return tuple(reversed(strides))


def view_pattern(shape, index):
    """(shape, offset, strides in elements) of ``x[index]`` for a C-contiguous ``x`` of
    ``shape``. Computed by indexing a zero-size-backed array of the same shape and
    strides, so no data is touched."""
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape,
                                           c_strides(shape, 1), writeable=False)
    view = base[index]
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return view.shape, offset, view.strides


def index_map(base_size, shape, offset, strides):
    """numpy: the flat index into the base of every element of a strided view."""
    if 0 in shape:
        return np.zeros(shape, np.int64)
    # (numpy's constructor checks the view lies in the buffer; a quarter of as_strided's
    # cost, which the Python tier pays per view row)
    view = np.ndarray(shape, np.int64, np.arange(max(base_size, 1), dtype=np.int64),
                      offset * 8, tuple(s * 8 for s in strides))
    view.flags.writeable = False
    return view


def gathered(x, pattern):
    """numpy: x's elements at a strided pattern (gather's values)."""
    x = np.asarray(x)
    return x.reshape(-1)[index_map(x.size, *pattern)]


def scattered(x, pattern, base_shape):
    """numpy, float64: zeros of ``base_shape`` with x's elements added at the pattern,
    repeated positions accumulating (scatter's values)."""
    n = math.prod(base_shape)
    shape, offset, strides = pattern
    if _one_to_one(shape, strides) and np.shape(x) == tuple(shape):  # (basic indexing's
        z = np.zeros(n)                                                # views: no repeats)
        view = np.ndarray(shape, F64, z, offset * 8, tuple(s * 8 for s in strides))
        view += x                               # (0.0 + x, as bincount: -0.0 becomes 0.0)
        return z.reshape(base_shape)
    idx = index_map(n, *pattern).reshape(-1)
    z = np.bincount(idx, weights=np.asarray(x, F64).reshape(-1), minlength=n)
    return z.reshape(base_shape)


def _one_to_one(shape, strides):
    """Whether a non-empty strided pattern reaches every position at most once: each
    axis's stride, by size, steps over all the positions the smaller ones span."""
    if 0 in shape:
        return False
    span = 0
    for size, stride in sorted(((n, abs(s)) for n, s in zip(shape, strides) if n > 1),
                               key=lambda pair: pair[1]):
        if stride <= span:
            return False
        span += stride * (size - 1)
    return True


def taken(x, flat_index):
    """numpy: x's elements at ``flat_index`` (ints, any shape) of its flat data
    (take_flat's values)."""
    return np.asarray(x).reshape(-1)[np.asarray(flat_index, np.int64)]


def put_added(x, flat_index, base_shape):
    """numpy, float64: zeros of ``base_shape`` with x added at ``flat_index`` (ints,
    x's shape; repeated indices accumulate: put_add's values)."""
    z = np.bincount(np.asarray(flat_index, np.int64).reshape(-1),
                    weights=np.asarray(x, F64).reshape(-1), minlength=math.prod(base_shape))
    return z.reshape(base_shape)


def transpose_pattern(shape, axes):
    c = c_strides(shape, 1)
    return tuple(shape[a] for a in axes), 0, tuple(c[a] for a in axes)


def broadcast_pattern(shape, target):
    c = c_strides(shape, 1)
    lead = len(target) - len(shape)
    strides = [0] * lead + [0 if shape[d] == 1 else c[d] for d in range(len(shape))]
    return tuple(target), 0, tuple(strides)


# ---- recorders ------------------------------------------------------------------------------

def as_tensor(data):
    """``data`` unchanged if it is a Tensor; nested lists that hold Tensors stacked on
    the tape; else a constant tensor.

    >>> at.as_tensor(np.array([1.0, 2.0]))
    tensor([1., 2.])
    """
    if type(data) is Tensor:
        return data
    if type(data) in (list, tuple) and holds_tensor(data):
        return stack([as_tensor(item) for item in data])
    return tensor_from(data)


def reshape(x, shape):
    """The same elements in a new shape (C order); one dimension may be -1.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.reshape(x, (3, 1))
    tensor([[1.],
            [2.],
            [3.]], grad_fn=<ReshapeBackward>)
    """
    x = as_tensor(x)
    if isinstance(shape, (numbers.Integral, Tensor)):
        shape = (shape,)
    return record(RESHAPE, array_of(x).reshape(tuple(int(d) for d in shape)), x)


def astype(x, dtype):
    """x converted to ``dtype`` (numpy's casting). Between float dtypes the gradient
    passes through unchanged (recorded as a reshape: same elements, new dtype); a cast
    to an integer or bool dtype ends the graph.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.astype(x, at.float32)
    tensor([1., 2., 3.], dtype=float32, grad_fn=<ReshapeBackward>)
    """
    x = as_tensor(x)
    dtype = np.dtype(dtype)
    if dtype.kind != "f":                      # leaves the graph: a decision
        return leaf_of(observe(lambda v: v.astype(dtype), x))
    return record(RESHAPE, array_of(x).astype(dtype), x)


def gather(x, pattern):
    """x's elements at a strided pattern (shape, offset, strides in elements of x's flat
    C-order data). Basic indexing, transpose and broadcast_to are such gathers."""
    x = as_tensor(x)
    _, offset, strides = pattern
    return record(STRIDED, gathered(array_of(x), pattern), x,
                  params=view_params(offset, strides))


def scatter(x, pattern, base_shape):
    """The transpose of gather: zeros of ``base_shape`` with x's elements added at the
    pattern (x has the pattern's shape; repeated positions accumulate)."""
    x = as_tensor(x)
    _, offset, strides = pattern
    return record(SCATTER, scattered(array_of(x), pattern, base_shape).astype(x._dtype), x,
                  params=view_params(offset, strides))


def take_flat(x, flat_index, value=None):
    """x's elements at ``flat_index`` (an int array of any shape, into x's flat C-order
    data): the gather behind advanced indexing, take, take_along_axis and roll.
    ``value``: the gathered values, when the caller has them already. A Tensor of
    whole-number floats as ``flat_index`` (``search_positions``'): positions the
    program computes, read again by a compiled replay (no gradient flows to them).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> take_flat(x * 10.0, search_positions([0.0, 1.0, 2.0], at.tensor([0.5, 2.0])))
    tensor([20., 30.], grad_fn=<IndexBackward>)
    """
    x = as_tensor(x)
    if type(flat_index) is Tensor:
        return record(TAKE, taken(array_of(x), _whole(flat_index)), x, flat_index)
    flat_index = np.asarray(flat_index)
    if value is None:
        value = taken(array_of(x), flat_index)
    return record(TAKE, value, x, flat_index if flat_index.dtype == F64 else
                  flat_index.astype(F64))


def _whole(positions):
    """A Tensor of positions as ints (whole-number floats, as search_positions gives)."""
    p = array_of(positions)
    idx = np.asarray(p, np.int64)
    if p.dtype.kind != "f" or not np.array_equal(idx, p):
        raise IndexError("take_flat / put_add: positions must be whole numbers")
    return idx


def search_positions(sorted_values, values):
    """Where each of ``values`` goes in ``sorted_values`` (1-D, non-decreasing): how many
    of them lie below it (numpy's ``searchsorted``, side "left"), as float positions
    ``take_flat`` can read. Recorded, so that a compiled replay searches again; its
    gradient is zero.

    >>> search_positions([0.0, 1.0, 2.0], at.tensor([-1.0, 0.5, 1.0, 9.0]))
    tensor([0., 1., 1., 3.])
    """
    a, v = as_tensor(sorted_values), as_tensor(values)
    if a.ndim != 1:
        raise ValueError(f"search_positions: sorted_values must be 1-D, not {a.ndim}-D")
    z = np.searchsorted(array_of(a), array_of(v), side="left").astype(F64)
    return record(SEARCHSORTED, z, a, v)


def put_add(x, flat_index, base_shape):
    """The transpose of take_flat: zeros of ``base_shape`` with x added at ``flat_index``
    (x has the index's shape; repeated indices accumulate). A Tensor of whole-number
    floats as ``flat_index``: positions the program computes (take_flat's)."""
    x = as_tensor(x)
    if type(flat_index) is Tensor:
        z = np.zeros(math.prod(base_shape))
        np.add.at(z, _whole(flat_index).reshape(-1), np.asarray(array_of(x), F64).reshape(-1))
        return record(PUT_ADD, z.reshape(base_shape).astype(x._dtype), x, flat_index)
    idx = np.asarray(flat_index, np.int64).reshape(-1)
    return record(PUT_ADD, put_added(array_of(x), idx, base_shape).astype(x._dtype), x,
                  idx.astype(F64))


def transpose(x, axes=None):
    """Permute the axes (reversed when ``axes`` is None).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.transpose(m)
    tensor([[1., 3.],
            [2., 4.]], grad_fn=<ViewBackward>)
    """
    x = as_tensor(x)
    axes = tuple(reversed(range(x.ndim))) if axes is None else normalize_axis_tuple(
        axes, x.ndim)
    if len(axes) != x.ndim:
        raise ValueError("axes don't match array")
    view = np.transpose(array_of(x), axes)
    if recording(x):
        return strided(x, view, transpose_pattern(x._shape, axes))
    return from_view(x, view)


def broadcast_to(x, shape):
    """``x`` repeated along new or size-1 axes to ``shape`` (numpy rules).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.broadcast_to(x, (2, 3))
    tensor([[1., 2., 3.],
            [1., 2., 3.]], grad_fn=<ViewBackward>)
    """
    x = as_tensor(x)
    shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(shape)
    view = np.broadcast_to(array_of(x), shape)
    if recording(x):
        return strided(x, view, broadcast_pattern(x._shape, shape))
    return from_view(x, view)


def strided(x, view, pattern):
    """Record ``view``, numpy's strided view of x, as a gather by ``pattern``."""
    _, offset, strides = pattern
    return record(STRIDED, view, x, params=view_params(offset, strides))


def from_view(x, view):
    """An unrecorded view of ``x``: shares memory, read-only if x requires grad."""
    if x.requires_grad and isinstance(view, np.ndarray):
        view = view.view()
        view.flags.writeable = False
    if view.shape == () and x._dtype.kind == "f":
        return new_leaf(float(view), (), x._dtype)
    return new_leaf(view if view.flags.c_contiguous else np.ascontiguousarray(view),
                    view.shape, x._dtype)


def _join(tensors, axis, new_axis):
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("need at least one array to " + ("stack" if new_axis else
                                                           "concatenate"))
    values = [array_of(t) for t in ts]
    z = np.stack(values, axis=axis) if new_axis else np.concatenate(values, axis=axis)
    axis = normalize_axis_index(axis, z.ndim)
    bands = [math.prod(t._shape[axis:]) for t in ts]
    columns = [0, *itertools.accumulate(bands[:-1])]
    outer, width = math.prod(z.shape[:axis]), math.prod(z.shape[axis:])
    return record_listed(CONCAT, z, ts, lambda rows: concat_params(
        outer, width, list(zip(rows, columns, bands))))


def stack(tensors, axis=0, *, dim=None):
    """Join same-shaped tensors along a new axis (torch's ``dim=`` is ``axis``).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.stack([x, 2 * x])
    tensor([[1., 2., 3.],
            [2., 4., 6.]], grad_fn=<CatBackward>)
    """
    return _join(tensors, axis if dim is None else dim, True)


def concatenate(tensors, axis=0):
    """Join tensors along an existing axis.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.concatenate([x, x[:1]])
    tensor([1., 2., 3., 1.], grad_fn=<CatBackward>)
    """
    return _join(tensors, axis, False)


# ---- the derivatives written with autotape ops, for create_graph=True ------------------------
# (at, g, r, k) -> the gradient of operand k; see ops/elementwise.py.

def _own_view(r):
    """STRIDED: (output shape, offset, strides) into the operand."""
    return r.shape, view_offset(r.params, 0), tuple(view_strides(r.params, 0, len(r.shape)))


def _scatter_view(r):
    """SCATTER: (operand shape, offset, strides) into the output."""
    nd = len(r.x.shape)
    return r.x.shape, view_offset(r.params, 0), tuple(view_strides(r.params, 0, nd))


def _region(r):
    """SETITEM: (region shape, offset, strides) into the base."""
    offset, strides = setitem_view(r.params, 0)
    return tuple(setitem_region(r.params, 0)), offset, tuple(strides)


def _outside_region(r):
    keep = np.ones(math.prod(r.shape))
    keep[index_map(keep.size, *_region(r)).reshape(-1)] = 0.0
    return keep.reshape(r.shape)


def _flat_index(r):
    """TAKE / PUT_ADD: the index operand, a Tensor of positions: a constant's, or those
    the program computes (read again by a compiled replay of the rule)."""
    return r.y


def _band(at, g, r, k):
    outer, width, _ = concat_dims(r.params, 0)
    _, col, band = concat_part(r.params, 0, k)
    return at.gather(g, ((outer, band), col, (width, 1))).reshape(r.value(k).shape)


graph_vjps = {
    RESHAPE: lambda at, g, r, k: g.reshape(r.x.shape),
    STRIDED: lambda at, g, r, k: at.scatter(g, _own_view(r), r.x.shape),
    SCATTER: lambda at, g, r, k: at.gather(g, _scatter_view(r)),
    SETITEM: lambda at, g, r, k: (g * _outside_region(r) if k == 0
                                  else at.gather(g, _region(r))),
    CONCAT: _band,
    TAKE: lambda at, g, r, k: at.put_add(g, _flat_index(r), r.x.shape) if k == 0 else None,
    PUT_ADD: lambda at, g, r, k: (at.take_flat(g, _flat_index(r).reshape(r.x.shape))
                                  if k == 0 else None),
    SEARCHSORTED: lambda at, g, r, k: None,       # (piecewise constant: no gradient)
}
