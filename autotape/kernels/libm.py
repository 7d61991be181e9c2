"""The math functions of the op table's scalar code, with IEEE results everywhere.

In compiled code (CPU, CUDA) each function here is ``math``'s. In plain Python, where
numba's CUDA simulator runs the GPU kernels (tests without a GPU), ``math`` raises on a
domain error or an overflow (log(-1), sqrt(-1), exp(1000)) where compiled code gives
nan or inf: there each is numpy's, which gives the compiled numbers.
"""
import math

import numpy as np
from numba.extending import overload

__all__ = []


def _unary(name, numpy_fn):
    math_fn = getattr(math, name)

    def python(x):
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

    def python(x, y):
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
