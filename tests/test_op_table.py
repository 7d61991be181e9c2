"""The op table is complete: every opcode has every entry, and the entries agree.

For each opcode: a Python-tier entry (an elementwise table row with both forwards, a doc
and a create_graph rule per operand; a grad_fn name), a create_graph rule, a compiled
partial (the compiled gradient equals central differences), a compiled value (a
compiled replay equals the eager value), and a recorder (its sample program records it).
Removing any one of these fails a test here that names the op. The scalar, numpy and
compiled forwards of every elementwise op agree to within 1 ulp on a grid.
"""
import importlib
import inspect
import math

import numpy as np
import pytest

import autotape as at
from autotape import graph_backward, opcodes, tensor_methods
from autotape.ops import elementwise, indexing, linalg as linalg_ops, versions
import autotape.numpy as anp
from fd import numeric_grads

recording_module = importlib.import_module("autotape.recording")
ELEMENTWISE = {**elementwise.unary_ops, **elementwise.binary_ops}

# where each elementwise op is smooth: (low, high) for x, and for y if binary
DOMAINS = {
    "log": (0.2, 3.0), "sqrt": (0.2, 3.0), "log2": (0.2, 3.0), "log10": (0.2, 3.0),
    "log1p": (-0.8, 3.0), "reciprocal": (0.3, 3.0), "arccosh": (1.1, 3.0),
    "arcsin": (-0.9, 0.9), "arccos": (-0.9, 0.9), "arctanh": (-0.9, 0.9),
    "tan": (-1.2, 1.2), "abs": (0.1, 2.0), "relu": (0.1, 2.0),
    "sign": (0.1, 0.9), "floor": (0.1, 0.9), "ceil": (0.1, 0.9), "round": (0.1, 0.4),
    "power": ((0.3, 2.0), (-2.0, 2.0)), "divide": ((-2.0, 2.0), (0.5, 2.0)),
    "fmod": ((0.1, 0.9), (1.1, 2.0)), "mod": ((0.1, 0.9), (1.1, 2.0)),
    "maximum": ((0.0, 1.0), (1.5, 2.0)), "minimum": ((0.0, 1.0), (1.5, 2.0)),
}


def _domain(op):
    d = DOMAINS.get(op.name, (-2.0, 2.0))
    if op.code in elementwise.binary_ops:
        return d if isinstance(d[0], tuple) else (d, d)
    return (d,)


def _points(op, n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(lo, hi, n) for lo, hi in _domain(op)]


def _is_comparison(code):
    return opcodes.COMPARE_FIRST <= code <= opcodes.COMPARE_LAST


def _elementwise_sample(op):
    if _is_comparison(op.code):                # (recorded only inside at.compile; here
        record = elementwise.binary_functions[op.code]     # by its recorder directly)
        return lambda x: (record(x[:3], x[3:]) * x[:3]).sum()
    if op.code in elementwise.unary_ops:
        return lambda x: getattr(at, op.name)(x).sum()
    return lambda x: getattr(at, op.name)(x[:3], x[3:]).sum()


def _elementwise_point(op):
    return np.concatenate(_points(op, 3))


A3 = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])

