"""Tensor: a value, and for a result of a recorded op, its tape and row.

This module is the data: attributes, conversions, the storage rule. Operators, methods
and numpy's protocols are attached by tensor_methods.py, above the op families that
implement them (as HIPS autograd's numpy_boxes does), so Tensor imports nothing above it.

A leaf owns its value. A result holds its tape and row; its value is the one recorded
there. A 0-d floating tensor keeps its value as a Python float, because arithmetic on
Python floats is ten times cheaper than on numpy scalars, and scalar-heavy simulation
code is made of such ops; every other value is a C-contiguous numpy array.

Storage rule: values that a tape may reference (those of tensors that require grad)
are never written in place. An in-place op on such a tensor binds it to a new value;
``numpy()``, ``__array__`` and ``detach()`` hand out read-only views of it.
"""
import functools
import math
import warnings
import weakref

import numpy as np

from .guards import Traced, current_trace, observe_value, warn_scalar_conversion
from .kernels.elementwise import PLAIN_COPY, unary_parallel
from .parallel import for_numba, parallel_launch, pieces

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
_new = object.__new__


def round_f32(v):
    """A Python float rounded to float32 (0-d float32 values are kept as floats)."""
    return float(np.float32(v))


class Size(int):
    """A tensor's element count (numpy's ``t.size``) that, called, answers torch's
    ``t.size()`` (the shape) and ``t.size(dim)``: one spelling serves both."""

    def __new__(cls, count, shape):
        n = int.__new__(cls, count)
        n._shape = shape
        return n

    def __reduce__(self):                     # (pickled, it is the number)
        return int, (int(self),)

    def __call__(self, dim=None):
        if dim is None:
            return self._shape
        if not -len(self._shape) <= dim < len(self._shape):
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-len(self._shape)}, {len(self._shape) - 1}], but got {dim})")
        return self._shape[dim]


