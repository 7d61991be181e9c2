"""Start-up: a fresh process importing autotape and reaching its first gradient, with an
empty numba cache (cold: the kernels its op families need compile) and with a warm one,
also from a second copy of the source (the cache is keyed on the kernels' code, not
their path). Each cold round uses a new cache directory, so rounds are few.

    python -m pytest benchmarks/test_startup.py --benchmark-json=s.json
    python benchmarks/report.py s.json
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

import autotape
from autotape.kernels.cache import process_alive

SCALAR = ("import autotape as at\n"
          "x = at.tensor(0.5, requires_grad=True)\n"
          "at.grad(at.sin(x) * x + x ** 2, x)\n")
# elementwise, reductions, indexing, matmul and numpy.linalg rows on one tape
EVERY_FAMILY = ("import numpy as np, autotape as at\n"
                "x = at.tensor(np.linspace(0.1, 1, 12).reshape(3, 4), requires_grad=True)\n"
                "a = at.tensor(np.eye(3) * 2 + 0.1, requires_grad=True)\n"
                "loss = (at.exp(x) * x).sum(axis=0).max() + x[1:, ::2].sum() "
                "+ (a @ x).sum() + at.linalg.det(a) + at.linalg.inv(a).sum()\n"
                "at.grad(loss, [x, a])\n")
THEN_COMPILE = ("f = at.compile(lambda u: (at.sin(u) * u).sum(), np.ones(3))\n"
                "f.grad(np.ones(3))\n")
WARMED = []                 # a cache `python -m autotape warmup` filled, for the warm rows


def warm_cache():
    """A cache as ``python -m autotape warmup`` leaves it (once per session)."""
    if not WARMED:
        cache = tempfile.mkdtemp(prefix="autotape-warm-")
        subprocess.run([sys.executable, "-m", "autotape", "warmup"], check=True,
                       env=dict(os.environ, NUMBA_CACHE_DIR=cache),
                       cwd=tempfile.gettempdir(), capture_output=True)
        WARMED.append(cache)
    return WARMED[0]


def run(code, cache_dir, pythonpath=None):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    env.pop("AUTOTAPE_BACKGROUND_WARMUP", None)     # as a user has it (conftest sets it)
    env.pop("AUTOTAPE_BACKGROUND_COMPILE", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tempfile.gettempdir())


def _quiet():
    """Wait for background warmups that earlier cold runs started (they would slow
    this one down; a warmup stopped with its program leaves its pid file behind)."""
    deadline = time.time() + 600
    while time.time() < deadline and any(
            _pid(path) and process_alive(_pid(path)) for path in glob.glob(os.path.join(
                tempfile.gettempdir(), "autotape-cold-*", "kernels-*", "warmup.pid"))):
        time.sleep(0.5)


def _pid(path):
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def _cold(benchmark, code):
    def setup():
        _quiet()
        return (code, tempfile.mkdtemp(prefix="autotape-cold-")), {}
    benchmark.pedantic(run, setup=setup, rounds=1)
    _quiet()


@pytest.mark.benchmark(group="start-up, empty cache: fresh process to first gradient")
def test_cold_scalar_program(benchmark):
    _cold(benchmark, SCALAR)


@pytest.mark.benchmark(group="start-up, empty cache: fresh process to first gradient")
def test_cold_every_op_family(benchmark):
    _cold(benchmark, EVERY_FAMILY)


@pytest.mark.benchmark(group="start-up, empty cache: fresh process to first gradient")
def test_cold_every_op_family_then_first_compile(benchmark):
    _cold(benchmark, EVERY_FAMILY + THEN_COMPILE)


@pytest.mark.benchmark(group="start-up, warm cache: fresh process to first gradient")
def test_warm_cache(benchmark):
    cache = warm_cache()
    benchmark.pedantic(run, args=(EVERY_FAMILY + THEN_COMPILE, cache), rounds=5)


@pytest.mark.benchmark(group="start-up, warm cache: fresh process to first gradient")
def test_warm_cache_second_checkout(benchmark):
    """The cache filled from this checkout, used by a copy of the package elsewhere."""
    cache = warm_cache()
    copy = tempfile.mkdtemp(prefix="autotape-checkout-")
    shutil.copytree(os.path.dirname(autotape.__file__), os.path.join(copy, "autotape"))
    check = EVERY_FAMILY + THEN_COMPILE + (
        "from autotape.kernels import cache\n"
        f"assert at.__file__.startswith({copy!r}), at.__file__\n"
        "assert not cache.COMPILED, cache.COMPILED\n")
    benchmark.pedantic(run, args=(check, cache, copy), rounds=5)


@pytest.mark.benchmark(group="start-up, warm cache: fresh process to first gradient")
def test_python_and_numpy_import_only(benchmark):
    """The floor: the interpreter starting and importing numpy."""
    benchmark.pedantic(subprocess.run, args=([sys.executable, "-c", "import numpy"],),
                       kwargs={"check": True}, rounds=5)


# The driven pendulum (benchmarks/workloads.py), its first 12 value-and-gradient calls
# timed one by one in a fresh process, the longest after the first reported in
# extra_info: no call after the first waits on the compiler (its loop body compiles in
# a helper process, kernels/background.py). Each run has a cache of its own, so the
# body is compiled afresh.
FIRST_CALLS = """
import json, math, sys, time
import numpy as np
import autotape as at
sys.path.insert(0, {here!r})
import workloads as W
def model(theta):
    x, v = theta[0], theta[1]
    for i in range(1000):
        x, v = W.driven_rk4_step(theta, x, v, i * W.DT, W.DT, at.sin, math.cos)
    return x * x + v * v
