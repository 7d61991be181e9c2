"""numpy's float rounding and fmod for scalars in compiled code, on every target.

The op table's math calls ``np.floor`` and friends on floats: numba's CPU target lowers
them to single instructions (``math.floor`` would give an int64, wrong at inf, nan and
beyond 2**52), but CUDA has no numpy ufuncs. Each function here is numpy's on the CPU
(and in plain Python, which numba's CUDA simulator runs), and the same numbers from
``math`` elsewhere (kernels/gpu.py).
"""
import math

import numpy as np
from numba.extending import overload

from .cache import distinct

__all__ = ["floor", "ceil", "trunc", "fmod"]

INTEGRAL = 4503599627370496.0      # 2**52: a float this large (or inf, nan) is integral


def floor(x):
    """np.floor(x) for a float x."""
    return np.floor(x)


def ceil(x):
    """np.ceil(x) for a float x."""
    return np.ceil(x)


def trunc(x):
    """np.trunc(x) for a float x."""
    return np.trunc(x)


def fmod(x, y):
    """np.fmod(x, y) for floats (C's fmod: the sign of x)."""
    return np.fmod(x, y)


def _register(stub, numpy_fn, rounding):
    @overload(stub, target="cpu")
    def on_cpu(x):
        return distinct(lambda x: numpy_fn(x), numpy_fn.__name__)

    @overload(stub, target="generic")
    def anywhere(x):
        def rounded(x):
            if not abs(x) < INTEGRAL:
                return x
            r = float(rounding(x))
            return r if r != 0.0 else math.copysign(0.0, x)   # (numpy's signed zeros)
        return distinct(rounded, numpy_fn.__name__)   # (cache.distinct says why)


_register(floor, np.floor, math.floor)
_register(ceil, np.ceil, math.ceil)
_register(trunc, np.trunc, math.trunc)


@overload(fmod, target="cpu")
def _fmod_cpu(x, y):
    return lambda x, y: np.fmod(x, y)


@overload(fmod, target="generic")
def _fmod_anywhere(x, y):
    def remainder(x, y):
        if y == 0.0 or math.isinf(x) or math.isnan(x) or math.isnan(y):
            return math.nan
        if math.isinf(y):
            return x
        return math.fmod(x, y)
    return remainder
