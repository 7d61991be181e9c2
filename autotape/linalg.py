"""autotape.linalg: numpy.linalg on Tensors (inv, solve, det, slogdet, cholesky, eigh,
eigvalsh, svd, qr, pinv, lstsq, matrix_power, norm), batched over leading axes. The ops are declared in ops/linalg.py
(values from numpy's LAPACK; each VJP a few matrix products, see there).

>>> a = at.tensor([[2.0, 1.0], [1.0, 3.0]], requires_grad=True)
>>> at.grad(at.linalg.det(a), a)          # the cofactor matrix
(tensor([[ 3., -1.],
        [-1.,  2.]]),)
"""
from .functions.matrices import LstsqResult, QRResult, lstsq, matrix_power, qr
from .functions.statistics import norm
from .ops.linalg import (EighResult, SlogdetResult, SVDResult, cholesky, det, eigh,
                         eigvalsh, inv, pinv, slogdet, solve, svd)

__all__ = ["inv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "norm", "svd",
           "qr", "pinv", "lstsq", "matrix_power", "SlogdetResult", "EighResult",
           "SVDResult", "QRResult", "LstsqResult"]
