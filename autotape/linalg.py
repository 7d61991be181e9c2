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
from .tensor import complex_aware, complex_call

__all__ = ["inv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "norm", "svd",
           "qr", "pinv", "lstsq", "matrix_power", "eig", "eigvals", "SlogdetResult",
           "EighResult", "SVDResult", "QRResult", "LstsqResult"]

# complex matrices go to complex_numbers/linalg.py (solve, inv, det, eigh, eigvalsh, svd,
# norm); the others refuse them by name
(inv, solve, det, slogdet, cholesky, eigh, eigvalsh, norm, svd, qr, pinv, lstsq,
 matrix_power) = (complex_aware(fn, f"linalg.{fn.__name__}") for fn in (
    inv, solve, det, slogdet, cholesky, eigh, eigvalsh, norm, svd, qr, pinv, lstsq,
    matrix_power))


def eig(a):
    """Eigenvalues and eigenvectors of a square matrix, real or complex (complex
    results: autotape's complex numbers, complex_numbers/linalg.py).

    >>> at.linalg.eig(at.tensor([[2.0, 0.0], [0.0, 3.0]])).eigenvalues
    tensor([2.+0.j, 3.+0.j])
    """
    return complex_call("linalg.eig", a)


def eigvals(a):
    """The eigenvalues of a square matrix (complex).

    >>> at.linalg.eigvals(at.tensor([[2.0, 0.0], [0.0, 3.0]]))
    tensor([2.+0.j, 3.+0.j])
    """
    return complex_call("linalg.eigvals", a)