# one sample program per opcode beyond the elementwise table: (f of one array, point)
SAMPLES = {
    opcodes.WHERE: (lambda x: at.where(np.array([True, False, True]), x, 2.0 * x).sum(),
                    np.array([0.5, -1.0, 2.0])),
    opcodes.SUM: (lambda x: (x.reshape(2, 3).sum(axis=0) ** 2).sum(), np.arange(6.0) / 3),
    opcodes.MEAN: (lambda x: (x.reshape(2, 3).mean(axis=1) ** 2).sum(), np.arange(6.0) / 3),
    opcodes.MAX: (lambda x: x.reshape(2, 3).max(axis=1).sum(), np.array([1., 5, 2, 7, 3, 0])),
    opcodes.MIN: (lambda x: x.reshape(2, 3).min(axis=1).sum(), np.array([1., 5, 2, 7, 3, 0])),
    opcodes.PROD: (lambda x: x.prod(), np.array([1.5, -0.5, 2.0])),
    opcodes.CUMSUM: (lambda x: (at.cumsum(x) ** 2).sum(), np.array([1.5, -0.5, 2.0])),
    opcodes.CUMPROD: (lambda x: at.cumprod(x).sum(), np.array([1.5, -0.5, 2.0])),
    opcodes.RESHAPE: (lambda x: (x.reshape(3, 2) ** 2).sum(), np.arange(6.0) / 5),
    opcodes.STRIDED: (lambda x: (x[::2] * x[1::2]).sum(), np.arange(1.0, 7.0) / 5),
    opcodes.SETITEM: (lambda x: _setitem_sample(x), np.array([0.5, 1.5, -1.0])),
    opcodes.CONCAT: (lambda x: (at.concatenate([x, x ** 2]) * np.arange(6.0)).sum(),
                     np.array([0.5, 1.5, -1.0])),
    opcodes.SCATTER: (lambda x: (indexing.scatter(x, ((3,), 1, (2,)), (7,)) ** 2
                                 * np.arange(7.0)).sum(), np.array([0.5, 1.5, -1.0])),
    opcodes.TAKE: (lambda x: (x[np.array([2, 0, 2])] ** 2).sum(), np.array([0.5, 1.5, -1.0])),
    # (positions the program computes: a compiled replay takes at them by a PICK)
    opcodes.SEARCHSORTED: (lambda x: (indexing.take_flat(x * x, indexing.search_positions(
        np.array([0.0, 0.2, 0.4, 0.6]), x)) * np.arange(1.0, 5.0)).sum(),
        np.array([0.05, 0.3, 0.5, 0.15])),
    opcodes.PUT_ADD: (lambda x: (indexing.put_add(x, np.array([1, 3, 1]), (4,)) ** 2).sum(),
                      np.array([0.5, 1.5, -1.0])),
    opcodes.MATMUL: (lambda x: (x.reshape(2, 2) @ x.reshape(2, 2)).sum(),
                     np.array([0.5, 1.5, -1.0, 2.0])),
    opcodes.INV: (lambda x: at.linalg.inv(x.reshape(3, 3) + A3).sum(), np.arange(9.0) / 20),
    opcodes.SOLVE: (lambda x: at.linalg.solve(x.reshape(3, 3) + A3, x[:3]).sum(),
                    np.arange(9.0) / 20),
    opcodes.SLOGDET: (lambda x: at.linalg.slogdet(x.reshape(3, 3) + A3)[1],
                      np.arange(9.0) / 20),
    opcodes.DET: (lambda x: at.linalg.det(x.reshape(3, 3) + A3), np.arange(9.0) / 20),
    opcodes.CHOLESKY: (lambda x: at.linalg.cholesky(x.reshape(3, 3) + A3).sum(),
                       np.arange(9.0) / 20),
    opcodes.EIGH: (lambda x: (at.linalg.eigh(x.reshape(3, 3) + A3)[0] * np.arange(3.0)).sum(),
                   np.arange(9.0) / 20),
    opcodes.SVD: (lambda x: (lambda r: (r.S * np.arange(1.0, 4.0)).sum() + r.U[0, 0] * r.Vh[0, 1])(
        at.linalg.svd(x.reshape(3, 3) + A3)), np.arange(9.0) / 20),
    opcodes.PINV: (lambda x: (at.linalg.pinv(x.reshape(3, 3)[:, :2] + A3[:, :2]) *
                              np.arange(6.0).reshape(2, 3)).sum(), np.arange(9.0) / 20),
}
SAMPLES.update({code: (_elementwise_sample(op), _elementwise_point(op))
                for code, op in ELEMENTWISE.items()})


def _setitem_sample(x):
    y = at.zeros(4)
    y[1:4] = x ** 2
    return (y * np.arange(4.0)).sum()


# every table op (a CUSTOM row is a user's op: its VJP is theirs, tested in test_custom.py)
ALL = [c for c in opcodes.all_opcodes() if not opcodes.PYTHON_FIRST <= c <= opcodes.PYTHON_LAST]


