"""Tensors on a CUDA GPU: ``at.tensor(data, device="cuda")``, ``x.cuda()``,
``x.to("cuda")``; ops on them run on the device, and so does their reverse sweep.

    x = at.tensor(np.linspace(0, 1, 10**6), device="cuda", requires_grad=True)
    loss = (at.sin(x) * x).sum()
    loss.backward()                     # x.grad: a device tensor
    x.grad.cpu().numpy()

A device tensor's value is a CuPy array (device_kernels.py says why). Its ops are
recorded as rows of a small graph held by the results (each row keeps its operands, as
torch's saved tensors), numbered in the order they ran. The sweep walks the rows newest
first; a run of consecutive elementwise rows of one shape is swept by one generated
kernel (its adjoints in registers, its partial derivatives the op table's), the other
rows (sums, matrix products through cuBLAS, reshapes, indexing) by CuPy. torch's
semantics and messages: ``.grad`` accumulates, ``retain_graph``, ``retain_grad``,
``allow_unused``, released graphs, mixed devices, in-place changes of a saved value
(version counters shared with views).

Gradients flow between the devices both ways: from a device loss back to CPU tensors
moved there (``x.cuda()`` of a CPU tensor that requires grad), and from a CPU loss's
``backward()`` to the device leaves behind ``.cpu()``. Not built: ``create_graph=True``
on device graphs (higher derivatives on the GPU: ``at.compile`` + ``vmap(c.hessian,
device="cuda")``).
"""
import importlib
import itertools
import math
import numbers

import numpy as np

from . import device_kernels as dk
from .creation import tensor as host_tensor
from .custom import CustomOp
from .engine import UNUSED_MSG, backward as host_backward, grad as host_grad
from .executor import RELEASED_MSG
from .grad_mode import is_grad_enabled
from .opcodes import COMPARE_FIRST, COMPARE_LAST, WHERE
from .ops.elementwise import binary_ops, unary_ops
from .ops.linalg import SlogdetResult
from .tensor import (DEVICE_FUNCTIONS, LEAF_INPLACE_MSG, MIXED_DEVICES_MSG, DeviceToNumpy,
                     OnDevice, Tensor)
from .thread_state import here

__all__ = ["DeviceTensor", "to_device"]

DEVICE = "cuda:0"
NUMPY_MSG = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy "
             "the tensor to host memory first.")
INPLACE_MSG = ("one of the variables needed for gradient computation has been modified "
               "by an inplace operation: a device tensor of shape {shape} is at version "
               "{now}; expected version {then} instead.")
CREATE_GRAPH_MSG = ("autotape: create_graph=True is not available on device tensors (their "
                    "sweep computes numbers); for higher derivatives on the GPU use "
                    "at.compile and vmap(c.hessian, device='cuda'), or the CPU")

# ops whose forward is the table's own code even where CuPy has the function: CuPy's
# remainder rounds otherwise (0.9 % 0.1: -2.8e-17, where numpy and the CPU give 0.1)
OWN_FORWARD = {"mod"}
_BY_NAME = {op.name: op for op in list(unary_ops.values()) + list(binary_ops.values())}
_ALIASES = {"absolute": "abs", "true_divide": "divide", "pow": "power"}
_sequence = itertools.count()            # rows are numbered as they run (thread-safe)


def _device_name(device):
    name = str(device)
    if name in ("cuda", "cuda:0"):
        return DEVICE
    if name.startswith("cuda"):
        raise RuntimeError(f"autotape uses one GPU, cuda:0; got device {name!r}")
    raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: "
                       f"{name}")


class _Row:
    """One recorded op: its kind ("ew" elementwise with opcode ``op``, "sum", "extreme"
    (``op`` "max" or "min"), "matmul", "linalg" (``op`` numpy.linalg's name), "concat",
    "reshape", "transpose", "cast", "index", "host"), operands (tensors or numbers), their
    versions when it ran, parameters, and output value ``z``. A released row has no
    operands."""
    __slots__ = ("seq", "kind", "op", "inputs", "versions", "params", "z")

    def __init__(self, kind, op, inputs, params, z):
        self.seq = next(_sequence)
        self.kind, self.op, self.inputs, self.params, self.z = kind, op, inputs, params, z
        self.versions = tuple(v._version[0] if isinstance(v, DeviceTensor) else 0
                              for v in inputs)


def _new(value, row=None):
    t = object.__new__(DeviceTensor)
    t._value, t._row, t._requires_grad = value, row, row is not None
    t._grad, t._retains_grad, t._version = None, False, [0]
    return t


def _record(kind, op, inputs, value, params=None):
    """The result of an op: recorded when an operand requires grad and grad mode is on."""
    if is_grad_enabled() and any(isinstance(v, DeviceTensor) and v._requires_grad
                                 for v in inputs):
        return _new(value, _Row(kind, op, inputs, params, value))
    return _new(value)


def _operand(v):
    """A device tensor, or a number the kernels take as a constant."""
    if isinstance(v, DeviceTensor):
        return v
    if isinstance(v, (bool, numbers.Number)) and not isinstance(v, complex):
        return v
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return v.item()
    if isinstance(v, Tensor) or isinstance(v, np.ndarray) or type(v) in (list, tuple):
        if isinstance(v, Tensor) and v.shape == () and not v.requires_grad:
            return v.item()                    # (torch: a 0-d CPU tensor is a number)
        raise RuntimeError(MIXED_DEVICES_MSG)
    raise TypeError(f"autotape: a device tensor cannot be combined with "
                    f"{type(v).__name__}")


