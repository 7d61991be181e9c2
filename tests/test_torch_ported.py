"""Cases of PyTorch's test/test_autograd.py, rewritten in autotape's spelling: grad and
backward, accumulation, retain_graph, create_graph, hooks, retain_grad, grad modes,
in-place ops, version counters, index assignment, detach and torch's error messages.
Each test names the upstream test it follows; where autotape departs from torch on
purpose, the test says so and asserts autotape's behaviour (docs/torch.md lists them).
"""
import gc
import math
import weakref

import numpy as np
import pytest

import autotape as at


def same(a, b, tol=1e-12):
    a = a.detach().numpy() if isinstance(a, at.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, at.Tensor) else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# ---- grad and backward ----------------------------------------------------------------------

def test_grad_nonleaf():
    x_init = at.randn(2, 2, requires_grad=True)
    x = x_init
    y = at.randn(2, 2, requires_grad=True)
    grad_output = at.ones(2, 2)

    def fn(x):
        return x ** 2 + y * x + y ** 2

    for _ in range(5):
        grad_x, = at.grad(fn(x), x, grad_outputs=grad_output, create_graph=True)
        same(grad_x, 2 * x.detach() + y.detach())
        assert y.grad is None and x_init.grad is None
        x = x + 0.05 * grad_x
    assert fn(x).detach().sum().item() > fn(x_init).detach().sum().item()
    x.backward(grad_output)
    assert y.grad is not None and x_init.grad is not None


def test_grad_nonleaf_many_outputs():
    x = at.randn(4, 2, requires_grad=True)
    a, b = x.chunk(2)
    called = []
    x.register_hook(lambda g: called.append(g))
    go = at.randn(2, 2)
    grad_a, grad_b = at.grad(a + 2 * b, [a, b], grad_outputs=go, create_graph=True)
    same(grad_a, go)
    same(grad_b, go * 2)
    assert not called and x.grad is None


def test_grad_nonleaf_register_hook():
    x = at.randn(5, requires_grad=True)
    x_list = x.unbind()
    results = [None]

    def hook(grad):
        results[0] = grad
    x_list[0].register_hook(hook)
    x_list[0].backward()
    same(results[0], at.tensor(1.0))
    expected = np.array([1.0, 0, 0, 0, 0])
    same(x.grad, expected)
    for i in range(1, 5):
        results[0] = None
        x_list[i].backward()
        assert results[0] is None
        expected[i] = 1.0
        same(x.grad, expected)


def test_hook_with_no_name():
    class Hook:
        def __call__(self, grad):
            return grad.clone()
    x = at.randn(5, requires_grad=True).clone()
    x.register_hook(Hook())
    x.sum().backward()


def test_sharded_grad():
    leaves = [at.zeros(5, 5, requires_grad=True) for _ in range(10)]
    intermediates = [l * i + l * l for i, l in enumerate(leaves)]
    loss = sum(v * i for i, v in enumerate(intermediates)).sum()
    # (retain_graph: a sweep releases every row below its outputs, where torch frees only
    # the nodes on the way to the inputs asked for; docs/torch.md)
    d = [g for k in range(0, 10, 2)
         for g in at.grad(loss, intermediates[k:k + 2], retain_graph=True)]
    at.autograd.backward(intermediates, d)
    for i, l in enumerate(leaves):
        same(l.grad, i * i * (1 + l.detach()))


def test_backward_and_grad_badcalls():
    x = at.ones(1)
    with pytest.raises(RuntimeError, match="does not require grad"):
        x.backward()
    y = x ** 2
    with pytest.raises(RuntimeError, match="does not require grad"):
        at.grad(x, y)
    with pytest.raises(RuntimeError, match="does not require grad"):
        at.grad(y, x)
    x = at.ones(1, requires_grad=True)
    at.grad(x ** 2, x)


def test_grad_unreachable():
    x = at.ones(1, requires_grad=True)
    y = at.ones(1, requires_grad=True)
    _ = x * 2, y * 2                       # (accumulators exist for both)
    grad_x, grad_y = at.grad(x * 2, [x, y], allow_unused=True)
    same(grad_x, [2.0])
    assert grad_y is None
    z = at.ones(1, requires_grad=True)
    grad_x, grad_z = at.grad(x * 2, [x, z], allow_unused=True)
    same(grad_x, [2.0])
    assert grad_z is None
    with pytest.raises(RuntimeError, match="Set allow_unused=True"):
        at.grad(x * 2, [x, y], allow_unused=False)


def test_backward():
    v = at.randn(5, 5, requires_grad=True)
    x = at.randn(5, 5, requires_grad=True)
    y = (at.rand(5, 5) + 0.1).requires_grad_(True)
    z = at.randn(5, 5, requires_grad=True)
    go = at.randn(5, 5)
    v.backward(go)
    same(v.grad, go)
    a = x + (y * z) + 4 * z ** 2 * x / y
    a.backward(go)
    X, Y, Z, G = (t.detach().numpy() for t in (x, y, z, go))
    same(x.grad, (4 * Z ** 2 / Y + 1) * G, 1e-10)
    same(y.grad, (Z - 4 * X * Z ** 2 / Y ** 2) * G, 1e-10)
    same(z.grad, (8 * X * Z / Y + Y) * G, 1e-10)


def test_multi_backward():
    x, y, q, a, b = (at.randn(5, 5, requires_grad=True) for _ in range(5))
    q2 = q * 2
    z = x + y + q2
    c = a * b + q2
    grad_z, grad_c = at.randn(5, 5), at.randn(5, 5)
    at.autograd.backward([z, c], [grad_z, grad_c])
    same(x.grad, grad_z)
    same(y.grad, grad_z)
    same(a.grad, grad_c * b.detach())
    same(b.grad, grad_c * a.detach())
    same(q.grad, (grad_c + grad_z) * 2)


