"""The compiled-program workloads (issue: compiled programs at machine speed), written
once per library: autotape (plain Python over at ops, recorded by at.compile), jax
(lax.fori_loop under jax.jit), and a hand-written numba floor (forward-mode dual
numbers: the value and all its parameter derivatives carried through the loop).

- scalar chain: 20,000 steps of 5 scalar ops (100,000 ops), value and gradient;
- pendulum: a damped pendulum, RK4, theta = (x0, v0, g/L, damping), loss x^2 + v^2
  after the last step, value and the 4-gradient;
- heat: 1-D explicit heat equation, 200 cells, periodic (np.roll), gradient of the
  final sum of squares with respect to the 200 cells' diffusivities;
- ensemble: the pendulum at B parameter sets, loss and gradient of each;
- trajectory: the pendulum's every state (x, v after each step) and their Jacobian by
  theta (forward mode; jax: lax.scan under jax.jit(jax.jacfwd)).
"""
import math

import numba
import numpy as np

import autotape as at

CHAIN_STEPS = 20_000
DT = 0.01


# ---- scalar chain ---------------------------------------------------------------------------

def chain_at(x):
    y = x[0]
    for _ in range(CHAIN_STEPS):
        y = at.exp(at.sin(y * 1.0001 + 0.5)) / 2.5
    return y


def chain_jax(jax):
    jnp = jax.numpy

    def f(x):
        def body(_, y):
            return jnp.exp(jnp.sin(y * 1.0001 + 0.5)) / 2.5
        return jax.lax.fori_loop(0, CHAIN_STEPS, body, x[0])
    return jax.jit(jax.value_and_grad(f))


@numba.njit(cache=True, fastmath=False)
def chain_numba(x):
    y, dy = x[0], 1.0
    for _ in range(CHAIN_STEPS):
        u = y * 1.0001 + 0.5
        s = math.sin(u)
        e = math.exp(s)
        dy = dy * 1.0001 * math.cos(u) * e / 2.5
        y = e / 2.5
    return y, dy


# ---- pendulum (RK4) ---------------------------------------------------------------------------

def rk4_step(theta, x, v, h, sin):
    """One RK4 step of the damped pendulum, for any library: ``sin`` is its sine
    (at.sin, jnp.sin, torch.sin)."""
    def accel(x, v):
        return -theta[2] * sin(x) - theta[3] * v
    k1x, k1v = v, accel(x, v)
    k2x, k2v = v + 0.5 * h * k1v, accel(x + 0.5 * h * k1x, v + 0.5 * h * k1v)
    k3x, k3v = v + 0.5 * h * k2v, accel(x + 0.5 * h * k2x, v + 0.5 * h * k2v)
    k4x, k4v = v + h * k3v, accel(x + h * k3x, v + h * k3v)
    return (x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x),
            v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v))


# The driven pendulum: a forcing AMP cos(OMEGA t) read at each stage's time t = i * DT
# (+ DT / 2, + DT), as a scientist writes it: a constant of its own at every step.
AMP, OMEGA = 0.5, 1.3


def driven_rk4_step(theta, x, v, t, h, sin, cos):
    """One RK4 step of the driven pendulum at time t, for any library."""
    def accel(x, v, s):
        return -theta[2] * sin(x) - theta[3] * v + AMP * cos(OMEGA * s)
    k1x, k1v = v, accel(x, v, t)
    k2x, k2v = v + 0.5 * h * k1v, accel(x + 0.5 * h * k1x, v + 0.5 * h * k1v, t + 0.5 * h)
    k3x, k3v = v + 0.5 * h * k2v, accel(x + 0.5 * h * k2x, v + 0.5 * h * k2v, t + 0.5 * h)
    k4x, k4v = v + h * k3v, accel(x + h * k3x, v + h * k3v, t + h)
    return (x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x),
            v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v))


def driven_pendulum_at(theta, steps):
    x, v = theta[0], theta[1]
    for i in range(steps):
        x, v = driven_rk4_step(theta, x, v, i * DT, DT, at.sin, math.cos)
    return x * x + v * v


def driven_pendulum_jax(jax, steps):
    jnp = jax.numpy

    def f(theta):
        def body(i, state):
            return driven_rk4_step(theta, state[0], state[1], i * DT, DT, jnp.sin, jnp.cos)
        x, v = jax.lax.fori_loop(0, steps, body, (theta[0], theta[1]))
        return x * x + v * v
    return f


@numba.njit(cache=True)
def driven_pendulum_numba(theta, steps):
    """Value and gradient of the driven pendulum, forward mode (the numba floor)."""
    x, v, dx, dv = _pendulum_dual(theta, steps, np.empty(0), np.empty((0, 4)), AMP)
    grad = np.empty(4)
    for k in range(4):
        grad[k] = 2.0 * x * dx[k] + 2.0 * v * dv[k]
    return x * x + v * v, grad


