"""torch code ports by renaming the module: at.autograd (grad, backward, functional),
Tensor.clone / .data / .detach_(), dim= / keepdim= on reductions, at.cat, dtype names,
manual_seed / rand / randn. torch is the oracle where it is installed."""
import numpy as np
import pytest

import autotape as at
from autotape.autograd import functional as AF

X = np.array([0.3, -1.2, 2.0])
Y = np.array([1.5, 0.7, -0.9])


def cubic(lib):
    return lambda x, y: (x ** 3 * y).sum() + (x * x).sum()


def vector(lib):
    return lambda x, y: (x * y, x ** 2)


def square(lib):
    return lambda x: x ** 2


def sin_times(lib):
    return lambda x: lib.sin(x) * x


def pair(lib):
    return lambda x: (x ** 2, x.sum())


def quartic(lib):
    return lambda x: (x ** 4).sum()


def _to_numpy(r):
    if isinstance(r, tuple):
        return tuple(_to_numpy(v) for v in r)
    return np.asarray(r.detach().numpy())


def _assert_same(ours, theirs):
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _assert_same(a, b)
        return
    assert not isinstance(ours, tuple)
    np.testing.assert_allclose(_to_numpy(ours), theirs.detach().numpy(), rtol=1e-12,
                               atol=1e-12)


CASES = [
    ("vjp", cubic, "xy", None), ("vjp", vector, "xy", "vv"), ("vjp", square, "x", "v"),
    ("jvp", vector, "xy", "xy"), ("jvp", square, "x", "x"),
    ("jacobian", vector, "xy", None), ("jacobian", sin_times, "x", None),
    ("jacobian", pair, "x", None), ("hessian", cubic, "xy", None),
    ("hessian", quartic, "x", None), ("hvp", cubic, "xy", "xy"), ("vhp", cubic, "xy", "xy"),
]


@pytest.mark.parametrize("name, f, args, v", CASES)
def test_functional_matches_torch(name, f, args, v):
    torch = pytest.importorskip("torch")
    import torch.autograd.functional as TF

    def make(lib):
        tensor = (lambda a: lib.tensor(a, dtype=lib.float64)) if lib is torch else at.tensor
        vals = {"x": X, "y": Y}
        inputs = tuple(tensor(vals[c]) for c in args)
        inputs = inputs if len(inputs) > 1 else inputs[0]
        vs = None
        if v is not None:
            vs = tuple(tensor(np.full(3, 0.5 + k)) for k in range(len(v)))
            vs = vs if len(vs) > 1 else vs[0]
        return inputs, vs
    ti, tv = make(torch)
    ai, av = make(at)
    theirs = getattr(TF, name)(f(torch), ti, *(() if v is None else (tv,)))
    ours = getattr(AF, name)(f(at), ai, *(() if v is None else (av,)))
    _assert_same(ours, theirs)


def test_functional_structures_and_values_without_torch():
    x = at.tensor([1.0, 2.0])
    J = AF.jacobian(lambda x, y: x * y, (x, x))
    assert isinstance(J, tuple) and J[0].tolist() == [[1.0, 0.0], [0.0, 2.0]]
    out, g = AF.vjp(lambda x: (x ** 2).sum(), x)
    assert float(out) == 5.0 and g.tolist() == [2.0, 4.0] and not g.requires_grad
    H = AF.hessian(lambda x, y: (x ** 3 * y).sum(), (x, x))
    assert H[0][1].tolist() == [[3.0, 0.0], [0.0, 12.0]]
    assert AF.hvp(lambda x: (x ** 3).sum(), x, at.ones(2))[1].tolist() == [6.0, 12.0]


def test_functional_errors_are_torchs():
    x = at.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="independent of input 1. This is not allowed in "
                                           "strict mode"):
        AF.vjp(lambda x, y: x ** 2, (x, x), at.ones(2), strict=True)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is "
                                           "independent of input 1"):
        AF.jacobian(lambda x, y: x ** 2, (x, x), strict=True)
    with pytest.raises(RuntimeError, match="v can only be None if the user-provided "
                                           "function returns a single Tensor with a single"):
        AF.vjp(lambda x: x ** 2, x)
    with pytest.raises(RuntimeError, match="Entry 0 in v has invalid size"):
        AF.vjp(lambda x: x ** 2, x, at.ones(3))
    assert AF.vjp(lambda x, y: x ** 2, (x, x), at.ones(2))[1][1].tolist() == [0.0, 0.0]


