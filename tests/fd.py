"""Central finite differences against the compiled sweep."""
import numpy as np

import autotape as at


def central_differences(phi, arrays, eps=1e-6):
    """The gradient of the scalar function phi(list of arrays), by central differences."""
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


def numeric_grads(f, arrays, weights, eps=1e-6):
    """Central-difference gradient of sum(f(*arrays) * weights) for every array."""
    def phi(args):
        with at.no_grad():
            out = f(*[at.tensor(a) for a in args])
        value = out.numpy() if isinstance(out, at.Tensor) else out   # (np.<f> of plain
        return float(np.sum(np.asarray(value, np.float64) * weights))  # tensors: numpy's)
    return central_differences(phi, arrays, eps)


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


def check_second_order(f, *arrays, seed=1, rtol=1e-4, atol=1e-5, eps=1e-5):
    """gradgradcheck: with create_graph=True, (1) the recorded first derivative equals
    the compiled one, and (2) its derivative matches central differences of the
    compiled first derivative."""
    arrays = [np.asarray(a, np.float64) for a in arrays]
    rng = np.random.default_rng(seed)
    xs = [at.tensor(a, requires_grad=True) for a in arrays]
    out = f(*xs)
    w = rng.uniform(0.5, 1.5, out.shape)
    first = at.grad((out * at.tensor(w)).sum(), xs, create_graph=True, allow_unused=True,
                    materialize_grads=True)
    compiled = at.grad((f(*xs) * at.tensor(w)).sum(), xs, allow_unused=True,
                       materialize_grads=True)
    for r, c in zip(first, compiled):
        np.testing.assert_allclose(r.numpy(), c.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg="recorded and compiled first derivatives differ")
    vs = [rng.uniform(0.5, 1.5, a.shape) for a in arrays]
    probe = sum((g * at.tensor(v)).sum() for g, v in zip(first, vs))
    analytic = at.grad(probe, xs, allow_unused=True, materialize_grads=True)

    def first_derivative_probe(args):
        ts = [at.tensor(a, requires_grad=True) for a in args]
        gs = at.grad((f(*ts) * at.tensor(w)).sum(), ts, allow_unused=True,
                     materialize_grads=True)
        return sum(float(np.sum(g.numpy() * v)) for g, v in zip(gs, vs))
    numeric = central_differences(first_derivative_probe, arrays, eps)
    for k in range(len(arrays)):
        np.testing.assert_allclose(analytic[k].numpy(), numeric[k], rtol=rtol, atol=atol,
                                   err_msg=f"second derivative, argument {k}")


def central_jacobian(f, x, eps=1e-6):
    """d f / d x by central differences: (f's size, x's size), f taking and returning
    arrays."""
    x = np.asarray(x, float)
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        cols.append((np.asarray(f(x + e.reshape(x.shape))) -
                     np.asarray(f(x - e.reshape(x.shape)))).reshape(-1) / (2 * eps))
    return np.stack(cols, axis=1)
