"""Implicit differentiation: derivatives of solves, without recording the solver.

A root x(theta) of f(x, theta) = 0, a fixed point x = T(x, theta), or the solution of a
linear system A(theta) x = b(theta) is one recorded op (a CustomOp row) whose value any
solver may compute, on numbers. Its VJP comes from the implicit function theorem: for
the cotangent g of x, solve the transposed linear system (df/dx)^T lam = g, then
theta gets -(df/dtheta)^T lam. The iterations are never on the tape (no memory per
iteration, no guard on a convergence test), and the VJP is written with autotape ops,
so it is differentiated again (create_graph, Hessians, jvp).

Linear systems come as a dense matrix (Tensor or array), a scipy.sparse matrix
(constant), a ``SparseMatrix`` (scipy's pattern with differentiable values: the VJP
reuses the forward's LU factors for the transposed solve), or a function ``matvec(v,
*params)`` linear in v (matrix-free: CG or GMRES, the transposed operator from
autotape's VJP of matvec).

>>> theta = at.tensor(2.0, requires_grad=True)
>>> x = at.implicit.root(lambda x, t: x ** 3 - t, np.array(1.0), theta)   # cube root
>>> at.grad(x, theta)                      # d t^(1/3) / dt = 1 / (3 t^(2/3))
(tensor(0.20998684),)
"""
import contextlib

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from . import func
from .custom import CustomOp
from .grad_mode import no_grad
from .guards import tracing
from .ops.indexing import as_tensor, put_add
from .ops.linalg import matmul, solve as dense_solve
from .tape import tape_of_its_own
from .tensor import Tensor, new_leaf
from .tuning import DENSE_MAX

__all__ = ["root", "fixed_point", "linear_solve", "SparseMatrix", "newton", "as_numbers"]



@contextlib.contextmanager
def _apart():
    """A solver's own work on numbers: on a tape of its own and outside a compile
    trace, so that neither the graph being recorded nor at.compile's guards see it."""
    with tape_of_its_own(), tracing(None):
        yield


def as_numbers(v):
    """A value as a float64 array (a Tensor's value, without the graph): a copy.

    >>> as_numbers(at.tensor([1.0, 2.0], requires_grad=True))
    array([1., 2.])
    """
    if isinstance(v, Tensor):
        v = v.detach().numpy()
    return np.array(v, np.float64)


def _tensor(v):
    return v if isinstance(v, Tensor) else as_tensor(np.asarray(v, np.float64))


# ---- roots and fixed points ------------------------------------------------------------------

def newton(fun, x0, tol=1e-10, max_iter=50):
    """Newton's method for ``fun`` written with autotape ops (its Jacobian by forward
    mode), on numbers: x with |fun(x)| <= tol (max norm), or a RuntimeError saying why
    not.

    >>> at.implicit.newton(lambda x: x ** 2 - 2.0, np.array([1.0]))
    array([1.41421356])
    """
    x = np.array(x0, np.float64)
    shape = x.shape
    jacobian = func.jacfwd(lambda v: fun(v.reshape(shape)).reshape(-1))
    for _ in range(max_iter):
        r = as_numbers(fun(x)).reshape(-1)
        if not np.all(np.isfinite(r)):
            raise RuntimeError("newton: the residual is not finite at the iterate "
                               f"{x!r}")
        if np.abs(r).max(initial=0.0) <= tol:
            return x
        J = as_numbers(jacobian(x.reshape(-1))).reshape(r.size, x.size)
        try:
            step = np.linalg.solve(J, r)
        except np.linalg.LinAlgError:
            raise RuntimeError("newton: the Jacobian is singular at the iterate; no "
                               "Newton step (start elsewhere, or give solve=)") from None
        x = x - step.reshape(shape)
    raise RuntimeError(f"newton: no root within {max_iter} iterations (residual "
                       f"{np.abs(r).max():.3g} > tol {tol:g})")