theta = np.array([0.3, 0.1, 1.0, 0.2])
start = time.perf_counter()
c = at.compile(model, theta)
times = []
for _ in range(12):
    t = time.perf_counter()
    c.value_and_grad(theta)
    times.append(time.perf_counter() - t)
times[0] += t - start - sum(times[:-1])          # (the first: compile() and its call)
print(json.dumps(times))
"""


def _script_once(benchmark, script, cache):
    """One timed round of ``script`` (formatted with ``here``) in a fresh process on
    ``cache``, as a user runs it; the JSON its last line prints."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    for name in ("AUTOTAPE_BACKGROUND_WARMUP", "AUTOTAPE_BACKGROUND_COMPILE"):
        env.pop(name, None)                          # as a user has them
    out = []

    def once():
        done = subprocess.run([sys.executable, "-c", script.format(
            here=os.path.dirname(__file__))], env=env, check=True, capture_output=True,
            text=True, cwd=tempfile.gettempdir())
        out.append(json.loads(done.stdout.splitlines()[-1]))
    benchmark.pedantic(once, rounds=1)
    return out[-1]


def _first_calls(benchmark, cache):
    times = _script_once(benchmark, FIRST_CALLS, cache)
    benchmark.extra_info["first call s"] = round(times[0], 3)
    benchmark.extra_info["longest later call s"] = round(max(times[1:]), 4)
    benchmark.extra_info["calls ms"] = [round(t * 1e3, 1) for t in times]


@pytest.mark.benchmark(group="start-up: the first 12 calls of a compiled loop")
def test_first_calls_of_a_new_loop_empty_cache(benchmark):
    _quiet()
    _first_calls(benchmark, tempfile.mkdtemp(prefix="autotape-cold-"))
    _quiet()


@pytest.mark.benchmark(group="start-up: the first 12 calls of a compiled loop")
def test_first_calls_of_a_new_loop_warm_cache(benchmark):
    """The kernels on disk, the loop's body not: it compiles beside the calls."""
    _first_calls(benchmark, warm_cache())


# The README's tour with every call timed, as a script in a fresh process on an empty
# cache: the first gradient, and the longest call after it (none waits on the compiler:
# the sweeps and compiled functions run on the Python tier and as eager code meanwhile,
# at.jit's recording runs by Python while its recorder compiles beside).
TOUR = """
import json, time
t0 = time.perf_counter()
import numpy as np
import autotape as at
import autotape.func as F
import numba
times = {"import": time.perf_counter() - t0}
def timed(name, call):
    t = time.perf_counter()
    out = call()
    times[name] = time.perf_counter() - t
    return out
def first():                                # (its forward too: numba starts there)
    global x, y
    x = at.tensor([5.0, 3.0], requires_grad=True)
    y = at.sin(x) * x + x ** 2
    return at.grad(y.sum(), x, retain_graph=True)
timed("first gradient", first)
timed("backward", lambda: y.sum().backward())
def higher():
    g, = at.grad((x ** 3).sum(), x, create_graph=True)
    return at.grad(g.sum(), x)
timed("create_graph", higher)
def rosen(u):
    return (100 * (u[1:] - u[:-1] ** 2) ** 2 + (1 - u[:-1]) ** 2).sum()
f = timed("at.compile", lambda: at.compile(rosen, np.zeros(10)))
timed("value_and_grad", lambda: f.value_and_grad(np.full(10, 0.5)))
timed("hessian", lambda: f.hessian(np.full(10, 0.5)))
points = np.random.default_rng(0).normal(size=(1000, 10))
timed("vmap 1000 points", lambda: F.vmap(f.value_and_grad)(points))
def trajectory(p):
    x, v, xs = at.tensor(1.0), at.tensor(0.0), []
    for _ in range(50):
        x, v = x + 0.1 * v, v - 0.1 * (p[0] * x + p[1] * v)
        xs.append(x)
    return at.stack(xs)
timed("jacfwd", lambda: at.compile(trajectory, np.ones(2)).jacfwd(np.array([4.0, 0.2])))
def banana(q):
    return (q[0] - 1.0) ** 2 + 100.0 * (q[1] - q[0] ** 2) ** 2
g = at.jit(numba.njit(banana))
timed("at.jit first call", lambda: g.value_and_grad(np.array([0.5, 0.5])))
timed("at.jit second call", lambda: g.value_and_grad(np.array([0.6, 0.5])))
print(json.dumps(times))
"""


