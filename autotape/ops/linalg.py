"""Linear algebra, Python tier: matmul and numpy.linalg's inv, solve, slogdet / det,
cholesky and eigh, with their recorders and create_graph rules. The compiled tier is
kernels/linalg.py; the public namespace is autotape.linalg.

Values come from numpy (LAPACK); each op's VJP is a few matrix products with values
saved when it was recorded, so the sweep needs no LAPACK of its own:
  inv      Z = A^-1              dA = -Z^T G Z^T
  slogdet  l = log|det A|        dA = g A^-T
  det      z = det A             dA = g cof(A)   (cofactors: = z A^-T, and at singular A)
  solve    X = A^-1 B            dB = A^-T G,  dA = -dB X^T
  cholesky A = L L^T             S = L^-T Phi(L^T G) L^-1, Phi: lower half, diagonal halved
  eigh     A = V diag(w) V^T     S = V (diag(g_w) + F o (V^T G_V)) V^T, F_ij = 1/(w_j - w_i)
  svd      A = U diag(s) Vh      see kernels/linalg.py (F_ij = 1/(s_j^2 - s_i^2))
  pinv     Z = A^+ (rank held)   dA = -Z^T G Z^T + (I - A Z) G^T Z Z^T + Z^T Z G^T (I - Z A)
S is the gradient for symmetric perturbations. cholesky and eigh read one triangle of
A only (numpy's rule), so dA is the exact gradient of that: S + S^T below the diagonal
(each entry there stands for two), S on it, zero in the triangle never read. All act
on the last two axes, batched over the rest.
"""
import warnings
from collections import namedtuple

import numpy as np

from ..grad_mode import is_grad_enabled
from ..guards import observe
from ..opcodes import CHOLESKY, DET, EIGH, INV, MATMUL, PINV, SLOGDET, SOLVE, SVD
from ..tape_format import (eigh_params, eigh_upper, pinv_params, pinv_rcond, saved_params,
                           saved_row, svd_dims, svd_params)
from ..tensor import F64, array_of, canonical, new_leaf
from .indexing import as_tensor, broadcast_to, reshape
from .recording import record

def matmul(x, y):
    """Matrix product with numpy's rules: 1-D operands, batch axes, broadcasting.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.grad(at.matmul(m, m).sum(), m)
    (tensor([[ 7., 11.],
            [ 9., 13.]]),)
    """
    x, y = as_tensor(x), as_tensor(y)
    return record(MATMUL, np.matmul(array_of(x), array_of(y)), x, y)


def _record(code, value, a, b=None, saved=None, params=None):
    """Record a numpy.linalg op; ``saved()``, if given, computes values the VJP reads
    (an inverse, say), kept in a constant row that the row's parameters name."""
    if saved is None:
        return record(code, value, a, b, params)

    def with_saved(tape):
        v = np.ascontiguousarray(saved(), F64)
        return saved_params(tape.const(v.reshape(-1), v.shape))
    return record(code, value, a, b, with_saved)


SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")
SlogdetResult.__doc__ = """``at.linalg.slogdet``'s result, as numpy's: ``(sign, logabsdet)``.

>>> at.linalg.slogdet(at.tensor([[2.0, 0.0], [0.0, 3.0]])).logabsdet
tensor(1.79175947)
"""
EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
EighResult.__doc__ = """``at.linalg.eigh``'s result, as numpy's: ``(eigenvalues, eigenvectors)``.

>>> at.linalg.eigh(at.tensor([[2.0, 0.0], [0.0, 1.0]])).eigenvalues
tensor([1., 2.])
"""
SVDResult = namedtuple("SVDResult", "U S Vh")
SVDResult.__doc__ = """``at.linalg.svd``'s result, as numpy's: ``(U, S, Vh)``.

>>> at.linalg.svd(at.tensor([[3.0, 0.0], [0.0, 4.0]])).S
tensor([4., 3.])
"""


