"""create_graph=True: recorded backward, derivatives of any order, torch's cases T01-T03,
T31, T45, T51-T56, and a second-derivative check for every op."""
import warnings

import numpy as np
import pytest

import autotape as at
from fd import check_second_order
from test_ops import BINARY, UNARY, away_from_zero

RELEASED = "Trying to backward through the graph a second time"


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(), (3,), (2, 2)], ids=str)
def test_unary_second_derivatives(name, shape):
    fn, gen = UNARY[name]
    check_second_order(fn, gen(shape))


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((), ()), ((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3))],
                         ids=str)
def test_binary_second_derivatives(name, shapes):
    fn, gx, gy = BINARY[name]
    check_second_order(fn, gx(shapes[0]), gy(shapes[1]))


@pytest.mark.parametrize("f, shapes", [
    (lambda x, y: at.where(np.array([True, False, True]), x * x, y ** 3), [(3,), (3,)]),
    (lambda x: (x * x).sum(axis=1), [(2, 3)]),
    (lambda x: (x ** 3).mean(axis=(0, 2), keepdims=True), [(2, 3, 2)]),
    (lambda x: (x * x).reshape(3, 2) ** 2, [(2, 3)]),
    (lambda x: (x * x)[1:, ::-1] * x[0, 0], [(3, 3)]),
    (lambda x: (x ** 2).T @ x, [(3, 2)]),
    (lambda x, y: at.tanh(x @ y) * x.sum(), [(2, 3), (3,)]),
    (lambda x, y: (x * y) @ (y * y), [(3,), (3,)]),
    (lambda x, y: at.tanh(x @ y) @ y[0], [(2, 3, 4), (2, 4, 4)]),
    (lambda x: at.broadcast_to(x * x, (2, 3)) * x, [(3,)]),
    (lambda x, y: at.stack([x * y, y * y, x ** 3], axis=1), [(2,), (2,)]),
    (lambda x, y: at.concatenate([x * x, y * x.sum()]), [(2,), (3,)]),
], ids=["where", "sum", "mean", "reshape", "index", "matmul", "mlp", "vec", "batched",
        "broadcast",
        "stack", "concatenate"])
def test_structural_second_derivatives(f, shapes):
    check_second_order(f, *[away_from_zero(s) for s in shapes])


def test_index_assignment_second_derivatives():
    def f(x, v):
        y = at.zeros(3, 2)
        y[0] = x * x
        y[1:, 1] = v ** 3
        return y * x
    check_second_order(f, away_from_zero((2,)), away_from_zero((2,)))


def test_third_and_fourth_derivatives_are_exact():
    x = at.tensor(1.5, requires_grad=True)
    d = x ** 5 - 3 * x ** 4 + x
    values = []
    for _ in range(4):
        d, = at.grad(d, x, create_graph=True)
        values.append(d.item())
    assert values == [5 * 1.5 ** 4 - 12 * 1.5 ** 3 + 1, 20 * 1.5 ** 3 - 36 * 1.5 ** 2,
                      60 * 1.5 ** 2 - 72 * 1.5, 120 * 1.5 - 72]


def test_derivatives_of_sin_exp_tanh_chains():
    x = at.tensor(0.7, requires_grad=True)
    d = at.sin(x)
    for k in range(4):
        d, = at.grad(d, x, create_graph=True)
    assert d.item() == pytest.approx(np.sin(0.7), abs=1e-15)     # sin'''' = sin
    d = at.exp(2 * x)
    for k in range(4):
        d, = at.grad(d, x, create_graph=True)
    assert d.item() == pytest.approx(16 * np.exp(1.4), rel=1e-14)
    t = np.tanh(0.7)
    d3, = at.grad(at.grad(at.grad(at.tanh(x), x, create_graph=True)[0], x,
                          create_graph=True)[0], x)
    assert d3.item() == pytest.approx(-2 * (1 - t * t) ** 2 + 4 * t * t * (1 - t * t),
                                      rel=1e-13)


