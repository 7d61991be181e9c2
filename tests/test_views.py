"""Views as numpy's and torch's (ops/views.py): basic indexing, reshape / view and
transposes are views; an in-place op through a view changes its base and every other
view of it, and gradients flow as torch's (CopySlices). Checked against numpy's values
by hypothesis on random sequences of views and writes, against torch's gradients where
torch is installed, and on cases from torch's test_autograd.py."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotape as at


def test_writes_through_every_kind_of_view():
    x = at.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    column = x[:, 1]
    column *= 10                                   # a strided (non-contiguous) view
    assert x.tolist() == [[1.0, 20.0, 3.0], [4.0, 50.0, 6.0]]
    x.T[2, 0] = -3.0                               # a transpose
    assert x[0, 2].item() == -3.0
    element = x[1, 2]
    element += 1                                   # a 0-d view
    assert x[1, 2].item() == 7.0
    flat = x.view(6)
    flat[0] = 0.5                                  # a reshape
    assert x[0, 0].item() == 0.5
    x.narrow(1, 0, 1).fill_(9.0)
    assert x[:, 0].tolist() == [9.0, 9.0]
    a, b = x.unbind(0)
    b.mul_(0.0)
    assert x[1].tolist() == [0.0, 0.0, 0.0]
    first, rest = x.split([1, 2], dim=1)
    rest.copy_(at.tensor([[1.0, 2.0]]))
    assert x.tolist() == [[9.0, 1.0, 2.0], [0.0, 1.0, 2.0]]


def test_other_views_see_a_write():
    x = at.tensor(np.arange(6.0))
    head, tail, all_of_it = x[:4], x[2:], x.reshape(2, 3)
    tail[0] = 100.0                                # x[2]
    assert head.tolist() == [0.0, 1.0, 100.0, 3.0]
    assert all_of_it[0, 2].item() == 100.0
    x += 1                                         # the base itself
    assert head.tolist() == [1.0, 2.0, 101.0, 4.0]
    inner = tail[1:][::2]                          # a view of a view: of x
    inner *= 0
    assert x.tolist() == [1.0, 2.0, 101.0, 0.0, 5.0, 0.0]


def test_gradients_through_a_view_changed_in_place():
    x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1.0
    v = y[1:]
    v *= 3
    assert y.tolist() == [1.0, 6.0, 9.0]
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 3.0, 3.0]       # torch: [1, 3, 3]


def test_a_value_assigned_through_a_view_gets_its_gradient():
    w = at.tensor([2.0, 3.0], requires_grad=True)
    buf = at.zeros((2, 2))
    buf[:, 1].copy_(w * w)                        # a column of a plain tensor
    assert buf.requires_grad
    g, = at.grad((buf * at.tensor([[1.0, 10.0], [1.0, 100.0]])).sum(), w)
    assert g.tolist() == [40.0, 600.0]


def test_torch_errors_for_views_of_leaves():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    v = x[:1]
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad "
                                           "is being used in an in-place operation"):
        v += 1
    with at.no_grad():                             # an optimizer-style update
        v -= 0.5
    assert x.tolist() == [0.5, 2.0] and x.requires_grad and x.is_leaf


def test_views_are_the_same_through_their_dtype_and_shape():
    x = at.tensor(np.arange(4.0, dtype=np.float32))
    v = x.view(2, 2).T
    v[0, 1] = 7.0
    assert x.dtype == np.float32 and x.tolist() == [0.0, 1.0, 7.0, 3.0]


# ---- random programs: numpy's values -------------------------------------------------------

# (numpy's view, autotape's): each a view in numpy for the arrays it is used on
VIEW_STEPS = [
    (lambda a: a[1:], lambda t: t[1:]),
    (lambda a: a[::-1], lambda t: t[::-1]),
    (lambda a: a[..., ::2], lambda t: t[..., ::2]),
    (lambda a: a.T, lambda t: t.T),
    (lambda a: a.reshape(-1), lambda t: t.reshape(-1)),      # (C-contiguous ones only)
    (lambda a: a[0] if a.ndim > 1 else a[:1], lambda t: t[0] if t.ndim > 1 else t[:1]),
]


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 20), st.integers(0, 5),
                              st.floats(-3, 3)), min_size=1, max_size=8))
def test_random_views_and_writes_match_numpy(ops):
    base_np = np.arange(24.0).reshape(4, 6)
    base_at = at.tensor(base_np)
    views = [(base_np, base_at)]
    for make_view, pick, kind, value in ops:
        a, t = views[pick % len(views)]
        if make_view:
            if a.size <= 1:
                continue
            if kind == 4 and not a.flags.c_contiguous:
                continue                           # (numpy's reshape copies there)
            na = VIEW_STEPS[kind][0](a)
            if na.size == 0:
                continue
            views.append((na, VIEW_STEPS[kind][1](t)))
        else:
            if kind % 3 == 0:
                a *= value
                t *= value
            elif kind % 3 == 1:
                a += value
                t += value
            else:
                a[...] = value
                t[...] = value
        for a2, t2 in views:
            np.testing.assert_array_equal(t2.numpy(), a2)


# ---- against torch ---------------------------------------------------------------------------

def _program(L, x):
    # (valid for torch: nothing saved for backward is changed in place afterwards)
    y = x * 1.5
    col = y[:, 1]
    col *= 2.0
    row = y[1]
    row += L.sin(x[0])
    t = y.T
    t[0, 2] = x[1, 1] * 2
    flat = y.reshape(-1)
    flat[3:5] -= x[0, :2] ** 2
    return (y * y).sum() + (col * row[:3]).sum()


def test_gradients_match_torch():
    torch = pytest.importorskip("torch")
    xs = np.random.default_rng(5).normal(size=(3, 3))
    x = at.tensor(xs, requires_grad=True)
    tx = torch.tensor(xs, requires_grad=True)
    out, tout = _program(at, x), _program(torch, tx)
    np.testing.assert_allclose(out.item(), tout.item(), rtol=1e-13)
    out.backward()
    tout.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_second_derivatives_through_views():
    assert at.gradgradcheck(lambda x: _program(at, x),
                            (at.tensor(np.random.default_rng(6).normal(size=(3, 3)),
                                       requires_grad=True),))


# ---- cases from torch's test_autograd.py (in autotape's spelling) ---------------------------

def test_inplace_on_view_backward():
    # test_inplace_on_view_backward: a view of a non-leaf, changed in place
    root = at.tensor(np.ones((2, 2)), requires_grad=True)
    x = root.clone()
    v1 = x.narrow(0, 0, 1)
    v1.mul_(2)
    x.sum().backward()
    assert root.grad.tolist() == [[2.0, 2.0], [1.0, 1.0]]


def test_inplace_on_view_of_view():
    # test_inplace_on_view_of_view
    root = at.tensor(np.zeros((2, 2)), requires_grad=True)
    x = root.clone()
    v1 = x.narrow(0, 0, 1)
    v2 = v1.narrow(1, 1, 1)
    v2.mul_(2)
    x.sum().backward()
    assert root.grad.tolist() == [[1.0, 2.0], [1.0, 1.0]]


def test_inplace_on_view_then_no_grad():
    # test_inplace_on_view_then_no_grad: a view's base changed under no_grad is refused
    a = at.tensor(np.ones(3), requires_grad=True)
    b = a * 2
    c = b.view(3)
    with at.no_grad():
        with pytest.raises(RuntimeError):
            c.add_(1)


def test_inplace_on_view_gradcheck():
    # test_inplace_on_view_gradcheck
    def func(root, b):
        x = root.clone()
        x.narrow(1, 2, 2).narrow(0, 1, 2).mul_(b)
        x.narrow(1, 0, 2).narrow(0, 1, 2).mul_(b)
        return x
    rng = np.random.default_rng(7)
    a = at.tensor(rng.normal(size=(4, 4)), requires_grad=True)
    b = at.tensor(rng.normal(size=(2, 2)), requires_grad=True)
    assert at.gradcheck(func, (a, b))
    assert at.gradgradcheck(func, (a, b))


def test_inplace_on_view_multiple_outputs():
    # test_inplace_on_view_multiple_outputs and its variants: views returned together
    # (unbind, split, chunk) refuse in-place ops that gradients would follow
    root = at.tensor(np.arange(9.0).reshape(3, 3), requires_grad=True)
    x = root.clone()
    with pytest.raises(RuntimeError, match="Output 0 of UnbindBackward is a view and is being "
                                           "modified inplace"):
        x.unbind()[0].mul_(2)
    with pytest.raises(RuntimeError, match="output of a function that returns multiple"):
        x.unbind(0)[1].view_as(x[1]).mul_(2)
    b = root * 2
    s1, s2, s3 = b.split(1)
    with pytest.raises(RuntimeError, match="Output 0 of SplitBackward is a view"):
        s1.mul_(s2)
    plain = at.zeros((2, 2))                      # without gradients they write through
    plain.unbind(0)[1].add_(1)
    assert plain.tolist() == [[0.0, 0.0], [1.0, 1.0]]


def test_inplace_on_view_backprop_view_of_view():
    root = at.tensor(np.random.default_rng(1).normal(size=(2, 2)), requires_grad=True)
    x = root.clone()
    v1 = x.narrow(0, 0, 1)
    v2 = x.narrow(0, 0, 1)
    v1.mul_(2)
    v2.sum().backward()
    assert root.grad.tolist() == [[2.0, 2.0], [0.0, 0.0]]


def test_inplace_on_view_makes_base_require_grad():
    rng = np.random.default_rng(2)
    a = at.tensor(rng.normal(size=(4, 4)))
    b = at.tensor(rng.normal(size=(4, 2)), requires_grad=True)

    def func(root, b):
        x = root.clone()
        assert not x.requires_grad
        x.narrow(1, 2, 2).mul_(b)
        assert x.requires_grad
        return x
    assert at.gradcheck(func, (a, b))
    assert at.gradgradcheck(func, (a, b))


def test_inplace_on_view_backprop_view():
    a = at.tensor([2.0, 5.0])
    b = at.tensor([3.0], requires_grad=True)
    res = a.narrow(0, 1, 1).mul_(b)
    res.sum().backward()
    assert b.grad.tolist() == [5.0]


def test_inplace_on_view_modify_base():
    r = at.tensor(np.ones(1), requires_grad=True)

    def fn(r):
        x = at.ones(5)
        v = x.select(0, 1)
        assert not v.requires_grad and v.grad_fn is None
        x.add_(r)                                 # v now depends on r
        assert v.requires_grad
        return v
    assert at.gradcheck(fn, (r,))
    assert at.gradgradcheck(fn, (r,))


def test_inplace_on_view_non_contig():
    root = at.ones((2, 3, 2)).select(2, 1).t().detach().requires_grad_(True)
    x = root.clone()
    v1 = x.narrow(0, 0, 1)
    v2 = v1.narrow(1, 1, 1)
    v2.mul_(2)
    x.sum().backward()
    assert root.grad.tolist() == [[1.0, 2.0], [1.0, 1.0], [1.0, 1.0]]


TORCH_VIEWS = [lambda t: t[1:], lambda t: t[:, ::2], lambda t: t.T, lambda t: t[0],
               lambda t: t.narrow(1, 1, 2)]


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 20), st.integers(0, 4),
                              st.floats(-2, 2)), min_size=1, max_size=6))
def test_random_views_and_writes_have_torch_gradients(ops):
    torch = pytest.importorskip("torch")
    xs = np.random.default_rng(len(ops)).normal(size=(3, 4))

    def run(L, x):
        base = x * 1.0
        views = [base]
        for make_view, pick, kind, value in ops:
            t = views[pick % len(views)]
            if make_view:
                if t.ndim == 2 and min(t.shape) > 1:
                    views.append(TORCH_VIEWS[kind](t))
            elif kind % 2 == 0:
                t.mul_(value)                    # (saves nothing for backward)
            else:
                t.add_(L.sin(x[0, 0]) * value)
        return (base * base).sum() + sum((v * 1.5).sum() for v in views[1:])

    tx = torch.tensor(xs, requires_grad=True)
    try:
        tout = run(torch, tx)
        tout.backward()
    except RuntimeError:
        return                                    # (torch refuses this program)
    x = at.tensor(xs, requires_grad=True)
    out = run(at, x)
    out.backward()
    np.testing.assert_allclose(out.item(), tout.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_a_view_of_a_leaf_stays_on_its_graph_after_a_step_under_no_grad():
    w = at.tensor([1.0, 2.0], requires_grad=True)
    first = w[0]
    with at.no_grad():                            # an optimizer's step
        w -= 0.5
    assert first.item() == 0.5 and first.requires_grad
    (first * 3).backward()
    assert w.grad.tolist() == [3.0, 0.0]          # torch: [3, 0]