def test_every_opcode_has_a_sample():
    assert sorted(SAMPLES) == ALL, "a new opcode needs a sample program here"


@pytest.mark.parametrize("code", ALL, ids=opcodes.opcode_name)
def test_every_opcode_has_its_python_entries(code):
    name = opcodes.opcode_name(code)
    assert code in graph_backward.GRAPH_VJPS, f"{name} has no create_graph rule"
    assert code in versions.GRAD_FN_NAMES, f"{name} has no grad_fn name"
    if code in ELEMENTWISE:
        op = ELEMENTWISE[code]
        arity = 1 if code in elementwise.unary_ops else 2
        assert callable(op.scalar) and callable(op.array) and op.doc, name
        assert len(op.vjps) == arity and all(callable(v) for v in op.vjps), \
            f"{name} needs one create_graph rule per operand"
        public = getattr(elementwise, op.name)
        assert inspect.unwrap(getattr(at, op.name)) is public   # (at's takes out=)
        if _is_comparison(code):               # at.less is numpy's, a bool; the row's
            assert public(np.ones(1), 2.0).dtype == bool      # recorder is compare's
            return
        assert public is (elementwise.unary_functions if arity == 1
                          else elementwise.binary_functions)[code]


def _recorded_ops(f, x):
    xt = at.tensor(x, requires_grad=True)
    out = f(xt)
    return {out._tape.opcode(r) for r in range(out._tape.nrows)}


@pytest.mark.parametrize("code", ALL, ids=opcodes.opcode_name)
def test_sample_records_and_every_derivative_agrees(code):
    name = opcodes.opcode_name(code)
    f, x = SAMPLES[code]
    assert code in _recorded_ops(f, x), f"the sample for {name} does not record it"
    xt = at.tensor(x, requires_grad=True)
    value = f(xt)
    g, = at.grad(value, xt)
    numeric = numeric_grads(f, [x], 1.0)[0]
    np.testing.assert_allclose(g.numpy(), numeric, rtol=1e-5, atol=1e-6,
                               err_msg=f"{name}: compiled partial vs finite differences")
    xt = at.tensor(x, requires_grad=True)
    g_graph, = at.grad(f(xt), xt, create_graph=True)
    np.testing.assert_allclose(g_graph.numpy(), g.numpy(), rtol=1e-12, atol=1e-12,
                               err_msg=f"{name}: create_graph rule vs compiled partial")
    compiled = at.compile(f, np.zeros_like(x) + x)
    x2 = x * (1 + 1e-3)
    np.testing.assert_allclose(compiled(x2).item(), f(at.tensor(x2)).item(), rtol=1e-13,
                               err_msg=f"{name}: compiled value vs eager value")
    np.testing.assert_allclose(compiled.grad(x2).numpy(), _eager_grad(f, x2), rtol=1e-12,
                               atol=1e-14, err_msg=f"{name}: compiled replay's gradient vs eager")


def _eager_grad(f, x):
    xt = at.tensor(x, requires_grad=True)
    return at.grad(f(xt), xt)[0].numpy()


# ---- the scalar, numpy and compiled forwards agree -------------------------------------------

def _ulps(a, b):
    """|a - b| in units in the last place of the larger (0 where both are equal or nan;
    inf where one is inf or nan and the other is not)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(all="ignore"):
        scale = np.spacing(np.maximum(np.abs(a), np.abs(b)))
        ulps = np.abs(a - b) / scale
    return np.where(same, 0.0, np.where(np.isfinite(ulps), ulps, np.inf))


SPECIAL_POINTS = [np.inf, -np.inf, np.nan, 1e20, -1e20, 0.0, -0.0]


def _grid(op):
    """Points in the op's domain, and the special values every forward must agree on."""
    if len(_domain(op)) == 1:
        (lo, hi), = _domain(op)
        return [np.concatenate([np.linspace(lo, hi, 41), SPECIAL_POINTS])]
    axes = [np.concatenate([np.linspace(lo, hi, 9), [np.inf, np.nan, 0.0]])
            for lo, hi in _domain(op)]
    return [p.ravel() for p in np.meshgrid(*axes, indexing="ij")]


