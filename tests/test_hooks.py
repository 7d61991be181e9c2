"""Tensor hooks: torch's cases, checked against torch where it is installed and against
the values torch gives (recorded from torch 2.13) where it is not."""
import gc

import numpy as np
import pytest

import autotape as at

try:
    import torch
except ImportError:
    torch = None


def _cases(lib, grad):
    """Each case's result with ``lib`` (autotape or torch); ``grad`` is lib's
    autograd.grad. Returned as nested lists of floats, comparable across libraries."""
    def v(t):
        return None if t is None else np.asarray(t.detach().numpy()).tolist()

    def tensor(data):
        return lib.tensor(data, requires_grad=True, dtype=lib.float64)

    out = {}
    x = tensor([1.0, 2.0])
    x.register_hook(lambda g: g * 10)
    (x * 3).sum().backward()
    out["leaf hook before .grad"] = v(x.grad)

    x = tensor([1.0, 2.0])
    x.register_hook(lambda g: g * 10)
    out["leaf hook in grad()"] = v(grad((x * 3).sum(), x)[0])

    x = tensor([1.0, 2.0])
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    out["non-leaf hook passes back"] = v(x.grad)

    x = tensor([1.0, 2.0])
    z = (x * 2).sum()
    seen = []
    z.register_hook(lambda g: (seen.append(v(g)), g * 3)[1])
    z.backward()
    out["hook on the output"] = [v(x.grad), seen]

    x = tensor([1.0, 2.0])
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    out["retain_grad sees the hooked gradient"] = [v(y.grad), v(x.grad)]

    x = tensor([1.0, 2.0])
    y = x * 2
    y.register_hook(lambda g: g + 1)
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    out["hooks chain in order"] = v(x.grad)

    x = tensor([1.0, 2.0])
    x.register_hook(lambda g: g * 10).remove()
    (x * 3).sum().backward()
    out["removed"] = v(x.grad)

    x = tensor([1.0, 2.0])
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append(v(t.grad)))
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    grad((x * 3).sum(), x)
    out["post-accumulate after each backward, not grad()"] = seen

    x = tensor([1.0, 2.0])
    seen = []
    x.register_hook(lambda g: seen.append(v(g)))
    (x * 3 + x * x).sum().backward()
    out["once with the total"] = seen

    x = tensor([1.0, 2.0])
    y = x * 2
    seen = []
    y.register_hook(lambda g: seen.append(1))
    (x * 3).sum().backward()
    out["not reached: not called"] = seen

    x = tensor([1.0, 2.0])
    y = x * 2
    order = []
    y.register_hook(lambda g: order.append("y"))
    x.register_hook(lambda g: order.append("x"))
    (y * 3).sum().backward()
    out["order: output side first"] = order

    x = tensor([1.0, 2.0])
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y += 1
    y.sum().backward()
    out["hook before an in-place op"] = v(x.grad)

    x = tensor([1.0, 2.0])
    y = x * 2
    y.register_hook(lambda g: g * 10)
    x.register_hook(lambda g: g + 100)
    out["grad(): non-leaf input before its hooks, leaf after"] = [
        v(g) for g in grad(y.sum(), [x, y])]

    x = tensor([1.0, 2.0])
    y = x * x
    flags = []
    y.register_hook(lambda g: (flags.append(g.requires_grad), g * 2)[1])
    g, = grad(y.sum(), x, create_graph=True)
    out["create_graph"] = [v(g), g.requires_grad, flags]

    x = tensor([1.0, 2.0])
    y = x * 2
    y.register_hook(lambda g: g * 10)
    w = y.sum()
    del y
    gc.collect()
    w.backward()
    out["fires after the tensor object is gone"] = v(x.grad)
    return out


EXPECTED = {        # torch 2.13
    "leaf hook before .grad": [30.0, 30.0],
    "leaf hook in grad()": [30.0, 30.0],
    "non-leaf hook passes back": [20.0, 20.0],
    "hook on the output": [[6.0, 6.0], [1.0]],
    "retain_grad sees the hooked gradient": [[10.0, 10.0], [20.0, 20.0]],
    "hooks chain in order": [40.0, 40.0],
    "removed": [3.0, 3.0],
    "post-accumulate after each backward, not grad()": [[3.0, 3.0], [6.0, 6.0]],
    "once with the total": [[5.0, 7.0]],
    "not reached: not called": [],
    "order: output side first": ["y", "x"],
    "hook before an in-place op": [20.0, 20.0],
    "grad(): non-leaf input before its hooks, leaf after": [[120.0, 120.0], [1.0, 1.0]],
    "create_graph": [[4.0, 8.0], True, [False]],
    "fires after the tensor object is gone": [20.0, 20.0],
}


