"""Events of ``solve_ivp``: zero crossings of functions g(t, y, *args), located on each
step's cubic Hermite interpolant, with the gradient of the event time.

As everything else in the solver, detection is data: after each attempted step every
event's value at the step's end is compared with its value at the start, and a crossing
(in the event's ``direction``) writes the step (start time, size, end states and
slopes) into the next of the event's slots by a ``where`` on a one-hot mask; a terminal
event that has used its slots stops the solve (the later attempts have size 0). After
the last attempt each slot's root is located on its step's interpolant by bisection
(52 halvings of the step fraction: every bracket is a constant of the recording, so
nothing flows through it), then refined by one Newton step whose value is recorded:

    theta* = theta - phi(theta) / phi'(theta),   phi(theta) = g(t + theta h, Y(theta))

Since phi(theta) is 0 to rounding, theta*'s derivative is the implicit function
theorem's, -(dphi/dp) / phi', and the event time t + theta* h and state Y(theta*)
carry exact gradients with respect to y0 and the args (the step sizes, as everywhere
in the solver, are taken as chosen).
"""
from collections import namedtuple
from contextlib import nullcontext

import numpy as np

from . import func
from .grad_mode import no_grad
from .ops import elementwise as ops
from .ops.indexing import as_tensor, stack

__all__ = ["Event", "events_of", "Crossings"]

Event = namedtuple("Event", ["fn", "terminal", "direction", "capacity"])
Event.__doc__ = """One event: its function, the crossings after which it stops the solve
(0: never), the direction it counts (+1 up, -1 down, 0 both) and its slots."""

HALVINGS = 52               # bisections of the step fraction: to 2^-52, double precision


def events_of(events, max_events):
    """scipy's ``events`` (a callable or a list; ``terminal`` and ``direction``
    attributes) as Events: a terminal event has as many slots as the crossings it waits
    for, any other ``max_events``."""
    if events is None:
        return []
    events = list(events) if isinstance(events, (list, tuple)) else [events]
    found = []
    for k, e in enumerate(events):
        if not callable(e):
            raise TypeError(f"solve_ivp: events[{k}] is not callable")
        terminal = getattr(e, "terminal", False)
        terminal = int(terminal) if not isinstance(terminal, bool) else int(terminal)
        if terminal < 0:
            raise ValueError(f"solve_ivp: events[{k}].terminal must be a bool or a "
                             f"positive count, got {terminal}")
        direction = float(getattr(e, "direction", 0.0))
        found.append(Event(e, terminal, float(np.sign(direction)),
                           terminal if terminal else int(max_events)))
    if int(max_events) < 1:
        raise ValueError(f"solve_ivp: max_events must be at least 1, got {max_events}")
    return found


def _mask(condition):
    return ops.where(condition, 1.0, 0.0)


def hermite(y, y_new, k_start, k_end, h, theta):
    """The cubic Hermite interpolant of a step and its derivative in theta (0-d)."""
    d = y_new - y
    p, dp = theta * (theta - 1.0), 2.0 * theta - 1.0
    q = (1.0 - 2.0 * theta) * d + (theta - 1.0) * h * k_start + theta * h * k_end
    dq = -2.0 * d + h * k_start + h * k_end
    return y + theta * d + p * q, d + dp * q + p * dq


