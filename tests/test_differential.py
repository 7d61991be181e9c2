"""Differential testing against torch: random programs over the op table (every
elementwise op, reductions, where, matmul), at points that include zeros, ones, kinks
and domain edges, compared for value, gradient, second derivative and compiled replay.
NaN and inf must match torch's exactly: a NaN where torch gives a number is a bug.

Skipped without torch. CI runs a bounded number of programs; set AUTOTAPE_CAMPAIGN to a
number of examples (say 20000) for a longer campaign:
    AUTOTAPE_CAMPAIGN=20000 python -m pytest tests/test_differential.py
"""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import autotape as at
from autotape import opcodes
from autotape.ops import elementwise

torch = pytest.importorskip("torch")

EXAMPLES = int(os.environ.get("AUTOTAPE_CAMPAIGN", "0")) or 60
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get(
    "AUTOTAPE_CAMPAIGN"), suppress_health_check=list(HealthCheck))

# torch's name where it differs from numpy's
TORCH_NAMES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
               "arccosh": "acosh", "arctanh": "atanh", "arctan2": "atan2", "mod": "remainder",
               "negative": "neg", "power": "pow", "subtract": "sub", "multiply": "mul",
               "divide": "div", "maximum": "maximum", "minimum": "minimum"}


def _torch_fn(name):
    if name == "softplus":
        return lambda x: torch.nn.functional.softplus(x, threshold=1000.0)
    if name == "sign":                 # values follow numpy: sign(nan) is nan (torch: 0)
        return lambda x: torch.where(torch.isnan(x), x.detach(), torch.sign(x))
    if name == "mod":                  # numpy signs a zero remainder as y (torch: +0);
        def mod(x, y):                 # where that sign decides an inf, they cannot agree
            r = torch.remainder(x, y)
            assume(not bool(((r == 0) & (y < 0)).any()))
            return r
        return mod
    return getattr(torch, TORCH_NAMES.get(name, name))


UNARY = [(op.name, getattr(at, op.name), _torch_fn(op.name))
         for op in elementwise.unary_ops.values()]
BINARY = [(op.name, getattr(at, op.name), _torch_fn(op.name))
          for op in elementwise.binary_ops.values()
          if not opcodes.COMPARE_FIRST <= op.code <= opcodes.COMPARE_LAST]
REDUCE = [("sum", lambda x, a: x.sum(axis=a, keepdims=True),
           lambda x, a: x.sum(dim=a, keepdim=True)),
          ("mean", lambda x, a: x.mean(axis=a, keepdims=True),
           lambda x, a: x.mean(dim=a, keepdim=True)),
          ("max", lambda x, a: at.amax(x, axis=a, keepdims=True),
           lambda x, a: torch.amax(x, dim=a, keepdim=True)),
          ("min", lambda x, a: at.amin(x, axis=a, keepdims=True),
           lambda x, a: torch.amin(x, dim=a, keepdim=True)),
          ("prod", lambda x, a: x.prod(axis=a, keepdims=True),
           lambda x, a: x.prod(dim=a, keepdim=True))]

SPECIAL = [0.0, 0.0, 1.0, -1.0, 0.5, -0.5, 2.0]   # kinks, domain edges, ties


