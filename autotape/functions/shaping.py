"""numpy's shape and selection functions composed of table ops (reshapes, strided
gathers, concatenations, gathers by index arrays): expand_dims ... tril, diagonal,
trace, take, take_along_axis."""
import functools
import math

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from ..creation import full
from ..ops.elementwise import where
from ..ops.indexing import (as_tensor, broadcast_to, c_strides, concatenate, gather, reshape,
                            take_flat, transpose)
from ..ops.reduce import normalize_axes, sum
from ..tensor import Tensor, array_of

__all__ = ["cat", "diagonal", "trace", "expand_dims", "unsqueeze", "squeeze", "ravel", "flatten", "swapaxes", "moveaxis", "flip", "split", "roll", "tile", "repeat", "pad", "triu", "tril", "take", "take_along_axis"]


def cat(tensors, dim=0, *, axis=None):
    """torch.cat: the tensors joined along ``dim`` (numpy's concatenate).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.cat([x, x], dim=0)
    tensor([1., 2., 3., 1., 2., 3.], grad_fn=<CatBackward>)
    """
    return concatenate(tensors, dim if axis is None else axis)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal of the (axis1, axis2) planes, as numpy (a gather: its gradient is a
    scatter back onto the diagonal).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.diagonal(m)
    tensor([1., 4.], grad_fn=<ViewBackward>)
    """
    a = as_tensor(a)
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), a.shape,
                                           c_strides(a.shape, 1), writeable=False)
    view = np.diagonal(base, offset, axis1, axis2)
    start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return gather(a, (view.shape, start, view.strides))


def trace(a, offset=0, axis1=0, axis2=1):
    """Sum of the diagonal.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.grad(at.trace(m), m)
    (tensor([[1., 0.],
            [0., 1.]]),)
    """
    return sum(diagonal(a, offset, axis1, axis2), axis=-1)


def expand_dims(a, axis):
    """Insert size-1 axes at ``axis`` (an int or a tuple), as numpy.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.unsqueeze(x, 1).shape
    (3, 1)

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.expand_dims(x, 0).shape
    (1, 3)
    """
    a = as_tensor(a)
    axes = normalize_axis_tuple(axis, a.ndim + (len(axis) if isinstance(axis, tuple) else 1))
    shape = iter(a.shape)
    return reshape(a, tuple(1 if d in axes else next(shape)
                            for d in range(a.ndim + len(axes))))


unsqueeze = expand_dims


def squeeze(a, axis=None):
    """Remove size-1 axes (all, or those in ``axis``).

    >>> at.squeeze(at.zeros(1, 3)).shape
    (3,)
    """
    a = as_tensor(a)
    axes = tuple(d for d, n in enumerate(a.shape) if n == 1) if axis is None else \
        normalize_axis_tuple(axis, a.ndim)
    if any(a.shape[d] != 1 for d in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal "
                         "to one")
    return reshape(a, tuple(n for d, n in enumerate(a.shape) if d not in axes))


def ravel(a):
    """The elements as a 1-D tensor, C order.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.ravel(m)
    tensor([1., 2., 3., 4.], grad_fn=<ReshapeBackward>)

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.flatten(m)
    tensor([1., 2., 3., 4.], grad_fn=<ReshapeBackward>)
    """
    return reshape(a, (-1,))


flatten = ravel


def swapaxes(a, axis1, axis2):
    """numpy.swapaxes on Tensors: a view with two axes exchanged.

    >>> at.swapaxes(at.zeros(2, 3), 0, 1).shape
    (3, 2)
    """
    a = as_tensor(a)
    perm = list(range(a.ndim))
    i, j = normalize_axis_tuple((axis1, axis2), a.ndim, allow_duplicate=True)
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, tuple(perm))


def moveaxis(a, source, destination):
    """numpy.moveaxis on Tensors: a view with axes moved to new positions.

    >>> at.moveaxis(at.zeros(2, 3, 4), 0, -1).shape
    (3, 4, 2)
    """
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
    """Reverse the order of elements along ``axis`` (all axes when None).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.flip(x)
    tensor([3., 2., 1.], grad_fn=<ViewBackward>)
    """
    a = as_tensor(a)
    axes = normalize_axes(a, axis)
    return a[tuple(slice(None, None, -1) if d in axes else slice(None)
                   for d in range(a.ndim))]


def split(a, indices_or_sections, axis=0):
    """A list of sub-tensors, as numpy.split.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.split(x, 3)
    [tensor([1.], grad_fn=<ViewBackward>), tensor([2.], grad_fn=<ViewBackward>),
     tensor([3.], grad_fn=<ViewBackward>)]
    """
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
    """Shift elements along ``axis`` cyclically (on the flattened tensor when None): one
    gather by a cached index map, so one tape row (its gradient rolls back).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.roll(x, 1)
    tensor([3., 1., 2.], grad_fn=<IndexBackward>)
    """
    a = as_tensor(a)
    if not a._shape or 0 in a._shape:            # (not .size: a Size per call, here hot)
        return a.copy()                          # a new tensor, never an alias of a
    if type(shift) is int and (axis is None or type(axis) is int):       # the common case
        key = (a._shape, (shift,), None if axis is None else
               (normalize_axis_index(axis, a.ndim),))
    else:
        shifts = np.atleast_1d(np.asarray(shift, np.int64))
        axes = None if axis is None else np.atleast_1d(normalize_axis_tuple(
            axis, a.ndim, allow_duplicate=True))
        if axes is not None:
            shifts, axes = np.broadcast_arrays(shifts, axes)
            axes = tuple(int(d) for d in axes)
        elif shifts.size != 1:
            raise ValueError("with axis=None, roll takes a single shift")
        key = (a._shape, tuple(int(s) for s in shifts), axes)
    index = _roll_map(*key)
    return take_flat(a, index, _rolled(a._value, *key[1:]))


def _rolled(v, shifts, axes):
    """The rolled values (the gather's, as copies): two slice copies for a flat roll,
    several times faster than gathering by the index map."""
    if axes is None:
        flat = v.reshape(-1)
        n = flat.size
        s = shifts[0] % n
        out = np.empty(n, v.dtype)
        out[s:] = flat[:n - s]
        out[:s] = flat[n - s:]
        return out.reshape(v.shape)
    return np.roll(v, shifts, axes)


@functools.lru_cache(maxsize=256)
def _roll_map(shape, shifts, axes):
    """The flat source index of every element of a roll, as float64 (read-only: a tape
    keeps it as a constant, one row per tape while it is the same array)."""
    index = np.roll(np.arange(math.prod(shape), dtype=np.float64).reshape(shape), shifts,
                    axes).copy()            # (its own data: frozen, not copied, by the tape)
    index.flags.writeable = False
    return index


def tile(a, reps):
    """Repeat the whole tensor ``reps`` times per axis (one broadcast and a reshape).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.tile(x, 2)
    tensor([1., 2., 3., 1., 2., 3.], grad_fn=<ReshapeBackward>)
    """
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
    """Repeat each element ``repeats`` times along ``axis`` (flattened when None).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.repeat(x, 2)
    tensor([1., 1., 2., 2., 3., 3.], grad_fn=<ReshapeBackward>)
    """
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
    tensor, so the gradient of the padding is zero.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.pad(x, 1)
    tensor([0., 1., 2., 3., 0.], grad_fn=<CopySlices>)
    """
    if mode != "constant" or np.ndim(constant_values) != 0:
        raise ValueError("autotape's pad supports mode='constant' with one constant value")
    a = as_tensor(a)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2))
    out = full(tuple(int(n + lo + hi) for n, (lo, hi) in zip(a.shape, widths)),
               constant_values, dtype=a.dtype)
    out[tuple(slice(int(lo), int(lo) + n) for n, (lo, _) in zip(a.shape, widths))] = a
    return out


