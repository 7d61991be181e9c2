"""The zoo: simulations written as scientists write them, each three times.

- ``<name>(p)``: a plain Python loop in numpy style, which ``at.compile`` records (numpy
  functions on Tensors dispatch to autotape's);
- ``<name>_jax(jax)``: the same model for ``jax.jit``, the loop a ``lax.fori_loop``;
- ``<name>_numba``: a ``numba.njit`` forward run of the same model, value only (the
  floor: a hand-written adjoint costs about 1.5-2x its forward).

Each returns a scalar loss of its parameters ``p`` (``PARAMS[name]``). Together they
cover what issue #27 lists: forcing from the loop index, forcing data indexed by step,
a 2-D stencil with np.roll, slices and concatenate at the boundaries, a loss summed
inside the loop, pairwise forces with broadcasting and sums over an axis, Newton
iterations inside a step, small matmuls; the ensemble is test_zoo.py's vmap of one of
them.
"""
import math

import numba
import numpy as np

from workloads import AMP, DT as H, OMEGA, driven_pendulum_at
from workloads import driven_pendulum_jax as _driven_pendulum_jax

# ---- 1. driven pendulum: forcing from the loop index (t = i * h); workloads.py's step ----------

PENDULUM_STEPS = 1000


def driven_pendulum(p):
    return driven_pendulum_at(p, PENDULUM_STEPS)


def driven_pendulum_jax(jax):
    return _driven_pendulum_jax(jax, PENDULUM_STEPS)


@numba.njit(cache=True)
def driven_pendulum_numba(p):
    x, v = p[0], p[1]
    for i in range(PENDULUM_STEPS):
        x, v = _pendulum_step_nb(p, x, v, i * H)
    return x * x + v * v


@numba.njit(cache=True)
def _acc_nb(p, x, v, s):
    return -p[2] * math.sin(x) - p[3] * v + AMP * math.cos(OMEGA * s)


@numba.njit(cache=True)
def _pendulum_step_nb(p, x, v, t):
    k1x, k1v = v, _acc_nb(p, x, v, t)
    k2x, k2v = v + 0.5 * H * k1v, _acc_nb(p, x + 0.5 * H * k1x, v + 0.5 * H * k1v, t + 0.5 * H)
    k3x, k3v = v + 0.5 * H * k2v, _acc_nb(p, x + 0.5 * H * k2x, v + 0.5 * H * k2v, t + 0.5 * H)
    k4x, k4v = v + H * k3v, _acc_nb(p, x + H * k3x, v + H * k3v, t + H)
    return (x + H / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x),
            v + H / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v))


# ---- 2. spring chain driven by a data array (forcing data indexed by step) -------------------

CHAIN, CHAIN_STEPS, CHAIN_H = 16, 500, 0.02
FORCE = np.sin(np.linspace(0.0, 12.0, CHAIN_STEPS)) * np.exp(-np.linspace(0.0, 2.0, CHAIN_STEPS))
FIRST = np.eye(CHAIN)[0]


def spring_chain(p):
    """p: (stiffness, damping, coupling)."""
    x, v = np.zeros(CHAIN), np.zeros(CHAIN)
    for t in range(CHAIN_STEPS):
        lap = np.concatenate([x[1:2] - x[0:1], x[2:] - 2.0 * x[1:-1] + x[:-2],
                              x[-2:-1] - x[-1:]])
        a = -p[0] * x - p[1] * v + p[2] * lap + FORCE[t] * FIRST
        v = v + CHAIN_H * a
        x = x + CHAIN_H * v
    return (x * x).sum()


def spring_chain_jax(jax):
    jnp = jax.numpy
    force, first = jnp.asarray(FORCE), jnp.asarray(FIRST)

    def f(p):
        def body(t, s):
            x, v = s
            lap = jnp.concatenate([x[1:2] - x[0:1], x[2:] - 2.0 * x[1:-1] + x[:-2],
                                   x[-2:-1] - x[-1:]])
            a = -p[0] * x - p[1] * v + p[2] * lap + force[t] * first
            v = v + CHAIN_H * a
            return x + CHAIN_H * v, v
        x, _ = jax.lax.fori_loop(0, CHAIN_STEPS, body, (jnp.zeros(CHAIN), jnp.zeros(CHAIN)))
        return (x * x).sum()
    return f


@numba.njit(cache=True)
def spring_chain_numba(p):
    x, v, a = np.zeros(CHAIN), np.zeros(CHAIN), np.zeros(CHAIN)
    for t in range(CHAIN_STEPS):
        for i in range(CHAIN):
            left = x[i - 1] if i > 0 else x[i]
            right = x[i + 1] if i < CHAIN - 1 else x[i]
            lap = (right - x[i]) + (left - x[i])
            a[i] = -p[0] * x[i] - p[1] * v[i] + p[2] * lap + (FORCE[t] if i == 0 else 0.0)
        for i in range(CHAIN):
            v[i] += CHAIN_H * a[i]
            x[i] += CHAIN_H * v[i]
    return (x * x).sum()


