"""A parameter sweep: a damped pendulum's loss and its gradient at 2,048 parameter
sets, as one compiled program over all cores, then the same compiled function shipped
to worker processes.

The model is plain Python over autotape ops, recorded once by ``at.compile``;
``autotape.func.vmap`` evaluates it at every parameter set with the point as the
innermost axis of its values, in chunks spread over numba's threads. A ``Compiled``
pickles, so a process pool (or a cluster) can run it too. Run:
    python examples/ensemble.py
"""
import concurrent.futures
import multiprocessing
import time

import numpy as np

import autotape as at
import autotape.func as F

DT, STEPS = 0.01, 300


def loss(theta):
    """theta = (x0, v0, g / L, damping): RK4 on x'' = -(g / L) sin x - damping x';
    the squared distance of the final state from rest."""
    def accel(x, v):
        return -theta[2] * at.sin(x) - theta[3] * v

    x, v = theta[0], theta[1]
    for _ in range(STEPS):
        k1x, k1v = v, accel(x, v)
        k2x, k2v = v + 0.5 * DT * k1v, accel(x + 0.5 * DT * k1x, v + 0.5 * DT * k1v)
        k3x, k3v = v + 0.5 * DT * k2v, accel(x + 0.5 * DT * k2x, v + 0.5 * DT * k2v)
        k4x, k4v = v + DT * k3v, accel(x + DT * k3x, v + DT * k3v)
        x = x + DT / 6 * (k1x + 2 * k2x + 2 * k3x + k4x)
        v = v + DT / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
    return x * x + v * v


def _gradients_in_worker(compiled, thetas):
    return F.vmap(compiled.grad)(thetas).numpy()


def main(points=2048):
    rng = np.random.default_rng(0)
    thetas = np.array([1.0, 0.0, 9.8, 0.1]) * rng.uniform(0.5, 1.5, (points, 4))
    c = at.compile(loss, thetas[0])
    sweep = F.vmap(c.value_and_grad)
    for _ in range(4):                    # the 4th call compiles the loop's body
        sweep(thetas[:64])
    t0 = time.perf_counter()
    values, grads = sweep(thetas)
    elapsed = time.perf_counter() - t0
    print(f"{points} parameter sets, loss + 4-gradient each: {elapsed * 1e3:.1f} ms")
    single = c.grad(thetas[17]).numpy()
    print("gradient at set 17, batched vs alone: max difference",
          np.abs(grads.numpy()[17] - single).max())
    # spawn, not fork: numba's OpenMP threads (the many-point path) do not survive fork
    with concurrent.futures.ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context("spawn")) as pool:
        halves = np.array_split(thetas, 2)
        remote = np.concatenate(list(pool.map(_gradients_in_worker, [c, c], halves)))
    print("gradients from 2 worker processes agree:", np.array_equal(remote, grads.numpy()))
    return values.numpy(), grads.numpy(), single, remote


if __name__ == "__main__":
    main()
