"""Recording: how each op family computes its value and writes its row on the tape.

Every function here takes tensors (or numbers and arrays), computes the value with
Python floats (0-d) or numpy, and, when grad mode is on and an operand requires grad,
appends one row to the open tape (see tape.py). The 0-d elementwise paths are the hot
path of scalar code and are written for speed; the rest favour clarity.
"""
import math
import numbers
import warnings
import weakref

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from .grad_mode import _Mode
from .guards import observe
from .ops import codes
from .ops.elementwise import binary_ops, unary_ops
from .ops.reduce import axes_mask, reductions
from .ops.shape import broadcast_pattern, index_map, transpose_pattern, view_pattern
from .quiet import quiet
from .tape import open_tape
from .tensor import (_LEAF_VIEW_INPLACE, _NONLEAF_NO_GRAD_INPLACE, F32, F64,
                     Tensor, _array_value, _canonical, _constant, _f32, _new, _plain, _result,
                     _tape_value, as_tensor)

_NUMBER_TYPES = (float, int, bool)


# ---- what goes on the tape --------------------------------------------------------------

def _row_of(t, tape):
    """The row that holds operand ``t`` on ``tape`` (adding one if needed)."""
    if type(t) is not Tensor:                       # a Python number
        return tape.const(float(t), ())
    if t._tape is tape:
        return t._row
    if t._tape is None:
        if not t._requires_grad:
            v = t._value
            return tape.const(v if type(v) is float else _snapshot(v), t._shape)
        cache = t._cache
        if cache is not None and cache[0]() is tape:
            return cache[1]
        row = tape.leaf(t, _tape_value(t._value))
        t._cache = (weakref.ref(tape), row)
        return row
    return tape.import_row(t, _tape_value(t._value))


def _snapshot(v):
    """A constant's array as a tape keeps it. An array the tensor owns is frozen rather
    than copied: later in-place updates of the tensor then copy first (see
    Tensor._inplace and __setitem__), so the tape's value never changes. A view is
    copied, since its base may still be written."""
    if v.flags.owndata and v.dtype == F64 and v.flags.c_contiguous:
        v.flags.writeable = False
        return v.reshape(-1)
    return np.array(v, F64).reshape(-1)


def _tape_for(*operands):
    """The open tape of a non-leaf operand, else the current open tape."""
    for t in operands:
        if type(t) is Tensor and t._tape is not None and t._tape.open:
            return t._tape
    return open_tape()


def _recording(*operands):
    if not _Mode.enabled:
        return False
    for t in operands:
        if type(t) is Tensor and (t._tape is not None or t._requires_grad):
            return True
    return False


def _cast_result(t, dtype):
    v = t._value
    v = (_f32(v) if dtype == F32 else float(v)) if type(v) is float else v.astype(dtype)
    if t._tape is None:
        return _plain(v, t._shape, dtype)
    return _result(v, t._shape, dtype, t._tape, t._row)


# ---- elementwise ------------------------------------------------------------------------

def _scalar_fallback(op, *args):
    """numpy's answer where a ``math`` function raises (log(0), 1/0, exp(1000))."""
    with quiet():
        return float(op.array(*(np.float64(v) for v in args)))


