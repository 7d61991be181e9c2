"""An inverse problem: recover the amplitudes and rates of a two-exponential decay from
noisy samples, by Gauss-Newton steps built from whole Jacobians (``at.func.jacrev``, one
compiled sweep per step), then refine with Newton steps from the exact Hessian
(``at.func.hessian``). Run:  python examples/fit_decay.py
"""
import numpy as np

import autotape as at
import autotape.func as F

T = np.linspace(0.0, 4.0, 60)


def model(theta):
    a1, k1, a2, k2 = theta[0], theta[1], theta[2], theta[3]
    return a1 * at.exp(-k1 * T) + a2 * at.exp(-k2 * T)


def fit(observed, theta, gauss_newton_steps=8, newton_steps=3):
    residual = lambda th: model(th) - observed                       # noqa: E731
    loss = lambda th: 0.5 * (residual(th) ** 2).sum()               # noqa: E731
    for _ in range(gauss_newton_steps):
        J = F.jacrev(residual)(theta).numpy()                       # (60, 4), one sweep
        r = residual(at.tensor(theta)).numpy()
        theta = theta - np.linalg.solve(J.T @ J, J.T @ r)
    for _ in range(newton_steps):
        H = F.hessian(loss)(theta).numpy()                          # exact, one sweep
        theta = theta - np.linalg.solve(H, F.grad(loss)(theta).numpy())
    return theta, F.grad(loss)(theta).numpy()


def main():
    truth = np.array([2.0, 1.5, 0.7, 0.2])
    rng = np.random.default_rng(0)
    observed = model(at.tensor(truth)).numpy() + rng.normal(0.0, 0.01, T.size)
    theta, gradient = fit(observed, np.array([1.5, 1.0, 1.0, 0.1]))
    print("true parameters     ", truth)
    print("fitted parameters   ", np.round(theta, 4))
    print("gradient at the fit ", gradient)
    return truth, theta, gradient


if __name__ == "__main__":
    main()
