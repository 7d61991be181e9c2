"""numpy.linalg on complex matrices: solve, inv, det, eig, eigvals, eigh, eigvalsh, svd
and norm, batched over leading axes, each a primitive (ops.py): LAPACK's values through
numpy, and a VJP of a few matrix products written with complex ops (so it is
differentiated again). The formulas are torch's (FunctionsManual: linalg_eig_backward,
svd_backward), in its convention: for a real loss, dL/dx + i dL/dy.

A decomposition's outputs travel as one packed complex array (eigenvectors and
eigenvalues as one more row; U, S and V as rows) and are unpacked by indexing, so each
decomposition is one recorded op.

>>> a = at.tensor([[2.0, 1j], [-1j, 3.0]])
>>> at.linalg.eigvalsh(a)
tensor([1.38196601, 3.61803399])
"""
from collections import namedtuple

import numpy as np

from ..functions.statistics import norm as real_norm
from ..ops import reduce as real_reduce
from ..ops.linalg import EighResult, SVDResult
from . import ops
from .ops import (absolute, as_complex, conj, divide, matmul, multiply, primitive, real,
                  subtract, sum_to)
from .tensor import ComplexTensor

EigResult = namedtuple("EigResult", ["eigenvalues", "eigenvectors"])


def mH(a):
    """The conjugate transpose of the last two axes."""
    return conj(ops.SHAPING["swapaxes"](a, -1, -2))


def _diag_embed(d):
    """A batch of diagonal matrices from a batch of diagonals (..., n)."""
    n = d.shape[-1]
    return multiply(ops.expand_dims(d, -1) if isinstance(d, ComplexTensor) else d[..., None],
                    np.eye(n))


def _diagonal(a):
    return ops.diagonal(a, 0, -2, -1)


def _real_of(v):
    return real(v) if isinstance(v, ComplexTensor) else v


# ---- solve, inv, det ----------------------------------------------------------------------

def _vector_rhs(a, b):
    """numpy 2's rule: b is a vector only when it is 1-D."""
    return b.ndim == 1


def _solve_grad_b(g, x, a, b):
    if _vector_rhs(a, b):
        return sum_to(ops.reshape(solve(mH(a), ops.expand_dims(g, -1)), g.shape), b.shape)
    return sum_to(solve(mH(a), g), b.shape)


def _solve_grad_a(g, x, a, b):
    gb = solve(mH(a), ops.expand_dims(g, -1) if _vector_rhs(a, b) else g)
    xs = ops.expand_dims(x, -1) if _vector_rhs(a, b) else x
    return sum_to(-1.0 * matmul(gb, mH(xs)), a.shape)


_solve = primitive("linalg.solve", np.linalg.solve, (
    lambda g, x, a, b: _solve_grad_a(g, x, a, b),
    lambda g, x, a, b: _solve_grad_b(g, x, a, b)), kinds="aa")
_inv = primitive("linalg.inv", np.linalg.inv, (
    lambda g, y, a: -1.0 * matmul(mH(y), matmul(g, mH(y))),), kinds="a")
_det = primitive("linalg.det", np.linalg.det, (
    lambda g, d, a: multiply(ops.expand_dims(ops.expand_dims(ops.multiply_conj(g, d), -1), -1),
                             mH(inv(a))),), kinds="a")


def solve(a, b):
    """x with a @ x = b, for complex a or b.

    >>> at.linalg.solve(at.tensor([[2j]]), at.tensor([4.0]))
    tensor([0.-2.j])
    """
    return _solve(a, b)


def inv(a):
    """The inverse of a complex matrix.

    >>> at.linalg.inv(at.tensor([[2j]]))
    tensor([[0.-0.5j]])
    """
    return _inv(a)


def det(a):
    """The determinant of a complex matrix: g conj(det) inv(a)^H is its VJP.

    >>> at.linalg.det(at.tensor([[2j, 0.0], [0.0, 1j]]))
    tensor(-2.+0.j)
    """
    return _det(a)


# ---- eigh, eig ---------------------------------------------------------------------------

def _packed_eig(fn):
    """(..., n + 1, n): the eigenvectors, then a row of the eigenvalues."""
    def forward(a):
        w, v = fn(a)
        return np.concatenate([v, w[..., None, :].astype(v.dtype)], axis=-2)
    return forward