def test_T01_T03_with_create_graph():
    x = at.tensor([5., 3.], requires_grad=True)
    w = at.tensor([5., 3.], requires_grad=True)
    g = at.grad([x, x], [x, x], [at.ones(2), at.ones(2)], create_graph=True)
    assert [t.tolist() for t in g] == [[2.0, 2.0], [2.0, 2.0]]
    # torch detaches these constant results (requires_grad False); autotape keeps them
    # connected, so the next derivative is zeros instead of an error (see README)
    assert all(t.requires_grad for t in g)
    assert at.grad(g[0].sum(), x)[0].tolist() == [0.0, 0.0]
    g = at.grad([x, w], [x, w], [at.ones(2), at.ones(2)], create_graph=True)
    assert [t.tolist() for t in g] == [[1.0, 1.0], [1.0, 1.0]]


def test_T31_create_graph_implies_retain_and_frees_first_order():
    x = at.tensor(2., requires_grad=True)
    y = x ** 3
    g, = at.grad(y, x, create_graph=True, retain_graph=False)
    gg, = at.grad(g, x)
    assert (g.item(), g.requires_grad, gg.item()) == (12.0, True, 12.0)
    with pytest.raises(RuntimeError, match=RELEASED):
        at.grad(y, x)
    y2 = x ** 3
    g2, = at.grad(y2, x, create_graph=True)       # retain_graph defaults to True
    assert at.grad(y2, x)[0].item() == 12.0


def test_T45_create_graph_under_no_grad_still_records():
    x = at.ones(2, requires_grad=True)
    p = (x * x).sum()
    with at.no_grad():
        g, = at.grad(p, x, create_graph=True)
    assert g.tolist() == [2.0, 2.0] and g.requires_grad


def test_T51_T52_hessian_rows_and_hvp():
    x = at.tensor([1., 2.], requires_grad=True)
    f = x[0] ** 2 * x[1] + x[1] ** 3
    g, = at.grad(f, x, create_graph=True)
    H = at.stack([at.grad(g[i], x, retain_graph=True)[0] for i in range(2)])
    assert (g.tolist(), H.tolist()) == ([4.0, 13.0], [[4.0, 2.0], [2.0, 12.0]])
    v = at.tensor([1., -1.])
    hv1, = at.grad(g, x, grad_outputs=v, retain_graph=True)
    hv2, = at.grad((g * v).sum(), x)
    assert hv1.tolist() == hv2.tolist() == [2.0, -10.0]


