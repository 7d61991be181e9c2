"""Doctests see ``at`` (autotape) and ``np`` without importing them. BLAS runs on one
thread, as every library does in benchmarks/ (it must be set before numpy loads).
Compiles happen in the foreground, so that a test knows which code a call ran."""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("AUTOTAPE_BACKGROUND_WARMUP", "0")   # tests compile in the foreground,
os.environ.setdefault("AUTOTAPE_BACKGROUND_COMPILE", "0")  # when tests say (test_background.py

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import autotape  # noqa: E402


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace["at"] = autotape
    doctest_namespace["np"] = np


@pytest.fixture
def loop_bodies(monkeypatch):
    """Compiled programs run their loop bodies (kernels/loops.py), not the whole program
    as generated code (codegen.py, tested in tests/test_codegen_cpu.py)."""
    monkeypatch.setenv("AUTOTAPE_GENERATED", "0")


@pytest.fixture(scope="session")
def compiled_function_kernels():
    """Tests of compiling beside the calls (AUTOTAPE_BACKGROUND_COMPILE=1) are of loop
    bodies and generated programs: the kernels around them are on disk first, as on a
    warm cache, so their calls never run f as eager code meanwhile (eager_calls.py,
    tested in tests/test_eager_calls.py)."""
    from autotape import warmup
    warmup.compiled_function_kernels()
