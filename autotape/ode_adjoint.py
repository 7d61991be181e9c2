"""The continuous adjoint of ``solve_ivp`` (``adjoint="backsolve"``): gradients of a
long solve in memory that does not grow with its steps.

The forward solve runs without recording anything and keeps only the outputs. The
gradient then solves the adjoint equations backwards in time, from the last output
time to the first, with the state carried along (its own backwards solve, reset to the
forward solution at every output time):

    dy/dt = f(t, y),   da/dt = -a . df/dy,   dg_p/dt = -a . df/dp

with a jumping by the output's cotangent at each output time; a(t0) is the gradient
with respect to y0 and g_p(t0) with respect to the args. Each right-hand side of the
augmented system is one vector-Jacobian product of ``fun`` (autotape's reverse mode on
one evaluation). This is optimise-then-discretise: the gradient is that of the exact
solution to the solver's tolerance, not of the discrete solve (so it differs from the
default, through-the-solver gradient by about the tolerance), and recomputing y
backwards can lose accuracy on strongly dissipative (stiff) problems, as every
backsolve adjoint (torchdiffeq's, diffrax's BacksolveAdjoint) does.
"""
import types
import weakref

import numpy as np

from . import func
from .custom import CustomOp
from .grad_mode import enable_grad
from .ops.indexing import as_tensor, concatenate
from .tensor import Tensor

__all__ = ["backsolve", "weakly_held"]


def backsolve(segments, fun, t_span, y0, times, args, options, jac_sparsity=None):
    """The outputs at ``times`` (a Tensor (len(times), n)) of y' = fun(t, y, *args) from
    y0, differentiable with respect to y0 and the args by the continuous adjoint.
    ``segments(fun, t0, y0, stops, args, options)``: the states at the times ``stops``
    as numbers (integrate.py's: each attempt one call of a compiled step); ``options``
    solve_ivp's, ``jac_sparsity`` for the forward solve (the augmented system's
    Jacobian is dense in its parameter rows)."""
    t0 = t_span[0]
    args = tuple(a if isinstance(a, Tensor) else as_tensor(a) for a in args)
    n = y0.shape[0]
    shapes = [a.shape for a in args]

    def forward(y0_value, *arg_values):
        return segments(fun, t0, y0_value, times, arg_values,
                        dict(options, jac_sparsity=jac_sparsity))

    def vjp(inputs, outputs, cotangent):
        y_values, arg_values = np.asarray(outputs), [np.asarray(a) for a in inputs[1:]]
        sizes = [a.size for a in arg_values]
        augmented = _augmented(fun, n)
        a = np.zeros(n)
        g_p = np.zeros(sum(sizes))
        stops = list(times[::-1]) + ([t0] if times[0] > t0 else [])
        for k, (start, stop) in enumerate(zip(stops, stops[1:] + [None])):
            if k < len(times):
                a = a + cotangent[len(times) - 1 - k]
            if stop is None or stop == start:
                continue
            z = np.concatenate([y_values[len(times) - 1 - k], a, g_p])
            z = segments(augmented, -start, z, [-stop], arg_values, options)[-1]
            a, g_p = z[n:2 * n], z[2 * n:]
        grads = [a]
        for size, shape, start in zip(sizes, shapes, np.cumsum([0] + sizes[:-1])):
            grads.append(g_p[start:start + size].reshape(shape))
        return tuple(grads)

    op = CustomOp(forward, vjp, "solve_ivp_backsolve")
    return op(y0, *args)


_augmenteds = weakref.WeakKeyDictionary()     # fun -> {n: its augmented system}


def weakly_held(fun):
    """(a function returning fun, whether fun can key a cache of weak keys): what a
    cache of things made for fun holds, so that it does not keep fun alive. A bound
    method (made anew at each attribute access, so its weak key dies at once) or an
    object without weak references is held strongly and not cached.

    >>> f = lambda t, y: -y
    >>> held, cacheable = weakly_held(f)
    >>> held() is f, cacheable
    (True, True)
    """
    if isinstance(fun, types.MethodType):
        return (lambda: fun), False
    try:
        return weakref.ref(fun), True
    except TypeError:
        return (lambda: fun), False


def _augmented(fun, n):
    """The adjoint's right-hand side for fun with n states, in reversed time s = -t:
    z = (y, a, g) with dy/ds = -f, da/ds = a.df/dy, dg/ds = a.df/dp (one VJP of fun),
    the parameters p its args. One function per fun (its compiled step is kept)."""
    held, cacheable = weakly_held(fun)
    known = _augmenteds.setdefault(fun, {}) if cacheable else {}
    if n not in known:
        def augmented(t, z, *params):
            y, a = z[:n], z[n:2 * n]
            fun = held()
            with enable_grad():
                f_value, pull = func.vjp(lambda yy, *pp: as_tensor(fun(-t, yy, *pp)), y,
                                         *params)
                pulled = pull(a)
            return concatenate([-f_value, pulled[0]] + [g.reshape(-1) for g in pulled[1:]])
        known[n] = augmented
    return known[n]


def check(adjoint, events, times):
    """The cases the continuous adjoint does not take, as errors."""
    if adjoint != "backsolve":
        raise ValueError(f"solve_ivp: adjoint must be None (through the solver) or "
                         f"'backsolve', not {adjoint!r}")
    if events is not None:
        raise ValueError("solve_ivp: adjoint='backsolve' does not take events (their "
                         "times' gradients come through the solver: adjoint=None)")
    if not len(times):
        raise ValueError("solve_ivp: adjoint='backsolve' needs at least one output time")
