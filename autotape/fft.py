"""numpy.fft on tensors, differentiable (``at.fft.fft``, ``np.fft.fft(t)``,
``autotape.numpy.fft``), with numpy's signatures: ``n`` / ``s``, ``axis`` / ``axes`` and
``norm``.

Three primitives do the work, each a 1-D transform along one axis that keeps its length
(padding and truncating to ``n`` are ops of their own): the complex transform, rfft
and irfft. Each VJP is again one of them: the adjoint of a DFT is the inverse transform
with the dual normalisation ("backward" and "forward" swap), and rfft / irfft weigh
the bins that stand for two (all but the zero and Nyquist frequencies) by 1/2 and 2.
The multi-axis transforms are 1-D ones axis by axis.

>>> z = at.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
>>> at.fft.fft(z)
tensor([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j], grad_fn=<ComplexBackward>)
"""
import functools
import importlib
import math

import numpy as np


from .complex_numbers.ops import as_complex, concatenate as complex_concatenate, primitive
from .complex_numbers.ops import SHAPING as COMPLEX_SHAPING
from .complex_numbers.tensor import ComplexTensor
from .functions.shaping import roll as real_roll
from .ops.indexing import as_tensor, concatenate as real_concatenate
from .parallel import get_num_threads
from .tensor import is_complex_data
from .tuning import FOUR_STEP_MIN

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn",
           "ifftn", "rfftn", "irfftn", "fftshift", "ifftshift", "fftfreq", "rfftfreq"]

DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _norm(norm):
    norm = "backward" if norm is None else norm
    if norm not in DUAL:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or '
                         '"forward".')
    return norm


# ---- the primitives: 1-D, length kept ------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _scipy_fft():
    """scipy.fft, imported at the first transform (it takes 150 ms, which `import
    autotape` should not pay), or None without scipy."""
    try:
        return importlib.import_module("scipy.fft")
    except ImportError:                 # (numpy's own then: the same values, one thread)
        return None


def _pocket(name):
    """numpy.fft's ``name``, computed by scipy.fft where scipy is installed (the same
    pocketfft, with the many 1-D transforms of an n-D array on autotape's threads)."""
    def transform(x, n=None, axis=-1, norm=None, overwrite_x=False):
        scipy_fft = _scipy_fft()
        if scipy_fft is None:
            return getattr(np.fft, name)(x, n, axis, norm)
        return getattr(scipy_fft, name)(x, n, axis, norm, overwrite_x,
                                        workers=get_num_threads())
    return transform


pocket_fft, pocket_ifft, rfft_of, irfft_of = (_pocket(name) for name in (
    "fft", "ifft", "rfft", "irfft"))

# A long 1-D transform streams its data through the cache log2(n) times. Long complex
# transforms along the last axis go in four steps instead (Bailey's): n = n1 n2, then n2
# transforms of length n1, a twiddle factor per element, n1 transforms of length n2 and
# a transpose (from FOUR_STEP_MIN points, tuning.py).


