"""Linear algebra: matmul for 1-D and 2-D operands.

A 1-D left operand is a (1, k) row, a 1-D right operand a (k, 1) column; the output's
flat layout is the same either way, so one kernel serves all four cases:
dA = G @ B.T, dB = A.T @ G. Large products call BLAS (numpy's OpenBLAS, kernels/blas.py).
"""
from numba.extending import register_jitable

from .codes import MATMUL
from ..kernels.blas import NO_TRANS, TRANS, cblas_dgemm
from ..kernels.layout import (A, B, accumulator, adjoint, adjoint_address, first_write,
                              has_adjoint, shape_of, value, value_address)

BLAS_MIN_FLOPS = 4096       # below this, the loops beat a library call


@register_jitable
def matmul_vjp(ctx, i):
    a, b = ctx.rows[i, A], ctx.rows[i, B]
    sa, sb = shape_of(ctx, a), shape_of(ctx, b)
    n = sa[0] if sa.size == 2 else 1
    k = sa[sa.size - 1]
    m = sb[1] if sb.size == 2 else 1
    if ctx.dgemm != 0 and n * k * m >= BLAS_MIN_FLOPS:
        g = adjoint_address(ctx, i)
        if has_adjoint(ctx, a):               # dA = G @ B.T: (n, m) (k, m)^T
            beta = 0.0 if first_write(ctx, a) else 1.0
            cblas_dgemm(ctx.dgemm, NO_TRANS, TRANS, n, k, m, 1.0, g, m,
                        value_address(ctx, b), m, beta, adjoint_address(ctx, a), k)
        if has_adjoint(ctx, b):               # dB = A.T @ G: (n, k)^T (n, m)
            beta = 0.0 if first_write(ctx, b) else 1.0
            cblas_dgemm(ctx.dgemm, TRANS, NO_TRANS, k, m, n, 1.0, value_address(ctx, a), k,
                        g, m, beta, adjoint_address(ctx, b), m)
        return
    x, y, g = value(ctx, a), value(ctx, b), adjoint(ctx, i)
    if has_adjoint(ctx, a):                   # dA[r, p] += sum_j G[r, j] B[p, j]
        ga = accumulator(ctx, a)
        for r in range(n):
            for p in range(k):
                s = 0.0
                for j in range(m):
                    s += g[r * m + j] * y[p * m + j]
                ga[r * k + p] += s
    if has_adjoint(ctx, b):                   # dB[p, :] += A[r, p] G[r, :]
        gb = accumulator(ctx, b)
        for r in range(n):
            for p in range(k):
                arp = x[r * k + p]
                for j in range(m):
                    gb[p * m + j] += arp * g[r * m + j]


# ---- for create_graph=True (see elementwise.graph_vjps) --------------------------------

def _matmul(at, g, r, k):
    a, b = r.x, r.y
    n = a.shape[0] if a.ndim == 2 else 1
    inner = a.shape[-1]
    m = b.shape[1] if b.ndim == 2 else 1
    grad = g.reshape(n, m)
    if k == 0:
        return (grad @ b.reshape(inner, m).T).reshape(a.shape)
    return (a.reshape(n, inner).T @ grad).reshape(b.shape)


graph_vjps = {MATMUL: _matmul}
