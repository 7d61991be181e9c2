"""A 100,000-op scalar chain (mul, add, sin, exp, div repeated): record + gradient.

This is the shape of simulation code: many tiny scalar ops. Every library gets the
same Python function; only the namespace differs.
"""
import math

import pytest

import autotape as at

STEPS = 20_000          # x 5 ops = 100,000 recorded ops


def chain(x, sin, exp):
    y = x
    for _ in range(STEPS):
        y = y * 1.0001
        y = y + 0.5
        y = sin(y)
        y = exp(y)
        y = y / 2.5
    return y


GROUP = pytest.mark.benchmark(group="scalar chain, 100k ops: record + gradient")


@GROUP
def test_autotape(benchmark):
    def run():
        x = at.tensor(0.3, requires_grad=True)
        return at.grad(chain(x, at.sin, at.exp), x)[0].item()
    benchmark.pedantic(run, rounds=5, warmup_rounds=1)


@GROUP
def test_torch(benchmark, torch):
    def run():
        x = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
        return torch.autograd.grad(chain(x, torch.sin, torch.exp), x)[0].item()
    benchmark.pedantic(run, rounds=3, warmup_rounds=1)


@GROUP
def test_hips_autograd(benchmark, hips):
    import autograd.numpy as anp
    grad = hips.grad(lambda x: chain(x, anp.sin, anp.exp))
    benchmark.pedantic(lambda: grad(0.3), rounds=1)


@GROUP
def test_jax_eager(benchmark, jax):
    grad = jax.grad(lambda x: chain(x, jax.numpy.sin, jax.numpy.exp))
    benchmark.pedantic(lambda: float(grad(0.3)), rounds=1)


@GROUP
def test_plain_python_value_only(benchmark):
    """The function on Python floats, no derivative: the floor for any recorder."""
    benchmark.pedantic(lambda: chain(0.3, math.sin, math.exp), rounds=5)


@pytest.mark.benchmark(group="scalar chain, 100k ops: phases")
def test_autotape_record_only(benchmark):
    x = at.tensor(0.3, requires_grad=True)
    benchmark.pedantic(lambda: chain(x, at.sin, at.exp), rounds=5, warmup_rounds=1)


@pytest.mark.benchmark(group="scalar chain, 100k ops: phases")
def test_autotape_backward_only(benchmark):
    x = at.tensor(0.3, requires_grad=True)
    y = chain(x, at.sin, at.exp)
    at.grad(y, x, retain_graph=True)
    benchmark.pedantic(lambda: at.grad(y, x, retain_graph=True), rounds=20)