def _unary_function(op):
    """The recording function for a unary elementwise op: ``f(x)``. The 0-d branch is
    the hot path of scalar code (see _binary_function)."""
    scalar, code = op.scalar, op.code

    def unary(x):
        if type(x) is not Tensor:
            x = _constant(x)
        v = x._value
        if type(v) is not float:
            return _unary_array(op, x)
        try:
            z = scalar(v)
        except (ArithmeticError, ValueError):
            z = _scalar_fallback(op, v)
        dtype = x._dtype
        if dtype is F32:
            z = _f32(z)
        if not _Mode.enabled:
            return _plain(z, (), dtype)
        tape = x._tape
        if tape is not None and tape.open:
            a = x._row
        elif tape is None and not x._requires_grad:
            return _plain(z, (), dtype)
        else:
            tape = open_tape()
            a = _row_of(x, tape)
        row = tape.nrows                            # tape.push_scalar, inlined
        tape.arena.append(z)
        tape.codes.append(code)
        tape.opa.append(a)
        tape.opb.append(-1)
        tape.nrows = row + 1
        if row >= tape.checkpoint:
            tape.reached_checkpoint()
        t = _new(Tensor)
        t._value = z
        t._shape = ()
        t._dtype = dtype
        t._tape = tape
        t._row = row
        return t

    unary.__name__ = unary.__qualname__ = op.name
    unary.__doc__ = op.doc
    return unary


_UNARY_FUNCTIONS = {code: _unary_function(op) for code, op in unary_ops.items()}


