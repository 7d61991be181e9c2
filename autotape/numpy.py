"""autotape.numpy: numpy's names for autotape's functions.

    import autotape.numpy as anp
    y = anp.sum(anp.sin(x) * x, axis=0)

Every function takes Tensors, numpy arrays and Python numbers, follows numpy's
signature, broadcasting and dtype rules, and records when an argument requires grad.
A numpy name autotape does not provide raises AttributeError naming it.
"""
import numpy as _np

import autotape as _at
from . import composite as _composite
from .creation import arange, eye, full, linspace, ones, zeros  # noqa: F401
from .tensor import holds_tensor
from .record import (amax, amin, broadcast_to, clip, concatenate, matmul,  # noqa: F401
                     max, mean, min, reshape, stack, sum, transpose, where)

for _name in _at.__all__:                     # elementwise ops and composed functions
    if hasattr(_np, _name) or _name in _composite.__all__:
        globals()[_name] = getattr(_at, _name)
absolute = _at.abs
remainder = _at.mod
true_divide = _at.divide
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, _np.newaxis


def array(object, dtype=None):
    """numpy.array. Nested lists that hold Tensors are stacked on the tape, so
    ``array([x, 2 * x])`` keeps its gradient (``at.tensor`` would copy the values)."""
    if isinstance(object, (list, tuple)) and holds_tensor(object):
        t = _at.as_tensor(object)
        return t if dtype is None else t.astype(dtype)
    if isinstance(object, _at.Tensor):
        return object if dtype is None else object.astype(dtype)
    return _at.tensor(object, dtype=dtype)


asarray = array


def zeros_like(a, dtype=None):
    return _at.zeros_like(_at.as_tensor(a), dtype=dtype)


def ones_like(a, dtype=None):
    return _at.ones_like(_at.as_tensor(a), dtype=dtype)


from . import linalg  # noqa: E402,F401  (numpy.linalg's names: inv, solve, det, ...)


def __getattr__(name):
    raise AttributeError(f"autotape.numpy has no {name!r} (numpy.{name} is not supported "
                         "on Tensors yet)")
