"""No NaN where torch gives a number: masks select (a zero partial passes 0 even when
the upstream adjoint is inf or nan), and the functions torch defines at a singular
point (std of equal values, arctan2 at the origin, a p-norm of zeros, eigvalsh at
repeated eigenvalues) have that value. Each case runs eagerly, in batched lanes, under
create_graph and as a compiled replay; torch is the oracle where installed."""
import numpy as np
import pytest

import autotape as at

INF_BELOW = np.array([-1.0, 0.0, 4.0])          # sqrt'(0) = inf flows into the mask

CASES = {
    # name: (f, point, expected gradient)
    "sqrt(relu)": (lambda x: at.sqrt(at.relu(x)).sum(), INF_BELOW, [0.0, 0.0, 0.25]),
    "log(relu)": (lambda x: at.log(at.relu(x)).sum(), INF_BELOW, [0.0, 0.0, 0.25]),
    "sqrt(maximum) unselected": (
        lambda x: at.sqrt(at.maximum(x[:2], x[2:])).sum(), np.array([4.0, 0.0, 1.0, -1.0]),
        [0.25, np.inf, 0.0, 0.0]),
    "sqrt(minimum) unselected": (
        lambda x: at.sqrt(at.minimum(x[:2], x[2:])).sum(), np.array([4.0, 0.0, 1.0, 2.0]),
        [0.0, np.inf, 0.5, 0.0]),
    "sqrt(maximum), a broadcast row unselected": (          # the trailing-broadcast kernel
        lambda x: at.sqrt(at.maximum(x[:4].reshape(2, 2), x[4:])).sum(),
        np.array([0.0, 4.0, 0.0, 1.0, -1.0, 0.5]), [np.inf, 0.25, np.inf, 0.5, 0.0, 0.0]),
    "sqrt(floor)": (lambda x: at.sqrt(at.floor(x)).sum(), np.array([0.5, 1.5]), [0.0, 0.0]),
    "sqrt(ceil)": (lambda x: at.sqrt(at.ceil(x)).sum(), np.array([-0.5, 1.5]), [0.0, 0.0]),
    "sqrt(round)": (lambda x: at.sqrt(at.round(x)).sum(), np.array([0.2, 1.2]), [0.0, 0.0]),
    "sqrt(sign)": (lambda x: at.sqrt(at.sign(x)).sum(), np.array([0.0, 2.0]), [0.0, 0.0]),
    "std of equal values": (lambda x: at.std(x), np.array([2.0, 2.0, 2.0]), [0.0] * 3),
    "arctan2 at the origin": (lambda x: at.arctan2(x[0], x[1]), np.zeros(2), [0.0, 0.0]),
    "norm ord=3 of zeros": (lambda x: at.linalg.norm(x, 3), np.zeros(2), [0.0, 0.0]),
    "norm ord=0.5 of zeros": (lambda x: at.linalg.norm(x, 0.5), np.zeros(2), [0.0, 0.0]),
    "eigvalsh at a repeated eigenvalue": (
        lambda x: at.linalg.eigvalsh(x.reshape(2, 2)).sum(), np.array([2.0, 0.0, 0.0, 2.0]),
        [1.0, 0.0, 0.0, 1.0]),
}


def _eager(f, x):
    xt = at.tensor(x, requires_grad=True)
    return at.grad(f(xt), xt)[0].numpy()


@pytest.mark.parametrize("name", CASES)
def test_eager(name):
    f, x, expected = CASES[name]
    np.testing.assert_array_equal(_eager(f, x), expected)


@pytest.mark.parametrize("name", CASES)
def test_create_graph(name):
    f, x, expected = CASES[name]
    xt = at.tensor(x, requires_grad=True)
    g, = at.grad(f(xt), xt, create_graph=True)
    np.testing.assert_array_equal(g.numpy(), expected)


@pytest.mark.parametrize("name", CASES)
def test_compiled_replay(name):
    f, x, expected = CASES[name]
    compiled = at.compile(f, x + 0.25)              # recorded elsewhere, replayed at x
    np.testing.assert_array_equal(compiled.grad(x).numpy(), expected)


@pytest.mark.parametrize("name", ["sqrt(relu)", "sqrt(maximum) unselected", "sqrt(floor)"])
def test_batched_lanes(name):
    f, x, expected = CASES[name]
    xt = at.tensor(x, requires_grad=True)
    y = f(xt)
    # two lanes of the same cotangent: each lane equals the single sweep
    jac, = at.grad(y, xt, at.tensor([1.0, 1.0]).reshape(2), is_grads_batched=True)
    np.testing.assert_array_equal(jac.numpy(), [expected, expected])


def test_elementwise_lanes_select():
    """The lane kernels of a Jacobian select too (sqrt'(0) = inf in lanes 0 and 1)."""
    x = at.tensor(INF_BELOW, requires_grad=True)
    jac, = at.grad(at.sqrt(at.relu(x)), x, at.eye(3), is_grads_batched=True)
    np.testing.assert_array_equal(jac.numpy(), np.diag([0.0, 0.0, 0.25]))


def test_scalar_path_selects():
    t = at.tensor(0.0, requires_grad=True)
    assert at.grad(at.sqrt(at.relu(t)), t)[0].item() == 0.0
    u = at.tensor(0.5, requires_grad=True)
    assert at.grad(at.sqrt(at.floor(u)) + u, u)[0].item() == 1.0


def test_scaling_partials_still_give_torchs_nan():
    """Where torch multiplies (abs, pow, clip's untaken branch feeding sqrt), a zero
    times inf stays nan: only masks select."""
    assert np.isnan(_eager(lambda x: at.abs(at.sqrt(x)).sum(), np.zeros(1))[0])
    assert np.isnan(_eager(lambda x: (at.sqrt(x) ** 0.0).sum(), np.zeros(1))[0])


@pytest.mark.parametrize("name", CASES)
def test_against_torch(name):
    torch = pytest.importorskip("torch")
    f, x, _ = CASES[name]
    torch_f = {
        "sqrt(relu)": lambda t: torch.sqrt(torch.relu(t)).sum(),
        "log(relu)": lambda t: torch.log(torch.relu(t)).sum(),
        "sqrt(maximum) unselected": lambda t: torch.sqrt(torch.maximum(t[:2], t[2:])).sum(),
        "sqrt(minimum) unselected": lambda t: torch.sqrt(torch.minimum(t[:2], t[2:])).sum(),
        "sqrt(maximum), a broadcast row unselected": lambda t: torch.sqrt(
            torch.maximum(t[:4].reshape(2, 2), t[4:])).sum(),
        "sqrt(floor)": lambda t: torch.sqrt(torch.floor(t)).sum(),
        "sqrt(ceil)": lambda t: torch.sqrt(torch.ceil(t)).sum(),
        "sqrt(round)": lambda t: torch.sqrt(torch.round(t)).sum(),
        "sqrt(sign)": lambda t: torch.sqrt(torch.sign(t)).sum(),
        "std of equal values": lambda t: torch.std(t, correction=0),
        "arctan2 at the origin": lambda t: torch.atan2(t[0], t[1]),
        "norm ord=3 of zeros": lambda t: torch.linalg.vector_norm(t, 3),
        "norm ord=0.5 of zeros": lambda t: torch.linalg.vector_norm(t, 0.5),
        "eigvalsh at a repeated eigenvalue": lambda t: torch.linalg.eigvalsh(
            t.reshape(2, 2)).sum(),
    }[name]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    expected, = torch.autograd.grad(torch_f(xt), xt)
    np.testing.assert_array_equal(_eager(f, x), expected.numpy())
