"""``x[index]`` and ``x[index] = value``, as numpy indexes: basic indices (ints,
slices, None, Ellipsis) are strided views, integer arrays and boolean masks gather by
an index array. Assignment records a new value for x (index assignment, SETITEM), or
for advanced indices a where / put-add composition with numpy's last-write-wins rule.
"""
import numbers
import warnings

import numpy as np

from ..grad_mode import is_grad_enabled
from ..opcodes import SETITEM, STRIDED
from ..tape_format import setitem_params
from ..tensor import F64, LEAF_VIEW_INPLACE_MSG, NONLEAF_NO_GRAD_INPLACE_MSG, Tensor, array_of
from . import elementwise
from .elementwise import add, where
from .indexing import (as_tensor, broadcast_to, c_strides, from_view, put_add, reshape,
                       strided, take_flat, view_pattern)
from .recording import cast_result, record, record_element, recording
from .views import check_inplace, view_of, written


def getitem(x, index):
    """``x[index]``, recorded as a strided gather (basic) or a gather by flat indices."""
    if type(index) is int and type(x) is Tensor and x._dtype is F64 and \
            len(x._shape) == 1 and -x._shape[0] <= index < x._shape[0] and recording(x):
        return view_of(record_element(STRIDED, x, index % x._shape[0]), x,
                       ("index", (index, Ellipsis)))      # (p[2]: the common case)
    if not _is_basic(index):                  # integer arrays, boolean masks
        return take_flat(x, _flat_positions(x, _numpy_index(index)))
    index = _basic_index(index)
    if type(x) is elementwise.Condition:      # (a comparison in a trace: stays data)
        condition = elementwise.indexed_condition(x, index)
        if condition is not None:
            return condition
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
    replaced = check_inplace(x)
    if not (is_grad_enabled() and (x.requires_grad or value_requires)):
        if x._tape is not None:
            raise RuntimeError(NONLEAF_NO_GRAD_INPLACE_MSG)
        a = array_of(x)
        if x.requires_grad or not a.flags.writeable or type(x._value) is float:
            a = a.copy()                 # tapes may hold the old value
        a[index] = array_of(value) if type(value) is Tensor else value
        x._value = float(a) if (x._shape == () and x._dtype.kind == "f") else a
        x._cache = None
        written(x, replaced)
        return
    if x._dtype.kind != "f":
        raise TypeError("cannot assign a tensor that requires grad into a tensor of dtype "
                        f"{x._dtype}")
    x._become(_assign_advanced(x, index, value) if advanced else _assign(x, index, value))
    written(x, replaced)


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


# ---- out= ----------------------------------------------------------------------------------

# the public functions that take out=: every elementwise op of the table (numpy's
# names), the comparisons, where, clip, the reductions and matmul
OUT_NAMES = tuple(op.name for op in [*elementwise.unary_ops.values(),
                                     *elementwise.binary_ops.values()]) + (
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "where", "clip",
    "sum", "mean", "max", "min", "amax", "amin", "prod", "cumsum", "cumprod", "matmul")


def with_out(fn, name=None):
    """``fn`` that also takes numpy's and torch's ``out=``: the result written into a
    given tensor, in place (through its views), as torch does where no gradient is
    involved; where one is (an input or ``out`` requires grad under grad mode), torch's
    error. The public functions get it (``at.multiply(a, b, out=c)``); the op table's
    own functions, which operators and methods call, stay as they are."""
    name = name or fn.__name__

    def call(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        return write_out(name, fn(*args, **kwargs), out)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = fn.__doc__
    call.__wrapped__ = fn
    call.__module__ = fn.__module__
    return call


def write_out(name, result, out):
    """``result`` written into ``out`` (resized, with torch's warning, when its shape
    differs and it has elements); returns out."""
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be a Tensor, not "
                        f"{type(out).__name__}")
    if isinstance(result, (np.ndarray, np.generic, numbers.Number)):
        result = as_tensor(result)            # (numpy's own result, on plain tensors)
    if not isinstance(result, Tensor):
        raise TypeError(f"{name}() returns {type(result).__name__}, not one tensor: out= "
                        "takes a single result")
    if is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires "
                           "grad.")
    if not np.can_cast(result.dtype, out.dtype, "same_kind"):
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output "
                           f"type {out.dtype}")
    if out.shape != result.shape:
        if out.size:
            warnings.warn(f"An output with one or more elements was resized since it had "
                          f"shape {list(out.shape)}, which does not match the required "
                          f"output shape {list(result.shape)}. This behavior is "
                          "deprecated, and in a future PyTorch release outputs will not be "
                          "resized unless they have zero elements.", UserWarning,
                          stacklevel=3)
        if out._view_of is not None or out._views:
            raise RuntimeError(f"{name}(): out= of another shape would resize a tensor "
                               "that shares its elements with views; give an out of the "
                               f"result's shape {result.shape}")
        out._set_data(array_of(result).astype(out.dtype), result.shape, out.dtype)
        return out
    setitem(out, Ellipsis, result)
    return out
