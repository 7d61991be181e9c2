"""The whole program as generated code (autotape/codegen.py) against the loop bodies it
replaces (``AUTOTAPE_GENERATED=0``), paired round by round in one process: extra_info's
``generated/loop_bodies`` is the median of the per-round time ratios (< 1: faster).

    python -m pytest benchmarks/test_generated.py --benchmark-json=g.json
"""
import os

import numpy as np
import pytest

import autotape as at
import autotape.func as F
import workloads as W
from autotape import codegen, program
from conftest import run_paired

MODELS = {"pendulum": W.pendulum_at, "driven": W.driven_pendulum_at}


def _compiled(f, x, generated):
    os.environ[program.GENERATED_ENV] = "1" if generated else "0"
    c = at.compile(f, x).wait_compiled()
    c.value_and_grad(x)
    lean = c._lean("value", [x]).lean
    assert lean.compiled_code() == ("generated" if generated else "loop body")
    return c


def _as(generated, call):
    def run():
        os.environ[program.GENERATED_ENV] = "1" if generated else "0"
        call()
    return run


@pytest.fixture(autouse=True)
def _restore_env():
    saved = os.environ.get(program.GENERATED_ENV)
    yield
    if saved is None:
        os.environ.pop(program.GENERATED_ENV, None)
    else:
        os.environ[program.GENERATED_ENV] = saved


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("points", [1, 1024])
def test_generated_against_loop_bodies(benchmark, model, points):
    benchmark.group = f"generated code / loop bodies: {model} RK4 1000 steps, value + " \
                      f"4-gradient, {points} point(s)"
    th = W.thetas(points)

    def f(t):
        return MODELS[model](t, 1000)
    ours, theirs = _compiled(f, th[0], True), _compiled(f, th[0], False)
    if points == 1:
        a, b = ours.value_and_grad(th[0]), theirs.value_and_grad(th[0])
        calls = (lambda: ours.value_and_grad(th[0]), lambda: theirs.value_and_grad(th[0]))
    else:
        a, b = F.vmap(ours.value_and_grad)(th), F.vmap(theirs.value_and_grad)(th)
        calls = (lambda: F.vmap(ours.value_and_grad)(th),
                 lambda: F.vmap(theirs.value_and_grad)(th))
    np.testing.assert_array_equal(a[1].numpy(), b[1].numpy())     # bit for bit
    run_paired(benchmark, _as(True, calls[0]), _as(False, calls[1]),
               "generated/loop_bodies", rounds=60 if points == 1 else 8)


KEPT_MODELS = {"chain": (W.chain_at, np.array([0.3])),
               "pendulum": (lambda t: W.pendulum_at(t, 1000), W.thetas(1)[0]),
               "driven": (lambda t: W.driven_pendulum_at(t, 1000), W.thetas(1)[0])}


@pytest.mark.parametrize("model", sorted(KEPT_MODELS))
def test_kept_values_against_recomputing_them(benchmark, model, monkeypatch):
    # the reverse sweep reading back sin / exp values the forward pass kept
    # (codegen.RECOMPUTED), against recomputing every op from the repetition's state
    benchmark.group = f"generated code, dear values kept / recomputed: {model}, value + " \
                      "gradient"
    f, x = KEPT_MODELS[model]
    ours = _compiled(f, x, True)
    assert codegen.plan(ours._lean("value", [x]).lean).kept("cpu")
    monkeypatch.setattr(codegen, "RECOMPUTED", frozenset(range(1000)))
    theirs = _compiled(f, x, True)
    np.testing.assert_array_equal(ours.grad(x).numpy(), theirs.grad(x).numpy())
    run_paired(benchmark, lambda: ours.value_and_grad(x), lambda: theirs.value_and_grad(x),
               "kept/recomputed", rounds=100)
