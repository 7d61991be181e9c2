"""numpy on Tensors: np.sin(t), np.sum(t, axis=0), ndarray * t record on the tape.

Tensor implements numpy's ``__array_ufunc__`` and ``__array_function__`` protocols with
the two tables below. A numpy ufunc or function that is not in them raises a TypeError
naming it: numpy would otherwise turn the Tensor into an array and drop its gradient
without a word.
"""
import numpy as np

from . import composite, linalg, record
from .ops.elementwise import binary_ops, unary_ops
from .record import _BINARY_FUNCTIONS, _UNARY_FUNCTIONS

# numpy ufunc name -> autotape function; the op table's names are numpy's, except these
_UFUNC_RENAMES = {"abs": "absolute", "mod": "remainder"}
UFUNCS = {_UFUNC_RENAMES.get(op.name, op.name): _UNARY_FUNCTIONS[code]
          for code, op in unary_ops.items()}
UFUNCS.update({_UFUNC_RENAMES.get(op.name, op.name): _BINARY_FUNCTIONS[code]
               for code, op in binary_ops.items()})
UFUNCS["matmul"] = record.matmul
for _name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"):
    UFUNCS[_name] = (lambda fn: lambda x, y: record._compare(fn, record.as_tensor(x), y))(
        getattr(np, _name))


def _reduction(fn):
    def call(a, axis=None, dtype=None, out=None, keepdims=False):
        _refuse(fn.__name__, dtype=dtype, out=out)
        return fn(a, axis=axis, keepdims=keepdims)
    return call


def _round(a, decimals=0, out=None):
    _refuse("round", decimals=decimals, out=out)
    return _UNARY_FUNCTIONS[[c for c, op in unary_ops.items() if op.name == "round"][0]](a)


def _dot(a, b, out=None):
    _refuse("dot", out=out)
    a, b = record.as_tensor(a), record.as_tensor(b)
    return a * b if a.ndim == 0 or b.ndim == 0 else record.matmul(a, b)


def _plain_call(name, fn, *args, **unsupported):
    _refuse(name, **unsupported)
    return fn(*args)


def _refuse(name, **given):
    """TypeError for arguments given a value autotape does not implement."""
    bad = [k for k, v in given.items() if v is not None and not (k == "decimals" and v == 0)]
    if bad:
        raise TypeError(f"autotape does not support the argument(s) {', '.join(bad)} of "
                        f"numpy.{name} on Tensors")


def _einsum(*operands, out=None, dtype=None, order="K", casting="safe", optimize=False):
    """np.einsum on Tensors (``optimize`` is a hint and is accepted with any value)."""
    return _plain_call("einsum", composite.einsum, *operands, out=out, dtype=dtype,
                       order=None if order == "K" else order,
                       casting=None if casting == "safe" else casting)


FUNCTIONS = {
    np.sum: _reduction(record.sum),
    np.prod: _reduction(record.prod),
    np.cumsum: lambda a, axis=None, dtype=None, out=None: _plain_call(
        "cumsum", record.cumsum, a, axis, dtype=dtype, out=out),
    np.cumprod: lambda a, axis=None, dtype=None, out=None: _plain_call(
        "cumprod", record.cumprod, a, axis, dtype=dtype, out=out),
    np.mean: _reduction(record.mean),
    np.max: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "max", record.max, a, axis, keepdims, out=out),
    np.min: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "min", record.min, a, axis, keepdims, out=out),
    np.var: lambda a, axis=None, dtype=None, out=None, ddof=0, keepdims=False: _plain_call(
        "var", composite.var, a, axis, ddof, keepdims, dtype=dtype, out=out),
    np.std: lambda a, axis=None, dtype=None, out=None, ddof=0, keepdims=False: _plain_call(
        "std", composite.std, a, axis, ddof, keepdims, dtype=dtype, out=out),
    np.argmax: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "argmax", composite.argmax, a, axis, keepdims, out=out),
    np.argmin: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "argmin", composite.argmin, a, axis, keepdims, out=out),
    np.average: lambda a, axis=None, weights=None, returned=False, keepdims=False: (
        _plain_call("average", composite.average, a, axis, weights, keepdims,
                    returned=returned or None)),
    np.amax: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "amax", record.max, a, axis, keepdims, out=out),
    np.amin: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "amin", record.min, a, axis, keepdims, out=out),
    np.trace: lambda a, offset=0, axis1=0, axis2=1, dtype=None, out=None: _plain_call(
        "trace", composite.trace, a, offset, axis1, axis2, dtype=dtype, out=out),
    np.where: lambda condition, x, y: record.where(condition, x, y),
    np.concatenate: lambda arrays, axis=0: record.concatenate(arrays, axis),
    np.stack: lambda arrays, axis=0: record.stack(arrays, axis),
    np.reshape: lambda a, shape: record.reshape(a, shape),
    np.transpose: lambda a, axes=None: record.transpose(a, axes),
    np.broadcast_to: lambda array, shape: record.broadcast_to(array, shape),
    np.clip: lambda a, a_min=None, a_max=None: record.clip(a, a_min, a_max),
    np.round: _round,
    np.dot: _dot,
    np.einsum: _einsum,
    np.linalg.norm: lambda x, ord=None, axis=None, keepdims=False: composite.norm(
        x, ord, axis, keepdims),
    **{getattr(np.linalg, name): getattr(linalg, name) for name in (
        "inv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh")},
    **{getattr(np, name): getattr(composite, name) for name in (
        "expand_dims", "squeeze", "ravel", "swapaxes", "moveaxis", "flip", "split", "roll",
        "tile", "repeat", "pad", "triu", "tril", "vdot", "outer", "tensordot", "inner",
        "diagonal", "take", "take_along_axis")},
    np.shape: lambda a: record.as_tensor(a).shape,
    np.ndim: lambda a: record.as_tensor(a).ndim,
    np.size: lambda a: record.as_tensor(a).size,
}


def array_ufunc(ufunc, method, inputs, kwargs):
    if method != "__call__":
        raise TypeError(f"autotape does not support numpy.{ufunc.__name__}.{method} on "
                        "Tensors")
    fn = UFUNCS.get(ufunc.__name__)
    if fn is None:
        raise TypeError(f"autotape does not support numpy.{ufunc.__name__} on Tensors")
    if kwargs:
        raise TypeError(f"autotape does not support the argument(s) "
                        f"{', '.join(sorted(kwargs))} of numpy.{ufunc.__name__} on Tensors")
    return fn(*inputs)


def array_function(func, args, kwargs):
    fn = FUNCTIONS.get(func)
    if fn is None:
        raise TypeError(f"autotape does not support numpy.{func.__name__} on Tensors")
    return fn(*args, **kwargs)