def test_multi_backward_no_grad():
    x = at.randn(5, 5, requires_grad=True)
    y = at.randn(5, 5)
    z, q = x + y, y * 2
    with pytest.raises(RuntimeError):
        at.autograd.backward([z, q], [at.ones(5, 5), at.ones(5, 5)])


def test_dependent_backward():
    x = at.randn(10, requires_grad=True)
    y = x ** 2
    z = y ** 3
    go_y, go_z = at.randn(10), at.randn(10)
    at.autograd.backward([y, z], [go_y, go_z])
    X = x.detach().numpy()
    same(x.grad, 2 * X * go_y.numpy() + 6 * X ** 5 * go_z.numpy(), 1e-10)


def test_free_deep_graph():
    x = at.randn(1, requires_grad=True)
    y = x.clone()
    for _ in range(150_000):
        y = y + y * 0.000001
    del y                                  # (freeing a deep graph does not recurse)


def test_duplicate_backward_root():
    a = at.randn(5, 5, requires_grad=True)
    b = at.randn(5, 5, requires_grad=True)
    x = a * b
    go = at.randn(5, 5)
    at.autograd.backward([x, x], [go, go])
    same(a.grad, b.detach() * go * 2)
    same(b.grad, a.detach() * go * 2)


def test_backward_no_grad():
    a = at.randn(5, 5, requires_grad=True)
    b = a + 2
    with pytest.raises(RuntimeError):
        at.autograd.backward([b], [None])


def test_backward_twice_with_saved_values():
    b = at.randn(3, requires_grad=True)
    c = at.zeros(3)
    c[[1, 2]] = b[[1, 1]]
    c.backward(at.tensor([1.0, 1.0, 1.0]))
    with pytest.raises(RuntimeError, match="Specify retain_graph=True"):
        c.backward(at.tensor([1.0, 1.0, 1.0]))


def test_backward_twice_retained_graph():
    b = at.randn(3, requires_grad=True)
    c = at.zeros(3)
    c[[1, 2]] = b[[1, 1]]
    c.backward(at.tensor([1.0, 1.0, 1.0]), retain_graph=True)
    c.backward(at.tensor([1.0, 1.0, 1.0]))
    same(b.grad, [0.0, 4.0, 0.0])


def test_backward_copy():
    x = at.ones(5, 5, requires_grad=True)
    y = at.ones(5, 5, requires_grad=True)
    a, b, c = x + 2, y + 2, x + 2
    add2 = (a + b) + c
    for _ in range(4):
        a, b, c = a * 2, b * 2, c * 2
    (add2 + a + b + c).backward(at.ones(5, 5))
    same(x.grad, np.full((5, 5), 34.0))
    same(y.grad, np.full((5, 5), 17.0))


# ---- hooks and retain_grad ------------------------------------------------------------------

def test_hooks():
    x = at.ones(5, 5, requires_grad=True)
    y = (at.ones(5, 5) * 4).requires_grad_(True)
    counter = [0]

    def bw_hook(inc, grad):
        assert isinstance(grad, at.Tensor)
        counter[0] += inc

    z = x ** 2 + x * 2 + x * y + y
    x.register_hook(lambda *args: bw_hook(0, *args))
    test = z.register_hook(lambda *args: bw_hook(1, *args))
    z.backward(at.ones(5, 5), retain_graph=True)
    assert counter[0] == 1
    test2 = z.register_hook(lambda *args: bw_hook(2, *args))
    z.backward(at.ones(5, 5), retain_graph=True)
    assert counter[0] == 4
    test2.remove()
    z.backward(at.ones(5, 5), retain_graph=True)
    assert counter[0] == 5
    test.remove()
    z.register_hook(lambda grad: grad.mul(2))
    with at.no_grad():
        y.grad.zero_()
    z.backward(at.ones(5, 5), retain_graph=True)
    same(y.grad, (x.detach() + 1) * 2)
    y.register_hook(lambda grad: grad.mul(2))
    with at.no_grad():
        y.grad.zero_()
    z.backward(at.ones(5, 5))
    same(y.grad, (x.detach() + 1) * 4)


def test_retain_grad():
    inp = at.rand(1, 3, requires_grad=True)
    h1 = inp * 3
    out = (h1 * h1).sum()
    h1.retain_grad()
    h1.retain_grad()
    out.backward(retain_graph=True)
    same(h1.grad, h1.detach() * 2)
    out.backward(retain_graph=True)
    same(h1.grad, h1.detach() * 4)
    with at.no_grad():
        inp.grad.zero_()
    inp.retain_grad()                      # (a no-op for leaves)
    inp.retain_grad()
    out.backward()
    same(inp.grad, inp.detach() * 18)


def test_retain_grad_cycle():
    counter = [0]
    refs = [None]
    x = at.ones(5, 5, requires_grad=True)

    def run():
        y = x * 2
        y.retain_grad()
        refs[0] = weakref.ref(y, lambda _: counter.__setitem__(0, counter[0] + 1))
        return y / 2

    z = run()
    gc.collect()
    assert refs[0]() is None and counter[0] == 1
    z.sum().backward()


# ---- grad modes -----------------------------------------------------------------------------

