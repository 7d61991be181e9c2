"""A stiff reaction-diffusion system of 1000 states, solved with its sparse Jacobian, and
the sensitivity of its pattern to the initial state and the rates.

The 1-D Brusselator (Hairer & Wanner, Solving ODEs II, IV.1) on 500 cells, two species:

    u' = A + u^2 v - (B + 1) u + alpha u_xx,    v' = B u - u^2 v + alpha v_xx,

ends held at u = 1, v = 3. Diffusion on a fine grid makes it stiff (eigenvalues down to
-4 alpha (N + 1)^2 ~ -2 10^4): explicit steps would be tiny, so it needs an implicit
method, and every implicit step solves with I - h gamma J, J the 1000 x 1000 Jacobian.

J is sparse (each cell meets its neighbours and its other species), and autotape finds
its pattern from the right-hand side's recording: ``autotape.sparse`` gives J as a
scipy.sparse matrix from 6 forward lanes (a colouring of its columns), usable as scipy's
``jac=`` for BDF; ``solve_ivp(method="Rodas4", jac_sparsity="auto")`` uses the same
pattern inside a differentiable solve (6 reverse lanes for J, one sparse LU per step),
and the gradient of the final pattern with respect to all 1000 initial values and the
three rates comes from one reverse sweep. Run:

    python examples/reaction_diffusion.py     # writes docs/figures/reaction_diffusion.png
"""
import os
import sys
import time

import numpy as np
import scipy.integrate

import autotape as at
import autotape.sparse as ats
from autotape.integrate import solve_ivp

FIGURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                        "docs", "figures"))


def brusselator(cells, concatenate=at.concatenate):
    """The right-hand side on ``cells`` cells: y = (u, v), p = (A, B, alpha), ends held
    at u = 1, v = 3 (``concatenate``: another library's, for its version)."""
    def field(t, y, p):
        a, b, alpha = p[0], p[1], p[2]
        u, v = y[:cells], y[cells:]
        c = alpha * (cells + 1) ** 2
        u_end, v_end = np.ones(1), np.full(1, 3.0)
        du = a + u * u * v - (b + 1.0) * u + c * (
            concatenate([u_end, u[:-1]]) - 2.0 * u + concatenate([u[1:], u_end]))
        dv = b * u - u * u * v + c * (
            concatenate([v_end, v[:-1]]) - 2.0 * v + concatenate([v[1:], v_end]))
        return concatenate([du, dv])
    return field


def initial_state(cells):
    """The initial state: u = 1 + sin(2 pi x), v = 3."""
    x = np.arange(1, cells + 1) / (cells + 1)
    return np.concatenate([1.0 + np.sin(2 * np.pi * x), np.full(cells, 3.0)])


def main(cells=500, out=FIGURES):
    """Solve, differentiate, draw; returns a dict of what it found."""
    x = np.arange(1, cells + 1) / (cells + 1)
    y0 = initial_state(cells)
    p0 = np.array([1.0, 3.0, 0.02])
    field = brusselator(cells)
    times = np.linspace(0.0, 10.0, 101)

    # 1. The pattern, from the recording; scipy's BDF with autotape's sparse J
    rhs = at.compile(lambda y, p: field(0.0, y, p), y0, p0)
    pattern = ats.sparsity(rhs, y0, p0)[:, :2 * cells]
    lanes = int(ats.colours(rhs, y0, p0)[:2 * cells].max()) + 1
    start = time.perf_counter()
    bdf = scipy.integrate.solve_ivp(
        lambda t, y: rhs(y, p0).numpy(), (0.0, 10.0), y0, method="BDF", t_eval=times,
        rtol=1e-6, atol=1e-8, jac=lambda t, y: ats.jacobian(rhs, y, p0)[:, :2 * cells])
    bdf_seconds = time.perf_counter() - start
    print(f"J: {pattern.shape[0]} x {pattern.shape[1]}, {pattern.nnz} nonzeros found from "
          f"the recording, {lanes} lanes; scipy BDF with it: {bdf.nfev} evaluations, "
          f"{bdf.njev} Jacobians, {bdf_seconds:.2f} s")

    # 2. A differentiable stiff solve with the same pattern, and its gradient
    y = at.tensor(y0, requires_grad=True)
    p = at.tensor(p0, requires_grad=True)
    middle = (x > 0.4) & (x < 0.6)

    def quantity(y, p):
        """The mean of u over the middle cells at t = 10."""
        sol = solve_ivp(field, (0.0, 10.0), y, method="Rodas4", args=(p,), rtol=1e-6,
                        atol=1e-8, jac_sparsity="auto")
        return (sol.y[:cells, -1] * middle).sum() / middle.sum(), sol
    start = time.perf_counter()
    J, sol = quantity(y, p)
    dy, dp = at.grad(J, (y, p))
    rodas_seconds = time.perf_counter() - start
    agree = float(np.abs(sol.y[:, -1].detach().numpy() - bdf.y[:, -1]).max())
    print(f"Rodas4: {sol.nsteps} steps, value and gradient in {rodas_seconds:.2f} s; its "
          f"final state and BDF's differ by {agree:.1e}")
    print(f"J = {float(J.detach()):.6f}; dJ/dA = {float(dp[0]):.4f}, "
          f"dJ/dB = {float(dp[1]):.4f}, dJ/dalpha = {float(dp[2]):.4f}")

    # 3. A check: dJ/dalpha against central differences of the solve
    h = 1e-6
    fd = (float(quantity(y0, p0 + [0, 0, h])[0]) - float(quantity(y0, p0 - [0, 0, h])[0])) \
        / (2 * h)
    print(f"dJ/dalpha by central differences: {fd:.4f}")
    path = _figure(x, times, bdf.y[:cells], pattern, lanes, dy.numpy()[:cells], middle, out)
    print("figure:", path)
    return dict(J=float(J.detach()), dp=dp.numpy(), dy=dy.numpy(), fd_alpha=fd,
                lanes=lanes, nnz=pattern.nnz, agree=agree, path=path)


def _figure(x, times, u, pattern, lanes, du0, middle, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, centre, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    shown = left.pcolormesh(times, x, u, shading="auto", cmap="viridis")
    fig.colorbar(shown, ax=left, label="u")
    left.set(xlabel="t", ylabel="x", title="u(x, t): the Brusselator on 500 cells")
    half = pattern.shape[0] // 2
    shown = list(range(16)) + list(range(half, half + 16))     # u_0..15, then v_0..15
    centre.spy(pattern[shown][:, shown], markersize=4)
    centre.set_xticks([0, 16], ["u", "v"])
    centre.set_yticks([0, 16], ["u", "v"])
    centre.set(title=f"J's pattern, cells 0-15 of each species\nfound from the "
                     f"recording: {pattern.nnz} nonzeros, {lanes} lanes")
    right.plot(x, du0 / (x[1] - x[0]), color="tab:blue")     # (per cell -> per length)
    right.axvspan(x[middle][0], x[middle][-1], color="tab:orange", alpha=0.15,
                  label="watched region")
    right.set(xlabel="x", ylabel="dJ / du(x, 0)",
              title="sensitivity of the middle's mean u at t = 10\nto the initial u")
    right.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "reaction_diffusion.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main(out=sys.argv[1] if len(sys.argv) > 1 else FIGURES)
