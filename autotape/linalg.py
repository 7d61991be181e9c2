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
from .guards import observe
from .ops import codes
from .record import _record_op, broadcast_to, reshape
from .tensor import F64, _array_value, _plain, as_tensor

__all__ = ["inv", "solve", "det", "slogdet", "cholesky", "eigh", "norm"]

SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")
EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")


# What each op computes from its operands' values: (value, auxiliary value saved for
# the VJP or None). The functions below record these; a compiled replay of a tape
# (compile.py) recomputes its numpy.linalg rows with them.

def _inverse_t(av):
    return np.swapaxes(np.linalg.inv(av), -1, -2)


def _slogdet_values(av):
    logabsdet = np.linalg.slogdet(av)[1]
    aux = _inverse_t(av) if np.all(np.isfinite(logabsdet)) else np.full(av.shape, np.nan)
    return logabsdet, aux


def _cholesky_values(av):
    factor = np.linalg.cholesky(av)
    return factor, np.linalg.inv(factor)


def _eigh_values(av, upper):
    w, v = np.linalg.eigh(av, "U" if upper else "L")
    return np.concatenate([v, w[..., None, :]], axis=-2), None     # (..., n + 1, n)


values_of = {
    codes.INV: lambda av, bv, p: (np.linalg.inv(av), None),
    codes.SOLVE: lambda av, bv, p: (np.linalg.solve(av, bv), _inverse_t(av)),
    codes.SLOGDET: lambda av, bv, p: _slogdet_values(av),
    codes.CHOLESKY: lambda av, bv, p: _cholesky_values(av),
    codes.EIGH: lambda av, bv, p: _eigh_values(av, p[0] != 0),
}


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
    out = _record_op(codes.SOLVE, x, a, b, aux=lambda: _inverse_t(av))
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
    lad = _record_op(codes.SLOGDET, logabsdet, a, aux=lambda: _slogdet_values(av)[1])
    sign = np.asarray(observe(lambda v: np.linalg.slogdet(v)[0], a) if lad.requires_grad
                      else sign, a.dtype)                         # a decision (guards.py)
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
    factor, factor_inv = _cholesky_values(_array_value(a))
    return _record_op(codes.CHOLESKY, factor, a, aux=lambda: factor_inv)


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
    packed, _ = _eigh_values(_array_value(a), UPLO == "U")
    n = a.shape[-1]
    z = _record_op(codes.EIGH, packed, a, params=(int(UPLO == "U"),))
    return EighResult(z[..., n, :], z[..., :n, :])


def eigvalsh(a, UPLO="L"):
    """The eigenvalues of eigh, with its gradient.

    >>> at.linalg.eigvalsh(at.tensor([[1.0, 1.0], [1.0, 1.0]]))
    tensor([0., 2.])
    """
    return eigh(a, UPLO).eigenvalues


__all__ += ["eigvalsh"]
