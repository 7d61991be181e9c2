"""at.checkpoint as torch.utils.checkpoint.checkpoint(use_reentrant=False): gradients
reach what the function reads from its closure, hooks fire once, the recomputation
sees the first run's random numbers, keyword / non-Tensor arguments and outputs,
nesting, second derivatives; and the errors where a recomputation cannot be right."""
import numpy as np
import pytest

import autotape as at


def test_closure_tensor_gets_its_gradient_and_its_hook_fires_once():
    w = at.tensor([2.0, 3.0], requires_grad=True)
    fired = []
    w.register_hook(lambda g: fired.append(g.numpy().copy()))
    out = at.checkpoint(lambda v: w * v, w * 1.0)
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [4.0, 6.0])      # torch: [4, 6]
    assert len(fired) == 1
    np.testing.assert_array_equal(fired[0], [4.0, 6.0])


def test_closure_through_grad_and_nonleaf_closure():
    x = at.tensor([0.5, 1.0], requires_grad=True)
    w = at.tensor(2.0, requires_grad=True)
    h = x * w                                   # a non-leaf read from the closure
    y = at.checkpoint(lambda u: at.sin(u) * h, x)
    gx, gw = at.grad(y.sum(), (x, w))
    xs = np.array([0.5, 1.0])
    np.testing.assert_allclose(gx.numpy(), np.cos(xs) * xs * 2 + np.sin(xs) * 2)
    np.testing.assert_allclose(gw.numpy(), (np.sin(xs) * xs).sum())


def test_recomputation_sees_the_same_random_numbers():
    x = at.tensor(np.linspace(1.0, 2.0, 64), requires_grad=True)
    masks = []

    def dropout(u):
        m = (at.rand(64) > 0.5) * 2.0
        n = (np.random.random(64) > 0.5) * 1.0
        masks.append((m.numpy().copy(), n.copy()))
        return u * m * n

    y = at.checkpoint(dropout, x)
    y.sum().backward()
    assert len(masks) == 2
    np.testing.assert_array_equal(masks[0][0], masks[1][0])
    np.testing.assert_array_equal(masks[0][1], masks[1][1])
    np.testing.assert_array_equal(x.grad.numpy(), masks[0][0] * masks[0][1])
    # the generators move on as if the function ran once
    at.manual_seed(5)
    at.checkpoint(dropout, x).sum().backward()
    after_checkpoint = at.rand(1).item()
    at.manual_seed(5)
    dropout(x)
    assert at.rand(1).item() == after_checkpoint


def test_random_state_not_preserved_when_asked():
    x = at.tensor(np.ones(256), requires_grad=True)
    draws = []

    def noisy(u):
        draws.append(at.rand(256).numpy().copy())
        return u * at.tensor(draws[-1])

    at.checkpoint(noisy, x, preserve_rng_state=False).sum().backward()
    assert not np.array_equal(draws[0], draws[1])


def test_keyword_and_non_tensor_arguments_and_outputs():
    x = at.tensor([1.0, 2.0], requires_grad=True)

    def f(a, pair, scale=1.0, name=None):
        return a * scale * pair[0], {"s": (a ** 2).sum(), "name": name, "n": 3}

    out, extra = at.checkpoint(f, x, (at.tensor(2.0), "tag"), scale=3.0, name="hi")
    assert extra["name"] == "hi" and extra["n"] == 3
    (out.sum() + extra["s"]).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0 + 2.0, 6.0 + 4.0])


def test_nested_checkpoints_and_float32():
    w = at.tensor([1.5, -0.5], dtype=np.float32, requires_grad=True)
    x = at.tensor([0.3, 0.7], dtype=np.float32, requires_grad=True)
    z = at.checkpoint(lambda u: at.checkpoint(lambda v: at.sin(v) * w, u) * u, x)
    assert z.dtype == np.float32
    z.sum().backward()
    xs = np.array([0.3, 0.7], np.float32).astype(np.float64)
    np.testing.assert_allclose(x.grad.numpy(),
                               np.cos(xs) * [1.5, -0.5] * xs + np.sin(xs) * [1.5, -0.5],
                               rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), np.sin(xs) * xs, rtol=1e-6)


def test_second_derivatives_through_a_checkpoint():
    x = at.tensor([0.5, 1.0], requires_grad=True)
    c = at.tensor(2.0, requires_grad=True)
    y = at.checkpoint(lambda u: c * u ** 3, x)
    g, = at.grad(y.sum(), x, create_graph=True)
    h, hc = at.grad(g.sum(), (x, c))
    np.testing.assert_allclose(g.numpy(), [1.5, 6.0])
    np.testing.assert_allclose(h.numpy(), [6.0, 12.0])
    np.testing.assert_allclose(hc.numpy(), 3 * (0.25 + 1.0))


def test_closure_modified_in_place_after_the_checkpoint_raises():
    w = at.tensor([1.0, 2.0])
    x = at.tensor([1.0, 1.0], requires_grad=True)
    v = at.tensor([1.0, 1.0], requires_grad=True)
    y = at.checkpoint(lambda u: u * w * v, x)
    with at.no_grad():
        v += 1.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_a_function_reading_other_tensors_when_run_again_raises():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    others = [at.tensor(1.0, requires_grad=True), at.tensor(2.0, requires_grad=True)]
    calls = []

    def f(u):
        calls.append(1)
        return u * others[len(calls) - 1]

    y = at.checkpoint(f, x)
    with pytest.raises(RuntimeError, match="did not read the first time"):
        y.sum().backward()


def test_without_grad_mode_it_is_a_plain_call():
    x = at.tensor([1.0], requires_grad=True)
    with at.no_grad():
        y = at.checkpoint(lambda u: u * 2, x)
    assert not y.requires_grad


def test_compiled_closure_that_changes_raises():
    def f(k):
        return at.checkpoint(lambda h: at.sin(h) * k, k * 1.0).sum()

    k0 = np.array([0.4, 0.9])
    c = at.compile(f, k0)
    c(k0)
    with pytest.raises(RuntimeError, match="pass that tensor to checkpoint as an argument"):
        c(k0 * 1.7)


def test_compiled_arguments_replay_at_new_points():
    def f(k):
        return at.checkpoint(lambda h, kk: at.sin(h) * kk, k * 1.0, k).sum()

    def plain(k):
        return (at.sin(k * 1.0) * k).sum()

    k0 = np.array([0.4, 0.9])
    c, p = at.compile(f, k0), at.compile(plain, k0)
    for k in (k0, k0 * 1.7, k0 - 2.0):
        np.testing.assert_allclose(c(k).numpy(), p(k).numpy(), rtol=1e-15)
        np.testing.assert_allclose(c.grad(k).numpy(), p.grad(k).numpy(), rtol=1e-15)


def test_against_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    xs, ws = np.array([0.3, -1.2, 0.8]), np.array([1.5, 0.5, -2.0])
    x, w = at.tensor(xs, requires_grad=True), at.tensor(ws, requires_grad=True)
    tx, tw = torch.tensor(xs, requires_grad=True), torch.tensor(ws, requires_grad=True)
    y = at.checkpoint(lambda u, scale: at.tanh(u * w) * scale, x * w, scale=2.0)
    ty = torch_checkpoint(lambda u, scale: torch.tanh(u * tw) * scale, tx * tw, scale=2.0,
                          use_reentrant=False)
    (y ** 2).sum().backward()
    (ty ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-13)
