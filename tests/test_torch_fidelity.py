"""torch's semantics where autotape differed (issue #28): grad mode inside hooks and
inside decorated generators and coroutines, gradcheck's calls, torch's errors for a
post-accumulate hook's result, a tensor as its own grad, int data, class decoration."""
import asyncio
import warnings

import numpy as np
import pytest

import autotape as at


def test_hooks_run_without_grad_mode_in_a_plain_backward():
    modes = []
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: modes.append(at.is_grad_enabled()))
    x.register_hook(lambda g: modes.append(at.is_grad_enabled()))
    y.sum().backward()
    assert modes == [False, False]
    modes.clear()
    y = x * 2
    y.register_hook(lambda g: modes.append(at.is_grad_enabled()))
    at.grad(y.sum(), x, create_graph=True)
    assert modes == [True, True]


def test_an_optimizer_step_in_a_post_accumulate_hook():
    p = at.tensor([1.0, 2.0], requires_grad=True)

    def step(param):
        param -= 0.1 * param.grad                 # in place on a leaf: needs no_grad
        param.grad = None

    p.register_post_accumulate_grad_hook(step)
    (p * p).sum().backward()
    np.testing.assert_allclose(p.numpy(), [0.8, 1.6])
    assert p.grad is None and p.requires_grad


def test_a_post_accumulate_hook_returning_a_value_raises():
    p = at.tensor([1.0, 2.0], requires_grad=True)
    p.register_post_accumulate_grad_hook(lambda param: param * 2)
    with pytest.raises(RuntimeError, match="post accumulate grad hooks should return None"):
        (p * 3).sum().backward()


def test_torch_errors_for_grad_and_data():
    x = at.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="can't assign Variable as its own grad"):
        x.grad = x
    with pytest.raises(RuntimeError, match="must be floating point or complex dtype"):
        x.data = at.tensor([1])


def test_decorated_generators_run_in_the_mode_at_every_step():
    @at.no_grad()
    def inside():
        for _ in range(2):
            yield at.is_grad_enabled()
        return "done"

    steps = inside()
    assert next(steps) is False
    assert at.is_grad_enabled()                   # the caller's mode between steps
    assert next(steps) is False
    with pytest.raises(StopIteration) as stop:
        next(steps)
    assert stop.value.value == "done"

    @at.enable_grad()
    def echo():
        got = yield at.is_grad_enabled()
        try:
            yield got, at.is_grad_enabled()
        except ValueError:
            yield "thrown", at.is_grad_enabled()

    with at.no_grad():
        steps = echo()
        assert next(steps) is True
        assert steps.send(5) == (5, True)
        assert steps.throw(ValueError) == ("thrown", True)
        assert not at.is_grad_enabled()


def test_decorated_coroutines_run_in_the_mode():
    @at.no_grad()
    async def inside():
        await asyncio.sleep(0)
        return at.is_grad_enabled()

    assert asyncio.run(inside()) is False


def test_decorating_a_class_warns_as_torch():
    with pytest.warns(FutureWarning, match="Decorating classes is deprecated"):
        @at.no_grad()
        class Model:
            def __init__(self):
                self.mode = at.is_grad_enabled()
    assert Model().mode is False


def test_gradcheck_calls_func_with_inputs_that_require_grad():
    def f(x):
        y = x * 2
        y.register_hook(lambda g: g)              # needs y to require grad
        return at.sin(y)

    assert at.gradcheck(f, (at.tensor([1.0, 2.0], requires_grad=True),))


def test_gradcheck_raises_when_the_output_shape_changes():
    with pytest.raises(at.GradcheckError, match="outputs whose shapes do not change"):
        at.gradcheck(lambda x: x[x > 1.0] * 1.0, (at.tensor([1.0, 2.0], requires_grad=True),))