def _four_step_split(n):
    """(n1, n2) with n1 n2 = n and n1 the largest divisor at most sqrt(n), or None when
    n has no such split with both at least 16."""
    n1 = math.isqrt(n)
    while n1 >= 16 and n % n1:
        n1 -= 1
    return (n1, n // n1) if n1 >= 16 else None


@functools.lru_cache(maxsize=8)
def _twiddles(n1, n2, sign, scale):
    """exp(sign 2 pi i k1 j2 / n) * scale, the four-step transform's middle factors."""
    angle = (2.0 * math.pi / (n1 * n2)) * np.outer(np.arange(n1), np.arange(n2))
    return scale * np.exp(sign * 1j * angle)


def complex_transform(x, axis, norm, inverse):
    """numpy.fft.fft (ifft with ``inverse``) of complex array x along ``axis``."""
    n = x.shape[axis]
    split = _four_step_split(n) if n >= FOUR_STEP_MIN and axis == x.ndim - 1 and \
        x.flags.c_contiguous else None
    if split is None:
        return (pocket_ifft if inverse else pocket_fft)(x, axis=axis, norm=norm)
    n1, n2 = split
    # both steps unscaled; the normalisation rides on the twiddle factors
    scale = {"backward": 1.0 / n if inverse else 1.0, "ortho": 1.0 / math.sqrt(n),
             "forward": 1.0 if inverse else 1.0 / n}[norm]
    step = (lambda a, ax, over: pocket_ifft(a, axis=ax, norm="forward", overwrite_x=over)) \
        if inverse else (lambda a, ax, over: pocket_fft(a, axis=ax, overwrite_x=over))
    b = step(x.reshape(x.shape[:-1] + (n1, n2)), -2, False)
    b *= _twiddles(n1, n2, 1.0 if inverse else -1.0, scale)
    c = step(b, -1, True)
    return np.ascontiguousarray(np.swapaxes(c, -1, -2)).reshape(x.shape)


# fft and ifft: the adjoint of one is the other, with the dual normalisation
_fft = primitive("fft", lambda z, axis, norm: complex_transform(z, axis, norm, False), (
    lambda g, out, z, axis, norm: _ifft(g, axis=axis, norm=DUAL[norm]),))
_ifft = primitive("ifft", lambda z, axis, norm: complex_transform(z, axis, norm, True), (
    lambda g, out, z, axis, norm: _fft(g, axis=axis, norm=DUAL[norm]),))


def _c2c(z, axis, norm, inverse):
    return (_ifft if inverse else _fft)(z, axis=axis, norm=norm)


def _halves(m, n, axis, ndim, value):
    """Weights along ``axis`` for the m bins of a real signal of length n: ``value``
    for the bins that stand for two frequencies, 1 for the zero (and Nyquist) one."""
    w = np.full(m, value)
    w[0] = 1.0
    if n % 2 == 0 and m > 1:
        w[-1] = 1.0
    return w.reshape((m,) + (1,) * (ndim - 1 - axis))


# rfft and irfft: each other's adjoints, up to the weights of the bins that stand for two
_rfft = primitive("rfft", lambda x, axis, norm: rfft_of(x, axis=axis, norm=norm), (
    lambda g, out, x, axis, norm: _irfft(
        g * _halves(g.shape[axis], x.shape[axis], axis, g.ndim, 0.5),
        axis=axis, norm=DUAL[norm], n=x.shape[axis]),), kinds="r")
_irfft = primitive("irfft", lambda c, axis, norm, n: irfft_of(c, n, axis, norm), (
    lambda g, out, z, axis, norm, n: _rfft(g, axis=axis, norm=DUAL[norm]) * _halves(
        z.shape[axis], n, axis, z.ndim, 2.0),), out_kind="r")


# ---- lengths -------------------------------------------------------------------------------

def _resized(x, n, axis):
    """x cut or zero-padded to length n along axis."""
    m = x.shape[axis]
    if n is None or n == m:
        return x
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    if n < m:
        index = [slice(None)] * x.ndim
        index[axis] = slice(0, n)
        return x[tuple(index)]
    pad_shape = list(x.shape)
    pad_shape[axis] = n - m
    if isinstance(x, ComplexTensor):
        return complex_concatenate([x, np.zeros(pad_shape, x.dtype)], axis)
    return real_concatenate([x, np.zeros(pad_shape, x.dtype)], axis)


def _axis(axis, ndim):
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of "
                                      f"dimension {ndim}")
    return axis % ndim


def _real(a, name):
    if isinstance(a, ComplexTensor) or is_complex_data(a):
        raise TypeError(f"{name} takes real input (its result's symmetry assumes it); "
                        "for complex input use fft")
    x = as_tensor(a)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


# ---- 1-D -----------------------------------------------------------------------------------

def fft(a, n=None, axis=-1, norm=None):
    """The discrete Fourier transform along ``axis`` (numpy.fft.fft).

    >>> at.fft.fft(at.tensor([1.0, 0.0]))
    tensor([1.+0.j, 1.+0.j])
    """
    z = as_complex(a)
    axis = _axis(axis, z.ndim)
    return _c2c(_resized(z, n, axis), axis, _norm(norm), False)


def ifft(a, n=None, axis=-1, norm=None):
    """The inverse discrete Fourier transform (numpy.fft.ifft).

    >>> at.fft.ifft(at.tensor([2.0, 0.0]))
    tensor([1.+0.j, 1.+0.j])
    """
    z = as_complex(a)
    axis = _axis(axis, z.ndim)
    return _c2c(_resized(z, n, axis), axis, _norm(norm), True)


def rfft(a, n=None, axis=-1, norm=None):
    """The transform of a real signal: its n // 2 + 1 non-negative frequencies.

    >>> at.fft.rfft(at.tensor([1.0, 2.0, 3.0, 4.0]))
    tensor([10.+0.j, -2.+2.j, -2.+0.j])
    """
    x = _real(a, "rfft")
    axis = _axis(axis, x.ndim)
    return _rfft(_resized(x, n, axis), axis=axis, norm=_norm(norm))


