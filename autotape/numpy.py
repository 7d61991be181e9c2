"""autotape.numpy: numpy's names for autotape's functions.

    import autotape.numpy as anp
    y = anp.sum(anp.sin(x) * x, axis=0)

Every function takes Tensors, numpy arrays and Python numbers, follows numpy's
signature, broadcasting and dtype rules, and records when an argument requires grad.
A numpy name autotape does not provide raises AttributeError naming it.
"""
import numpy as _np

from . import fft, linalg  # noqa: F401  (numpy.fft's and numpy.linalg's names)
from .complex_numbers import (angle, conj, conjugate, imag, iscomplexobj,  # noqa: F401
                              isrealobj, real)
from . import tensor_methods  # noqa: F401  (Tensor's operators and methods)
from .creation import arange, eye, full, ones, zeros  # noqa: F401
from .creation import tensor as _tensor
from .functions.calculus import *  # noqa: F401,F403
from .functions.mathfuncs import *  # noqa: F401,F403
from .functions.products import *  # noqa: F401,F403
from .functions.shaping import *  # noqa: F401,F403
from .functions.stacking import *  # noqa: F401,F403
from .functions.statistics import *  # noqa: F401,F403
from .numpy_dispatch import FUNCTIONS as _FUNCTIONS, PREDICATES as _PREDICATES
from .ops import elementwise as _elementwise
from .ops.indexing import as_tensor as _as_tensor
from .ops.subscript import OUT_NAMES as _OUT_NAMES, with_out as _with_out
from .ops.indexing import broadcast_to, concatenate, reshape, stack, transpose  # noqa: F401
from .ops.elementwise import clip, where  # noqa: F401
from .ops.linalg import matmul  # noqa: F401
from .ops.reduce import amax, amin, cumprod, cumsum, max, mean, min, prod, sum  # noqa: F401
from .tensor import Tensor as _Tensor, complex_aware as _complex_aware, holds_tensor as _holds_tensor

for _op in list(_elementwise.unary_ops.values()) + list(_elementwise.binary_ops.values()):
    globals()[_op.name] = getattr(_elementwise, _op.name)   # numpy's names, as the table's
absolute = _elementwise.abs
remainder = _elementwise.mod
true_divide = _elementwise.divide
for _name in _OUT_NAMES + ("absolute", "remainder", "true_divide"):     # numpy's out=
    globals()[_name] = _with_out(globals()[_name], _name)
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, _np.newaxis


def array(object, dtype=None):
    """numpy.array. Nested lists that hold Tensors are stacked on the tape, so
    ``array([x, 2 * x])`` keeps its gradient (``at.tensor`` would copy the values)."""
    if isinstance(object, (list, tuple)) and _holds_tensor(object):
        t = _as_tensor(object)
        return t if dtype is None else t.astype(dtype)
    if isinstance(object, _Tensor):
        return object if dtype is None else object.astype(dtype)
    return _tensor(object, dtype=dtype)


asarray = array


# numpy's own dispatch table serves the names it covers that are not defined above
# (zeros_like, copy, ...), and predicates return plain numpy results.
for _fn, _impl in _FUNCTIONS.items():
    globals().setdefault(_fn.__name__, _impl)
for _fn in _PREDICATES:
    globals().setdefault(_fn.__name__, _fn)


# complex operands go to the complex implementation of the same name (the elementwise
# ops of the table do that themselves, off their hot path)
_elementwise_names = {op.name for op in list(_elementwise.unary_ops.values()) +
                      list(_elementwise.binary_ops.values())}
for _name, _fn in list(globals().items()):
    if callable(_fn) and not isinstance(_fn, type) and not _name.startswith("_") and \
            _name not in _elementwise_names and \
            getattr(_fn, "__module__", "").startswith("autotape.") and \
            "complex_numbers" not in _fn.__module__:
        globals()[_name] = _complex_aware(_fn, _name)
del _name, _fn


def __getattr__(name):
    raise AttributeError(f"autotape.numpy has no {name!r} (numpy.{name} is not supported "
                         "on Tensors yet)")
