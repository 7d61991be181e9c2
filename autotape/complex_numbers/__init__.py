"""Complex numbers: ComplexTensor (tensor.py) and its ops (ops.py), wired in here.

Importing this package registers the complex implementations under numpy's names
(tensor.COMPLEX_FUNCTIONS: the public functions hand complex operands to them), makes
complex values pytree nodes with one real leaf, their parts (so ``at.func``,
``at.compile`` and ``vmap`` differentiate with respect to the parts: torch's
convention), and gives ComplexTensor its operators, methods and numpy's protocols.
"""
import functools

import numpy as np

from .. import pytree
from ..engine import backward as engine_backward
from ..tensor import COMPLEX_FUNCTIONS, Tensor, is_complex_data, new_leaf, read_from
from . import ops
from .linalg import FUNCTIONS as LINALG_FUNCTIONS
from .ops import as_complex, make_complex
from .tensor import REAL_OF, ComplexTensor, complex_view, real_view

__all__ = ["ComplexTensor", "complex", "view_as_real", "view_as_complex", "is_complex",
           "iscomplexobj", "isrealobj", "real", "imag", "conj", "conjugate", "angle"]


def complex(real, imag):
    """A complex tensor from its real and imaginary parts (torch.complex).

    >>> at.complex(at.tensor([1.0]), at.tensor([2.0]))
    tensor([1.+2.j])
    """
    return make_complex(real, imag)


def view_as_real(z):
    """The real tensor of shape ``z.shape + (2,)`` holding z's parts (torch's name).

    >>> at.view_as_real(at.tensor([1 + 2j]))
    tensor([[1., 2.]])
    """
    return as_complex(z).parts


def view_as_complex(t):
    """The complex tensor whose parts are t's last axis, of length 2 (torch's name).

    >>> at.view_as_complex(at.tensor([[1.0, 2.0]]))
    tensor([1.+2.j])
    """
    return ComplexTensor(t)


def is_complex(x):
    """Whether x holds complex numbers (torch.is_complex).

    >>> at.is_complex(at.tensor([1j])), at.is_complex(at.tensor([1.0]))
    (True, False)
    """
    return isinstance(x, ComplexTensor) or is_complex_data(x)


iscomplexobj = is_complex


def isrealobj(x):
    """numpy.isrealobj.

    >>> at.isrealobj(at.tensor([1.0]))
    True
    """
    return not is_complex(x)


real, imag, conj, angle = ops.real, ops.imag, ops.conj, ops.angle
conjugate = conj


# ---- making complex tensors -------------------------------------------------------------------

def _complex_tensor(data, dtype=None, requires_grad=False):
    """at.tensor of complex data (or with a complex dtype): a leaf holding a copy."""
    if isinstance(data, ComplexTensor):
        data = data.detach().numpy()
    c = np.array(data, dtype=dtype)                  # (the one copy)
    if c.dtype.kind != "c":
        c = c.astype(np.complex128 if dtype is None else dtype)
    if c.dtype not in REAL_OF:
        raise TypeError(f"autotape supports complex64 and complex128, not {c.dtype}")
    ri = real_view(c)
    leaf = new_leaf(ri, ri.shape, ri.dtype)
    read_from(data, leaf)
    leaf._requires_grad = bool(requires_grad)      # (its own fresh array: no copy)
    return ComplexTensor(leaf)


def _filled(fill):
    def make(*shape, dtype=None, requires_grad=False):
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return _complex_tensor(np.full(tuple(shape), fill, dtype), requires_grad=requires_grad)
    return make


def _like(fill):
    def make(a, dtype=None, requires_grad=False, **_):
        a = as_complex(a) if not hasattr(a, "shape") else a
        return _complex_tensor(np.full(a.shape, fill, dtype or np.complex128),
                               requires_grad=requires_grad)
    return make


# ---- numpy's names ----------------------------------------------------------------------------

