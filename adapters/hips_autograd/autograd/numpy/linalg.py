"""autograd.numpy.linalg for the adapter: autotape.linalg, numpy.linalg for the rest."""
import numpy as _onp

import autotape.linalg as _linalg
from . import _wrap


def __getattr__(name):
    if name in _linalg.__all__:
        return _wrap(getattr(_linalg, name))
    return getattr(_onp.linalg, name)
