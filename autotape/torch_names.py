"""torch's module-level spellings of what autotape has under numpy's names or as Tensor
methods: ``at.mul`` is ``at.multiply``, ``at.narrow(x, ...)`` is ``x.narrow(...)``.
Aliases only: every op stays defined once, in the op table (ops/) or tensor_methods.py.

>>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> at.mul(x, 2.0)
tensor([2., 4., 6.], grad_fn=<MultiplyBackward>)
"""
from . import linalg, tensor_methods  # noqa: F401  (the methods exist to be aliased)
from .creation import zeros, zeros_like
from .ops import elementwise
from .ops.linalg import matmul
from .tensor import Tensor


def is_tensor(obj):
    """Whether obj is an autotape Tensor (torch.is_tensor).

    >>> at.is_tensor(at.zeros(2)), at.is_tensor([0.0])
    (True, False)
    """
    return isinstance(obj, Tensor)


def is_floating_point(t):
    """Whether t's dtype is a floating-point one (torch.is_floating_point).

    >>> at.is_floating_point(at.zeros(2)), at.is_floating_point(at.arange(3))
    (True, False)
    """
    return t.dtype.kind == "f"


def rsqrt(x):
    """1 / sqrt(x) (torch.rsqrt).

    >>> at.rsqrt(at.tensor([4.0]))
    tensor([0.5])
    """
    return elementwise.reciprocal(elementwise.sqrt(x))


def empty(*shape, dtype=None, requires_grad=False):
    """torch.empty: a new tensor of ``shape``; autotape's are zeros, never uninitialised.

    >>> at.empty(2)
    tensor([0., 0.])
    """
    return zeros(*shape, dtype=dtype, requires_grad=requires_grad)


def empty_like(t, dtype=None, requires_grad=False):
    """torch.empty_like: zeros of t's shape and dtype (never uninitialised).

    >>> at.empty_like(at.ones(2))
    tensor([0., 0.])
    """
    return zeros_like(t, dtype=dtype, requires_grad=requires_grad)


# the op table's functions under torch's names
ALIASES = {
    "mul": elementwise.multiply, "sub": elementwise.subtract, "div": elementwise.divide,
    "true_divide": elementwise.divide, "neg": elementwise.negative,
    "remainder": elementwise.mod, "atan2": elementwise.arctan2,
    "asin": elementwise.arcsin, "acos": elementwise.arccos, "atan": elementwise.arctan,
    "asinh": elementwise.arcsinh, "acosh": elementwise.arccosh,
    "atanh": elementwise.arctanh,
    "eq": elementwise.equal, "ne": elementwise.not_equal, "lt": elementwise.less,
    "le": elementwise.less_equal, "gt": elementwise.greater, "ge": elementwise.greater_equal,
    "mm": matmul, "bmm": matmul, "mv": matmul, "det": linalg.det, "inverse": linalg.inv,
}

# the aliases above that take out= (as the functions they name)
WITH_OUT = ("mul", "sub", "div", "true_divide", "neg", "remainder", "atan2", "asin", "acos",
            "atan", "asinh", "acosh", "atanh", "eq", "ne", "lt", "le", "gt", "ge", "mm", "bmm",
            "mv", "clamp", "rsqrt")

# Tensor methods as functions of the tensor (torch.narrow(x, 0, 1, 2) is x.narrow(0, 1, 2))
METHODS_AS_FUNCTIONS = ("clamp", "narrow", "chunk", "unbind", "t", "permute", "masked_fill",
                        "index_select", "numel", "clone", "detach")

__all__ = ["is_tensor", "is_floating_point", "rsqrt", "empty", "empty_like",
           *ALIASES, *METHODS_AS_FUNCTIONS]
globals().update(ALIASES)
globals().update({name: getattr(Tensor, name) for name in METHODS_AS_FUNCTIONS})
