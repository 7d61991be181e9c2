"""Rosenbrock steps with a sparse Jacobian (``solve_ivp(..., jac_sparsity=...)``).

A stiff solve of a discretised PDE spends its time on W = I / (gamma h) - J: dense, a
thousand states cost a thousand reverse lanes for J and n^3 / 3 for its LU at every step.
Here J's pattern is given or found from fun's recording (sparse.py: the same at every
point, which no sampled Jacobian can promise); its rows are coloured so that no two
rows of one colour read a common state, so one reverse sweep with a lane per colour
gives every entry (a band of width w: w lanes); and W is factorised once per step by a
sparse LU that every stage's solve and their VJPs share (implicit.SparseMatrix.solver).
All of it is recorded, so gradients flow through J as through the dense step.

>>> import autotape.ode_sparse as ods
>>> def diffusion(t, u):
...     return at.concatenate([u[:1] * 0.0, u[:-2] - 2.0 * u[1:-1] + u[2:], u[-1:] * 0.0])
>>> system = ods.SparseSystem.found(diffusion, 0.0, np.ones(6), ())
>>> system.pattern.nnz, system.colours
(14, 3)
"""
import threading
import weakref

import numpy as np
import scipy.sparse

from . import func, sparse
from .compile import compile as compile_
from .guards import current_trace
from .implicit import SparseMatrix, as_numbers
from .ops.indexing import as_tensor
from .ops.linalg import matmul

__all__ = ["SparseSystem"]

_found = weakref.WeakKeyDictionary()     # fun -> {argument shapes: SparseSystem or reason}


class SparseSystem:
    """How one Rosenbrock step builds and factorises W for a state of n elements: J's
    pattern (n by n, with the diagonal W adds), the rows' colours, and whether fun
    reads t (then df/dt comes by one forward-mode product)."""

    def __init__(self, pattern, reads_t):
        pattern = scipy.sparse.csr_matrix(pattern, dtype=bool)
        n = pattern.shape[0]
        if pattern.shape != (n, n):
            raise ValueError(f"solve_ivp: jac_sparsity must be square, got shape "
                             f"{pattern.shape}")
        pattern = (pattern + scipy.sparse.eye(n, dtype=bool, format="csr")).tocsr()
        pattern.sort_indices()
        self.pattern, self.reads_t = pattern, bool(reads_t)
        row_colour = sparse.column_colours(pattern.T.tocsr())
        self.colours = int(row_colour.max(initial=-1)) + 1
        self.compress = np.zeros((self.colours, n))           # lane c sums c's rows
        self.compress[row_colour, np.arange(n)] = 1.0
        rows = np.repeat(np.arange(n), np.diff(pattern.indptr))
        self.entries = (row_colour[rows], pattern.indices.copy())    # in CSR order
        self.diagonal = (rows == pattern.indices).astype(np.float64)

    @classmethod
    def given(cls, jac_sparsity, n):
        """The system for a pattern the caller gives (anything scipy.sparse takes);
        fun is assumed to read t (its pattern in t is not given)."""
        pattern = scipy.sparse.csr_matrix(jac_sparsity)
        if pattern.shape != (n, n):
            raise ValueError(f"solve_ivp: jac_sparsity must have shape {(n, n)} for a "
                             f"state of {n}, got {pattern.shape}")
        return cls(pattern != 0, True)

    @classmethod
    def found(cls, fun, t0, y, args):
        """The system with fun's pattern found from its recording at these shapes, or the
        reason it cannot be (a str: f takes decisions in Python from values, so no
        pattern holds everywhere; or its recording failed)."""
        traced = current_trace() is not None     # (reading traced values would be
        numbers = [np.asarray(t0, np.float64)] + [     # guards: any point gives the pattern)
            np.ones(np.shape(a)) if traced else as_numbers(a) for a in (y,) + tuple(args)]
        key = tuple((a.shape, a.dtype.str) for a in numbers)
        try:
            known = _found.setdefault(fun, {})
        except TypeError:                     # (not weakly referable: not cached)
            known = {}
        if key not in known:
            known[key] = _recorded(fun, numbers)
        return known[key]

    def step_matrix(self, f, t, y, inv_gamma_h):
        """(df/dt or None, b -> W^-1 b) at (t, y) with W = I * inv_gamma_h - df/dy: J from one
        reverse sweep with a lane per row colour, W factorised once for all its solves."""
        compressed = func.jacrev(lambda state: matmul(self.compress, f(t, state)))(y)
        jac = compressed[self.entries]
        solve = SparseMatrix(self.diagonal * inv_gamma_h - jac, self.pattern).solver()
        if not self.reads_t:
            return None, solve            # (fun does not read t)
        # (y a primal too, with tangent 0: y as a closure would make the sweeps inside
        # jvp walk the whole solve's graph behind it at every step)
        _, f_t = func.jvp(f, (t, y), (as_tensor(np.float64(1.0)), np.zeros(y.shape)))
        return f_t, solve


def _recorded(fun, numbers):
    """SparseSystem from fun's recording, or why not. Recorded on a thread of its own:
    at.compile records on the thread's state, and the solve may itself be inside
    another function's recording (at.compile of a loss), which must not see it."""
    result = []

    def find():
        try:
            c = compile_(lambda t, y, *args: fun(t, y, *args), *numbers)
            pattern = sparse.recorded_sparsity(c, *numbers)
        except Exception as e:                 # (the solve goes on with the dense J)
            result.append(f"recording fun failed ({type(e).__name__}: {e})")
            return
        if pattern is None:
            result.append("fun takes decisions in Python from the state's values (or "
                          "calls functions autotape does not record), so no pattern "
                          "holds at every point")
            return
        n = numbers[1].size
        pattern = pattern.tocsc()
        result.append(SparseSystem(pattern[:, 1:1 + n].tocsr(), pattern[:, 0].nnz > 0))
    thread = threading.Thread(target=find, name="autotape-jac-sparsity")
    thread.start()
    thread.join()
    return result[0]
