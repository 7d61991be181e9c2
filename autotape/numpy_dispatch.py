"""numpy on Tensors: np.sin(t), np.sum(t, axis=0), ndarray * t record on the tape.

Tensor implements numpy's ``__array_ufunc__`` and ``__array_function__`` protocols with
the tables below (and the ufunc methods reduce, accumulate and outer). A numpy function
that is not in them runs on plain arrays when no argument requires grad (its result is
plain numpy: a gradient works with np.allclose, scipy, ...), and raises a TypeError
naming it when one does: numpy would otherwise turn the Tensor into an array and drop
its gradient without a word. Predicates (isfinite, isnan, isinf, isclose, allclose,
array_equal) return plain numpy results.
"""
import numpy as np

from . import complex_numbers, fft, linalg
from .complex_numbers import ops as complex_ops
from .creation import full
from .functions import calculus, mathfuncs, products, shaping, stacking, statistics
from .guards import observe
from .ops import elementwise, indexing, reduce
from .ops.subscript import write_out
from .complex_numbers import ComplexTensor
from .tensor import COMPLEX_FUNCTIONS, REQUIRES_GRAD_NUMPY_MSG, ComplexOperand, Tensor, array_of, complex_call
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
UFUNCS.update({name: getattr(mathfuncs, name) for name in (
    "fabs", "fmax", "fmin", "logaddexp2", "deg2rad", "rad2deg", "degrees", "radians")})
PREDICATES = {np.isfinite, np.isnan, np.isinf, np.signbit, np.isclose, np.allclose,
              np.array_equal, np.array_equiv, np.isin}


def _reduction(fn):
    def call(a, axis=None, dtype=None, out=None, keepdims=False):
        _refuse(fn.__name__, dtype=dtype)
        return _into(fn.__name__, fn(a, axis=axis, keepdims=keepdims), out)
    return call


def _into(name, result, out):
    """numpy's ``out=``: the result written into a Tensor (write_out: torch's rules) or
    into a numpy array (refused where the result requires grad: the gradient would be
    lost there). ``out`` may be numpy's 1-tuple."""
    if type(out) is tuple:
        if len(out) != 1:
            raise TypeError(f"numpy.{name} on Tensors takes one out=, not {len(out)}")
        out = out[0]
    if out is None:
        return result
    if isinstance(out, Tensor):
        return write_out(name, result, out)
    if isinstance(result, Tensor) and result.requires_grad:
        raise RuntimeError(REQUIRES_GRAD_NUMPY_MSG)
    out[...] = array_of(result) if isinstance(result, Tensor) else result
    return out


def _round(a, decimals=0, out=None):
    _refuse("round", decimals=decimals, out=out)
    return elementwise.round(a)


def _dot(a, b, out=None):
    _refuse("dot", out=out)
    a, b = indexing.as_tensor(a), indexing.as_tensor(b)
    return a * b if a.ndim == 0 or b.ndim == 0 else matmul(a, b)


def _like(fill):
    def like(a, dtype=None, order="K", subok=True, shape=None):
        a = indexing.as_tensor(a)
        return full(a.shape if shape is None else shape, fill, dtype=dtype or a.dtype)
    return like


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
    np.median: lambda a, axis=None, out=None, overwrite_input=False, keepdims=False: (
        _plain_call("median", statistics.median, a, axis, keepdims, out=out)),
    np.nanmedian: lambda a, axis=None, out=None, overwrite_input=False, keepdims=False: (
        _plain_call("nanmedian", statistics.nanmedian, a, axis, keepdims, out=out)),
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
        "inv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "svd", "qr",
        "pinv", "lstsq", "matrix_power", "eig", "eigvals")},
    **{getattr(np, name): getattr(shaping, name) for name in shaping.__all__
       if hasattr(np, name) and name not in ("flatten", "trace")},
    **{getattr(np, name): getattr(products, name) for name in (
        "vdot", "outer", "tensordot", "inner")},
    **{getattr(np, name): getattr(module, name) for module in (stacking, calculus, mathfuncs)
       for name in module.__all__ if hasattr(np, name)},
    np.zeros_like: _like(0), np.empty_like: _like(0), np.ones_like: _like(1),
    np.full_like: lambda a, fill_value, dtype=None, order="K", subok=True, shape=None: (
        _like(fill_value)(a, dtype, shape=shape)),
    np.copy: lambda a, order="K", subok=False: indexing.as_tensor(a).copy(),
    np.shape: lambda a: indexing.as_tensor(a).shape,
    np.ndim: lambda a: indexing.as_tensor(a).ndim,
    np.size: lambda a: indexing.as_tensor(a).size,
}
FUNCTIONS.update(fft.FUNCTIONS)
FUNCTIONS.update({np.real: complex_ops.real, np.imag: complex_ops.imag,
                  np.angle: complex_ops.angle, np.real_if_close: complex_ops.real_if_close, np.iscomplexobj: complex_numbers.is_complex,
                  np.isrealobj: complex_numbers.isrealobj})


