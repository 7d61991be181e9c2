"""Intra-op threads: how many threads one large-array op may use, as torch's
``set_num_threads``; and the one lock that numba's workqueue threading layer needs.

The count covers the three places work is split: numpy's elementwise ops on large
arrays (chunks run in a small pool of Python threads; numpy and autotape's kernels
release the GIL), the compiled sweep's elementwise loops on large rows (numba's
threads), and numpy's OpenBLAS (its own threads, set to the same count, so that a
matrix product and the ops around it never use more threads than asked for).
Default: ``OMP_NUM_THREADS`` if set, else the cores this process may run on.

>>> at.set_num_threads(1); at.get_num_threads()
1
"""
import concurrent.futures
import contextlib
import os
import threading

import numba

from .kernels.blas import set_blas_threads

PARALLEL_MIN = 1 << 18          # elements: below this an op runs on the calling thread
_state = {"threads": 1, "pool": None}
_pool_lock = threading.Lock()


def _default_threads():
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                      # (not Linux)
        return os.cpu_count() or 1


def set_num_threads(n):
    """Use up to ``n`` threads per large-array op (numpy chunks, the sweep's loops and
    BLAS); 1 runs everything on the calling thread."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_num_threads expects a positive integer, but got {n!r}")
    n = min(n, numba.config.NUMBA_NUM_THREADS)
    _state["threads"] = n
    set_blas_threads(n)


def get_num_threads():
    """The number of threads a large-array op may use (see set_num_threads)."""
    return _state["threads"]


def for_numba():
    """Tell numba, for the calling thread, how many threads its parallel loops get."""
    n = _state["threads"]
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    return n


def in_chunks(work, n):
    """Run ``work(lo, hi)`` over [0, n) in up to get_num_threads() pieces at once (the
    calling thread takes the first); one piece when n is small."""
    k = min(_state["threads"], n // (PARALLEL_MIN // 2))
    if k <= 1:
        work(0, n)
        return
    pool = _state["pool"]
    if pool is None or pool._max_workers < k - 1:
        with _pool_lock:
            pool = _state["pool"]
            if pool is None or pool._max_workers < k - 1:
                pool = _state["pool"] = concurrent.futures.ThreadPoolExecutor(
                    max_workers=max(k - 1, 1), thread_name_prefix="autotape")
    bounds = [n * j // k for j in range(k + 1)]
    futures = [pool.submit(work, bounds[j], bounds[j + 1]) for j in range(1, k)]
    work(bounds[0], bounds[1])
    for f in futures:
        f.result()                              # (re-raises a worker's exception)


_PARALLEL_LOCK = threading.Lock()


def parallel_launch():
    """numba's workqueue threading layer (used where neither OpenMP nor TBB is there)
    aborts the process when two threads launch parallel kernels at once: with it (or
    before the layer is known) launches take turns; OpenMP and TBB need nothing."""
    try:
        layer = numba.threading_layer()
    except ValueError:                      # no parallel kernel has run yet
        return _PARALLEL_LOCK
    return contextlib.nullcontext() if layer in ("omp", "tbb") else _PARALLEL_LOCK


set_num_threads(_default_threads())
