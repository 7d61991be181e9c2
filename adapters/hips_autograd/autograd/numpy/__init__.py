"""autograd.numpy for the adapter: autotape.numpy's functions, numpy for the rest.

A function autotape provides is autotape's; called with no Tensor among its arguments
it returns numpy values, as autograd.numpy does outside a traced function. Names
autotape does not provide fall through to numpy itself, whose functions raise a
TypeError on Tensors (so a test of an unsupported function fails, never passes
silently)."""
import functools as _functools

import numpy as _onp

import autotape.numpy as _anp
from autotape import ComplexTensor as _ComplexTensor, Tensor as _Tensor
from .. import to_numpy as _to_numpy

__version__ = _onp.__version__


def _has_tensor(values):
    for v in values:
        if isinstance(v, (_Tensor, _ComplexTensor)):
            return True
        if isinstance(v, (tuple, list)) and _has_tensor(v):
            return True
    return False


def _wrap(fn):
    @_functools.wraps(fn)
    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out if _has_tensor(args) or _has_tensor(kwargs.values()) else _to_numpy(out)
    return call


def __getattr__(name):
    if name in ("linalg", "random"):          # this package's own submodules
        raise AttributeError(name)
    try:
        fn = getattr(_anp, name)
    except AttributeError:
        return getattr(_onp, name)
    return _wrap(fn) if callable(fn) and not isinstance(fn, type) else fn


from . import linalg, random  # noqa: E402,F401