def array_ufunc(ufunc, method, inputs, kwargs):
    name = ufunc.__name__
    if ufunc in PREDICATES:
        return _numpy_result(ufunc, inputs, kwargs)
    fn = UFUNCS.get(name)
    if method != "__call__":
        special = _UFUNC_METHODS.get(method)
        if fn is None or special is None or kwargs.get("out") is not None:
            return _passed_through(f"{name}.{method}", getattr(ufunc, method), inputs,
                                   kwargs)
        return special(ufunc, fn, *inputs, **kwargs)
    if fn is None:
        return _passed_through(name, ufunc, inputs, kwargs)
    out = kwargs.pop("out", None)
    if kwargs:
        raise TypeError(f"autotape does not support the argument(s) "
                        f"{', '.join(sorted(kwargs))} of numpy.{name} on Tensors")
    try:
        if out is not None:
            return _into(name, fn(*[x for x in inputs]), out)
        return fn(*inputs)
    except ComplexOperand:
        if out is not None:
            raise TypeError(f"numpy.{name} with out= is not supported on complex "
                            "numbers") from None
        return complex_call(name, *inputs)


def array_function(func, args, kwargs):
    """A numpy function records when an argument requires grad; otherwise it is
    numpy's own, on the arrays, with a plain numpy result (np.atleast_1d of a gradient
    is an ndarray, so scipy and other numpy code take it as they take arrays)."""
    if func in PREDICATES:
        return _numpy_result(func, args, kwargs)
    out = kwargs.get("out")
    if out is not None and any(isinstance(o, Tensor) for o in
                               (out if type(out) is tuple else (out,))):
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        return _into(func.__name__, array_function(func, args, rest), out)
    fn = FUNCTIONS.get(func)
    if fn is None:
        return _passed_through(func.__name__, func, args, kwargs)
    for a in args:                  # the common cases, np.roll(x, 1) and
        if type(a) is list:         # np.concatenate([x, y]): no nested search
            a = a[0] if a else None
        if type(a) is Tensor and (a._tape is not None or a._requires_grad):
            return _called(func, fn, args, kwargs)
    if not any(t.requires_grad for t in _tensors_in([args, kwargs], [])):
        return _passed_through(func.__name__, func, args, kwargs)
    return _called(func, fn, args, kwargs)


def _called(func, fn, args, kwargs):
    """fn(*args, **kwargs), or its complex implementation where an operand is complex."""
    try:
        return fn(*args, **kwargs)
    except ComplexOperand:
        return complex_call(numpy_name(func), *args, **kwargs)


def numpy_name(func):
    """A numpy function's name as COMPLEX_FUNCTIONS spells it (``linalg.solve``)."""
    return ("linalg." if func.__module__ == "numpy.linalg" else "") + func.__name__


# ---- ufunc methods --------------------------------------------------------------------------

_REDUCTIONS = {"add": reduce.sum, "multiply": reduce.prod, "maximum": reduce.amax,
               "minimum": reduce.amin}
_SCANS = {"add": reduce.cumsum, "multiply": reduce.cumprod}
_RUNNING = {"maximum": np.maximum, "minimum": np.minimum}


def _ufunc_reduce(ufunc, fn, array, axis=0, dtype=None, out=None, keepdims=False,
                  **more):
    _refuse(f"{ufunc.__name__}.reduce", dtype=dtype, out=out,
            **{k: v for k, v in more.items() if v is not np._NoValue and v is not True})
    reduction = _REDUCTIONS.get(ufunc.__name__)
    if reduction is None:
        raise TypeError(f"autotape does not support numpy.{ufunc.__name__}.reduce on "
                        "Tensors")
    return reduction(array, axis=axis, keepdims=keepdims)


def _ufunc_accumulate(ufunc, fn, array, axis=0, dtype=None, out=None):
    """add / multiply: cumsum / cumprod; maximum / minimum: the running extreme, a
    gather of the element reached so far (its gradient goes there)."""
    _refuse(f"{ufunc.__name__}.accumulate", dtype=dtype, out=out)
    a = indexing.as_tensor(array)
    if ufunc.__name__ in _SCANS:
        return _SCANS[ufunc.__name__](a, axis)
    running = _RUNNING.get(ufunc.__name__)
    if running is None:
        raise TypeError(f"autotape does not support numpy.{ufunc.__name__}.accumulate on "
                        "Tensors")

    def source(v):                     # the index each running extreme comes from
        best = running.accumulate(v, axis=axis)
        idx = np.broadcast_to(np.arange(v.shape[axis]).reshape(
            (-1,) + (1,) * (v.ndim - 1 - (axis % v.ndim))), v.shape)
        hit = np.where(v == best, idx, -1)
        return np.maximum.accumulate(hit, axis=axis)
    return shaping.take_along_axis(a, observe(source, a), axis)