class Tensor(Traced):
    """An n-d array that can record the ops applied to it.

    >>> x = at.tensor([5.0, 3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([10.,  6.])
    """
    __slots__ = ("_value", "_shape", "_dtype", "_tape", "_row", "_requires_grad",
                 "_grad", "_retains_grad", "_cache", "_data_of", "_hooks", "_post_hooks",
                 "_view_of", "_views", "_versions", "__weakref__")

    # -- attributes ------------------------------------------------------------------------

    @property
    def shape(self):
        """The shape, a tuple of ints.

        >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        >>> m.shape
        (2, 2)
        """
        return self._shape

    @property
    def ndim(self):
        """The number of axes.

        >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        >>> m.ndim
        2
        """
        return len(self._shape)

    @property
    def dtype(self):
        """The numpy dtype of the values (float64 unless asked otherwise).

        >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> x.dtype
        dtype('float64')
        """
        return self._dtype

    @property
    def size(self):
        """The number of elements, as numpy's ``.size``; called, torch's ``size()``: the
        shape, or ``size(dim)`` one of its lengths.

        >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        >>> m.size
        4
        >>> m.size(), m.size(0)
        ((2, 2), 2)
        """
        return Size(math.prod(self._shape), self._shape)

    @property
    def T(self):
        """The transpose (all axes reversed), as numpy's ``.T``.

        >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        >>> m.T
        tensor([[1., 3.],
                [2., 4.]], grad_fn=<ViewBackward>)
        """
        return self.transpose()

    @property
    def is_leaf(self):
        """True for a tensor no recorded op produced (an input), as torch.

        >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> x.is_leaf, (x * 2).is_leaf
        (True, False)
        """
        return self._tape is None

    @property
    def requires_grad(self):
        """Whether ops on this tensor are recorded; settable on leaves.

        >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> x.requires_grad, at.tensor([1.0]).requires_grad
        (True, False)
        """
        return self._tape is not None or self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if self._tape is not None:
            if not flag:
                raise RuntimeError(NON_LEAF_FLAG_MSG)
            return
        if flag and self._dtype.kind != "f":
            raise RuntimeError(
                "only Tensors of floating point and complex dtype can require gradients")
        self._set_requires_grad(bool(flag))

    def requires_grad_(self, requires_grad=True):
        """Set ``requires_grad`` on a leaf in place; returns self.

        >>> at.tensor([1.0]).requires_grad_()
        tensor([1.], requires_grad=True)
        """
        if self._tape is not None:
            if not requires_grad:
                raise RuntimeError(NON_LEAF_FLAG_MSG)
            return self
        if requires_grad and self._dtype.kind != "f":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self._set_requires_grad(bool(requires_grad))
        return self

    def _set_requires_grad(self, flag):
        if self._requires_grad != flag and type(self._value) is np.ndarray:
            # off: tapes keep the old array, unwritten; on: views handed out before
            # (numpy(), np.asarray, detach()) stay writable, so they must not be what a
            # tape records
            self._value = self._value.copy()
        self._requires_grad = flag
        self._cache = None

    @property
    def grad(self):
        """The gradient accumulated by ``backward`` (None until then); for a non-leaf,
        only after ``retain_grad()`` (otherwise None, with torch's warning).

        >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> x.grad is None
        True
        >>> at.sum(x * x).backward()
        >>> x.grad
        tensor([2., 4., 6.])
        """
        if self._tape is not None and not getattr(self, "_retains_grad", False):
            warnings.warn(NON_LEAF_GRAD_MSG, UserWarning, stacklevel=2)
            return None
        return getattr(self, "_grad", None)

    @grad.setter
    def grad(self, g):
        if g is not None:
            if type(g) is not Tensor:
                raise TypeError("assigned grad expected to be a Tensor or None but got grad "
                                f"of type {type(g).__name__}")
            if g is self:
                raise RuntimeError("can't assign Variable as its own grad")
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

    @grad.deleter
    def grad(self):
        self._grad = None

    def __reduce__(self):
        """Pickled as torch pickles a tensor: its value, dtype and requires_grad, as a
        leaf (no graph, no .grad)."""
        return (_unpickled, (np.array(self._value, self._dtype), self.requires_grad))

    @property
    def retains_grad(self):
        """Whether ``retain_grad()`` was called on this non-leaf.

        >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> y = x * 2
        >>> y.retains_grad
        False
        """
        return self._tape is not None and getattr(self, "_retains_grad", False)

    def retain_grad(self):
        """Keep the gradient of this non-leaf in ``.grad`` during backward and grad.

        >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> y = x * 2
        >>> y.retain_grad()
        >>> y.sum().backward()
        >>> y.grad
        tensor([1., 1., 1.])
        """
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._tape is not None:
            self._retains_grad = True
            self._tape.retained[self._row] = weakref.ref(self)

    # -- conversions -----------------------------------------------------------------------

    def numpy(self):
        """The value as a numpy array (read-only when the tensor requires grad).

        >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> x.detach().numpy()
        array([1., 2., 3.])
        """
        if current_trace() is not None:
            observe_value(self)
        v = self._value
        if type(v) is float:
            return np.array(v, self._dtype)
        if self.requires_grad:
            v = v.view()
            v.flags.writeable = False
        elif v.flags.writeable:
            _handed_out[id(v)] = v             # (writable from outside now)
        return v

    def __array__(self, dtype=None, copy=None):
        """numpy's implicit conversion (np.array(t), np.asarray(t), a list of tensors, an
        element assignment ``out[i] = t``): refused for a tensor that requires grad, as
        torch refuses it, because the result would silently leave the graph. ``.numpy()``
        and ``.detach()`` say so explicitly."""
        if self.requires_grad:
            raise RuntimeError(NUMPY_ARRAY_OF_GRAD_MSG)
        a = self.numpy()
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def detach(self):
        """A new leaf that does not require grad, sharing the value (read-only).

        >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> x.detach()
        tensor([1., 2., 3.])
        """
        return new_leaf(self.numpy() if self.requires_grad else self._value, self._shape,
                      self._dtype)

    def detach_(self):
        """Make this tensor a leaf that does not require grad, in place; returns self.

        >>> y = at.tensor([1.0], requires_grad=True) * 2
        >>> y.detach_().requires_grad
        False
        """
        if self._view_of is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        if self._tape is not None:
            v = self._value
            self._value = v if type(v) is float else v.copy()   # the tape keeps the old
            self._tape, self._row = None, -1
            self._requires_grad = False
            self._retains_grad = False
        elif self._requires_grad:
            self._set_requires_grad(False)
        return self

    @property
    def data(self):
        """torch's ``.data``: the value as a tensor that does not require grad. Changing
        it in place (``p.data -= lr * p.grad``, ``p.data.zero_()``, ``p.data[0] = 1``)
        changes this leaf's value without recording; tapes keep the value they
        recorded.

        >>> p = at.tensor([1.0, 2.0], requires_grad=True)
        >>> p.data *= 2
        >>> p
        tensor([2., 4.], requires_grad=True)
        """
        d = new_leaf(self.numpy() if self.requires_grad else self._value, self._shape,
                     self._dtype)
        d._data_of = weakref.ref(self)
        return d

    @data.setter
    def data(self, other):
        other = other if isinstance(other, Tensor) else tensor_from(other)
        self._set_data(other._value, other._shape, other._dtype)

    def _set_data(self, value, shape, dtype):
        """A new value for this leaf, untracked (``.data``), in a buffer of its own."""
        if self._tape is not None:
            raise RuntimeError("autotape does not change the value of a non-leaf tensor "
                               "through .data: its graph was recorded with the old value. "
                               "Detach it first (y = y.detach()) and change that.")
        if self._requires_grad and dtype.kind != "f":
            raise RuntimeError("data set to a tensor that requires gradients must be "
                               f"floating point or complex dtype (got {dtype})")
        self._value = value if type(value) is float else np.array(value, dtype, copy=True)
        self._shape, self._dtype, self._cache = shape, dtype, None

    def item(self):
        """The single element as a Python number.

        >>> at.tensor([2.5]).item()
        2.5
        """
        if self.size != 1:
            raise RuntimeError(
                f"a Tensor with {self.size} elements cannot be converted to Scalar")
        if current_trace() is not None:
            observe_value(self)
        v = self._value
        return v if type(v) is float else v.reshape(-1)[0].item()

    def tolist(self):
        """The values as (nested) Python lists, as numpy and torch.

        >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        >>> m.tolist()
        [[1.0, 2.0], [3.0, 4.0]]
        """
        if current_trace() is not None:
            observe_value(self)
        v = self._value
        return v if type(v) is float else v.tolist()

    def __float__(self):
        if (self._tape is not None or self._requires_grad) and current_trace() is None:
            warn_scalar_conversion()            # torch's warning: the float has no grad
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
        if current_trace() is not None:
            observe_value(self, decision=True)      # a branch: the guard is the decision
        v = self._value
        return bool(v if type(v) is float else v.reshape(-1)[0])

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
        if current_trace() is not None:
            observe_value(self)                 # (printed: a branch may follow from it)
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

    def __format__(self, spec):
        """``f"{t}"`` is ``str(t)``; a format spec applies to a 0-d tensor's number
        (``f"{loss:.3f}"``), as torch."""
        if not spec:
            return str(self)
        if self._shape != ():
            raise TypeError(f"unsupported format string passed to Tensor.__format__: a "
                            f"spec ({spec!r}) needs a 0-d tensor, not shape {self._shape}")
        if current_trace() is not None:
            observe_value(self)
        v = self._value
        return format(v.item() if type(v) is np.ndarray else v, spec)

    def _become(self, other):
        """Take over another tensor's value and place in the graph (in-place ops)."""
        self._value, self._tape, self._row = other._value, other._tape, other._row
        self._cache = None
        if self._tape is not None and getattr(self, "_retains_grad", False):
            self._tape.retained[self._row] = weakref.ref(self)


