"""Device tensors (device_tensors.py, device_kernels.py): values on the GPU, ops and the
reverse sweep there, torch's rules. The oracle is autotape on the CPU (itself checked
against torch and finite differences). Without a GPU these run in numba's CUDA
simulator (CI sets NUMBA_ENABLE_CUDASIM=1: values are numpy arrays only device tensors
hold, the generated kernels run as Python); on a GPU, ``pytest -m cuda`` runs them on
CuPy arrays and compiled kernels."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotape as at
from autotape import device_kernels, gpu
from autotape.executor import RELEASED_MSG
from autotape.ops.elementwise import binary_ops, unary_ops

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _cuda_or_skip():
    try:
        gpu.cuda_module()
        device_kernels.array_module()
    except RuntimeError as e:
        pytest.skip(str(e))


def dev(a, requires_grad=False, dtype=None):
    return at.tensor(a, dtype=dtype, device="cuda", requires_grad=requires_grad)


def host(t):
    return t.detach().cpu().numpy()


def same_as_cpu(f, *points, rtol=1e-12, atol=1e-14):
    """f's value and gradients at points, on the device and on the CPU, agree."""
    xs = [at.tensor(p, requires_grad=True) for p in points]
    ds = [dev(p, requires_grad=True) for p in points]
    want, got = f(*xs), f(*ds)
    np.testing.assert_allclose(host(got), want.detach().numpy(), rtol=rtol, atol=atol,
                               equal_nan=True)
    gw = at.grad(want.sum(), xs, allow_unused=True)
    gg = at.grad(got.sum(), ds, allow_unused=True)
    for w, g in zip(gw, gg):
        assert (w is None) == (g is None)
        if w is not None:
            assert g.device == "cuda:0" and g.shape == w.shape
            np.testing.assert_allclose(host(g), w.numpy(), rtol=rtol, atol=atol,
                                       equal_nan=True)


POINT = np.array([0.3, 0.7, 0.45, 0.9])
DOMAIN = {"arccosh": POINT + 1.5, "log": POINT, "sqrt": POINT}


@pytest.mark.parametrize("name", sorted(op.name for op in unary_ops.values()))
def test_every_unary_op_and_its_gradient_equal_the_cpu(name):
    same_as_cpu(lambda x: getattr(at, name)(x), DOMAIN.get(name, POINT))


@pytest.mark.parametrize("name", sorted(op.name for op in binary_ops.values()
                                        if "equal" not in op.name and op.name not in
                                        ("less", "greater")))
def test_every_binary_op_and_its_gradients_equal_the_cpu(name):
    y = np.array([0.2, 0.7, 0.9, 0.1])        # (a tie at 0.7: maximum splits it)
    same_as_cpu(lambda a, b: getattr(at, name)(a, b), POINT, y)
    same_as_cpu(lambda a: getattr(at, name)(a, 0.5), POINT)         # a number
    same_as_cpu(lambda a: getattr(at, name)(2.5, a), POINT)


def test_a_chain_of_elementwise_rows_is_one_launch(monkeypatch):
    launches = []
    real = device_kernels.launch
    monkeypatch.setattr(device_kernels, "launch",
                        lambda k, n, args: (launches.append(n), real(k, n, args)))
    x = dev(np.linspace(-1, 1, 9), requires_grad=True)
    y = at.sin(x) * x + x ** 2 / (1.0 + at.exp(-x))
    launches.clear()
    y.sum().backward()
    assert launches == [9]
    xc = at.tensor(np.linspace(-1, 1, 9), requires_grad=True)
    (at.sin(xc) * xc + xc ** 2 / (1.0 + at.exp(-xc))).sum().backward()
    np.testing.assert_allclose(host(x.grad), xc.grad.numpy(), rtol=1e-13)


def test_broadcasting_operands_get_their_own_shapes_back():
    rng = np.random.default_rng(0)
    a, b, p = rng.random((3, 1)), rng.random((1, 4)), rng.random(1)
    same_as_cpu(lambda a, b, p: at.exp(a * b) * p + a, a, b, p)
    same_as_cpu(lambda a, b: at.where(a > 0.5, a * b, b - a), a, b)