def _value(v):
    return v._value if isinstance(v, DeviceTensor) else v


# ---- construction and moves ------------------------------------------------------------

def to_device(data, dtype=None, requires_grad=False, device="cuda"):
    """A new device leaf holding a copy of ``data`` (as ``at.tensor``, on the GPU).

    >>> x = at.tensor([1.0, 2.0], device="cuda", requires_grad=True)  # doctest: +SKIP
    >>> x.device                                                        # doctest: +SKIP
    'cuda:0'
    """
    _device_name(device)
    if isinstance(data, DeviceTensor):
        value = data._value.astype(dtype or data.dtype, copy=True)
    else:
        if isinstance(data, Tensor):
            data = data.detach().numpy()
        a = np.asarray(data, dtype=dtype)
        if a.dtype.kind == "c" or a.dtype.kind not in "biuf":
            raise TypeError(f"autotape device tensors hold real numbers or bools, not "
                            f"{a.dtype}")
        if dtype is None and a.dtype.kind == "f" and a.dtype != np.float32:
            a = a.astype(np.float64)
        value = dk.to_device(a)
    t = _new(value)
    if requires_grad:
        t.requires_grad_()
    return t


def _to(t, device, dtype=None):
    """``t.to(device)`` for a CPU tensor (differentiable) or a device tensor."""
    name = _device_name(device) if str(device) != "cpu" else "cpu"
    if isinstance(t, DeviceTensor):
        moved = t.cpu() if name == "cpu" else t
        return moved if dtype is None else moved.to(dtype)
    if name == "cpu":
        return t if dtype is None else t.to(dtype)
    if dtype is not None:
        t = t.to(dtype)
    value = dk.to_device(np.asarray(t.detach().numpy()))
    if t.requires_grad and is_grad_enabled():
        return _new(value, _Row("host", None, (t,), None, value))
    return _new(value)


# ---- the tensor ----------------------------------------------------------------------------