# ---- 3. 2-D reaction-diffusion, np.roll on both axes -------------------------------------------

GRID, RD_STEPS = 32, 200
_AXIS = np.linspace(-2.0, 2.0, GRID)
RD_START = np.exp(-_AXIS[:, None] ** 2 - 2.0 * _AXIS[None, :] ** 2)


def reaction_diffusion(p):
    """p: (diffusivity, growth rate)."""
    u = RD_START
    for _ in range(RD_STEPS):
        lap = np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) \
            - 4.0 * u
        u = u + 0.1 * (p[0] * lap + p[1] * u * (1.0 - u))
    return (u * u).mean()


def reaction_diffusion_jax(jax):
    jnp = jax.numpy

    def f(p):
        def body(_, u):
            lap = jnp.roll(u, 1, 0) + jnp.roll(u, -1, 0) + jnp.roll(u, 1, 1) + \
                jnp.roll(u, -1, 1) - 4.0 * u
            return u + 0.1 * (p[0] * lap + p[1] * u * (1.0 - u))
        u = jax.lax.fori_loop(0, RD_STEPS, body, jnp.asarray(RD_START))
        return (u * u).mean()
    return f


@numba.njit(cache=True)
def reaction_diffusion_numba(p):
    u, n = RD_START.copy(), GRID
    new = np.empty_like(u)
    for _ in range(RD_STEPS):
        for i in range(n):
            for j in range(n):
                lap = u[(i - 1) % n, j] + u[(i + 1) % n, j] + u[i, (j - 1) % n] + \
                    u[i, (j + 1) % n] - 4.0 * u[i, j]
                new[i, j] = u[i, j] + 0.1 * (p[0] * lap + p[1] * u[i, j] * (1.0 - u[i, j]))
        u, new = new, u
    return (u * u).mean()


# ---- 4. viscous Burgers: slices and np.concatenate for the boundaries ------------------------

CELLS, BURGERS_STEPS = 128, 300
BURGERS_START = np.sin(np.linspace(0.0, 2.0 * np.pi, CELLS))


def burgers(p):
    """p: (viscosity, advection speed)."""
    u = BURGERS_START
    for _ in range(BURGERS_STEPS):
        ux = np.concatenate([u[1:2] - u[0:1], 0.5 * (u[2:] - u[:-2]), u[-1:] - u[-2:-1]])
        uxx = np.concatenate([np.zeros(1), u[2:] - 2.0 * u[1:-1] + u[:-2], np.zeros(1)])
        u = u - 0.01 * p[1] * u * ux + 0.01 * p[0] * uxx
    return (u * u).sum()


def burgers_jax(jax):
    jnp = jax.numpy

    def f(p):
        def body(_, u):
            ux = jnp.concatenate([u[1:2] - u[0:1], 0.5 * (u[2:] - u[:-2]), u[-1:] - u[-2:-1]])
            uxx = jnp.concatenate([jnp.zeros(1), u[2:] - 2.0 * u[1:-1] + u[:-2], jnp.zeros(1)])
            return u - 0.01 * p[1] * u * ux + 0.01 * p[0] * uxx
        u = jax.lax.fori_loop(0, BURGERS_STEPS, body, jnp.asarray(BURGERS_START))
        return (u * u).sum()
    return f


@numba.njit(cache=True)
def burgers_numba(p):
    u, n = BURGERS_START.copy(), CELLS
    new = np.empty_like(u)
    for _ in range(BURGERS_STEPS):
        for i in range(n):
            if i == 0:
                ux, uxx = u[1] - u[0], 0.0
            elif i == n - 1:
                ux, uxx = u[n - 1] - u[n - 2], 0.0
            else:
                ux, uxx = 0.5 * (u[i + 1] - u[i - 1]), u[i + 1] - 2.0 * u[i] + u[i - 1]
            new[i] = u[i] - 0.01 * p[1] * u[i] * ux + 0.01 * p[0] * uxx
        u, new = new, u
    return (u * u).sum()


# ---- 5. an epidemic fit: the loss summed inside the loop --------------------------------------

DAYS = 365
CASES = 0.05 * np.exp(-((np.arange(DAYS) - 120.0) / 40.0) ** 2)


def epidemic(p):
    """SIR with p = (infection rate, recovery rate, initial infected); the squared
    misfit to CASES accumulates day by day."""
    s, i, loss = 1.0 - p[2], p[2], 0.0
    for day in range(DAYS):
        new = p[0] * s * i
        s, i = s - new, i + new - p[1] * i
        loss = loss + (i - CASES[day]) ** 2
    return loss