def test_reductions_products_and_shapes_equal_the_cpu():
    rng = np.random.default_rng(1)
    m, v, t = rng.random((3, 4)), rng.random(4), rng.random((2, 3, 4))
    same_as_cpu(lambda m: m.sum(axis=0) * m.mean(axis=1, keepdims=True), m)
    same_as_cpu(lambda m: (m * m).sum(axis=(0, 1)) + m.mean(), m)
    same_as_cpu(lambda m, v: at.tanh(m @ v), m, v)
    same_as_cpu(lambda m, v: v @ m.T, m, v)
    same_as_cpu(lambda m: m @ m.T @ m, m)
    same_as_cpu(lambda t, m: t @ m.T, t, m)
    same_as_cpu(lambda m: m.reshape(2, 6).transpose() * 2.0, m)
    same_as_cpu(lambda m: m[1:, ::2] ** 2, m)
    same_as_cpu(lambda m: m[np.array([0, 2, 0])] * 3.0, m)      # duplicates sum
    same_as_cpu(lambda m: m[m > 0.5] * 1.5, m)
    same_as_cpu(lambda m: at.sigmoid(m).reshape(-1)[3], m)


def test_linear_algebra_equals_the_cpu():
    rng = np.random.default_rng(2)
    a = rng.random((3, 3)) + 3 * np.eye(3)
    spd = a @ a.T
    batch = rng.random((2, 3, 3)) + 3 * np.eye(3)
    b, bm = rng.random(3), rng.random((3, 2))
    same_as_cpu(lambda a: at.linalg.inv(a) * 2.0, a)
    same_as_cpu(lambda a, b: at.linalg.solve(a, b), a, b)
    same_as_cpu(lambda a, b: at.linalg.solve(a, b), a, bm)
    same_as_cpu(lambda a, b: at.linalg.solve(a, b), batch, b)       # b shared by the batch
    same_as_cpu(lambda a: at.linalg.det(a), batch)
    same_as_cpu(lambda a: at.linalg.slogdet(a)[1], a)
    same_as_cpu(lambda a: at.linalg.cholesky(a @ a.T) * 1.5, a)
    same_as_cpu(lambda s: at.linalg.cholesky(s), spd)
    with pytest.raises(RuntimeError, match="square matrices"):
        at.linalg.inv(dev(np.ones((2, 3))))
    with pytest.raises(TypeError, match="linalg.svd is not available for device"):
        at.linalg.svd(dev(a))


def test_extremes_and_joins_equal_the_cpu():
    rng = np.random.default_rng(3)
    m = rng.random((3, 4))
    m[1, 2] = m[1, 0] = m.max()                # ties: the gradient is split
    same_as_cpu(lambda m: m.max() * 2.0 + m.min(axis=0).sum(), m)
    same_as_cpu(lambda m: at.amax(m, axis=1, keepdims=True) * m, m)
    same_as_cpu(lambda m: at.exp(m - m.max(axis=1, keepdims=True)).sum(axis=1), m)
    same_as_cpu(lambda a, b: at.concatenate([a, at.sin(b), a * 2.0], axis=1), m, m[:, :2])
    same_as_cpu(lambda a, b: at.stack([a, b * b], axis=1).sum(axis=0), m[0], m[1])
    same_as_cpu(lambda a: at.stack([a[0], a[2]]), m)


def test_float32_stays_float32():
    x = dev(np.array([0.5, 1.5], np.float32), requires_grad=True)
    y = (at.exp(x) * 2.0).sum()
    assert y.dtype == np.float32
    y.backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(host(x.grad), 2 * np.exp([0.5, 1.5]), rtol=1e-6)