class DeviceTensor(OnDevice):
    """A tensor whose value lives on the GPU: ``at.tensor(..., device="cuda")``.

    >>> x = at.tensor([1.0, 2.0], device="cuda", requires_grad=True)  # doctest: +SKIP
    >>> (x * x).sum().backward()                                        # doctest: +SKIP
    >>> x.grad                                                          # doctest: +SKIP
    tensor([2., 4.], device='cuda:0')
    """
    __slots__ = ("_value", "_row", "_requires_grad", "_grad", "_retains_grad", "_version",
                 "__weakref__")
    __array_priority__ = 1000

    # -- attributes
    shape = property(lambda self: tuple(self._value.shape), doc="The shape.")
    ndim = property(lambda self: self._value.ndim, doc="The number of axes.")
    dtype = property(lambda self: np.dtype(self._value.dtype), doc="The numpy dtype.")
    size = property(lambda self: int(self._value.size), doc="The number of elements.")
    device = property(lambda self: DEVICE, doc="Where the value lives: 'cuda:0'.")
    is_leaf = property(lambda self: self._row is None, doc="Whether no recorded op made it.")
    is_cuda = True

    @property
    def T(self):
        """The transpose (all axes reversed)."""
        return self.transpose()

    @property
    def requires_grad(self):
        """Whether ops on this tensor are recorded; settable on leaves."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    def requires_grad_(self, flag=True):
        """Set requires_grad on a leaf; returns the tensor."""
        if self._row is not None and not flag:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. "
                               "If you want to use a computed variable in a subgraph that "
                               "doesn't require differentiation use var_no_grad = "
                               "var.detach().")
        if flag and self.dtype.kind != "f":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self._requires_grad = bool(flag)
        return self

    @property
    def grad(self):
        """The accumulated gradient (a device tensor), or None."""
        return self._grad

    @grad.setter
    def grad(self, g):
        if g is not None:
            if not isinstance(g, DeviceTensor):
                raise RuntimeError("assigned grad has data located on a different device")
            if g.shape != self.shape:
                raise RuntimeError("assigned grad has data of a different size")
        self._grad = g

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in ``.grad`` after a sweep."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._row is not None:
            self._retains_grad = True

    @property
    def retains_grad(self):
        """Whether retain_grad() was called on this non-leaf tensor."""
        return self._retains_grad

    # -- conversions
    def detach(self):
        """The same value, off the graph (shares memory and version, as torch's)."""
        t = _new(self._value)
        t._version = self._version
        return t

    def cpu(self):
        """A CPU tensor holding a copy of the value. Differentiable, as torch's: a CPU
        loss's ``backward()`` fills the device leaves' ``.grad`` through it."""
        if self._requires_grad and is_grad_enabled():
            return _to_host_recorded(self)
        return host_tensor(dk.to_host(self._value))

    def cuda(self, device="cuda"):
        """The tensor itself (it is on the GPU)."""
        _device_name(device)
        return self

    def to(self, *args, dtype=None, device=None, copy=False, non_blocking=False):
        """``to("cpu")``, ``to("cuda")``, ``to(dtype)``, ``to(other)``."""
        for a in args:
            if isinstance(a, (Tensor, DeviceTensor)):
                dtype, device = a.dtype, a.device
            elif isinstance(a, str):
                device = a
            else:
                dtype = a
        if device is not None and str(device) == "cpu":
            t = self.cpu()
            return t if dtype is None else t.to(dtype)
        if device is not None:
            _device_name(device)
        if dtype is None or np.dtype(dtype) == self.dtype:
            return self.clone() if copy else self
        return self.astype(dtype)

    def numpy(self):
        """torch's TypeError: copy to the host first (``.cpu().numpy()``)."""
        raise TypeError(NUMPY_MSG)

    def __array__(self, dtype=None, copy=None):
        raise DeviceToNumpy(NUMPY_MSG)

    @property
    def __cuda_array_interface__(self):
        if self._requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires "
                               "grad. Use var.detach().__cuda_array_interface__ instead.")
        return self._value.__cuda_array_interface__

    def item(self):
        """The one element as a Python number (copied from the device)."""
        if self.size != 1:
            raise RuntimeError(f"a Tensor with {self.size} elements cannot be converted to "
                               "Scalar")
        return dk.to_host(self._value).reshape(()).item()

    def tolist(self):
        """The values as nested lists (copied from the device)."""
        return dk.to_host(self._value).tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is "
                               "ambiguous")
        return bool(self.item())

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    __hash__ = object.__hash__

    def __repr__(self):
        host = dk.to_host(self._value)
        body = np.array2string(host, separator=", ", prefix="tensor(")
        extra = f", device='{DEVICE}'"
        if self.dtype not in (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_)):
            extra += f", dtype={self.dtype}"
        if self._row is not None:
            extra += ", grad_fn=<DeviceBackward>"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # -- in place
    def zero_(self):
        """Fill with zeros in place (``x.grad.zero_()``)."""
        return self.fill_(0)

    def fill_(self, value):
        """Fill with ``value`` in place."""
        if self._requires_grad and self._row is None and is_grad_enabled():
            raise RuntimeError(LEAF_INPLACE_MSG)
        if self._row is not None:
            raise RuntimeError("autotape: in-place ops on a device tensor that a recorded "
                               "op made are not supported")
        self._value.fill(value)
        self._version[0] += 1
        return self

    def clone(self):
        """A copy (recorded: gradients flow through it)."""
        return _elementwise("multiply", self, 1.0)

    # -- backward
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate this tensor's gradients into ``.grad`` of the leaves (torch's)."""
        backward((self,), None if gradient is None else (gradient,), retain_graph,
                 create_graph, inputs)



def _to_host_recorded(t):
    """t.cpu() for a t that requires grad: one custom op on the CPU tape (of a private
    leaf, so that the result requires grad) whose VJP sweeps t's device graph with the
    CPU gradient. Only a backward() does (its leaves' .grad fill); a grad() asks for
    CPU tensors' gradients, which do not flow through t, and the device graph is kept
    for later sweeps (it lives as long as the tensors that hold it)."""
    value = dk.to_host(t._value).astype(np.float64)

    def forward(anchor):
        return value

    def vjp(inputs, out, g):
        if isinstance(g, Tensor):
            raise RuntimeError(CREATE_GRAPH_MSG)
        if here().accumulating:
            seed = _new(dk.to_device(np.asarray(g, t.dtype).reshape(t.shape)))
            backward((t,), (seed,), retain_graph=True)
        return (np.zeros(()),)
    out = CustomOp(forward, vjp, "cpu")(host_tensor(0.0, requires_grad=True))
    return out if t.dtype == np.float64 else out.astype(t.dtype)


# ---- ops -----------------------------------------------------------------------------------

def _elementwise(name, *operands):
    """An op of the table (numpy's name) on device operands."""
    op = _BY_NAME[_ALIASES.get(name, name)]
    args = tuple(_operand(v) for v in operands)
    if not any(isinstance(a, DeviceTensor) for a in args):
        raise TypeError(f"autotape: {op.name} of no device tensor")
    xp = dk.array_module()
    values = [_value(a) for a in args]
    if COMPARE_FIRST <= op.code <= COMPARE_LAST:
        return _new(getattr(xp, op.name)(*values))      # (bool: never requires grad)
    fn = getattr(xp, op.name, None) if op.name not in OWN_FORWARD else None
    z = fn(*values) if fn is not None else _generated_forward(op.code, values)
    if np.dtype(z.dtype).kind != "f":
        return _new(z)                                   # (integer results: no grad)
    return _record("ew", op.code, args, z)


def _kernel_operand(v, shape, n):
    """(how the kernel reads v, what the launch passes) for a value of the run's shape."""
    xp = dk.array_module()
    if not hasattr(v, "shape"):
        return dk.NUMBER, float(v)
    if v.size == n:
        return dk.FULL, xp.ascontiguousarray(v).reshape(-1)
    if v.size == 1:
        return dk.ONE, xp.ascontiguousarray(v).reshape(1)
    return dk.FULL, xp.ascontiguousarray(xp.broadcast_to(v, shape)).reshape(-1)


def _generated_forward(code, values):
    xp = dk.array_module()
    shape = np.broadcast_shapes(*(getattr(v, "shape", ()) for v in values))
    dtype = np.result_type(*(v.dtype if hasattr(v, "dtype") else v for v in values))
    dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
    n = math.prod(shape)
    reads = [_kernel_operand(v if not hasattr(v, "dtype") or v.dtype.kind == "f"
                             else v.astype(np.float64), shape, n) for v in values]
    z = xp.empty(shape, dtype)
    if n:
        dk.launch(dk.forward_kernel(code, tuple(how for how, _ in reads)), n,
                  [a for _, a in reads] + [z.reshape(-1)])
    return z


def _device(x):
    if isinstance(x, DeviceTensor):
        return x
    if isinstance(x, Tensor):
        raise RuntimeError(MIXED_DEVICES_MSG)
    raise TypeError(f"autotape: expected a device tensor, got {type(x).__name__}")


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    out = []
    for a in axes:
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-ndim}, {ndim - 1}], but got {a})")
        out.append(a % max(ndim, 1))
    return tuple(sorted(set(out)))


