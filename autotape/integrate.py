"""Differentiable ODE solves with scipy's conventions: ``solve_ivp(fun, t_span, y0,
method, t_eval, args, rtol, atol, ...)``, explicit Runge-Kutta methods (RK45:
Dormand-Prince 5(4), Tsit5: Tsitouras 5(4), RK4 with fixed steps) and, for stiff
problems, the L-stable Rosenbrock method Rodas4 (Hairer & Wanner): linearly implicit,
one Jacobian (autotape's own, by reverse mode) and one factorisation per step, no
Newton iterations, so the step is a fixed sequence of ops like an explicit one.

Step-size control is data, not control flow: every step is attempted, its error
estimate decides by a mask (``where``) whether the state and time move on, and the next
step size is computed from it, so the recording has no branch on the solution. A solve
therefore records the same ops whatever the parameters: ``at.compile`` records it once
(``max_steps`` attempts, those after the end doing nothing), and ``vmap`` runs each
point with its own steps. Called eagerly (not inside ``at.compile``), the loop stops once
the end is reached. Gradients flow through the solver itself (discretise-then-
differentiate, as diffrax's default), with the step sizes taken as chosen. Events
(zero crossings of functions of the state, terminal or not) are located with the
gradient of their time (ode_events.py).

>>> sol = at.integrate.solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), np.array([1.0]),
...                              args=(at.tensor(2.0),), t_eval=[1.0], rtol=1e-8, atol=1e-10)
>>> round(float(sol.y[0, 0]), 8)             # exp(-2)
0.13533528
"""
import importlib
import math
import warnings
import weakref
from collections import namedtuple

import numpy as np
from numpy.polynomial import polynomial as P

from . import func, ode_adjoint
from .compile import compile as compile_
from .grad_mode import no_grad
from .guards import current_trace
from .ode_events import Crossings, events_of
from .ops import elementwise as ops
from .ops.indexing import (as_tensor, broadcast_to, concatenate, search_positions, stack,
                           take_flat)
from .ops.linalg import solve as dense_solve
from .ops.reduce import mean
from .tensor import Tensor
from .tuning import UNROLLED_MAX

__all__ = ["solve_ivp", "march", "OdeResult"]

OdeResult = namedtuple("OdeResult", ["t", "y", "status", "message", "success", "nfev",
                                     "nsteps", "t_events", "y_events"],
                       defaults=(None, None))
OdeResult.__doc__ = """What solve_ivp returns, as scipy's: ``t`` (the output times),
``y`` (a Tensor of shape (n, len(t))), ``status`` (0: the end was reached, 1: a
terminal event stopped the solve), ``message``, ``success``, ``nfev`` (right-hand side
evaluations), ``nsteps`` (steps attempted), and with ``events``: ``t_events`` (per
event, a Tensor of its crossing times) and ``y_events`` (per event, the states there,
one row each).

>>> sol = at.integrate.solve_ivp(lambda t, y: -y, (0.0, 1.0), np.array([1.0, 2.0]))
>>> sol.y.shape, sol.success
((2, 2), True)
"""

Tableau = namedtuple("Tableau", ["c", "a", "b", "e", "order", "fsal", "dense"])
Tableau.__doc__ = """An explicit Runge-Kutta method: nodes c, coefficients a (rows), weights b,
error weights e (None: no estimate, fixed steps), the error estimate's order, whether
the last stage is f at the step's end (FSAL), and ``dense``: its continuous extension,
stage i's weight at step fraction theta being sum_j dense[i][j] theta^(j + 1) (None:
cubic Hermite)."""

