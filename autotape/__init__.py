"""autotape: reverse-mode automatic differentiation on a flat tape, with every sweep
compiled by numba. Semantics follow torch.autograd; the op namespace follows numpy.

>>> import autotape as at
>>> x = at.tensor([5.0, 3.0], requires_grad=True)
>>> y = at.sin(x) * x + x ** 2
>>> at.grad(y.sum(), x)
(tensor([10.45938665,  3.17114252]),)

This module re-exports the public names; ARCHITECTURE.md says where each lives.
"""
import importlib as _importlib

import numpy as np

from . import memory  # noqa: F401  (freed memory is kept for reuse: see memory.py)
from . import tensor_methods  # noqa: F401  (attaches Tensor's operators and methods)
from . import autograd, fft, func, integrate, linalg, warmup  # noqa: F401  (warmup: the background one)
from . import device_tensors  # noqa: F401  (device tensors: at.tensor(..., device='cuda'))
from .complex_numbers import (ComplexTensor, angle, complex, conj, conjugate, imag, is_complex,
                              iscomplexobj, isrealobj, real, view_as_complex, view_as_real)
from .compile import Compiled, compile
from .custom import CustomOp, checkpoint, custom_op
from .creation import (arange, eye, full, full_like, manual_seed, ones, ones_like, rand,
                       rand_like, randn, randn_like, tensor, zeros, zeros_like)
from .engine import backward, grad
from .functions.calculus import *  # noqa: F401,F403
from .functions.mathfuncs import *  # noqa: F401,F403
from .functions.products import *  # noqa: F401,F403
from .functions.shaping import *  # noqa: F401,F403
from .functions.stacking import *  # noqa: F401,F403
from .functions.statistics import *  # noqa: F401,F403
from .functions import (calculus as _calculus, mathfuncs as _mathfuncs, products as _products,
                        shaping as _shaping, stacking as _stacking, statistics as _statistics)
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .jit import Jit, jit
from .ops.elementwise import (abs, add, arccos, arccosh, arcsin, arcsinh, arctan, arctan2,
                              arctanh, binary_ops as _binary_ops, ceil, clip, cos, cosh,
                              divide, equal, erf, exp, exp2, expm1, floor, fmod, greater,
                              greater_equal, hypot, less, less_equal, log, log1p, log2,
                              log10, logaddexp, maximum, minimum, mod, multiply, negative,
                              not_equal, power, reciprocal, relu, round, sigmoid, sign, sin,
                              sinh, softplus, sqrt, square, subtract, tan, tanh,
                              unary_ops as _unary_ops, where)
from .ops.indexing import (as_tensor, astype, broadcast_to, concatenate, reshape, stack,
                           transpose)
from .ops.linalg import matmul
from .ops.reduce import amax, amin, cumprod, cumsum, max, mean, min, prod, sum
from .ops.subscript import OUT_NAMES as _OUT_NAMES, with_out as _with_out
from .parallel import get_num_threads, set_num_threads
from .tensor import Tensor, complex_aware as _complex_aware
from .torch_names import *  # noqa: F401,F403
from . import torch_names as _torch_names

__version__ = "0.1.0"

# dtype names as torch spells them (numpy's types: at.float32 == np.float32)
float32, float64, int32, int64 = np.float32, np.float64, np.int32, np.int64
globals().update({"float": np.float32, "double": np.float64, "long": np.int64,
                  "bool": np.bool_})

__all__ = [
    "Tensor", "tensor", "as_tensor", "zeros", "ones", "zeros_like", "ones_like", "full",
    "eye", "arange", "manual_seed", "rand", "randn", "full_like", "rand_like", "randn_like",
    "autograd",
    "float32", "float64", "int32", "int64", "set_num_threads", "get_num_threads",
    "grad", "backward", "custom_op", "CustomOp", "checkpoint", "gradcheck", "gradgradcheck", "GradcheckError", "no_grad",
    "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "where", "clip", "sum", "mean", "max", "min", "amax", "amin", "prod", "cumsum", "cumprod",
    "matmul", "reshape", "transpose", "astype",
    "broadcast_to", "stack", "concatenate", "compile", "Compiled", "jit", "Jit",
    "fft", "ComplexTensor", "complex", "view_as_real", "view_as_complex", "is_complex",
    "iscomplexobj", "isrealobj", "real", "imag", "conj", "conjugate", "angle",
] + _statistics.__all__ + _shaping.__all__ + _products.__all__ + _calculus.__all__ + \
    _mathfuncs.__all__ + _stacking.__all__ + [
    op.name for op in _unary_ops.values()] + [op.name for op in _binary_ops.values()] + \
    _torch_names.__all__

# numpy's and torch's out= on the public functions (operators and methods call the op
# table's own functions, without it)
for _name in _OUT_NAMES + _torch_names.WITH_OUT:
    globals()[_name] = _with_out(globals()[_name], _name)

# complex operands of the public functions go to their complex implementations (the
# elementwise ops of the table do that themselves, without a wrapper on their hot path)
_TRANSFORMS = {"compile", "jit", "grad", "backward", "checkpoint", "custom_op", "gradcheck",
               "gradgradcheck", "set_grad_enabled", "manual_seed", "set_num_threads"}
_elementwise_names = {op.name for op in list(_unary_ops.values()) + list(_binary_ops.values())}
for _name in __all__:
    _fn = globals()[_name]
    if callable(_fn) and not isinstance(_fn, type) and _name not in _elementwise_names \
            and getattr(_fn, "__module__", "").startswith("autotape.") \
            and "complex_numbers" not in _fn.__module__ and _name not in _TRANSFORMS:
        globals()[_name] = _complex_aware(_fn, _name)
del _name, _fn, _elementwise_names


def __getattr__(name):
    """``at.sparse`` and ``at.implicit`` (they need scipy, which autotape does not):
    imported at first use, so ``at.implicit.root`` works without importing it first."""
    if name in ("sparse", "implicit"):
        return _importlib.import_module(f"autotape.{name}")   # (optional: on demand)
    raise AttributeError(f"module 'autotape' has no attribute {name!r}")
