"""max / min (ties split evenly), and the composed reductions, against numpy and finite
differences, to second order."""
import numpy as np
import pytest

import autotape as at
from fd import check_grads, check_second_order

rng = np.random.default_rng(7)


@pytest.mark.parametrize("fn", [at.max, at.min, at.amax, at.amin])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True),
                                            ((0, 2), False)])
def test_max_min(fn, axis, keepdims):
    x = rng.normal(size=(3, 4, 2))
    check_grads(lambda t: fn(t, axis=axis, keepdims=keepdims), x)
    check_second_order(lambda t: fn(t * t, axis=axis, keepdims=keepdims) * t.sum(), x)
    np.testing.assert_array_equal(fn(at.tensor(x), axis=axis, keepdims=keepdims).numpy(),
                                  getattr(np, fn.__name__)(x, axis=axis, keepdims=keepdims))


def test_ties_split_evenly():
    t = at.tensor([1., 3., 3.], requires_grad=True)
    assert at.grad(t.max(), t)[0].tolist() == [0.0, 0.5, 0.5]        # research T60
    m = at.tensor([[2., 2., 1.], [0., 5., 5.]], requires_grad=True)
    assert at.grad(at.min(m, axis=1).sum(), m)[0].tolist() == [[0, 0, 1], [1, 0, 0]]
    assert at.grad(at.max(m, axis=0).sum(), m)[0].tolist() == [[1, 0, 0], [0, 1, 1]]
    g, = at.grad(at.max(m, axis=0).sum(), m, create_graph=True)
    assert g.tolist() == [[1, 0, 0], [0, 1, 1]]


def softmax_reference(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


COMPOSED = [
    ("logsumexp", lambda t: at.logsumexp(t, axis=1),
     lambda x: np.log(np.exp(x).sum(axis=1))),
    ("logsumexp_all", lambda t: at.logsumexp(t, keepdims=True),
     lambda x: np.log(np.exp(x).sum(keepdims=True))),
    ("softmax", lambda t: at.softmax(t, axis=0), lambda x: softmax_reference(x, 0)),
    ("log_softmax", lambda t: at.log_softmax(t, axis=-1),
     lambda x: np.log(softmax_reference(x, -1))),
    ("var", lambda t: at.var(t, axis=0), lambda x: np.var(x, axis=0)),
    ("var_ddof", lambda t: t.var(ddof=1), lambda x: np.var(x, ddof=1)),
    ("std", lambda t: at.std(t, axis=1, keepdims=True),
     lambda x: np.std(x, axis=1, keepdims=True)),
    ("average", lambda t: at.average(t, axis=1, weights=np.array([1., 2., 3., 4.])),
     lambda x: np.average(x, axis=1, weights=[1., 2., 3., 4.])),
    ("diagonal", lambda t: at.diagonal(t, 1), lambda x: np.diagonal(x, 1)),
    ("trace", lambda t: at.trace(t, -1), lambda x: np.trace(x, -1)),
]


@pytest.mark.parametrize("name, f, reference", COMPOSED, ids=[c[0] for c in COMPOSED])
def test_composed(name, f, reference):
    x = rng.normal(size=(3, 4))
    np.testing.assert_allclose(f(at.tensor(x)).numpy(), reference(x), rtol=1e-13,
                               atol=1e-14)
    check_grads(f, x)
    check_second_order(f, x)


def test_logsumexp_is_stable_and_softmax_sums_to_one():
    x = at.tensor([1000.0, 999.0, -1000.0], requires_grad=True)
    assert at.logsumexp(x).item() == pytest.approx(1000.0 + np.log1p(np.exp(-1.0)))
    g, = at.grad(at.logsumexp(x), x)
    np.testing.assert_allclose(g.numpy(), softmax_reference(x.numpy(), 0), rtol=1e-15)
    assert at.softmax(x).sum().item() == pytest.approx(1.0)


def test_argmax_argmin_have_no_gradient():
    x = at.tensor([[1., 5.], [7., 2.]], requires_grad=True)
    assert at.argmax(x).item() == 2 and x.argmin(axis=1).tolist() == [0, 1]
    assert not at.argmax(x).requires_grad and at.argmax(x).dtype == np.int64


def test_numpy_names_on_tensors():
    x = at.tensor(rng.normal(size=(2, 3)), requires_grad=True)
    for fn in (np.max, np.min, np.amax, np.amin, np.var, np.std, np.trace):
        y = fn(x)
        assert y.requires_grad and np.isclose(y.item(), fn(x.numpy()))
    assert np.argmax(x).item() == np.argmax(x.numpy())
    w = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(np.average(x, axis=1, weights=w).numpy(),
                               np.average(x.numpy(), axis=1, weights=w))


@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, False), (0, True), ((0, 2), False)])
def test_prod(axis, keepdims):
    x = rng.normal(size=(3, 4, 2))
    x[0, 1, 0] = 0.0                       # one zero in some groups, two in others
    x[2, 1, 0] = 0.0
    x[1, 3, 1] = 0.0
    np.testing.assert_allclose(at.prod(at.tensor(x), axis, keepdims).numpy(),
                               np.prod(x, axis=axis, keepdims=keepdims), rtol=1e-14)
    check_grads(lambda t: at.prod(t, axis=axis, keepdims=keepdims), x)
    check_second_order(lambda t: at.prod(t, axis=axis, keepdims=keepdims), x)