# Dormand & Prince (1980): 5th-order solution, e = b5 - b4 for the error estimate
DOPRI5 = Tableau(
    c=(0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0),
    a=((), (1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
       (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
       (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
       (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84)),
    b=(35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0),
    e=(-71 / 57600, 0.0, 71 / 16695, -71 / 1920, 17253 / 339200, -22 / 525, 1 / 40),
    order=4, fsal=True,
    # Shampine (1986)'s 4th-order continuous extension (scipy's, with the optimum c6)
    dense=(
    (1.0, -8048581381 / 2820520608, 8663915743 / 2820520608, -12715105075 / 11282082432),
    (0.0, 0.0, 0.0, 0.0),
    (0.0, 131558114200 / 32700410799, -68118460800 / 10900136933, 87487479700 / 32700410799),
    (0.0, -1754552775 / 470086768, 14199869525 / 1410260304, -10690763975 / 1880347072),
    (0.0, 127303824393 / 49829197408, -318862633887 / 49829197408,
     701980252875 / 199316789632),
    (0.0, -282668133 / 205662961, 2019193451 / 616988883, -1453857185 / 822651844),
    (0.0, 40617522 / 29380423, -110615467 / 29380423, 69997945 / 29380423)))


def _expanded(scale, *factors):
    """The coefficients of theta^1 .. theta^4 of scale times a product of polynomials
    (each given by its coefficients, lowest power first)."""
    product = np.array([scale])
    for factor in factors:
        product = P.polymul(product, factor)
    return tuple(float(c) for c in np.pad(product, (0, 5))[1:5])


# Tsitouras's interpolant: the weights of the 7 stages, factored as he gives them
_TSIT5_DENSE = (
    _expanded(-1.0530884977290216, (0, 1), (-1.3299890189751412, 1),
              (0.7139816917074209, -1.4364028541716351, 1)),
    _expanded(0.1017, (0, 0, 1), (1.2949852507374631, -2.1966568338249754, 1)),
    _expanded(2.490627285651252793, (0, 0, 1), (1.57803468208092486, -2.38535645472061657, 1)),
    _expanded(-16.54810288924490272, (-1.21712927295533244, 1), (-0.61620406037800089, 1),
              (0, 0, 1)),
    _expanded(47.37952196281928122, (-1.203071208372362603, 1), (-0.658047292653547382, 1),
              (0, 0, 1)),
    _expanded(-34.87065786149660974, (-1.2, 1), (-0.666666666666666667, 1), (0, 0, 1)),
    _expanded(2.5, (-1, 1), (-0.6, 1), (0, 0, 1)))


# Tsitouras (2011), Runge-Kutta pairs of order 5(4) satisfying only the first column
# simplifying assumption
_T6 = (0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742,
       -3.290069515436081, 2.324710524099774)
TSIT5 = Tableau(
    c=(0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0),
    a=((), (0.161,), (-0.008480655492356989, 0.335480655492357),
       (2.897153057105493, -6.359448489975075, 4.3622954328695815),
       (5.325864828439257, -11.748883564062828, 7.4955393428898365,
        -0.09249506636175525),
       (5.86145544294642, -12.92096931784711, 8.159367898576159, -0.071584973281401,
        -0.028269050394068383),
       _T6),
    b=_T6 + (0.0,),
    e=(0.09646076681806523 - 0.09468075576583946, 0.01 - 0.009183565540343254,
       0.4798896504144996 - 0.4877705284247616, 1.379008574103742 - 1.234297566930479,
       -3.290069515436081 + 2.7077123499835256, 2.324710524099774 - 1.866628418170587,
       -1 / 66),
    order=4, fsal=True, dense=_TSIT5_DENSE)

RK4 = Tableau(c=(0.0, 0.5, 0.5, 1.0), a=((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
              b=(1 / 6, 1 / 3, 1 / 3, 1 / 6), e=None, order=4, fsal=False, dense=None)

Rosenbrock = namedtuple("Rosenbrock", ["gamma", "alpha", "gammas", "a", "c", "m", "e",
                                       "order"])
Rosenbrock.__doc__ = """A Rosenbrock method in the form of Kaps, Rentrop and Sandu: with W =
I / (h gamma) - J, each stage solves W k_i = f(t + alpha_i h, y + sum_j a_ij k_j)
+ sum_j (c_ij / h) k_j + h gammas_i df/dt; then y_new = y + sum m_j k_j and the error
estimate is sum e_j k_j, of order ``order`` + 1 (the step-size rule's exponent)."""

# Hairer & Wanner's RODAS4 (Solving ODEs II, 1996): 6 stages, order 4(3), L-stable and
# stiffly accurate (the last two stages are the solutions of order 3 and 4)
_RODAS4_A = (1.544, 0.9466785280815826, 0.2557011698983284, 3.314825187068521,
             2.896124015972201, 0.9986419139977817, 1.221224509226641, 6.019134481288629,
             12.53708332932087, -0.687886036105895)
RODAS4 = Rosenbrock(
    gamma=0.25,
    alpha=(0.0, 0.386, 0.21, 0.63, 1.0, 1.0),
    gammas=(0.25, -0.1043, 0.1035, -0.0362, 0.0, 0.0),
    a=((), _RODAS4_A[0:1], _RODAS4_A[1:3], _RODAS4_A[3:6], _RODAS4_A[6:10],
       _RODAS4_A[6:10] + (1.0,)),
    c=((), (-5.6688,), (-2.430093356833875, -0.2063599157091915),
       (-0.1073529058151375, -9.594562251023355, -20.47028614809616),
       (7.496443313967647, -10.24680431464352, -33.99990352819905, 11.70890893206160),
       (8.083246795921522, -7.981132988064893, -31.52159432874371, 16.31930543123136,
        -6.058818238834054)),
    m=_RODAS4_A[6:10] + (1.0, 1.0),
    e=(0.0, 0.0, 0.0, 0.0, 0.0, 1.0),
    order=3)

METHODS = {"RK45": DOPRI5, "Tsit5": TSIT5, "RK4": RK4, "Rodas4": RODAS4}
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 10.0          # scipy's step-size control


def solve_ivp(fun, t_span, y0, method="RK45", t_eval=None, args=(), rtol=1e-3, atol=1e-6,
              first_step=None, max_step=math.inf, max_steps=4096, events=None,
              max_events=8, adjoint=None, jac_sparsity=None):
    """Solve y' = fun(t, y, *args) from t_span[0] to t_span[1], differentiably with
    respect to y0 and the args (Tensors requiring grad, or arrays and numbers).

    ``method``: "RK45" (Dormand-Prince 5(4), scipy's default), "Tsit5" (Tsitouras
    5(4)), both adaptive with scipy's error norm and step-size rule, "Rodas4" (a
    Rosenbrock method of order 4 for stiff problems: linearly implicit, fun's Jacobian
    taken by autotape), or "RK4" (fixed steps of ``first_step``, or of ``max_step``).
    Gradients take the step sizes as chosen (not differentiated). ``t_eval``: the
    output times (cubic Hermite interpolation within steps; default: the two ends). ``max_steps``: steps
    attempted at most; reaching the end takes fewer, and a solve that needs more
    raises, as does a non-finite state.

    ``events``: scipy's: functions ``g(t, y, *args)`` whose zero crossings are found
    (attributes ``terminal``: stop at the first crossing, or at the k-th for an int k;
    ``direction``: +1 only upward, -1 only downward); their times and states are in
    ``t_events`` / ``y_events``, with gradients (the implicit function theorem's:
    autotape/ode_events.py). Outputs after a terminal event are dropped (compiled:
    nan). A non-terminal event keeps at most ``max_events`` crossings; more raise
    (compiled: status -3).

    ``adjoint="backsolve"``: gradients by the continuous adjoint instead of through the
    solver: memory that does not grow with the steps, the gradient of the exact
    solution to the tolerance (autotape/ode_adjoint.py); ``nfev`` and ``nsteps`` are
    then None.

    ``jac_sparsity`` (Rodas4; needs scipy): the pattern of fun's Jacobian in y, as
    scipy's (an (n, n) array or sparse matrix, nonzero where y_j can change f_i), or
    "auto": found from fun's recording (autotape/ode_sparse.py; a RuntimeWarning, and
    the dense Jacobian, where fun takes decisions in Python from values). The step then
    takes J by one reverse sweep per colour of rows and factorises W by a sparse LU: a
    1-D reaction-diffusion system of 1000 states costs a few right-hand sides per step
    instead of a thousand. None (default): dense. With ``adjoint="backsolve"`` it
    serves the forward solve (the adjoint's augmented system is solved dense).

    >>> sol = at.integrate.solve_ivp(lambda t, y: -y, (0.0, 1.0), np.array([1.0]),
    ...                              rtol=1e-10, atol=1e-12)
    >>> round(float(sol.y[0, -1]), 9)
    0.367879441
    """
    tableau = METHODS.get(method)
    if tableau is None:
        raise ValueError(f"solve_ivp: method must be one of {sorted(METHODS)}, not "
                         f"{method!r}")
    t0, t1 = float(t_span[0]), float(t_span[1])
    if not t1 > t0:
        raise ValueError(f"solve_ivp: t_span must increase, got {t_span}")
    y = as_tensor(y0)
    if y.dtype.kind != "f":
        y = y.astype(np.float64)
    if y.ndim != 1:
        raise ValueError(f"solve_ivp: y0 must be 1-D, got shape {y.shape}")
    if current_trace() is None and not bool(abs(y.detach()).max() < math.inf):
        raise ValueError("solve_ivp: y0 is not finite")    # (compiled: status -2)
    if first_step is not None and not 0 < first_step < math.inf:
        raise ValueError(f"solve_ivp: first_step must be positive and finite, got "
                         f"{first_step}")
    if not max_step > 0:
        raise ValueError(f"solve_ivp: max_step must be positive, got {max_step}")
    args = tuple(a if isinstance(a, Tensor) else as_tensor(a) for a in args)
    times = np.array([t0, t1] if t_eval is None else t_eval, np.float64).reshape(-1)
    if times.size and (times.min() < t0 or times.max() > t1 or np.any(np.diff(times) < 0)):
        raise ValueError("solve_ivp: t_eval must be sorted and within t_span")

    def f(t, state):
        out = as_tensor(fun(t, state, *args))
        if out.shape != state.shape:
            raise ValueError(f"solve_ivp: fun returned shape {out.shape} for a state of "
                             f"shape {state.shape}")
        return out
    if adjoint is not None:
        ode_adjoint.check(adjoint, events, times)
        out = ode_adjoint.backsolve(_segments, fun, (t0, t1), y, times, args, dict(
            method=method, rtol=rtol, atol=atol, max_step=max_step, max_steps=max_steps),
            jac_sparsity)
        return OdeResult(times, out.T, 0, MESSAGES[0], True, None, None)
    system = _sparse_system(jac_sparsity, tableau, fun, t0, y, args)
    found = events_of(events, max_events)
    crossings = Crossings(found, args) if found else None
    if tableau.e is None:
        return _fixed_steps(f, tableau, t0, t1, y, times, first_step or max_step, max_steps,
                            crossings)
    return _adaptive(f, tableau, t0, t1, y, times, rtol, atol, first_step, max_step,
                     max_steps, crossings, system)


def _sparse_system(jac_sparsity, tableau, fun, t0, y, args):
    """The SparseSystem (ode_sparse.py) for jac_sparsity, or None: W dense."""
    if jac_sparsity is None:
        return None
    if not isinstance(tableau, Rosenbrock):
        raise ValueError("solve_ivp: jac_sparsity is for the stiff method (Rodas4); the "
                         "explicit methods take no Jacobian")
    ode_sparse = importlib.import_module("autotape.ode_sparse")   # (scipy: optional)
    if isinstance(jac_sparsity, str):
        if jac_sparsity != "auto":
            raise ValueError(f"solve_ivp: jac_sparsity must be None, 'auto' or a "
                             f"pattern, not {jac_sparsity!r}")
        system = ode_sparse.SparseSystem.found(fun, t0, y, args)
        if isinstance(system, str):
            warnings.warn(f"solve_ivp(jac_sparsity='auto'): the Jacobian is taken dense: "
                          f"{system}", RuntimeWarning, stacklevel=3)
            return None
        return system
    return ode_sparse.SparseSystem.given(jac_sparsity, y.size)


def _stages(f, tableau, t, y, h, k1):
    """The stages k_i = f(t + c_i h, y + h sum_j a_ij k_j) of one step."""
    ks = [k1]
    for c, row in zip(tableau.c[1:], tableau.a[1:]):
        increment = sum(a * k for a, k in zip(row, ks) if a != 0.0)
        ks.append(f(t + c * h, y + h * increment))
    return ks


def _rosenbrock_step(f, method, t, y, h, proposed, k1, system):
    """One Rosenbrock step from (t, y) of size h, k1 = f(t, y): (y_new, error estimate,
    stages); ``system``: a sparse W's (ode_sparse.py), or None (dense). A step of 0 (the
    attempts after the end) is worked with the proposed size, so that every value stays
    finite, and moves nothing."""
    work = ops.where(h > 0, h, proposed)
    if system is None:
        f_t, jac = func.jacrev(f, argnums=(0, 1))(t, y)
        solve = _factorised(np.eye(y.size) / method.gamma / work - jac)
    else:
        f_t, solve = system.step_matrix(f, t, y, 1.0 / method.gamma / work)
    ks = []
    for i, (alpha, gamma_i, a_row, c_row) in enumerate(zip(
            method.alpha, method.gammas, method.a, method.c)):
        fi = k1 if i == 0 else f(t + alpha * work, y + sum(
            a * k for a, k in zip(a_row, ks) if a != 0.0))
        rhs = fi + sum(c * k for c, k in zip(c_row, ks)) / work if c_row else fi
        if gamma_i != 0.0 and f_t is not None:
            rhs = rhs + (gamma_i * work) * f_t
        try:
            ks.append(solve(rhs))
        except np.linalg.LinAlgError as e:
            raise np.linalg.LinAlgError(
                f"solve_ivp: Rodas4's step matrix I / (gamma h) - df/dy is singular near "
                f"t = {float(t.detach()):.6g}, h = {float(work.detach()):.6g} ({e}): "
                "1 / (gamma h) is an eigenvalue of df/dy there (gamma = "
                f"{method.gamma}); another first_step or max_step steps past it") from None
    moves = h > 0
    y_new = ops.where(moves, y + sum(m * k for m, k in zip(method.m, ks) if m != 0.0), y)
    error = ops.where(moves, sum(e * k for e, k in zip(method.e, ks) if e != 0.0), 0.0)
    return y_new, error, ks


def _factorised(W):
    """x -> W^-1 x for the step's matrix W. Recorded for at.compile with few states, as
    an LU factorisation with partial pivoting written in elementwise ops (the pivot rows
    chosen by ``where``: data, not control flow), so the whole step is lean code; else
    the dense solve (LAPACK's, eagerly)."""
    n = W.shape[0]
    if current_trace() is None or n > UNROLLED_MAX:
        return lambda b: dense_solve(W, b)
    lu = [[W[i, j] for j in range(n)] for i in range(n)]
    pivots = []                              # per column k: the masks of rows > k swapped
    for k in range(n):
        # the first row i >= k with the largest |lu[i][k]|, as 0/1 masks
        taken, best = [], abs(lu[k][k])
        for i in range(k + 1, n):
            bigger = _mask(abs(lu[i][k]) > best)
            best = ops.where(bigger > 0.5, abs(lu[i][k]), best)
            taken.append(bigger)
        masks, later = [None] * len(taken), 0.0      # later: a row after j is bigger
        for j in range(len(taken) - 1, -1, -1):
            masks[j] = taken[j] * (1.0 - later)
            later = ops.maximum(later, taken[j])
        lu = _swapped(lu, k, masks)
        pivots.append(masks)
        for i in range(k + 1, n):
            lu[i][k] = lu[i][k] / lu[k][k]
            for j in range(k + 1, n):
                lu[i][j] = lu[i][j] - lu[i][k] * lu[k][j]

    def solve(b):
        x = [[b[i]] for i in range(n)]
        for k, masks in enumerate(pivots):
            x = _swapped(x, k, masks)
        x = [v[0] for v in x]
        for i in range(n):                   # L (unit diagonal), then U
            for j in range(i):
                x[i] = x[i] - lu[i][j] * x[j]
        for i in range(n - 1, -1, -1):
            for j in range(i + 1, n):
                x[i] = x[i] - lu[i][j] * x[j]
            x[i] = x[i] / lu[i][i]
        return stack(x)
    return solve


def _swapped(rows, k, masks):
    """rows with row k exchanged for the row k + 1 + j whose mask is 1 (none: as is)."""
    rows = [list(r) for r in rows]
    original = rows[k]
    for j, m in enumerate(masks):
        i = k + 1 + j
        swap = m > 0.5
        rows[k] = [ops.where(swap, b, a) for a, b in zip(rows[k], rows[i])]
        rows[i] = [ops.where(swap, a, b) for a, b in zip(original, rows[i])]
    return rows


def _hermite(y, y_new, k_start, k_end, h, theta):
    """The cubic Hermite interpolant at fractions theta (one row per output time) of a
    step from y (slope k_start) to y_new (slope k_end)."""
    th = theta[:, None]
    return (1 - th) * y + th * y_new + th * (th - 1) * (
        (1 - 2 * th) * (y_new - y) + (th - 1) * h * k_start + th * h * k_end)


def _adaptive(f, tableau, t0, t1, y, times, rtol, atol, first_step, max_step, max_steps,
              crossings, system):
    eager = current_trace() is None
    t = as_tensor(np.float64(t0))
    k1 = f(t, y)
    if crossings is not None:
        crossings.start(t, y)
    nfev = 1
    h = as_tensor(np.float64(first_step)) if first_step is not None else \
        _initial_step(f, t, y, k1, tableau.order, rtol, atol)
    h = _frozen(h)
    nfev += first_step is None
    y0, rows = y, [] if times.size else None
    done, broken = False, 0.0          # broken (compiled): an attempt's error was not finite
    for attempt in range(max_steps):
        left = t1 - t if crossings is None else (t1 - t) * (1.0 - crossings.stopped)
        a = _attempt(f, tableau, t, y, k1, h, left, rtol, atol, max_step, system)
        nfev += a.nfev
        if eager and not math.isfinite(float(a.norm.detach())):
            raise RuntimeError(f"solve_ivp: fun gave a non-finite value near t = "
                               f"{float(t.detach()):.6g}: the state is not finite there")
        if not eager:               # (nan would stop the solve where it is: say why)
            broken = ops.maximum(broken, 1.0 - _mask(a.norm * 0.0 == 0.0))
        if rows is not None:
            rows.append(_dense_row(t, a.moved[0], a.h, y, a.y_new, a.ks, a.k_end, a.dense))
        if crossings is not None:
            crossings.step(t, a.h, y, a.y_new, k1, a.k_end, a.accept)
        t, y, k1, h = a.moved
        if eager:                                 # (a compiled solve runs every attempt)
            _check_finite(y, f"at t = {float(t.detach()):.6g}")
            if float(t.detach()) >= t1 or float(_stopped(crossings)) > 0.5:
                done = True
                break
    if eager and not done:
        raise RuntimeError(f"solve_ivp: max_steps ({max_steps}) attempts reached at "
                           f"t = {float(t.detach()):.6g} before {t1:g}; raise max_steps "
                           "or loosen rtol / atol")
    dense = None if isinstance(tableau, Rosenbrock) else tableau.dense  # (Hermite)
    out = _dense_output(rows, times, t0, y0, dense) if rows is not None else None
    if eager:
        return _with_events(times, out, attempt + 1, nfev, 0, crossings, True)
    # Compiled, nothing is decided in Python (so the recording holds at any point): the
    # outputs a solve did not reach are nan, and its status says why, as data.
    reached = ops.maximum(_mask(t >= t1), _stopped(crossings))
    finite = _mask((y * 0.0).sum() == 0.0) * (1.0 - broken)   # (inf * 0, nan: nan)
    status = reached * finite - 1.0 - (1.0 - finite)    # 0, -1 (max_steps), -2 (not finite)
    if out is not None:
        out = ops.where(_mask(times <= t)[:, None] * finite > 0.5, out, math.nan)
    return _with_events(times, out, max_steps, nfev, status, crossings, False)


Attempt = namedtuple("Attempt", ["moved", "h", "t_new", "y_new", "k_end", "ks", "dense",
                                 "accept", "norm", "nfev"])
Attempt.__doc__ = """One attempted step: ``moved`` (t, y, k1, h) after it (as before where
rejected; h the next size to try), the size h tried, the step's end t_new, y_new, slope
k_end, the stages ks and the method's dense weights (for outputs), accept (1.0 / 0.0),
the error norm and the right-hand sides it evaluated."""


def _attempt(f, tableau, t, y, k1, h, left, rtol, atol, max_step, system=None):
    """One attempt of an adaptive step from (t, y), k1 = f(t, y), of size h clipped to
    max_step and to ``left`` (the time left: 0 after the end, where it moves nothing),
    with scipy's error norm and step-size rule, as data."""
    proposed = ops.minimum(h, max_step)
    h = ops.minimum(proposed, left)
    if isinstance(tableau, Rosenbrock):
        y_new, error, stages = _rosenbrock_step(f, tableau, t, y, h, proposed, k1, system)
        k_end = f(t + h, y_new)
        ks, dense, nfev = [k1], None, len(stages)       # (outputs: cubic Hermite)
    else:
        ks = _stages(f, tableau, t, y, h, k1)
        y_new = y + h * sum(b * k for b, k in zip(tableau.b, ks) if b != 0.0)
        k_end = ks[-1] if tableau.fsal else f(t + h, y_new)
        error = h * sum(e * k for e, k in zip(tableau.e, ks) if e != 0.0)
        dense, nfev = tableau.dense, len(ks) - 1 + (not tableau.fsal)
    scale = atol + rtol * ops.maximum(abs(y), abs(y_new))
    norm = _rms(error / scale)
    accept = _mask(norm <= 1.0)                          # (0 or 1: data)
    factor = _frozen(ops.clip(
        SAFETY * ops.maximum(norm, 1e-10) ** (-1.0 / (tableau.order + 1)),
        MIN_FACTOR, MAX_FACTOR))
    t_new = t + h
    moved = (ops.where(accept > 0.5, t_new, t), ops.where(accept > 0.5, y_new, y),
             ops.where(accept > 0.5, k_end, k1),
             ops.where(h > 0, h * factor, proposed))     # (after the end: kept as it was)
    return Attempt(moved, h, t_new, y_new, k_end, ks, dense, accept, norm, nfev)


_steppers = weakref.WeakKeyDictionary()   # fun -> {(method, rtol, atol, max_step,
                                          # jac_sparsity): the compiled attempt}


def march(fun, t0, y0, stops, args=(), method="RK45", rtol=1e-3, atol=1e-6,
          max_step=math.inf, max_steps=4096, jac_sparsity=None):
    """The states at the increasing times ``stops`` (after t0) of y' = fun(t, y, *args)
    from y0, as numbers (len(stops), n): the adaptive solve of solve_ivp, each attempt
    one call of its compiled form (at.compile: recorded once per fun and settings, then
    replayed; its generated code compiles beside the calls), so no op is recorded per
    step and a long solve costs microseconds a step. Each stop is landed on, not
    interpolated. Not differentiable: what the continuous adjoint solves with, forward
    and backward (ode_adjoint.py); args are taken as numbers.

    >>> y = at.integrate.march(lambda t, y, k: -k * y, 0.0, np.array([1.0]), [1.0, 2.0],
    ...                        args=(np.array(2.0),), rtol=1e-10, atol=1e-12)
    >>> np.round(y[:, 0], 8)                    # exp(-2), exp(-4)
    array([0.13533528, 0.01831564])
    """
    tableau = METHODS.get(method)
    if tableau is None or tableau.e is None:
        raise ValueError(f"march: method must be an adaptive one of {sorted(METHODS)}, "
                         f"not {method!r}")
    args = tuple(np.array(a.detach().numpy() if isinstance(a, Tensor) else a, np.float64)
                 for a in args)
    y = np.array(y0.detach().numpy() if isinstance(y0, Tensor) else y0, np.float64)
    with no_grad():
        f = _numbers_field(fun, args)
        t, y_t = as_tensor(np.float64(t0)), as_tensor(y)
        k1 = f(t, y_t)
        h = _frozen(_initial_step(f, t, y_t, k1, tableau.order, rtol, atol)).numpy()
    t, k1 = np.float64(t0), k1.numpy()
    step = _stepper(fun, tableau, method, rtol, atol, max_step, jac_sparsity,
                    (t, y, k1, h, np.float64(t0)) + args)
    out = np.empty((len(stops), y.size))
    attempts = 0
    for k, stop in enumerate(stops):
        stop = np.float64(stop)
        while t < stop:
            if attempts == max_steps:
                raise RuntimeError(f"solve_ivp: max_steps ({max_steps}) attempts reached "
                                   f"at t = {t:.6g} before {stop:g}; raise max_steps or "
                                   "loosen rtol / atol")
            moved = step(t, y, k1, h, stop, *args)
            t, y, k1, h, norm = (v.numpy() for v in moved)
            attempts += 1
            if not (math.isfinite(norm) and np.isfinite(y).all()):
                raise RuntimeError(f"solve_ivp: fun gave a non-finite value near t = "
                                   f"{float(t):.6g}: the state is not finite there")
        out[k] = y
    return out


def _segments(fun, t0, y0, stops, args, options):
    """The states at ``stops`` as numbers: ``march`` for the adaptive methods, an
    eager solve without recording for fixed steps (they are fixed by the span)."""
    if METHODS[options["method"]].e is not None:
        return march(fun, t0, y0, stops, args, **options)
    with no_grad():
        sol = solve_ivp(fun, (t0, stops[-1]), as_tensor(y0), t_eval=stops,
                        args=tuple(as_tensor(a) for a in args), **options)
    return np.asarray(sol.y.numpy()).T


def _numbers_field(fun, args):
    return lambda t, state: as_tensor(fun(t, state, *args))


def _stepper(fun, tableau, method, rtol, atol, max_step, jac_sparsity, example):
    """The compiled attempt (t, y, k1, h, t_stop, *args) -> (t, y, k1, h, error norm),
    recorded at the ``example`` arguments."""
    key = (method, rtol, atol, max_step, jac_sparsity)
    held, cacheable = ode_adjoint.weakly_held(fun)
    cacheable = cacheable and (jac_sparsity is None or isinstance(jac_sparsity, str))
    known = _steppers.setdefault(fun, {}) if cacheable else {}
    step = known.get(key)
    if step is None:
        system = _sparse_system(jac_sparsity, tableau, fun, example[0],
                                as_tensor(example[1]), example[5:])

        def attempt(t, y, k1, h, stop, *args):
            a = _attempt(_numbers_field(held(), args), tableau, t, y, k1, h, stop - t,
                         rtol, atol, max_step, system)
            return a.moved + (a.norm,)
        step = known[key] = compile_(attempt, *example)
    return step


def _stopped(crossings):
    """1.0 once a terminal event has stopped the solve (data), else 0.0."""
    return 0.0 if crossings is None else crossings.stopped


def _with_events(times, out, nsteps, nfev, status, crossings, eager):
    """The result, with the events located; after a terminal event's time, outputs
    and other events' crossings are dropped (eagerly) or nan (compiled), and the
    status is 1 (a crossing past max_events: an error, compiled status -3)."""
    if crossings is None:
        return _result(times, out, nsteps, nfev, status)
    t_events, y_events, overflow = crossings.located(eager)
    stop = math.inf if eager else as_tensor(np.float64(math.inf))
    for k, e in enumerate(crossings.events):
        if not e.terminal:
            continue
        if eager:
            if t_events[k].shape[0] >= e.terminal:
                stop = min(stop, float(t_events[k][e.terminal - 1].detach()))
        else:
            stop = ops.minimum(stop, ops.where(t_events[k][e.terminal - 1] * 0.0 == 0.0,
                                               t_events[k][e.terminal - 1], math.inf))
    if eager:
        if float(overflow) > 0.5:
            raise RuntimeError(f"solve_ivp: an event crossed zero more than max_events "
                               f"({max(e.capacity for e in crossings.events)}) times; raise "
                               "max_events")
        if stop < math.inf:
            keep = times <= stop
            times, out = times[keep], out[np.flatnonzero(keep)] if out is not None else out
            kept = [np.flatnonzero(t.detach().numpy() <= stop) for t in t_events]
            t_events = [t[i] for t, i in zip(t_events, kept)]
            y_events = [v[i] for v, i in zip(y_events, kept)]
            status = 1
    else:
        late = [_mask(t > stop) for t in t_events]
        t_events = [ops.where(m > 0.5, math.nan, t) for m, t in zip(late, t_events)]
        y_events = [ops.where(m[:, None] > 0.5, math.nan, v) for m, v in zip(late, y_events)]
        if out is not None:
            out = ops.where(_mask(times > stop)[:, None] > 0.5, math.nan, out)
        status = ops.where(overflow > 0.5, -3.0,
                           ops.where(_stopped(crossings) > 0.5, 1.0, status))
    return _result(times, out, nsteps, nfev, status)._replace(t_events=t_events,
                                                              y_events=y_events)


def _frozen(x):
    """x > 0 (a step size, a step-size factor) with derivative 0, to a relative 1e-10:
    gradients take the steps as chosen and do not flow through the step-size control.
    Its derivative is of the order of the local error, yet relative to a small
    sensitivity large where a stiff transient sets the first steps (Van der Pol,
    mu = 1000: d/dy0[1] 0.6% off at rtol 1e-10 through the control, 1e-7 without).
    (A floor of log2 x: recorded like any op, so at.compile replays it.)"""
    return ops.exp2(ops.floor(ops.log2(x) * 2.0 ** 32) * 2.0 ** -32)


def _check_finite(y, where):
    if not bool(abs(y.detach()).max() < math.inf):          # (nan compares False)
        raise RuntimeError(f"solve_ivp: the state is not finite {where}")


def _rms(v):
    """The root mean square (scipy's error norm); its derivative stays finite at 0,
    where a step of size 0 (after the end) has error 0."""
    return ops.sqrt(mean(v * v) + 1e-300)


def _mask(condition):
    """A comparison as 1.0 / 0.0 data (so that masks combine by arithmetic)."""
    return ops.where(condition, 1.0, 0.0)


def _initial_step(f, t, y, k1, order, rtol, atol):
    """scipy's first step size (Hairer, Norsett & Wanner), as data."""
    scale = atol + abs(y) * rtol
    d0 = _rms(y / scale)
    d1 = _rms(k1 / scale)
    small = _mask(d0 < 1e-5) + _mask(d1 < 1e-5) > 0.5
    h0 = ops.where(small, 1e-6, 0.01 * d0 / ops.where(small, 1.0, d1))
    k2 = f(t + h0, y + h0 * k1)
    d2 = _rms((k2 - k1) / scale) / h0
    largest = ops.maximum(d1, d2)
    h1 = ops.where(largest <= 1e-15, ops.maximum(1e-6, h0 * 1e-3),
                   (0.01 / ops.maximum(largest, 1e-15)) ** (1.0 / (order + 1)))
    return ops.minimum(100 * h0, h1)


# Dense output. Each attempt leaves a row: where it starts (t), where the solve is after
# it (its end if accepted, else t: so these never decrease along the rows), its size, y,
# and its continuous extension as one polynomial in theta (the coefficients combine the
# stages once) or cubic Hermite's end values. After the solve each output time finds
# its attempt by a search over the rows (the first whose "after" reaches it: an
# accepted one) and is interpolated once. Interpolating every output time at every
# attempt (masked) cost work in proportion to their product: with 401 output times a
# Lotka-Volterra solve took 3.9x diffrax's time, where diffrax interpolates only the
# times inside each step. Compiled, the search and the pick are instructions of their
# own (SEARCH, PICK: kernels/instruction_format.py); the loop's repetitions left out
# where the solve settled after its end are filled in for the pick (kernels/settling.py).

def _dense_row(t, t_after, h, y, y_new, ks, k_end, dense):
    head = stack([as_tensor(t), as_tensor(t_after), as_tensor(h)])
    if dense is None:
        return concatenate([head, y, y_new, ks[0], k_end])
    return concatenate([head, y] + [_total([row[j] * k for row, k in zip(dense, ks)
                                            if row[j] != 0.0])
                                    for j in range(len(dense[0]))])


def _dense_output(rows, times, t0, y0, dense):
    """The outputs (times, states) from the attempts' rows (``_dense_row``): an output
    time at t0, or after every row's reach (a solve stopped early), keeps y0."""
    table = stack(rows)
    count, width = table.shape
    n = y0.shape[0]
    found = search_positions(table[:, 1], times)
    attempt = ops.minimum(found, count - 1.0)
    row = take_flat(table.reshape(-1), attempt[:, None] * width +
                    np.arange(width, dtype=float))
    t, h, y = row[:, 0], row[:, 2], row[:, 3:3 + n]
    positive = ops.where(h > 0, h, 1.0)           # (a step of 0 after the end: no 1/0)
    theta = ops.clip((times - t) / positive, 0.0, 1.0)
    if dense is None:
        values = _hermite(y, row[:, 3 + n:3 + 2 * n], row[:, 3 + 2 * n:3 + 3 * n],
                          row[:, 3 + 3 * n:], h[:, None], theta)
    else:
        values = y + h[:, None] * _extension(
            [row[:, 3 + n * (j + 1):3 + n * (j + 2)] for j in range(len(dense[0]))], theta)
    inside = np.asarray(times > t0, float) * _mask(found < count)
    return ops.where(inside[:, None] > 0.5, values, broadcast_to(y0, values.shape))


def _extension(coefficients, theta):
    """sum_j coefficients[j] theta^(j + 1) for each output time's theta, rows (times,
    states), by Horner's rule."""
    th = broadcast_to(theta[:, None], coefficients[0].shape)     # (once, not per term)
    v = th * coefficients[-1]
    for c in reversed(coefficients[:-1]):
        v = th * (c + v)
    return v


def _total(terms):
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _fixed_steps(f, tableau, t0, t1, y, times, step, max_steps, crossings):
    if not math.isfinite(step) or step <= 0:
        raise ValueError("solve_ivp: RK4 takes fixed steps: give first_step (or max_step)")
    n = int(math.ceil((t1 - t0) / step - 1e-12))
    if n > max_steps:
        raise RuntimeError(f"solve_ivp: {n} steps of {step:g} exceed max_steps ({max_steps})")
    h = (t1 - t0) / n
    y0, rows = y, [] if times.size else None
    t = as_tensor(np.float64(t0)) if crossings is not None else t0
    k1 = f(t, y)
    if crossings is not None:
        crossings.start(t, y)
    for _ in range(n):
        step = h * (1.0 - crossings.stopped) if crossings is not None else h
        ks = _stages(f, tableau, t, y, step, k1)
        y_new = y + step * sum(b * k for b, k in zip(tableau.b, ks))
        k_end = f(t + step, y_new)
        if rows is not None:
            rows.append(_dense_row(t, t + step, step, y, y_new, [k1], k_end, None))
        if crossings is not None:
            crossings.step(t, step, y, y_new, k1, k_end, 1.0)
        y, k1, t = y_new, k_end, t + step
    out = _dense_output(rows, times, t0, y0, None) if rows is not None else None
    if crossings is None:
        return _result(times, out, n, 4 * n + 1, 0)
    eager = current_trace() is None
    status = 0 if eager else as_tensor(np.float64(0.0))
    if out is not None and not eager:
        out = ops.where(_mask(times <= t)[:, None] > 0.5, out, math.nan)
    return _with_events(times, out, n, 4 * n + 1, status, crossings, eager)


MESSAGES = {0: "The solver successfully reached the end of the integration interval.",
            1: "A termination event occurred.",
            -1: "max_steps attempts were not enough to reach the end (the outputs after "
                "the last time reached are nan).",
            -2: "The state, or a step's error estimate, became non-finite (the outputs "
                "after it are nan)."}


def _result(times, out, nsteps, nfev, status):
    """The OdeResult; a compiled solve's status is a 0-d tensor (0, -1 or -2) and its
    message and success say so."""
    y = out.T if out is not None else None
    if isinstance(status, Tensor):
        return OdeResult(times, y, status, "under at.compile: see status (0: the end was "
                         "reached, 1: a terminal event, -1: max_steps, -2: a non-finite "
                         "state, -3: more crossings than max_events)", status >= 0.0,
                         nfev, nsteps)
    return OdeResult(times, y, status, MESSAGES[status], status >= 0, nfev, nsteps)
