"""An ensemble sensitivity study: how a damped pendulum's final energy responds to its
parameters, over a grid of initial angles and damping rates.

One ``at.compile`` of the RK4 simulation, then ``autotape.func.vmap`` of its
``value_and_grad`` over every grid point at once (the point is the innermost axis of
the compiled program's values, chunks spread over numba's threads): the energy left
after the run and its derivative with respect to each of the four parameters, at
every point. The figure maps the energy and two sensitivities. Run:

    python examples/sensitivity_map.py    # writes docs/figures/sensitivity_map.png
"""
import os
import sys
import time

import numpy as np

import autotape as at
import autotape.func as F

FIGURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                        "docs", "figures"))
NAMES = ("initial angle", "initial velocity", "g / L", "damping")


def energy_after(theta, steps=200, dt=0.02):
    """theta = (angle, velocity, g / L, damping): RK4 on x'' = -(g / L) sin x - c x';
    the energy (per unit mass and length) left at the end."""
    def accel(x, v):
        return -theta[2] * at.sin(x) - theta[3] * v

    x, v = theta[0], theta[1]
    for _ in range(steps):
        k1x, k1v = v, accel(x, v)
        k2x, k2v = v + 0.5 * dt * k1v, accel(x + 0.5 * dt * k1x, v + 0.5 * dt * k1v)
        k3x, k3v = v + 0.5 * dt * k2v, accel(x + 0.5 * dt * k2x, v + 0.5 * dt * k2v)
        k4x, k4v = v + dt * k3v, accel(x + dt * k3x, v + dt * k3v)
        x = x + dt / 6 * (k1x + 2 * k2x + 2 * k3x + k4x)
        v = v + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
    return 0.5 * v * v + theta[2] * (1.0 - at.cos(x))


def main(grid=128, steps=200, out=FIGURES):
    """Energy and gradient over a grid x grid map; returns (angles, dampings, energy,
    gradients, figure path)."""
    angles = np.linspace(0.1, 3.0, grid)
    dampings = np.linspace(0.0, 1.0, grid)
    A, D = np.meshgrid(angles, dampings)
    thetas = np.stack([A.ravel(), np.zeros(A.size), np.full(A.size, 9.8), D.ravel()], 1)
    compiled = at.compile(lambda th: energy_after(th, steps), thetas[0])
    sweep = F.vmap(compiled.value_and_grad)
    start = time.perf_counter()
    energy, gradients = sweep(thetas)
    elapsed = time.perf_counter() - start
    energy = energy.numpy().reshape(grid, grid)
    gradients = gradients.numpy().reshape(grid, grid, 4)
    print(f"{A.size} parameter sets, energy + 4 sensitivities each: {elapsed:.2f} s "
          f"(first call, with compiling)")
    path = _figure(angles, dampings, energy, gradients, out)
    print("figure:", path)
    return angles, dampings, energy, gradients, path


def _figure(angles, dampings, energy, gradients, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    extent = (angles[0], angles[-1], dampings[0], dampings[-1])
    panels = [(energy, "energy left after the run", "viridis"),
              (gradients[..., 0], f"d energy / d {NAMES[0]}", "coolwarm"),
              (gradients[..., 3], f"d energy / d {NAMES[3]}", "coolwarm")]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (data, title, cmap) in zip(axes, panels):
        if cmap == "coolwarm":
            bound = np.abs(data).max()
            image = ax.imshow(data, origin="lower", extent=extent, aspect="auto", cmap=cmap,
                              vmin=-bound, vmax=bound)
        else:
            image = ax.imshow(data, origin="lower", extent=extent, aspect="auto", cmap=cmap)
        fig.colorbar(image, ax=ax)
        ax.set(xlabel="initial angle (rad)", ylabel="damping rate", title=title)
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "sensitivity_map.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main(out=sys.argv[1] if len(sys.argv) > 1 else FIGURES)