def sum_(x, axis=None, keepdims=False):
    """The sum over ``axis`` (all axes by default), as numpy's."""
    x = _device(x)
    axes = _axes(axis, x.ndim) if x.ndim else ()
    z = dk.array_module().sum(x._value, axis=axes or None, keepdims=keepdims) if x.ndim \
        else x._value.copy()
    return _record("sum", None, (x,), z, (axes, keepdims, x.shape))


def mean(x, axis=None, keepdims=False):
    """The mean over ``axis`` (all axes by default), as numpy's."""
    x = _device(x)
    axes = _axes(axis, x.ndim) if x.ndim else ()
    count = math.prod(x.shape[a] for a in axes)
    return _elementwise("divide", sum_(x, axis, keepdims), float(count))


def _reduce_extreme(name, x, axis, keepdims):
    x = _device(x)
    axes = _axes(axis, x.ndim) if x.ndim else ()
    z = getattr(dk.array_module(), name)(x._value, axis=axes or None, keepdims=keepdims) \
        if x.ndim else x._value.copy()
    return _record("extreme", name, (x,), z, (axes, keepdims, x.shape))


def amax(x, axis=None, keepdims=False):
    """The largest element over ``axis`` (all by default); its gradient is split evenly
    among tied elements, as on the CPU."""
    return _reduce_extreme("max", x, axis, keepdims)


def amin(x, axis=None, keepdims=False):
    """The smallest element over ``axis``; ties split the gradient, as ``amax``."""
    return _reduce_extreme("min", x, axis, keepdims)


def concatenate(tensors, axis=0):
    """numpy's concatenate of device tensors along ``axis``."""
    tensors = [_device(t) for t in tensors]
    if not tensors:
        raise ValueError("need at least one array to concatenate")
    axis = axis % max(tensors[0].ndim, 1)
    z = dk.array_module().concatenate([t._value for t in tensors], axis=axis)
    return _record("concat", None, tuple(tensors), z, (axis, [t.shape[axis] for t in tensors]))


def stack(tensors, axis=0):
    """numpy's stack of device tensors (a new axis at ``axis``)."""
    tensors = [_device(t) for t in tensors]
    if not tensors:
        raise ValueError("need at least one array to stack")
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ValueError("all input arrays must have the same shape")
    axis = axis % (tensors[0].ndim + 1)
    shape = tensors[0].shape[:axis] + (1,) + tensors[0].shape[axis:]
    return concatenate([reshape(t, shape) for t in tensors], axis)


def matmul(a, b):
    """The matrix product (cuBLAS through CuPy), as numpy's ``@``."""
    a, b = _device(a), _device(b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D")
    return _record("matmul", None, (a, b), dk.array_module().matmul(a._value, b._value))


def reshape(x, *shape):
    """The same elements in a new shape (a view where the layout allows)."""
    x = _device(x)
    if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
        shape = tuple(shape[0])
    t = _record("reshape", None, (x,), x._value.reshape(shape), x.shape)
    t._version = x._version                      # (a view: one version, as torch's)
    return t


def transpose(x, *axes):
    """The axes permuted (reversed by default): a view."""
    x = _device(x)
    if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
        axes = tuple(axes[0]) if axes[0] is not None else ()
    axes = tuple(a % x.ndim for a in axes) if axes else tuple(range(x.ndim))[::-1]
    t = _record("transpose", None, (x,), x._value.transpose(axes), axes)
    t._version = x._version
    return t


def where(condition, x, y):
    """x where condition holds, else y (the gradient goes to the chosen one)."""
    c = _operand(condition)
    if isinstance(c, DeviceTensor) and c.dtype.kind != "b":
        c = _elementwise("not_equal", c, 0)
    args = (c, _operand(x), _operand(y))
    xp = dk.array_module()
    z = xp.where(*(_value(a) for a in args))
    if not hasattr(z, "dtype") or np.dtype(z.dtype).kind != "f":
        return _new(xp.asarray(z))
    return _record("ew", WHERE, args, z)


def astype(x, dtype):
    """A copy in another dtype (float64 <-> float32 differentiable)."""
    x = _device(x)
    z = x._value.astype(dtype)
    if np.dtype(dtype).kind != "f":
        return _new(z)
    return _record("cast", None, (x,), z, x.dtype)


def _index(key):
    """An index with its arrays on the device (host index arrays are copied there)."""
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    if isinstance(key, DeviceTensor):
        return key._value
    if isinstance(key, Tensor):
        key = key.detach().numpy()
    if isinstance(key, (np.ndarray, list)):
        return dk.to_device(np.asarray(key))
    return key


def _is_basic(key):
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (slice, numbers.Integral))
               for k in keys)


def _picks_repeatedly(key):
    """Whether an index may pick one element twice (an integer array in it)."""
    keys = key if isinstance(key, tuple) else (key,)
    return any(hasattr(k, "dtype") and np.dtype(k.dtype).kind in "iu" for k in keys)


def getitem(x, key):
    """numpy's indexing: basic (a view), integer arrays and masks (a copy)."""
    x = _device(x)
    key = _index(key)
    t = _record("index", None, (x,), x._value[key], (key, x.shape))
    if _is_basic(key):
        t._version = x._version
    return t


def setitem(x, key, value):
    """``x[key] = value`` in place, on a tensor no recorded op needs to differentiate."""
    if x._requires_grad or (isinstance(value, DeviceTensor) and value._requires_grad):
        if x._row is None and x._requires_grad:
            raise RuntimeError(LEAF_INPLACE_MSG)
        raise RuntimeError("autotape: assignment into a device tensor that requires grad, "
                           "or of one, is not supported (build the value with where or "
                           "concatenation instead)")
    x._value[_index(key)] = _value(_operand(value))
    x._version[0] += 1