NON_LEAF_FLAG_MSG = (
    "you can only change requires_grad flags of leaf variables. If you want to use a "
    "computed variable in a subgraph that doesn't require differentiation use "
    "var_no_grad = var.detach().")
NON_LEAF_GRAD_MSG = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
    ".grad attribute won't be populated during autograd.backward(). If you indeed want "
    "the .grad field to be populated for a non-leaf Tensor, use .retain_grad() on the "
    "non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure you access "
    "the leaf Tensor instead.")
LEAF_INPLACE_MSG = "a leaf Variable that requires grad is being used in an in-place operation."
REQUIRES_GRAD_NUMPY_MSG = ("Can't call numpy() on Tensor that requires grad. Use "
                           "tensor.detach().numpy() instead.")
# numpy's implicit conversion (np.array([t0, t1]) in a model's step): torch's words, then
# why detaching is no fix there
NUMPY_ARRAY_OF_GRAD_MSG = REQUIRES_GRAD_NUMPY_MSG + (
    " (np.array, np.asarray or storing into a numpy array, as in np.array([t0, t1]), "
    "would lose the gradient, detached or not. Build the array with autotape ops: "
    "np.stack([t0, t1]) or np.concatenate, which autotape records, or x = at.zeros(n) "
    "and x[i] = t on a Tensor.)")
LEAF_VIEW_INPLACE_MSG = ("a view of a leaf Variable that requires grad is being used in an "
                      "in-place operation.")
NONLEAF_NO_GRAD_INPLACE_MSG = (
    "autotape does not modify a non-leaf tensor that requires grad in place under "
    "no_grad(): its gradient would be computed with the value recorded before the "
    "change. Detach it first (y = y.detach()) or do the update with grad enabled.")

# ---- making tensors -------------------------------------------------------------------------

