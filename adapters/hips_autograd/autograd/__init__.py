"""A thin stand-in for HIPS autograd's API on top of autotape, so that autograd's own
test suite runs against ``autotape.numpy`` (see ../README.md). Only what those tests
import is here: grad, value_and_grad, elementwise_grad, jacobian, hessian.

Complex numbers: autograd's grad of f at z = x + iy is u_x - i u_y for u = Re f
(its docs' convention: the complex derivative for a holomorphic f), autotape's the
gradient of a real loss, u_x + i u_y (torch's); grad here converts one into the other."""
import numpy as _onp

import autotape as _at
import autotape.func as _F
from autotape import ComplexTensor as _ComplexTensor, Tensor as _Tensor

builtin_tuple = tuple
tuple = builtin_tuple
list = list
dict = dict


def to_numpy(value):
    """Tensors that carry no graph become numpy values, as autograd returns them."""
    if isinstance(value, (_Tensor, _ComplexTensor)) and not value.requires_grad:
        a = value.numpy()
        return a[()] if a.ndim == 0 else a.copy()
    if isinstance(value, builtin_tuple) and not hasattr(value, "_fields"):
        return builtin_tuple(to_numpy(v) for v in value)
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return value


def _transform(op):
    def transform(fun, argnum=0, *a, **k):
        inner = op(fun, argnum, *a, **k)

        def call(*args, **kwargs):
            if kwargs:
                return to_numpy(op(lambda *xs: fun(*xs, **kwargs), argnum, *a, **k)(*args))
            return to_numpy(inner(*args))
        return call
    return transform


def _conj(tree):
    if isinstance(tree, (builtin_tuple, list)):
        return type(tree)(_conj(t) for t in tree)
    return _at.conj(tree) if isinstance(tree, _ComplexTensor) else tree


def _real_valued(fun):
    """fun's real part (autograd differentiates u = Re f)."""
    def real_fun(*args, **kwargs):
        out = fun(*args, **kwargs)
        return _at.real(out) if _at.is_complex(out) else out
    return real_fun


def _autograd_convention(op):
    def transformed(fun, argnum=0, *a, **k):
        inner = op(_real_valued(fun), argnum, *a, **k)

        def call(*args, **kwargs):
            result = inner(*args, **kwargs)
            if op is _F.value_and_grad:
                return result[0], _conj(result[1])
            return _conj(result)
        return call
    return transformed


grad = _transform(_autograd_convention(_F.grad))
value_and_grad = _transform(_autograd_convention(_F.value_and_grad))
jacobian = _transform(_F.jacrev)
hessian = _transform(_F.hessian)


def elementwise_grad(fun, argnum=0):
    """The gradient of sum(fun(...)): for elementwise fun, its elementwise derivative."""
    return grad(lambda *args, **kw: _at.sum(_at.as_tensor(fun(*args, **kw))), argnum)


def make_vjp(fun, x):
    out, vjp_fn = _F.vjp(fun, x)
    return (lambda v: to_numpy(vjp_fn(v)[0])), to_numpy(out)
