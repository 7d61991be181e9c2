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
from .record import (_UNARY_FUNCTIONS, add, astype, broadcast_to, concatenate, divide, matmul,
                     maximum, mean, minimum, multiply, power, reshape, stack, subtract, sum,
                     transpose, where)
from .tensor import Tensor, as_tensor
from .ops import codes as _codes

__version__ = "0.1.0"
__all__ = [
    "Tensor", "tensor", "as_tensor", "zeros", "ones", "zeros_like", "ones_like", "full",
    "eye", "arange", "linspace",
    "grad", "backward", "gradcheck", "gradgradcheck", "GradcheckError", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "where",
    "negative", "abs", "exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sigmoid", "relu",
    "sum", "mean", "matmul", "reshape", "transpose", "astype", "broadcast_to", "stack", "concatenate",
]

negative = _UNARY_FUNCTIONS[_codes.NEG]
abs = _UNARY_FUNCTIONS[_codes.ABS]
exp = _UNARY_FUNCTIONS[_codes.EXP]
log = _UNARY_FUNCTIONS[_codes.LOG]
sqrt = _UNARY_FUNCTIONS[_codes.SQRT]
sin = _UNARY_FUNCTIONS[_codes.SIN]
cos = _UNARY_FUNCTIONS[_codes.COS]
tan = _UNARY_FUNCTIONS[_codes.TAN]
tanh = _UNARY_FUNCTIONS[_codes.TANH]
sigmoid = _UNARY_FUNCTIONS[_codes.SIGMOID]
relu = _UNARY_FUNCTIONS[_codes.RELU]