class Crossings:
    """Every event's crossings along one solve, as data (see the module's docstring).

    ``start(t, y)`` reads the events at the initial state; ``step(...)`` after each
    attempt returns the mask of a stop; ``located(eager)`` gives (t_events, y_events,
    overflow): per event, the located times and states (eagerly only the slots used;
    compiled every slot, nan where unused), and a mask of crossings that found no slot."""

    def __init__(self, events, args):
        self.events, self.args = events, args
        self.stopped = 0.0
        self.overflow = 0.0

    def _value(self, k, t, y):
        g = as_tensor(self.events[k].fn(t, y, *self.args))
        if g.size != 1:
            raise ValueError(f"solve_ivp: events[{k}] must return a number, got shape "
                             f"{g.shape}")
        return g.reshape(())

    def start(self, t, y):
        self.g = [self._value(k, t, y) for k in range(len(self.events))]
        self.count = [0.0] * len(self.events)
        n = y.shape[0]
        self.slots = []
        for e in self.events:
            c = e.capacity                     # (a stand-in step, finite everywhere)
            self.slots.append([stack([t] * c), stack([1.0 + 0.0 * t] * c), stack([y] * c),
                               stack([y] * c), stack([y * 0.0] * c), stack([y * 0.0] * c)])
        self.n = n

    def step(self, t, h, y, y_new, k_start, k_end, accept):
        """One attempt from (t, y) by h to y_new, accepted where ``accept`` is 1."""
        live = accept * (1.0 - self.stopped)
        stop = 0.0
        for k, e in enumerate(self.events):
            g_old, g_new = self.g[k], self._value(k, t + h, y_new)
            up, down = _mask(g_old < 0.0) * _mask(g_new >= 0.0), \
                _mask(g_old > 0.0) * _mask(g_new <= 0.0)
            turned = up if e.direction > 0 else down if e.direction < 0 else up + down
            crossed = live * turned
            slot = crossed * _mask(np.arange(e.capacity) == self.count[k])   # (one-hot)
            write = slot > 0.5
            column = slot[:, None] > 0.5         # (a float mask indexed, then compared:
                                                 #  indexing a comparison reads its value)
            ts, hs, ys, yns, kss, kes = self.slots[k]
            self.slots[k] = [ops.where(write, t, ts), ops.where(write, h, hs),
                             ops.where(column, y, ys), ops.where(column, y_new, yns),
                             ops.where(column, k_start, kss), ops.where(column, k_end, kes)]
            self.overflow = ops.maximum(self.overflow,
                                        crossed * _mask(self.count[k] >= e.capacity))
            self.count[k] = self.count[k] + crossed
            self.g[k] = ops.where(live > 0.5, g_new, g_old)
            if e.terminal:
                stop = ops.maximum(stop, _mask(self.count[k] >= e.terminal))
        self.stopped = ops.maximum(self.stopped, stop)
        return self.stopped

    def located(self, eager):
        times, states = [], []
        for k, e in enumerate(self.events):
            used = int(float(self.count[k])) if eager else e.capacity
            ts, hs, ys, yns, kss, kes = self.slots[k]
            found_t, found_y = [], []
            for j in range(min(used, e.capacity)):
                valid = _mask(j < self.count[k]) > 0.5 if not eager else None
                t_j, y_j = self._root(k, ts[j], hs[j], ys[j], yns[j], kss[j], kes[j],
                                      valid)
                found_t.append(t_j)
                found_y.append(y_j)
            if not found_t:
                times.append(as_tensor(np.zeros(0)))
                states.append(as_tensor(np.zeros((0, self.n))))
            else:
                times.append(stack(found_t))
                states.append(stack(found_y))
        return times, states, self.overflow

    def _root(self, k, t, h, y, y_new, k_start, k_end, valid):
        """The crossing in one step: bisection on the fraction, then a Newton step."""
        def phi(theta):
            return self._value(k, t + theta * h, hermite(y, y_new, k_start, k_end, h,
                                                         theta)[0])
        # the brackets are made of 0, 1 and masks: constants, nothing flows through them
        # (eagerly they need no recording at all)
        with no_grad() if valid is None else nullcontext():
            lo, hi = 0.0 * h, 1.0 + 0.0 * h
            g_lo = phi(lo)
            for _ in range(HALVINGS):
                mid = 0.5 * (lo + hi)
                same = _mask(phi(mid) * g_lo > 0.0) > 0.5      # root in the upper half
                lo, hi = ops.where(same, mid, lo), ops.where(same, hi, mid)
            theta = 0.5 * (lo + hi)
        y_theta, slope_y = hermite(y, y_new, k_start, k_end, h, theta)
        g_t, g_y = func.grad(lambda tt, yy: self._value(k, tt, yy), argnums=(0, 1))(
            t + theta * h, y_theta)
        slope = g_t * h + (g_y * slope_y).sum()
        if valid is not None:                    # (a stand-in slot: no 0 slope, no nan)
            slope = ops.where(valid, slope, 1.0)
        theta = theta - phi(theta) / slope
        t_event = t + theta * h
        y_event = hermite(y, y_new, k_start, k_end, h, theta)[0]
        if valid is not None:
            t_event = ops.where(valid, t_event, np.nan)
            y_event = ops.where(valid, y_event, np.nan)
        return t_event, y_event