# What each op computes from its operands' values: (value, auxiliary value saved for
# the VJP or None). The functions below record these; a compiled replay of a tape
# (compile.py) recomputes its numpy.linalg rows with them.

def _inverse_t(av):
    return np.swapaxes(np.linalg.inv(av), -1, -2)


def _slogdet_values(av):
    logabsdet = np.linalg.slogdet(av)[1]
    aux = _inverse_t(av) if np.all(np.isfinite(logabsdet)) else np.full(av.shape, np.nan)
    return logabsdet, aux


def cofactors(av):
    """The cofactor matrix of each square matrix (d det / dA), from its SVD A = U S Vh:
    det(U) det(Vh) U diag(prod_{j != i} s_j) Vh, so singular matrices get theirs too
    (det A * A^-T has no value there)."""
    u, s, vh = np.linalg.svd(av)
    n = s.shape[-1]
    others = np.ones(s.shape)
    for i in range(n):
        for j in range(n):
            if i != j:
                others[..., i] *= s[..., j]
    sign = np.linalg.det(u) * np.linalg.det(vh)
    return sign[..., None, None] * ((u * others[..., None, :]) @ vh)


def _det_values(av):
    return np.linalg.det(av), cofactors(av)


def _cholesky_values(av):
    factor = np.linalg.cholesky(av)
    return factor, np.linalg.inv(factor)


def _eigh_values(av, upper):
    w, v = np.linalg.eigh(av, "U" if upper else "L")
    return np.concatenate([v, w[..., None, :]], axis=-2), None     # (..., n + 1, n)


def _svd_values(av, full):
    """U, s and Vh of each matrix, flat and side by side: (..., m ku + k + kv n)."""
    u, sv, vh = np.linalg.svd(av, full_matrices=full)
    batch = av.shape[:-2]
    return np.concatenate([u.reshape(batch + (-1,)), sv, vh.reshape(batch + (-1,))],
                          axis=-1), None


values_of = {
    INV: lambda av, bv, p: (np.linalg.inv(av), None),
    SOLVE: lambda av, bv, p: (np.linalg.solve(av, bv), _inverse_t(av)),
    SLOGDET: lambda av, bv, p: _slogdet_values(av),
    DET: lambda av, bv, p: _det_values(av),
    CHOLESKY: lambda av, bv, p: _cholesky_values(av),
    EIGH: lambda av, bv, p: _eigh_values(av, p[0] != 0),
    SVD: lambda av, bv, p: _svd_values(av, p[2] != 0),
    PINV: lambda av, bv, p: (np.linalg.pinv(av, rcond=pinv_rcond(p)), None),
}


def as_matrices(a):
    """a as a float tensor of at least two axes (numpy.linalg's error otherwise)."""
    a = as_tensor(a)
    if a.ndim < 2:
        raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be at "
                                    "least two-dimensional")
    return a if a.dtype.kind == "f" else a.astype(F64)


def _square(a, name):
    a = as_matrices(a)
    if a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    return a


def inv(a):
    """The inverse of each square matrix (numpy.linalg.inv); dA = -Z^T G Z^T.

    >>> at.linalg.inv(at.tensor([[2.0, 0.0], [0.0, 4.0]]))
    tensor([[0.5 , 0.  ],
            [0.  , 0.25]])
    """
    a = _square(a, "inv")
    return _record(INV, np.linalg.inv(array_of(a)), a)


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
    av = array_of(a)
    x = np.linalg.solve(av, array_of(b))
    out = _record(SOLVE, x, a, b, saved=lambda: _inverse_t(av))
    return reshape(out, out.shape[:-1]) if vector else out