def test_no_grad():
    x = at.ones(5, 5, requires_grad=True)
    y = at.ones(5, 5) * 4
    with at.no_grad():
        w = x + y

    @at.no_grad()
    def adder(x, y):
        return x + y

    z = adder(x, y)
    for t in (w, z):
        assert not t.requires_grad and t.grad_fn is None
        with pytest.raises(RuntimeError):
            t.backward(at.ones(5, 5))
    with at.no_grad():
        assert not at.is_grad_enabled()
        adder(x, y)
        assert not at.is_grad_enabled()


def test_set_grad_generator_functions():
    @at.no_grad()
    def gen_no_grad():
        for i in range(10):
            assert not at.is_grad_enabled()
            yield i

    with at.enable_grad():
        for _ in gen_no_grad():
            assert at.is_grad_enabled()

    @at.enable_grad()
    def gen_enable_grad():
        for i in range(10):
            assert at.is_grad_enabled()
            yield i

    with at.no_grad():
        for _ in gen_enable_grad():
            assert not at.is_grad_enabled()


def test_requires_grad():
    x, y = at.randn(5, 5), at.randn(5, 5)
    z = at.randn(5, 5, requires_grad=True)
    a = x + y
    assert not a.requires_grad
    b = a + z
    assert b.requires_grad
    b.backward(at.ones(5, 5))


def test_requires_grad_():
    x = at.randn(5, 5)
    y = at.randn(5, 5, requires_grad=True)
    assert x.requires_grad_() is x and x.requires_grad
    assert y.requires_grad_() is y and y.requires_grad
    assert x.requires_grad_(True) is x and x.requires_grad
    z = x * y
    with pytest.raises(RuntimeError):
        z.requires_grad_(False)
    assert z.requires_grad_() is z and z.requires_grad
    assert x.requires_grad_(False) is x and not x.requires_grad
    assert y.requires_grad_(False) is y and not y.requires_grad


def test_requires_grad_inplace():
    a = at.randn(5, 5)
    b = at.randn(5, 5, requires_grad=True)
    a += b
    assert a.requires_grad
    a = at.randn(5, 5) + 0
    a += b
    assert a.requires_grad


@pytest.mark.parametrize("through_a_view", [False, True])
def test_no_requires_grad_inplace(through_a_view):
    a = at.randn(2, 3)
    (a[:] if through_a_view else a).add_(5)
    a.requires_grad = True
    a.sum().backward()
    same(a.grad, np.ones((2, 3)))


def test_inplace_after_requires_grad_raises():
    a = at.randn(2, 3)
    b = a[:]
    a.requires_grad = True
    with pytest.raises(RuntimeError):
        a.add_(5)
    with pytest.raises(RuntimeError):
        b.add_(5)


def test_attribute_deletion():
    x = at.randn(5, 5, requires_grad=True)
    del x.grad
    assert x.grad is None
    with pytest.raises((RuntimeError, AttributeError, TypeError)):
        del x.data
    with pytest.raises(TypeError):
        x.data = None
    with pytest.raises((RuntimeError, AttributeError, TypeError)):
        del x.requires_grad


# ---- in-place ops and version counters -------------------------------------------------------

