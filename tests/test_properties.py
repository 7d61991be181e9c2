"""Property tests: random shapes, broadcasting and random programs against finite
differences, and against torch where it is installed."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotape as at
from fd import check_grads
from programs import broadcast_shapes, programs, run

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs())
def test_random_programs_match_finite_differences(program):
    inputs, steps = program
    check_grads(lambda *xs: run(at, xs, steps), *inputs, rtol=1e-5, atol=1e-6)


@SETTINGS
@given(broadcast_shapes(2), st.sampled_from(["add", "sub", "mul", "div", "max"]),
       st.integers(0, 2 ** 31))
def test_broadcasting_gradients_reduce_to_each_shape(shapes, name, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.uniform(0.5, 1.5, s) * rng.choice([-1, 1], s) for s in shapes)
    f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
         "div": lambda x, y: x / y, "max": at.maximum}[name]
    ga, gb = check_grads(f, a, b)
    assert ga.shape == a.shape and gb.shape == b.shape


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_reductions_over_random_axes(shape, data):
    ndim = len(shape)
    axes = data.draw(st.lists(st.integers(-ndim, ndim - 1), unique_by=lambda a: a % ndim,
                              max_size=ndim))
    keepdims = data.draw(st.booleans())
    reduce = data.draw(st.sampled_from([at.sum, at.mean]))
    x = np.random.default_rng(0).normal(size=shape)
    check_grads(lambda t: reduce(t, axis=tuple(axes), keepdims=keepdims), x)


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_random_basic_indexing(shape, data):
    index = []
    for d in shape:
        kind = data.draw(st.sampled_from(["int", "slice", "full", "none"]))
        if kind == "int":
            index.append(data.draw(st.integers(-d, d - 1)))
        elif kind == "slice":
            start = data.draw(st.integers(-d, d))
            stop = data.draw(st.integers(-d, d))
            step = data.draw(st.sampled_from([1, 2, -1, -2]))
            index.append(slice(start, stop, step))
        elif kind == "none":
            index += [None, slice(None)]
        else:
            index.append(slice(None))
    index = tuple(index)
    x = np.random.default_rng(1).normal(size=shape)
    if x[index].size == 0:
        return
    check_grads(lambda t: t[index] * 1.5, x)


# ---- torch as an oracle ---------------------------------------------------------------

@SETTINGS
@given(programs(max_steps=12))
def test_random_programs_match_torch(program):
    torch = pytest.importorskip("torch")
    inputs, steps = program
    xs = [at.tensor(a, requires_grad=True) for a in inputs]
    ts = [torch.tensor(a, requires_grad=True) for a in inputs]
    y, yt = run(at, xs, steps), run(torch, ts, steps)
    np.testing.assert_allclose(y.item(), yt.item(), rtol=1e-12, atol=1e-12)
    got = at.grad(y, xs, allow_unused=True, materialize_grads=True)
    want = torch.autograd.grad(yt, ts, allow_unused=True, materialize_grads=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-12)


def test_scalar_chain_matches_torch():
    torch = pytest.importorskip("torch")

    def chain(x, lib):
        y = x
        for i in range(200):
            y = lib.sin(y * 1.01 + 0.1) * 2.0 - lib.tanh(y) / (1.5 + y * y) + x * 0.01
        return y
    x = at.tensor(0.3, requires_grad=True)
    xt = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    g, = at.grad(chain(x, at), x)
    gt, = torch.autograd.grad(chain(xt, torch), xt)
    assert g.item() == pytest.approx(gt.item(), rel=1e-12)


def test_matmul_mlp_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    w1, w2, xb = rng.normal(size=(5, 8)), rng.normal(size=(8, 3)), rng.normal(size=(4, 5))

    def loss(lib, a, b, x):
        return ((lib.tanh(x @ a) @ b - 1.0) ** 2).mean()
    A = [at.tensor(v, requires_grad=True) for v in (w1, w2)]
    T = [torch.tensor(v, requires_grad=True) for v in (w1, w2)]
    got = at.grad(loss(at, *A, at.tensor(xb)), A)
    want = torch.autograd.grad(loss(torch, *T, torch.tensor(xb)), T)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-14)