def test_T53_backward_create_graph_warns_and_accumulates_out_of_place():
    x = at.tensor([1., 2.], requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        (x[0] ** 2 * x[1] + x[1] ** 3).backward(create_graph=True)
    assert str(w[0].message).startswith("Using backward() with create_graph=True will "
                                        "create a reference cycle")
    g = x.grad
    assert g.tolist() == [4.0, 13.0] and g.requires_grad
    x.grad = None
    (g * at.tensor([1., -1.])).sum().backward()
    assert x.grad.tolist() == [2.0, -10.0]
    x2 = at.tensor([5., 3.], requires_grad=True)
    y2 = (x2 * x2).sum()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y2.backward(create_graph=True)
        g1 = x2.grad
        y2.backward(create_graph=True)
    assert (g1.tolist(), x2.grad.tolist(), g1 is x2.grad) == ([10.0, 6.0], [20.0, 12.0],
                                                              False)


def test_T54_T55_constant_derivatives_stay_connected():
    x = at.tensor([1., 2.], requires_grad=True)
    g, = at.grad((3 * x).sum(), x, create_graph=True)
    assert g.tolist() == [3.0, 3.0] and g.requires_grad
    assert at.grad(g.sum(), x)[0].tolist() == [0.0, 0.0]      # torch raises here
    x = at.tensor(2., requires_grad=True)
    g, = at.grad(x * x, x, create_graph=True)
    gg, = at.grad(g, x, create_graph=True)
    ggg, = at.grad(gg, x)
    assert (g.item(), gg.item(), ggg.item()) == (4.0, 2.0, 0.0)


def test_T56_grad_outputs_that_require_grad():
    x = at.tensor([5., 3.], requires_grad=True)
    v = at.tensor([1., 2.], requires_grad=True)
    g, = at.grad(x * x, x, v, create_graph=True)
    assert g.tolist() == [10.0, 12.0] and g.requires_grad
    assert at.grad(g.sum(), v)[0].tolist() == [10.0, 6.0]


def test_unused_and_materialized_under_create_graph():
    x = at.ones(2, requires_grad=True)
    w = at.ones(2, requires_grad=True)
    gx, gw = at.grad((x * 2).sum(), [x, w], create_graph=True, materialize_grads=True)
    assert gw.tolist() == [0.0, 0.0] and gw.requires_grad
    assert at.grad((x * 2).sum(), [x, w], create_graph=True, allow_unused=True)[1] is None


def test_hvp_loop_keeps_memory_flat():
    import gc
    import resource
    x = at.tensor(np.linspace(0.1, 1.0, 50), requires_grad=True)
    v = at.tensor(np.ones(50))
    for it in range(1000):
        g, = at.grad((at.sin(x) * x ** 3).sum(), x, create_graph=True)
        hv, = at.grad(g, x, grad_outputs=v)
        if it == 100:
            gc.collect()
            start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    gc.collect()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start < 5_000


def test_public_gradgradcheck():
    x = at.tensor([0.3, -0.7, 1.2], requires_grad=True)
    w = at.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    assert at.gradgradcheck(lambda a, b: at.tanh(b * a) * a ** 2, (x, w))
    assert at.gradgradcheck(lambda a: (a @ a) * at.exp(a), x)


def rosenbrock(x):
    """The extended Rosenbrock function (More, Garbow, Hillstrom)."""
    a, b = x[0::2], x[1::2]
    return (100.0 * (b - a ** 2) ** 2 + (1.0 - a) ** 2).sum()


def test_rosenbrock_hessian_matches_closed_form():
    n = 100
    x0 = np.random.default_rng(0).uniform(-1.5, 1.5, n)
    x = at.tensor(x0, requires_grad=True)
    g, = at.grad(rosenbrock(x), x, create_graph=True)
    eye = np.eye(n)
    H = np.stack([at.grad(g, x, grad_outputs=at.tensor(eye[i]), retain_graph=True)[0].numpy()
                  for i in range(n)])
    a, b, i = x0[0::2], x0[1::2], np.arange(0, n, 2)
    closed = np.zeros((n, n))
    closed[i, i] = 1200 * a ** 2 - 400 * b + 2
    closed[i, i + 1] = closed[i + 1, i] = -400 * a
    closed[i + 1, i + 1] = 200
    np.testing.assert_allclose(H, closed, rtol=0, atol=1e-10)


def test_float32_inputs_get_float32_recorded_gradients():
    x = at.tensor([0.5, 1.5], dtype="float32", requires_grad=True)
    g, = at.grad((x ** 3).sum(), x, create_graph=True)
    assert g.dtype == np.float32 and g.tolist() == [0.75, 6.75]
    gg, = at.grad(g.sum(), x)
    assert gg.dtype == np.float32 and gg.tolist() == [3.0, 9.0]


def test_astype():
    x = at.tensor([0.1, 2.7], requires_grad=True)
    y = x.astype("float32")
    assert y.dtype == np.float32 and y.requires_grad
    assert at.grad((y * y).sum(), x)[0].dtype == np.float64
    i = x.astype("int64")
    assert i.tolist() == [0, 2] and not i.requires_grad


def test_third_derivative_through_indexing_uses_scatters_rule():
    x = at.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    d = (x[::2] ** 4).sum()
    for _ in range(3):
        d, = at.grad(d.sum(), x, create_graph=True)
    assert d.tolist() == [24.0, 0.0, 72.0, 0.0]            # d3/dx3 x^4 = 24 x at 0, 2


def test_create_graph_across_tapes(monkeypatch):
    import importlib
    tape_module = importlib.import_module("autotape.tape")
    monkeypatch.setattr(tape_module, "MAX_ROWS", 7)
    tape_module.close_open_tape()
    x = at.tensor(0.4, requires_grad=True)
    y = x
    for i in range(30):
        y = at.sin(y) * 0.9 + x * 0.2          # x * 0.2 starts from a leaf: new tapes
    assert y._tape.imports
    g, = at.grad(y, x, create_graph=True)
    h, = at.grad(g, x)
    monkeypatch.setattr(tape_module, "MAX_ROWS", 1 << 18)
    tape_module.close_open_tape()
    x1 = at.tensor(0.4, requires_grad=True)
    y1 = x1
    for i in range(30):
        y1 = at.sin(y1) * 0.9 + x1 * 0.2
    g1, = at.grad(y1, x1, create_graph=True)
    h1, = at.grad(g1, x1)
    assert g.item() == pytest.approx(g1.item(), rel=1e-14)
    assert h.item() == pytest.approx(h1.item(), rel=1e-13)
