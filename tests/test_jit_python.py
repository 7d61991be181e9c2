"""at.jit's recording run by Python (jit_python.py) while a helper compiles the recorder:
the same rows as the compiled recorder's, bit for bit, on every kind of code at.jit
records; the refusals raise here too; a first call on a machine records in Python and
the helper leaves the recorder on disk; a second process loads it."""
import importlib
import math
import os
import subprocess
import sys
import time

import numba
import numpy as np
import pytest

import autotape as at
from autotape import engine, jit_python
from autotape.kernels import background

from test_jit import (THETA, _reshaped, _signed_zero, _swapped_buffers, _updated_copy,
                      array_model, grid, heat, pendulum, piecewise, smooth, spiral)

jit_module = importlib.import_module("autotape.jit")
DATA = np.array([0.5, -1.5, 2.0, 0.25])


@numba.njit
def _functions(x, y):
    """Every scalar function at.jit records, by math's and numpy's names, and builtins."""
    s = math.exp(x) + np.exp(y) + math.log(x * x + 1.0) + np.log1p(y * y)
    s += math.sqrt(x * x) + np.sqrt(abs(y)) + math.sin(x) * np.cos(y) + math.tan(0.1 * y)
    s += np.tanh(x) + math.sinh(0.2 * y) + np.cosh(0.3 * x) + math.expm1(0.1 * x)
    s += math.log2(abs(x) + 1.0) + np.log10(abs(y) + 2.0) + math.asin(0.1 * x)
    s += np.arccos(0.2 * y) + math.atan(x) + np.arcsinh(y) + math.acosh(x * x + 1.5)
    s += np.arctanh(0.3 * y) + math.erf(x) + np.exp2(y) + math.fabs(y) + np.abs(x)
    s += math.atan2(x, y) + np.arctan2(y, 2.0) + math.hypot(x, y) + np.hypot(3.0, y)
    s += max(x, y) + min(x, 0.5) + np.maximum(y, x) + np.minimum(1.0, y) + math.pow(x * x, 0.3)
    s += np.power(abs(y), 1.5) + x ** 2 + 2.0 ** y + (-x) + (+y) + x.real
    s += np.add(x, 1.0) + np.subtract(y, x) + np.multiply(x, y) + np.divide(y, 3.0)
    s += np.negative(x) + np.absolute(y)
    return s


@numba.njit
def _ieee(x):
    """Division by zero, powers of negatives, logs of negatives: inf and nan, not
    exceptions (the branches keep the output finite)."""
    a = x / (x - x)
    b = (-x) ** 0.5
    c = math.log(-x)
    out = x
    if a > 1e300:
        out = out * 2.0
    if b != b:
        out = out + 1.0
    if c != c:
        out = out * 3.0
    return out


@numba.njit
def _with_data(k, data, index):
    """Data arrays (floats and integers): numpy scalars meet Actives on both sides."""
    s = 0.0
    for i in range(data.size):
        d = data[i]
        s += (k * d - 1.0) ** 2 + d * k + d / (k + 3.0) - d
        if d < k:
            s += 0.5 * k
        if k > d:
            s += k * 0.25
    return s * index[0] + k * index[1]


@numba.njit
def _array_ops(x, k):
    """Whole-array arithmetic both ways round, in-place updates on views, ufuncs, np.full
    of a value, np.array of values, 2-D arrays, reshape and the like allocators."""
    a = x * k + 1.0
    b = 2.0 - a / 3.0 + x ** 2 + 0.5 * x
    b[1:] += a[:-1]
    b *= 0.9
    b -= k
    b /= 1.1
    c = np.maximum(a, b) + np.minimum(b, 0.2) + np.arctan2(a, 2.0) + np.hypot(b, a)
    c = c + np.power(np.abs(a), 1.5) - (-b) + np.tanh(c)
    m = np.zeros((2, 3))
    for i in range(2):
        for j in range(3):
            m[i, j] = c[i + j] * (i - j)
    row = m[1]
    row[0] = row[0] + k
    f = np.full(3, k)
    g = np.array([k, 2.0, x[0]])
    e = np.empty_like(f)
    e[:] = f * g
    o = np.ones(2)
    z = np.ones_like(x, np.int64)
    flat = m.reshape(6)
    return (np.sum(c) + c.mean() + np.mean(b) + np.dot(a, b) + np.dot(DATA, x) + m.sum()
            + e.sum() + o[1] * flat[4] + z[0] + len(x) + x.size + m.shape[1] + m.ndim)


