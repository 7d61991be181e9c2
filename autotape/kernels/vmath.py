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

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic, register_jitable

from . import libm, scalar
from .cache import cached_njit

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
    n = n - 4.0 * scalar.floor(n * 0.25)
    half = scalar.floor(n * 0.5)
    v = c if n - 2.0 * half == 1.0 else s
    return -v if half == 1.0 else v


@register_jitable
def sin(x):
    """sin(x), within 2 ulp (libm beyond REDUCTION_LIMIT)."""
    if abs(x) <= REDUCTION_LIMIT:
        return _sin_quadrant(x, 0.0)
    return libm.sin(x)


@register_jitable
def cos(x):
    """cos(x), within 2 ulp (libm beyond REDUCTION_LIMIT)."""
    if abs(x) <= REDUCTION_LIMIT:
        return _sin_quadrant(x, 1.0)
    return libm.cos(x)


@register_jitable
def _libm_shifted_sin(x, shift):
    """sin(x + shift * pi/2) by libm, for any |x|."""
    n = shift - 4.0 * math.floor(shift / 4.0)
    if n == 0.0:
        return libm.sin(x)
    if n == 1.0:
        return libm.cos(x)
    if n == 2.0:
        return -libm.sin(x)
    return -libm.cos(x)


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
    _sin_loop(x, out, shift)


@register_jitable
def _sin_loop(x, out, shift):
    m = 0.0
    for k in range(x.size):
        m = max(m, abs(x[k]))
    for k in range(x.size):                      # the SIMD loop
        out[k] = _sin_quadrant(x[k], shift)
    if m > REDUCTION_LIMIT:                      # rare: arguments too large to reduce
        for k in range(x.size):
            if abs(x[k]) > REDUCTION_LIMIT:
                out[k] = _libm_shifted_sin(x[k], shift)


def written_to(z, out):
    """z, or z written into ``out`` when given."""
    if out is None:
        return z
    out[...] = z
    return out


def _array_function(shift, np_fn):
    def fn(x, chunks=1, out=None):
        if x.dtype != np.float64 or x.size < 16:
            return written_to(np_fn(x), out)
        out = np.empty(x.shape) if out is None else out
        if chunks > 1:
            in_chunks(np.ascontiguousarray(x).reshape(-1), out.reshape(-1), 0, shift, chunks)
        else:
            _sin_into(x.reshape(-1), out.reshape(-1), shift)
        return out
    fn.__name__ = np_fn.__name__
    return fn


sin_array = _array_function(0.0, np.sin)
cos_array = _array_function(1.0, np.cos)


# ---- tanh -------------------------------------------------------------------------------
# Branch-free, both halves computed and one selected (that is what vectorises):
# |x| < 0.625: x + x^3 P(x^2) / Q(x^2), Cephes' rational approximation;
# beyond: (1 - e) / (1 + e) with e = exp(-2|x|) = 2^-n exp(-r), 2|x| = n ln2 + r
# (Cody-Waite, |r| <= ln2 / 2), exp(-r) a Taylor polynomial of degree 13 and 2^-n built
# from its bits; 2|x| is capped at 44, where tanh is 1 in double precision. Error: at
# most 2 ulp against numpy's tanh (tested).
# Coefficients from Cephes (tanh.c), Copyright 1984, 1995, 2000 by Stephen L. Moshier,
# under the BSD license of its SciPy distribution.

_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_TP0, _TP1, _TP2 = -9.64399179425052238628e-01, -9.92877231001918586564e+01, -1.61468768441708447952e+03
_TQ0, _TQ1, _TQ2 = 1.12811678491632931402e+02, 2.23548839060100448583e+03, 4.84406305325125486048e+03


@intrinsic
def _double_from_bits(typingctx, bits):
    """The float64 whose IEEE bits are the int64 ``bits`` (vectorises, unlike ldexp)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@intrinsic
def _bits_of_double(typingctx, x):
    """The IEEE bits of the float64 ``x`` as an int64."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


_ROUND_BITS = 0x4338000000000000                 # the bits of _ROUND: q + _ROUND has q's


@register_jitable
def _exp_small(s):
    """exp(s) for |s| <= ln2 / 2: Taylor to degree 13 (error < 1e-17)."""
    return 1.0 + s * (1.0 + s * (0.5 + s * (0.16666666666666666 + s * (0.041666666666666664 + s * (0.008333333333333333 + s * (0.001388888888888889 + s * (0.0001984126984126984 + s * (2.48015873015873e-05 + s * (2.7557319223985893e-06 + s * (2.755731922398589e-07 + s * (2.505210838544172e-08 + s * (2.08767569878681e-09 + s * (1.6059043836821613e-10)))))))))))))


@cached_njit()
def _tanh_into(x, out):
    _tanh_loop(x, out)


@register_jitable
def _tanh_loop(x, out):
    for k in range(x.size):                      # the SIMD loop (kept in one body: a call
        v = x[k]                                 # that LLVM does not inline stops it)
        a = abs(v)
        z = a * a
        small = a + a * z * ((_TP0 * z + _TP1) * z + _TP2) / (((z + _TQ0) * z + _TQ1) * z +
                                                             _TQ2)
        y = 2.0 * a
        y = 44.0 if y > 44.0 else y              # (NaN stays NaN)
        shifted = y * _INV_LN2 + _ROUND          # n, rounded, in the low mantissa bits
        n = shifted - _ROUND
        e = _exp_small(-((y - n * _LN2_HI) - n * _LN2_LO)) * _double_from_bits(
            (1023 - (_bits_of_double(shifted) - _ROUND_BITS)) << 52)     # no cvt: AVX2
        large = (1.0 - e) / (1.0 + e)
        out[k] = math.copysign(small if a < 0.625 else large, v)


def tanh_array(x, chunks=1, out=None):
    """np.tanh for float64 arrays, within 2 ulp, as one SIMD loop (3x numpy's speed);
    in ``chunks`` pieces on numba's threads when asked; into ``out`` (C-contiguous)
    when given."""
    if x.dtype != np.float64 or x.size < 16:
        return written_to(np.tanh(x), out)
    out = np.empty(x.shape) if out is None else out
    if chunks > 1:
        in_chunks(np.ascontiguousarray(x).reshape(-1), out.reshape(-1), 1, 0.0, chunks)
    else:
        _tanh_into(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


# ---- the same loops on numba's threads, a slice each: bit for bit the one-thread values

@cached_njit(parallel=True)
def in_chunks(x, out, kind, shift, chunks):
    """out = sin (kind 0, shifted by ``shift`` quarter turns) or tanh (kind 1) of x."""
    n = x.size
    for c in numba.prange(chunks):
        lo, hi = c * n // chunks, (c + 1) * n // chunks
        if kind == 0:
            _sin_loop(x[lo:hi], out[lo:hi], shift)
        else:
            _tanh_loop(x[lo:hi], out[lo:hi])