def root(f, x0, *params, solve=None, tol=1e-10):
    """The x with f(x, *params) = 0 near x0, differentiable with respect to the
    params (Tensors requiring grad) by the implicit function theorem: the solver's
    iterations are not recorded. ``solve(fun, x0)`` finds the root of ``fun`` on numpy
    arrays (``scipy.optimize.root``'s, say); by default ``newton``. Its answer is
    checked (|f| <= 100 tol, max norm).

    >>> k = at.tensor(3.0, requires_grad=True)
    >>> x = at.implicit.root(lambda x, k: k * x - 6.0, np.array(0.0), k)
    >>> x, at.grad(x, k)
    (tensor(2., grad_fn=<rootBackward>), (tensor(-0.66666667),))
    """
    x0 = np.array(x0, np.float64)
    params = [_tensor(p) for p in params]

    def forward(*values):
        with _apart():
            return _root_numbers(values)

    def _root_numbers(values):
        constants = [new_leaf(np.array(v) if np.ndim(v) else float(v), np.shape(v),
                              np.dtype(np.float64)) for v in values]

        def fun(x):                            # on numbers: what a user's solve gets
            with no_grad():
                return as_numbers(f(as_tensor(np.asarray(x, np.float64)), *constants))
        if solve is None:
            x = newton(lambda v: f(v, *constants), x0.copy(), tol)
        else:
            x = np.array(solve(fun, x0.copy()), np.float64).reshape(x0.shape)
        r = fun(x)
        if not np.all(np.isfinite(r)) or np.abs(r).max(initial=0.0) > 100 * tol:
            raise RuntimeError(f"root: solve's answer is no root: |f(x)| = "
                               f"{np.abs(r).max():.3g} (tol {tol:g})")
        return x

    def vjp(inputs, x, g):
        if isinstance(g, Tensor):              # recorded (create_graph): on the graph
            return _implicit_cotangents(f, inputs, x, g)
        with _apart():
            return tuple(as_numbers(c) for c in _implicit_cotangents(f, inputs, x, g))
    if not params:
        raise TypeError("root: give the parameters to differentiate with respect to "
                        "after x0 (f(x, *params)); without any, call the solver itself")
    return CustomOp(forward, vjp, "root")(*params)


def fixed_point(T, x0, *params, solve=None, tol=1e-10):
    """The x with x = T(x, *params) near x0 (a root of T(x) - x, see ``root``).

    >>> a = at.tensor(0.5, requires_grad=True)
    >>> x = at.implicit.fixed_point(lambda x, a: a * x + 1.0, np.array(0.0), a)
    >>> x, at.grad(x, a)                       # x = 1 / (1 - a)
    (tensor(2., grad_fn=<rootBackward>), (tensor(4.),))
    """
    return root(lambda x, *ps: T(x, *ps) - x, x0, *params, solve=solve, tol=tol)


def _implicit_cotangents(f, params, x, g):
    """-(df/dtheta)^T lam with (df/dx)^T lam = g, at the root x: written with
    autotape ops, so a recorded VJP (Tensors in) is differentiated again."""
    x = _tensor(x) if isinstance(x, Tensor) else as_tensor(np.asarray(x, np.float64))
    g = _tensor(g)
    n = int(np.prod(x.shape, dtype=np.int64))
    if n <= DENSE_MAX:
        J = func.jacrev(lambda v: f(v, *params).reshape(-1))(x).reshape(n, n)
        try:
            lam = dense_solve(J.T, g.reshape(n))
        except np.linalg.LinAlgError:
            raise RuntimeError("root: df/dx is singular at the root, so the root does not "
                               "depend smoothly on the parameters (no gradient)") from None
        if not np.all(np.isfinite(as_numbers(lam))):
            raise RuntimeError("root: df/dx is singular at the root (no gradient)")
    else:
        _, transposed = func.vjp(lambda v: f(v, *params).reshape(-1), x)
        lam = MatrixFree(lambda u: transposed(u)[0].reshape(-1), n, "gmres", False, 1e-12,
                         None).solve(g.reshape(n), ())
    lam = lam.reshape(x.shape)
    _, by_params = func.vjp(lambda *ps: f(x, *ps), *params)
    cots = by_params(lam)
    return tuple(-c for c in cots)


# ---- linear systems --------------------------------------------------------------------------