def slogdet(a):
    """(sign, log|det|) of each square matrix; sign is a constant, the gradient of
    log|det| is A^-T (saved when recorded). A singular matrix gives log|det| = -inf
    and a NaN gradient (torch returns the adjugate there).

    >>> at.linalg.slogdet(at.tensor([[0.0, 2.0], [1.0, 0.0]]))
    SlogdetResult(sign=tensor(-1.), logabsdet=tensor(0.69314718))
    """
    a = _square(a, "slogdet")
    av = array_of(a)
    sign, logabsdet = np.linalg.slogdet(av)
    lad = _record(SLOGDET, logabsdet, a, saved=lambda: _slogdet_values(av)[1])
    sign = np.asarray(observe(lambda v: np.linalg.slogdet(v)[0], a) if lad.requires_grad
                      else sign, a.dtype)                         # a decision (guards.py)
    return SlogdetResult(new_leaf(float(sign) if sign.ndim == 0 else sign, sign.shape,
                                a.dtype), lad)


def det(a):
    """The determinant of each square matrix. Its gradient is the cofactor matrix
    (det A * A^-T where A is invertible), saved when recorded: a singular matrix gets
    its true gradient too, as jax's (torch 2.13 gives zeros there). Derivatives of
    higher order are det A * A^-T's, so NaN at a singular matrix.

    >>> at.linalg.det(at.tensor([[2.0, 1.0], [1.0, 3.0]]))
    tensor(5.)
    >>> a = at.tensor([[1.0, 2.0], [2.0, 4.0]], requires_grad=True)
    >>> at.grad(at.linalg.det(a), a)
    (tensor([[ 4., -2.],
            [-2.,  1.]]),)
    """
    a = _square(a, "det")
    av = array_of(a)
    return _record(DET, np.linalg.det(av), a, saved=lambda: cofactors(av))


def cholesky(a):
    """The lower Cholesky factor L of each symmetric positive-definite matrix. As in
    numpy, only the lower triangle of A is read, and the gradient is exactly that of
    this function: zero above the diagonal (see ops/linalg.py).

    >>> at.linalg.cholesky(at.tensor([[4.0, 2.0], [2.0, 2.0]]))
    tensor([[2., 0.],
            [1., 1.]])
    """
    a = _square(a, "cholesky")
    factor, factor_inv = _cholesky_values(array_of(a))
    return _record(CHOLESKY, factor, a, saved=lambda: factor_inv)


