"""autotape: reverse-mode automatic differentiation on a flat tape, with every sweep
compiled by numba. Semantics follow torch.autograd; the op namespace follows numpy.

>>> import autotape as at
>>> x = at.tensor([5.0, 3.0], requires_grad=True)
>>> y = at.sin(x) * x + x ** 2
>>> at.grad(y.sum(), x)
(tensor([ 9.62...,  5.15...]),)
"""
from .creation import arange, eye, full, linspace, ones, ones_like, tensor, zeros, zeros_like
from .engine import backward, grad
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .tensor import (Tensor, as_tensor, broadcast_to, concatenate, matmul, maximum, mean,
                     minimum, reshape, stack, sum, transpose, where)
from .tensor import (ABS as _ABS, COS as _COS, EXP as _EXP, LOG as _LOG, NEG as _NEG,
                     RELU as _RELU, SIGMOID as _SIGMOID, SIN as _SIN, SQRT as _SQRT,
                     TAN as _TAN, TANH as _TANH, _unary)

__version__ = "0.1.0"


def _elementwise(op, doc):
    def fn(x):
        return _unary(op, x)
    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = doc
    return fn


negative = _elementwise(_NEG, "-x.")
abs = _elementwise(_ABS, "|x|; the gradient at 0 is 0.")
exp = _elementwise(_EXP, "e**x.")
log = _elementwise(_LOG, "Natural logarithm.")
sqrt = _elementwise(_SQRT, "Square root; the gradient at 0 is inf.")
sin = _elementwise(_SIN, "Sine.")
cos = _elementwise(_COS, "Cosine.")
tan = _elementwise(_TAN, "Tangent.")
tanh = _elementwise(_TANH, "Hyperbolic tangent.")
sigmoid = _elementwise(_SIGMOID, "1 / (1 + e**-x), computed without overflow.")
relu = _elementwise(_RELU, "max(x, 0); the gradient at 0 is 0.")
