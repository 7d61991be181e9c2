"""Before/after comparison of two checkouts, for changes that must not cost speed.

Runs one set of workloads in a fresh process against the autotape found at the path
given (a checkout; `git worktree add /tmp/before <commit>` makes the other side) and
prints each median in ms. Alternate the two sides a few rounds on a quiet machine:

    for i in 1 2 3; do
        python benchmarks/ab.py /tmp/before; python benchmarks/ab.py "$PWD"
    done

The comparative claims against torch and jax live in the pytest-benchmark suites beside
this file; this script is for A/B of autotape against itself.
"""
import os
import statistics
import sys
import time


def main(checkout):
    """Time the workloads against the autotape at ``checkout``; print the medians."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.path.insert(0, checkout)
    import numpy as np
    import autotape as at
    import autotape.func as F
    assert at.__file__.startswith(checkout), at.__file__

    def med(fn, n):
        fn()
        ts = []
        for _ in range(n):
            t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1e3

    def chain():
        t = at.tensor(0.3, requires_grad=True); s = t
        for _ in range(20000):
            s = at.sin(s) * 1.1 + t * 0.01
        at.grad(s, t)

    x1m = np.random.default_rng(0).normal(size=1_000_000)
    def big():
        x = at.tensor(x1m, requires_grad=True)
        y = (at.sin(x) * x + x ** 2 / (1 + at.exp(-x))).sum()
        at.grad(y, x)

    rng = np.random.default_rng(1)
    X = at.tensor(rng.normal(size=(256, 784))); W1 = at.tensor(rng.normal(size=(784, 256)) * .05, requires_grad=True)
    W2 = at.tensor(rng.normal(size=(256, 10)) * .05, requires_grad=True); b1 = at.tensor(np.zeros(256), requires_grad=True)
    def mlp():
        h = at.tanh(X @ W1 + b1)
        loss = at.log_softmax(h @ W2, axis=1).mean()
        at.grad(loss, [W1, W2, b1])

    xs = at.tensor(rng.normal(size=50), requires_grad=True)
    def small():
        y = (at.tanh(xs) * xs + at.exp(-xs) * 0.5).sum()
        at.grad(y, xs)

    def rosen(x):
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()
    x100 = np.random.default_rng(0).uniform(-1, 1, 100)
    ch = at.compile(rosen, x100)
    A = np.random.default_rng(2).normal(size=(50, 50)) / 7
    cj = at.compile(lambda u: at.tanh(at.tensor(A) @ u) * u, x100[:50])
    def hess(): ch.hessian(x100)
    def jac(): cj.jacobian(x100[:50])
    def hess_func(): F.hessian(rosen)(x100)

    x200 = at.tensor(rng.normal(size=200), requires_grad=True)
    def inplace():                  # in-place updates of a recorded tensor (versions.py)
        h = x200 * 1.0
        for _ in range(500):
            h += 0.01 * h
        at.grad(h.sum(), x200)

    def setitem():
        u = at.zeros(100)
        for i in range(100):
            u[i] = x200[i] * 2.0
        at.grad(u.sum(), x200)

    w = at.tensor(rng.normal(size=50), requires_grad=True)
    def optimizer_steps():          # a leaf changed under no_grad after every backward
        p = w
        for _ in range(200):
            (p * p).sum().backward()
            with at.no_grad():
                p -= 0.01 * p.grad
                p.grad.zero_()

    res = {"inplace500": med(inplace, 15), "setitem100": med(setitem, 15),
           "optsteps200": med(optimizer_steps, 7), "chain20k": med(chain, 7), "1M": med(big, 7), "mlp": med(mlp, 15), "small50": med(small, 200),
           "compiled_hessian": med(hess, 300), "compiled_jacobian": med(jac, 300), "func_hessian": med(hess_func, 30)}
    print(" ".join(f"{k}={v:.4f}" for k, v in res.items()))


if __name__ == "__main__":      # (pytest --doctest-modules imports this file: no work then)
    main(sys.argv[1])