class SparseMatrix:
    """A sparse matrix whose nonzeros are a Tensor: scipy's pattern (any scipy.sparse
    matrix; its own values are ignored) with ``values`` in its CSR order.

    >>> import scipy.sparse as sp
    >>> pattern = sp.csr_matrix(np.eye(2))
    >>> A = at.implicit.SparseMatrix(at.tensor([2.0, 4.0], requires_grad=True), pattern)
    >>> A.shape
    (2, 2)
    """

    def __init__(self, values, pattern):
        csr = sp.csr_matrix(pattern)
        csr.sort_indices()
        values = _tensor(values)
        if values.shape != (csr.nnz,):
            raise ValueError(f"SparseMatrix: {csr.nnz} values for the pattern's nonzeros, "
                             f"got shape {values.shape}")
        self.values, self.shape = values, csr.shape
        self.indptr, self.indices = csr.indptr, csr.indices
        self.rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))

    def scipy(self, values=None):
        """The matrix as scipy's CSR with these values (the Tensor's by default)."""
        values = as_numbers(self.values) if values is None else values
        return sp.csr_matrix((values, self.indices, self.indptr), shape=self.shape)

    def solver(self):
        """``b -> A^-1 b`` (``linear_solve(A, b)``) for many right-hand sides, factorising
        A's values once: the solves and their VJPs share one sparse LU while the values
        stay the same (a Rosenbrock step's stages solve with one matrix).

        >>> import scipy.sparse as sp
        >>> solve = at.implicit.SparseMatrix(at.tensor([2.0, 4.0]), sp.eye(2)).solver()
        >>> solve(at.tensor([2.0, 4.0])), solve(at.tensor([4.0, 8.0]))
        (tensor([1., 1.]), tensor([2., 2.]))
        """
        kept = [None]
        return lambda b: _sparse_solve(self, _tensor(b), kept)

    def __matmul__(self, v):
        """A @ v, recorded (the values and v differentiable).

        >>> import scipy.sparse as sp
        >>> A = at.implicit.SparseMatrix(at.tensor([2.0, 4.0]), sp.eye(2))
        >>> A @ at.tensor([1.0, 1.0])
        tensor([2., 4.])
        """
        v = _tensor(v)
        products = self.values * v[self.indices]
        one_hot = np.zeros((self.shape[0], self.rows.size))
        one_hot[self.rows, np.arange(self.rows.size)] = 1.0
        return matmul(one_hot, products) if self.rows.size < 4096 else \
            _row_sums(products, self.rows, self.shape[0])


def _row_sums(products, rows, n):
    """Segment sums of products by row, recorded (a transposed gather)."""
    return put_add(products, rows.astype(np.float64), (n,))


def linear_solve(A, b, params=(), method=None, symmetric=False, tol=1e-10, maxiter=None):
    """x with A x = b, differentiable with respect to b and to A's values: the VJP
    solves the transposed system once (b gets A^-T g, A's values -(A^-T g) x^T).

    A is a dense matrix (Tensor or array), a scipy.sparse matrix (constant), a
    ``SparseMatrix`` (differentiable values; solved by a sparse LU whose factors the
    VJP reuses), or a function ``matvec(v, *params)`` linear in v (matrix-free,
    ``method`` "cg" for symmetric positive definite A, "gmres" otherwise; the params
    are differentiated, and the transposed operator is autotape's VJP of matvec).

    >>> b = at.tensor([2.0, 4.0], requires_grad=True)
    >>> x = at.implicit.linear_solve(np.diag([2.0, 4.0]), b)
    >>> x, at.grad(x.sum(), b)
    (tensor([1., 1.], grad_fn=<ReshapeBackward>), (tensor([0.5 , 0.25]),))
    """
    b = _tensor(b)
    if callable(A) and not isinstance(A, (Tensor, np.ndarray, SparseMatrix)):
        method = method or ("cg" if symmetric else "gmres")
        params = tuple(_tensor(p) for p in params)
        probe = A(as_tensor(np.zeros(b.shape[0])), *[p.detach() for p in params])
        if isinstance(probe, Tensor) and probe.requires_grad:
            raise ValueError("linear_solve: matvec reads tensors that require grad from "
                             "outside; pass them as params (matvec(v, *params)), so that "
                             "their derivatives, of every order, are exact")
        return MatrixFree(A, b.shape[0], method, symmetric, tol, maxiter).solve(b, params)
    if isinstance(A, SparseMatrix):
        return _sparse_solve(A, b)
    if hasattr(A, "tocsr"):                     # a scipy.sparse matrix: constant values
        csr = sp.csr_matrix(A)
        csr.sort_indices()
        return _sparse_solve(SparseMatrix(csr.data.copy(), csr), b)
    return dense_solve(_tensor(A), b)


