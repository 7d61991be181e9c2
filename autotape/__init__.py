"""autotape: reverse-mode automatic differentiation on a flat tape, with every sweep
compiled by numba. Semantics follow torch.autograd; the op namespace follows numpy.

>>> import autotape as at
>>> x = at.tensor([5.0, 3.0], requires_grad=True)
>>> y = at.sin(x) * x + x ** 2
>>> at.grad(y.sum(), x)
(tensor([10.45938665,  3.17114252]),)
"""
from .creation import arange, eye, full, linspace, ones, ones_like, tensor, zeros, zeros_like
from .engine import backward, grad
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .ops.elementwise import binary_ops as _binary_ops, unary_ops as _unary_ops
from .composite import *  # noqa: F401,F403  (composed functions: composite.__all__)
from . import composite as _composite
from .record import (_BINARY_FUNCTIONS, _UNARY_FUNCTIONS, amax, amin, astype, broadcast_to,
                     clip, concatenate, cumprod, cumsum, matmul, max, mean, min, prod, reshape, stack,
                     sum, transpose, where)
from .tensor import Tensor, as_tensor
from . import func, linalg
from .compile import Compiled, compile

__version__ = "0.1.0"

# every elementwise op of the table, under its numpy name: at.sin, at.arctan2, ...
for _op in _unary_ops.values():
    globals()[_op.name] = _UNARY_FUNCTIONS[_op.code]
for _op in _binary_ops.values():
    globals()[_op.name] = _BINARY_FUNCTIONS[_op.code]

__all__ = [
    "Tensor", "tensor", "as_tensor", "zeros", "ones", "zeros_like", "ones_like", "full",
    "eye", "arange", "linspace",
    "grad", "backward", "gradcheck", "gradgradcheck", "GradcheckError", "no_grad",
    "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "where", "clip", "sum", "mean", "max", "min", "amax", "amin", "prod", "cumsum", "cumprod",
    "matmul", "reshape", "transpose", "astype",
    "broadcast_to", "stack", "concatenate", "compile", "Compiled",
] + _composite.__all__ + [op.name for op in _unary_ops.values()] + [
    op.name for op in _binary_ops.values()]
