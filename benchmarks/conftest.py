"""Benchmarks run every library on one thread, side by side in the same process.

A peer that is not installed is skipped. Run:
    python -m pytest benchmarks --benchmark-json=bench.json
    python benchmarks/report.py bench.json

With AUTOTAPE_BENCH_THREADS=all every library keeps all of the machine's cores (the
many-point groups of test_compiled.py are meant for that run):
    AUTOTAPE_BENCH_THREADS=all python -m pytest benchmarks/test_compiled.py -k points
"""
import os

ALL_CORES = os.environ.get("AUTOTAPE_BENCH_THREADS") == "all"
if not ALL_CORES:
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                       "intra_op_parallelism_threads=1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def torch():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


@pytest.fixture(scope="session")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


@pytest.fixture(scope="session")
def hips():
    return pytest.importorskip("autograd")


def run_paired(benchmark, ours, theirs, label, rounds=200):
    """One call of each per round, back to back, so that the drift of a shared machine
    hits both alike; extra_info[label] is the median of the per-round time ratios
    (ours / theirs)."""
    from time import perf_counter

    import numpy as np
    ratios = []

    def pair():
        t0 = perf_counter()
        ours()
        t1 = perf_counter()
        theirs()
        ratios.append((t1 - t0) / (perf_counter() - t1))
    benchmark.pedantic(pair, rounds=rounds, warmup_rounds=3)
    benchmark.extra_info[label] = round(float(np.median(ratios[3:])), 3)


@pytest.fixture(autouse=True)
def numba_threads():
    """numba's parallel kernels (autotape's many-point programs, the numba floor) and
    autotape's intra-op threads (at.set_num_threads) on one thread too, unless
    AUTOTAPE_BENCH_THREADS=all; a benchmark that compares thread counts sets its own."""
    import numba
    import autotape as at
    saved, saved_at = numba.get_num_threads(), at.get_num_threads()
    numba.set_num_threads(saved if ALL_CORES else 1)
    at.set_num_threads(saved_at if ALL_CORES else 1)
    yield
    numba.set_num_threads(saved)
    at.set_num_threads(saved_at)
