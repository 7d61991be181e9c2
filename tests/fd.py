"""Central finite differences against the compiled sweep."""
import numpy as np

import autotape as at


def numeric_grads(f, arrays, weights, eps=1e-6):
    """Central-difference gradient of sum(f(*arrays) * weights) for every array."""
    def phi(args):
        with at.no_grad():
            out = f(*[at.tensor(a) for a in args])
        return float(np.sum(np.asarray(out.numpy(), np.float64) * weights))
    grads = []
    for k, a in enumerate(arrays):
        g = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            plus = [b.copy() for b in arrays]
            minus = [b.copy() for b in arrays]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            g[idx] = (phi(plus) - phi(minus)) / (2 * eps)
        grads.append(g)
    return grads


def check_grads(f, *arrays, seed=0, rtol=1e-5, atol=1e-6):
    """Assert that at.grad of f matches central differences for every argument."""
    arrays = [np.asarray(a, np.float64) for a in arrays]
    xs = [at.tensor(a, requires_grad=True) for a in arrays]
    out = f(*xs)
    weights = np.random.default_rng(seed).uniform(0.5, 1.5, out.shape)
    analytic = at.grad((out * at.tensor(weights)).sum(), xs, allow_unused=True,
                       materialize_grads=True)
    numeric = numeric_grads(f, arrays, weights)
    for k, (a, n) in enumerate(zip(analytic, numeric)):
        assert a.shape == arrays[k].shape, (k, a.shape, arrays[k].shape)
        np.testing.assert_allclose(a.numpy(), n, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of argument {k}")
    return analytic