def test_against_torch():
    torch = pytest.importorskip("torch")
    for lib in (torch, at):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        seen = []
        y = x * 3
        y.register_hook(lambda g: seen.append((lib.is_grad_enabled(), g.requires_grad)))
        y.sum().backward()
        assert seen == [(False, False)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert at.gradcheck(lambda v: v ** 2, (at.tensor([0.5], requires_grad=True),))


def test_del_grad_and_pickling():
    import pickle
    x = at.tensor([1.0, 2.0], requires_grad=True)
    (x * 2).sum().backward()
    del x.grad
    assert x.grad is None
    copy = pickle.loads(pickle.dumps(x))
    assert copy.requires_grad and copy.is_leaf and copy.tolist() == [1.0, 2.0]
    result = pickle.loads(pickle.dumps(x * 2))             # a leaf, as torch's
    assert result.requires_grad and result.is_leaf and result.tolist() == [2.0, 4.0]
    plain = pickle.loads(pickle.dumps(at.tensor([[1, 2]])))
    assert plain.dtype == np.int64 and plain.shape == (1, 2) and not plain.requires_grad
    scalar = pickle.loads(pickle.dumps(at.tensor(1.5, dtype=np.float32)))
    assert scalar.dtype == np.float32 and scalar.item() == 1.5


def test_median_and_nanmedian_as_numpy_and_torch():
    rng = np.random.default_rng(8)
    for shape, axis in [((5,), None), ((4,), None), ((3, 4), 1), ((3, 4), 0),
                        ((2, 3, 4), -1)]:
        a = rng.normal(size=shape)
        if len(shape) == 2:
            a[1, 2] = np.nan
        for name in ("median", "nanmedian"):
            want = getattr(np, name)(a, axis=axis)
            got = getattr(at, name)(at.tensor(a, requires_grad=True), axis=axis)
            np.testing.assert_array_equal(got.detach().numpy(), want)
            got = getattr(np, name)(at.tensor(a, requires_grad=True), axis=axis)
            np.testing.assert_array_equal(got.detach().numpy(), want)
    x = at.tensor([3.0, 1.0, 4.0, 2.0], requires_grad=True)
    assert at.grad(at.median(x), x)[0].tolist() == [0.5, 0.0, 0.0, 0.5]
    assert x.median().item() == 2.0                          # torch's: the lower middle
    assert at.gradcheck(lambda v: at.median(v, axis=1),
                        (at.tensor(rng.normal(size=(3, 4)), requires_grad=True),))
    torch = pytest.importorskip("torch")
    a = rng.normal(size=(3, 5))
    a[0, 1] = np.nan
    for name in ("median", "nanmedian"):
        for dim in (0, 1):
            tv, ti = getattr(torch.tensor(a), name)(dim=dim)
            av, ai = getattr(at.tensor(a), name)(dim=dim)
            np.testing.assert_array_equal(av.numpy(), tv.numpy())
            if name == "nanmedian" or dim == 0:
                finite = ~np.isnan(tv.numpy())
                np.testing.assert_array_equal(ai.numpy()[finite], ti.numpy()[finite])
        assert getattr(at.tensor(a[1:]), name)().item() == getattr(torch.tensor(a[1:]),
                                                                   name)().item()


def test_var_mean_isin_signbit_expand():
    x = at.tensor([3.0, -1.0, -0.0, 2.0], requires_grad=True)
    v, m = at.var_mean(x)
    assert np.isclose(v.item(), np.var([3.0, -1.0, 0.0, 2.0], ddof=1)) and m.item() == 1.0
    v, m = x.var_mean(dim=0, correction=0)
    assert np.isclose(v.item(), np.var([3.0, -1.0, 0.0, 2.0]))
    assert at.signbit(x).tolist() == [False, True, True, False]
    assert at.isin(x, [2.0, 3.0]).tolist() == [True, False, False, True]
    assert np.isin(x, at.tensor([-1.0])).tolist() == [False, True, False, False]
    column = at.tensor([[1.0], [2.0]], requires_grad=True)
    wide = column.expand(2, 3)
    assert wide.shape == (2, 3) and column.expand_as(wide).shape == (2, 3)
    (wide * at.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert column.grad.tolist() == [[6.0], [6.0]]
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        y = (column * 1.0).expand(-1, 3)
        y += 1
