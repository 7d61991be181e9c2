"""A ball's drag and restitution from the times it bounces: an ODE with adaptive steps and
events, fitted by gradient.

Between bounces the height h and velocity v follow

    h' = v,    v' = -g - c v |v|                 (quadratic air drag c)

solved by ``solve_ivp`` (adaptive Dormand-Prince steps) until the event h = 0 (terminal,
falling); the ball leaves the floor again at -e times its landing velocity. The
measured data are the bounce times, with noise. Each bounce time is an event time, and
its gradient with respect to c and e comes from the implicit function theorem at the
located crossing (autotape/ode_events.py), through every earlier flight. ``at.compile``
records the loss once; L-BFGS-B calls its ``value_and_grad``. Run:

    python examples/bouncing_ball.py        # writes docs/figures/bouncing_ball.png
"""
import os
import sys

import numpy as np
from scipy.optimize import minimize

import autotape as at
from autotape.integrate import solve_ivp

FIGURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                        "docs", "figures"))
G = 9.81
TRUE = np.array([0.08, 0.8])                    # drag c (1/m), restitution e
START = np.array([0.02, 0.6])
DROP = 10.0                                     # dropped from 10 m at rest


def flight(t, y, c):
    return at.stack([y[1], -G - c * y[1] * abs(y[1])])


def floor(t, y, c):
    return y[0]


floor.terminal, floor.direction = True, -1


def bounce_times(theta, bounces, rtol=1e-8):
    """The first ``bounces`` landing times, each flight solved from its take-off."""
    c, e = theta[0], theta[1]
    state, clock, times = at.stack([DROP + 0.0 * c, 0.0 * c]), 0.0, []
    for _ in range(bounces):
        sol = solve_ivp(flight, (0.0, 10.0), state, args=(c,), events=floor, rtol=rtol,
                        atol=1e-10, max_steps=200)
        clock = clock + sol.t_events[0][0]
        times.append(clock)
        state = at.stack([0.0 * c, -e * sol.y_events[0][0, 1]])
    return at.stack(times)


def main(bounces=6, noise=0.01, out=FIGURES, seed=0):
    """Fit; returns (true, fitted parameters, loss history, figure path)."""
    rng = np.random.default_rng(seed)
    observed = bounce_times(at.tensor(TRUE), bounces).numpy()
    observed = observed + rng.normal(0.0, noise, observed.shape)

    def loss(theta):
        return ((bounce_times(theta, bounces) - observed) ** 2).sum()

    compiled = at.compile(loss, START)

    def value_and_grad(theta):
        value, gradient = compiled.value_and_grad(theta)
        return float(value), np.asarray(gradient, np.float64)

    history = [value_and_grad(START)[0]]
    fit = minimize(value_and_grad, START, jac=True, method="L-BFGS-B",
                   bounds=[(0.0, 1.0), (0.1, 1.0)], options={"gtol": 1e-12},
                   callback=lambda intermediate_result: history.append(
                       intermediate_result.fun))
    print("true (drag, restitution)  ", TRUE)
    print("fitted (drag, restitution)", np.round(fit.x, 4), f"({fit.nit} iterations)")
    path = _figure(fit.x, observed, history, bounces, out)
    print("figure:", path)
    return TRUE, fit.x, history, path


def _heights(theta, bounces):
    """The height along the first ``bounces`` flights, for the figure (eager solves)."""
    c, e = float(theta[0]), float(theta[1])
    state, clock, ts, hs = np.array([DROP, 0.0]), 0.0, [], []
    for _ in range(bounces):
        sol = solve_ivp(flight, (0.0, 10.0), state, args=(c,), events=floor, rtol=1e-8,
                        atol=1e-10, t_eval=np.linspace(0.0, 10.0, 2001))
        ts.append(clock + sol.t)
        hs.append(sol.y[0].numpy())
        clock += float(sol.t_events[0][0])
        state = np.array([0.0, -e * float(sol.y_events[0][0, 1])])
    return np.concatenate(ts), np.concatenate(hs)


def _figure(theta, observed, history, bounces, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for th, style, label in ((START, ":", "initial guess"), (theta, "-", "fit")):
        t, h = _heights(th, bounces)
        left.plot(t, h, style, color="tab:blue", alpha=0.6 if style == ":" else 1.0,
                  label=label)
    left.plot(observed, np.zeros_like(observed), "o", color="tab:red",
              label="measured bounces")
    left.set(xlabel="time (s)", ylabel="height (m)",
             title=f"drag {theta[0]:.3f} /m, restitution {theta[1]:.3f}")
    left.legend(fontsize=8)
    right.semilogy(history)
    right.set(xlabel="L-BFGS-B iteration", ylabel="loss (s$^2$)",
              title="gradients through the event times")
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "bouncing_ball.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main(out=sys.argv[1] if len(sys.argv) > 1 else FIGURES)
