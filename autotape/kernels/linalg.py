"""Linear algebra, compiled tier: matmul's forward and VJP kernels, and the VJPs of the
numpy.linalg ops.

Each (n, k) @ (k, m) block of a matmul's batch has its own VJP. A 1-D left operand is a
(1, k) row, a 1-D right operand a (k, 1) column; the output's flat layout is the same
either way, so one kernel serves all cases: dA = G @ B.T, dB = A.T @ G. Large products
call BLAS (numpy's OpenBLAS, kernels/blas.py).
"""
import numpy as np
from numba import carray
from numba.extending import register_jitable

from ..opcodes import CHOLESKY, DET, EIGH, INV, PINV, SLOGDET, SOLVE, SVD
from ..tape_format import A, B, OP, eigh_upper, saved_row, svd_dims
from .blas import NO_TRANS, TRANS, cblas_dgemm
from .context import (accumulator, adjoint, adjoint_address, aux, broadcast_map, dense_lanes,
                      f64_pointer, first_write, first_write_lane, has_adjoint, lane_block,
                      live, shape_of, size_of, value, value_address)
from ..tuning import BLAS_MIN_FLOPS, SPARSE_LANES_RATIO



@register_jitable
def matmul_dims(ctx, i):
    """Operands, their shapes, the (n, k) @ (k, m) core and the broadcast batch (its
    shape and size) of a matmul row."""
    a, b = ctx.rows[i, A], ctx.rows[i, B]
    sa, sb, so = shape_of(ctx, a), shape_of(ctx, b), shape_of(ctx, i)
    n = sa[sa.size - 2] if sa.size >= 2 else 1
    k = sa[sa.size - 1]
    m = sb[sb.size - 1] if sb.size >= 2 else 1
    core = (1 if sa.size >= 2 else 0) + (1 if sb.size >= 2 else 0)
    batch = so[:so.size - core]
    nb = 1
    for d in range(batch.size):
        nb *= batch[d]
    return a, b, sa, sb, n, k, m, batch, nb


@register_jitable
def matmul_vjp(ctx, i, which=3):
    """The VJP into operand a (``which & 1``) and b (``which & 2``)."""
    a, b, sa, sb, n, k, m, batch, nb = matmul_dims(ctx, i)
    if nb == 1 and sa.size <= 2 and sb.size <= 2:
        _matmul_block(ctx, i, a, b, n, k, m, 0, 0, 0, True, which)
        return
    ma = broadcast_map(sa[:max(sa.size - 2, 0)], batch)        # batch -> operand block
    mb = broadcast_map(sb[:max(sb.size - 2, 0)], batch)
    if has_adjoint(ctx, a) and which & 1:
        accumulator(ctx, a)
    if has_adjoint(ctx, b) and which & 2:
        accumulator(ctx, b)
    for t in range(nb):
        _matmul_block(ctx, i, a, b, n, k, m, ma[t] * n * k, mb[t] * k * m, t * n * m, False,
                      which)


@register_jitable
def matmul_vjp_lanes(ctx, i, lanes):
    """All K lanes of a matrix-vector product's VJP in one GEMM, for the operand whose
    gradient is linear in the lane's vector: lane k's adjoints are row k of a matrix
    whose leading dimension is the lane stride. Returns which operands it did (the
    ``which`` bits of matmul_vjp); the rest are done lane by lane."""
    a, b = ctx.rows[i, A], ctx.rows[i, B]
    sa, sb = shape_of(ctx, a), shape_of(ctx, b)
    if ctx.dgemm == 0 or lanes == 1 or sa.size > 2 or sb.size > 2:
        return 0
    n = sa[0] if sa.size == 2 else 1
    k = sa[sa.size - 1]
    m = sb[1] if sb.size == 2 else 1
    if lanes * n * k * m < BLAS_MIN_FLOPS or (n != 1 and m != 1):
        return 0
    stride = ctx.lane[1]
    ctx.lane[0] = 0
    g = adjoint_address(ctx, i)
    if _sparse_lanes(ctx, i, lanes, n * m):
        return _matmul_sparse_lanes(ctx, i, a, b, n, k, m, lanes)
    dense_lanes(ctx, i, lanes)                # zero lanes become zeros for the GEMM
    ctx.lane[0] = 0
    done = 0
    if m == 1 and has_adjoint(ctx, b):        # dB (K, k) = G (K, n) @ A (n, k)
        beta = 0.0 if dense_lanes(ctx, b, lanes) else 1.0
        cblas_dgemm(ctx.dgemm, NO_TRANS, NO_TRANS, lanes, k, n, 1.0, g, stride,
                    value_address(ctx, a), k, beta, adjoint_address(ctx, b), stride)
        done |= 2
    if n == 1 and has_adjoint(ctx, a):        # dA (K, k) = G (K, m) @ B.T (m, k)
        beta = 0.0 if dense_lanes(ctx, a, lanes) else 1.0
        cblas_dgemm(ctx.dgemm, NO_TRANS, TRANS, lanes, k, m, 1.0, g, stride,
                    value_address(ctx, b), m, beta, adjoint_address(ctx, a), stride)
        done |= 1
    return done