def _unpacked(p):
    n = p.shape[-1]
    return p[..., n, :], p[..., :n, :]


def _eigh_grad(g, p, a):
    """torch's linalg_eig_backward, Hermitian: V (diag(gw) + skew(V^H gV) / E) V^H,
    E_ij = w_j - w_i."""
    w, v = _unpacked(p)
    gw, gv = _unpacked(g)
    w = real(w)
    vhgv = matmul(mH(v), gv)
    vhgv = multiply(subtract(vhgv, mH(vhgv)), 0.5)
    e = w[..., None, :] - w[..., :, None]
    n = w.shape[-1]
    e = e + np.eye(n)                          # (the diagonal is replaced below)
    inner = divide(vhgv, e) * (1.0 - np.eye(n)) + _diag_embed(real(gw))
    return matmul(v, matmul(inner, mH(v)))


def _eig_grad(g, p, a):
    """torch's linalg_eig_backward: V^-H (diag(gw) + (V^H gV - V^H V diag(Re(diag(V^H
    gV)))) / conj(E)) V^H, E_ij = w_j - w_i."""
    w, v = _unpacked(p)
    gw, gv = _unpacked(g)
    n = w.shape[-1]
    vhgv = matmul(mH(v), gv)
    diag_re = real(_diagonal(vhgv))
    vhgv = subtract(vhgv, matmul(mH(v), multiply(v, ops.expand_dims(diag_re, -2))))
    e = conj(subtract(ops.expand_dims(w, -2), ops.expand_dims(w, -1)))
    e = ops.add(e, np.eye(n))
    inner = ops.add(multiply(divide(vhgv, e), 1.0 - np.eye(n)), _diag_embed(gw))
    return sum_to(solve(mH(v), matmul(inner, mH(v))), a.shape)


def _hermitian(a, UPLO):
    """The Hermitian matrix numpy's eigh reads from one triangle of a (and the real
    parts of its diagonal): a differentiable op, so the gradient reaches only that
    triangle, as the values depend on only it."""
    n = a.shape[-1]
    lower = np.tril(np.ones((n, n)), -1)
    if UPLO == "U":
        lower = lower.T
    strict = multiply(a, lower)
    return ops.add(ops.add(strict, mH(strict)), _diag_embed(real(_diagonal(a))))


_eigh = primitive("linalg.eigh", _packed_eig(np.linalg.eigh), (_eigh_grad,))
_eig = primitive("linalg.eig", _packed_eig(np.linalg.eig), (_eig_grad,), kinds="a")


def eigh(a, UPLO="L"):
    """Eigenvalues (real, ascending) and eigenvectors of a Hermitian matrix, read from
    its lower (or upper) triangle.

    >>> at.linalg.eigh(at.tensor([[2.0, 1j], [-1j, 2.0]])).eigenvalues
    tensor([1., 3.])
    """
    w, v = _unpacked(_eigh(_hermitian(as_complex(a), UPLO)))
    return EighResult(real(w), v)


def eigvalsh(a, UPLO="L"):
    """The eigenvalues of a Hermitian matrix.

    >>> at.linalg.eigvalsh(at.tensor([[2.0, 1j], [-1j, 2.0]]))
    tensor([1., 3.])
    """
    return eigh(a, UPLO).eigenvalues


def eig(a):
    """Eigenvalues and (unit) eigenvectors of a square matrix, real or complex: complex
    results. A loss must not depend on each eigenvector's phase (numpy fixes it
    arbitrarily), as torch requires.

    >>> at.linalg.eig(at.tensor([[0.0, 1.0], [-1.0, 0.0]])).eigenvalues
    tensor([0.+1.j, 0.-1.j])
    """
    w, v = _unpacked(_eig(a))
    return EigResult(w, v)


def eigvals(a):
    """The eigenvalues of a square matrix (complex).

    >>> at.linalg.eigvals(at.tensor([[0.0, 1.0], [-1.0, 0.0]]))
    tensor([0.+1.j, 0.-1.j])
    """
    return eig(a).eigenvalues


# ---- svd ---------------------------------------------------------------------------------

