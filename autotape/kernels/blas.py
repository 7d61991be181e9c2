"""BLAS from compiled code, without SciPy: numpy's wheels ship OpenBLAS, and its CBLAS
``dgemm`` is called from the sweep through a function pointer passed in as an integer
(an address baked into the code would not survive numba's on-disk cache).

Only ILP64 CBLAS symbols (64-bit integers) are used; where none is found the sweep
falls back to its own loops.
"""
import ctypes
import glob
import os

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_SYMBOLS = ("scipy_cblas_dgemm64_", "cblas_dgemm64_")
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _find_dgemm():
    root = os.path.dirname(np.__file__)
    candidates = glob.glob(os.path.join(root, "..", "numpy.libs", "*openblas*")) + \
        glob.glob(os.path.join(root, ".libs", "*openblas*"))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _SYMBOLS:
            fn = getattr(lib, name, None)
            if fn is not None:
                return ctypes.cast(fn, ctypes.c_void_p).value, lib
    return 0, None


DGEMM, _LIBRARY = _find_dgemm()      # keep the library loaded
_SET_THREADS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                "openblas_set_num_threads")


def set_blas_threads(n):
    """Limit numpy's OpenBLAS to n threads; False where its library has no such call."""
    for name in _SET_THREADS:
        fn = getattr(_LIBRARY, name, None) if _LIBRARY is not None else None
        if fn is not None:
            fn.argtypes, fn.restype = [ctypes.c_int], None
            fn(int(n))
            return True
    return False


@intrinsic
def cblas_dgemm(typingctx, fn, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc):
    """C (row-major, m x n) = alpha op(A) op(B) + beta C, by the dgemm at address fn."""
    sig = types.void(types.int64, types.int64, types.int64, types.int64, types.int64,
                     types.int64, types.float64, types.int64, types.int64, types.int64,
                     types.int64, types.float64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i32, i64, f64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
        p64 = f64.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, f64, p64, i64,
                                               p64, i64, f64, p64, i64])
        (fn_, ta, tb, m_, n_, k_, al, a_, lda_, b_, ldb_, be, c_, ldc_) = args
        ptr = builder.inttoptr(fn_, fnty.as_pointer())
        builder.call(ptr, [ir.Constant(i32, ROW_MAJOR), builder.trunc(ta, i32),
                           builder.trunc(tb, i32), m_, n_, k_, al,
                           builder.inttoptr(a_, p64), lda_, builder.inttoptr(b_, p64), ldb_,
                           be, builder.inttoptr(c_, p64), ldc_])
        return context.get_dummy_value()
    return sig, codegen
