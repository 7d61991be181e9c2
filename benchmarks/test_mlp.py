"""Gradient of a 2-layer MLP (784-256-10, batch 256, tanh, mean squared error), the model
written with plain numpy calls; autotape runs it on Tensors."""
import numpy as np
import pytest

import autotape as at

rng = np.random.default_rng(0)
X, Y = rng.normal(size=(256, 784)), rng.normal(size=(256, 10))
PARAMS = [rng.normal(size=(784, 256)) * 0.05, np.zeros(256),
          rng.normal(size=(256, 10)) * 0.05, np.zeros(10)]
GROUP = pytest.mark.benchmark(group="MLP 784-256-10, batch 256: loss + gradient")


def loss(np_, W1, b1, W2, b2, x, y):
    h = np_.tanh(x @ W1 + b1)
    return np_.mean((h @ W2 + b2 - y) ** 2)


@GROUP
def test_autotape(benchmark):
    x, y = at.tensor(X), at.tensor(Y)          # data converted once, as for torch below

    def run():
        ps = [at.tensor(p, requires_grad=True) for p in PARAMS]
        return at.grad(loss(np, *ps, x, y), ps)
    benchmark.pedantic(run, rounds=60, warmup_rounds=3)


@GROUP
def test_autotape_numpy_data(benchmark):
    """The same with the data as numpy arrays: each call snapshots them (a copy)."""
    def run():
        ps = [at.tensor(p, requires_grad=True) for p in PARAMS]
        return at.grad(loss(np, *ps, X, Y), ps)
    benchmark.pedantic(run, rounds=60, warmup_rounds=3)


@GROUP
def test_torch(benchmark, torch):
    x, y = torch.tensor(X), torch.tensor(Y)

    def run():
        ps = [torch.tensor(p, requires_grad=True) for p in PARAMS]
        return torch.autograd.grad(loss(torch, *ps, x, y), ps)
    benchmark.pedantic(run, rounds=60, warmup_rounds=3)


@GROUP
def test_jax_jit(benchmark, jax):
    g = jax.jit(jax.grad(lambda ps: loss(jax.numpy, *ps, X, Y)))
    ps = [jax.numpy.asarray(p) for p in PARAMS]
    jax.block_until_ready(g(ps))
    benchmark.pedantic(lambda: jax.block_until_ready(g(ps)), rounds=20)


@GROUP
def test_hips_autograd(benchmark, hips):
    import autograd.numpy as anp
    g = hips.grad(lambda ps: loss(anp, *ps, X, Y))
    benchmark.pedantic(lambda: g(PARAMS), rounds=10, warmup_rounds=1)


@pytest.mark.benchmark(group="MLP: autotape / torch, run alternately")
def test_paired_ratio(benchmark, torch):
    """One autotape and one torch gradient per round, back to back, 100 rounds: the
    drift of a shared machine hits both alike. extra_info holds the median of the
    per-round ratios (autotape's time over torch's)."""
    from time import perf_counter
    x, y = at.tensor(X), at.tensor(Y)
    xt, yt = torch.tensor(X), torch.tensor(Y)
    ratios = []

    def pair():
        t0 = perf_counter()
        ps = [at.tensor(p, requires_grad=True) for p in PARAMS]
        at.grad(loss(np, *ps, x, y), ps)
        t1 = perf_counter()
        qs = [torch.tensor(p, requires_grad=True) for p in PARAMS]
        torch.autograd.grad(loss(torch, *qs, xt, yt), qs)
        ratios.append((t1 - t0) / (perf_counter() - t1))
    benchmark.pedantic(pair, rounds=100, warmup_rounds=3)
    benchmark.extra_info["median autotape / torch"] = round(float(np.median(ratios[3:])), 3)
