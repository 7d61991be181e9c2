"""Intra-op threads: how many threads one large-array op may use, as torch's
``set_num_threads``; and the one lock that numba's workqueue threading layer needs.

The count covers the places work is split: large +, -, *, / and x ** 2 and autotape's
own sin, cos and tanh in the forward, and the compiled sweep's large elementwise rows
and whole sums (numba's threads: one pool; every split gives the one-thread values bit
for bit), and numpy's OpenBLAS (its own threads, set to the same count, so that a matrix
product never uses more threads than asked for). Other forward ops stay numpy's own,
single-threaded: their values are numpy's to the bit.
Default: ``OMP_NUM_THREADS`` if set, else the cores this process may run on.

>>> at.set_num_threads(1); at.get_num_threads()
1
"""
import contextlib
import os
import threading

import numba

from .kernels.blas import set_blas_threads

PARALLEL_MIN = 1 << 18          # elements: below this an op runs on the calling thread
_state = {"threads": 1}


def usable_cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                      # (not Linux)
        return os.cpu_count() or 1


def _default_threads():
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return usable_cores()


def set_num_threads(n):
    """Use up to ``n`` threads per large-array op (numpy chunks, the sweep's loops and
    BLAS); 1 runs everything on the calling thread.

    >>> n = at.get_num_threads()
    >>> at.set_num_threads(1)
    >>> at.get_num_threads()
    1
    >>> at.set_num_threads(n)
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_num_threads expects a positive integer, but got {n!r}")
    n = min(n, numba.config.NUMBA_NUM_THREADS)
    _state["threads"] = n
    set_blas_threads(n)


def get_num_threads():
    """The number of threads a large-array op may use (see set_num_threads).

    >>> at.get_num_threads() >= 1
    True
    """
    return _state["threads"]


def for_numba():
    """Tell numba, for the calling thread, how many threads its parallel loops get."""
    n = _state["threads"]
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    return n


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
