"""Linear algebra: matmul, with numpy's batch axes and broadcasting.

Each (n, k) @ (k, m) block of the batch has its own VJP. A 1-D left operand is a (1, k)
row, a 1-D right operand a (k, 1) column; the output's flat layout is the same either
way, so one kernel serves all cases:
dA = G @ B.T, dB = A.T @ G. Large products call BLAS (numpy's OpenBLAS, kernels/blas.py).
"""
from numba.extending import register_jitable

from .codes import MATMUL
from ..kernels.blas import NO_TRANS, TRANS, cblas_dgemm
from ..kernels.layout import (A, B, accumulator, adjoint, adjoint_address, broadcast_map,
                              first_write, first_write_lanes, has_adjoint, shape_of, value,
                              value_address)

BLAS_MIN_FLOPS = 4096       # below this, the loops beat a library call


@register_jitable
def matmul_vjp(ctx, i, which=3):
    """The VJP into operand a (``which & 1``) and b (``which & 2``)."""
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
    done = 0
    if m == 1 and has_adjoint(ctx, b):        # dB (K, k) = G (K, n) @ A (n, k)
        beta = 0.0 if first_write_lanes(ctx, b, lanes) else 1.0
        cblas_dgemm(ctx.dgemm, NO_TRANS, NO_TRANS, lanes, k, n, 1.0, g, stride,
                    value_address(ctx, a), k, beta, adjoint_address(ctx, b), stride)
        done |= 2
    if n == 1 and has_adjoint(ctx, a):        # dA (K, k) = G (K, m) @ B.T (m, k)
        beta = 0.0 if first_write_lanes(ctx, a, lanes) else 1.0
        cblas_dgemm(ctx.dgemm, NO_TRANS, TRANS, lanes, k, m, 1.0, g, stride,
                    value_address(ctx, b), m, beta, adjoint_address(ctx, a), stride)
        done |= 1
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


# ---- for create_graph=True (see elementwise.graph_vjps) --------------------------------

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


graph_vjps = {MATMUL: _matmul}
