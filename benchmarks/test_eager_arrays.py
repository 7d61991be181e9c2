"""Eager array code against torch eager, same process, same thread count (issue #19):
the 1M-element elementwise function at 1 and 2 threads, the heat equation written with
np.roll, and the fixed cost of recording one op at 1, 200 and 10^4 elements.

Each group runs autotape and torch back to back per round (``run_paired``); the
extra_info ratio is the median of the per-round time ratios autotape / torch.

    python -m pytest benchmarks/test_eager_arrays.py --benchmark-json=e.json
    python benchmarks/report.py e.json
"""
import numpy as np
import pytest

import autotape as at
from conftest import run_paired
from workloads import HEAT_DT, HEAT_STEPS, heat_start

X = np.random.default_rng(0).uniform(-2.0, 2.0, 1_000_000)


def mixed(x, lib):
    return (lib.sin(x) * x + x ** 2 / (1 + lib.exp(-x))).sum()


@pytest.fixture
def threads(torch):
    def use(n):
        at.set_num_threads(n)
        torch.set_num_threads(n)
    yield use
    use(1)


@pytest.mark.parametrize("n", [1, 2])
def test_elementwise_1m_paired(benchmark, torch, threads, n):
    benchmark.group = f"eager 1M elementwise, value + gradient, {n} thread(s): autotape / torch"
    threads(n)

    def ours():
        x = at.tensor(X, requires_grad=True)
        return at.grad(mixed(x, at), x)[0]

    def theirs():
        x = torch.tensor(X, requires_grad=True)
        return torch.autograd.grad(mixed(x, torch), x)[0]
    run_paired(benchmark, ours, theirs, f"ratio_{n}_threads", rounds=30)


def heat(lib, d, roll):
    h = lib.tensor(heat_start())
    for _ in range(HEAT_STEPS):
        lap = roll(h, 1) - 2.0 * h + roll(h, -1)
        h = h + HEAT_DT * d * lap
    return (h * h).sum()


def test_heat_eager_paired(benchmark, torch):
    benchmark.group = "eager heat 200 x 2000 (np.roll), gradient wrt 200: autotape / torch"
    d0 = np.full(200, 0.5)

    def ours():
        d = at.tensor(d0, requires_grad=True)
        return at.grad(heat(at, d, np.roll), d)[0]

    def theirs():
        d = torch.tensor(d0, requires_grad=True)
        return torch.autograd.grad(heat(torch, d, torch.roll), d)[0]
    run_paired(benchmark, ours, theirs, "ratio", rounds=8)


OPS = {
    "mul": (lambda y, c: y * c, lambda y, c: y * c),
    "roll": (lambda y, c: np.roll(y, 1), lambda y, c: y.roll(1)),
    "slice": (lambda y, c: y[::1], lambda y, c: y[::1]),
    "reshape": (lambda y, c: y.reshape(-1), lambda y, c: y.reshape(-1)),
}


@pytest.mark.parametrize("size", [1, 200, 10_000])
@pytest.mark.parametrize("op", sorted(OPS))
def test_op_fixed_cost_paired(benchmark, torch, op, size):
    benchmark.group = f"eager: recording 1000 {op} ops on {size} elements: autotape / torch"
    ours_op, theirs_op = OPS[op]

    def chain(lib, op_fn):
        x = lib.tensor(np.ones(size), requires_grad=True)
        c = lib.tensor(np.full(size, 1.0))

        def run():
            y = x * 1.0
            for _ in range(1000):
                y = op_fn(y, c)
            return y
        return run
    run_paired(benchmark, chain(at, ours_op), chain(torch, theirs_op), "ratio", rounds=20)
