"""Sensitivity of a damped pendulum to its parameters, through 2,000 RK4 steps.

The simulation is ordinary scalar Python; autotape records its ~100,000 ops and one
compiled sweep returns d(final angle)/d(parameters). Run:  python examples/pendulum.py
"""
import time

import autotape as at


def simulate(length, damping, theta0, steps=2000, dt=0.005, g=9.81):
    """RK4 for theta'' = -(g / length) sin(theta) - damping theta'."""
    def rhs(theta, omega):
        return omega, -(g / length) * at.sin(theta) - damping * omega

    theta, omega = theta0, theta0 * 0.0
    for _ in range(steps):
        k1 = rhs(theta, omega)
        k2 = rhs(theta + 0.5 * dt * k1[0], omega + 0.5 * dt * k1[1])
        k3 = rhs(theta + 0.5 * dt * k2[0], omega + 0.5 * dt * k2[1])
        k4 = rhs(theta + dt * k3[0], omega + dt * k3[1])
        theta = theta + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        omega = omega + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    return theta


def main():
    params = {"length": 1.3, "damping": 0.2, "theta0": 1.0}
    leaves = {k: at.tensor(v, requires_grad=True) for k, v in params.items()}
    t0 = time.perf_counter()
    final = simulate(**leaves)
    t1 = time.perf_counter()
    grads = at.grad(final, leaves)                  # dict in, dict out
    t2 = time.perf_counter()
    print(f"final angle {final.item():.6f} rad; recorded {final._tape.nrows} rows in "
          f"{t1 - t0:.2f} s, gradient in {t2 - t1:.3f} s (a process's first gradient "
          "includes numba's one-time start-up)")
    for name, g in grads.items():
        h = 1e-6                                    # central difference, for comparison
        up = simulate(**{**params, name: params[name] + h}).item()
        down = simulate(**{**params, name: params[name] - h}).item()
        print(f"  d/d{name:8s} autotape {g.item():+.9f}   finite difference "
              f"{(up - down) / (2 * h):+.9f}")


if __name__ == "__main__":
    main()