def test_inplace():
    x = at.ones(5, 5, requires_grad=True)
    y = (at.ones(5, 5) * 4).requires_grad_()
    z = x * y
    q = z + y
    w = z * y
    z.add_(2)
    q.backward(at.ones(5, 5), retain_graph=True)      # addition saves nothing
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.backward(at.ones(5, 5))                      # multiplication saved z

    z = x * y
    q = z * y
    r = z + y
    w = z.add_(y)
    w.backward(at.ones(5, 5), retain_graph=True)
    r.backward(at.ones(5, 5), retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        q.backward(at.ones(5, 5))

    with at.no_grad():
        x.grad.zero_()
    m = x / 2
    z = m + y / 8
    q = z * y
    r = z + y
    prev = z._version
    w = z.exp_()
    assert z._version != prev
    r.backward(at.ones(5, 5), retain_graph=True)
    same(x.grad, np.full((5, 5), 0.5))
    w.backward(at.ones(5, 5), retain_graph=True)
    same(x.grad, np.full((5, 5), (1 + math.e) / 2))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        q.backward(at.ones(5, 5))

    leaf = at.ones(5, 5, requires_grad=True)
    x = leaf.clone()
    x.add_(10)
    same(x, np.full((5, 5), 11.0))
    y = x + 2
    y.backward(at.ones(5, 5))
    same(leaf.grad, np.ones((5, 5)))
    z = x * y
    x.add_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward(at.ones(5, 5))


def test_no_grad_modifies_version():
    x = at.randn(5, requires_grad=True)
    y = at.randn(5, requires_grad=True)
    z = (x * y).sum()
    with at.no_grad():
        x *= 2
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_version_counter_is_shared_by_views():
    x = at.randn(4, 3) * 1.0
    v = x[1:]
    assert (x._version, v._version) == (0, 0)
    v.mul_(2)
    assert (x._version, v._version) == (1, 1)
    x.add_(1)
    assert (x._version, v._version) == (2, 2)


def test_saved_view_modified_through_its_base():
    a = at.randn(3, 4, requires_grad=True)
    base = a * 1.0
    row = base[0]
    out = row.exp()                 # exp's gradient reads its result, not row
    prod = row * row                # this one reads row
    base.mul_(2)
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        prod.sum().backward()


def test_in_place_of_what_a_constant_operand_saved_is_fine():
    # d(h @ W)/dh reads W only: h itself is not saved while W needs no gradient
    x = at.randn(2, requires_grad=True)
    h = x * 1.0
    W = at.randn(2, 2)
    out = h @ W
    h.mul_(3)
    out.sum().backward()
    same(x.grad, W.numpy().sum(axis=1))


def test_no_unnecessary_save():
    mu = at.ones(1, requires_grad=True)
    x = at.zeros(1)
    loss = 0
    for i in range(3):
        x.detach_()
        x.copy_(mu + i)
        multiplied = x * at.tensor([float(i)])
        loss += multiplied.sum()
    loss.backward()
    same(mu.grad, [3.0])


def test_index_backward_does_not_save_tensor():
    a = at.tensor([1.0, 0, 0])
    b = at.zeros(3, requires_grad=True)
    tensor = b + 0
    tensor[a != 0] = tensor[a != 0]
    tensor.backward(at.zeros_like(tensor))


# ---- indexing and index assignment ----------------------------------------------------------

INDICES_2D = [1, (1, 1), slice(1, None), slice(None, 2), (slice(None, 2), 2),
              (slice(1, 2), 2), (1, slice(2, None)), (slice(None), slice(2, None)),
              np.array([0, 2]), (Ellipsis, slice(2, None)), ([0], [0]), ([1, 2, 3], [0]),
              ([1, 2], [2, 1]), ([[1, 2], [3, 0]], [[0, 1], [2, 3]]),
              (slice(None), [2, 3]), ([2, 3], slice(None)), [0], ([0],)]
INDICES_3D = [(slice(None), [0], [0]), ([0], [0], slice(None)),
              (slice(None), [0, 1, 2], [0]), ([0, 1, 2], [0], slice(None)),
              (slice(None), [1, 2], [2, 1]), ([1, 2], [2, 1], slice(None)),
              (slice(None), [[1, 2], [2, 0]], [[0, 1], [2, 3]]),
              ([[1, 2], [3, 0]], [[0, 1], [2, 2]], slice(None)),
              (slice(None), slice(None), [2, 1]), (slice(None), [2, 1], slice(None)),
              ([2, 1], slice(None), slice(None)), ([0],), ([0], slice(None)),
              ([0], Ellipsis), ([1, 2], [0, 1]), ([1, 2], [0, 1], Ellipsis),
              (Ellipsis, [1, 2], [0, 1])]


@pytest.mark.parametrize("shape, idx", [((4, 4), i) for i in INDICES_2D]
                         + [((4, 3, 4), i) for i in INDICES_3D])
def test_indexing(shape, idx):
    x = np.arange(1.0, 1 + np.prod(shape)).reshape(shape)
    y = at.tensor(x, requires_grad=True)
    np_idx = tuple(idx) if isinstance(idx, tuple) else idx
    same(y[idx], x[np_idx])
    y[idx].sum().backward()
    expected = np.zeros(shape)
    expected[np_idx] = 1
    same(y.grad, expected)


def test_indexing_by_mask():
    x = np.arange(1.0, 17).reshape(4, 4)
    mask = np.random.default_rng(0).random((4, 4)) > 0.5
    y = at.tensor(x, requires_grad=True)
    y[at.tensor(mask)].sum().backward()
    same(y.grad, mask.astype(float))


def test_indexing_duplicates():
    y = at.tensor(np.arange(1.0, 17).reshape(4, 4), requires_grad=True)
    idx = np.array([1, 1, 3, 2, 1, 2])
    y[idx].sum().backward()
    expected = np.zeros((4, 4))
    for i in idx:
        expected[i] += 1
    same(y.grad, expected)

    y = at.tensor(np.arange(1.0, 17).reshape(4, 4), requires_grad=True)
    y[[[1, 2], [0, 0]], [[0, 1], [1, 1]]].sum().backward()
    same(y.grad, [[0, 2, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]])

    y = at.tensor(np.arange(1.0, 65).reshape(4, 4, 4), requires_grad=True)
    y[[1, 1, 1], :, :].sum().backward()
    expected = np.zeros((4, 4, 4))
    expected[1] = 3
    same(y.grad, expected)


def _setitem(size, index):
    x = at.ones(*size, requires_grad=True)
    y = x + 2
    version = y._version
    y[index] = 2
    assert y._version != version
    y.backward(at.ones(*size))
    expected = np.ones(size)
    expected[index] = 0
    same(x.grad, expected)


def _setitem_tensor(size, index):
    x = at.ones(*size, requires_grad=True)
    y = x + 2
    version = y._version
    value = at.zeros(x[index].shape).fill_(7)
    value.requires_grad = True
    y[index] = value
    assert y._version != version
    y.backward(at.ones(*size))
    expected = np.ones(size)
    expected[index] = 0
    same(x.grad, expected)
    same(value.grad, np.ones(value.shape))
    x = at.randn(4, requires_grad=True)       # x broadcast into y[1]
    y = at.zeros(2, 3, 4)
    y[1] = x
    y.backward(at.randn(2, 3, 4))
    assert x.grad.shape == x.shape


@pytest.mark.parametrize("size, index", [
    ((5, 5), 1), ((5,), 1), ((1,), 0), ((10,), ([0, 4, 2],)), ((5, 5), ([0, 4], [2, 2])),
    ((5, 5, 5), (slice(None), slice(None), [1, 3])),
    ((5, 5, 5), (slice(None), [1, 3], slice(None))),
    ((5, 5, 5), ([1, 3], slice(None), slice(None))),
    ((5, 5, 5), (slice(None), [2, 4], [1, 3])), ((5, 5, 5), ([1, 3], [2, 4], slice(None)))])
def test_setitem(size, index):
    _setitem(size, index)


@pytest.mark.parametrize("size, index", [
    ((5, 5), 3), ((5, 5), ([0, 1], [1, 0])), ((5,), 3), ((5,), ([0, 1, 2, 3],)),
    ((5, 5, 5), (slice(None), slice(None), [1, 3])),
    ((5, 5, 5), (slice(None), [1, 3], slice(None))),
    ((5, 5, 5), ([1, 3], slice(None), slice(None))),
    ((5, 5, 5), (slice(None), [2, 4], [1, 3])), ((5, 5, 5), ([1, 3], [2, 4], slice(None)))])
def test_setitem_tensor(size, index):
    _setitem_tensor(size, index)


def test_setitem_mask():
    mask = np.random.default_rng(1).random((5, 5)) > 0.5
    _setitem((5, 5), mask)
    _setitem((5,), mask[0])
    _setitem_tensor((5, 5), mask)
    _setitem_tensor((5,), mask[0])


def test_leaf_assignment():
    x = at.randn(5, 5)
    y = at.randn(5, requires_grad=True)
    z = at.randn(5, requires_grad=True)
    x[0] = y
    x[1] = 2 * z
    assert x.requires_grad and x.grad_fn is not None
    x.sum().backward()
    same(y.grad, np.ones(5))
    same(z.grad, np.full(5, 2.0))


def test_no_grad_assignment():
    x = at.randn(5, 5, requires_grad=True)
    y = at.randn(5)
    with at.no_grad():
        x[0] = y
    assert x.requires_grad and x.grad_fn is None
    same(x[0], y)


# ---- shaping ops ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, grad_shape, parts", [
    ("stack", (3, 10, 10), lambda g: (g[0], g[1], g[2])),
    ("hstack", (10, 30), lambda g: (g[:, :10], g[:, 10:20], g[:, 20:])),
    ("vstack", (30, 10), lambda g: (g[:10], g[10:20], g[20:])),
    ("dstack", (10, 10, 3), lambda g: (g[..., 0], g[..., 1], g[..., 2]))])