# ---- linear algebra (cuSOLVER through CuPy) ---------------------------------------------------
#
# Each entry: the VJP of one numpy.linalg function, given its operands' values ``a``
# (and ``b``), its value ``z`` and the gradient ``g`` of z; as ops/linalg.py's, batched
# over leading axes.

def _mT(m):
    return dk.array_module().swapaxes(m, -1, -2)


def _solve_vjp(a, b, z, g):
    xp = dk.array_module()
    vector = b.ndim == 1
    gb = xp.linalg.solve(_mT(a), g[..., None] if vector else g)
    ga = -(gb @ _mT(z[..., None] if vector else z))
    return ga, (gb[..., 0] if vector else gb)


def _cholesky_vjp(a, z, g):
    """phi(L^T G) with L^-T on the left and L^-1 on the right (phi: the lower triangle,
    its diagonal halved), symmetrised, then on the lower triangle only: numpy's
    cholesky reads nothing else (the CPU's rule, ops/linalg.py)."""
    xp = dk.array_module()
    p = xp.tril(_mT(z) @ g)
    n = z.shape[-1]
    p[..., xp.arange(n), xp.arange(n)] *= 0.5
    inv_l = xp.linalg.inv(z)
    s = _mT(inv_l) @ p @ inv_l
    s = 0.5 * (s + _mT(s))
    return (xp.tril(s) + xp.tril(s, -1),)


LINALG_VJPS = {
    "inv": lambda a, z, g: (-(_mT(z) @ g @ _mT(z)),),
    "solve": _solve_vjp,
    "det": lambda a, z, g: ((g * z)[..., None, None] * _mT(dk.array_module().linalg.inv(a)),),
    "slogdet": lambda a, z, g: (g[..., None, None] * _mT(dk.array_module().linalg.inv(a)),),
    "cholesky": _cholesky_vjp,
}


def _square(a, name):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.{name}: A must be batches of square matrices, but they "
                           f"are {' by '.join(map(str, a.shape[-2:]))} matrices")


def _linalg(name, *operands):
    args = tuple(_device(v) for v in operands)
    _square(args[0], name)
    fn = getattr(dk.array_module().linalg, name)
    if name == "slogdet":
        sign, logabs = fn(args[0]._value)
        return SlogdetResult(_new(sign), _record("linalg", name, args, logabs))
    return _record("linalg", name, args, fn(*(a._value for a in args)))


def solve(a, b):
    """numpy.linalg.solve on the device: x with a @ x = b (b a vector when 1-D)."""
    a, b = _device(a), _device(b)
    if b.ndim != 1 and b.ndim != a.ndim:
        raise RuntimeError("linalg.solve: b must be a vector (1-D) or have a's number of "
                           f"axes; got a {a.shape} and b {b.shape}")
    return _linalg("solve", a, b)


LINALG = {f"linalg.{name}": (lambda name: lambda a: _linalg(name, a))(name)
          for name in ("inv", "det", "slogdet", "cholesky")}
LINALG["linalg.solve"] = solve


# ---- the reverse sweep ----------------------------------------------------------------------

def _collect(outputs):
    """The recorded tensors the outputs depend on, newest first."""
    order, seen, stack = [], set(), [t for t in outputs if t._row is not None]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        row = t._row
        if row.inputs is None:
            raise RuntimeError(RELEASED_MSG)
        for v, then in zip(row.inputs, row.versions):
            if isinstance(v, DeviceTensor):
                if v._version[0] != then:
                    raise RuntimeError(INPLACE_MSG.format(shape=list(v.shape),
                                                          now=v._version[0], then=then))
                if v._requires_grad and v._row is not None:
                    stack.append(v)
        order.append(t)
    order.sort(key=lambda t: t._row.seq, reverse=True)
    return order