@register_jitable
def _sparse_lanes(ctx, i, lanes, size):
    """Whether at most one in SPARSE_LANES_RATIO of row i's adjoints (all lanes) is
    nonzero: the lanes of a Jacobian usually are, right after the seeds (lane k holds
    e_k through elementwise rows), and then skipping zeros beats a dense GEMM."""
    g, stride = lane_block(ctx, i, lanes), ctx.lane[1]
    nonzero = 0
    for lane in range(lanes):
        if not live(ctx, i, lane):
            continue
        row = g[lane * stride:lane * stride + size]
        for e in range(size):
            if row[e] != 0.0:
                nonzero += 1
    return nonzero * SPARSE_LANES_RATIO <= lanes * size




@register_jitable
def _matmul_sparse_lanes(ctx, i, a, b, n, k, m, lanes):
    """matmul_vjp_lanes for sparse lanes: each nonzero G[lane, r] adds one scaled row of
    A (dB, matrix-vector) or column of B (dA, vector-matrix). Returns the operands done."""
    stride = ctx.lane[1]
    g = lane_block(ctx, i, lanes)
    done = 0
    for operand in range(2):
        r_ = b if operand == 0 else a
        if (m != 1 if operand == 0 else n != 1) or not has_adjoint(ctx, r_):
            continue
        out = lane_block(ctx, r_, lanes)
        other = value(ctx, a if operand == 0 else b)
        width = n if operand == 0 else m
        for lane in range(lanes):
            if not live(ctx, i, lane):
                continue
            dst = out[lane * stride:lane * stride + k]
            if first_write_lane(ctx, r_, lane):
                dst[:] = 0.0
            for r in range(width):
                gv = g[lane * stride + r]
                if gv == 0.0:
                    continue
                if operand == 0:              # dB[lane, :] += G[lane, r] A[r, :]
                    for p in range(k):
                        dst[p] += gv * other[r * k + p]
                else:                         # dA[lane, :] += G[lane, j] B[:, j]
                    for p in range(k):
                        dst[p] += gv * other[p * m + r]
        done |= 2 if operand == 0 else 1
    return done


