"""sin and cos that compile to SIMD loops.

numba calls libm once per element for math.sin (about 20 ns here; torch's vectorised
SLEEF takes 5). These are branch-free versions of fdlibm's kernels, which LLVM turns
into 4-wide AVX2 loops: x = q pi/2 + r with pi/2 split in three parts (Cody-Waite),
then fdlibm's minimax polynomials for sin and cos on |r| <= pi/4, and a select on q
mod 4. Error: at most 1 ulp for |x| < 100, 2 ulp up to |x| = 1e5 (tested); beyond
REDUCTION_LIMIT the array functions fall back to libm element by element.

Coefficients from fdlibm (k_sin.c, k_cos.c): Copyright (C) 1993 by Sun Microsystems,
Inc. Developed at SunPro, a Sun Microsystems, Inc. business. Permission to use, copy,
modify, and distribute this software is freely granted, provided that this notice is
preserved.
"""
import math

import numpy as np
from numba.extending import register_jitable

from ..kernels.cache import cached_njit

_S1, _S2, _S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
_S4, _S5, _S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
_C1, _C2, _C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
_C4, _C5, _C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11
_PIO2_1, _PIO2_2, _PIO2_3 = 1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21
_INV_PIO2 = 6.36619772367581382433e-01
_ROUND = 6755399441055744.0          # 1.5 * 2**52: adding and subtracting it rounds
_TINY = 2.0 ** -27
REDUCTION_LIMIT = 1e5


@register_jitable
def _sin_quadrant(x, shift):
    """sin(x + shift * pi/2) for shift in {0, 1}, branch-free."""
    q = (x * _INV_PIO2 + _ROUND) - _ROUND
    r = ((x - q * _PIO2_1) - q * _PIO2_2) - q * _PIO2_3
    z = r * r
    s = r + r * z * (_S1 + z * (_S2 + z * (_S3 + z * (_S4 + z * (_S5 + z * _S6)))))
    s = r if abs(r) < _TINY else s              # sin(r) rounds to r; keeps -0.0
    hz = 0.5 * z
    w = 1.0 - hz
    c = w + (((1.0 - w) - hz) + z * z * (_C1 + z * (_C2 + z * (_C3 + z * (
        _C4 + z * (_C5 + z * _C6))))))
    n = q + shift
    n = n - 4.0 * np.floor(n * 0.25)
    half = np.floor(n * 0.5)
    v = c if n - 2.0 * half == 1.0 else s
    return -v if half == 1.0 else v


@register_jitable
def sin(x):
    """sin(x), within 2 ulp (libm beyond REDUCTION_LIMIT)."""
    if abs(x) <= REDUCTION_LIMIT:
        return _sin_quadrant(x, 0.0)
    return math.sin(x)


@register_jitable
def cos(x):
    """cos(x), within 2 ulp (libm beyond REDUCTION_LIMIT)."""
    if abs(x) <= REDUCTION_LIMIT:
        return _sin_quadrant(x, 1.0)
    return math.cos(x)


@register_jitable
def _libm_shifted_sin(x, shift):
    """sin(x + shift * pi/2) by libm, for any |x|."""
    n = shift - 4.0 * math.floor(shift / 4.0)
    if n == 0.0:
        return math.sin(x)
    if n == 1.0:
        return math.cos(x)
    if n == 2.0:
        return -math.sin(x)
    return -math.cos(x)


@register_jitable
def shifted_sin_times(g, x, shift, out, assign):
    """out (= or +=) g * sin(x + shift * pi/2): one SIMD loop where every |x| is small
    enough to reduce, element by element with libm beyond."""
    m = 0.0
    for k in range(x.size):
        m = max(m, abs(x[k]))
    if m <= REDUCTION_LIMIT and assign:
        for k in range(x.size):
            out[k] = g[k] * _sin_quadrant(x[k], shift)
    elif m <= REDUCTION_LIMIT:
        for k in range(x.size):
            out[k] += g[k] * _sin_quadrant(x[k], shift)
    else:
        if assign:
            out[:] = 0.0
        for k in range(x.size):
            out[k] += g[k] * _libm_shifted_sin(x[k], shift)


@cached_njit()
def _sin_into(x, out, shift):
    m = 0.0
    for k in range(x.size):
        m = max(m, abs(x[k]))
    for k in range(x.size):                      # the SIMD loop
        out[k] = _sin_quadrant(x[k], shift)
    if m > REDUCTION_LIMIT:                      # rare: arguments too large to reduce
        for k in range(x.size):
            if abs(x[k]) > REDUCTION_LIMIT:
                out[k] = _libm_shifted_sin(x[k], shift)


def _array_function(shift, np_fn):
    def fn(x):
        if x.dtype != np.float64 or x.size < 16:
            return np_fn(x)
        out = np.empty(x.shape)
        _sin_into(x.reshape(-1), out.reshape(-1), shift)
        return out
    fn.__name__ = np_fn.__name__
    return fn


sin_array = _array_function(0.0, np.sin)
cos_array = _array_function(1.0, np.cos)
