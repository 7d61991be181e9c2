"""A 1,000,000-element elementwise function: value + gradient, eager and through
at.compile (a compiled function on large arrays runs its recording like eager code);
and the same function at 4000 and 64,000 elements, compiled against eager."""
import numpy as np
import pytest

import autotape as at

N = 1_000_000
X = np.random.default_rng(0).uniform(-2.0, 2.0, N)


def mixed(x, lib):
    """sin, exp, mul, pow, div, add, sum."""
    return (lib.sin(x) * x + x ** 2 / (1 + lib.exp(-x))).sum()


def tour(x, lib):
    """The README's tour function: dominated by sin and its derivative."""
    return (lib.sin(x) * x + x ** 2).sum()


@pytest.fixture(params=[mixed, tour], ids=["mixed", "tour"])
def f(request):
    return request.param


def group(benchmark, f):
    benchmark.group = f"1M elementwise ({f.__name__}): value + gradient"


def test_autotape(benchmark, f):
    group(benchmark, f)

    def run():
        x = at.tensor(X, requires_grad=True)
        return at.grad(f(x, at), x)[0]
    benchmark.pedantic(run, rounds=10, warmup_rounds=1)


def test_autotape_compiled(benchmark, f):
    group(benchmark, f)
    c = at.compile(lambda x: f(x, at), X)
    c.value_and_grad(X)
    benchmark.pedantic(lambda: c.value_and_grad(X), rounds=10, warmup_rounds=1)


@pytest.mark.parametrize("n", [4000, 64000])
@pytest.mark.parametrize("how", ["eager", "compiled", "jax_jit"])
def test_mid_sizes(benchmark, n, how, request):
    benchmark.group = f"{n}-element elementwise (mixed): value + gradient"
    x0 = X[:n].copy()
    if how == "eager":
        def run():
            x = at.tensor(x0, requires_grad=True)
            return at.grad(mixed(x, at), x)[0]
    elif how == "compiled":
        c = at.compile(lambda x: mixed(x, at), x0)
        run = lambda: c.value_and_grad(x0)                       # noqa: E731
    else:
        jax = request.getfixturevalue("jax")
        vg = jax.jit(jax.value_and_grad(lambda x: mixed(x, jax.numpy)))
        xj = jax.numpy.asarray(x0)
        run = lambda: vg(xj)[1].block_until_ready()              # noqa: E731
    run()
    benchmark.pedantic(run, rounds=50, warmup_rounds=2)


def test_torch(benchmark, torch, f):
    group(benchmark, f)

    def run():
        x = torch.tensor(X, requires_grad=True)
        return torch.autograd.grad(f(x, torch), x)[0]
    benchmark.pedantic(run, rounds=10, warmup_rounds=1)


def test_jax_jit(benchmark, jax, f):
    group(benchmark, f)
    vg = jax.jit(jax.value_and_grad(lambda x: f(x, jax.numpy)))
    x = jax.numpy.asarray(X)
    vg(x)[1].block_until_ready()
    benchmark.pedantic(lambda: vg(x)[1].block_until_ready(), rounds=10)


def test_hips_autograd(benchmark, hips, f):
    group(benchmark, f)
    import autograd.numpy as anp
    vg = hips.value_and_grad(lambda x: f(x, anp))
    benchmark.pedantic(lambda: vg(X), rounds=5, warmup_rounds=1)


def test_numpy_value_only(benchmark, f):
    group(benchmark, f)
    benchmark.pedantic(lambda: f(X, np), rounds=10)
