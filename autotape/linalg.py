"""numpy.linalg on Tensors: inv, solve, det, slogdet, cholesky, eigh (and norm).

Values come from numpy (LAPACK); each function is one op-table entry whose VJP is a
few matrix products with values saved when it was recorded (ops/linalg.py), so the
sweep needs no LAPACK of its own. All act on the last two axes, batched over the rest.

>>> a = at.tensor([[2.0, 1.0], [1.0, 3.0]], requires_grad=True)
>>> at.grad(at.linalg.det(a), a)          # the cofactor matrix
(tensor([[ 3., -1.],
        [-1.,  2.]]),)
"""
from collections import namedtuple

import numpy as np

from .composite import _exp, norm  # noqa: F401  (norm: numpy.linalg's name)
from .ops import codes
from .record import _record_op, broadcast_to, reshape
from .tensor import F64, _array_value, _plain, as_tensor

__all__ = ["inv", "solve", "det", "slogdet", "cholesky", "eigh", "norm"]

SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")
EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")


def _square(a, name):
    a = as_tensor(a)
    if a.ndim < 2:
        raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be at "
                                    "least two-dimensional")
    if a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    if a.dtype.kind != "f":
        a = a.astype(F64)
    return a


def inv(a):
    """The inverse of each square matrix (numpy.linalg.inv); dA = -Z^T G Z^T.

    >>> at.linalg.inv(at.tensor([[2.0, 0.0], [0.0, 4.0]]))
    tensor([[0.5 , 0.  ],
            [0.  , 0.25]])
    """
    a = _square(a, "inv")
    return _record_op(codes.INV, np.linalg.inv(_array_value(a)), a)


def solve(a, b):
    """x with a @ x = b (numpy 2's rule: b is a vector only when 1-D); batch axes
    broadcast. dB = A^-T G, dA = -dB X^T, with A^-1 saved when recorded.

    >>> at.linalg.solve(at.tensor([[2.0, 0.0], [0.0, 4.0]]), at.tensor([1.0, 1.0]))
    tensor([0.5 , 0.25])
    """
    a, b = _square(a, "solve"), as_tensor(b)
    vector = b.ndim == 1
    if vector:
        b = reshape(b, (b.shape[0], 1))
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = broadcast_to(a, batch + a.shape[-2:]) if a.shape[:-2] != batch else a
    b = broadcast_to(b, batch + b.shape[-2:]) if b.shape[:-2] != batch else b
    av = _array_value(a)
    x = np.linalg.solve(av, _array_value(b))
    out = _record_op(codes.SOLVE, x, a, b, aux=lambda: np.swapaxes(np.linalg.inv(av), -1, -2))
    return reshape(out, out.shape[:-1]) if vector else out


def slogdet(a):
    """(sign, log|det|) of each square matrix; sign is a constant, the gradient of
    log|det| is A^-T (saved when recorded). A singular matrix gives log|det| = -inf
    and a NaN gradient (torch returns the adjugate there).

    >>> at.linalg.slogdet(at.tensor([[0.0, 2.0], [1.0, 0.0]]))
    SlogdetResult(sign=tensor(-1.), logabsdet=tensor(0.69314718))
    """
    a = _square(a, "slogdet")
    av = _array_value(a)
    sign, logabsdet = np.linalg.slogdet(av)
    aux = None
    if np.all(np.isfinite(logabsdet)):
        aux = lambda: np.swapaxes(np.linalg.inv(av), -1, -2)          # noqa: E731
    else:
        aux = lambda: np.full(av.shape, np.nan)                        # noqa: E731
    lad = _record_op(codes.SLOGDET, logabsdet, a, aux=aux)
    sign = np.asarray(sign, a.dtype)
    return SlogdetResult(_plain(float(sign) if sign.ndim == 0 else sign, sign.shape,
                                a.dtype), lad)


def det(a):
    """The determinant, sign * exp(log|det|): its gradient is det * A^-T (see slogdet
    for singular matrices).

    >>> at.linalg.det(at.tensor([[2.0, 1.0], [1.0, 3.0]]))
    tensor(5.)
    """
    sign, logabsdet = slogdet(a)
    return sign * _exp(logabsdet)


def cholesky(a):
    """The lower Cholesky factor L of each symmetric positive-definite matrix. As in
    numpy, only the lower triangle of A is read, and the gradient is exactly that of
    this function: zero above the diagonal (see ops/linalg.py).

    >>> at.linalg.cholesky(at.tensor([[4.0, 2.0], [2.0, 2.0]]))
    tensor([[2., 0.],
            [1., 1.]])
    """
    a = _square(a, "cholesky")
    factor = np.linalg.cholesky(_array_value(a))
    return _record_op(codes.CHOLESKY, factor, a, aux=lambda: np.linalg.inv(factor))


def eigh(a, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of each symmetric matrix, as
    numpy.linalg.eigh, which reads the ``UPLO`` triangle of A only; the gradient is
    that function's (zero in the other triangle). It assumes distinct eigenvalues (it
    divides by their gaps). Functions of the eigenvectors should not depend on their
    signs, which are arbitrary.

    >>> at.linalg.eigh(at.tensor([[2.0, 0.0], [0.0, 1.0]])).eigenvalues
    tensor([1., 2.])
    """
    a = _square(a, "eigh")
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    w, v = np.linalg.eigh(_array_value(a), UPLO)
    n = a.shape[-1]
    packed = np.concatenate([v, w[..., None, :]], axis=-2)     # (..., n + 1, n)
    z = _record_op(codes.EIGH, packed, a, params=(int(UPLO == "U"),))
    return EighResult(z[..., n, :], z[..., :n, :])


def eigvalsh(a, UPLO="L"):
    """The eigenvalues of eigh, with its gradient.

    >>> at.linalg.eigvalsh(at.tensor([[1.0, 1.0], [1.0, 1.0]]))
    tensor([0., 2.])
    """
    return eigh(a, UPLO).eigenvalues


__all__ += ["eigvalsh"]