@register_jitable
def _matmul_block(ctx, i, a, b, n, k, m, oa, ob, og, first, which):
    """One (n, k) @ (k, m) block's VJP at element offsets oa, ob, og. ``first``: the only
    block, so an operand's adjoint may be written rather than added to."""
    want_a = has_adjoint(ctx, a) and which & 1 != 0
    want_b = has_adjoint(ctx, b) and which & 2 != 0
    if ctx.dgemm != 0 and n * k * m >= BLAS_MIN_FLOPS:
        g = adjoint_address(ctx, i) + 8 * og
        if want_a:                            # dA = G @ B.T: (n, m) (k, m)^T
            beta = 0.0 if (first and first_write(ctx, a)) else 1.0
            cblas_dgemm(ctx.dgemm, NO_TRANS, TRANS, n, k, m, 1.0, g, m,
                        value_address(ctx, b) + 8 * ob, m, beta,
                        adjoint_address(ctx, a) + 8 * oa, k)
        if want_b:                            # dB = A.T @ G: (n, k)^T (n, m)
            beta = 0.0 if (first and first_write(ctx, b)) else 1.0
            cblas_dgemm(ctx.dgemm, TRANS, NO_TRANS, k, m, n, 1.0,
                        value_address(ctx, a) + 8 * oa, k, g, m, beta,
                        adjoint_address(ctx, b) + 8 * ob, m)
        return
    x, y, g = value(ctx, a), value(ctx, b), adjoint(ctx, i)
    if want_a:
        ga = accumulator(ctx, a)
        if m == 1:                            # an outer product: dA[r, :] += G[r] B
            for r in range(n):
                grj = g[og + r]
                for p in range(k):
                    ga[oa + r * k + p] += grj * y[ob + p]
        else:                                 # dA[r, p] += sum_j G[r, j] B[p, j]
            for r in range(n):
                for p in range(k):
                    s = 0.0
                    for j in range(m):
                        s += g[og + r * m + j] * y[ob + p * m + j]
                    ga[oa + r * k + p] += s
    if want_b:
        gb = accumulator(ctx, b)
        if m == 1:                            # dB[:] += G[r] A[r, :]
            for r in range(n):
                grj = g[og + r]
                for p in range(k):
                    gb[ob + p] += x[oa + r * k + p] * grj
        else:                                 # dB[p, :] += A[r, p] G[r, :]
            for r in range(n):
                for p in range(k):
                    arp = x[oa + r * k + p]
                    for j in range(m):
                        gb[ob + p * m + j] += arp * g[og + r * m + j]


@register_jitable
def matmul_forward(ctx, i):
    """Recompute a matmul row's value, block by block of the broadcast batch."""
    a, b, sa, sb, n, k, m, batch, nb = matmul_dims(ctx, i)
    z = value(ctx, i)
    if k == 0 or z.size == 0:
        z[:] = 0.0
        return
    ma = broadcast_map(sa[:max(sa.size - 2, 0)], batch)        # batch -> operand block
    mb = broadcast_map(sb[:max(sb.size - 2, 0)], batch)
    x, y = value(ctx, a), value(ctx, b)
    for t in range(nb):
        oa, ob, oz = ma[t] * n * k, mb[t] * k * m, t * n * m
        if ctx.dgemm != 0 and n * k * m >= BLAS_MIN_FLOPS:
            _gemm(ctx, False, False, n, m, k, 1.0, value_address(ctx, a) + 8 * oa, k,
                  value_address(ctx, b) + 8 * ob, m, 0.0, value_address(ctx, i) + 8 * oz, m)
            continue
        for r in range(n):                    # below a library call's cost: loops
            for c in range(m):
                s = 0.0
                for p in range(k):
                    s += x[oa + r * k + p] * y[ob + p * m + c]
                z[oz + r * m + c] = s


# ---- numpy.linalg ---------------------------------------------------------------------
# Each VJP is a few small matrix products per matrix of the batch, with values saved
# when the op was recorded (the output itself, or an inverse as an auxiliary row):
#   inv      Z = A^-1              dA = -Z^T G Z^T
#   slogdet  l = log|det A|        dA = g A^-T
#   det      z = det A             dA = g cof(A)   (the cofactors, saved)
#   solve    X = A^-1 B            dB = A^-T G,  dA = -dB X^T
#   cholesky A = L L^T             S = L^-T Phi(L^T G) L^-1, Phi: lower half, diagonal halved
#   eigh     A = V diag(w) V^T     S = V (diag(g_w) + F o (V^T G_V)) V^T, F_ij = 1/(w_j - w_i)
#   svd      A = U diag(s) Vh      dA = U [F o skew(U^T G_U) S + S F o skew(Vh G_Vh^T)
#                                         + diag(g_s)] Vh + (G_U - U U^T G_U) S^-1 Vh
#                                       + U S^-1 (G_Vh - G_Vh Vh^T Vh),  F_ij = 1/(s_j^2 - s_i^2)
#            (the last two terms vanish when U, resp. Vh, is square, and are skipped)
#   pinv     Z = A^+ (rank held)   dA = -Z^T G Z^T + (I - A Z) G^T Z Z^T + Z^T Z G^T (I - Z A)
# S is the gradient for symmetric perturbations. cholesky and eigh read one triangle of
# A only (numpy's rule), so dA is the exact gradient of that: S + S^T below the diagonal
# (each entry there stands for two), S on it, zero in the triangle never read. A
# quotient whose numerator is 0 is 0 (eigenvalues or singular values alone have a
# gradient at repeated or zero ones too).

