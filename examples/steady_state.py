"""Where does a heat source matter most? The sensitivity of a nonlinear steady state to
every cell's source, by implicit differentiation.

A rod on [0, 1] with its ends held at 0 is heated by a source s(x) and cools by
radiation-like loss k u^4; its steady temperature solves

    D u'' + s(x) - k u^4 = 0,    u(0) = u(1) = 0,

discretised on 120 interior cells. ``at.implicit.root`` finds u by Newton's method on
numbers (nothing recorded; `autotape.implicit` needs scipy) and makes it one differentiable op: the gradient of any
quantity of u with respect to s, D and k is one transposed linear solve (the implicit
function theorem), not a sweep through the iterations. Here the quantity is the mean
temperature of a sensor region, and its gradient with respect to the source in each
of the 120 cells is a map of where heating pays. Run:

    python examples/steady_state.py        # writes docs/figures/steady_state.png
"""
import os
import sys

import numpy as np

import autotape as at
from autotape.implicit import root

FIGURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                        "docs", "figures"))


def residual(u, s, D, k):
    """D u'' + s - k u^4 on the interior cells (zero ends)."""
    n = u.shape[0]
    h = 1.0 / (n + 1)
    padded = at.concatenate([u[:1] * 0.0, u, u[:1] * 0.0])
    return D * (padded[:-2] - 2.0 * u + padded[2:]) / (h * h) + s - k * u ** 4


def source(x):
    """Two heaters: a broad one on the left, a narrow one on the right."""
    return 40.0 * np.exp(-((x - 0.3) / 0.12) ** 2) + 60.0 * np.exp(-((x - 0.75) / 0.04) ** 2)


def sensor(n):
    """The region whose mean temperature we watch: x in [0.45, 0.6]."""
    x = np.arange(1, n + 1) / (n + 1)
    return ((x >= 0.45) & (x <= 0.6)).astype(float), x


def main(n=120, out=FIGURES):
    """Solve and differentiate; returns (x, u, dJ/ds, dJ/dD, dJ/dk, figure path)."""
    weights, x = sensor(n)
    s = at.tensor(source(x), requires_grad=True)
    D = at.tensor(1.0, requires_grad=True)
    k = at.tensor(0.5, requires_grad=True)
    u = root(residual, np.zeros(n), s, D, k)
    J = (u * weights).sum() / weights.sum()
    ds, dD, dk = at.grad(J, (s, D, k))
    print(f"mean sensor temperature {float(J.detach()):.4f}; dJ/dD = {float(dD):.4f}, "
          f"dJ/dk = {float(dk):.4f}")
    path = _figure(x, u.detach().numpy(), source(x), ds.numpy(), weights, out)
    print("figure:", path)
    return x, u.detach().numpy(), ds.numpy(), float(dD), float(dk), path


def _figure(x, u, s, ds, weights, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(x, u, color="tab:red", label="steady temperature u")
    twin = left.twinx()
    twin.fill_between(x, s, color="tab:orange", alpha=0.25, label="source s")
    left.axvspan(x[weights > 0][0], x[weights > 0][-1], color="tab:blue", alpha=0.1,
                 label="sensor")
    left.set(xlabel="x", ylabel="temperature", title="D u'' + s - k u$^4$ = 0")
    twin.set_ylabel("source")
    left.legend(loc="upper left", fontsize=8)
    right.plot(x, ds / (x[1] - x[0]), color="tab:blue")   # (per cell -> per length)
    right.axvspan(x[weights > 0][0], x[weights > 0][-1], color="tab:blue", alpha=0.1)
    right.set(xlabel="x", ylabel="dJ / ds(x)",
              title="sensitivity of the sensor's mean to the source")
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "steady_state.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main(out=sys.argv[1] if len(sys.argv) > 1 else FIGURES)