def test_stacks(name, grad_shape, parts):
    x, y, z = (at.randn(10, 10, requires_grad=True) for _ in range(3))
    getattr(at, name)([x, y, z]).backward(grad := at.randn(*grad_shape))
    for t, g in zip((x, y, z), parts(grad.numpy())):
        same(t.grad, g)


def test_unbind():
    stacked = at.randn(3, 10, 10, requires_grad=True)
    x, y, z = stacked.unbind()
    grad = at.randn(3, 10, 10)
    at.autograd.backward([x, y, z], list(grad.unbind()))
    same(stacked.grad, grad)
    for i in range(3):
        stacked = at.randn(3, 10, 10, requires_grad=True)
        outs = stacked.unbind()
        gi = grad.unbind()[i]
        g, = at.grad(outs[i], stacked, gi)
        expected = np.zeros((3, 10, 10))
        expected[i] = gi.numpy()
        same(g, expected)


def test_fill():
    root = at.randn(4, 5, requires_grad=True)

    def func(root):
        x = root.clone()
        x.fill_(2)
        return x
    assert at.gradcheck(func, [root])
    assert at.gradgradcheck(func, [root])


def test_unused_output():
    x = at.randn(10, 10, requires_grad=True)
    o = x.chunk(5)[2]
    (o * 4 + 2).sum().backward()
    expected = np.zeros((10, 10))
    expected[4:6] = 4
    same(x.grad, expected)
    with at.no_grad():
        x.grad.zero_()
    go = at.randn(2, 10)
    x.chunk(5)[0].backward(go)
    expected = np.zeros((10, 10))
    expected[:2] = go.numpy()
    same(x.grad, expected)


def test_select_sum():
    x = at.randn(10, requires_grad=True)
    assert at.gradcheck(lambda x: x.select(0, 1).sum(), [x])
    assert at.gradgradcheck(lambda x: x.select(0, 1).sum(), [x])


# ---- detach ---------------------------------------------------------------------------------

def test_detach():
    x = at.randn(10, 10, requires_grad=True)
    y = (x + 2).detach()
    z = y * 4 + 2
    assert not y.requires_grad and not z.requires_grad
    x = at.randn(10, 10, requires_grad=True)
    y = (x * 2).detach()
    assert not y.requires_grad and y.grad_fn is None
    (x + y).sum().backward()
    same(x.grad, np.ones((10, 10)))
    x = at.randn(10, 10, requires_grad=True)
    y = at.randn(10, 10, requires_grad=True)
    a = x * 2
    (y + a).sum().backward(retain_graph=True)
    a.detach_()
    assert not a.requires_grad
    (y + a).sum().backward()
    same(x.grad, np.full((10, 10), 2.0))
    same(y.grad, np.full((10, 10), 2.0))
    view = x.narrow(0, 1, 4)
    with pytest.raises(RuntimeError, match="view"):
        view.detach_()


def test_isolated_node():
    x = at.randn(5, 5, requires_grad=True)
    y = at.randn(5, 5, requires_grad=True)
    a = x + y
    b = a.argmax(axis=1, keepdims=True).repeat(5, axis=1).astype(float)
    (b + a).sum().backward()
    same(x.grad, np.ones((5, 5)))


def test_numpy_requires_grad():
    # departure (docs/torch.md): numpy() of a tensor that requires grad is a read-only
    # view of its value, where torch raises; numpy's implicit conversions raise torch's
    # error, so no value leaves the graph unnoticed
    x = at.randn(2, 2, requires_grad=True)
    with pytest.raises(ValueError):
        x.numpy()[0, 0] = 1.0
    with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires "
                       r"grad. Use tensor.detach\(\).numpy\(\) instead."):
        np.asarray(x)
    with at.no_grad():
        x.numpy()
    at.randn(2, 2).numpy()


