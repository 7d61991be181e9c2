"""Tensor: a value, and for a result of a recorded op, its tape and row.

A leaf owns its value. A result holds its tape and row; its value is the one recorded
there. A 0-d floating tensor keeps its value as a Python float, because arithmetic on
Python floats is ten times cheaper than on numpy scalars, and scalar-heavy simulation
code is made of such ops; every other value is a C-contiguous numpy array.

Storage rule: values that a tape may reference (those of tensors that require grad)
are never written in place. An in-place op on such a tensor binds it to a new value;
``numpy()``, ``__array__`` and ``detach()`` hand out read-only views of it.
"""
import warnings
import weakref

import numpy as np

from .grad_mode import _Mode
from .guards import _Current, observe_value
from .quiet import quiet
from .ops import codes
from .ops.elementwise import binary_ops, unary_ops

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
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

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """np.sin(t), ndarray * t: numpy ufuncs record like autotape's (interop.py)."""
        from .interop import array_ufunc
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        """np.sum(t), np.concatenate([t, u]): the numpy functions autotape has record;
        any other raises a TypeError naming it, never dropping the gradient."""
        from .interop import array_function
        return array_function(func, args, kwargs)

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
        if _Current.trace is not None:
            observe_value(self)
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
        if _Current.trace is not None:
            observe_value(self)
        v = self._value
        return v if type(v) is float else v.reshape(-1)[0].item()

    def tolist(self):
        if _Current.trace is not None:
            observe_value(self)
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
    def __mod__(self, other): return _BINARY_FUNCTIONS[codes.MOD](self, other)
    def __rmod__(self, other): return _BINARY_FUNCTIONS[codes.MOD](other, self)
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

    def max(self, axis=None, keepdims=False):
        return record_max(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return record_min(self, axis, keepdims)

    def prod(self, axis=None, keepdims=False):
        return record_prod(self, axis, keepdims)

    def cumsum(self, axis=None):
        return record_cumsum(self, axis)

    def cumprod(self, axis=None):
        return record_cumprod(self, axis)

    def var(self, axis=None, ddof=0, keepdims=False):
        from .composite import var
        return var(self, axis, ddof, keepdims)

    def std(self, axis=None, ddof=0, keepdims=False):
        from .composite import std
        return std(self, axis, ddof, keepdims)

    def argmax(self, axis=None, keepdims=False):
        from .composite import argmax
        return argmax(self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        from .composite import argmin
        return argmin(self, axis, keepdims)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        from .composite import diagonal
        return diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1):
        from .composite import trace
        return trace(self, offset, axis1, axis2)

    def clip(self, a_min=None, a_max=None):
        """Limit to [a_min, a_max]; see at.clip."""
        return clip(self, a_min, a_max)

    def ravel(self):
        return self.reshape(-1)

    flatten = ravel

    def squeeze(self, axis=None):
        from .composite import squeeze
        return squeeze(self, axis)

    def swapaxes(self, axis1, axis2):
        from .composite import swapaxes
        return swapaxes(self, axis1, axis2)

    def dot(self, b):
        from .composite import dot
        return dot(self, b)

    def take(self, indices, axis=None):
        from .composite import take
        return take(self, indices, axis)

    def repeat(self, repeats, axis=None):
        from .composite import repeat
        return repeat(self, repeats, axis)

    def copy(self):
        """A copy; recorded (its gradient passes through) when self requires grad."""
        return astype(self, self._dtype) if self.requires_grad else \
            _plain(self._value if type(self._value) is float else self._value.copy(),
                   self._shape, self._dtype)

    def conj(self):
        """Real tensors are their own conjugate."""
        return self

    conjugate = conj

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
            with quiet():
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

ADD, SUB, MUL, DIV = (binary_ops[c] for c in (codes.ADD, codes.SUB, codes.MUL, codes.DIV))
_OP_NAMES = {op.code: op.name.capitalize() + "Backward" for op in
             list(unary_ops.values()) + list(binary_ops.values())}
_OP_NAMES.update({codes.TAKE: "IndexBackward", codes.PUT_ADD: "IndexPutBackward",
                  codes.WHERE: "WhereBackward", codes.SUM: "SumBackward",
                  codes.MEAN: "MeanBackward", codes.MAX: "MaxBackward",
                  codes.MIN: "MinBackward", codes.SCATTER: "ScatterBackward",
                  codes.PROD: "ProdBackward", codes.CUMSUM: "CumsumBackward", codes.CUMPROD: "CumprodBackward", codes.RESHAPE: "ReshapeBackward",
                  codes.STRIDED: "ViewBackward", codes.SETITEM: "CopySlices",
                  codes.CONCAT: "CatBackward", codes.MATMUL: "MatmulBackward",
                  codes.INV: "LinalgInvBackward", codes.SOLVE: "LinalgSolveBackward",
                  codes.SLOGDET: "LinalgSlogdetBackward",
                  codes.CHOLESKY: "LinalgCholeskyBackward",
                  codes.EIGH: "LinalgEighBackward"})


# ---- making tensors -------------------------------------------------------------------------

def _plain(value, shape, dtype):
    """A tensor that does not require grad (and is a leaf)."""
    t = _new(Tensor)
    if dtype.kind == "f" and shape == ():
        value = float(value)
    t._value, t._shape, t._dtype = value, shape, dtype
    t._tape, t._row, t._requires_grad, t._cache = None, -1, False, None
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
    """``data`` unchanged if it is a Tensor; nested lists that hold Tensors stacked on
    the tape (so ``np.mean([x, 1.0])`` keeps x's gradient); else a constant tensor."""
    if type(data) is Tensor:
        return data
    if type(data) in (list, tuple) and holds_tensor(data):
        from .record import stack
        return stack([as_tensor(item) for item in data])
    return _constant(data)


def holds_tensor(items):
    """Whether a nested list / tuple holds a Tensor."""
    return any(type(v) is Tensor or type(v) in (list, tuple) and holds_tensor(v)
               for v in items)


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


# ---- a tensor's value, as numpy and as the tape stores it ----------------------------------

def _array_value(t):
    v = t._value
    return np.array(v, t._dtype) if type(v) is float else v


def _tape_value(v):
    """A value as the tape stores it: a float, or a flat float64 array."""
    if type(v) is float:
        return v
    if type(v) is np.ndarray and v.dtype == F64 and v.flags.c_contiguous:
        return v.reshape(-1)                  # a view: no copy, no dtype dispatch
    return np.ascontiguousarray(v, F64).reshape(-1)


# ---- operators and methods that record (record.py, which needs the class above) ----------

from .record import (_BINARY_FUNCTIONS, _UNARY_FUNCTIONS, _binary, _cast_result, _compare, clip,  # noqa: E402
                     _getitem, _reduce, _setitem, add, astype, divide, matmul, multiply,
                     power, reshape, subtract, transpose)
from .record import cumprod as record_cumprod, cumsum as record_cumsum  # noqa: E402
from .record import prod as record_prod  # noqa: E402
from .record import max as record_max, min as record_min  # noqa: E402

Tensor.__add__, Tensor.__sub__, Tensor.__mul__ = add, subtract, multiply
Tensor.__truediv__, Tensor.__pow__ = divide, power
for _op in unary_ops.values():
    setattr(Tensor, _op.name, _UNARY_FUNCTIONS[_op.code])
Tensor.__neg__ = _UNARY_FUNCTIONS[codes.NEG]
Tensor.__abs__ = _UNARY_FUNCTIONS[codes.ABS]
