"""Custom-op drivers compiled beside the calls (kernels/calls.py): until a helper process
has compiled a program's driver, its calls run the same ranges and the same numba
functions from Python, with the same numbers bit for bit; then they switch to the
compiled driver, which a later process loads from disk. The driver on disk is named
after a digest of everything numba compiles into it from the user's functions, so a
change to any of them is a new driver, never a stale one.

Each background test makes an op of its own, closing over a random constant (so that
its driver is not on disk yet: the suite otherwise runs with
AUTOTAPE_BACKGROUND_COMPILE=0, see conftest.py)."""
import glob
import os
import re
import subprocess
import sys
import textwrap
import time

import numba
import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.kernels import background, calls
from autotape.pytree import flatten

THETA, X0 = np.array([0.7, 0.4]), np.array([1.0, -0.5])


@numba.njit
def pull(x):
    return np.sin(x)


def decay_op(scale):
    """x' = -k x + c * scale * sin(x) for 50 Euler steps, as a custom op of numba
    functions (closures over ``scale``) with a forward-mode VJP."""
    @numba.njit
    def forward(theta, x0):
        x = x0.copy()
        for _ in range(50):
            x = x + 0.01 * (-theta[0] * x + theta[1] * scale * pull(x))
        return x

    @numba.njit
    def vjp(inputs, out, g):
        theta, x0 = inputs
        x = x0.copy()
        d_theta, d_x0 = np.zeros((x.size, 2)), np.eye(x.size)
        for _ in range(50):
            step = 1.0 + 0.01 * (-theta[0] + theta[1] * scale * np.cos(x))
            local = np.empty((x.size, 2))
            local[:, 0] = -0.01 * x
            local[:, 1] = 0.01 * scale * pull(x)
            d_theta = step[:, None] * d_theta + local
            d_x0 = step[:, None] * d_x0
            x = x + 0.01 * (-theta[0] * x + theta[1] * scale * pull(x))
        return (g @ d_theta, g @ d_x0)
    return at.custom_op(forward, vjp, name="decay")


@numba.njit
def stretch_forward(a, v):
    return a * v[None, :]


@numba.njit
def stretch_vjp(inputs, out, g):
    a, v = inputs
    return (g * v[None, :], (g * a).sum(axis=0))


stretch = at.custom_op(stretch_forward, stretch_vjp)    # (matrix operand and output)


def model_of(op):
    def model(theta, x0):
        y = op(theta, x0)
        return (y ** 2).sum() + at.sin(theta[0]) * y[1]
    return model


def _scale():
    return 1.0 + int.from_bytes(os.urandom(6), "little") / 2.0 ** 48


def _lean(c):
    return c._lean("value", [THETA, X0]).lean


def _python_meanwhile(monkeypatch):
    """Every driver runs by Python, as while its helper compiles."""
    monkeypatch.setattr(calls.Driver, "runner", lambda self, args: None)


@pytest.mark.parametrize("kind", ["decay", "matrix"])
def test_the_python_driver_computes_the_compiled_drivers_numbers(kind, monkeypatch):
    if kind == "decay":
        c = at.compile(model_of(decay_op(1.25)), THETA, X0)
        points = (THETA * np.linspace(0.5, 1.5, 7)[:, None], X0 * np.linspace(1.2, 0.8, 7)[:, None])
        args = (THETA, X0)
    else:
        A, b = np.arange(6.0).reshape(2, 3) * 0.1 - 0.2, np.array([0.5, -1.0, 2.0])

        def f(a, v):
            return (stretch(a * 1.5, at.sin(v)) * np.arange(6.0).reshape(2, 3)).sum()
        c = at.compile(f, A, b)
        points = (A * np.linspace(0.5, 1.5, 7)[:, None, None], b * np.linspace(1.2, 0.8, 7)[:, None])
        args = (A, b)
    compiled = [c.value_and_grad(*args), F.vmap(c.grad)(*points), F.vmap(c)(*points),
                c.jacobian(*args)]
    assert c._lean("value", list(args)).lean.driver._ready      # (the compiled driver ran)
    _python_meanwhile(monkeypatch)
    by_python = [c.value_and_grad(*args), F.vmap(c.grad)(*points), F.vmap(c)(*points),
                 c.jacobian(*args)]
    for want, got in zip(flatten(compiled)[0], flatten(by_python)[0]):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_the_python_driver_says_what_a_wrong_forward_did(monkeypatch):
    @numba.njit
    def forward(x):
        return x[:1] if x[0] > 1.0 else x * 2.0       # the wrong size past 1
    op = at.custom_op(forward, numba.njit(lambda inputs, y, g: (2.0 * g,)), name="twice")
    c = at.compile(lambda x: op(x).sum(), np.array([0.5, 0.5]))
    with pytest.raises(ValueError) as compiled:
        c.grad(np.array([2.0, 0.5]))
    _python_meanwhile(monkeypatch)
    with pytest.raises(ValueError) as by_python:
        c.grad(np.array([2.0, 0.5]))
    assert str(by_python.value) == str(compiled.value)
    assert "custom op twice: forward returned the wrong number of elements" in \
        str(by_python.value)