def test_detach_base():
    # detaching the base does not detach its view
    x = at.randn(10, 10, requires_grad=True)
    view = x.narrow(0, 1, 4)
    x.detach_()
    assert not x.requires_grad
    assert view.requires_grad and view.grad_fn is not None


# ---- more of grad modes, pickling, versions ---------------------------------------------------

def test_set_grad_enabled():
    x = at.tensor([1.0], requires_grad=True)
    with at.set_grad_enabled(False):
        y = x * 2
    assert not y.requires_grad
    with at.set_grad_enabled(True):
        y = x * 2
    assert y.requires_grad
    with at.set_grad_enabled(False):
        at.set_grad_enabled(True)
        y = x * 2
    assert y.requires_grad


def test_pickle():
    import pickle
    x = at.randn(10, 10, requires_grad=True)
    y = at.randn(10, 10)
    for protocol in range(3):
        xc, yc = pickle.loads(pickle.dumps([x, y], protocol=protocol))
        same(xc, x)
        same(yc, y)
        assert (xc.requires_grad, yc.requires_grad) == (True, False)


def test_version_counter():
    x = at.randn(1, 2)
    saved = x._version
    x.add_(1).add_(1)
    assert x._version > saved
    xz = x[:]                                  # a view shares the counter
    assert x._version == xz._version
    xz.add_(1)
    assert x._version == xz._version
    saved = x._version
    x.data = at.randn(1, 2)                    # .data = ... keeps it
    assert x._version == saved
    x.add_(1)
    assert x._version > saved and x._version == xz._version
    xz.add_(1)
    assert x._version == xz._version


def test_set_data_preserve_pyobj():
    a, b = at.randn(1, 2), at.randn(1, 2)
    ident = id(b)
    b.data = a
    assert id(b) == ident


def test_variable_traverse():
    def out_and_unreferenced_cycle():
        inp = at.randn(10, requires_grad=True)
        tmp = inp.view(10, 1)
        out = tmp.view(10)
        cycle = [tmp]
        cycle.append(cycle)
        return out
    out = out_and_unreferenced_cycle()
    gc.collect()
    out.backward(at.randn(*out.shape))


@pytest.mark.parametrize("shape, order", [((10,), 2), ((10, 10), 2), ((10,), 3),
                                          ((10,), 1), ((10,), 1.5)])
def test_norm_subgradient(shape, order):
    x = at.zeros(*shape, requires_grad=True)
    at.linalg.norm(x.reshape(-1), order).backward()
    assert abs(x.grad).sum().item() == 0


@pytest.mark.parametrize("shape, exponent", [((10,), np.zeros(10)),
                                             ((10, 10), np.zeros((10, 10))), ((10,), 0)])
def test_pow_zero_tensor_gradient(shape, exponent):
    x = at.zeros(*shape, requires_grad=True)
    exponent = at.tensor(exponent) if isinstance(exponent, np.ndarray) else exponent
    x.pow(exponent).sum().backward()
    assert abs(x.grad).sum().item() == 0


def test_pow_scalar_base():
    a = at.arange(1.0, 13.0).reshape(3, 4).requires_grad_()
    assert at.gradcheck(lambda a: at.power(2, a), (a,))


def test_var_mean_differentiable():
    x = np.random.default_rng(2).standard_normal((3, 4, 5, 6, 2, 3))
    input1 = at.tensor(x, requires_grad=True)
    input2 = at.tensor(x, requires_grad=True)
    var1, mean1 = at.var_mean(input1, dim=[2, 4], keepdim=False)
    var2 = input2.var(dim=[2, 4], keepdim=False)
    mean2 = input2.mean(dim=[2, 4], keepdim=False)
    grad = at.randn(3, 4, 6, 3)
    r1 = var1 * var1 * mean1 * mean1
    r2 = var2 * var2 * mean2 * mean2
    same(r1, r2, 1e-10)
    at.autograd.backward(r1, grad)
    at.autograd.backward(r2, grad)
    same(input1.grad, input2.grad, 1e-10)


def test_gradcheck_single_input():
    assert at.gradcheck(lambda x: x.mul(5), at.rand(10, requires_grad=True))
    assert at.gradgradcheck(lambda x: x.mul(5), at.rand(10, requires_grad=True))


def test_gradcheck_fail_when_no_differentiable_outputs_and_num_grad_not_zero():
    def fn(x):
        out = x.detach()
        assert not out.requires_grad
        return out
    with pytest.raises(RuntimeError, match="Numerical gradient for function expected to "
                       "be zero"):
        at.gradcheck(fn, at.ones(5, 5, requires_grad=True))


def test_diagonal_derivative_requires_grad():
    a = at.randn(5, 6, requires_grad=True)
    c = (at.diagonal(a) ** 2).sum()
    d, = at.grad(c, a, retain_graph=True, create_graph=True)
    assert d.requires_grad


def test_anomaly_case_raises_the_version_error():
    a = at.randn(5, requires_grad=True)
    d1 = a + 1
    d2 = d1 ** 2
    d1 += 1
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient "
                       "computation has been modified by an inplace operation"):
        at.grad(d2.sum(), a)


def test_inplace_on_a_view_chain_keeps_grad_fn():
    a = at.arange(10.0, requires_grad=True)
    b = a.narrow(0, 0, 2).clone().view(-1)
    b.relu_()
    c = b.clone()
    del b
    gc.collect()
    s = c.sum()
    s.backward()
    assert s.item() == 1.0


