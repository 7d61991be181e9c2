"""The math functions of the op table's scalar code, with IEEE results everywhere.

In compiled code (CPU, CUDA) each function here is ``math``'s. In plain Python (the
engine's Python tier, at.jit's recording by Python, numba's CUDA simulator) ``math``
raises on a domain error or an overflow (log(-1), sqrt(-1), exp(1000)) where compiled
code gives nan or inf. There each is the C math library's own function, called through
ctypes: the library compiled code calls, so the same bits (numpy's ufuncs, the fallback
where no C math library is found, differ from it in the last bit at some arguments).
"""
import ctypes
import ctypes.util
import math

import numpy as np
from numba.extending import overload

__all__ = []


def _c_math_library():
    for name in (ctypes.util.find_library("m"), None):
        try:
            library = ctypes.CDLL(name)
            library.tanh                         # (a library that has the functions)
            return library
        except (OSError, AttributeError, TypeError):
            continue
    return None


_C = _c_math_library()


def _c_function(name, arity):
    """The C library's ``name`` as a Python function of floats, or None."""
    fn = getattr(_C, name, None) if _C is not None else None
    if fn is None:
        return None
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_double] * arity
    return fn


def _unary(name, numpy_fn):
    math_fn = getattr(math, name)
    c_fn = _c_function(name, 1)

    def python(x):
        if c_fn is not None:
            return c_fn(x)
        with np.errstate(all="ignore"):
            return float(numpy_fn(x))
    python.__name__ = python.__qualname__ = name
    python.__doc__ = f"math.{name}, IEEE in plain Python too (see the module)."

    @overload(python)
    def compiled(x):
        return lambda x: math_fn(x)
    return python


def _binary(name, numpy_fn):
    math_fn = getattr(math, name)
    c_fn = _c_function(name, 2)

    def python(x, y):
        if c_fn is not None:
            return c_fn(x, y)
        with np.errstate(all="ignore"):
            return float(numpy_fn(x, y))
    python.__name__ = python.__qualname__ = name
    python.__doc__ = f"math.{name}, IEEE in plain Python too (see the module)."

    @overload(python)
    def compiled(x, y):
        return lambda x, y: math_fn(x, y)
    return python


for _name, _np in [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("sin", np.sin),
                   ("cos", np.cos), ("tan", np.tan), ("tanh", np.tanh), ("sinh", np.sinh),
                   ("cosh", np.cosh), ("log1p", np.log1p), ("expm1", np.expm1),
                   ("log2", np.log2), ("log10", np.log10), ("asin", np.arcsin),
                   ("acos", np.arccos), ("atan", np.arctan), ("asinh", np.arcsinh),
                   ("acosh", np.arccosh), ("atanh", np.arctanh)]:
    globals()[_name] = _unary(_name, _np)
    __all__.append(_name)
for _name, _np in [("atan2", np.arctan2), ("hypot", np.hypot)]:
    globals()[_name] = _binary(_name, _np)
    __all__.append(_name)
