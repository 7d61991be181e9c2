"""Start-up: a fresh process importing autotape and reaching its first gradient, with an
empty numba cache (cold: the kernels its op families need compile) and with a warm one,
also from a second copy of the source (the cache is keyed on the kernels' code, not
their path). Each cold round uses a new cache directory, so rounds are few.

    python -m pytest benchmarks/test_startup.py --benchmark-json=s.json
    python benchmarks/report.py s.json
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

import autotape

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


def run(code, cache_dir, pythonpath=None):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    env.pop("AUTOTAPE_BACKGROUND_WARMUP", None)     # as a user has it (conftest sets it)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tempfile.gettempdir())


def _quiet():
    """Wait for background warmups that earlier cold runs started (they would slow
    this one down)."""
    deadline = time.time() + 600
    while glob.glob(os.path.join(tempfile.gettempdir(), "autotape-cold-*", "kernels-*",
                                 "warmup.pid")) and time.time() < deadline:
        time.sleep(0.5)


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
    cache = tempfile.mkdtemp(prefix="autotape-warm-")
    run(EVERY_FAMILY + THEN_COMPILE, cache)
    benchmark.pedantic(run, args=(EVERY_FAMILY + THEN_COMPILE, cache), rounds=5)


@pytest.mark.benchmark(group="start-up, warm cache: fresh process to first gradient")
def test_warm_cache_second_checkout(benchmark):
    """The cache filled from this checkout, used by a copy of the package elsewhere."""
    cache = tempfile.mkdtemp(prefix="autotape-warm-")
    run(EVERY_FAMILY + THEN_COMPILE, cache)
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