def pendulum_at(theta, steps):
    x, v = theta[0], theta[1]
    for _ in range(steps):
        x, v = rk4_step(theta, x, v, DT, at.sin)
    return x * x + v * v


def pendulum_trajectory(theta, steps, sin, stack):
    """The pendulum's trajectory: x and v after every step, flat (2 * steps,), eager in
    any library (``stack`` its stack)."""
    x, v = theta[0], theta[1]
    states = []
    for _ in range(steps):
        x, v = rk4_step(theta, x, v, DT, sin)
        states += [x, v]
    return stack(states)


def pendulum_trajectory_at(theta, steps):
    return pendulum_trajectory(theta, steps, at.sin, at.stack)


def pendulum_trajectory_jax(jax, steps):
    """The trajectory as jax computes it: lax.scan over the steps (fori_loop cannot
    return every state), flat (2 * steps,)."""
    jnp = jax.numpy

    def f(theta):
        def body(state, _):
            x, v = rk4_step(theta, state[0], state[1], DT, jnp.sin)
            return (x, v), jnp.stack([x, v])
        _, states = jax.lax.scan(body, (theta[0], theta[1]), None, length=steps)
        return states.reshape(-1)
    return f


def pendulum_jax(jax, steps):
    jnp = jax.numpy

    def f(theta):
        def accel(x, v):
            return -theta[2] * jnp.sin(x) - theta[3] * v

        def body(_, state):
            x, v = state
            h = DT
            k1x, k1v = v, accel(x, v)
            k2x, k2v = v + 0.5 * h * k1v, accel(x + 0.5 * h * k1x, v + 0.5 * h * k1v)
            k3x, k3v = v + 0.5 * h * k2v, accel(x + 0.5 * h * k2x, v + 0.5 * h * k2v)
            k4x, k4v = v + h * k3v, accel(x + h * k3x, v + h * k3v)
            return (x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x),
                    v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v))
        x, v = jax.lax.fori_loop(0, steps, body, (theta[0], theta[1]))
        return x * x + v * v
    return f


@numba.njit(cache=True, inline="always")
def _accel_dual(theta, x, dx, v, dv, out, force=0.0):
    """a = -g sin(x) - c v (+ a forcing that does not depend on theta) and its
    derivatives by theta (dx, dv: (4,) each)."""
    s, co = math.sin(x), math.cos(x)
    for k in range(4):
        out[k] = -theta[2] * co * dx[k] - theta[3] * dv[k]
    out[2] -= s
    out[3] -= v
    return -theta[2] * s - theta[3] * v + force


@numba.njit(cache=True)
def pendulum_numba(theta, steps):
    """Value and gradient, forward mode: every state carries d state / d theta."""
    x, v, dx, dv = _pendulum_dual(theta, steps, np.empty(0), np.empty((0, 4)))
    grad = np.empty(4)
    for k in range(4):
        grad[k] = 2.0 * x * dx[k] + 2.0 * v * dv[k]
    return x * x + v * v, grad


@numba.njit(cache=True)
def pendulum_trajectory_numba(theta, steps):
    """The trajectory (x, v after each step, flat) and its Jacobian by theta."""
    traj, jac = np.empty(2 * steps), np.empty((2 * steps, 4))
    _pendulum_dual(theta, steps, traj, jac)
    return traj, jac


@numba.njit(cache=True)
def pendulum_state_numba(theta, steps):
    """The final (x, v), plain RK4: an existing numba solver, as a custom op's forward."""
    h = DT
    x, v = theta[0], theta[1]
    for _ in range(steps):
        k1x, k1v = v, -theta[2] * math.sin(x) - theta[3] * v
        x2, v2 = x + 0.5 * h * k1x, v + 0.5 * h * k1v
        k2x, k2v = v2, -theta[2] * math.sin(x2) - theta[3] * v2
        x3, v3 = x + 0.5 * h * k2x, v + 0.5 * h * k2v
        k3x, k3v = v3, -theta[2] * math.sin(x3) - theta[3] * v3
        x4, v4 = x + h * k3x, v + h * k3v
        k4x, k4v = v4, -theta[2] * math.sin(x4) - theta[3] * v4
        x = x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        v = v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    return np.array([x, v])


@numba.njit(cache=True)
def pendulum_state_vjp(theta, steps, g):
    """g @ d (x, v) / d theta for pendulum_state_numba (forward-mode duals)."""
    _, _, dx, dv = _pendulum_dual(theta, steps, np.empty(0), np.empty((0, 4)))
    return g[0] * dx + g[1] * dv