CASES = [
    (pendulum, (THETA,), None), (heat, (np.linspace(0.5, 1.5, 10),), None),
    (grid, (0.7, 1.3), None), (piecewise, (0.25,), None), (piecewise, (2.0,), None),
    (spiral, (np.array([0.3, 1.1, 2.0]),), None), (smooth, (DATA, 0.4), None),
    (array_model, (np.array([0.3, -1.2, 0.8]), np.array([9.8, 0.4])), None),
    (_signed_zero, (np.array([1.0]),), None), (_updated_copy, (DATA[:3],), None),
    (_swapped_buffers, (DATA[:3],), None), (_reshaped, (DATA,), None),
    (_functions, (0.7, -0.4), None), (_ieee, (2.0,), None),
    (_with_data, (0.8, DATA, np.array([2, 3])), 0), (_array_ops, (DATA, 0.6), None),
]


def _bits(values):
    """The values' bits, every nan as one (a nan's sign differs between numpy's power and
    the C library's)."""
    return np.where(np.isnan(values), np.nan, values).tobytes()


def _recordings(fn, args, argnums):
    j = at.jit(fn, argnums)
    arrays = j._arguments(args)
    engine.FORCE_PYTHON_TIER[0] = True
    try:
        python = j._record(arrays)
    finally:
        engine.FORCE_PYTHON_TIER[0] = False
    return python, j._record(arrays)       # (the suite compiles in the foreground)


@pytest.mark.parametrize("fn, args, argnums", CASES, ids=[c[0].__name__ for c in CASES])
def test_python_records_the_compiled_recorders_rows(fn, args, argnums):
    (pv, pr, (pops, pvals, pn), pshape, pdec), (cv, cr, (cops, cvals, cn), cshape, cdec) = \
        _recordings(fn, args, argnums)
    assert pn == cn and pn > 0
    np.testing.assert_array_equal(pops, cops[:cn])
    assert _bits(pvals) == _bits(cvals[:cn])                  # bit for bit (-0.0 too)
    assert _bits(pv) == _bits(np.asarray(cv, np.float64))
    np.testing.assert_array_equal(pr, cr)
    assert pshape == cshape and pdec == cdec


@pytest.mark.parametrize("body, why", [
    ("float(x) * 2.0", "float"), ("int(x) + 1.0", "int"), ("1.0 if x else 2.0", "bool"),
    ("math.floor(x) * 1.0", "math.floor"), ("math.ceil(x) * 1.0", "math.ceil")])
def test_python_refuses_what_numba_refuses(body, why):
    with pytest.raises(TypeError, match=why.replace(".", r"\.")):
        jit_python.record(_python(body), [1.5], [0])


def _python(body):
    """def f(x): return <body>, as Python mode runs fn's source."""
    names = jit_python.namespace({"math": math}, None)
    exec(f"def f(x):\n    return {body}\n", names)
    return names["f"]


def test_a_recording_too_long_for_python_stops(monkeypatch):
    monkeypatch.setattr(jit_python, "PYTHON_ROWS_MAX", 1000)
    with pytest.raises(jit_python.TooLong):
        jit_python.record(_python("[x := x * 1.0001 for _ in range(2000)][-1]"), [1.5], [0])


def _fresh(scale):
    """A model no earlier run compiled a recorder for (``scale`` is in its digest)."""
    @numba.njit
    def forced(theta):
        x, v = theta[0], theta[1]
        for i in range(100):
            a = -theta[2] * math.sin(x) - 0.1 * v + scale * math.cos(0.7 * i * 0.05)
            x, v = x + 0.05 * v, v + 0.05 * a
        return x * x + v * v
    return forced


