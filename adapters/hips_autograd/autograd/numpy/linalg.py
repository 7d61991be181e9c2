"""autograd.numpy.linalg for the adapter: autotape.linalg, numpy.linalg for the rest."""
import numpy as _onp

import autotape.linalg as _linalg
import autotape.numpy as _anp
from . import _wrap


# autograd.numpy.linalg's own helpers, which its tests use
_dot = _wrap(_anp.matmul)
T = _wrap(lambda x: _anp.swapaxes(x, -1, -2))


def __getattr__(name):
    if name in _linalg.__all__:
        return _wrap(getattr(_linalg, name))
    return getattr(_onp.linalg, name)