@register_jitable
def _gemm(ctx, ta, tb, n, m, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """C (n, m) = alpha op(A) op(B) + beta C on row-major data at addresses a, b, c."""
    if ctx.dgemm != 0:
        cblas_dgemm(ctx.dgemm, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, n, m,
                    k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    x = carray(f64_pointer(a), (k if ta else n) * lda)
    y = carray(f64_pointer(b), (m if tb else k) * ldb)
    out = carray(f64_pointer(c), n * ldc)
    for i in range(n):
        for j in range(m):
            s = 0.0
            for p in range(k):
                s += (x[p * lda + i] if ta else x[i * lda + p]) * \
                    (y[j * ldb + p] if tb else y[p * ldb + j])
            out[i * ldc + j] = alpha * s + (beta * out[i * ldc + j] if beta != 0.0 else 0.0)


@register_jitable
def _add_to_triangle(ga, off, s, n, upper):
    """ga += the gradient, on the triangle read, of a function of A's symmetric part
    whose symmetric-perturbation gradient is sym(s)."""
    for r in range(n):
        for c in range(n):
            if r == c:
                ga[off + r * n + c] += s[r * n + c]
            elif (c < r) != upper:
                ga[off + r * n + c] += s[r * n + c] + s[c * n + r]


@register_jitable
def linalg_vjp(ctx, i):
    """The VJP of a numpy.linalg row; False for an opcode it does not know."""
    op = ctx.rows[i, OP]
    if op == SVD:
        _svd_vjp(ctx, i)
        return True
    if op == PINV:
        _pinv_vjp(ctx, i)
        return True
    if not (op == SOLVE or op == INV or op == SLOGDET or op == DET or op == CHOLESKY or
            op == EIGH):
        return False
    a, b = ctx.rows[i, A], ctx.rows[i, B]
    sa = shape_of(ctx, a)
    n = sa[sa.size - 1]
    nn = n * n
    batch = size_of(ctx, a) // nn if nn > 0 else 0
    g, z = adjoint_address(ctx, i), value_address(ctx, i)
    t1, t2 = np.empty(nn), np.empty(nn)
    p1, p2 = t1.ctypes.data, t2.ctypes.data
    if op == SOLVE:
        k = size_of(ctx, b) // (batch * n) if batch * n > 0 else 0
        inv_t = value_address(ctx, saved_row(ctx.ipool, aux(ctx, i)))
        db = np.empty(n * k)
        if has_adjoint(ctx, a):
            accumulator(ctx, a)
        if has_adjoint(ctx, b):
            accumulator(ctx, b)
        for m in range(batch):
            ob = 8 * m * n * k
            _gemm(ctx, False, False, n, k, n, 1.0, inv_t + 8 * m * nn, n, g + ob, k, 0.0,
                  db.ctypes.data, k)
            if has_adjoint(ctx, b):
                gb = adjoint(ctx, b)
                for e in range(n * k):
                    gb[m * n * k + e] += db[e]
            if has_adjoint(ctx, a):
                _gemm(ctx, False, True, n, n, k, -1.0, db.ctypes.data, k, z + ob, k, 1.0,
                      adjoint_address(ctx, a) + 8 * m * nn, n)
        return True
    if not has_adjoint(ctx, a):
        return True
    ga = accumulator(ctx, a)
    for m in range(batch):
        o = 8 * m * nn
        if op == INV:
            _gemm(ctx, False, True, n, n, n, 1.0, g + o, n, z + o, n, 0.0, p1, n)
            _gemm(ctx, True, False, n, n, n, -1.0, z + o, n, p1, n, 1.0,
                  adjoint_address(ctx, a) + o, n)
        elif op == SLOGDET or op == DET:      # the saved A^-T, or cofactors
            gm, dz = adjoint(ctx, i)[m], value(ctx, saved_row(ctx.ipool, aux(ctx, i)))
            for e in range(nn):
                ga[m * nn + e] += gm * dz[m * nn + e]
        elif op == CHOLESKY:
            l_inv = value_address(ctx, saved_row(ctx.ipool, aux(ctx, i)))
            _gemm(ctx, True, False, n, n, n, 1.0, z + o, n, g + o, n, 0.0, p1, n)
            for r in range(n):
                t1[r * n + r] *= 0.5
                for c in range(r + 1, n):
                    t1[r * n + c] = 0.0
            _gemm(ctx, True, False, n, n, n, 1.0, l_inv + o, n, p1, n, 0.0, p2, n)
            _gemm(ctx, False, False, n, n, n, 1.0, p2, n, l_inv + o, n, 0.0, p1, n)
            _add_to_triangle(ga, m * nn, t1, n, False)
        elif op == EIGH:                      # packed (n + 1, n): rows of V, then w
            op_ = 8 * m * (nn + n)
            w = carray(f64_pointer(z + op_ + 8 * nn), n)
            g_w = carray(f64_pointer(g + op_ + 8 * nn), n)
            _gemm(ctx, True, False, n, n, n, 1.0, z + op_, n, g + op_, n, 0.0, p1, n)
            for r in range(n):
                for c in range(n):
                    if r == c:
                        t1[r * n + c] = g_w[r]
                    elif t1[r * n + c] != 0.0:     # (V^T G_V) o F: 0 where V^T G_V is,
                        t1[r * n + c] /= w[c] - w[r]   # also at repeated eigenvalues
            _gemm(ctx, False, False, n, n, n, 1.0, z + op_, n, p1, n, 0.0, p2, n)
            _gemm(ctx, False, True, n, n, n, 1.0, p2, n, z + op_, n, 0.0, p1, n)
            _add_to_triangle(ga, m * nn, t1, n, eigh_upper(ctx.ipool, aux(ctx, i)))
    return True


@register_jitable
def _quotient(num, den):
    return 0.0 if num == 0.0 else num / den


@register_jitable
def _svd_vjp(ctx, i):
    """The VJP of an SVD row (see the table above), matrix by matrix of the batch. Of a
    full U or Vh only the first k columns or rows enter (the rest are a basis of the
    complement that numpy picks arbitrarily: torch's rule)."""
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a):
        return
    m, n, k, ku, kv = svd_dims(ctx.ipool, aux(ctx, i))
    packed = m * ku + k + kv * n
    batch = size_of(ctx, a) // (m * n) if m * n > 0 else 0
    accumulator(ctx, a)
    j_, l_, inner = np.empty(k * k), np.empty(k * k), np.empty(k * k)
    q, p = np.empty(k * n), np.empty(m * k)
    zv, gv = value(ctx, i), adjoint(ctx, i)
    for t in range(batch):
        oz, os_, ov = t * packed, t * packed + m * ku, t * packed + m * ku + k
        u, vh = value_address(ctx, i) + 8 * oz, value_address(ctx, i) + 8 * ov
        g_u, g_vh = adjoint_address(ctx, i) + 8 * oz, adjoint_address(ctx, i) + 8 * ov
        ga = adjoint_address(ctx, a) + 8 * t * m * n
        _gemm(ctx, True, False, k, k, m, 1.0, u, ku, g_u, ku, 0.0, j_.ctypes.data, k)
        _gemm(ctx, False, True, k, k, n, 1.0, vh, n, g_vh, n, 0.0, l_.ctypes.data, k)
        for r in range(k):
            for c in range(k):
                if r == c:
                    inner[r * k + c] = gv[os_ + r]
                else:
                    num = (j_[r * k + c] - j_[c * k + r]) * zv[os_ + c] + \
                        zv[os_ + r] * (l_[r * k + c] - l_[c * k + r])
                    inner[r * k + c] = _quotient(num, zv[os_ + c] * zv[os_ + c] -
                                                 zv[os_ + r] * zv[os_ + r])
        # W = inner Vh + S^-1 (G_Vh - L^T Vh), then dA += U W; the second term is
        # G_Vh (I - V V^T), exactly 0 when V is square (k = n): not computed then, as
        # rounding over a tiny singular value would make it O(1)
        if n > k:
            _gemm(ctx, True, False, k, n, k, -1.0, l_.ctypes.data, k, vh, n, 0.0,
                  q.ctypes.data, n)
            for r in range(k):
                for c in range(n):
                    q[r * n + c] = _quotient(q[r * n + c] + gv[ov + r * n + c], zv[os_ + r])
        else:
            q[:] = 0.0
        _gemm(ctx, False, False, k, n, k, 1.0, inner.ctypes.data, k, vh, n, 1.0,
              q.ctypes.data, n)
        _gemm(ctx, False, False, m, n, k, 1.0, u, ku, q.ctypes.data, n, 1.0, ga, n)
        # dA += (I - U U^T) G_U S^-1 Vh: exactly 0 when U is square (k = m)
        if m == k:
            continue
        for r in range(m):
            for c in range(k):
                p[r * k + c] = gv[oz + r * ku + c]
        _gemm(ctx, False, False, m, k, k, -1.0, u, ku, j_.ctypes.data, k, 1.0, p.ctypes.data,
              k)
        for r in range(m):
            for c in range(k):
                p[r * k + c] = _quotient(p[r * k + c], zv[os_ + c])
        _gemm(ctx, False, False, m, n, k, 1.0, p.ctypes.data, k, vh, n, 1.0, ga, n)


@register_jitable
def _pinv_vjp(ctx, i):
    """The VJP of a PINV row (Golub and Pereyra's derivative at constant rank), matrix
    by matrix of the batch: A is (m, n), Z = A^+ and G are (n, m)."""
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a):
        return
    sa = shape_of(ctx, a)
    m, n = sa[sa.size - 2], sa[sa.size - 1]
    batch = size_of(ctx, a) // (m * n) if m * n > 0 else 0
    accumulator(ctx, a)
    mm, nn, mn, mn2 = np.empty(m * m), np.empty(n * n), np.empty(m * n), np.empty(m * n)
    pmm, pnn, pmn = mm.ctypes.data, nn.ctypes.data, mn.ctypes.data
    for t in range(batch):
        o = 8 * t * m * n
        av, z, g = value_address(ctx, a) + o, value_address(ctx, i) + o, \
            adjoint_address(ctx, i) + o
        ga = adjoint_address(ctx, a) + o
        # -Z^T G Z^T
        _gemm(ctx, True, False, m, m, n, 1.0, z, m, g, m, 0.0, pmm, m)
        _gemm(ctx, False, True, m, n, m, -1.0, pmm, m, z, m, 1.0, ga, n)
        # (I - A Z) Y with Y = G^T Z Z^T (m, n)
        _gemm(ctx, False, True, n, n, m, 1.0, z, m, z, m, 0.0, pnn, n)
        _gemm(ctx, True, False, m, n, n, 1.0, g, m, pnn, n, 0.0, pmn, n)
        _gemm(ctx, False, False, n, n, m, 1.0, z, m, pmn, n, 0.0, pnn, n)     # Z Y
        _gemm(ctx, False, False, m, n, n, -1.0, av, n, pnn, n, 1.0, pmn, n)   # Y - A Z Y
        for e in range(m * n):
            mn2[e] = mn[e]
        # W (I - Z A) with W = Z^T Z G^T (m, n)
        _gemm(ctx, True, False, m, m, n, 1.0, z, m, z, m, 0.0, pmm, m)
        _gemm(ctx, False, True, m, n, m, 1.0, pmm, m, g, m, 0.0, pmn, n)
        _gemm(ctx, False, False, m, m, n, 1.0, pmn, n, z, m, 0.0, pmm, m)     # W Z
        _gemm(ctx, False, False, m, n, m, -1.0, pmm, m, av, n, 1.0, pmn, n)   # W - W Z A
        ga_ = carray(f64_pointer(ga), m * n)
        for e in range(m * n):
            ga_[e] += mn2[e] + mn[e]
