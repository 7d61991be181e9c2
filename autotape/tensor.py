"""Tensor: a value, and for a result of a recorded op, its tape and row.

A leaf owns its value. A result holds its tape and row; its value is the one recorded
there. A 0-d floating tensor keeps its value as a Python float, because arithmetic on
Python floats is ten times cheaper than on numpy scalars, and scalar-heavy simulation
code is made of such ops; every other value is a C-contiguous numpy array.

Storage rule: values that a tape may reference (those of tensors that require grad)
are never written in place. An in-place op on such a tensor binds it to a new value;
``numpy()``, ``__array__`` and ``detach()`` hand out read-only views of it.
"""
import numbers
import warnings
import weakref

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from .grad_mode import _Mode
from .ops import codes
from .ops.elementwise import binary_ops, unary_ops
from .ops.reduce import axes_mask
from .ops.shape import broadcast_pattern, index_map, transpose_pattern, view_pattern
from .tape import open_tape

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
_FLOAT_DTYPES = (F64, F32)
_NUMBER_TYPES = (float, int, bool)
_new = object.__new__


def _f32(v):
    return float(np.float32(v))


class Tensor:
    """An n-d array that can record the ops applied to it.

    >>> x = at.tensor([5.0, 3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([10.,  6.])
    """
    __slots__ = ("_value", "_shape", "_dtype", "_tape", "_row", "_requires_grad",
                 "_grad", "_retains_grad", "_cache", "__weakref__")
    __array_ufunc__ = None        # numpy defers its operators to ours: ndarray * Tensor

    # -- attributes ------------------------------------------------------------------------

    @property
    def shape(self):
        return self._shape

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def size(self):
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def T(self):
        return self.transpose()

    @property
    def is_leaf(self):
        return self._tape is None

    @property
    def requires_grad(self):
        return self._tape is not None or self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if self._tape is not None:
            if not flag:
                raise RuntimeError(_NON_LEAF_FLAG)
            return
        if flag and self._dtype.kind != "f":
            raise RuntimeError(
                "only Tensors of floating point and complex dtype can require gradients")
        self._set_requires_grad(bool(flag))

    def requires_grad_(self, requires_grad=True):
        """Set ``requires_grad`` on a leaf in place; returns self."""
        if self._tape is not None:
            if not requires_grad:
                raise RuntimeError(_NON_LEAF_FLAG)
            return self
        if requires_grad and self._dtype.kind != "f":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self._set_requires_grad(bool(requires_grad))
        return self

    def _set_requires_grad(self, flag):
        if self._requires_grad and not flag and type(self._value) is np.ndarray:
            self._value = self._value.copy()   # tapes keep the old array, unwritten
        self._requires_grad = flag
        self._cache = None

    @property
    def grad(self):
        if self._tape is not None and not getattr(self, "_retains_grad", False):
            warnings.warn(_NON_LEAF_GRAD, UserWarning, stacklevel=2)
            return None
        return getattr(self, "_grad", None)

    @grad.setter
    def grad(self, g):
        if g is not None:
            if type(g) is not Tensor:
                raise TypeError("assigned grad expected to be a Tensor or None but got grad "
                                f"of type {type(g).__name__}")
            if g._shape != self._shape:
                raise RuntimeError(
                    f"attempting to assign a gradient of size '{list(g._shape)}' to a tensor "
                    f"of size '{list(self._shape)}'. Please ensure that the gradient and the "
                    "tensor are the same size")
            if g._dtype != self._dtype:
                raise RuntimeError(
                    f"attempting to assign a gradient with dtype '{g._dtype}' to a tensor "
                    f"with dtype '{self._dtype}'. The gradient must match the tensor's dtype.")
        self._grad = g

    @property
    def retains_grad(self):
        return self._tape is not None and getattr(self, "_retains_grad", False)

    def retain_grad(self):
        """Keep the gradient of this non-leaf in ``.grad`` during backward and grad."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._tape is not None:
            self._retains_grad = True
            self._tape.retained[self._row] = weakref.ref(self)

    @property
    def grad_fn(self):
        """None for a leaf; for a result, the name of the op that made it."""
        if self._tape is None:
            return None
        op = self._tape.opcode(self._row)
        return GradFn(_OP_NAMES.get(op, str(op)))

    # -- conversions -----------------------------------------------------------------------

    def numpy(self):
        """The value as a numpy array (read-only when the tensor requires grad)."""
        v = self._value
        if type(v) is float:
            return np.array(v, self._dtype)
        if self.requires_grad:
            v = v.view()
            v.flags.writeable = False
        return v

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def detach(self):
        """A new leaf that does not require grad, sharing the value (read-only)."""
        return _plain(self.numpy() if self.requires_grad else self._value, self._shape,
                      self._dtype)

    def item(self):
        """The single element as a Python number."""
        if self.size != 1:
            raise RuntimeError(
                f"a Tensor with {self.size} elements cannot be converted to Scalar")
        v = self._value
        return v if type(v) is float else v.reshape(-1)[0].item()

    def tolist(self):
        v = self._value
        return v if type(v) is float else v.tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._dtype.kind not in "iu" or self.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to "
                            "an index")
        return int(self.item())

    def __bool__(self):
        if self.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._shape[0]))

    __hash__ = object.__hash__

    def __repr__(self):
        v = self._value
        body = np.array2string(np.asarray(v, self._dtype), separator=", ", prefix="tensor(")
        extra = ""
        if self._dtype not in (F64, np.dtype(np.int64), np.dtype(np.bool_)):
            extra += f", dtype={self._dtype}"
        if self._tape is not None:
            extra += f", grad_fn=<{self.grad_fn.name()}>"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # -- autograd --------------------------------------------------------------------------

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into ``.grad`` of the leaves (see at.backward)."""
        from .engine import backward
        backward(self, gradient, retain_graph, create_graph, inputs)

    # -- operators -------------------------------------------------------------------------

    # __add__, __mul__, ... are the recording functions themselves (set below the class)
    def __radd__(self, other): return add(other, self)
    def __rsub__(self, other): return subtract(other, self)
    def __rmul__(self, other): return multiply(other, self)
    def __rtruediv__(self, other): return divide(other, self)
    def __rpow__(self, other): return power(other, self)
    def __matmul__(self, other): return matmul(self, other)
    def __rmatmul__(self, other): return matmul(other, self)
    def __pos__(self): return self

    def __iadd__(self, other): return self._inplace(ADD, other)
    def __isub__(self, other): return self._inplace(SUB, other)
    def __imul__(self, other): return self._inplace(MUL, other)
    def __itruediv__(self, other): return self._inplace(DIV, other)

    def __lt__(self, other): return _compare(np.less, self, other)
    def __le__(self, other): return _compare(np.less_equal, self, other)
    def __gt__(self, other): return _compare(np.greater, self, other)
    def __ge__(self, other): return _compare(np.greater_equal, self, other)
    def __eq__(self, other): return _compare(np.equal, self, other)
    def __ne__(self, other): return _compare(np.not_equal, self, other)

    def __getitem__(self, index):
        return _getitem(self, index)

    def __setitem__(self, index, value):
        _setitem(self, index, value)

    # -- methods ---------------------------------------------------------------------------

    def sum(self, axis=None, keepdims=False): return _reduce(codes.SUM, self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return _reduce(codes.MEAN, self, axis, keepdims)
    # exp, log, sin, ... and __neg__, __abs__ are the recording functions (set below)

    def reshape(self, *shape):
        """``reshape(3, 4)`` or ``reshape((3, 4))``; -1 infers one dimension."""
        return reshape(self, shape[0] if len(shape) == 1 else shape)

    def astype(self, dtype):
        """A copy converted to ``dtype``; differentiable between float dtypes."""
        return astype(self, dtype)

    def transpose(self, *axes):
        """Permute the axes; no argument reverses them (numpy's rule)."""
        return transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    def zero_(self):
        """Fill with zeros in place; returns self."""
        if self._tape is None and self._requires_grad and _Mode.enabled:
            raise RuntimeError(_LEAF_INPLACE)
        self[...] = 0
        return self

    def _inplace(self, op, other):
        if self._tape is None and self._requires_grad and _Mode.enabled:
            raise RuntimeError(_LEAF_INPLACE)
        other_requires = type(other) is Tensor and other.requires_grad
        if not self.requires_grad and not (other_requires and _Mode.enabled) \
                and type(self._value) is np.ndarray and self._value.flags.writeable:
            other_value = _array_value(other) if type(other) is Tensor else other
            with np.errstate(all="ignore"):
                op.array(self._value, other_value, out=self._value)
            return self
        if self._tape is not None and not _Mode.enabled:
            raise RuntimeError(_NONLEAF_NO_GRAD_INPLACE)
        result = _binary(op, self, other)
        if result._shape != self._shape:
            raise ValueError(f"non-broadcastable output operand with shape {self._shape} "
                             f"doesn't match the broadcast shape {result._shape}")
        if result._dtype != self._dtype:
            if not np.can_cast(result._dtype, self._dtype, "same_kind"):
                raise TypeError(f"Cannot cast ufunc '{op.name}' output from dtype "
                                f"'{result._dtype}' to dtype('{self._dtype}') with "
                                "casting rule 'same_kind'")
            result = _cast_result(result, self._dtype)
        self._become(result)
        return self

    def _become(self, other):
        """Take over another tensor's value and place in the graph (in-place ops)."""
        self._value, self._tape, self._row = other._value, other._tape, other._row
        self._cache = None
        if self._tape is not None and getattr(self, "_retains_grad", False):
            self._tape.retained[self._row] = weakref.ref(self)


class GradFn:
    """What made a non-leaf tensor (torch-style ``grad_fn``)."""
    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name

    def __repr__(self):
        return f"<{self._name}>"


_NON_LEAF_FLAG = (
    "you can only change requires_grad flags of leaf variables. If you want to use a "
    "computed variable in a subgraph that doesn't require differentiation use "
    "var_no_grad = var.detach().")
_NON_LEAF_GRAD = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
    ".grad attribute won't be populated during autograd.backward(). If you indeed want "
    "the .grad field to be populated for a non-leaf Tensor, use .retain_grad() on the "
    "non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure you access "
    "the leaf Tensor instead.")
_LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."
_LEAF_VIEW_INPLACE = ("a view of a leaf Variable that requires grad is being used in an "
                      "in-place operation.")
_NONLEAF_NO_GRAD_INPLACE = (
    "autotape does not modify a non-leaf tensor that requires grad in place under "
    "no_grad(): its gradient would be computed with the value recorded before the "
    "change. Detach it first (y = y.detach()) or do the update with grad enabled.")

ADD, SUB, MUL, DIV, POW = (binary_ops[c] for c in (codes.ADD, codes.SUB, codes.MUL,
                                                     codes.DIV, codes.POW))
NEG, ABS, EXP, LOG, SQRT, SIN, COS, TAN, TANH, SIGMOID, RELU = (
    unary_ops[c] for c in (codes.NEG, codes.ABS, codes.EXP, codes.LOG, codes.SQRT,
                           codes.SIN, codes.COS, codes.TAN, codes.TANH, codes.SIGMOID,
                           codes.RELU))
_OP_NAMES = {op.code: op.name.capitalize() + "Backward" for op in
             list(unary_ops.values()) + list(binary_ops.values())}
_OP_NAMES.update({codes.WHERE: "WhereBackward", codes.SUM: "SumBackward",
                  codes.MEAN: "MeanBackward", codes.RESHAPE: "ReshapeBackward",
                  codes.STRIDED: "ViewBackward", codes.SETITEM: "CopySlices",
                  codes.CONCAT: "CatBackward", codes.MATMUL: "MatmulBackward"})