def test_prod_gradient_at_zeros_is_exact():
    x = at.tensor([[2., 0., 3.], [1., 4., 5.], [0., 0., 2.]], requires_grad=True)
    assert at.grad(x.prod(axis=1).sum(), x)[0].tolist() == [[0, 6, 0], [20, 5, 4], [0, 0, 0]]


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_cumsum(axis):
    x = rng.normal(size=(3, 4))
    np.testing.assert_allclose(at.cumsum(at.tensor(x), axis).numpy(), np.cumsum(x, axis),
                               rtol=1e-14)
    check_grads(lambda t: at.cumsum(t, axis), x)
    check_second_order(lambda t: at.cumsum(t * t, axis) * t.sum(), x)
    assert np.cumsum(at.tensor(x, requires_grad=True), axis=axis).requires_grad


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_cumprod(axis):
    x = rng.uniform(0.5, 1.5, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))
    np.testing.assert_allclose(at.cumprod(at.tensor(x), axis).numpy(), np.cumprod(x, axis),
                               rtol=1e-15)
    check_grads(lambda t: at.cumprod(t, axis), x)
    check_second_order(lambda t: at.cumprod(t, axis) * t.sum(), x)
    assert np.cumprod(at.tensor(x, requires_grad=True), axis=axis).requires_grad
    assert at.tensor(x).cumprod(axis).shape == np.cumprod(x, axis).shape


def test_cumprod_is_exact_at_zeros_to_second_order():
    """d/dx_j of sum(cumprod(x)) = sum_{k>=j} prod_{t<=k, t!=j} x_t, with no division."""
    x0 = np.array([2.0, 0.0, 3.0, 0.0, 5.0])

    def expected_grad(x):
        n = x.size
        return np.array([sum(np.prod([x[t] for t in range(k + 1) if t != j])
                             for k in range(j, n)) for j in range(n)])
    x = at.tensor(x0, requires_grad=True)
    g, = at.grad(at.cumprod(x).sum(), x, create_graph=True)
    np.testing.assert_array_equal(g.numpy(), expected_grad(x0))
    y = at.tensor(x0, requires_grad=True)
    compiled, = at.grad(at.cumprod(y).sum(), y)
    np.testing.assert_array_equal(compiled.numpy(), expected_grad(x0))
    H = np.stack([at.grad(g[i], x, retain_graph=True)[0].numpy() for i in range(5)])
    eps = 1e-6
    fd = np.stack([(expected_grad(x0 + eps * e) - expected_grad(x0 - eps * e)) / (2 * eps)
                   for e in np.eye(5)], axis=1)
    np.testing.assert_allclose(H, fd, atol=1e-6)


def test_cumprod_matches_torch():
    torch = pytest.importorskip("torch")
    x0 = rng.uniform(-1.5, 1.5, (3, 5))
    x0[1, 2] = 0.0
    xt = torch.tensor(x0, requires_grad=True)
    w = rng.uniform(-1, 1, (3, 5))
    gt, = torch.autograd.grad((torch.cumprod(xt, 1) * torch.tensor(w)).sum(), xt)
    x = at.tensor(x0, requires_grad=True)
    g, = at.grad((at.cumprod(x, 1) * w).sum(), x)
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-12, atol=1e-14)


def test_prod_of_a_zero_d_zero_to_second_order():
    x = at.tensor(0.0, requires_grad=True)
    g, = at.grad(at.prod(x * 3.0), x, create_graph=True)
    assert g.item() == 3.0 and at.grad(g, x)[0].item() == 0.0


def test_reductions_of_lists_holding_tensors_keep_gradients():
    x = at.tensor(2.0, requires_grad=True)
    assert at.grad(at.mean([x, 1.0]), x)[0].item() == 0.5
    assert at.grad(at.sum([[x, x], [1.0, x]]), x)[0].item() == 3.0