@st.composite
def programs(draw, max_steps=7, zeros=True):
    """(inputs, steps): two inputs of shape (2, 3) and (3,), values drawn among special
    points and uniform ones; each step an op on earlier values."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31)))
    special_points = SPECIAL if zeros else [v for v in SPECIAL if v != 0]
    inputs = []
    for shape in ((2, 3), (3,)):
        v = rng.uniform(-2.5, 2.5, shape)
        special = rng.random(shape) < 0.3
        v[special] = rng.choice(special_points, int(special.sum()))
        inputs.append(v)
    steps = []
    for k in range(draw(st.integers(1, max_steps))):
        pool = 2 + k
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "reduce",
                                     "where", "matmul"]))
        a, b = draw(st.integers(0, pool - 1)), draw(st.integers(0, pool - 1))
        if kind == "unary":
            steps.append((kind, draw(st.integers(0, len(UNARY) - 1)), a, b))
        elif kind == "binary":
            steps.append((kind, draw(st.integers(0, len(BINARY) - 1)), a, b))
        elif kind == "reduce":
            steps.append((kind, draw(st.integers(0, len(REDUCE) - 1)), a, b))
        else:
            steps.append((kind, 0, a, b))
    return inputs, steps


def run(lib, xs, steps):
    """The program on autotape (lib "at") or torch: the sum of its last value."""
    pool = list(xs)
    for kind, op, a, b in steps:
        x, y = pool[a], pool[b]
        if kind == "unary":
            out = UNARY[op][1 if lib == "at" else 2](x)
        elif kind == "binary":
            out = BINARY[op][1 if lib == "at" else 2](x, y)
        elif kind == "reduce":
            axis = x.ndim - 1 if x.ndim else None
            out = REDUCE[op][1 if lib == "at" else 2](x, axis) if axis is not None else x
        elif kind == "where":
            out = (at.where if lib == "at" else torch.where)(x > y, x, y * 0.5)
        else:                                       # matmul of a row and a column
            u, v = x.reshape(-1)[:3], y.reshape(-1)[:3]
            out = (u[None, :] @ v[:, None])[0, 0] if u.shape[0] == v.shape[0] == 3 else x
        pool.append(out)
    return pool[-1].sum()


def _compare(got, want, what, gradient=True, extremes=False):
    """Equal to torch, nan and inf included. One allowance, in gradients: where torch's
    is nan, autotape's may be 0 or inf instead, never another number. torch's nan there
    is an artifact of multiplying by a mask where autotape selects (power at a zero
    exponent or base, max / min reductions) or of 0 * inf inside a rule whose limit
    exists (d/dx of x^y log x at x = 0 is 0). ``extremes``: the program has a max / min
    reduction or a power, whose masks spread torch's nan (along a whole axis, or into a
    sum with other paths); then any autotape value is accepted where torch's is nan
    (README, differences from torch)."""
    got, want = np.asarray(got, float), np.asarray(want, float)
    if gradient:
        allowed = np.ones(got.shape, bool) if extremes else (got == 0) | np.isinf(got)
        got = np.where(np.isnan(want) & allowed, np.nan, got)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True,
                               err_msg=what)


def _has_extremes(steps):
    """max / min reductions, or power: masks that autotape selects with where torch
    multiplies a nan adjoint by them, and the masked 0 then joins other paths' sums; and
    prod, whose exact gradient at a zero (a product of the others) is 0 where torch's
    divides and multiplies an inf adjoint into nan; and the step functions (sign, floor,
    ceil, round), which pass nothing to their operand where torch passes zeros that an
    inf partial further down turns into nan; and arctan2, whose derivatives at the origin
    are 0 to every order (torch: 0, then nan in the second)."""
    return any((kind == "reduce" and REDUCE[op][0] in ("max", "min", "prod")) or
               (kind == "unary" and UNARY[op][0] in ("sign", "floor", "ceil", "round")) or
               (kind == "binary" and BINARY[op][0] in ("power", "arctan2"))
               for kind, op, _, _ in steps)


def _torch_array(t):
    """A torch gradient as numpy (torch may hand back an efficient zero tensor)."""
    return t.detach().numpy(force=True)


def _compare_gradients(y, yt, xs, ts, steps, what):
    """d y / d xs by autotape against d yt / d ts by torch."""
    got = at.grad(y, xs, allow_unused=True, materialize_grads=True)
    want = torch.autograd.grad(yt, ts, allow_unused=True, materialize_grads=True)
    for g, w in zip(got, want):
        _compare(g.numpy(), _torch_array(w), f"{what} of {steps}",
                 extremes=_has_extremes(steps))


def _pair(inputs):
    xs = [at.tensor(v, requires_grad=True) for v in inputs]
    ts = [torch.tensor(v, requires_grad=True) for v in inputs]
    return xs, ts


@SETTINGS
@given(programs())
def test_value_and_gradient_match_torch(program):
    inputs, steps = program
    xs, ts = _pair(inputs)
    y, yt = run("at", xs, steps), run("torch", ts, steps)
    _compare(y.numpy(), yt.detach().numpy(), f"value of {steps}", gradient=False)
    if not yt.requires_grad:
        return
    _compare_gradients(y, yt, xs, ts, steps, "gradient")


@SETTINGS
@given(programs(max_steps=5, zeros=False))
def test_second_derivative_matches_torch(program):
    """(Without exact zeros: there torch's second derivatives of x ** y are nan by 0 *
    -inf where autotape takes the limits, and broadcasting sums that nan into finite
    entries. The first-order tests keep the zeros.)"""
    inputs, steps = program
    xs, ts = _pair(inputs)
    y, yt = run("at", xs, steps), run("torch", ts, steps)
    if not yt.requires_grad:
        return
    g = at.grad(y, xs, allow_unused=True, materialize_grads=True, create_graph=True)
    gt = torch.autograd.grad(yt, ts, allow_unused=True, materialize_grads=True,
                             create_graph=True)
    directions = [np.linspace(0.5, 1.5, v.size).reshape(v.shape) for v in inputs]
    z = sum((gi * d).sum() for gi, d in zip(g, directions))
    zt = sum((gi * torch.tensor(d)).sum() for gi, d in zip(gt, directions))
    if not zt.requires_grad:
        return
    _compare_gradients(z, zt, xs, ts, steps, "Hessian-vector product")


@SETTINGS
@given(programs())
def test_compiled_replay_matches_eager(program):
    """Recorded at one point, replayed at another: value and gradient equal eager
    autotape's there (torch-checked above)."""
    inputs, steps = program
    f = at.compile(lambda a, b: run("at", [a, b], steps), *[v * 0.5 + 0.25 for v in inputs])
    xs = [at.tensor(v, requires_grad=True) for v in inputs]
    y = run("at", xs, steps)
    _compare(f(*inputs).numpy(), y.numpy(), f"replayed value of {steps}", gradient=False)
    if y.requires_grad:
        want = at.grad(y, xs, allow_unused=True, materialize_grads=True)
        for g, w in zip(f.grad(*inputs), want):
            _compare(g.numpy(), w.numpy(), f"replayed gradient of {steps}")