def test_hook_cases_give_torchs_values():
    assert _cases(at, at.autograd.grad) == EXPECTED


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_hook_cases_against_torch():
    assert _cases(torch, torch.autograd.grad) == _cases(at, at.autograd.grad)


def test_errors_are_torchs():
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that "
                                           "doesn't require gradient"):
        at.tensor([1.0]).register_hook(lambda g: g)
    x = at.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be "
                                           "registered on non-leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)
    x.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match="hook '<lambda>' has changed the size of value"):
        (x * 3).sum().backward()
    with pytest.raises(TypeError, match="callable"):
        x.register_hook(3)
    w = at.tensor([1.0, 2.0], requires_grad=True)
    w.register_hook(lambda g: np.ones(2))
    with pytest.raises(TypeError, match="expected Tensor, but hook returned "
                                        "'numpy.ndarray'"):
        (w * 3).sum().backward()


def test_a_hook_inside_a_compiled_function_is_refused():
    def f(u):
        u.register_hook(lambda g: g * 2)
        return (u * u).sum()
    with pytest.raises(RuntimeError, match="compiled replay runs no Python"):
        at.compile(f, np.ones(2))


def test_hooks_per_lane_under_is_grads_batched():
    # torch raises here (its vmap cannot batch the hook); autotape calls it per lane
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    seen = []
    y.register_hook(lambda g: (seen.append(g.tolist()), g * 3)[1])
    jac, = at.grad(y, x, at.eye(2), is_grads_batched=True)
    assert seen == [[1.0, 0.0], [0.0, 1.0]]
    np.testing.assert_array_equal(jac.numpy(), 6 * np.eye(2))


def test_hooks_on_large_arrays_and_many_rows():
    # stops in a sweep that also splits rows among threads and recycles adjoint space
    n = (1 << 19) + 3
    saved = at.get_num_threads()
    at.set_num_threads(2)
    try:
        x = at.tensor(np.linspace(0, 1, n), requires_grad=True)
        h = at.sin(x)
        h.register_hook(lambda g: g * 2)
        for _ in range(3):
            h = h * 1.5 + x
        g, = at.grad(h.sum(), x)
    finally:
        at.set_num_threads(saved)
    xs = np.linspace(0, 1, n)
    want = 1.5 ** 3 * 2 * np.cos(xs) + (1 + 1.5 + 1.5 ** 2)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)


def test_hook_gradient_is_a_plain_tensor_that_can_be_kept():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    kept = []
    (x * 2).register_hook(kept.append)
    y = x * 2
    y.register_hook(kept.append)
    (y ** 2).sum().backward()
    assert kept[0].tolist() == [4.0, 8.0] and not kept[0].requires_grad


def test_a_hook_that_sweeps_leaves_the_outer_sweep_intact():
    # at.grad inside a hook runs a sweep while the outer one is stopped at the hook
    x = at.tensor(np.linspace(0.0, 1.0, 50), requires_grad=True)
    w = at.tensor(np.linspace(1.0, 2.0, 50), requires_grad=True)
    y = at.sin(x) * 3
    inner = []

    def hook(g):
        with at.enable_grad():                 # (hooks run under no_grad, as torch's)
            inner.append(at.grad((w * w * g).sum(), w)[0])
        return g * 2
    y.register_hook(hook)
    gx, = at.grad((y * y).sum(), x)
    xs = np.linspace(0.0, 1.0, 50)
    np.testing.assert_allclose(gx.numpy(), 2 * 2 * 3 * np.sin(xs) * 3 * np.cos(xs),
                               rtol=1e-13)
    np.testing.assert_allclose(inner[0].numpy(), 2 * np.linspace(1.0, 2.0, 50) * 6 *
                               np.sin(xs), rtol=1e-13)