def test_calls_run_by_python_until_the_driver_compiled_beside_them_is_ready(
        monkeypatch, capfd):
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    op = decay_op(_scale())
    op.forward(THETA, X0), op.vjp((THETA, X0), X0, X0)     # (the user's own compiles)
    c = at.compile(model_of(op), THETA, X0)
    got = []
    for s in (1.0, 1.1, 0.9):
        start = time.perf_counter()
        got.append(c.value_and_grad(THETA * s, X0))
        assert time.perf_counter() - start < 1.0            # no call waits on numba
    driver = _lean(c).driver
    assert not driver._ready                                 # (the helper takes seconds)
    err = capfd.readouterr().err
    assert err.count("compiling the driver of custom op(s) decay beside the calls") == 1
    jobs = [key for key in background._jobs if key.startswith("custom-op driver")
            and background.state(key) in (background.QUEUED, background.RUNNING)]
    assert len(jobs) == 1
    assert background.wait(jobs[0]) == background.DONE
    for s, (v, g) in zip((1.0, 1.1, 0.9), got):               # the same numbers, compiled
        wv, wg = c.value_and_grad(THETA * s, X0)
        assert v.item() == wv.item()
        assert [t.numpy().tolist() for t in g] == [t.numpy().tolist() for t in wg]
    assert driver._ready
    assert "compiling the driver" not in capfd.readouterr().err   # loaded, not compiled
    # numba names what it compiles by a count of its own in each process: the helper's
    # count starts at a random number, so that no other process's functions of these
    # names get linked for the user's (kernels/cache.py's ``distinct``)
    key = jobs[0].split()[-1]
    (data,) = glob.glob(os.path.join(os.path.dirname(
        driver._ready[np.dtype(np.float64)].py_func.__globals__["__file__"]),
        "__pycache__", f"driver_{key}.run-*.nbc"))
    with open(data, "rb") as f:
        counts = re.findall(rb"7forwardB\d+v(\d+)", f.read())
    assert counts and min(int(n) for n in counts) > 1 << 20


_SECOND_PROCESS = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    import autotape as at
    from test_calls_beside import decay_op, model_of, THETA, X0, _lean
    op = decay_op({scale!r})
    c = at.compile(model_of(op), THETA, X0)
    v, g = c.value_and_grad(THETA, X0)
    run = _lean(c).driver._ready.get(np.dtype(np.float64))
    stats = run and run.stats
    print(run and sum(stats.cache_hits.values()), run and sum(stats.cache_misses.values()),
          repr(v.item()))
