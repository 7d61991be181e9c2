"""numpy on Tensors: np.sin(t), np.sum(t, axis=0), ndarray * t record on the tape.

Tensor implements numpy's ``__array_ufunc__`` and ``__array_function__`` protocols with
the two tables below. A numpy ufunc or function that is not in them raises a TypeError
naming it: numpy would otherwise turn the Tensor into an array and drop its gradient
without a word.
"""
import numpy as np

from . import linalg
from .functions import products, shaping, statistics
from .ops import elementwise, indexing, reduce
from .ops.elementwise import binary_functions, binary_ops, unary_functions, unary_ops
from .ops.linalg import matmul

# numpy ufunc name -> autotape function; the op table's names are numpy's, except these
_UFUNC_RENAMES = {"abs": "absolute", "mod": "remainder"}
UFUNCS = {_UFUNC_RENAMES.get(op.name, op.name): unary_functions[code]
          for code, op in unary_ops.items()}
UFUNCS.update({_UFUNC_RENAMES.get(op.name, op.name): binary_functions[code]
               for code, op in binary_ops.items()})
UFUNCS["matmul"] = matmul
for _name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"):
    UFUNCS[_name] = (lambda fn: lambda x, y: elementwise.compare(fn, indexing.as_tensor(x), y))(
        getattr(np, _name))


def _reduction(fn):
    def call(a, axis=None, dtype=None, out=None, keepdims=False):
        _refuse(fn.__name__, dtype=dtype, out=out)
        return fn(a, axis=axis, keepdims=keepdims)
    return call


def _round(a, decimals=0, out=None):
    _refuse("round", decimals=decimals, out=out)
    return elementwise.round(a)


def _dot(a, b, out=None):
    _refuse("dot", out=out)
    a, b = indexing.as_tensor(a), indexing.as_tensor(b)
    return a * b if a.ndim == 0 or b.ndim == 0 else matmul(a, b)


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
    return _plain_call("einsum", products.einsum, *operands, out=out, dtype=dtype,
                       order=None if order == "K" else order,
                       casting=None if casting == "safe" else casting)


FUNCTIONS = {
    np.sum: _reduction(reduce.sum),
    np.prod: _reduction(reduce.prod),
    np.cumsum: lambda a, axis=None, dtype=None, out=None: _plain_call(
        "cumsum", reduce.cumsum, a, axis, dtype=dtype, out=out),
    np.cumprod: lambda a, axis=None, dtype=None, out=None: _plain_call(
        "cumprod", reduce.cumprod, a, axis, dtype=dtype, out=out),
    np.mean: _reduction(reduce.mean),
    np.max: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "max", reduce.max, a, axis, keepdims, out=out),
    np.min: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "min", reduce.min, a, axis, keepdims, out=out),
    np.var: lambda a, axis=None, dtype=None, out=None, ddof=0, keepdims=False: _plain_call(
        "var", statistics.var, a, axis, ddof, keepdims, dtype=dtype, out=out),
    np.std: lambda a, axis=None, dtype=None, out=None, ddof=0, keepdims=False: _plain_call(
        "std", statistics.std, a, axis, ddof, keepdims, dtype=dtype, out=out),
    np.argmax: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "argmax", statistics.argmax, a, axis, keepdims, out=out),
    np.argmin: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "argmin", statistics.argmin, a, axis, keepdims, out=out),
    np.average: lambda a, axis=None, weights=None, returned=False, keepdims=False: (
        _plain_call("average", statistics.average, a, axis, weights, keepdims,
                    returned=returned or None)),
    np.amax: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "amax", reduce.max, a, axis, keepdims, out=out),
    np.amin: lambda a, axis=None, out=None, keepdims=False: _plain_call(
        "amin", reduce.min, a, axis, keepdims, out=out),
    np.trace: lambda a, offset=0, axis1=0, axis2=1, dtype=None, out=None: _plain_call(
        "trace", shaping.trace, a, offset, axis1, axis2, dtype=dtype, out=out),
    np.where: lambda condition, x, y: elementwise.where(condition, x, y),
    np.concatenate: lambda arrays, axis=0: indexing.concatenate(arrays, axis),
    np.stack: lambda arrays, axis=0: indexing.stack(arrays, axis),
    np.reshape: lambda a, shape: indexing.reshape(a, shape),
    np.transpose: lambda a, axes=None: indexing.transpose(a, axes),
    np.broadcast_to: lambda array, shape: indexing.broadcast_to(array, shape),
    np.clip: lambda a, a_min=None, a_max=None: elementwise.clip(a, a_min, a_max),
    np.round: _round,
    np.dot: _dot,
    np.einsum: _einsum,
    np.linalg.norm: lambda x, ord=None, axis=None, keepdims=False: statistics.norm(
        x, ord, axis, keepdims),
    **{getattr(np.linalg, name): getattr(linalg, name) for name in (
        "inv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh")},
    **{getattr(np, name): getattr(shaping, name) for name in shaping.__all__
       if hasattr(np, name) and name not in ("flatten", "trace")},
    **{getattr(np, name): getattr(products, name) for name in (
        "vdot", "outer", "tensordot", "inner")},
    np.shape: lambda a: indexing.as_tensor(a).shape,
    np.ndim: lambda a: indexing.as_tensor(a).ndim,
    np.size: lambda a: indexing.as_tensor(a).size,
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