def triu(m, k=0):
    """Upper triangle of the last two axes (below the k-th diagonal set to 0).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.triu(m)
    tensor([[1., 2.],
            [0., 4.]], grad_fn=<WhereBackward>)
    """
    m = as_tensor(m)
    return where(np.triu(np.ones(m.shape[-2:], bool), k), m, 0.0)


def tril(m, k=0):
    """Lower triangle of the last two axes (above the k-th diagonal set to 0).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.tril(m)
    tensor([[1., 0.],
            [3., 4.]], grad_fn=<WhereBackward>)
    """
    m = as_tensor(m)
    return where(np.tril(np.ones(m.shape[-2:], bool), k), m, 0.0)


def _index_array(indices):
    return np.asarray(array_of(indices) if isinstance(indices, Tensor) else indices)


def take(a, indices, axis=None):
    """Elements at ``indices`` along ``axis`` (of the flattened tensor when None); the
    gradient of a repeated index accumulates.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.take(x, [2, 0])
    tensor([3., 1.], grad_fn=<IndexBackward>)
    """
    a = as_tensor(a)
    return take_flat(a, np.take(np.arange(a.size).reshape(a.shape), _index_array(indices),
                                axis=axis))


def take_along_axis(arr, indices, axis):
    """numpy.take_along_axis: ``indices`` picks along ``axis`` position by position.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.take_along_axis(m, np.array([[1], [0]]), axis=1)
    tensor([[2.],
            [3.]], grad_fn=<IndexBackward>)
    """
    arr = as_tensor(arr)
    return take_flat(arr, np.take_along_axis(np.arange(arr.size).reshape(arr.shape),
                                             _index_array(indices), axis))