def irfft(a, n=None, axis=-1, norm=None):
    """The real signal of length n (2 (m - 1) by default) with these m non-negative
    frequencies (numpy.fft.irfft).

    >>> at.fft.irfft(at.tensor([10.0, -2 + 2j, -2.0]))
    tensor([1., 2., 3., 4.])
    """
    z = as_complex(a)
    axis = _axis(axis, z.ndim)
    n = 2 * (z.shape[axis] - 1) if n is None else n
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    return _irfft(_resized(z, n // 2 + 1, axis), axis=axis, norm=_norm(norm), n=n)


# ---- n-D -----------------------------------------------------------------------------------

def _shape_axes(ndim, s, axes):
    """numpy's rule: (lengths, axes) of an n-D transform."""
    if axes is None:
        axes = list(range(ndim)) if s is None else list(range(ndim - len(s), ndim))
    axes = [_axis(a, ndim) for a in axes]
    if s is None:
        s = [None] * len(axes)
    if len(s) != len(axes):
        raise ValueError("When given, axes and shape arguments have to be of the same "
                         "length.")
    return list(s), axes


def fftn(a, s=None, axes=None, norm=None):
    """The n-D transform over ``axes`` (all by default).

    >>> at.fft.fftn(at.ones((2, 2)))
    tensor([[4.+0.j, 0.+0.j],
            [0.+0.j, 0.+0.j]])
    """
    z = as_complex(a)
    s, axes = _shape_axes(z.ndim, s, axes)
    for n, axis in zip(s, axes):
        z = fft(z, n, axis, norm)
    return z


def ifftn(a, s=None, axes=None, norm=None):
    """The n-D inverse transform over ``axes``.

    >>> at.fft.ifftn(at.fft.fftn(at.ones((2, 2)))).real
    tensor([[1., 1.],
            [1., 1.]])
    """
    z = as_complex(a)
    s, axes = _shape_axes(z.ndim, s, axes)
    for n, axis in zip(s, axes):
        z = ifft(z, n, axis, norm)
    return z


def rfftn(a, s=None, axes=None, norm=None):
    """The n-D transform of a real array: rfft over the last of ``axes``, then fft
    over the others.

    >>> at.fft.rfftn(at.ones((2, 2)))
    tensor([[4.+0.j, 0.+0.j],
            [0.+0.j, 0.+0.j]])
    """
    x = _real(a, "rfftn")
    s, axes = _shape_axes(x.ndim, s, axes)
    z = rfft(x, s[-1], axes[-1], norm)
    for n, axis in zip(s[:-1], axes[:-1]):
        z = fft(z, n, axis, norm)
    return z


def irfftn(a, s=None, axes=None, norm=None):
    """The inverse of rfftn: ifft over all but the last of ``axes``, then irfft.

    >>> at.fft.irfftn(at.fft.rfftn(at.ones((2, 2))))
    tensor([[1., 1.],
            [1., 1.]])
    """
    z = as_complex(a)
    s, axes = _shape_axes(z.ndim, s, axes)
    for n, axis in zip(s[:-1], axes[:-1]):
        z = ifft(z, n, axis, norm)
    return irfft(z, s[-1], axes[-1], norm)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    """fftn over the last two axes.

    >>> at.fft.fft2(at.ones((2, 2)))[0, 0]
    tensor(4.+0.j)
    """
    return fftn(a, s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    """ifftn over the last two axes.

    >>> at.fft.ifft2(at.ones((2, 2)))[0, 0]
    tensor(1.+0.j)
    """
    return ifftn(a, s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    """rfftn over the last two axes.

    >>> at.fft.rfft2(at.ones((2, 2)))[0, 0]
    tensor(4.+0.j)
    """
    return rfftn(a, s, axes, norm)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    """irfftn over the last two axes.

    >>> at.fft.irfft2(at.ones((2, 2)))[0, 0]
    tensor(1.)
    """
    return irfftn(a, s, axes, norm)


# ---- shifts and frequencies ------------------------------------------------------------------

def _shifted(x, axes, sign):
    x = x if isinstance(x, ComplexTensor) else (
        as_complex(x) if is_complex_data(x) else as_tensor(x))
    axes = range(x.ndim) if axes is None else (
        axes if isinstance(axes, (tuple, list)) else (axes,))
    roll = COMPLEX_SHAPING["roll"] if isinstance(x, ComplexTensor) else real_roll
    for axis in axes:
        x = roll(x, sign * (x.shape[axis] // 2), axis)
    return x


def fftshift(x, axes=None):
    """The zero frequency moved to the middle (numpy.fft.fftshift).

    >>> at.fft.fftshift(at.tensor([0.0, 1.0, 2.0, -2.0, -1.0]))
    tensor([-2., -1.,  0.,  1.,  2.])
    """
    return _shifted(x, axes, 1)


def ifftshift(x, axes=None):
    """fftshift undone.

    >>> at.fft.ifftshift(at.tensor([-2.0, -1.0, 0.0, 1.0, 2.0]))
    tensor([ 0.,  1.,  2., -2., -1.])
    """
    return _shifted(x, axes, -1)


def fftfreq(n, d=1.0):
    """The sample frequencies of fft (a constant tensor), as numpy.fft.fftfreq.

    >>> at.fft.fftfreq(4)
    tensor([ 0.  ,  0.25, -0.5 , -0.25])
    """
    return as_tensor(np.fft.fftfreq(n, d))


def rfftfreq(n, d=1.0):
    """The sample frequencies of rfft.

    >>> at.fft.rfftfreq(4)
    tensor([0.  , 0.25, 0.5 ])
    """
    return as_tensor(np.fft.rfftfreq(n, d))


FUNCTIONS = {getattr(np.fft, name): globals()[name] for name in __all__}
