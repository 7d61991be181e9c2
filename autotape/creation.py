"""Making tensors: from data, numpy-style factories, and torch's random ones."""
import threading

import numpy as np

from .tensor import (ComplexOperand, Tensor, canonical, device_call, new_leaf, read_from,
                     tensor_from)

_GRAD_DTYPE_ERROR = "Only Tensors of floating point and complex dtype can require gradients"


def _dtype(dtype):
    if dtype is None:
        return None
    d = np.dtype(dtype)
    if d.kind == "c":
        raise ComplexOperand(f"a complex dtype ({d}) for a real Tensor")
    if d.kind not in "biuf" or d == np.float16:
        raise TypeError(f"autotape supports float32, float64, integer and bool dtypes, "
                        f"not {d}")
    return d


def _finish(t, requires_grad):
    if requires_grad:
        if t._dtype.kind != "f":
            raise RuntimeError(_GRAD_DTYPE_ERROR)
        t._requires_grad = True
    return t


def tensor(data, dtype=None, requires_grad=False, device=None):
    """A new leaf holding a copy of ``data`` (numbers, nested lists, arrays, tensors).

    Floating data is float64 unless ``dtype`` says otherwise (float32 is supported).
    ``device="cuda"`` puts it on the GPU (docs/guide/gpu.md).

    >>> x = at.tensor([5.0, 3.0], requires_grad=True)
    >>> x.dtype
    dtype('float64')
    """
    if device is not None and str(device) != "cpu":
        return device_call("tensor", data, dtype, requires_grad, device)
    if isinstance(data, Tensor):
        t = tensor_from(data.numpy(), _dtype(dtype))
        if not data.requires_grad:             # (one that does is guarded by numpy())
            read_from(data, t)
    else:
        t = tensor_from(data, _dtype(dtype))
    return _finish(t, requires_grad)


def _shape(shape):
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        return tuple(int(d) for d in shape[0])
    return tuple(int(d) for d in shape)


def _factory(np_fn, shape, dtype, requires_grad, *args):
    a = np_fn(_shape(shape), *args, dtype=_dtype(dtype) or np.float64)
    return _finish(new_leaf(*canonical(a)), requires_grad)


def zeros(*shape, dtype=None, requires_grad=False):
    """``zeros(2, 3)`` or ``zeros((2, 3))``: float64 zeros.

    >>> at.zeros(2, 3)
    tensor([[0., 0., 0.],
            [0., 0., 0.]])
    """
    return _factory(np.zeros, shape, dtype, requires_grad)


def ones(*shape, dtype=None, requires_grad=False):
    """``ones(2, 3)`` or ``ones((2, 3))``: float64 ones.

    >>> at.ones(3, requires_grad=True)
    tensor([1., 1., 1.], requires_grad=True)
    """
    return _factory(np.ones, shape, dtype, requires_grad)


def full(shape, fill_value, dtype=None, requires_grad=False):
    """An array of ``shape`` filled with ``fill_value`` (numpy's dtype rule).

    >>> at.full((2,), 0.5)
    tensor([0.5, 0.5])
    """
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    a = np.full(shape, fill_value, dtype=_dtype(dtype))
    return _finish(new_leaf(*canonical(a)), requires_grad)


def zeros_like(t, dtype=None, requires_grad=False):
    """A Tensor of zeros with x's shape and dtype (torch.zeros_like).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.zeros_like(x)
    tensor([0., 0., 0.])
    """
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    """A Tensor of ones with x's shape and dtype (torch.ones_like).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.ones_like(x)
    tensor([1., 1., 1.])
    """
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def eye(n, m=None, dtype=None, requires_grad=False):
    """The n x m identity matrix (numpy.eye, torch.eye).

    >>> at.eye(2)
    tensor([[1., 0.],
            [0., 1.]])
    """
    a = np.eye(n, m, dtype=_dtype(dtype) or np.float64)
    return _finish(new_leaf(*canonical(a)), requires_grad)


def arange(*args, dtype=None, requires_grad=False):
    """Evenly spaced values in [start, stop) (numpy.arange); float64 unless ints are asked for.

    >>> at.arange(4.0)
    tensor([0., 1., 2., 3.])
    """
    return _finish(new_leaf(*canonical(np.arange(*args, dtype=_dtype(dtype)))), requires_grad)


def linspace(start, stop, num=50, dtype=None, requires_grad=False):
    a = np.linspace(start, stop, num, dtype=_dtype(dtype))
    return _finish(new_leaf(*canonical(a)), requires_grad)


# ---- random tensors, torch's spelling: one generator for the process, as torch's default
# generator (numpy's Generator takes its own lock per call, so threads may share it).

_generator = [np.random.default_rng()]
_generator_lock = threading.Lock()


def random_generator():
    """The numpy Generator behind rand and randn (checkpoint saves its state)."""
    return _generator[0]


def manual_seed(seed):
    """Seed the generator behind rand and randn (torch.manual_seed).

    >>> _ = at.manual_seed(0); a = at.rand(2); _ = at.manual_seed(0)
    >>> bool((at.rand(2) == a).all())
    True
    """
    with _generator_lock:
        _generator[0] = np.random.default_rng(int(seed))
    return _generator[0]


def rand(*shape, dtype=None, requires_grad=False):
    """Uniform samples on [0, 1): ``rand(2, 3)`` or ``rand((2, 3))``.

    >>> _ = at.manual_seed(0)
    >>> at.rand(2, 3).shape
    (2, 3)
    """
    a = _generator[0].random(_shape(shape))
    return _finish(new_leaf(*canonical(a.astype(_dtype(dtype) or np.float64))), requires_grad)


def randn(*shape, dtype=None, requires_grad=False):
    """Standard normal samples: ``randn(2, 3)`` or ``randn((2, 3))``.

    >>> _ = at.manual_seed(0)
    >>> at.randn(3).shape
    (3,)
    """
    a = _generator[0].standard_normal(_shape(shape))
    return _finish(new_leaf(*canonical(a.astype(_dtype(dtype) or np.float64))), requires_grad)


def full_like(t, fill_value, dtype=None, requires_grad=False):
    """A Tensor of ``fill_value`` with t's shape and dtype (torch.full_like).

    >>> at.full_like(at.zeros(2), 7.0)
    tensor([7., 7.])
    """
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def rand_like(t, dtype=None, requires_grad=False):
    """Uniform samples in [0, 1) of t's shape and dtype (torch.rand_like).

    >>> at.rand_like(at.zeros((2, 3))).shape
    (2, 3)
    """
    return rand(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def randn_like(t, dtype=None, requires_grad=False):
    """Standard normal samples of t's shape and dtype (torch.randn_like).

    >>> at.randn_like(at.zeros((2, 3))).shape
    (2, 3)
    """
    return randn(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)
