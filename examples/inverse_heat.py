"""An inverse heat equation: recover a rod's diffusivity field from temperature readings.

A periodic rod of N cells with diffusivity kappa[i] between cell i and i + 1 is heated
in a few different initial patterns; explicit finite differences (``np.roll`` for the
neighbours) advance each pattern, and a few snapshots of every cell are recorded. From
those readings alone, L-BFGS-B recovers kappa (N unknowns) with gradients from
``at.compile``'s replayed sweep, a small smoothness penalty keeping the field tame where
the data say little. The figure shows the true and recovered fields and the fit of
the last snapshot. Run:

    python examples/inverse_heat.py       # writes docs/figures/inverse_heat.png
"""
import os
import sys

import numpy as np
from scipy.optimize import minimize

import autotape as at

FIGURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                        "docs", "figures"))


def true_diffusivity(n):
    x = np.arange(n) / n
    return 0.5 + 0.35 * np.exp(-((x - 0.3) / 0.08) ** 2) + 0.25 * (x > 0.65)


def initial_patterns(n, count):
    x = np.arange(n) / n
    return np.stack([1.0 + np.sin(2 * np.pi * (k + 1) * x + k) for k in range(count)])


def simulate(kappa, u0, steps, r, every):
    """Snapshots (every ``every`` steps) of u' = d/dx (kappa du/dx), periodic rod."""
    u, snapshots = u0, []
    for step in range(1, steps + 1):
        flux = kappa * (np.roll(u, -1, axis=1) - u)          # between i and i + 1
        u = u + r * (flux - np.roll(flux, 1, axis=1))
        if step % every == 0:
            snapshots.append(u)
    return snapshots


def main(n=48, patterns=4, steps=240, every=40, noise=1e-3, smooth=1e-3, out=FIGURES,
         seed=0):
    """Recover kappa; returns (true kappa, recovered kappa, figure path)."""
    r = 0.4                                # dt / dx**2, stable for kappa < 1.25
    truth, u0 = true_diffusivity(n), initial_patterns(n, patterns)
    rng = np.random.default_rng(seed)
    readings = [s + rng.normal(0.0, noise, s.shape)
                for s in simulate(truth, u0, steps, r, every)]

    def loss(kappa):
        misfit = sum(((s - d) ** 2).sum()
                     for s, d in zip(simulate(kappa, u0, steps, r, every), readings))
        return 0.5 * misfit + 0.5 * smooth * ((np.roll(kappa, -1) - kappa) ** 2).sum()

    start = np.full(n, truth.mean())
    compiled = at.compile(loss, start)

    def value_and_grad(kappa):
        value, gradient = compiled.value_and_grad(kappa)
        return float(value), np.asarray(gradient, np.float64)

    fit = minimize(value_and_grad, start, jac=True, method="L-BFGS-B",
                   bounds=[(0.05, 1.2)] * n, options={"maxiter": 500})
    error = np.abs(fit.x - truth).max()
    print(f"{n} diffusivities from {patterns} x {steps // every} snapshots: "
          f"{fit.nit} iterations, largest error {error:.3f}")
    path = _figure(truth, fit.x, start, u0, readings, steps, r, every, out)
    print("figure:", path)
    return truth, fit.x, path


def _figure(truth, kappa, start, u0, readings, steps, r, every, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = (np.arange(truth.size) + 0.5) / truth.size       # interfaces, as fractions
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(x, truth, color="black", lw=2, label="true")
    left.plot(x, kappa, "o-", ms=3, color="tab:orange", label="recovered")
    left.plot(x, start, ":", color="gray", label="initial guess")
    left.set(xlabel="position along the rod", ylabel="diffusivity",
             title="Diffusivity field")
    left.legend()
    fitted = simulate(kappa, u0, steps, r, every)[-1]
    cells = np.arange(truth.size) / truth.size
    for k in range(u0.shape[0]):
        right.plot(cells, readings[-1][k], "o", ms=3, color=f"C{k}")
        right.plot(cells, fitted[k], color=f"C{k}")
    right.set(xlabel="position along the rod", ylabel="temperature",
              title=f"Last snapshot (step {steps}): readings and fit")
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "inverse_heat.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main(out=sys.argv[1] if len(sys.argv) > 1 else FIGURES)
