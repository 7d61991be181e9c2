"""Benchmarks run every library on one thread, side by side in the same process.

A peer that is not installed is skipped. Run:
    python -m pytest benchmarks --benchmark-json=bench.json
    python benchmarks/report.py bench.json
"""
import os

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