def eigh(a, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of each symmetric matrix, as
    numpy.linalg.eigh, which reads the ``UPLO`` triangle of A only; the gradient is
    that function's (zero in the other triangle). The eigenvalues' gradient is defined
    at repeated eigenvalues too; the eigenvectors' needs distinct ones (it divides by
    their gaps). Functions of the eigenvectors should not depend on their signs,
    which are arbitrary.

    >>> at.linalg.eigh(at.tensor([[2.0, 0.0], [0.0, 1.0]])).eigenvalues
    tensor([1., 2.])
    """
    a = _square(a, "eigh")
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    packed, _ = _eigh_values(array_of(a), UPLO == "U")
    n = a.shape[-1]
    z = _record(EIGH, packed, a, params=eigh_params(UPLO == "U"))
    return EighResult(z[..., n, :], z[..., :n, :])


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """numpy.linalg.svd: ``(U, S, Vh)`` with ``A = U diag(S) Vh`` (or S alone without
    ``compute_uv``), batched over leading axes. The singular values' gradient is
    U diag(g) Vh, defined at repeated and zero ones too; U's and Vh's need distinct,
    nonzero singular values. With ``full_matrices`` and a non-square A, the columns of U
    (rows of Vh) past min(m, n) are a basis that numpy picks arbitrarily: they carry no
    gradient (torch's rule), and a warning says so when A requires grad.

    >>> at.linalg.svd(at.tensor([[3.0, 0.0], [0.0, -2.0]])).S
    tensor([3., 2.])
    """
    a = as_matrices(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    full = bool(full_matrices) and compute_uv and m != n
    if full and a.requires_grad:
        warnings.warn("svd(full_matrices=True) of a non-square matrix: the columns of U "
                      "and rows of Vh past min(m, n) carry no gradient (they are an "
                      "arbitrary basis); pass full_matrices=False to differentiate U "
                      "and Vh", UserWarning, stacklevel=2)
    packed, _ = _svd_values(array_of(a), full)
    z = _record(SVD, packed, a, params=svd_params(m, n, full))
    ku, kv = (m, n) if full else (k, k)
    batch = a.shape[:-2]
    s = z[..., m * ku:m * ku + k]
    if not compute_uv:
        return s
    return SVDResult(reshape(z[..., :m * ku], batch + (m, ku)), s,
                     reshape(z[..., m * ku + k:], batch + (kv, n)))


def pinv(a, rcond=None, hermitian=False, *, rtol=None):
    """The Moore-Penrose pseudo-inverse, over the singular values above ``rcond``
    (numpy's default: max(m, n) * eps) times the largest, batched. Its derivative is
    Golub and Pereyra's, exact while the rank stays the same (as torch's), to any
    order: it needs no singular vectors, so rank-deficient matrices are fine.

    >>> at.linalg.pinv(at.tensor([[2.0, 0.0], [0.0, 0.0]]))
    tensor([[0.5, 0. ],
            [0. , 0. ]])
    """
    a = as_matrices(a)
    if rcond is None:
        rcond = rtol if rtol is not None else max(a.shape[-2:]) * np.finfo(np.float64).eps
    return _record(PINV, np.linalg.pinv(array_of(a), rcond=rcond), a,
                   params=pinv_params(rcond))


def eigvalsh(a, UPLO="L"):
    """The eigenvalues of eigh, with its gradient.

    >>> at.linalg.eigvalsh(at.tensor([[1.0, 1.0], [1.0, 1.0]]))
    tensor([0., 2.])
    """
    return eigh(a, UPLO).eigenvalues


# ---- the derivatives written with autotape ops, for create_graph=True ------------------------
# (at, g, r, k) -> the gradient of operand k; see ops/elementwise.py.

def _matmul(at, g, r, k):
    """dA = G @ B^T, dB = A^T @ G on the core axes (1-D operands as a row or a column);
    the engine sums broadcast batch axes away."""
    a, b = r.x, r.y
    A = a if a.ndim > 1 else at.expand_dims(a, 0)
    B = b if b.ndim > 1 else at.expand_dims(b, 1)
    G = g
    if a.ndim == 1:
        G = at.expand_dims(G, -2 if b.ndim > 1 else -1)
    if b.ndim == 1:
        G = at.expand_dims(G, -1)
    if k == 0:
        d = G @ at.swapaxes(B, -1, -2)
        return d[..., 0, :] if a.ndim == 1 else d
    d = at.swapaxes(A, -1, -2) @ G
    return d[..., :, 0] if b.ndim == 1 else d


def _t(at, m):
    return at.swapaxes(m, -1, -2)


def _inv_rule(at, g, r, k):
    zt = _t(at, r.z)
    return -(zt @ g @ zt)


def _saved(r):
    """The values a linalg row saved when recorded (``saved_params``), as a constant."""
    v = r.tape.value(int(saved_row(r.params, 0)))
    return new_leaf(*canonical(np.array(v, F64).reshape(r.x.shape)))


def _slogdet_rule(at, g, r, k):
    return g[..., None, None] * _t(at, at.linalg.inv(r.x))


def _det_rule(at, g, r, k):
    if not is_grad_enabled():            # (numbers only, the Python tier: the cofactors
        return g[..., None, None] * _saved(r)    # saved when recorded, as the
    return (g * r.z)[..., None, None] * _t(at, at.linalg.inv(r.x))   # kernel reads them)


def _solve_rule(at, g, r, k):
    db = at.linalg.solve(_t(at, r.x), g)
    return db if k == 1 else -(db @ _t(at, r.z))


def _triangle(at, s, upper):
    """As _add_to_triangle: S + S^T off the diagonal in the triangle read, S on it."""
    n = s.shape[-1]
    ones = np.ones((n, n))
    mask = (np.triu(ones) if upper else np.tril(ones)) - 0.5 * np.eye(n)
    return (s + _t(at, s)) * mask


def _cholesky_rule(at, g, r, k):
    n = r.z.shape[-1]
    l_inv = at.linalg.inv(r.z)
    half_lower = np.tril(np.ones((n, n))) - 0.5 * np.eye(n)
    return _triangle(at, _t(at, l_inv) @ ((_t(at, r.z) @ g) * half_lower) @ l_inv, False)


def _eigh_rule(at, g, r, k):
    n = r.z.shape[-1]
    v, w = r.z[..., :n, :], r.z[..., n, :]
    g_v, g_w = g[..., :n, :], g[..., n, :]
    eye = np.eye(n, dtype=bool)
    vg = _t(at, v) @ g_v                  # 0 where V^T G_V is: eigenvalues alone have a
    skip = eye | observe(lambda m: m == 0, vg)     # gradient at repeated ones too
    gap = at.where(skip, 1.0, w[..., None, :] - w[..., :, None])   # w_j - w_i
    inner = at.where(skip, 0.0, vg / gap) + g_w[..., None, :] * np.eye(n)
    return _triangle(at, v @ inner @ _t(at, v), eigh_upper(r.params, 0))


def _svd_rule(at, g, r, k):
    """The kernel's formula as recorded ops (quotients with a zero numerator are 0)."""
    m, n, k_, ku, kv = (int(v) for v in svd_dims(r.params, 0))
    batch = r.x.shape[:-2]
    u = r.z[..., :m * ku].reshape(batch + (m, ku))[..., :k_]
    sv = r.z[..., m * ku:m * ku + k_]
    vh = r.z[..., m * ku + k_:].reshape(batch + (kv, n))[..., :k_, :]
    g_u = g[..., :m * ku].reshape(batch + (m, ku))[..., :k_]
    g_s = g[..., m * ku:m * ku + k_]
    g_vh = g[..., m * ku + k_:].reshape(batch + (kv, n))[..., :k_, :]
    j_, l_ = _t(at, u) @ g_u, vh @ _t(at, g_vh)
    num = (j_ - _t(at, j_)) * sv[..., None, :] + sv[..., :, None] * (l_ - _t(at, l_))
    inner = _quotient(at, num, sv[..., None, :] ** 2 - sv[..., :, None] ** 2) + \
        g_s[..., None, :] * np.eye(k_)
    w = inner @ vh
    if n > k_:                         # (both terms vanish for a square U or Vh: kernel)
        w = w + _quotient(at, g_vh - _t(at, l_) @ vh, sv[..., :, None])
    out = u @ w
    if m > k_:
        out = out + _quotient(at, g_u - u @ j_, sv[..., None, :]) @ vh
    return out


def _quotient(at, num, den):
    """num / den, 0 where num is 0 (so 0 / 0 is 0, and its derivatives too)."""
    zero = observe(lambda v: v == 0, num)
    return at.where(zero, 0.0, num / at.where(zero, 1.0, den))


def _pinv_rule(at, g, r, k):
    a, z = r.x, r.z
    zt, gt = _t(at, z), _t(at, g)
    y = gt @ (z @ zt)
    w = (zt @ z) @ gt
    return -(zt @ g @ zt) + (y - a @ (z @ y)) + (w - (w @ z) @ a)


graph_vjps = {MATMUL: _matmul, INV: _inv_rule, SLOGDET: _slogdet_rule, DET: _det_rule,
              SOLVE: _solve_rule,
              CHOLESKY: _cholesky_rule, EIGH: _eigh_rule, SVD: _svd_rule, PINV: _pinv_rule}