def written_through(t):
    """After ``t`` changed in place: a tensor from ``owner.data`` passes its new value
    on to its owner (torch's shared storage, without writing a buffer a tape holds)."""
    ref = getattr(t, "_data_of", None)
    owner = ref() if ref is not None else None
    if owner is not None:
        owner._set_data(t._value, t._shape, t._dtype)


def _unpickled(value, requires_grad):
    t = new_leaf(value, value.shape, value.dtype)
    t._requires_grad = requires_grad
    return t


def new_leaf(value, shape, dtype):
    """A tensor that does not require grad (and is a leaf)."""
    t = _new(Tensor)
    if shape == () and dtype.kind == "f":
        value = float(value)
    t._value, t._shape, t._dtype = value, shape, dtype
    t._tape, t._row, t._requires_grad, t._cache = None, -1, False, None
    t._view_of = t._views = None
    return t


def float_leaf(value):
    """``new_leaf(value, (), F64)`` for a Python float (a compiled kernel's result),
    without its checks: a small model's call makes one per call."""
    t = _new(Tensor)
    t._value, t._shape, t._dtype = value, (), F64
    t._tape, t._row, t._requires_grad, t._cache = None, -1, False, None
    t._view_of = t._views = None
    return t


def new_result(value, shape, dtype, tape, row):
    t = _new(Tensor)
    t._value, t._shape, t._dtype = value, shape, dtype
    t._tape, t._row, t._requires_grad = tape, row, True
    t._view_of = t._views = None
    return t


def canonical(z):
    """numpy result -> (value, shape, dtype) in Tensor form."""
    z = np.asarray(z)
    dtype = z.dtype
    if dtype.kind == "c":
        raise ComplexOperand(f"a complex value ({dtype}) where a real Tensor is made: this "
                             "function takes real numbers (the ones that take complex "
                             "numbers: docs/guide/complex.md)")
    if dtype.kind not in "biuf" or dtype == np.float16:
        raise TypeError(f"autotape does not support dtype {dtype}")
    if z.shape == () and dtype.kind == "f":
        return float(z), (), dtype
    if not z.flags.c_contiguous:
        z = np.ascontiguousarray(z)
    return z, z.shape, dtype


def leaf_of(value):
    """A numpy result (an index array, a cast, a decision) as a Tensor off the graph."""
    return new_leaf(*canonical(value))


def holds_tensor(items):
    """Whether a nested list / tuple holds a Tensor."""
    return any(type(v) is Tensor or type(v) in (list, tuple) and holds_tensor(v)
               for v in items)