# ---- out= ------------------------------------------------------------------------------------

def test_mul_out():
    a = at.randn(2, 2, requires_grad=True)
    b = at.randn(2, 2, requires_grad=True)
    x = at.zeros_like(a)
    with pytest.raises(RuntimeError, match="out="):
        at.mul(a, b, out=x)
    with at.no_grad():
        at.mul(a, b, out=x)
    same(x, a.detach() * b.detach())


def test_mul_out_result_requires_grad():
    a, b = at.randn(2, 2), at.randn(2, 2)
    x = at.zeros(2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="out="):
        at.mul(a, b, out=x)


def test_out_writes_in_place_without_gradients():
    a, b = at.tensor([1.0, 2.0]), at.tensor([3.0, 4.0])
    out = at.zeros(2)
    view = out[1:]
    assert at.add(a, b, out=out) is out
    same(out, [4.0, 6.0])
    same(view, [6.0])                          # (through its views)
    assert out._version == 1
    at.exp(a, out=out)
    same(out, np.exp([1.0, 2.0]))
    total = at.zeros(())
    at.sum(at.ones(2, 3), out=total)
    assert total.item() == 6.0
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        at.exp(a, out=at.zeros(2, dtype=np.int64))
    with pytest.raises(TypeError, match="argument 'out' must be a Tensor"):
        at.add(a, b, out=np.zeros(2))


def test_out_of_another_shape_is_resized_with_torchs_warning():
    out = at.zeros(3)
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        at.add(at.ones(2), 1.0, out=out)
    assert out.shape == (2,)
    empty = at.zeros(0)
    at.add(at.ones(2), 1.0, out=empty)
    same(empty, [2.0, 2.0])


def test_numpy_out_on_tensors():
    a = at.ones(3)
    out = at.zeros(3)
    np.add(a, a, out=out)
    same(out, [2.0, 2.0, 2.0])
    np.sum(at.ones(2, 3), axis=0, out=out)
    same(out, [2.0, 2.0, 2.0])
    arr = np.zeros(3)
    np.exp(a, out=arr)
    same(arr, np.exp(np.ones(3)))
    x = at.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="out="):
        np.add(x, x, out=out)
    with pytest.raises(RuntimeError, match="Can't call numpy"):
        np.exp(x, out=arr)                     # (the gradient would be lost in arr)


def test_torch_module_level_spellings():
    x = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    same(at.mul(x, 2), x.detach() * 2)
    same(at.sub(x, 1), x.detach() - 1)
    same(at.div(x, 2), x.detach() / 2)
    same(at.neg(x), -x.detach())
    same(at.mm(x, x), x.detach() @ x.detach())
    same(at.clamp(x, 2.0, 3.0), np.clip(x.detach().numpy(), 2, 3))
    same(at.narrow(x, 0, 1, 1), x.detach()[1:2])
    same(at.t(x), x.detach().numpy().T)
    same(at.rsqrt(at.tensor([4.0])), [0.5])
    assert at.numel(x) == 4 and at.is_tensor(x) and at.is_floating_point(x)
    a, b = at.chunk(x, 2)
    same(b, x.detach()[1:])
    assert at.eq(x, x).all() and not at.lt(x, x).any()
    same(at.det(x), np.linalg.det(x.detach().numpy()), 1e-12)
    assert at.randn_like(x).shape == (2, 2) and at.rand_like(x).shape == (2, 2)
    assert at.empty(3).shape == (3,)
    same(at.full_like(x, 5.0), np.full((2, 2), 5.0))


# ---- hooks on several tensors ---------------------------------------------------------------

def test_multi_grad_all_hooks():
    t1, t2, t3, t4 = (at.rand(2, requires_grad=True) for _ in range(4))
    res, count = [None], [0]

    def hook(grads):
        res[0] = [g is not None for g in grads]
        count[0] += 1
    handle = at.autograd.graph.register_multi_grad_hook((t1, t2, t3, t4), hook)
    out = t2 * t3
    out.sum().backward(inputs=(t2, t3), retain_graph=True)
    assert count[0] == 1 and res[0] == [False, True, True, False]
    out.sum().backward(inputs=(t1, t4), retain_graph=True)
    assert count[0] == 1                        # none of them reached
    out.sum().backward(inputs=(t1, t3), retain_graph=True)
    assert count[0] == 2 and res[0] == [False, False, True, False]
    at.grad(out.sum(), t2, retain_graph=True)
    assert count[0] == 3 and res[0] == [False, True, False, False]
    handle.remove()
    out.sum().backward(inputs=(t2, t3))
    assert count[0] == 3


def test_multi_grad_any_hooks():
    t1, t2, t3, t4 = (at.rand(2, requires_grad=True) for _ in range(4))
    seen = []
    handle = at.autograd.graph.register_multi_grad_hook((t1, t2, t3, t4), seen.append,
                                                        mode="any")
    out = (t2 * t3).sum()
    out.backward(inputs=(t2, t3), retain_graph=True)
    assert len(seen) == 1 and isinstance(seen[0], at.Tensor)
    out.backward(inputs=(t1, t4), retain_graph=True)
    assert len(seen) == 1
    handle.remove()
    out.backward()
    assert len(seen) == 1
    with pytest.raises(ValueError, match="Expects mode to be one of"):
        at.autograd.graph.register_multi_grad_hook((t1,), seen.append, mode="some")


