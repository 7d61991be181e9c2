"""Start-up: a fresh process importing autotape and reaching its first gradient,
with an empty numba cache (cold: every kernel compiles) and with a warm one."""
import os
import subprocess
import sys
import tempfile

import pytest

SCRIPT = ("import autotape as at; x = at.tensor([1.0, 2.0], requires_grad=True); "
          "y = (at.sin(x) * x).sum() + (x[0] * 2.0) ** 2; y.backward(); x.grad.numpy()")


def first_gradient(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True)


@pytest.mark.benchmark(group="start-up: fresh process to first gradient")
def test_cold_cache(benchmark):
    def setup():
        return (tempfile.mkdtemp(prefix="autotape-cold-"),), {}
    benchmark.pedantic(first_gradient, setup=setup, rounds=1)


@pytest.mark.benchmark(group="start-up: fresh process to first gradient")
def test_warm_cache(benchmark):
    cache = tempfile.mkdtemp(prefix="autotape-warm-")
    first_gradient(cache)
    benchmark.pedantic(first_gradient, args=(cache,), rounds=5)


@pytest.mark.benchmark(group="start-up: fresh process to first gradient")
def test_python_and_numpy_import_only(benchmark):
    """The floor: the interpreter starting and importing numpy."""
    benchmark.pedantic(subprocess.run, args=([sys.executable, "-c", "import numpy"],),
                       kwargs={"check": True}, rounds=5)