""")


def test_a_second_process_loads_the_driver_and_a_changed_function_is_a_new_one(monkeypatch):
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    scale = _scale()
    c = at.compile(model_of(decay_op(scale)), THETA, X0)
    want = c.value_and_grad(THETA, X0)[0].item()
    (job,) = [key for key in background._jobs if key.startswith("custom-op driver")
              and background.state(key) in (background.QUEUED, background.RUNNING)]
    background.wait(job)
    env = dict(os.environ, **{background.ENABLED_ENV: "1"})

    def second(scale):
        code = _SECOND_PROCESS.format(tests=os.path.dirname(__file__), scale=scale)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=600)
        assert out.returncode == 0, out.stderr
        return out.stdout.split(), out.stderr
    (hits, misses, value), err = second(scale)
    assert (hits, misses) == ("1", "0") and float(value) == want
    assert "compiling the driver" not in err and "program ended" not in err
    (hits, misses, value), err = second(scale * 1.5)         # (another closure value)
    assert "compiling the driver of custom op(s) decay beside the calls" in err
    assert (hits, misses) == ("None", "None") and float(value) != want   # (by Python)


def test_the_digest_names_what_numba_compiles_in():
    def digest(op):
        return calls._digest("source", [(op.forward, op.vjp)])
    assert digest(decay_op(2.0)) == digest(decay_op(2.0))     # (another function object)
    assert digest(decay_op(2.0)) != digest(decay_op(2.5))     # a closure's value
    assert digest(stretch) != digest(at.custom_op(stretch_forward, numba.njit(
        lambda inputs, out, g: (g * inputs[1][None, :], (g * inputs[0]).sum(axis=0)))))

    class Settings:
        scale = 2.0
    settings = Settings()

    @numba.njit
    def reads_an_object(x):
        return x * settings.scale
    assert calls._digest("source", [(reads_an_object, reads_an_object)]) is None


def test_the_digest_follows_callees_and_is_the_same_in_another_process(tmp_path):
    module = tmp_path / "user_ops.py"
    source = textwrap.dedent("""
        import numba, numpy as np
        WEIGHTS = np.array([1.0, 2.0])
        @numba.njit
        def inner(x):
            return x * {factor} + WEIGHTS
        @numba.njit(fastmath=True)
        def forward(x):
            return inner(x) if x.size in {{1, 2, 3}} else x
    """)
    module.write_text(source.format(factor="3.0"))
    code = ("import sys; sys.path.insert(0, {path!r}); import user_ops\n"
            "from autotape.kernels import calls\n"
            "print(calls._digest('s', [(user_ops.forward, user_ops.forward)]))")
    env = dict(os.environ, PYTHONHASHSEED="random")

    def digest():
        out = subprocess.run([sys.executable, "-c", code.format(path=str(tmp_path))],
                             capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()
    first = digest()
    assert len(first) == 24 and digest() == first           # (a frozenset's order varies)
    module.write_text(source.format(factor="3.5"))           # a callee's code
    assert digest() != first


def test_the_digest_follows_names_read_from_the_users_modules(tmp_path, monkeypatch):
    """``physics.step(x)`` and ``physics.DT``: what the bytecode reads from a module of
    the user's is named (a library's, as numpy's, by the module's name)."""
    (tmp_path / "physics.py").write_text(textwrap.dedent("""
        import numba
        DT = 0.01
        @numba.njit
        def step(x):
            return x * (1.0 - DT)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import physics

    @numba.njit
    def forward(x):
        return physics.step(x) + physics.DT * np.linalg.norm(x)
    first = calls._digest("source", [(forward, forward)])
    assert first is not None
    monkeypatch.setattr(physics, "DT", 0.02)                 # a constant it reads
    assert calls._digest("source", [(forward, forward)]) not in (first, None)
    monkeypatch.setattr(physics, "step", numba.njit(lambda x: x * 0.5))   # a callee
    assert calls._digest("source", [(forward, forward)]) not in (first, None)


def test_a_helper_refuses_functions_that_differ_from_the_callers(tmp_path):
    op = decay_op(3.0)
    driver = calls.Driver("source", [(op.forward, op.vjp, "decay", [(2,), (2,)], (2,))], [])
    assert driver.digest is not None
    driver.digest = "not the digest"
    path = str(tmp_path / "recipe.pkl")
    assert driver._recipe(path, "k", ())
    with pytest.raises(RuntimeError, match="differ from the calling process's"):
        calls.compile_driver(path)
