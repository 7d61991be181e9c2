"""Fit an ODE's parameters to noisy data with scipy.optimize and autotape gradients.

The model is the Lotka-Volterra predator-prey system

    prey' = a prey - b prey pred,    pred' = d prey pred - c pred,

integrated by RK4 in plain Python over autotape ops. ``at.compile`` records the loss
once per data window; scipy's L-BFGS-B then calls its ``value_and_grad`` (a compiled
replay and sweep, the time-stepping loop compiled to a numba kernel) at every iterate.
The figure shows the data, the fitted trajectories and the loss curve. Run:

    python examples/ode_fit.py            # writes docs/figures/ode_fit.png
"""
import os
import sys

import numpy as np
from scipy.optimize import minimize

import autotape as at

FIGURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                        "docs", "figures"))
TRUE = np.array([1.0, 0.4, 0.4, 0.1])          # a, b, c, d
START = np.array([1.5, 0.6, 0.25, 0.15])
STATE0 = (10.0, 5.0)                           # prey, predators at t = 0


def trajectory(theta, steps, dt):
    """RK4 states at every step: (steps + 1) prey values and predator values."""
    a, b, c, d = theta[0], theta[1], theta[2], theta[3]

    def rate(u, v):
        return a * u - b * u * v, d * u * v - c * v

    u, v = at.tensor(STATE0[0]), at.tensor(STATE0[1])
    prey, pred = [u], [v]
    for _ in range(steps):
        k1 = rate(u, v)
        k2 = rate(u + 0.5 * dt * k1[0], v + 0.5 * dt * k1[1])
        k3 = rate(u + 0.5 * dt * k2[0], v + 0.5 * dt * k2[1])
        k4 = rate(u + dt * k3[0], v + dt * k3[1])
        u = u + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        v = v + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        prey.append(u)
        pred.append(v)
    return at.stack(prey), at.stack(pred)


def main(steps=600, dt=0.025, every=10, noise=0.3, out=FIGURES, seed=0):
    """Fit; returns (true, fitted parameters, loss history, figure path)."""
    rng = np.random.default_rng(seed)
    prey, pred = trajectory(at.tensor(TRUE), steps, dt)
    observed = np.stack([prey.numpy(), pred.numpy()])[:, ::every]
    observed = observed + rng.normal(0.0, noise, observed.shape)

    def loss(theta, horizon):
        u, v = trajectory(theta, horizon, dt)
        n = horizon // every + 1
        return 0.5 * (((u[::every] - observed[0, :n]) ** 2).sum()
                      + ((v[::every] - observed[1, :n]) ** 2).sum())

    # Fitted over the whole run at once, the loss has many local minima (a wrong
    # period fits some peaks); fitted over a growing window, each fit starts near the
    # next one's minimum. One compiled function per window, L-BFGS-B on each.
    theta, history, iterations = START, [], 0
    for horizon in (steps // 4, steps // 2, steps):
        compiled = at.compile(lambda th: loss(th, horizon), theta)

        def value_and_grad(th):
            value, gradient = compiled.value_and_grad(th)
            return float(value), np.asarray(gradient, np.float64)

        history.append(value_and_grad(theta)[0])
        fit = minimize(value_and_grad, theta, jac=True, method="L-BFGS-B",
                       bounds=[(0.01, 5.0)] * 4, options={"maxiter": 200, "gtol": 1e-10},
                       callback=lambda intermediate_result: history.append(
                           intermediate_result.fun))
        theta, iterations = fit.x, iterations + fit.nit
    print("true parameters  ", TRUE)
    print("fitted parameters", np.round(theta, 4), f"({iterations} iterations)")
    path = _figure(theta, observed, history, steps, dt, every, out)
    print("figure:", path)
    return TRUE, theta, history, path


def _figure(theta, observed, history, steps, dt, every, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.arange(steps + 1) * dt
    prey0, pred0 = (x.numpy() for x in trajectory(at.tensor(START), steps, dt))
    prey, pred = (x.numpy() for x in trajectory(at.tensor(theta), steps, dt))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(t[::every], observed[0], "o", ms=3, color="tab:blue", label="prey (data)")
    left.plot(t[::every], observed[1], "o", ms=3, color="tab:red", label="predators (data)")
    left.plot(t, prey, color="tab:blue", label="prey (fit)")
    left.plot(t, pred, color="tab:red", label="predators (fit)")
    left.plot(t, prey0, ":", color="tab:blue", alpha=0.6, label="initial guess")
    left.plot(t, pred0, ":", color="tab:red", alpha=0.6)
    left.set(xlabel="time", ylabel="population", title="Lotka-Volterra fit")
    left.legend(fontsize=8)
    right.semilogy(history)
    right.set(xlabel="L-BFGS-B iteration (windows of 1/4, 1/2, all the data)",
              ylabel="loss", title="L-BFGS-B with autotape gradients")
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "ode_fit.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main(out=sys.argv[1] if len(sys.argv) > 1 else FIGURES)