def _ufunc_outer(ufunc, fn, a, b, **kwargs):
    if kwargs:
        raise TypeError(f"autotape does not support the argument(s) "
                        f"{', '.join(sorted(kwargs))} of numpy.{ufunc.__name__}.outer")
    a, b = indexing.as_tensor(a), indexing.as_tensor(b)
    return fn(indexing.reshape(a, a.shape + (1,) * b.ndim), b)


_UFUNC_METHODS = {"reduce": _ufunc_reduce, "accumulate": _ufunc_accumulate,
                  "outer": _ufunc_outer}


# ---- everything else: plain numpy where no gradient is lost ------------------------------

def _tensors_in(value, found, kinds=Tensor):
    if isinstance(value, kinds):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors_in(v, found, kinds)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors_in(v, found, kinds)
    return found


def _with_values(value, values):
    """``value`` with each Tensor replaced by the next of ``values`` (numpy arrays)."""
    if isinstance(value, Tensor):
        return next(values)
    if isinstance(value, (list, tuple)):
        return type(value)(_with_values(v, values) for v in value)
    if isinstance(value, dict):
        return {k: _with_values(v, values) for k, v in value.items()}
    return value


def _numpy_result(func, args, kwargs):
    """func on the arrays inside args (a guard under at.compile); a plain numpy result."""
    tensors = _tensors_in([args, kwargs], [])

    def call(*values):
        it = iter(values)
        a, k = _with_values([list(args), kwargs], it)
        return func(*a, **k)
    return observe(call, *tensors)


def _passed_through(name, func, args, kwargs):
    if any(t.requires_grad for t in _tensors_in([args, kwargs], [])):
        raise TypeError(f"autotape does not support numpy.{name} on Tensors that require "
                        "grad (it would drop their gradient); call it on t.detach() if "
                        "that is intended")
    return _numpy_result(func, args, kwargs)


# ---- complex tensors ---------------------------------------------------------------------
#
# The same protocols for ComplexTensor: ufuncs and the functions of numpy's names that
# complex_numbers/ and fft.py implement record; any other numpy function runs on plain
# arrays when nothing requires grad, and is refused by name when something does.

def complex_array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if method != "__call__" or kwargs.get("out") is not None:
        raise TypeError(f"numpy.{ufunc.__name__}.{method} (or out=) is not supported on "
                        "complex tensors")
    if ufunc in PREDICATES:
        return ufunc(*_plain_values(inputs, ufunc.__name__), **kwargs)
    return complex_call(ufunc.__name__, *inputs, **kwargs)


def complex_array_function(self, func, types, args, kwargs):
    if not any(v.requires_grad for v in _tensors_in([args, kwargs], [],
                                                     (ComplexTensor, Tensor))):
        return func(*_plain_values(args, func.__name__), **_plain_values(kwargs, func.__name__))
    fn = fft.FUNCTIONS.get(func) or FUNCTIONS_ON_COMPLEX.get(func)
    if fn is not None:
        return fn(*args, **kwargs)
    if func not in PREDICATES and func.__module__ in ("numpy", "numpy.linalg") and \
            numpy_name(func) in COMPLEX_FUNCTIONS:
        return complex_call(numpy_name(func), *args, **kwargs)
    return func(*_plain_values(args, func.__name__, func in PREDICATES), **kwargs)


def _plain_values(value, name, predicate=True):
    """value with every tensor in it replaced by its numpy value; refused for one that
    requires grad, unless ``name`` is a predicate (its result carries no gradient)."""
    if isinstance(value, (ComplexTensor, Tensor)):
        if value.requires_grad and not predicate:
            raise TypeError(f"autotape: numpy.{name} does not support complex tensors "
                            "that require grad (it would drop their gradient)")
        return value.detach().numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_values(v, name, predicate) for v in value)
    if isinstance(value, dict):
        return {k: _plain_values(v, name, predicate) for k, v in value.items()}
    return value


FUNCTIONS_ON_COMPLEX = {np.real: complex_ops.real, np.imag: complex_ops.imag,
                        np.angle: complex_ops.angle, np.iscomplexobj: complex_numbers.is_complex,
                        np.isrealobj: complex_numbers.isrealobj}
ComplexTensor.__array_ufunc__ = complex_array_ufunc
ComplexTensor.__array_function__ = complex_array_function