class _Sweep:
    """One reverse sweep: adjoints by tensor id (an array of the tensor's shape, or a
    number or 0-d array meaning that number everywhere), the final adjoints of the tensors asked for
    (``keep``) and of the leaves, and the host tensors' gradients."""

    def __init__(self, keep):
        self.xp = dk.array_module()
        self.adj, self.owner, self.keep = {}, {}, keep
        self.found, self.host = {}, []

    def add(self, t, g):
        if hasattr(g, "dtype") and g.dtype != t.dtype:
            g = g.astype(t.dtype)
        old = self.adj.get(id(t))
        self.adj[id(t)] = g if old is None else old + g
        self.owner[id(t)] = t

    def take(self, t):
        g = self.adj.pop(id(t), None)
        if g is not None and (id(t) in self.keep or t._retains_grad):
            self.found[id(t)] = (t, g)
        return g

    def run(self, order):
        k = 0
        while k < len(order):
            t = order[k]
            if t._row.kind != "ew":
                g = self.take(t)
                if g is not None:
                    self.row(t, g)
                k += 1
                continue
            j = k + 1
            while j < len(order) and order[j]._row.kind == "ew" and \
                    order[j].shape == t.shape:
                j += 1
            self.elementwise(order[k:j])
            k = j
        for key, g in self.adj.items():          # (what is left: leaves)
            self.found[key] = (self.owner[key], g)

    def elementwise(self, run):
        """A run of elementwise rows of one shape, swept by one kernel."""
        xp, shape = self.xp, run[0].shape
        n = math.prod(shape)
        position, values, args = {}, [], []

        def at(v):
            if isinstance(v, DeviceTensor) and id(v) in position:
                return position[id(v)]
            how, a = _kernel_operand(v._value if isinstance(v, DeviceTensor) else v,
                                     shape, n)
            values.append(how)
            args.append(a)
            if isinstance(v, DeviceTensor):
                position[id(v)] = len(values) - 1
            return len(values) - 1
        steps = tuple((t._row.op, at(t), tuple(at(v) for v in t._row.inputs)) for t in run)
        inside = {id(t) for t in run}
        seeds, seed_args = [], []
        for t in run:
            g = self.adj.pop(id(t), None)
            if g is not None:
                how, a = _kernel_operand(g, shape, n)
                seeds.append((position[id(t)], how))
                seed_args.append(a)
        outs, out_arrays, targets = [], [], []
        for t in run:
            for v in t._row.inputs:
                if isinstance(v, DeviceTensor) and v._requires_grad and \
                        id(v) not in inside and position[id(v)] not in outs:
                    outs.append(position[id(v)])
                    targets.append(v)
            if id(t) in self.keep or t._retains_grad:
                outs.append(position[id(t)])
                targets.append(t)
        for v in targets:
            out = xp.empty(shape, v.dtype)
            out_arrays.append(out)
        if n and seeds:
            kernel, read = dk.reverse_run(steps, tuple(values), tuple(seeds), tuple(outs))
            dk.launch(kernel, n, [args[k] for k in read] + seed_args
                      + [o.reshape(-1) for o in out_arrays])
        elif out_arrays:
            for o in out_arrays:
                o.fill(0)
        for v, g in zip(targets, out_arrays):
            if id(v) in inside:
                self.found[id(v)] = (v, g)
            else:
                self.add(v, _sum_to(g, v.shape))

    def row(self, t, g):
        """The VJP of one row that is not elementwise."""
        xp, row = self.xp, t._row
        kind, params = row.kind, row.params
        x = row.inputs[0]
        if not hasattr(g, "ndim") and kind in ("host", "matmul", "linalg", "concat",
                                                "extreme"):
            g = xp.full((), g, t.dtype)
        if kind == "host":
            self.host.append((x, dk.to_host(_full(g, t.shape))))
            return
        if kind == "concat":
            axis, sizes = params
            g = _full(g, t.shape, t.dtype)
            start = 0
            for v, size in zip(row.inputs, sizes):
                if v._requires_grad:
                    self.add(v, g[(slice(None),) * axis + (slice(start, start + size),)])
                start += size
            return
        if kind == "linalg":
            grads = LINALG_VJPS[row.op](*(v._value for v in row.inputs), row.z,
                                        _full(g, t.shape, t.dtype))
            for v, gv in zip(row.inputs, grads):
                if v._requires_grad:
                    self.add(v, _sum_to(gv, v.shape))
            return
        if kind == "matmul":
            a, b = row.inputs
            ga, gb = _matmul_vjp(a._value, b._value, _full(g, t.shape),
                                 a._requires_grad, b._requires_grad)
            if ga is not None:
                self.add(a, ga)
            if gb is not None:
                self.add(b, gb)
            return
        if not x._requires_grad:
            return
        if not hasattr(g, "ndim"):                # (a number everywhere stays one)
            if kind in ("sum", "reshape", "transpose", "cast"):
                self.add(x, g)
                return
            g = xp.full((), g, t.dtype)
        if kind == "sum":
            axes, keepdims, in_shape = params
            if g.ndim and in_shape:
                if not keepdims:
                    g = xp.expand_dims(g, axes)
                g = xp.ascontiguousarray(xp.broadcast_to(g, in_shape))
            elif not in_shape:
                g = g.reshape(())
        elif kind == "extreme":
            axes, keepdims, in_shape = params
            z = row.z
            if in_shape and not keepdims:
                z, g = xp.expand_dims(z, axes), xp.expand_dims(g, axes) if g.ndim else g
            hit = (x._value == z).astype(x.dtype) if in_shape else xp.ones((), x.dtype)
            ties = hit.sum(axis=axes or None, keepdims=True) if in_shape else hit
            g = xp.ascontiguousarray(hit * (g / ties))
        elif kind == "reshape":
            g = g.reshape(params) if g.ndim else g
        elif kind == "transpose":
            g = g.transpose(tuple(np.argsort(params))) if g.ndim else g
        elif kind == "cast":
            g = g.astype(params)
        elif kind == "index":
            key, in_shape = params
            out = xp.zeros(in_shape, x.dtype)
            if _picks_repeatedly(key):
                _scatter_add(out, key, _full(g, t.shape))
            else:                                 # (slices, masks: each element once)
                out[key] = _full(g, t.shape)
            g = out
        self.add(x, g)


def _full(g, shape, dtype=np.float64):
    """An adjoint as an array of ``shape`` (a number or a 0-d array: that everywhere)."""
    xp = dk.array_module()
    if not hasattr(g, "shape"):
        return xp.full(shape, g, dtype)
    if tuple(g.shape) == tuple(shape):
        return g
    return xp.ascontiguousarray(xp.broadcast_to(g.reshape(()) if g.size == 1 else g, shape))