def _backward(z, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients into ``.grad`` of the leaves; a complex output needs
    ``gradient`` (torch's rule): it weighs the output as Re(sum(conj(gradient) * z)).

    >>> z = at.tensor([1j], requires_grad=True)
    >>> (z * 2).backward(at.tensor([1.0 + 0j]))
    >>> z.grad
    tensor([2.+0.j])
    """
    if gradient is None:
        raise RuntimeError("grad can be implicitly created only for real scalar outputs")
    engine_backward(z, gradient, retain_graph, create_graph, inputs)


def _sum(z, axis=None, dtype=None, out=None, keepdims=False, **kw):
    """Sum over axes (numpy's ``axis`` / ``keepdims`` or torch's ``dim`` / ``keepdim``).

    >>> at.tensor([[1j, 2.0]]).sum(axis=1)
    tensor([2.+1.j])
    """
    _refuse_dtype_out("sum", dtype, out)
    return ops.csum(z, kw.get("dim", axis), keepdims or kw.get("keepdim", False))


def _mean(z, axis=None, dtype=None, out=None, keepdims=False, **kw):
    """Mean over axes.

    >>> at.tensor([[1j, 2.0]]).mean()
    tensor(1.+0.5j)
    """
    _refuse_dtype_out("mean", dtype, out)
    return ops.mean(z, kw.get("dim", axis), keepdims or kw.get("keepdim", False))


def _refuse_dtype_out(name, dtype, out):
    if dtype is not None or out is not None:
        raise TypeError(f"{name} of a complex tensor takes no dtype= or out=")


def _abs(z):
    """|z|, a real tensor.

    >>> abs(at.tensor([3 + 4j]))
    tensor([5.])
    """
    return ops.absolute(z)


def _astype(z, dtype):
    """A copy in another complex dtype; a real dtype is refused (it would drop the
    imaginary parts: take ``.real`` or ``abs()`` for that).

    >>> at.tensor([1j]).astype(np.complex64).dtype
    dtype('complex64')
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        z = as_complex(z)
        return ComplexTensor(z.parts.astype(REAL_OF[dtype])) if dtype in REAL_OF else z
    raise TypeError(f"casting a complex tensor to {dtype} would drop the imaginary "
                    "parts; take .real (or abs()) first")


def _zero_(z):
    """Set every number to 0 in place (a gradient: ``z.grad.zero_()``); returns z.

    >>> at.tensor([1j]).zero_()
    tensor([0.+0.j])
    """
    z.parts.zero_()
    return z


def _mT(z):
    """The last two axes swapped (torch's ``.mT``).

    >>> at.tensor([[1j, 2.0]]).mT.shape
    (2, 1)
    """
    return ops.SHAPING["swapaxes"](z, -1, -2)


def _clone(z):
    """A recorded copy.

    >>> at.tensor([1j]).clone()
    tensor([0.+1.j])
    """
    return ComplexTensor(z.parts * 1.0)


FUNCTIONS = {
    "add": ops.add, "subtract": ops.subtract, "multiply": ops.multiply,
    "divide": ops.divide, "true_divide": ops.divide, "power": ops.power,
    "negative": ops.negative, "positive": lambda z: z, "absolute": _abs, "abs": _abs,
    "conjugate": ops.conj, "conj": ops.conj, "real": ops.real, "imag": ops.imag,
    "angle": ops.angle, "equal": ops.equal, "not_equal": ops.not_equal,
    "sum": _sum, "mean": _mean, "cumsum": ops.cumsum, "reshape": ops.reshape,
    "prod": ops.prod, "max": ops.amax, "amax": ops.amax, "min": ops.amin, "amin": ops.amin,
    "sign": ops.sign,
    "var": ops.var, "std": ops.std, "real_if_close": ops.real_if_close,
    "transpose": ops.transpose, "concatenate": ops.concatenate, "cat": ops.concatenate,
    "stack": ops.stack, "broadcast_to": ops.broadcast_to, "where": ops.where,
    "matmul": ops.matmul, "einsum": ops.einsum, "vdot": ops.vdot,
    "tensor": _complex_tensor, "array": _complex_tensor, "asarray": _complex_tensor,
    "as_tensor": lambda data, dtype=None: as_complex(data),
    "zeros": _filled(0), "ones": _filled(1), "zeros_like": _like(0), "ones_like": _like(1),
    "astype": _astype, "getitem": ops.getitem, "setitem": ops.setitem,
    "iscomplexobj": is_complex, "isrealobj": isrealobj,
    **{name: getattr(ops, name) for name in ops.DERIVATIVES},
    **ops.SHAPING, **ops.PRODUCTS,
}
FUNCTIONS.update(LINALG_FUNCTIONS)
COMPLEX_FUNCTIONS.update(FUNCTIONS)


def _method(fn):
    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    return method


def _reflected(fn, name):
    def method(self, other):
        return fn(other, self)
    method.__name__ = name
    method.__doc__ = f"other {name[3:-2]} self (see {fn.__name__})."
    return method


METHODS = {
    "__add__": _method(ops.add), "__radd__": _reflected(ops.add, "__radd__"),
    "__sub__": _method(ops.subtract), "__rsub__": _reflected(ops.subtract, "__rsub__"),
    "__mul__": _method(ops.multiply), "__rmul__": _reflected(ops.multiply, "__rmul__"),
    "__truediv__": _method(ops.divide),
    "__rtruediv__": _reflected(ops.divide, "__rtruediv__"),
    "__pow__": _method(ops.power), "__rpow__": _reflected(ops.power, "__rpow__"),
    "__matmul__": _method(ops.matmul), "__rmatmul__": _reflected(ops.matmul, "__rmatmul__"),
    "__neg__": ops.negative, "__pos__": lambda self: self, "__abs__": _abs,
    "__eq__": _method(ops.equal), "__ne__": _method(ops.not_equal),
    "__getitem__": ops.getitem, "__setitem__": ops.setitem,
    "real": property(ops.real), "imag": property(ops.imag),
    "T": property(ops.transpose),
    "mT": property(_mT),
    "conj": ops.conj, "conjugate": ops.conj, "abs": _abs, "angle": ops.angle,
    "sum": _sum, "mean": _mean, "cumsum": ops.cumsum, "reshape": ops.reshape,
    "prod": ops.prod, "max": ops.amax, "min": ops.amin, "var": ops.var, "std": ops.std,
    "view": ops.reshape, "transpose": ops.transpose, "astype": _astype,
    "backward": _backward, "zero_": _zero_, "dot": ops.PRODUCTS["dot"],
    "flatten": ops.SHAPING["ravel"], "ravel": ops.SHAPING["ravel"],
    "squeeze": ops.SHAPING["squeeze"], "swapaxes": ops.SHAPING["swapaxes"],
    "diagonal": ops.SHAPING["diagonal"], "trace": ops.SHAPING["trace"],
    "clone": _clone, "copy": _clone,
    **{name: getattr(ops, name) for name in ops.DERIVATIVES},
}
for _name, _fn in METHODS.items():
    setattr(ComplexTensor, _name, _fn)
ComplexTensor.__hash__ = object.__hash__


# ---- pytrees: one real leaf, the parts ----------------------------------------------------------

def _parts_of(v):
    if isinstance(v, ComplexTensor):
        return [v.parts]
    return [real_view(np.asarray(v)).copy()]


def _rebuilt(parts):
    if isinstance(parts, (ComplexTensor, tuple, list, dict)):   # (a transform's result,
        return parts                                            # built already)
    if isinstance(parts, Tensor):
        return ComplexTensor(parts)
    return complex_view(np.asarray(parts)).copy()


pytree.register_node(is_complex, _parts_of, _rebuilt)