def test_numpy_functions_dispatch_to_the_device():
    x = dev(POINT, requires_grad=True)
    y = np.sum(np.sin(x) * np.exp(x))
    assert y.device == "cuda:0"
    y.backward()
    np.testing.assert_allclose(host(x.grad), np.exp(POINT) * (np.sin(POINT) + np.cos(POINT)),
                               rtol=1e-13)
    with pytest.raises(TypeError, match="numpy's cumsum is not available for device"):
        np.cumsum(x)
    with pytest.raises(TypeError, match="not available for device tensors"):
        at.cumsum(x)


# ---- torch's rules ---------------------------------------------------------------------------

def test_grad_accumulates_and_zero_resets():
    x = dev([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * x * x).sum().backward()
    np.testing.assert_allclose(host(x.grad), [2 + 3, 4 + 12])
    x.grad.zero_()
    np.testing.assert_allclose(host(x.grad), [0.0, 0.0])
    x.grad = None
    assert x.grad is None


def test_a_released_graph_is_torchs_error_and_retain_graph_keeps_it():
    x = dev([1.0, 2.0], requires_grad=True)
    y = (at.sin(x) * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    assert "second time" in RELEASED_MSG


def test_grad_with_intermediates_unused_inputs_and_materialize():
    x, w = dev([1.0, 2.0], requires_grad=True), dev([3.0], requires_grad=True)
    h = at.exp(x)
    h.retain_grad()
    y = (h * 2.0).sum()
    gh, gx = at.grad(y, (h, x), retain_graph=True)
    np.testing.assert_allclose(host(gh), [2.0, 2.0])
    np.testing.assert_allclose(host(gx), 2 * np.exp([1.0, 2.0]))
    np.testing.assert_allclose(host(h.grad), [2.0, 2.0])
    with pytest.raises(RuntimeError, match="index 1 appears to not have been used"):
        at.grad(y, (x, w), retain_graph=True)
    gx, gw = at.grad(y, (x, w), retain_graph=True, materialize_grads=True)
    np.testing.assert_allclose(host(gw), [0.0])
    assert at.grad(y, [x, w], allow_unused=True)[1] is None


def test_bad_seeds_and_outputs_raise_torchs_errors():
    x = dev([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        y.backward()
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        at.grad(y, x, dev([1.0]))
    with pytest.raises(RuntimeError, match="expected device cuda:0 but got cpu"):
        at.grad(y, x, at.ones(2))
    with pytest.raises(RuntimeError, match="does not require grad and does not have"):
        at.grad(dev([1.0]) * 2.0, x)
    with pytest.raises(RuntimeError, match="floating point"):
        dev([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="create_graph=True is not available"):
        at.grad(y.sum(), x, create_graph=True)


def test_devices_do_not_mix_and_the_host_copy_is_explicit():
    x = dev([1.0, 2.0], requires_grad=True)
    for f in (lambda: x + at.tensor([1.0, 2.0]), lambda: at.tensor([1.0, 2.0]) * x,
              lambda: x * np.array([1.0, 2.0]), lambda: at.maximum(x, at.ones(2)),
              lambda: x @ at.ones(2)):
        with pytest.raises(RuntimeError, match="same device, but found at least two"):
            f()
    assert (x * at.tensor(2.0)).device == "cuda:0"      # a 0-d CPU tensor: a number
    with pytest.raises(TypeError, match="Use Tensor.cpu"):
        x.numpy()
    with pytest.raises(TypeError, match="Use Tensor.cpu"):
        np.asarray(x)
    assert x.cpu().requires_grad and x.detach().cpu().tolist() == [1.0, 2.0]
    assert x.to("cuda") is x and x.cuda() is x
    with pytest.raises(RuntimeError, match="one GPU"):
        at.tensor([1.0], device="cuda:1")


def test_changing_a_saved_value_in_place_is_an_error_not_a_wrong_gradient():
    x = dev([1.0, 2.0], requires_grad=True)
    c = dev([3.0, 4.0])
    y = (x * c).sum()
    c.reshape(2, 1).fill_(0.0)                  # a view: one version with c
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.zero_()
    x2 = dev([1.0], requires_grad=True)
    g = at.grad((x2 * 3.0).sum(), x2)[0]
    g.zero_()                                    # a gradient is the user's own array
    (x2 * 3.0).sum().backward()
    np.testing.assert_allclose(host(x2.grad), [3.0])


def test_gradients_flow_back_to_cpu_tensors_moved_to_the_device():
    h = at.tensor([1.0, 2.0], requires_grad=True)
    mid = at.exp(h)                               # recorded on the CPU tape
    d = mid.cuda()
    assert d.device == "cuda:0" and not d.is_leaf
    (d * d).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * np.exp(2 * np.array([1.0, 2.0])))
    gh, = at.grad((h.to("cuda") ** 3).sum(), h)
    np.testing.assert_allclose(gh.numpy(), 3 * np.array([1.0, 4.0]))


def test_a_leaf_as_its_own_output_and_outputs_of_every_kind():
    x = dev([2.0], requires_grad=True)
    assert at.grad(x, x)[0].tolist() == [1.0]
    assert at.grad(x.reshape(()), x)[0].tolist() == [1.0]
    m = dev(np.ones((2, 2)), requires_grad=True)
    g, = at.grad((m @ m).sum(), m)
    np.testing.assert_allclose(host(g), np.full((2, 2), 4.0))


def test_a_cpu_loss_fills_the_device_leaves_grad_through_cpu():
    w = dev([1.0, 2.0, 3.0], requires_grad=True)
    c = at.tensor([0.5, -1.0, 2.0], requires_grad=True)
    hidden = at.exp(w) * 2.0                       # on the device
    loss = (hidden.cpu() * c).sum() + (w.cpu() ** 2).sum()    # on the CPU
    assert loss.requires_grad and hidden.cpu().device == "cpu"
    gc, = at.grad(loss, c, retain_graph=True)      # a grad(): no device .grad touched
    assert w.grad is None
    np.testing.assert_allclose(gc.numpy(), 2 * np.exp([1.0, 2.0, 3.0]))
    loss.backward()
    np.testing.assert_allclose(host(w.grad), 2 * np.exp([1.0, 2.0, 3.0]) * [0.5, -1.0, 2.0]
                               + 2 * np.array([1.0, 2.0, 3.0]), rtol=1e-13)
    np.testing.assert_allclose(c.grad.numpy(), 2 * np.exp([1.0, 2.0, 3.0]))
    f32 = dev(np.array([1.0], np.float32), requires_grad=True)
    assert f32.cpu().dtype == np.float32
    with pytest.raises(RuntimeError, match="device tensors among the inputs"):
        (w.cpu() * 1.0).sum().backward(inputs=[w])
    with pytest.raises(RuntimeError, match="create_graph=True is not available"), \
            pytest.warns(UserWarning, match="create_graph=True will create a reference"):
        (w.cpu() ** 2).sum().backward(create_graph=True)
    with pytest.raises(RuntimeError, match="comes from backward"):
        at.grad((w.cpu() ** 2).sum(), w)


def test_grads_batched_is_a_jacobian():
    x = dev([0.5, 1.0, 2.0], requires_grad=True)
    jac, = at.grad(at.sin(x) * 2.0, x, dev(np.eye(3)), is_grads_batched=True)
    np.testing.assert_allclose(host(jac), np.diag(2 * np.cos([0.5, 1.0, 2.0])), rtol=1e-13)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(["sin", "exp", "tanh", "sigmoid", "square", "add", "mul",
                                 "sub", "maximum", "where"]), min_size=1, max_size=6),
       st.sampled_from([(3,), (2, 3), (1,)]), st.integers(0, 2 ** 16))
def test_random_programs_equal_the_cpu(ops, shape, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape[-1:])

    def f(a, b):
        v = a
        for name in ops:
            if name in ("add", "mul", "sub", "maximum"):
                v = {"add": v + b, "mul": v * b, "sub": b - v,
                     "maximum": at.maximum(v, b)}[name]
            elif name == "where":
                v = at.where(v > 0, v, b * 0.5)
            else:
                v = getattr(at, name)(v)
        return v
    same_as_cpu(f, a, b)