def _sum_to(g, shape):
    """g summed over the axes broadcasting added or stretched, to ``shape``."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if s == 1 and g.shape[lead + i] != 1)
    return (g.sum(axis=axes) if axes else g).reshape(shape)


def _matmul_vjp(a, b, g, want_a, want_b):
    xp = dk.array_module()
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = xp.expand_dims(g2, -2)
    if b.ndim == 1:
        g2 = xp.expand_dims(g2, -1)
    ga = _sum_to(xp.matmul(g2, xp.swapaxes(b2, -1, -2)), a2.shape).reshape(a.shape) \
        if want_a else None
    gb = _sum_to(xp.matmul(xp.swapaxes(a2, -1, -2), g2), b2.shape).reshape(b.shape) \
        if want_b else None
    return ga, gb


def _scatter_add(out, key, g):
    xp = dk.array_module()
    if hasattr(xp.add, "at"):
        xp.add.at(out, key, g)
    else:                                         # (CuPy before ufunc.at)
        importlib.import_module("cupyx").scatter_add(out, key, g)


def _release(order):
    for t in order:
        t._row.inputs = t._row.z = None


def _outputs(tensors):
    tensors = (tensors,) if isinstance(tensors, (DeviceTensor, Tensor)) else tuple(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, DeviceTensor):
            raise RuntimeError(MIXED_DEVICES_MSG if isinstance(t, Tensor) else
                               f"outputs must be Tensors, but element {i} is "
                               f"{type(t).__name__}")
        if not t._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               "have a grad_fn")
    return tensors


def _seeds(outputs, grads):
    grads = (None,) * len(outputs) if grads is None else (
        (grads,) if isinstance(grads, (DeviceTensor, Tensor)) else tuple(grads))
    if len(grads) < len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grads)} gradients")
    seeds = []
    for i, (t, g) in enumerate(zip(outputs, grads)):
        if g is None:
            if t.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            seeds.append(1.0)                    # (a number: no allocation, no launch)
        elif isinstance(g, DeviceTensor):
            if g.shape != t.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                                   f"{g.shape} and output[{i}] has a shape of {t.shape}.")
            seeds.append(g._value)
        elif isinstance(g, Tensor):
            raise RuntimeError(f"invalid gradient at index {i} - expected device cuda:0 but "
                               "got cpu")
        else:
            raise TypeError(f"gradients can be either Tensors or None, but got "
                            f"{type(g).__name__}")
    return seeds


def _sweep(outputs, seeds, keep, retain):
    order = _collect(outputs)
    sweep = _Sweep(keep)
    for t, g in zip(outputs, seeds):
        sweep.add(t, g)
    sweep.run(order)
    if not retain:
        _release(order)
    return sweep


class _Handout:
    """Gradients handed to users as their own arrays: a sweep's array is handed out once
    and only if nothing else views it; otherwise a copy."""

    def __init__(self):
        self.given = set()

    def __call__(self, g, t):
        g = _full(g, t.shape, t.dtype)
        if g.base is not None or id(g) in self.given:
            g = g.copy()
        self.given.add(id(g))
        return g


def _accumulate(t, g):
    if t._grad is None:
        t._grad = _new(g)
    else:
        dk.array_module().add(t._grad._value, g, out=t._grad._value)
        t._grad._version[0] += 1


def _host_grads(pairs, inputs, retain):
    """The gradients of host ``inputs`` through the host tensors moved to the device."""
    if not pairs or not inputs:
        return [None] * len(inputs)
    sources = [s for s, _ in pairs]
    grads = [host_tensor(g) for _, g in pairs]
    return list(host_grad(sources, inputs, grads, retain_graph=retain, allow_unused=True))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """``at.grad`` with device outputs (torch's rules; see engine.grad)."""
    if create_graph:
        raise RuntimeError(CREATE_GRAPH_MSG)
    outputs = _outputs(outputs)
    keys = None
    if isinstance(inputs, dict):
        keys, inputs = list(inputs), tuple(inputs.values())
    inputs = (inputs,) if isinstance(inputs, (DeviceTensor, Tensor)) else tuple(inputs)
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    allow_unused = materialize_grads if allow_unused is None else allow_unused
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    for t in inputs:
        if not isinstance(t, (DeviceTensor, Tensor)):
            raise RuntimeError("all inputs have to be Tensors or GradientEdges, but got "
                               f"{type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    retain = bool(retain_graph)
    if is_grads_batched:
        return _batched(outputs, inputs, grad_outputs, retain, allow_unused,
                        materialize_grads, keys)
    seeds = _seeds(outputs, grad_outputs)
    sweep = _sweep(outputs, seeds, {id(t) for t in inputs}, retain)
    handout = _Handout()
    for t, g in sweep.found.values():
        if t._retains_grad:
            _accumulate(t, handout(g, t))
    on_host = [t for t in inputs if isinstance(t, Tensor)]
    host = dict(zip(map(id, on_host), _host_grads(sweep.host, on_host, retain)))
    result = []
    for k, t in enumerate(inputs):
        if isinstance(t, Tensor):
            g = host[id(t)]
        else:
            found = sweep.found.get(id(t))
            g = None if found is None else _new(handout(found[1], t))
        if g is None:
            if not allow_unused:
                raise RuntimeError(UNUSED_MSG.format(k))
            if materialize_grads:
                g = host_tensor(np.zeros(t.shape, t.dtype)) if isinstance(t, Tensor) \
                    else _new(dk.array_module().zeros(t.shape, t.dtype))
        result.append(g)
    return dict(zip(keys, result)) if keys is not None else tuple(result)


def _batched(outputs, inputs, grad_outputs, retain, allow_unused, materialize, keys):
    """is_grads_batched: one sweep per cotangent (each grad_output's first axis)."""
    given = (grad_outputs,) if isinstance(grad_outputs, DeviceTensor) else tuple(grad_outputs)
    lanes = given[0].shape[0]
    per_lane = [grad(outputs, inputs, tuple(g[k] for g in given), retain or k < lanes - 1,
                     False, True, False, materialize) for k in range(lanes)]
    xp, result = dk.array_module(), []
    for j, t in enumerate(inputs):
        column = [lane[j] for lane in per_lane]
        if any(g is None for g in column):
            if not allow_unused:
                raise RuntimeError(UNUSED_MSG.format(j))
            result.append(None)
        elif isinstance(t, Tensor):
            result.append(host_tensor(np.stack([g.numpy() for g in column])))
        else:
            result.append(_new(xp.stack([g._value for g in column])))
    return dict(zip(keys, result)) if keys is not None else tuple(result)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             inputs=None):
    """``at.backward`` / ``t.backward()`` with device tensors (torch's rules)."""
    if create_graph:
        raise RuntimeError(CREATE_GRAPH_MSG)
    outputs = _outputs(tensors)
    if inputs is not None:
        inputs = (inputs,) if isinstance(inputs, (DeviceTensor, Tensor)) else tuple(
            inputs.values() if isinstance(inputs, dict) else inputs)
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
        for t in inputs:
            if not t.requires_grad:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
    retain = bool(retain_graph)
    seeds = _seeds(outputs, grad_tensors)
    keep = set() if inputs is None else {id(t) for t in inputs}
    sweep = _sweep(outputs, seeds, keep, retain)
    handout = _Handout()
    for t, g in sweep.found.values():
        if (inputs is None and t._row is None and t._requires_grad) or id(t) in keep or \
                t._retains_grad:
            _accumulate(t, handout(g, t))
    if sweep.host:
        sources = [s for s, _ in sweep.host]
        grads = [host_tensor(g) for _, g in sweep.host]
        on_host = None if inputs is None else [t for t in inputs if isinstance(t, Tensor)]
        if on_host is None or on_host:
            host_backward(sources, grads, retain_graph=retain, inputs=on_host)


# ---- operators, methods and numpy's protocols ---------------------------------------------

def _binary_method(name, reflected=False):
    if reflected:
        return lambda self, other: _elementwise(name, other, self)
    return lambda self, other: _elementwise(name, self, other)


def _array_ufunc(self, ufunc, method, *args, **kwargs):
    name = _ALIASES.get(ufunc.__name__, ufunc.__name__)
    if method != "__call__" or kwargs or name not in _BY_NAME:
        raise TypeError(f"autotape: numpy's {ufunc.__name__}"
                        + (f".{method}" if method != "__call__" else "")
                        + (f" with {', '.join(kwargs)}" if kwargs else "")
                        + " is not available for device tensors (docs/guide/gpu.md)")
    return _elementwise(name, *args)


def _array_function(self, func, types, args, kwargs):
    fn = FUNCTIONS.get(func.__name__)
    if fn is None:
        raise TypeError(f"autotape: numpy's {func.__name__} is not available for device "
                        "tensors (the ones that are: docs/guide/gpu.md); move them to the "
                        "CPU with .cpu() first")
    return fn(*args, **kwargs)


FUNCTIONS = {**{name: (lambda name: lambda *a: _elementwise(name, *a))(name)
                for name in list(_BY_NAME) + list(_ALIASES)},
             "sum": sum_, "mean": mean, "matmul": matmul, "reshape": reshape,
             "transpose": transpose, "where": where, "astype": astype,
             "max": amax, "min": amin, "amax": amax, "amin": amin,
             "concatenate": concatenate, "stack": stack,
             "iscomplexobj": lambda x: False, "isrealobj": lambda x: True,
             "shape": lambda x: x.shape, "ndim": lambda x: x.ndim}

for _name in _BY_NAME:
    if _name not in ("add", "subtract", "multiply", "divide", "power"):
        setattr(DeviceTensor, _name, (lambda name: lambda self: _elementwise(name, self))(
            _name) if _name in {op.name for op in unary_ops.values()}
            else _binary_method(_name))
for _dunder, _name in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                       ("truediv", "divide"), ("pow", "power"), ("mod", "mod")):
    setattr(DeviceTensor, f"__{_dunder}__", _binary_method(_name))
    setattr(DeviceTensor, f"__r{_dunder}__", _binary_method(_name, reflected=True))
