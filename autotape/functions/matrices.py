"""numpy.linalg's functions composed of table ops: qr (Householder reflections, as
LAPACK's geqrf computes them), lstsq (through pinv), matrix_power. They
have no derivative rules of their own: the chain rule through their ops gives them, to
any order."""
from collections import namedtuple

import numpy as np

from ..guards import observe
from ..ops.elementwise import sqrt, where
from ..ops.indexing import as_tensor, concatenate, reshape
from ..ops.linalg import as_matrices, inv, matmul, pinv, svd
from ..ops.reduce import sum
from .shaping import triu

__all__ = ["qr", "lstsq", "matrix_power"]

QRResult = namedtuple("QRResult", "Q R")
QRResult.__doc__ = """``at.linalg.qr``'s result, as numpy's: ``(Q, R)``.

>>> q, r = at.linalg.qr(at.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 1.0]]))
>>> q.shape, r.shape
((3, 2), (2, 2))
"""
LstsqResult = namedtuple("LstsqResult", "x residuals rank s")
LstsqResult.__doc__ = """``at.linalg.lstsq``'s result, as numpy's: ``(x, residuals, rank, s)``.

>>> at.linalg.lstsq(at.eye(2), at.tensor([1.0, 2.0])).x
tensor([1., 2.])
"""


def qr(a, mode="reduced"):
    """numpy.linalg.qr (modes 'reduced', 'complete', 'r'), batched: A = Q R with the
    signs LAPACK gives. Computed by Householder reflections recorded as ops, so the
    gradient is exact wherever A has full column rank (at a rank-deficient A the
    factorization is not unique, nor is its derivative).

    >>> q, r = at.linalg.qr(at.tensor([[3.0, 1.0], [4.0, 2.0]]))
    >>> r
    tensor([[-5. , -2.2],
            [ 0. ,  0.4]])
    """
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"autotape's qr supports mode 'reduced', 'complete' and 'r', not "
                         f"{mode!r}")
    a = as_matrices(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    r = a
    q = as_tensor(np.broadcast_to(np.eye(m), batch + (m, m)))
    flips = []
    for j in range(k):
        x = r[..., j:, j]                                         # (..., m - j)
        alpha = x[..., 0]
        norm2 = sum(x * x, axis=-1)
        zero = observe(lambda v: v == 0, norm2)                   # a zero column: H = I
        # LAPACK reflects unless the part below the diagonal is exactly zero; reflecting
        # always and flipping the sign back there keeps the same values and a smooth map
        flips.append(observe(lambda x_: (np.sum(x_[..., 1:] ** 2, axis=-1) == 0) &
                             (x_[..., 0] != 0), x))
        s = where(observe(lambda v: v >= 0, alpha), 1.0, -1.0)
        norm = sqrt(where(zero, 1.0, norm2))
        beta = -s * norm
        head = alpha - beta
        v = concatenate([as_tensor(np.ones(batch + (1,))),
                         x[..., 1:] / head[..., None]], axis=-1)
        tau = where(zero, 0.0, (beta - alpha) / beta)
        block = r[..., j:, :]
        w = matmul(v[..., None, :], block)                        # (..., 1, n)
        block = block - (tau[..., None, None] * v[..., :, None]) * w
        r = concatenate([r[..., :j, :], block], axis=-2) if j else block
        qb = q[..., :, j:]
        q = concatenate([q[..., :, :j], qb - matmul(qb, v[..., :, None]) *
                         (tau[..., None, None] * v[..., None, :])], axis=-1) if j else \
            qb - matmul(qb, v[..., :, None]) * (tau[..., None, None] * v[..., None, :])
    sign = np.ones(batch + (m,))
    for j, f in enumerate(flips):
        sign[..., j] = np.where(f, -1.0, 1.0)
    rows = m if mode == "complete" else k
    r_out = triu(r[..., :rows, :] * sign[..., :rows, None])
    if mode == "r":
        return r_out
    q_out = q * sign[..., None, :]
    return QRResult(q_out if mode == "complete" else q_out[..., :, :k], r_out)


def _cutoff(s, rcond):
    """Where singular values count: above rcond times the largest (a decision)."""
    return observe(lambda v: v > rcond * np.max(v, axis=-1, keepdims=True), s)


def lstsq(a, b, rcond=None):
    """numpy.linalg.lstsq: ``(x, residuals, rank, s)`` minimising |a x - b|, x through
    the pseudo-inverse (singular values above ``rcond`` times the largest; numpy's
    default eps * max(m, n)). residuals are the squared residual norms when the rank is
    n and m > n (else empty), as numpy.

    >>> at.linalg.lstsq(at.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
    ...                 at.tensor([1.0, 2.0, 3.0])).x
    tensor([1., 2.])
    """
    a, b = as_matrices(a), as_tensor(b)
    if a.ndim != 2:
        raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be "
                                    "two-dimensional")
    m, n = a.shape
    if b.shape[0] != m:
        raise np.linalg.LinAlgError("Incompatible dimensions")
    if rcond is None:
        rcond = np.finfo(np.float64).eps * max(m, n)
    s = svd(a, compute_uv=False)
    vector = b.ndim == 1
    bm = reshape(b, (m, 1)) if vector else b
    x = matmul(pinv(a, rcond), bm)
    rank = int(np.sum(_cutoff(s, rcond)))
    if rank == n and m > n:
        resid = bm - matmul(a, x)
        residuals = sum(resid * resid, axis=0)
    else:
        residuals = as_tensor(np.zeros((0,)))
    return LstsqResult(reshape(x, (n,)) if vector else x, residuals, rank, s)


def matrix_power(a, n):
    """a raised to the integer power n by repeated squaring (n < 0: of the inverse;
    n = 0: the identity), batched.

    >>> at.linalg.matrix_power(at.tensor([[1.0, 1.0], [0.0, 1.0]]), 3)
    tensor([[1., 3.],
            [0., 1.]])
    """
    a = as_matrices(a)
    if a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    if not isinstance(n, (int, np.integer)):
        raise TypeError("exponent must be an integer")
    if n == 0:
        return as_tensor(np.broadcast_to(np.eye(a.shape[-1]), a.shape).copy())
    base = inv(a) if n < 0 else a
    n = abs(int(n))
    result = None
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result