def test_hooks_of_leaves_not_asked_for_do_not_run():
    x = at.ones(2, requires_grad=True)
    y = at.ones(2, requires_grad=True)
    called = []
    x.register_hook(lambda g: called.append("x"))
    y.register_hook(lambda g: called.append("y"))
    (x * y).sum().backward(inputs=[y])
    at.grad((x * y).sum(), y)
    assert called == ["y", "y"] and x.grad is None


# ---- torch's Tensor API beside numpy's ------------------------------------------------------

def test_size_is_numpys_number_and_torchs_call():
    x = at.zeros(2, 3)
    assert x.size == 6 and x.size + 1 == 7            # numpy's: the element count
    assert x.size() == (2, 3) and x.size(1) == 3 and x.size(-1) == 3 and x.size(dim=0) == 2
    assert at.randn(*x.size()).shape == (2, 3)
    with pytest.raises(IndexError):
        x.size(2)


def test_dtype_conversions_and_new_tensors():
    x = at.tensor([1.5, 2.5], requires_grad=True)
    assert x.float().dtype == np.float32 and x.double().dtype == np.float64
    assert x.long().dtype == np.int64 and x.int().dtype == np.int32
    assert x.bool().dtype == np.bool_
    x.float().sum().backward()
    assert x.grad.dtype == np.float64
    assert x.type_as(at.zeros(1, dtype=np.float32)).dtype == np.float32
    assert x.new_zeros((2, 3)).shape == (2, 3) and x.new_zeros(2).dtype == np.float64
    same(x.new_ones(2), [1.0, 1.0])
    same(x.new_full((2,), 7.0), [7.0, 7.0])
    same(x.new_tensor([1.0, 2.0]), [1.0, 2.0])
    assert not x.new_tensor([1.0]).requires_grad
    assert x.new_empty(3).shape == (3,)


def test_torch_shaping_methods():
    x = at.arange(24.0).reshape(2, 3, 4).requires_grad_()
    assert x.flatten().shape == (24,) and x.flatten(1).shape == (2, 12)
    assert x.flatten(0, 1).shape == (6, 4) and x.flatten(order="F").shape == (24,)
    assert x.transpose(0, 2).shape == (4, 3, 2)                 # torch's: swap two dims
    assert x.transpose(2, 0, 1).shape == (4, 2, 3)              # numpy's: a permutation
    m = at.tensor([[1.0, 2.0], [3.0, 4.0]])
    same(m.transpose(0, 1), m.numpy().T)
    same(m.transpose(1, 0), m.numpy().T)
    assert x.mT.shape == (2, 4, 3)
    assert x.is_contiguous() and x.nelement() == 24 and x.ndimension() == 3
    assert x._base is not None                    # (a reshape of arange's: a view, as torch's)
    y = at.zeros(2, 3)
    assert y._base is None and y[0]._base is y
    assert x.cpu() is x
    with pytest.raises(RuntimeError, match="uses one GPU"):
        x.cuda("cuda:1")                          # (x.cuda(): tests/test_device_tensors.py)
    same(m.tile((1, 2)), np.tile(m.numpy(), (1, 2)))


def test_torch_comparison_and_product_methods():
    a = at.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert a.eq(a).all() and a.le(a).all() and a.ge(a).all()
    assert not a.ne(a).any() and not a.lt(a).any() and not a.gt(a).any()
    same(a.matmul(a), a.numpy() @ a.numpy())
    same(a.mm(a), a.numpy() @ a.numpy())
    same(a.mv(at.tensor([1.0, 1.0])), [3.0, 7.0])
    same(a.clamp_min(2.5), [[2.5, 2.5], [3.0, 4.0]])
    same(a.clamp_max(2.5), [[1.0, 2.0], [2.5, 2.5]])
    x = at.tensor([1.0, -1.0, 2.0], requires_grad=True)
    y = x * 1.0
    y.masked_fill_(y < 0, 0.0)
    y.sum().backward()
    same(x.grad, [1.0, 0.0, 1.0])


def test_next_functions():
    x = at.randn(5, 5, requires_grad=True)
    y = at.randn(5, 5, requires_grad=True)
    a = x + y
    assert a.grad_fn is not None
    nodes = a.grad_fn.next_functions
    assert len(nodes) == 2
    assert [n.name() for n, _ in nodes] == ["AccumulateGrad", "AccumulateGrad"]
    assert nodes[0][0].variable is x and nodes[1][0].variable is y
    assert nodes[0][1] == 0 and nodes[1][1] == 0
    b = a + 5
    nodes = b.grad_fn.next_functions
    assert len(nodes) == 2 and nodes[0][0] is a.grad_fn and nodes[1][0] is None
    assert b.grad_fn is b.grad_fn


@pytest.mark.parametrize("grad_mode, requires_grad, errors", [
    (True, False, (None, None, None)),
    (True, True, (None, "Output 0 of UnbindBackward is a view",
                        "Output 1 of UnbindBackward is a view")),
    (False, True, ("A view was created in no_grad mode",) * 3),
    (False, False, (None, None, None))])
def test_autograd_views_codegen(grad_mode, requires_grad, errors):
    def check(fn, error):
        if error is None:
            fn()
        else:
            with pytest.raises(RuntimeError, match=error):
                fn()
    inp = at.rand(2, requires_grad=requires_grad).clone()
    with at.set_grad_enabled(grad_mode):
        out = inp.view_as(inp)
    check(lambda: out.add_(1), errors[0])
    inp = at.rand(2, requires_grad=requires_grad).clone()
    with at.set_grad_enabled(grad_mode):
        outs = inp.unbind()
    check(lambda: outs[0].add_(1), errors[1])
    check(lambda: outs[1].add_(1), errors[2])
