"""is_grads_batched: K cotangents in one compiled sweep (lanes) equal K separate sweeps,
for every op family; torch's shapes, checks and messages (T57, T58)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotape as at
from test_ops import BINARY, UNARY

rng = np.random.default_rng(7)


def assert_lanes_equal_separate_sweeps(f, arrays, lanes=3, seed=0):
    """grad with a batch of K cotangents == K single grads, to 1e-14."""
    xs = [at.tensor(a, requires_grad=True) for a in arrays]
    out = f(*xs)
    cots = np.random.default_rng(seed).uniform(-1.0, 1.0, (lanes,) + out.shape)
    batched = at.grad(out, xs, at.tensor(cots), is_grads_batched=True, retain_graph=True,
                      allow_unused=True, materialize_grads=True)
    for x, b in zip(xs, batched):
        assert b.shape == (lanes,) + x.shape
    for k in range(lanes):
        single = at.grad(out, xs, at.tensor(cots[k]), retain_graph=True, allow_unused=True,
                         materialize_grads=True)
        for b, s in zip(batched, single):
            np.testing.assert_allclose(b.numpy()[k], s.numpy(), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_in_lanes(name):
    f, domain = UNARY[name]
    assert_lanes_equal_separate_sweeps(f, [domain((3, 4))])
    assert_lanes_equal_separate_sweeps(f, [domain(())])            # the 0-d fast path


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_in_lanes(name):
    f, dx, dy = BINARY[name]
    assert_lanes_equal_separate_sweeps(f, [dx((2, 3)), dy((3,))])   # broadcasting
    assert_lanes_equal_separate_sweeps(f, [dx(()), dy(())])


FAMILIES = {
    "where": (lambda x, y: at.where(x > 0, x * y, y), [(3, 4), (3, 4)]),
    "reductions": (lambda x: at.stack([x.sum(axis=0), x.max(axis=0), x.prod(axis=0),
                                        x.mean(axis=0), at.cumsum(x, axis=0)[-1],
                                        at.cumprod(x, axis=0)[-1]]),
                   [(3, 4)]),
    "whole max": (lambda x: at.max(x) * x, [(2, 3)]),
    "softmax": (lambda x: at.log_softmax(x, axis=-1) * at.softmax(x, axis=0), [(3, 4)]),
    "layout": (lambda x: x.T.reshape(2, 6)[:, ::2] * 2.0, [(3, 4)]),
    "setitem": (lambda x, y: _setitem(x, y), [(3, 4), (4,)]),
    "concat": (lambda x, y: at.concatenate([x, y * y, x[:1]]), [(2, 3), (1, 3)]),
    "gather": (lambda x: x[np.array([0, 2, 2, 1])] * x[x.detach().numpy() > 0.2].sum(),
               [(3, 4)]),
    "put_add": (lambda x, y: _put(x, y), [(5,), (3,)]),
    "matmul small": (lambda a, b: at.tanh(a @ b), [(3, 4), (4, 2)]),
    "matmul blas": (lambda a, b: (a @ b) @ a.T, [(20, 30), (30, 30)]),
    "batched matmul": (lambda a, b: a @ b, [(2, 3, 4), (4, 5)]),
    "matvec": (lambda a, x: at.sin(a @ x) * x[:3], [(3, 5), (5,)]),
    "scalars": (lambda x: _scalar_chain(x), [(3,)]),
    "norm": (lambda x: at.norm(x) * x + at.norm(x.reshape(2, 2), ord=1), [(4,)]),
}


def _setitem(x, y):
    z = x * 1.0
    z[1] = y * 3.0
    return z


def _put(x, y):
    z = x * 1.0
    z[np.array([0, 0, 3])] += y
    return z


def _scalar_chain(x):
    s = x[0]
    for k in range(5):
        s = at.sin(s) * x[1] + s / (1.0 + x[2] ** 2)
    return s


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_op_family_in_lanes(name):
    f, shapes = FAMILIES[name]
    arrays = [rng.uniform(0.3, 1.5, s) * rng.choice([-1.0, 1.0], s) for s in shapes]
    assert_lanes_equal_separate_sweeps(f, arrays, lanes=4)


def test_lanes_cross_tapes(monkeypatch):
    """A graph spanning several tapes (IMPORT rows) sweeps its lanes tape by tape."""
    from autotape import tape as tape_module
    monkeypatch.setattr(tape_module, "MAX_ROWS", 8)

    def f(x):
        y = x
        for _ in range(12):
            y = at.sin(y) * 1.1 + x * 0.1
        return y
    assert_lanes_equal_separate_sweeps(f, [rng.uniform(-1, 1, (4,))], lanes=5)


SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.integers(1, 6), st.integers(0, 2 ** 31))
def test_random_programs_in_lanes(lanes, seed):
    from programs import OPS
    r = np.random.default_rng(seed)

    def f(a, b):
        pool = [a, b]
        for _ in range(6):
            name, arity, op = OPS[r.integers(len(OPS))]
            pool.append(op(at, *[pool[r.integers(len(pool))] for _ in range(arity)]))
        return pool[-1] + 0.0 * a * b
    assert_lanes_equal_separate_sweeps(f, [r.uniform(-1, 1, (2, 3)), r.uniform(-1, 1, 3)],
                                       lanes=lanes, seed=seed)


# ---- torch's semantics ------------------------------------------------------------------

def test_T57_jacobian_hessian_and_per_sample_grads():
    x = at.tensor([1., 2., 3.], requires_grad=True)
    J, = at.grad(x ** 2, x, at.eye(3), is_grads_batched=True)
    y = at.tensor([1., 2.], requires_grad=True)
    g, = at.grad(y[0] ** 2 * y[1] + y[1] ** 3, y, create_graph=True)
    H, = at.grad(g, y, at.eye(2), is_grads_batched=True)
    w = at.tensor([1., 2.], requires_grad=True)
    X = at.tensor([[1., 0.], [0., 1.], [1., 1.]])
    L = (X @ w) ** 2
    P, = at.grad(L, w, at.eye(3), is_grads_batched=True)
    assert J.tolist() == [[2.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 6.0]]
    assert H.tolist() == [[4.0, 2.0], [2.0, 12.0]]
    assert P.tolist() == [[2.0, 0.0], [0.0, 4.0], [6.0, 6.0]]


def test_T58_scalar_output_shape_mismatch_and_missing_grad_outputs():
    x = at.tensor([1., 2., 3.], requires_grad=True)
    a, = at.grad((x ** 2).sum(), x, at.tensor([1., 2.]), is_grads_batched=True,
                 retain_graph=True)
    assert a.tolist() == [[2.0, 4.0, 6.0], [4.0, 8.0, 12.0]]
    with pytest.raises(RuntimeError) as e:
        at.grad(x ** 2, x, at.ones(3), is_grads_batched=True, retain_graph=True)
    assert str(e.value) == (
        "If `is_grads_batched=True`, we interpret the first dimension of each grad_output "
        "as the batch dimension. The sizes of the remaining dimensions are expected to "
        "match the shape of corresponding output, but a mismatch was detected: "
        "grad_output[0] has a shape of () and output[0] has a shape of (3,). If you only "
        "want some tensors in `grad_output` to be considered batched, consider using vmap.")
    with pytest.raises(ValueError, match="Got in_dim=0 for some input, but that input is "
                                         "a Tensor of dimensionality 0"):
        at.grad((x ** 2).sum(), x, is_grads_batched=True)


def test_batched_releases_the_graph_unless_retained():
    x = at.tensor([1., 2.], requires_grad=True)
    y = x * x
    at.grad(y, x, at.eye(2), is_grads_batched=True)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        at.grad(y, x, at.eye(2), is_grads_batched=True)


def test_batch_sizes_must_agree():
    x = at.tensor([1., 2.], requires_grad=True)
    with pytest.raises(ValueError, match="same size in the mapped dimension"):
        at.grad([x * 2, x * 3], x, [at.ones((2, 2)), at.ones((3, 2))], is_grads_batched=True)


def test_batched_several_outputs_and_inputs_and_unused():
    x = at.tensor([1., 2.], requires_grad=True)
    u = at.tensor([5.], requires_grad=True)
    y1, y2 = x * 3.0, (x ** 2).sum()
    v1, v2 = at.tensor([[1., 0.], [0., 1.], [1., 1.]]), at.tensor([1., 0., 2.])
    gx, gu = at.grad([y1, y2], [x, u], [v1, v2], is_grads_batched=True,
                     materialize_grads=True)
    expected = v1.numpy() * 3.0 + v2.numpy()[:, None] * np.array([2., 4.])
    np.testing.assert_array_equal(gx.numpy(), expected)
    assert gu.shape == (3, 1) and not gu.numpy().any()


def test_batched_leaf_output_and_float32():
    x = at.tensor([1., 2.], dtype="float32", requires_grad=True)
    J, = at.grad(x, x, at.eye(2), is_grads_batched=True)
    assert J.dtype == np.float32 and J.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    J, = at.grad(x * x, x, at.eye(2), is_grads_batched=True)
    assert J.dtype == np.float32 and J.tolist() == [[2.0, 0.0], [0.0, 4.0]]


def test_batched_with_create_graph_is_differentiable():
    x = at.tensor([1., 2.], requires_grad=True)
    J, = at.grad(x ** 3, x, at.eye(2), is_grads_batched=True, create_graph=True)
    np.testing.assert_array_equal(J.numpy(), np.diag([3., 12.]))
    d, = at.grad(J.sum(), x)
    np.testing.assert_array_equal(d.numpy(), [6., 12.])


def test_single_lane_batch_matches_plain_grad():
    x = at.tensor(rng.uniform(-1, 1, (4, 5)), requires_grad=True)
    y = at.tanh(x @ x.T).sum(axis=0)
    v = rng.uniform(-1, 1, (1, 4))
    b, = at.grad(y, x, at.tensor(v), is_grads_batched=True, retain_graph=True)
    s, = at.grad(y, x, at.tensor(v[0]))
    assert b.shape == (1, 4, 5)
    np.testing.assert_array_equal(b.numpy()[0], s.numpy())


def test_torch_oracle_batched_hessian():
    torch = pytest.importorskip("torch")
    a = rng.uniform(-1, 1, (6, 6))
    x0 = rng.uniform(-1, 1, 6)

    def f(lib, x, A):
        return (lib.tanh(A @ x) ** 2).sum()
    xt = torch.tensor(x0, requires_grad=True)
    gt, = torch.autograd.grad(f(torch, xt, torch.tensor(a)), xt, create_graph=True)
    Ht, = torch.autograd.grad(gt, xt, torch.eye(6, dtype=torch.float64),
                              is_grads_batched=True)
    x = at.tensor(x0, requires_grad=True)
    g, = at.grad(f(at, x, at.tensor(a)), x, create_graph=True)
    H, = at.grad(g, x, at.eye(6), is_grads_batched=True)
    np.testing.assert_allclose(H.numpy(), Ht.detach().numpy(), rtol=1e-12, atol=1e-13)