for _dunder, _name in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"),
                       ("ge", "greater_equal"), ("eq", "equal"), ("ne", "not_equal")):
    setattr(DeviceTensor, f"__{_dunder}__", _binary_method(_name))
DeviceTensor.__neg__ = lambda self: _elementwise("negative", self)
DeviceTensor.__abs__ = lambda self: _elementwise("abs", self)
DeviceTensor.__pos__ = lambda self: self
DeviceTensor.__matmul__ = matmul
DeviceTensor.__rmatmul__ = lambda self, other: matmul(other, self)
DeviceTensor.__getitem__ = getitem
DeviceTensor.__setitem__ = setitem
DeviceTensor.__array_ufunc__ = _array_ufunc
DeviceTensor.__array_function__ = _array_function
DeviceTensor.sum = sum_
DeviceTensor.mean = mean
DeviceTensor.max = amax
DeviceTensor.min = amin
DeviceTensor.reshape = DeviceTensor.view = reshape
DeviceTensor.transpose = DeviceTensor.permute = transpose
DeviceTensor.astype = astype
DeviceTensor.flatten = lambda self: reshape(self, -1)
DeviceTensor.matmul = matmul
del _name, _dunder

DEVICE_FUNCTIONS.update(FUNCTIONS, **LINALG, tensor=to_device, to=_to, grad=grad,
                        backward=backward)