@numba.njit(cache=True)
def _pendulum_dual(theta, steps, traj, jac, amp=0.0):
    """The RK4 steps in forward mode (4 tangent lanes); each state and its derivative
    stored in traj / jac when they have room. ``amp``: the driving force's amplitude."""
    h = DT
    x, v = theta[0], theta[1]
    dx, dv = np.zeros(4), np.zeros(4)
    dx[0], dv[1] = 1.0, 1.0
    k1v_d, k2v_d, k3v_d, k4v_d = np.empty(4), np.empty(4), np.empty(4), np.empty(4)
    t_dx, t_dv = np.empty(4), np.empty(4)
    for step in range(steps):
        f1 = f2 = f4 = 0.0
        if amp != 0.0:
            t = step * h
            f1, f2, f4 = (amp * math.cos(OMEGA * t), amp * math.cos(OMEGA * (t + 0.5 * h)),
                          amp * math.cos(OMEGA * (t + h)))
        k1x, k1x_d = v, dv.copy()
        k1v = _accel_dual(theta, x, dx, v, dv, k1v_d, f1)
        for k in range(4):
            t_dx[k], t_dv[k] = dx[k] + 0.5 * h * k1x_d[k], dv[k] + 0.5 * h * k1v_d[k]
        k2x, k2x_d = v + 0.5 * h * k1v, t_dv.copy()
        k2v = _accel_dual(theta, x + 0.5 * h * k1x, t_dx, v + 0.5 * h * k1v, t_dv, k2v_d, f2)
        for k in range(4):
            t_dx[k], t_dv[k] = dx[k] + 0.5 * h * k2x_d[k], dv[k] + 0.5 * h * k2v_d[k]
        k3x, k3x_d = v + 0.5 * h * k2v, t_dv.copy()
        k3v = _accel_dual(theta, x + 0.5 * h * k2x, t_dx, v + 0.5 * h * k2v, t_dv, k3v_d, f2)
        for k in range(4):
            t_dx[k], t_dv[k] = dx[k] + h * k3x_d[k], dv[k] + h * k3v_d[k]
        k4x, k4x_d = v + h * k3v, t_dv.copy()
        k4v = _accel_dual(theta, x + h * k3x, t_dx, v + h * k3v, t_dv, k4v_d, f4)
        for k in range(4):
            dx[k] += h / 6.0 * (k1x_d[k] + 2.0 * k2x_d[k] + 2.0 * k3x_d[k] + k4x_d[k])
            dv[k] += h / 6.0 * (k1v_d[k] + 2.0 * k2v_d[k] + 2.0 * k3v_d[k] + k4v_d[k])
        x = x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        v = v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
        if traj.size:
            traj[2 * step], traj[2 * step + 1] = x, v
            jac[2 * step], jac[2 * step + 1] = dx, dv
    return x, v, dx, dv


@numba.njit(cache=True, parallel=True)
def ensemble_numba(thetas, steps, driven=False):
    """pendulum_numba (or driven_pendulum_numba) at every point, the points over numba's
    threads."""
    values, grads = np.empty(thetas.shape[0]), np.empty(thetas.shape)
    for p in numba.prange(thetas.shape[0]):
        if driven:
            values[p], grads[p] = driven_pendulum_numba(thetas[p], steps)
        else:
            values[p], grads[p] = pendulum_numba(thetas[p], steps)
    return values, grads


def thetas(points, seed=0):
    base = np.array([1.0, 0.0, 9.8, 0.1])
    return base * np.random.default_rng(seed).uniform(0.8, 1.2, (points, 4))


# ---- heat equation ----------------------------------------------------------------------------

HEAT_CELLS, HEAT_STEPS, HEAT_DT = 200, 2000, 0.2


def heat_start():
    return np.exp(-((np.arange(HEAT_CELLS) - HEAT_CELLS / 2) / 10.0) ** 2)


def heat_at(diffusivity):
    h = heat_start()
    for _ in range(HEAT_STEPS):
        lap = np.roll(h, 1) - 2.0 * h + np.roll(h, -1)
        h = h + HEAT_DT * diffusivity * lap
    return (h * h).sum()


def heat_jax(jax):
    jnp = jax.numpy

    def f(diffusivity):
        def body(_, h):
            return h + HEAT_DT * diffusivity * (jnp.roll(h, 1) - 2.0 * h + jnp.roll(h, -1))
        h = jax.lax.fori_loop(0, HEAT_STEPS, body, jnp.asarray(heat_start()))
        return (h * h).sum()
    return jax.jit(jax.value_and_grad(f))