@pytest.mark.parametrize("code", sorted(ELEMENTWISE), ids=opcodes.opcode_name)
def test_scalar_numpy_and_compiled_forwards_agree(code):
    """The 0-d recorder (Python floats, numpy where math raises), the numpy forward and
    the compiled replay (0-d and arrays) give the same value to 1 ulp, inf and nan
    included."""
    op = ELEMENTWISE[code]
    points = _grid(op)
    fn = elementwise.binary_functions[code] if _is_comparison(code) else getattr(at, op.name)
    n = points[0].size
    scalar = np.array([fn(*(at.tensor(float(p[k])) for p in points)).item()
                       for k in range(n)])
    with np.errstate(all="ignore"):
        array = op.array(*points)
    if len(points) == 1:
        compiled_array = at.compile(fn, points[0])(points[0]).numpy()
        compiled_0d = at.compile(fn, 0.5)
        compiled_scalar = np.array([compiled_0d(v).item() for v in points[0]])
    else:
        joined = np.concatenate(points)
        compiled_array = at.compile(lambda v: fn(v[:n], v[n:]), joined)(joined).numpy()
        compiled_0d = at.compile(fn, 0.5, 0.5)
        compiled_scalar = np.array([compiled_0d(u, v).item() for u, v in zip(*points)])
    for label, values in (("numpy", array), ("compiled arrays", compiled_array),
                          ("compiled 0-d", compiled_scalar)):
        worst = _ulps(scalar, values)
        k = int(np.argmax(worst))
        assert worst[k] <= 1, (f"{op.name}: 0-d and {label} forwards differ by "
                               f"{worst[k]:.0f} ulp at {[float(p[k]) for p in points]}: "
                               f"{scalar[k]!r} vs {values[k]!r}")


# ---- a missing entry is an error that names the op -------------------------------------------

def test_missing_create_graph_rule_names_the_op(monkeypatch):
    rules = dict(graph_backward.GRAPH_VJPS)
    del rules[opcodes.MUL]
    monkeypatch.setattr(graph_backward, "GRAPH_VJPS", rules)
    x = at.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="MUL has no create_graph rule"):
        at.grad((x * x).sum(), x, create_graph=True)


def test_missing_compiled_vjp_names_the_op():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    tape = y._tape
    unknown = opcodes.INDEX_LAST                  # in a family's range, with no kernel
    row = tape.push(unknown, y._row, -1, (2,), -1, np.ones(2))
    out = at.Tensor.__new__(at.Tensor)
    out._value, out._shape, out._dtype, out._tape, out._row = np.ones(2), (2,), y.dtype, tape, row
    out._requires_grad = True
    with pytest.raises(RuntimeError, match=f"no compiled VJP for op {unknown}"):
        at.grad(out.sum(), x)


def test_missing_forward_names_the_op(monkeypatch):
    values = dict(linalg_ops.values_of)
    del values[opcodes.INV]
    monkeypatch.setattr(linalg_ops, "values_of", values)
    monkeypatch.setattr(recording_module, "values_of", values)
    f = at.compile(lambda a: at.linalg.inv(a.reshape(2, 2)).sum(), np.eye(2).ravel() * 2)
    with pytest.raises(RuntimeError, match="op INV has neither a compiled forward"):
        f(np.eye(2).ravel() * 3)


def test_every_table_op_is_a_tensor_method_and_a_numpy_name():
    for op in elementwise.unary_ops.values():
        assert callable(getattr(at.Tensor, op.name)), op.name
    for op in ELEMENTWISE.values():
        assert inspect.unwrap(getattr(anp, op.name)) is inspect.unwrap(getattr(at, op.name))
        assert anp.add(1.0, at.ones(1), out=at.zeros(1)).tolist() == [2.0]
    assert math.isfinite(at.exp(at.tensor(0.0)).item())
