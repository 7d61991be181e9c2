"""No silent wrong answer: results never alias their inputs, compiled functions refuse
arguments they would silently cut from the graph, aliases handed out before
requires_grad_() cannot change what a tape recorded, and bad inputs name the problem."""
import numpy as np
import pytest

import autotape as at
import autotape.func as F


@pytest.mark.parametrize("make", [
    lambda h: np.roll(h, 3),
    lambda h: np.roll(h, 3, axis=0),
    lambda h: np.roll(h, 0, axis=0),
    lambda h: at.clip(h, None, None),
    lambda h: h.clip(),
])
def test_results_never_alias_their_input(make):
    h = at.tensor([1.0, 2.0, 3.0])
    r = make(h)
    assert r is not h
    r[0] = 100.0                                   # an update of the result ...
    assert h.tolist() == [1.0, 2.0, 3.0]           # ... leaves the input alone


def test_identity_roll_and_clip_keep_the_gradient():
    x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    r = np.roll(x, 3, axis=0)
    c = at.clip(x, None, None)
    g, = at.grad((r * r).sum() + c.sum(), x)
    assert g.tolist() == [3.0, 5.0, 7.0]


def test_alias_taken_before_requires_grad_cannot_change_the_gradient():
    for take in (lambda t: t.numpy(), np.asarray, lambda t: t.detach().numpy()):
        t = at.tensor([1.0, 2.0])
        alias = take(t)
        t.requires_grad_()
        y = (t * t).sum()
        alias[0] = 100.0
        assert at.grad(y, t)[0].tolist() == [2.0, 4.0]


def test_compiled_function_refuses_arguments_that_require_grad():
    c = at.compile(lambda u: (u ** 2).sum(), np.ones(2))
    x = at.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="argument 0 requires grad"):
        c(x)
    with pytest.raises(TypeError, match="not a differentiable op"):
        F.grad(c)(np.array([1.0, 2.0]))
    assert c(x.detach()).item() == 5.0
    with at.no_grad():
        assert c(x).item() == 5.0
    assert c.grad(x.detach()).tolist() == [2.0, 4.0]


def test_compile_errors_name_the_problem():
    with pytest.raises(TypeError, match="f must return a Tensor.*returned None"):
        at.compile(lambda u: None, np.ones(2))
    with pytest.raises(RuntimeError, match="compiled inside another one's recording"):
        at.compile(lambda u: at.compile(lambda v: v.sum(), np.ones(2))(u), np.ones(2))


@pytest.mark.parametrize("call, got", [
    (lambda x: at.grad([3.0], [x]), "element 0 is float"),
    (lambda x: at.grad(3.0, x), "sequence of Tensors, but got float"),
    (lambda x: at.backward([np.ones(2)]), "element 0 is ndarray"),
    (lambda x: at.grad([(x * 2).sum(), 1.0], [x]), "element 1 is float"),
])
def test_non_tensor_outputs_are_named(call, got):
    x = at.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=got):
        call(x)


def test_tensors_a_compiled_function_keeps_are_not_rewritten_by_replays():
    kept = []

    def f(x):
        y = at.sin(x) * 2.0
        kept.append(y)                             # f keeps an intermediate
        return (y * x).sum()
    c = at.compile(f, np.array([0.5, 1.0]))
    recorded = kept[0].tolist()
    c(np.array([2.0, 3.0]))
    c.grad(np.array([-1.0, 4.0]))                  # the fused replay-and-sweep too
    assert kept[0].tolist() == recorded
    assert c(np.array([0.5, 1.0])).item() == pytest.approx(f(at.tensor([0.5, 1.0])).item())