def epidemic_jax(jax):
    jnp = jax.numpy
    cases = jnp.asarray(CASES)

    def f(p):
        def body(day, c):
            s, i, loss = c
            new = p[0] * s * i
            s, i = s - new, i + new - p[1] * i
            return s, i, loss + (i - cases[day]) ** 2
        return jax.lax.fori_loop(0, DAYS, body, (1.0 - p[2], p[2], 0.0))[2]
    return f


@numba.njit(cache=True)
def epidemic_numba(p):
    s, i, loss = 1.0 - p[2], p[2], 0.0
    for day in range(DAYS):
        new = p[0] * s * i
        s, i = s - new, i + new - p[1] * i
        loss += (i - CASES[day]) ** 2
    return loss


# ---- 6. n-body: pairwise forces by broadcasting, sums over an axis ----------------------------

BODIES, NBODY_STEPS, SOFT = 8, 200, 0.1


def n_body(q):
    """q: initial positions (BODIES * 2,); velocities start at zero."""
    x = q.reshape(BODIES, 2)
    v = np.zeros((BODIES, 2))
    for _ in range(NBODY_STEPS):
        d = x[:, None, :] - x[None, :, :]
        r2 = (d * d).sum(axis=-1) + SOFT
        f = (d / r2[:, :, None] ** 1.5).sum(axis=1)
        v = v - 0.001 * f
        x = x + 0.001 * v
    return (x * x).sum()


def n_body_jax(jax):
    jnp = jax.numpy

    def f(q):
        def body(_, s):
            x, v = s
            d = x[:, None, :] - x[None, :, :]
            r2 = (d * d).sum(axis=-1) + SOFT
            v = v - 0.001 * (d / r2[:, :, None] ** 1.5).sum(axis=1)
            return x + 0.001 * v, v
        x, _ = jax.lax.fori_loop(0, NBODY_STEPS, body, (q.reshape(BODIES, 2),
                                                        jnp.zeros((BODIES, 2))))
        return (x * x).sum()
    return f


@numba.njit(cache=True)
def n_body_numba(q):
    x = q.reshape(BODIES, 2).copy()
    v = np.zeros((BODIES, 2))
    for _ in range(NBODY_STEPS):
        for a in range(BODIES):
            fx = fy = 0.0
            for b in range(BODIES):
                dx, dy = x[a, 0] - x[b, 0], x[a, 1] - x[b, 1]
                r = (dx * dx + dy * dy + SOFT) ** 1.5
                fx += dx / r
                fy += dy / r
            v[a, 0] -= 0.001 * fx
            v[a, 1] -= 0.001 * fy
        for a in range(BODIES):
            x[a, 0] += 0.001 * v[a, 0]
            x[a, 1] += 0.001 * v[a, 1]
    return (x * x).sum()


# ---- 7. implicit Euler with Newton iterations inside each step ---------------------------------

STIFF_STEPS, NEWTON, STIFF_H = 300, 4, 0.05


def implicit_euler(p):
    """y' = -p0 y^3 + p1 sin(t), one backward-Euler step per time step solved by a
    fixed count of Newton iterations (a loop nested in the loop over steps)."""
    y = p[2]
    for n in range(STIFF_STEPS):
        forcing = p[1] * math.sin((n + 1) * STIFF_H)
        z = y
        for _ in range(NEWTON):
            g = z - y - STIFF_H * (-p[0] * z ** 3 + forcing)
            z = z - g / (1.0 + 3.0 * STIFF_H * p[0] * z ** 2)
        y = z
    return y * y


def implicit_euler_jax(jax):
    jnp = jax.numpy

    def f(p):
        def step(n, y):
            forcing = p[1] * jnp.sin((n + 1) * STIFF_H)

            def newton(_, z):
                g = z - y - STIFF_H * (-p[0] * z ** 3 + forcing)
                return z - g / (1.0 + 3.0 * STIFF_H * p[0] * z ** 2)
            return jax.lax.fori_loop(0, NEWTON, newton, y)
        y = jax.lax.fori_loop(0, STIFF_STEPS, step, p[2])
        return y * y
    return f


@numba.njit(cache=True)
def implicit_euler_numba(p):
    y = p[2]
    for n in range(STIFF_STEPS):
        forcing = p[1] * math.sin((n + 1) * STIFF_H)
        z = y
        for _ in range(NEWTON):
            g = z - y - STIFF_H * (-p[0] * z ** 3 + forcing)
            z = z - g / (1.0 + 3.0 * STIFF_H * p[0] * z ** 2)
        y = z
    return y * y


# ---- 8. Lorenz-96: np.roll on a ring, forcing as a parameter ------------------------------------

L96, L96_STEPS, L96_H = 20, 400, 0.005
L96_START = 8.0 + 0.01 * np.sin(np.arange(L96))


