"""Memory is given back: after a large backward is dropped, the process's resident
memory returns to within 20 MiB of what it was before (the adjoint scratch kept between
sweeps is capped; a larger one is freed with the sweep's results), at once or, where
freed memory is kept for reuse (memory.py), once the program has been idle for
memory.IDLE_SECONDS."""
import gc
import importlib
import os
import time

import numpy as np
import pytest

import autotape as at
from autotape.thread_state import here
from autotape import executor, memory
from autotape.parallel import PARALLEL_MIN

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"),
                                reason="reads the resident set size from /proc")


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def large_backward(n):
    x = at.tensor(np.linspace(-1, 1, n), requires_grad=True)
    y = (at.sin(x) * x + at.exp(-x) * x ** 2).sum()
    g, = at.grad(y, x)
    return float(g.numpy()[0])


def test_rss_returns_after_a_large_backward():
    large_backward(PARALLEL_MIN + 1)           # every kernel the large run uses loaded
    large_backward(1000)                       # (compiling one costs resident memory)
    gc.collect()
    memory.give_back()                         # a baseline without other tests' leftovers
    before = rss_mib()
    large_backward(2_000_000)                  # ~250 MiB of adjoints and values
    gc.collect()
    waited = 0.0
    while memory.KEPT and rss_mib() - before >= 20 and waited < 10 * memory.IDLE_SECONDS:
        time.sleep(0.25)                        # the idle trim
        waited += 0.25
    assert rss_mib() - before < 20, (before, rss_mib(), waited)


def test_small_scratch_is_kept_between_sweeps():
    here().scratch = None                  # (not a large one an earlier test left, which
    large_backward(1000)                   # the idle trim may drop at any moment)
    kept = here().scratch
    large_backward(1000)
    assert here().scratch is kept and kept.nbytes <= executor.KEEP_SWEEP_SCRATCH_BYTES


def test_an_expression_on_large_arrays_stays_on_one_tape(monkeypatch):
    # (the tape's size limit scaled down to 1 MiB; the arrays are 1 MiB each) a graph
    # split over tapes sweeps each apart and copies adjoints between them, which doubled
    # the peak memory of a 10^7-element gradient; past the limit only a loop's next
    # iteration (an op from leaves alone, once the tape holds 16 of its largest rows)
    # opens a new tape
    tape_module = importlib.import_module("autotape.tape")
    monkeypatch.setattr(tape_module, "MAX_ARRAY_BYTES", 1 << 20)
    n = (1 << 20) // 8
    x = at.tensor(np.linspace(-1, 1, n), requires_grad=True)
    y = (at.sin(x) * x + x ** 2 / (1 + at.exp(-x)) + at.cos(x) * at.tanh(x)).sum()
    assert not y._tape.imports
    rows = [at.sin(x) * k for k in range(20)]           # a loop of 20 from the leaf
    assert rows[-1]._tape is not rows[0]._tape