def test_the_first_call_records_in_python_while_a_helper_compiles_the_recorder(
        monkeypatch, capfd):
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    model = _fresh(1.0 + int.from_bytes(os.urandom(4), "little") * 1e-12)
    calls = []
    record = jit_python.record
    monkeypatch.setattr(jit_python, "record", lambda *a: calls.append(1) or record(*a))
    f = at.jit(model)
    start = time.perf_counter()
    value, g = f.value_and_grad(THETA)
    assert time.perf_counter() - start < 2.0                    # no wait for numba
    assert calls == [1]
    assert "for at.jit beside the calls, its calls record in Python" in capfd.readouterr().err
    assert value.item() == pytest.approx(model(THETA), rel=1e-14)
    step = 1e-6 * np.eye(4)
    central = [(model(THETA + e) - model(THETA - e)) / 2e-6 for e in step]
    np.testing.assert_allclose(g.numpy(), central, rtol=1e-6, atol=1e-9)
    tree, = f._trees.values()
    key = next(k for k in background._jobs if k.startswith(f"at.jit {tree.module[0]} "))
    assert background.wait(key) == background.DONE
    recorder, = f._recorders.values()
    arrays = f._arguments((THETA * 1.1,))
    f._record(arrays)                                          # loaded from disk
    assert calls == [1] and sum(recorder.stats.cache_hits.values()) == 1
    assert not recorder.stats.cache_misses or not sum(recorder.stats.cache_misses.values())


def test_python_fails_where_numba_would_and_the_call_waits_for_numbas_error(monkeypatch):
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    scale = 1.0 + int.from_bytes(os.urandom(4), "little") * 1e-12

    @numba.njit
    def drops(x):
        return float(x) * scale
    with pytest.raises(TypeError, match=r"at.jit\(drops\): cannot record at .*"
                                        r"test_jit_python.py:\d+: float\(\)"):
        at.jit(drops).grad(1.0)


def test_recorders_of_different_functions_have_different_symbols():
    """Two functions alike but for a value they read get symbols of their own (a process
    loading both recorders from the cache links each to its own)."""
    one, two = at.jit(_fresh(1.0)), at.jit(_fresh(2.0))
    for f in (one, two):
        f._recorder([1])
    (tree_one,), (tree_two,) = one._trees.values(), two._trees.values()
    assert tree_one.functions[-1][0] == tree_two.functions[-1][0]        # same name
    assert tree_one.functions[-1][1] != tree_two.functions[-1][1]        # own symbols
    same = at.jit(_fresh(1.0))
    same._recorder([1])
    assert next(iter(same._trees.values())).functions[-1][1] == tree_one.functions[-1][1]


SECOND = """
import numpy as np, autotape as at
from test_jit_python import _fresh
f = at.jit(_fresh(SCALE))
f.grad(np.array([1.0, 0.2, 9.8, 0.1]))
recorder, = f._recorders.values()
print(sum(recorder.stats.cache_hits.values()))
"""


def test_a_second_process_loads_the_recorder_the_helper_compiled(monkeypatch):
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    scale = 1.0 + int.from_bytes(os.urandom(4), "little") * 1e-12
    f = at.jit(_fresh(scale))
    f.grad(THETA)
    tree, = f._trees.values()
    key = next(k for k in background._jobs if k.startswith(f"at.jit {tree.module[0]} "))
    assert background.wait(key) == background.DONE
    out = subprocess.run([sys.executable, "-c", SECOND.replace("SCALE", repr(scale))],
                         capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(__file__),
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "1"


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_data_whose_numpy_promotions_differ_from_numbas_waits_for_the_compiled_recorder(
        monkeypatch, dtype):
    """float32 or int32 data: numpy 2 keeps x * 2.5 a float32 where numba computes in
    float64, so Python would not record what numba does: no Python mode, no helper."""
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    scale = 1.0 + int.from_bytes(os.urandom(4), "little") * 1e-12

    @numba.njit
    def weighted(k, data):
        return k * (data[0] * 2.5 + scale)
    f = at.jit(weighted, argnums=0)
    arrays = f._arguments((0.5, np.array([1.5, 2.0], dtype)))
    recorder = f._recorder([0, None])
    jobs = dict(background._jobs)
    assert f._record_beside(recorder, [0, None], arrays, [0.5, arrays[1]]) is None
    assert background._jobs == jobs