def lorenz96(p):
    """p: (forcing, damping); RK2 (midpoint) steps."""
    x = L96_START
    for _ in range(L96_STEPS):
        def rhs(x):
            return (np.roll(x, -1) - np.roll(x, 2)) * np.roll(x, 1) - p[1] * x + p[0]
        x = x + L96_H * rhs(x + 0.5 * L96_H * rhs(x))
    return ((x - 8.0) ** 2).mean()


def lorenz96_jax(jax):
    jnp = jax.numpy

    def f(p):
        def rhs(x):
            return (jnp.roll(x, -1) - jnp.roll(x, 2)) * jnp.roll(x, 1) - p[1] * x + p[0]

        def body(_, x):
            return x + L96_H * rhs(x + 0.5 * L96_H * rhs(x))
        x = jax.lax.fori_loop(0, L96_STEPS, body, jnp.asarray(L96_START))
        return ((x - 8.0) ** 2).mean()
    return f


@numba.njit(cache=True)
def _l96_rhs(x, p, out):
    n = x.size
    for i in range(n):
        out[i] = (x[(i + 1) % n] - x[(i - 2) % n]) * x[(i - 1) % n] - p[1] * x[i] + p[0]


@numba.njit(cache=True)
def lorenz96_numba(p):
    x = L96_START.copy()
    k, mid = np.empty(L96), np.empty(L96)
    for _ in range(L96_STEPS):
        _l96_rhs(x, p, k)
        for i in range(L96):
            mid[i] = x[i] + 0.5 * L96_H * k[i]
        _l96_rhs(mid, p, k)
        for i in range(L96):
            x[i] += L96_H * k[i]
    return ((x - 8.0) ** 2).mean()


# ---- 9. a neural ODE: small matmuls (a weight matrix of parameters) --------------------------

UNITS, NODE_STEPS, NODE_H = 8, 300, 0.05
NODE_START = np.linspace(-1.0, 1.0, UNITS)
NODE_TARGET = np.cos(np.arange(NODE_STEPS)[:, None] * 0.02 + np.arange(UNITS)[None, :])


def neural_ode(p):
    """p: an UNITS x UNITS weight matrix and a bias; Euler steps of dx/dt = tanh(W x + b)
    - x, the misfit to a target trajectory summed inside the loop."""
    w, b = p[:UNITS * UNITS].reshape(UNITS, UNITS), p[UNITS * UNITS:]
    x, loss = NODE_START, 0.0
    for i in range(NODE_STEPS):
        x = x + NODE_H * (np.tanh(w @ x + b) - x)
        loss = loss + ((x - NODE_TARGET[i]) ** 2).sum()
    return loss / NODE_STEPS


def neural_ode_jax(jax):
    jnp = jax.numpy

    def f(p):
        w, b = p[:UNITS * UNITS].reshape(UNITS, UNITS), p[UNITS * UNITS:]

        def body(i, carry):
            x, loss = carry
            x = x + NODE_H * (jnp.tanh(w @ x + b) - x)
            return x, loss + ((x - jnp.asarray(NODE_TARGET)[i]) ** 2).sum()
        _, loss = jax.lax.fori_loop(0, NODE_STEPS, body, (jnp.asarray(NODE_START), 0.0))
        return loss / NODE_STEPS
    return f


@numba.njit(cache=True)
def neural_ode_numba(p):
    x, z = NODE_START.copy(), np.empty(UNITS)
    loss = 0.0
    for i in range(NODE_STEPS):
        for r in range(UNITS):
            s = 0.0
            for c in range(UNITS):
                s += p[r * UNITS + c] * x[c]
            z[r] = np.tanh(s + p[UNITS * UNITS + r])
        for r in range(UNITS):
            x[r] += NODE_H * (z[r] - x[r])
            loss += (x[r] - NODE_TARGET[i, r]) ** 2
    return loss / NODE_STEPS


PARAMS = {
    "driven_pendulum": np.array([0.3, 0.1, 1.0, 0.2]),
    "spring_chain": np.array([1.5, 0.2, 4.0]),
    "reaction_diffusion": np.array([0.2, 0.5]),
    "burgers": np.array([0.5, 1.0]),
    "epidemic": np.array([0.25, 0.1, 0.001]),
    "n_body": np.random.default_rng(0).uniform(-1.0, 1.0, 2 * BODIES),
    "implicit_euler": np.array([2.0, 1.0, 0.5]),
    "lorenz96": np.array([8.0, 1.0]),
    "neural_ode": np.concatenate([np.random.default_rng(2).normal(0.0, 0.4, UNITS * UNITS),
                                  np.linspace(-0.2, 0.2, UNITS)]),
}
MODELS = sorted(PARAMS)

__all__ = ["MODELS", "PARAMS"] + [f"{m}{suffix}" for m in MODELS
                                         for suffix in ("", "_jax", "_numba")]