def test_functional_create_graph_stays_differentiable():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    _, g = AF.vjp(lambda x: (x ** 3).sum(), x, create_graph=True)
    assert g.requires_grad
    assert at.grad(g.sum(), x)[0].tolist() == [6.0, 12.0]
    _, g = AF.vjp(lambda x: (x ** 3).sum(), x)
    assert not g.requires_grad


def test_autograd_grad_and_backward_are_the_engines():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    assert at.autograd.grad((x ** 2).sum(), x)[0].tolist() == [2.0, 4.0]
    at.autograd.backward((x ** 2).sum())
    assert x.grad.tolist() == [2.0, 4.0]


# ---- Tensor methods ---------------------------------------------------------------------

def test_clone_is_recorded_and_data_writes_through():
    p = at.tensor([1.0, 2.0], requires_grad=True)
    c = p.clone()
    assert c.requires_grad and at.grad((c * c).sum(), p)[0].tolist() == [2.0, 4.0]
    y = (p * p).sum()
    p.data -= 0.5 * at.tensor([1.0, 1.0])          # the SGD step idiom
    assert p.tolist() == [0.5, 1.5] and p.requires_grad and p.is_leaf
    p.data.zero_()
    assert p.tolist() == [0.0, 0.0]
    p.data[1] = 3.0
    assert p.tolist() == [0.0, 3.0]
    p.data = at.tensor([7.0, 8.0])
    assert p.tolist() == [7.0, 8.0]
    assert at.grad(y, p)[0].tolist() == [2.0, 4.0]     # recorded with the old value
    d = p.data
    assert not d.requires_grad and d.tolist() == [7.0, 8.0]
    with pytest.raises(RuntimeError, match="non-leaf tensor through .data"):
        (p * 2).data = at.zeros(2)


def test_detach_in_place():
    p = at.tensor([1.0, 2.0], requires_grad=True)
    y = p * 2
    assert y.detach_() is y and not y.requires_grad and y.is_leaf and y.tolist() == [2.0, 4.0]
    y += 1                                            # now a plain tensor of its own
    assert y.tolist() == [3.0, 5.0]
    assert p.detach_() is p and not p.requires_grad


def test_torch_method_names():
    x = at.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.numel() == 4 and x.dim() == 2 and x.unsqueeze(0).shape == (1, 2, 2)
    assert at.cat([x, x], dim=1).shape == (2, 4) and at.cat([x, x]).shape == (4, 2)


# ---- dim= and keepdim= ------------------------------------------------------------------

@pytest.mark.parametrize("name, kwargs", [
    ("sum", {"dim": 1}), ("sum", {"dim": (0, 1), "keepdim": True}), ("mean", {"dim": 0}),
    ("prod", {"dim": 1, "keepdim": True}), ("var", {"dim": 1}), ("std", {"dim": 0}),
    ("var", {"dim": 1, "correction": 0}), ("std", {"dim": 1, "unbiased": False}),
    ("logsumexp", {"dim": 1}), ("softmax", {"dim": 1}), ("log_softmax", {"dim": 0}),
    ("cumsum", {"dim": 1}), ("cumprod", {"dim": 0}), ("amax", {"dim": 1}),
    ("norm", {"dim": 1}),
])
def test_dim_keepdim_match_torch(name, kwargs):
    torch = pytest.importorskip("torch")
    a = np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]])
    x = at.tensor(a, requires_grad=True)
    t = torch.tensor(a, requires_grad=True)
    ours = getattr(x, name)(**kwargs) if name != "amax" else at.amax(x, **kwargs)
    theirs = getattr(torch, name)(t, **kwargs)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
    g = at.grad((ours * ours).sum(), x)[0]
    gt = torch.autograd.grad((theirs * theirs).sum(), t)[0]
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-10, atol=1e-14)


