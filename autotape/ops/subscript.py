"""``x[index]`` and ``x[index] = value``, as numpy indexes: basic indices (ints,
slices, None, Ellipsis) are strided views, integer arrays and boolean masks gather by
an index array. Assignment records a new value for x (index assignment, SETITEM), or
for advanced indices a where / put-add composition with numpy's last-write-wins rule.
"""
import numbers

import numpy as np

from ..grad_mode import is_grad_enabled
from ..opcodes import SETITEM
from ..tape_format import setitem_params
from ..tensor import LEAF_VIEW_INPLACE_MSG, NONLEAF_NO_GRAD_INPLACE_MSG, Tensor, array_of
from .elementwise import add, where
from .indexing import (as_tensor, broadcast_to, c_strides, from_view, put_add, reshape,
                       strided, take_flat, view_pattern)
from .recording import cast_result, record, recording
from .views import check_inplace, view_of, written


def getitem(x, index):
    """``x[index]``, recorded as a strided gather (basic) or a gather by flat indices."""
    if not _is_basic(index):                  # integer arrays, boolean masks
        return take_flat(x, _flat_positions(x, _numpy_index(index)))
    index = _basic_index(index)
    view = array_of(x)[index]
    if not recording(x):
        return view_of(from_view(x, view), x, ("index", index))
    return view_of(strided(x, view, _basic_pattern(x._shape, index)), x, ("index", index))


def _basic_pattern(shape, index):
    """(shape, offset, strides in elements) of a normalised basic index into a
    C-contiguous array of ``shape``, by arithmetic (numpy has already checked the index
    in computing the view)."""
    strides = c_strides(shape, 1)
    real = sum(1 for k in index if k is not None and k is not Ellipsis)
    out_shape, out_strides = [], []
    offset = d = 0
    for k in index:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
        elif k is Ellipsis:
            for _ in range(len(shape) - real):
                out_shape.append(shape[d])
                out_strides.append(strides[d])
                d += 1
            real = len(shape)                    # (a second Ellipsis adds nothing)
        elif type(k) is slice:
            start, stop, step = k.indices(shape[d])
            length = len(range(start, stop, step))
            if length:
                offset += start * strides[d]
            out_shape.append(length)
            out_strides.append(step * strides[d])
            d += 1
        else:
            offset += (k + shape[d] if k < 0 else k) * strides[d]
            d += 1
    return tuple(out_shape), offset, tuple(out_strides)


def setitem(x, index, value):
    """``x[index] = value``: x takes the new value (and, when recorded, its new row)."""
    advanced = not _is_basic(index)
    index = _numpy_index(index) if advanced else _basic_index(index)
    value_requires = type(value) is Tensor and value.requires_grad
    if x._tape is None and x._requires_grad and is_grad_enabled():
        raise RuntimeError(LEAF_VIEW_INPLACE_MSG)
    check_inplace(x)
    if not (is_grad_enabled() and (x.requires_grad or value_requires)):
        if x._tape is not None:
            raise RuntimeError(NONLEAF_NO_GRAD_INPLACE_MSG)
        a = array_of(x)
        if x.requires_grad or not a.flags.writeable or type(x._value) is float:
            a = a.copy()                 # tapes may hold the old value
        a[index] = array_of(value) if type(value) is Tensor else value
        x._value = float(a) if (x._shape == () and x._dtype.kind == "f") else a
        x._cache = None
        written(x)
        return
    if x._dtype.kind != "f":
        raise TypeError("cannot assign a tensor that requires grad into a tensor of dtype "
                        f"{x._dtype}")
    x._become(_assign_advanced(x, index, value) if advanced else _assign(x, index, value))
    written(x)


def _assign(x, index, value):
    """x with the basic-index region replaced by value: one SETITEM row."""
    new = array_of(x).copy()
    new[index] = array_of(value) if type(value) is Tensor else value
    region, offset, strides = view_pattern(x._shape, index)
    vt = as_tensor(value)
    vshape = vt._shape
    while len(vshape) > len(region) and vshape[0] == 1:    # numpy drops leading 1s
        vshape = vshape[1:]
    if vshape != vt._shape:
        vt = reshape(vt, vshape)
    if np.broadcast_shapes(vt._shape, region) != region:
        raise ValueError(f"could not broadcast input array from shape {vt._shape} into "
                         f"shape {region}")
    return record(SETITEM, new, x, vt, setitem_params(region, offset, strides))


def _assign_advanced(x, index, value):
    """x with integer-array or mask positions replaced. numpy's rule (the last write to
    a repeated position wins) holds for the values and for the gradient."""
    positions = _flat_positions(x, index)
    v = broadcast_to(value, positions.shape)
    flat = positions.reshape(-1)
    last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]   # last writers
    written = np.zeros(x.size, bool)
    written[flat] = True
    kept = where(written.reshape(x._shape), 0.0, x)
    placed = put_add(take_flat(reshape(v, (-1,)), last), flat[last], x._shape)
    result = add(kept, placed)
    return cast_result(result, x._dtype) if result._dtype != x._dtype else result


def _flat_positions(x, index):
    """numpy's own answer to which elements ``x[index]`` selects, as flat indices."""
    return np.arange(x.size, dtype=np.int64).reshape(x._shape)[index]


def _numpy_index(index):
    """An index with integer and bool Tensors turned into arrays (advanced indexing)."""
    items = index if type(index) is tuple else (index,)
    out = tuple(array_of(k) if type(k) is Tensor else k for k in items)
    return out if type(index) is tuple else out[0]


def _is_basic(index):
    items = index if type(index) is tuple else (index,)
    for k in items:
        if not (k is None or k is Ellipsis or type(k) is slice or
                (isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_))) or
                (type(k) is Tensor and k._dtype.kind in "iu" and k._shape == ())):
            return False
    return True


def _basic_index(index):
    """Normalise a basic index to a tuple of ints, slices, None and Ellipsis (ending in
    one, so that numpy returns a view even when every axis gets an integer)."""
    items = index if type(index) is tuple else (index,)
    out = [int(k) if (isinstance(k, numbers.Integral) or type(k) is Tensor) else k
           for k in items]
    if not any(k is Ellipsis for k in out):
        out.append(Ellipsis)
    return tuple(out)