def _unary_array(op, x):
    with quiet():
        z, shape, dtype = _canonical(op.array(x._value))
    if _Mode.enabled and (x._tape is not None or x._requires_grad) and dtype.kind == "f":
        tape = _tape_for(x)
        row = tape.push(op.code, _row_of(x, tape), -1, shape, -1, _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def _binary_function(op):
    """The recording function for a binary elementwise op: ``f(x, y)``.

    One of x, y is a Tensor, the other a Tensor or any array-like. The branch for two
    0-d floats is the hot path of scalar code (Python arithmetic, one row appended), so
    it reads the op's scalar function and opcode from closure cells and builds the
    result inline: every attribute lookup and call here costs a visible fraction.
    """
    scalar, code = op.scalar, op.code

    def binary(x, y):
        tx, ty = type(x) is Tensor, type(y) is Tensor
        if tx:
            xv = x._value
            if ty:
                yv = y._value
                if type(xv) is not float or type(yv) is not float:
                    return _binary_arrays(op, x, y)
                dtype = x._dtype if x._dtype is y._dtype else F64
            elif type(xv) is float and type(y) in _NUMBER_TYPES:
                yv = y
                dtype = x._dtype
            else:
                return _binary_arrays(op, x, y)
        elif ty and type(y._value) is float and type(x) in _NUMBER_TYPES:
            xv = x
            yv = y._value
            dtype = y._dtype
        else:                                       # arrays, or no Tensor at all
            return _binary_arrays(op, x, y)
        try:
            z = scalar(xv, yv)
        except (ArithmeticError, ValueError):
            z = _scalar_fallback(op, xv, yv)
        if dtype is F32:
            z = _f32(z)
        if not _Mode.enabled:
            return _plain(z, (), dtype)
        # the tape: that of an operand recorded on an open tape, else the open one
        tape = x._tape if tx else None
        if tape is None or not tape.open:
            tape = y._tape if ty else None
            if tape is None or not tape.open:
                if not ((tx and (x._tape is not None or x._requires_grad)) or
                        (ty and (y._tape is not None or y._requires_grad))):
                    return _plain(z, (), dtype)
                tape = open_tape()
        if tx:
            if x._tape is tape:
                a = x._row
            else:                                   # a leaf already on this tape?
                c = x._cache if x._tape is None else None
                a = c[1] if (c is not None and c[0]() is tape) else _row_of(x, tape)
        else:
            a = tape.consts.get(xv)
            if a is None:
                a = _row_of(x, tape)
        if ty:
            if y._tape is tape:
                b = y._row
            else:
                c = y._cache if y._tape is None else None
                b = c[1] if (c is not None and c[0]() is tape) else _row_of(y, tape)
        else:
            b = tape.consts.get(yv)
            if b is None:
                b = _row_of(y, tape)
        row = tape.nrows                            # tape.push_scalar, inlined
        tape.arena.append(z)
        tape.codes.append(code)
        tape.opa.append(a)
        tape.opb.append(b)
        tape.nrows = row + 1
        if row >= tape.checkpoint:
            tape.reached_checkpoint()
        t = _new(Tensor)
        t._value = z
        t._shape = ()
        t._dtype = dtype
        t._tape = tape
        t._row = row
        return t

    binary.__name__ = binary.__qualname__ = op.name
    binary.__doc__ = op.doc
    return binary


def _binary(op, x, y):
    """z = op(x, y) for an op given by its table entry."""
    return _BINARY_FUNCTIONS[op.code](x, y)


_BINARY_FUNCTIONS = {code: _binary_function(op) for code, op in binary_ops.items()}
add, subtract, multiply, divide, power = (_BINARY_FUNCTIONS[c] for c in (
    codes.ADD, codes.SUB, codes.MUL, codes.DIV, codes.POW))


def _binary_arrays(op, x, y):
    if type(x) is not Tensor and type(x) not in (float, int, bool):
        x = _constant(x)
    if type(y) is not Tensor and type(y) not in (float, int, bool):
        y = _constant(y)
    xa = _array_value(x) if type(x) is Tensor else x
    ya = _array_value(y) if type(y) is Tensor else y
    with quiet():
        z, shape, dtype = _canonical(op.array(xa, ya))
    if dtype.kind == "f" and _recording(x, y):
        tape = _tape_for(x, y)
        row = tape.push(op.code, _row_of(x, tape), _row_of(y, tape), shape, -1,
                        _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def _compare(np_fn, x, y):
    with quiet():
        return _plain(*_canonical(observe(np_fn, x, y)))   # a decision (guards.py)


def where(condition, x, y):
    """Elements of ``x`` where ``condition`` holds, else of ``y`` (numpy broadcasting).

    Both branches are differentiated, as in torch: where(x > 0, sqrt(x), 0) has a NaN
    gradient at x < 0, because sqrt'(x) is NaN there.

    >>> x = at.tensor([-1.0, 2.0], requires_grad=True)
    >>> at.where(x > 0, x, 0.0).sum().backward(); x.grad
    tensor([0., 1.])
    """
    c = np.asarray(observe(_as_bool, condition) if type(condition) is Tensor else condition)
    c = c.astype(bool, copy=False)
    xa = _array_value(x) if type(x) is Tensor else x
    ya = _array_value(y) if type(y) is Tensor else y
    z, shape, dtype = _canonical(np.where(c, xa, ya))
    if dtype.kind == "f" and _recording(x, y):
        tape = _tape_for(x, y)
        cond_row = tape.const(np.array(c, F64).reshape(-1), c.shape)
        row = tape.push(codes.WHERE, _row_of(as_tensor(x), tape), _row_of(as_tensor(y), tape),
                        shape, tape.params((cond_row,)), _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def _as_bool(c):
    return np.asarray(c).astype(bool, copy=False)


def clip(x, a_min, a_max):
    """x limited to [a_min, a_max] (either may be None; a_max wins if a_min > a_max, as
    in numpy). The gradient passes to x where a_min <= x <= a_max, boundaries included
    (torch's clamp), and to a_min or a_max where they are taken.

    >>> x = at.tensor([0.0, 1.0, 3.0], requires_grad=True)
    >>> at.grad(at.clip(x, 1.0, 2.0).sum(), x)
    (tensor([0., 1., 0.]),)
    """
    x = as_tensor(x)
    out = x
    if a_min is not None:
        out = where(observe(np.less, x, a_min), a_min, out)
    if a_max is not None:
        out = where(observe(np.greater, as_tensor(out), a_max), a_max, out)
    return out


# ---- reductions -------------------------------------------------------------------------

def _reduce(code, x, axis, keepdims):
    x = as_tensor(x)
    axes = tuple(range(x.ndim)) if axis is None else normalize_axis_tuple(axis, x.ndim)
    fn = reductions[code]
    with quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        z, shape, dtype = _canonical(fn(_array_value(x), axis=axes, keepdims=keepdims))
    if dtype.kind == "f" and _recording(x):
        tape = _tape_for(x)
        row = tape.push(code, _row_of(x, tape), -1, shape, tape.params((axes_mask(axes),)),
                        _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (None: all axes; an int or a tuple of ints)."""
    return _reduce(codes.SUM, x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """Mean over ``axis`` (None: all axes; an int or a tuple of ints)."""
    return _reduce(codes.MEAN, x, axis, keepdims)


def max(x, axis=None, keepdims=False):
    """Largest element over ``axis``; the gradient is split evenly among ties."""
    return _reduce(codes.MAX, x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """Smallest element over ``axis``; the gradient is split evenly among ties."""
    return _reduce(codes.MIN, x, axis, keepdims)


def prod(x, axis=None, keepdims=False):
    """Product over ``axis``; exact gradients with zeros (see ops/reduce.py)."""
    return _reduce(codes.PROD, x, axis, keepdims)


def cumsum(x, axis=None):
    """Cumulative sum along ``axis`` (of the flattened tensor when None)."""
    return _scan(codes.CUMSUM, np.cumsum, x, axis)


def cumprod(x, axis=None):
    """Cumulative product along ``axis`` (of the flattened tensor when None). Its
    gradient never divides by x, so it is exact where x has zeros.

    >>> x = at.tensor([2.0, 0.0, 3.0], requires_grad=True)
    >>> at.grad(at.cumprod(x).sum(), x)
    (tensor([1., 8., 0.]),)
    """
    return _scan(codes.CUMPROD, np.cumprod, x, axis)


def _scan(code, np_fn, x, axis):
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = normalize_axis_index(axis, x.ndim)
    z, shape, dtype = _canonical(np_fn(_array_value(x), axis=axis))
    if dtype.kind == "f" and _recording(x):
        outer = math.prod(x._shape[:axis])
        inner = math.prod(x._shape[axis + 1:])
        tape = _tape_for(x)
        row = tape.push(code, _row_of(x, tape), -1, shape,
                        tape.params((outer, x._shape[axis], inner)), _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


amax, amin = max, min


# ---- layout -----------------------------------------------------------------------------

def reshape(x, shape):
    """The same elements in a new shape (C order); one dimension may be -1."""
    x = as_tensor(x)
    if isinstance(shape, (numbers.Integral, Tensor)):
        shape = (shape,)
    z, shape, dtype = _canonical(_array_value(x).reshape(tuple(int(d) for d in shape)))
    if _recording(x):
        tape = _tape_for(x)
        row = tape.push(codes.RESHAPE, _row_of(x, tape), -1, shape, -1, _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def astype(x, dtype):
    """x converted to ``dtype`` (numpy's casting). Between float dtypes the gradient
    passes through unchanged (recorded as a reshape: same elements, new dtype); a cast
    to an integer or bool dtype ends the graph."""
    x = as_tensor(x)
    dtype = np.dtype(dtype)
    if dtype.kind != "f":                      # leaves the graph: a decision
        return _plain(*_canonical(observe(lambda v: v.astype(dtype), x)))
    z, shape, dtype = _canonical(_array_value(x).astype(dtype))
    if dtype.kind == "f" and _recording(x):
        tape = _tape_for(x)
        row = tape.push(codes.RESHAPE, _row_of(x, tape), -1, shape, -1, _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def _strided(x, z, pattern):
    """Record z = x viewed through (shape, offset, strides in elements)."""
    shape, offset, strides = pattern
    tape = _tape_for(x)
    row = tape.push(codes.STRIDED, _row_of(x, tape), -1, shape,
                    tape.params((offset,) + tuple(strides)), _tape_value(z))
    return _result(z, shape, x._dtype, tape, row)


def gather(x, pattern):
    """x's elements at a strided pattern (shape, offset, strides in elements of x's flat
    C-order data). Basic indexing, transpose and broadcast_to are such gathers."""
    x = as_tensor(x)
    shape, offset, strides = pattern
    idx = index_map(x.size, shape, offset, strides)
    z, shape, dtype = _canonical(_array_value(x).reshape(-1)[idx])
    if _recording(x):
        return _strided(x, z, (shape, offset, strides))
    return _plain(z, shape, dtype)


def scatter(x, pattern, base_shape):
    """The transpose of gather: zeros of ``base_shape`` with x's elements added at the
    pattern (x has the pattern's shape; repeated positions accumulate)."""
    x = as_tensor(x)
    shape, offset, strides = pattern
    n = int(np.prod(base_shape, dtype=np.int64))
    idx = index_map(n, shape, offset, strides).reshape(-1)
    z = np.bincount(idx, weights=np.asarray(_array_value(x), F64).reshape(-1), minlength=n)
    z, shape_out, dtype = _canonical(z.reshape(base_shape).astype(x._dtype))
    if _recording(x):
        tape = _tape_for(x)
        row = tape.push(codes.SCATTER, _row_of(x, tape), -1, shape_out,
                        tape.params((offset,) + tuple(strides)), _tape_value(z))
        return _result(z, shape_out, dtype, tape, row)
    return _plain(z, shape_out, dtype)


def take_flat(x, flat_index):
    """x's elements at ``flat_index`` (an int array of any shape, into x's flat C-order
    data): the gather behind advanced indexing, take and take_along_axis."""
    x = as_tensor(x)
    idx = np.asarray(flat_index, np.int64)
    z, shape, dtype = _canonical(_array_value(x).reshape(-1)[idx])
    if dtype.kind == "f" and _recording(x):
        tape = _tape_for(x)
        irow = tape.const(idx.astype(F64).reshape(-1), idx.shape)
        row = tape.push(codes.TAKE, _row_of(x, tape), irow, shape, -1, _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def put_add(x, flat_index, base_shape):
    """The transpose of take_flat: zeros of ``base_shape`` with x added at ``flat_index``
    (x has the index's shape; repeated indices accumulate)."""
    x = as_tensor(x)
    idx = np.asarray(flat_index, np.int64).reshape(-1)
    n = int(np.prod(base_shape, dtype=np.int64))
    values = np.asarray(_array_value(x), F64).reshape(-1)
    z = np.bincount(idx, weights=values, minlength=n).reshape(base_shape)
    z, shape, dtype = _canonical(z.astype(x._dtype))
    if _recording(x):
        tape = _tape_for(x)
        irow = tape.const(idx.astype(F64), (idx.size,))
        row = tape.push(codes.PUT_ADD, _row_of(x, tape), irow, shape, -1, _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def _flat_positions(x, index):
    """numpy's own answer to which elements ``x[index]`` selects, as flat indices."""
    return np.arange(x.size, dtype=np.int64).reshape(x._shape)[index]


def _numpy_index(index):
    """An index with integer and bool Tensors turned into arrays (advanced indexing)."""
    items = index if type(index) is tuple else (index,)
    out = tuple(_array_value(k) if type(k) is Tensor else k for k in items)
    return out if type(index) is tuple else out[0]


def _is_basic(index):
    items = index if type(index) is tuple else (index,)
    for k in items:
        if not (k is None or k is Ellipsis or type(k) is slice or
                (isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_))) or
                (type(k) is Tensor and k._dtype.kind in "iu" and k._shape == ())):
            return False
    return True


def transpose(x, axes=None):
    """Permute the axes (reversed when ``axes`` is None)."""
    x = as_tensor(x)
    axes = tuple(reversed(range(x.ndim))) if axes is None else normalize_axis_tuple(
        axes, x.ndim)
    if len(axes) != x.ndim:
        raise ValueError("axes don't match array")
    view = np.transpose(_array_value(x), axes)
    if _recording(x):
        z, _, _ = _canonical(view)
        return _strided(x, z, transpose_pattern(x._shape, axes))
    return _from_view(x, view)


def broadcast_to(x, shape):
    """``x`` repeated along new or size-1 axes to ``shape`` (numpy rules)."""
    x = as_tensor(x)
    shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(shape)
    view = np.broadcast_to(_array_value(x), shape)
    if _recording(x):
        z, _, _ = _canonical(view)
        return _strided(x, z, broadcast_pattern(x._shape, shape))
    return _from_view(x, view)


def _from_view(x, view):
    """An unrecorded view of ``x``: shares memory, read-only if x requires grad."""
    if x.requires_grad and isinstance(view, np.ndarray):
        view = view.view()
        view.flags.writeable = False
    if view.shape == () and x._dtype.kind == "f":
        return _plain(float(view), (), x._dtype)
    return _plain(view if view.flags.c_contiguous else np.ascontiguousarray(view),
                  view.shape, x._dtype)


def _basic_index(index):
    """Normalise a basic index to a tuple of ints, slices, None and Ellipsis (ending in
    one, so that numpy returns a view even when every axis gets an integer)."""
    items = index if type(index) is tuple else (index,)
    out = [int(k) if (isinstance(k, numbers.Integral) or type(k) is Tensor) else k
           for k in items]
    if not any(k is Ellipsis for k in out):
        out.append(Ellipsis)
    return tuple(out)


def _getitem(x, index):
    if not _is_basic(index):                  # integer arrays, boolean masks
        return take_flat(x, _flat_positions(x, _numpy_index(index)))
    index = _basic_index(index)
    view = _array_value(x)[index]
    if not _recording(x):
        return _from_view(x, view)
    z, _, _ = _canonical(view)       # (np.ascontiguousarray would make 0-d 1-d)
    if len(index) == 2 and type(index[0]) is int and x._shape:   # x[i]: the common case
        i = index[0] + x._shape[0] if index[0] < 0 else index[0]
        inner = int(np.prod(x._shape[1:], dtype=np.int64))
        strides = tuple(int(np.prod(x._shape[d + 1:], dtype=np.int64))
                        for d in range(1, len(x._shape)))
        return _strided(x, z, (x._shape[1:], i * inner, strides))
    return _strided(x, z, view_pattern(x._shape, index))


def _setitem(x, index, value):
    if not _is_basic(index):
        return _setitem_advanced(x, _numpy_index(index), value)
    index = _basic_index(index)
    value_requires = type(value) is Tensor and value.requires_grad
    if x._tape is None and x._requires_grad and _Mode.enabled:
        raise RuntimeError(_LEAF_VIEW_INPLACE)
    v = _array_value(value) if type(value) is Tensor else value
    recording = _Mode.enabled and (x.requires_grad or value_requires)
    if not recording:
        if x._tape is not None:
            raise RuntimeError(_NONLEAF_NO_GRAD_INPLACE)
        a = _array_value(x)
        if x.requires_grad or not a.flags.writeable or type(x._value) is float:
            a = a.copy()                 # tapes may hold the old value
        a[index] = v
        x._value = float(a) if (x._shape == () and x._dtype.kind == "f") else a
        x._cache = None
        return
    if x._dtype.kind != "f":
        raise TypeError("cannot assign a tensor that requires grad into a tensor of dtype "
                        f"{x._dtype}")
    new = _array_value(x).copy()
    new[index] = v
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
    z, shape, dtype = _canonical(new)
    tape = _tape_for(x, vt)
    params = (len(region),) + tuple(region) + (offset,) + tuple(strides)
    row = tape.push(codes.SETITEM, _row_of(x, tape), _row_of(vt, tape), shape,
                    tape.params(params), _tape_value(z))
    x._become(_result(z, shape, dtype, tape, row))


def _setitem_advanced(x, index, value):
    """x[index] = value with integer-array or mask indices. numpy's rule (the last write
    to a repeated position wins) holds for the values and for the gradient."""
    value_requires = type(value) is Tensor and value.requires_grad
    if x._tape is None and x._requires_grad and _Mode.enabled:
        raise RuntimeError(_LEAF_VIEW_INPLACE)
    if not (_Mode.enabled and (x.requires_grad or value_requires)):
        if x._tape is not None:
            raise RuntimeError(_NONLEAF_NO_GRAD_INPLACE)
        a = _array_value(x)
        if x.requires_grad or not a.flags.writeable or type(x._value) is float:
            a = a.copy()
        a[index] = _array_value(value) if type(value) is Tensor else value
        x._value = float(a) if (x._shape == () and x._dtype.kind == "f") else a
        x._cache = None
        return
    if x._dtype.kind != "f":
        raise TypeError("cannot assign a tensor that requires grad into a tensor of dtype "
                        f"{x._dtype}")
    positions = _flat_positions(x, index)
    v = broadcast_to(value, positions.shape)
    flat = positions.reshape(-1)
    last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]   # last writers
    written = np.zeros(x.size, bool)
    written[flat] = True
    kept = where(written.reshape(x._shape), 0.0, x)
    placed = put_add(take_flat(reshape(v, (-1,)), last), flat[last], x._shape)
    result = kept + placed
    x._become(_cast_result(result, x._dtype) if result._dtype != x._dtype else result)


def _join(tensors, axis, new_axis):
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("need at least one array to " + ("stack" if new_axis else
                                                           "concatenate"))
    values = [_array_value(t) for t in ts]
    z, shape, dtype = _canonical(np.stack(values, axis=axis) if new_axis
                                 else np.concatenate(values, axis=axis))
    if dtype.kind != "f" or not _recording(*ts):
        return _plain(z, shape, dtype)
    axis = normalize_axis_index(axis, len(shape))
    tape = _tape_for(*ts)
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    width = int(np.prod(shape[axis:], dtype=np.int64))
    params, col = [outer, width, len(ts)], 0
    for t in ts:
        band = int(np.prod(t._shape[axis:], dtype=np.int64))
        params += [_row_of(t, tape), col, band]
        col += band
    row = tape.push(codes.CONCAT, -1, -1, shape, tape.params(params), _tape_value(z))
    return _result(z, shape, dtype, tape, row)


def stack(tensors, axis=0):
    """Join same-shaped tensors along a new axis."""
    return _join(tensors, axis, True)


def concatenate(tensors, axis=0):
    """Join tensors along an existing axis."""
    return _join(tensors, axis, False)


# ---- linear algebra ---------------------------------------------------------------------

def _record_op(code, value, *operands, aux=None, params=()):
    """Record an op (one or two operands) whose value numpy has computed. ``aux()``, if
    given, computes an array the op's VJP reads (an inverse, say); it is saved as a
    constant row named by the row's first int parameter; ``params`` follow."""
    z, shape, dtype = _canonical(value)
    if dtype.kind == "f" and _recording(*operands):
        tape = _tape_for(*operands)
        rows = [_row_of(t, tape) for t in operands] + [-1]
        ints = tuple(params)
        if aux is not None:
            saved = np.ascontiguousarray(aux(), F64)
            ints = (tape.const(saved.reshape(-1), saved.shape),) + ints
        row = tape.push(code, rows[0], rows[1], shape, tape.params(ints) if ints else -1,
                        _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def matmul(x, y):
    """Matrix product with numpy's rules: 1-D operands, batch axes, broadcasting."""
    x, y = as_tensor(x), as_tensor(y)
    z, shape, dtype = _canonical(np.matmul(_array_value(x), _array_value(y)))
    if dtype.kind == "f" and _recording(x, y):
        tape = _tape_for(x, y)
        row = tape.push(codes.MATMUL, _row_of(x, tape), _row_of(y, tape), shape, -1,
                        _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)