def _packed_svd(a):
    """(..., m + 1 + n, k): U, then a row of S, then V (= Vh^H... as Vh^T)."""
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.concatenate([u, s[..., None, :].astype(u.dtype), np.swapaxes(vh, -1, -2)],
                          axis=-2)


def _svd_parts(p, m):
    return p[..., :m, :], p[..., m, :], ops.SHAPING["swapaxes"](p[..., m + 1:, :], -1, -2)


def _svd_grad(g, p, a):
    """torch's svd_backward (reduced SVD, complex)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, vh = _svd_parts(p, m)
    gu, gs, gvh = _svd_parts(g, m)
    s = real(s)
    v, gv = mH(vh), mH(gvh)
    uhgu = matmul(mH(u), gu)
    uhgu = subtract(uhgu, mH(uhgu))
    vhgv = matmul(mH(v), gv)
    vhgv = subtract(vhgv, mH(vhgv))
    s2 = s * s
    e = s2[..., None, :] - s2[..., :, None] + np.eye(k)
    inner = divide(ops.add(multiply(uhgu, s[..., None, :]), multiply(vhgv, s[..., :, None])), e)
    inner = multiply(inner, 1.0 - np.eye(k))
    inner = ops.add(inner, _diag_embed(real(gs)))
    inner = ops.add(inner, _diag_embed(divide(_diagonal(uhgu), 2.0 * s)))   # (the phase term)
    if m > k:
        ga = matmul(u, inner)
        gus = divide(gu, s[..., None, :])
        ga = ops.add(ga, subtract(gus, matmul(u, matmul(mH(u), gus))))
        return matmul(ga, vh)
    if n > k:
        ga = matmul(inner, vh)
        gvs = divide(gv, s[..., None, :])
        ga = ops.add(ga, subtract(mH(gvs), matmul(matmul(mH(gvs), v), vh)))
        return matmul(u, ga)
    return matmul(u, matmul(inner, vh))


_svd = primitive("linalg.svd", _packed_svd, (_svd_grad,), kinds="c")


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """The singular value decomposition of a complex matrix: U, S (real, descending),
    Vh. Its gradient needs ``full_matrices=False`` where the matrix is not square (as
    torch's), and a loss that does not depend on the singular vectors' phases.

    >>> at.linalg.svd(at.tensor([[3j, 0.0], [0.0, 1.0]]), compute_uv=False)
    tensor([3., 1.])
    """
    a = as_complex(a)
    m, n = a.shape[-2:]
    if full_matrices and compute_uv and m != n:
        raise RuntimeError("linalg.svd of a complex matrix that is not square: "
                           "full_matrices=True has no gradient (the extra singular "
                           "vectors are arbitrary); use full_matrices=False, as torch "
                           "asks")
    u, s, vh = _svd_parts(_svd(a), m)
    s = real(s)
    return SVDResult(u, s, vh) if compute_uv else s


# ---- norm ---------------------------------------------------------------------------------

def norm(x, ord=None, axis=None, keepdims=False):
    """numpy.linalg.norm of a complex array: the norms that depend on the numbers'
    magnitudes only are those of abs(x); the nuclear and spectral norms of matrices
    come from the singular values.

    >>> at.linalg.norm(at.tensor([3j, 4.0]))
    tensor(5.)
    """
    x = as_complex(x)
    matrix = (axis is None and x.ndim == 2) or (isinstance(axis, tuple) and len(axis) == 2)
    if matrix and ord in ("nuc", 2, -2):
        axes = (0, 1) if axis is None else tuple(a % x.ndim for a in axis)
        moved = ops.SHAPING["moveaxis"](x, axes, (-2, -1))
        s = svd(moved, full_matrices=False, compute_uv=False)
        out = real_reduce.sum(s, axis=-1) if ord == "nuc" else (
            real_reduce.amax(s, axis=-1) if ord == 2 else real_reduce.amin(s, axis=-1))
        if keepdims:
            for a in sorted(axes):
                out = out[(slice(None),) * a + (None,)]
        return out
    return real_norm(absolute(x), ord=ord, axis=axis, keepdims=keepdims)


FUNCTIONS = {f"linalg.{fn.__name__}": fn for fn in (solve, inv, det, eigh, eigvalsh, eig,
                                                    eigvals, svd, norm)}