@pytest.mark.benchmark(group="start-up: the README tour, every call timed")
def test_tour_every_call_empty_cache(benchmark):
    _quiet()
    env = dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp(prefix="autotape-cold-"))
    for name in ("AUTOTAPE_BACKGROUND_WARMUP", "AUTOTAPE_BACKGROUND_COMPILE"):
        env.pop(name, None)                          # as a user has them
    out = {}

    script = os.path.join(tempfile.mkdtemp(prefix="autotape-tour-"), "tour.py")
    with open(script, "w") as f:                     # (a file: at.jit reads fn's source)
        f.write(TOUR)

    def once():
        done = subprocess.run([sys.executable, script], env=env, check=True,
                              capture_output=True, text=True, cwd=tempfile.gettempdir())
        out["times"] = json.loads(done.stdout.splitlines()[-1])
    benchmark.pedantic(once, rounds=1)
    times = out["times"]
    later = {k: v for k, v in times.items() if k not in ("import", "first gradient")}
    benchmark.extra_info["import s"] = round(times["import"], 3)
    benchmark.extra_info["first gradient s"] = round(times["first gradient"], 3)
    benchmark.extra_info["longest later call s"] = round(max(later.values()), 3)
    benchmark.extra_info["at.jit first call s"] = round(times["at.jit first call"], 3)
    benchmark.extra_info["calls ms"] = {k: round(v * 1e3, 1) for k, v in times.items()}
    _quiet()


# A compiled function calling an existing numba solver as a custom op (benchmarks/
# test_custom.py's pendulum), on a warm cache: its driver is each program's own (a new
# one each run: the solver closes over a random number), compiled by a helper while its
# calls run the solver and its VJP from Python. Every call timed for ~15 s; the user's
# own compiles of the two functions come first, untimed.
CUSTOM_FIRST_CALLS = """
import json, os, sys, time
import numba
import numpy as np
sys.path.insert(0, {here!r})
import workloads as W
import autotape as at
SCALE = 1.0 + int.from_bytes(os.urandom(6), "little") / 2.0 ** 60
@numba.njit
def solver(theta):
    return W.pendulum_state_numba(theta, 1000) * SCALE
@numba.njit
def solver_vjp(inputs, state, g):
    return (W.pendulum_state_vjp(inputs[0], 1000, g * SCALE),)
theta = np.array([1.0, 0.0, 9.8, 0.1])
solver_vjp((theta,), solver(theta), solver(theta))
op = at.custom_op(solver, solver_vjp)
def loss(theta):
    state = op(theta)
    return (state * state).sum()
times, by_python, eager = [], 0, 0
start = time.perf_counter()
c = at.compile(loss, theta)
times.append(time.perf_counter() - start)
for k in range(60):
    t = time.perf_counter()
    c.value_and_grad(theta * (1.0 + 0.001 * k))
    times.append(time.perf_counter() - t)
    driver = getattr(c._lean("value", [theta]).lean, "driver", False)
    eager += driver is False                    # (f run as eager code)
    by_python += driver is None or (driver is not False and not driver._ready)
    time.sleep(0.25)
print(json.dumps([times, by_python, eager]))
"""


def _custom_first_calls(benchmark, cache):
    times, by_python, eager = _script_once(benchmark, CUSTOM_FIRST_CALLS, cache)
    benchmark.extra_info["at.compile s"] = round(times[0], 3)
    benchmark.extra_info["first call s"] = round(times[1], 3)
    benchmark.extra_info["longest later call s"] = round(max(times[2:]), 4)
    benchmark.extra_info["calls as eager code"] = eager
    benchmark.extra_info["calls by the Python driver"] = by_python
    benchmark.extra_info["calls ms"] = [round(t * 1e3, 2) for t in times]


@pytest.mark.benchmark(group="start-up: a compiled function calling numba custom ops")
def test_first_calls_with_custom_ops_warm_cache(benchmark):
    _custom_first_calls(benchmark, warm_cache())


@pytest.mark.benchmark(group="start-up: a compiled function calling numba custom ops")
def test_first_calls_with_custom_ops_empty_cache(benchmark):
    """f runs as eager code, its sweep on the Python tier calling the op's VJP."""
    _quiet()
    _custom_first_calls(benchmark, tempfile.mkdtemp(prefix="autotape-cold-"))
    _quiet()
