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
                              first_write, has_adjoint, shape_of, value, value_address)

BLAS_MIN_FLOPS = 4096       # below this, the loops beat a library call


@register_jitable
def matmul_vjp(ctx, i):
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
        _matmul_block(ctx, i, a, b, n, k, m, 0, 0, 0, True)
        return
    ma = broadcast_map(sa[:max(sa.size - 2, 0)], batch)        # batch -> operand block
    mb = broadcast_map(sb[:max(sb.size - 2, 0)], batch)
    if has_adjoint(ctx, a):
        accumulator(ctx, a)
    if has_adjoint(ctx, b):
        accumulator(ctx, b)
    for t in range(nb):
        _matmul_block(ctx, i, a, b, n, k, m, ma[t] * n * k, mb[t] * k * m, t * n * m, False)


@register_jitable
def _matmul_block(ctx, i, a, b, n, k, m, oa, ob, og, first):
    """One (n, k) @ (k, m) block's VJP at element offsets oa, ob, og. ``first``: the only
    block, so an operand's adjoint may be written rather than added to."""
    if ctx.dgemm != 0 and n * k * m >= BLAS_MIN_FLOPS:
        g = adjoint_address(ctx, i) + 8 * og
        if has_adjoint(ctx, a):               # dA = G @ B.T: (n, m) (k, m)^T
            beta = 0.0 if (first and first_write(ctx, a)) else 1.0
            cblas_dgemm(ctx.dgemm, NO_TRANS, TRANS, n, k, m, 1.0, g, m,
                        value_address(ctx, b) + 8 * ob, m, beta,
                        adjoint_address(ctx, a) + 8 * oa, k)
        if has_adjoint(ctx, b):               # dB = A.T @ G: (n, k)^T (n, m)
            beta = 0.0 if (first and first_write(ctx, b)) else 1.0
            cblas_dgemm(ctx.dgemm, TRANS, NO_TRANS, k, m, n, 1.0,
                        value_address(ctx, a) + 8 * oa, k, g, m, beta,
                        adjoint_address(ctx, b) + 8 * ob, m)
        return
    x, y, g = value(ctx, a), value(ctx, b), adjoint(ctx, i)
    if has_adjoint(ctx, a):                   # dA[r, p] += sum_j G[r, j] B[p, j]
        ga = accumulator(ctx, a)
        for r in range(n):
            for p in range(k):
                s = 0.0
                for j in range(m):
                    s += g[og + r * m + j] * y[ob + p * m + j]
                ga[oa + r * k + p] += s
    if has_adjoint(ctx, b):                   # dB[p, :] += A[r, p] G[r, :]
        gb = accumulator(ctx, b)
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