def tensor_from(data, dtype=None):
    if isinstance(data, Tensor):
        return data
    if isinstance(data, OnDevice):
        raise DeviceOperand(MIXED_DEVICES_MSG)
    if (type(data) not in (list, tuple) and is_complex_data(data)) or (
            dtype is not None and np.dtype(dtype).kind == "c"):
        raise ComplexOperand(f"complex data ({type(data).__name__}) where a real Tensor "
                             "is made: this function takes real numbers (the ones that "
                             "take complex numbers: docs/guide/complex.md)")
    if type(data) is np.ndarray and data.dtype == F64 and dtype in (None, F64) and \
            data.flags.c_contiguous and pieces(data.size) > 1:
        t = new_leaf(*canonical(_copy_in_threads(data)))
        read_from(data, t)
        return t
    try:
        a = np.array(data, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(f"cannot make a tensor from {type(data).__name__}: {e}") from None
    if a.dtype.kind == "c":
        raise ComplexOperand(f"complex data ({type(data).__name__}) where a real Tensor "
                             "is made: this function takes real numbers (the ones that "
                             "take complex numbers: docs/guide/complex.md)")
    if a.dtype.kind not in "biuf":
        raise TypeError(f"autotape tensors hold real numbers or bools, not {a.dtype} "
                        f"(from {type(data).__name__})")
    if a.dtype == np.float16:
        a = a.astype(np.float32)
    value, shape, dtype = canonical(a)
    t = new_leaf(value, shape, dtype)
    if type(data) in (np.ndarray, list):
        read_from(data, t)
    return t


# ---- complex operands ------------------------------------------------------------------
#
# A Tensor holds real numbers; complex numbers are ComplexTensors (complex_numbers/),
# built on Tensors. Where a real-only path meets complex data it raises ComplexOperand;
# the public functions catch it (complex_aware) and hand the whole call to the complex
# implementation of the same numpy name, or refuse it by name: never a silent cast that
# drops the imaginary part. The real paths pay nothing for this.

class ComplexOperand(TypeError):
    """Complex data reached a path that computes on real numbers only."""


# numpy name -> the implementation taking complex operands (complex_numbers/ fills it)
COMPLEX_FUNCTIONS = {}


def is_complex_data(v):
    """Whether v holds complex numbers: a Python or numpy complex, a complex array, a
    ComplexTensor, or a list / tuple holding one."""
    if type(v) in (list, tuple):
        return any(is_complex_data(item) for item in v)
    if isinstance(v, complex):
        return True
    dtype = getattr(v, "dtype", None)
    return dtype is not None and getattr(dtype, "kind", None) == "c"


def complex_call(name, *args, **kwargs):
    """``name`` (numpy's spelling) on complex operands, or a TypeError naming it."""
    fn = COMPLEX_FUNCTIONS.get(name)
    if fn is None:
        raise TypeError(f"autotape: {name} does not support complex numbers (its "
                        "operands hold complex values; see docs/guide/complex.md for "
                        "the functions that do)") from None
    return fn(*args, **kwargs)


# ---- device operands ------------------------------------------------------------------
#
# Tensors whose values live on a GPU (device_tensors.py) are OnDevice, not Tensors. Where
# a CPU path would make a Tensor of one, tensor_from raises DeviceOperand, torch's error
# for mixed devices; the public functions catch it (complex_aware) and hand the whole call
# to the device implementation of the same name, which computes it on the device or,
# where a CPU tensor is among the operands, raises that error itself.

MIXED_DEVICES_MSG = ("Expected all tensors to be on the same device, but found at least "
                     "two devices, cuda:0 and cpu!")


class OnDevice:
    """The base of tensors whose values live on a device (device_tensors.py)."""
    __slots__ = ()


class DeviceOperand(RuntimeError):
    """A device tensor reached a path that makes a CPU Tensor."""


class DeviceToNumpy(DeviceOperand, TypeError):
    """numpy asked for a device tensor's values (``np.asarray``): torch's TypeError; a
    public function that met it inside hands the call to the device implementation."""


# name -> the implementation for device tensors (device_tensors.py fills it): numpy's
# names of functions, and "to" (move a tensor), "grad", "backward"
DEVICE_FUNCTIONS = {}


def device_call(name, *args, **kwargs):
    """``name`` with device tensors among the operands, or a TypeError naming it."""
    fn = DEVICE_FUNCTIONS.get(name)
    if fn is None:
        raise TypeError(f"autotape: {name} is not available for device tensors (the "
                        "ones that are: docs/guide/gpu.md); move the operands to the "
                        "CPU with .cpu() first") from None
    return fn(*args, **kwargs)


def on_device(values):
    """Whether a tensor, or a list / tuple of them, holds a device tensor."""
    if type(values) in (list, tuple):
        return any(isinstance(v, OnDevice) for v in values)
    return isinstance(values, OnDevice)


def complex_aware(fn, name=None):
    """``fn``, handing a call whose operands are complex to ``complex_call(name)``.

    >>> at.exp(at.tensor([0.0, 1.0]) * 1j)
    tensor([1.        +0.j        , 0.54030231+0.84147098j])
    """
    name = name or fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ComplexOperand:
            return complex_call(name, *args, **kwargs)
        except DeviceOperand:
            return device_call(name, *args, **kwargs)
    call.complex_aware = True
    return call


def read_from(source, t):
    """Inside a compile trace, note that tensor t holds a copy of ``source`` (an array,
    a list or a tensor f read): a call after ``source`` changed records f again
    (compile.py)."""
    trace = current_trace()
    if trace is not None:
        trace.captured.append((source, t._value))


def _copy_in_threads(a):
    out = np.empty(a.shape)
    for_numba()
    with parallel_launch():
        unary_parallel(PLAIN_COPY, a.reshape(-1), out.reshape(-1), pieces(a.size))
    return out


# ---- a tensor's value, as numpy and as the tape stores it ----------------------------------

# Tensor values that numpy() gave out writable: a tape copies them rather than freezing
# them, since any view of them may be written (ops/recording.py).
_handed_out = weakref.WeakValueDictionary()


def handed_out(v):
    """Whether ``numpy()`` gave out array ``v``, the value of a tensor, writable."""
    return _handed_out.get(id(v)) is v


def array_of(t):
    v = t._value
    return np.array(v, t._dtype) if type(v) is float else v


def tape_value(v):
    """A value as the tape stores it: a float, or a flat float64 array."""
    if type(v) is float:
        return v
    if type(v) is np.ndarray and v.dtype == F64 and v.flags.c_contiguous:
        return v.reshape(-1)                  # a view: no copy, no dtype dispatch
    return np.ascontiguousarray(v, F64).reshape(-1)