def _sparse_solve(A, b, kept=None):
    """A SparseMatrix solve as one row; the forward's LU serves the VJP's solve, and the
    solves sharing ``kept`` (a one-element list) share the factors of equal values."""
    if b.ndim != 1 or b.shape[0] != A.shape[0]:
        raise ValueError(f"linear_solve: b must be a vector of {A.shape[0]}, got shape "
                         f"{b.shape}")
    kept = [None] if kept is None else kept   # (values, LU) of the last factorisation:
                        # replays of a compiled function share this op, from any thread,
                        # so a solve uses the factors only when they are of its own values

    def lu_of(values):
        last = kept[0]
        if last is not None and np.array_equal(last[0], values):
            return last[1]
        try:
            lu = spla.splu(A.scipy(values).tocsc())
        except RuntimeError as e:
            raise np.linalg.LinAlgError(f"linear_solve: the sparse matrix is singular "
                                        f"({e})") from None
        kept[0] = (values, lu)                # (one assignment: atomic)
        return lu

    def forward(values, rhs):
        return lu_of(np.array(values, np.float64)).solve(np.asarray(rhs, np.float64))

    def vjp(inputs, x, g):
        values = inputs[0]
        if isinstance(g, Tensor):             # recorded: the transposed solve, as an op
            gb = _sparse_solve(_transposed(A, values), g)
        else:
            gb = lu_of(np.array(values, np.float64)).solve(np.asarray(g, np.float64),
                                                           trans="T")
        return -(gb[A.rows] * x[A.indices]), gb
    return CustomOp(forward, vjp, "sparse_solve")(A.values, b)


def _transposed(A, values):
    """A^T as a SparseMatrix whose values are A's, permuted (recorded)."""
    order = sp.csr_matrix((np.arange(A.rows.size, dtype=np.float64) + 1.0, A.indices,
                           A.indptr), shape=A.shape).T.tocsr()
    order.sort_indices()
    return SparseMatrix(_tensor(values)[order.data.astype(np.int64) - 1], order)


class MatrixFree:
    """A x = b for A given by ``matvec(v, *params)``: scipy's CG or GMRES on numbers,
    as one row whose operands are b and the params. Its VJP solves with A^T (A itself
    when symmetric, else autotape's VJP of matvec in v) and sends -(A^-T g)^T (dA x) to
    the params; a recorded VJP (create_graph) solves with this same class, so it is
    differentiated again."""

    def __init__(self, matvec, n, method, symmetric, tol, maxiter):
        self.matvec, self.n, self.method = matvec, n, method
        self.symmetric, self.tol, self.maxiter = symmetric, tol, maxiter
        self.original = None                     # (for A^T made by transposed())
        self.solver = {"cg": spla.cg, "gmres": spla.gmres}.get(method)
        if self.solver is None:
            raise ValueError(f"linear_solve: method must be 'cg' or 'gmres' for a matvec, "
                             f"not {method!r}")

    def transposed(self):
        """A^T as a matvec of (u, *params): A's own when symmetric, else autotape's VJP
        of matvec in v (linear in v: taken at v = 0)."""
        if self.symmetric:
            return self
        if self.original is not None:           # (A^T's transpose is A)
            return self.original
        zeros = np.zeros(self.n)

        def matvec_t(u, *params):
            return func.vjp(lambda v: self.matvec(v, *params), zeros)[1](u)[0]
        t = MatrixFree(matvec_t, self.n, self.method, False, self.tol, self.maxiter)
        t.original = self
        return t

    def numbers(self, rhs, params):
        """A^-1 rhs on numbers, the params' values given."""
        with _apart():
            return self._numbers(rhs, params)

    def _numbers(self, rhs, params):
        constants = [as_tensor(np.asarray(p, np.float64)) for p in params]

        def apply(v):
            with no_grad():
                return as_numbers(self.matvec(as_tensor(np.asarray(v, np.float64)),
                                              *constants)).reshape(-1)
        op = spla.LinearOperator((self.n, self.n), matvec=apply, dtype=np.float64)
        x, info = self.solver(op, np.asarray(rhs, np.float64), rtol=self.tol, atol=0.0,
                              maxiter=self.maxiter)
        if info != 0:
            raise RuntimeError(f"linear_solve: {self.method} did not converge "
                               f"({'breakdown' if info < 0 else f'{info} iterations'})")
        return x

    def solve(self, b, params):
        def forward(rhs, *values):
            return self.numbers(rhs, values)

        def vjp(inputs, x, g):
            values = inputs[1:]
            t = self.transposed()
            gb = t.solve(g, values) if isinstance(g, Tensor) else t.numbers(as_numbers(g), values)
            if not values:
                return (gb,)
            if isinstance(g, Tensor):
                _, pullback = func.vjp(lambda *ps: self.matvec(x, *ps), *values)
                return (gb,) + tuple(-c for c in pullback(gb))
            with _apart():
                _, pullback = func.vjp(lambda *ps: self.matvec(x, *ps), *values)
                return (gb,) + tuple(-as_numbers(c) for c in pullback(gb))
        return CustomOp(forward, vjp, f"{self.method}_solve")(b, *params)