def test_max_min_with_dim_are_torchs_pairs():
    a = np.array([[1.0, 7.0, 7.0], [7.0, 2.0, 1.0]])
    x = at.tensor(a, requires_grad=True)
    r = at.max(x, dim=1)
    assert r.values.tolist() == [7.0, 7.0] and r.indices.tolist() == [1, 0]
    # the gradient goes to the picked element of a tie, as in torch
    assert at.grad(r.values.sum(), x, retain_graph=True)[0].tolist() == [[0, 1, 0],
                                                                       [1, 0, 0]]
    values, indices = x.min(dim=0, keepdim=True)
    assert values.shape == (1, 3) and indices.tolist() == [[0, 1, 1]]
    # numpy's spelling is unchanged: values only, the tie split evenly
    assert at.grad(at.max(x, axis=1).sum(), x)[0].tolist() == [[0, .5, .5], [1, 0, 0]]
    torch = pytest.importorskip("torch")
    t = torch.tensor(a, requires_grad=True)
    rt = torch.max(t, dim=1)
    assert r.indices.tolist() == rt.indices.tolist()
    assert at.grad(r.values.sum(), x)[0].tolist() == \
        torch.autograd.grad(rt.values.sum(), t)[0].tolist()


def test_var_spellings():
    x = at.tensor([1.0, 2.0, 3.0, 4.0])
    assert at.var(x).item() == 1.25                          # numpy's ddof=0
    assert x.var(dim=0).item() == pytest.approx(5 / 3)      # torch's correction=1
    assert x.var(correction=0).item() == 1.25
    with pytest.raises(TypeError, match="axis= .* or dim="):
        at.sum(x, axis=0, dim=0)


# ---- dtypes and random numbers -------------------------------------------------------------

def test_dtype_names_and_random():
    assert at.float32 == np.float32 and at.float64 == np.float64 and at.float == np.float32
    assert at.double == np.float64 and at.long == np.int64
    assert at.tensor([1.0], dtype=at.float32).dtype == np.float32
    at.manual_seed(5)
    a, b = at.rand(3, 2), at.randn((2,), dtype=at.float32)
    at.manual_seed(5)
    assert at.rand(3, 2).tolist() == a.tolist() and at.randn(2, dtype=at.float32).tolist() \
        == b.tolist()
    assert a.shape == (3, 2) and 0 <= a.numpy().min() and a.numpy().max() < 1
    assert b.dtype == np.float32
    w = at.randn(4, requires_grad=True)
    assert w.requires_grad and w.is_leaf


def test_torch_method_spellings_are_the_table_ops():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    t = at.tensor(a, requires_grad=True)
    u = at.tensor(b)
    np.testing.assert_array_equal(t.add(u, alpha=2).numpy(), a + 2 * b)
    np.testing.assert_array_equal(t.sub(u).numpy(), a - b)
    np.testing.assert_array_equal(t.mul(u).numpy(), a * b)
    np.testing.assert_array_equal(t.div(u).numpy(), a / b)
    np.testing.assert_array_equal(t.pow(2).numpy(), a ** 2)
    np.testing.assert_array_equal(t.neg().numpy(), -a)
    np.testing.assert_array_equal(t.clamp(min=0.0).numpy(), np.clip(a, 0.0, None))
    np.testing.assert_array_equal(t.permute(1, 0).numpy(), a.T)
    np.testing.assert_array_equal(t.t().numpy(), a.T)
    assert t.contiguous() is t and t.to("cpu") is t and t.device == "cpu"
    assert t.to(np.float32).dtype == np.float32 and t.to(u).dtype == np.float64
    np.testing.assert_array_equal(t.masked_fill(u > 0, 0.0).numpy(), np.where(b > 0, 0.0, a))
    np.testing.assert_array_equal(t.index_select(1, at.tensor([2, 0])).numpy(), a[:, [2, 0]])
    with pytest.raises(RuntimeError, match="uses one GPU"):
        t.to("cuda:1")                        # (to("cuda"): tests/test_device_tensors.py)
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda device type"):
        t.to("tpu")
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        t.clamp()
    assert at.gradcheck(lambda v: v.add(v.pow(3), alpha=0.5).mul(v).clamp(max=2.0)
                        .permute(1, 0).masked_fill(u.T > 1.0, 0.0).index_select(0, at.tensor([1])),
                        (t,))