# ---- making tensors -------------------------------------------------------------------------

def _plain(value, shape, dtype):
    """A tensor that does not require grad (and is a leaf)."""
    t = _new(Tensor)
    if dtype.kind == "f" and shape == ():
        value = float(value)
    t._value, t._shape, t._dtype = value, shape, dtype
    t._tape, t._row, t._requires_grad = None, -1, False
    return t


def _result(value, shape, dtype, tape, row):
    t = _new(Tensor)
    t._value, t._shape, t._dtype = value, shape, dtype
    t._tape, t._row, t._requires_grad = tape, row, True
    return t


def _canonical(z):
    """numpy result -> (value, shape, dtype) in Tensor form."""
    z = np.asarray(z)
    dtype = z.dtype
    if dtype.kind not in "biuf" or dtype == np.float16:
        raise TypeError(f"autotape does not support dtype {dtype}")
    if z.shape == () and dtype.kind == "f":
        return float(z), (), dtype
    if not z.flags.c_contiguous:
        z = np.ascontiguousarray(z)
    return z, z.shape, dtype


def as_tensor(data):
    """``data`` unchanged if it is a Tensor, else a constant tensor holding it."""
    if type(data) is Tensor:
        return data
    return _constant(data)


def _constant(data, dtype=None):
    if isinstance(data, Tensor):
        return data
    try:
        a = np.array(data, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(f"cannot make a tensor from {type(data).__name__}: {e}") from None
    if a.dtype.kind not in "biuf":
        raise TypeError(f"autotape tensors hold real numbers or bools, not {a.dtype} "
                        f"(from {type(data).__name__})")
    if a.dtype == np.float16:
        a = a.astype(np.float32)
    value, shape, dtype = _canonical(a)
    return _plain(value, shape, dtype)


# ---- what goes on the tape --------------------------------------------------------------

def _array_value(t):
    v = t._value
    return np.array(v, t._dtype) if type(v) is float else v


def _tape_value(v):
    """A value as the tape stores it: a float, or a flat float64 array."""
    if type(v) is float:
        return v
    return np.ascontiguousarray(v, F64).reshape(-1)


def _row_of(t, tape):
    """The row that holds operand ``t`` on ``tape`` (adding one if needed)."""
    if type(t) is not Tensor:                       # a Python number
        return tape.const(float(t), ())
    if t._tape is tape:
        return t._row
    if t._tape is None:
        if not t._requires_grad:
            v = t._value
            return tape.const(v if type(v) is float else np.array(v, F64).reshape(-1),
                              t._shape)
        cache = getattr(t, "_cache", None)
        if cache is not None and cache[0]() is tape:
            return cache[1]
        row = tape.leaf(t, _tape_value(t._value))
        t._cache = (weakref.ref(tape), row)
        return row
    return tape.import_row(t, _tape_value(t._value))


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
    with np.errstate(all="ignore"):
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


def _unary(op, x):
    """z = op(x) for an op given by its table entry."""
    return _UNARY_FUNCTIONS[op.code](x)


_UNARY_FUNCTIONS = {code: _unary_function(op) for code, op in unary_ops.items()}


def _unary_array(op, x):
    with np.errstate(all="ignore"):
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
        elif type(y._value) is float and type(x) in _NUMBER_TYPES:
            xv = x
            yv = y._value
            dtype = y._dtype
        else:
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
            a = x._row if x._tape is tape else _row_of(x, tape)
        else:
            a = tape.consts.get(xv)
            if a is None:
                a = _row_of(x, tape)
        if ty:
            b = y._row if y._tape is tape else _row_of(y, tape)
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
Tensor.__add__, Tensor.__sub__, Tensor.__mul__ = add, subtract, multiply
Tensor.__truediv__, Tensor.__pow__ = divide, power
for _op in unary_ops.values():
    setattr(Tensor, _op.name, _UNARY_FUNCTIONS[_op.code])
Tensor.__neg__ = _UNARY_FUNCTIONS[codes.NEG]
Tensor.__abs__ = _UNARY_FUNCTIONS[codes.ABS]


def _binary_arrays(op, x, y):
    if type(x) is not Tensor and type(x) not in (float, int, bool):
        x = _constant(x)
    if type(y) is not Tensor and type(y) not in (float, int, bool):
        y = _constant(y)
    xa = _array_value(x) if type(x) is Tensor else x
    ya = _array_value(y) if type(y) is Tensor else y
    with np.errstate(all="ignore"):
        z, shape, dtype = _canonical(op.array(xa, ya))
    if dtype.kind == "f" and _recording(x, y):
        tape = _tape_for(x, y)
        row = tape.push(op.code, _row_of(x, tape), _row_of(y, tape), shape, -1,
                        _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)


def _compare(np_fn, x, y):
    xa = _array_value(x)
    ya = _array_value(y) if type(y) is Tensor else y
    with np.errstate(all="ignore"):
        return _plain(*_canonical(np_fn(xa, ya)))


def where(condition, x, y):
    """Elements of ``x`` where ``condition`` holds, else of ``y`` (numpy broadcasting).

    Both branches are differentiated, as in torch: where(x > 0, sqrt(x), 0) has a NaN
    gradient at x < 0, because sqrt'(x) is NaN there.

    >>> x = at.tensor([-1.0, 2.0], requires_grad=True)
    >>> at.where(x > 0, x, 0.0).sum().backward(); x.grad
    tensor([0., 1.])
    """
    c = np.asarray(_array_value(condition) if type(condition) is Tensor else condition)
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


def maximum(x, y):
    """Elementwise maximum; on ties the gradient is split evenly between x and y."""
    return _binary(binary_ops[codes.MAXIMUM], x, y)


def minimum(x, y):
    """Elementwise minimum; on ties the gradient is split evenly between x and y."""
    return _binary(binary_ops[codes.MINIMUM], x, y)


# ---- reductions -------------------------------------------------------------------------

def _reduce(code, x, axis, keepdims):
    x = as_tensor(x)
    axes = tuple(range(x.ndim)) if axis is None else normalize_axis_tuple(axis, x.ndim)
    fn = np.sum if code == codes.SUM else np.mean
    with np.errstate(all="ignore"), warnings.catch_warnings():
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


def transpose(x, axes=None):
    """Permute the axes (reversed when ``axes`` is None)."""
    x = as_tensor(x)
    axes = tuple(reversed(range(x.ndim))) if axes is None else normalize_axis_tuple(
        axes, x.ndim)
    if len(axes) != x.ndim:
        raise ValueError("axes don't match array")
    view = np.transpose(_array_value(x), axes)
    if _recording(x):
        z, _, _ = _canonical(np.ascontiguousarray(view))
        return _strided(x, z, transpose_pattern(x._shape, axes))
    return _from_view(x, view)


def broadcast_to(x, shape):
    """``x`` repeated along new or size-1 axes to ``shape`` (numpy rules)."""
    x = as_tensor(x)
    shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(shape)
    view = np.broadcast_to(_array_value(x), shape)
    if _recording(x):
        z, _, _ = _canonical(np.ascontiguousarray(view))
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
    """Normalise an index to a tuple of ints, slices, None and Ellipsis (ending in one)."""
    items = index if type(index) is tuple else (index,)
    out = []
    for k in items:
        if k is None or k is Ellipsis or type(k) is slice:
            out.append(k)
        elif isinstance(k, (bool, np.bool_)):
            raise IndexError("autotape supports basic indexing (integers, slices, ..., "
                             "None); got a boolean index")
        elif isinstance(k, numbers.Integral):
            out.append(int(k))
        elif type(k) is Tensor and k._dtype.kind in "iu" and k._shape == ():
            out.append(int(k))
        else:
            raise IndexError("autotape supports basic indexing (integers, slices, ..., "
                             f"None); got {type(k).__name__}")
    if not any(k is Ellipsis for k in out):
        out.append(Ellipsis)
    return tuple(out)


def _getitem(x, index):
    index = _basic_index(index)
    view = _array_value(x)[index]
    if not _recording(x):
        return _from_view(x, view)
    z, _, _ = _canonical(np.ascontiguousarray(view))
    if len(index) == 2 and type(index[0]) is int and x._shape:   # x[i]: the common case
        i = index[0] + x._shape[0] if index[0] < 0 else index[0]
        inner = int(np.prod(x._shape[1:], dtype=np.int64))
        strides = tuple(int(np.prod(x._shape[d + 1:], dtype=np.int64))
                        for d in range(1, len(x._shape)))
        return _strided(x, z, (x._shape[1:], i * inner, strides))
    return _strided(x, z, view_pattern(x._shape, index))


def _setitem(x, index, value):
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

def matmul(x, y):
    """Matrix product of 1-D and 2-D operands (numpy's rules for 1-D)."""
    x, y = as_tensor(x), as_tensor(y)
    if not (1 <= x.ndim <= 2 and 1 <= y.ndim <= 2):
        raise ValueError(f"matmul: autotape supports 1-D and 2-D operands, got shapes "
                         f"{x._shape} and {y._shape}")
    z, shape, dtype = _canonical(np.matmul(_array_value(x), _array_value(y)))
    if dtype.kind == "f" and _recording(x, y):
        tape = _tape_for(x, y)
        row = tape.push(codes.MATMUL, _row_of(x, tape), _row_of(y, tape), shape, -1,
                        _tape_value(z))
        return _result(z, shape, dtype, tape, row)
    return _plain(z, shape, dtype)
