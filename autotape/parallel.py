"""Intra-op threads: how many threads one large-array op may use, as torch's
``set_num_threads``; and the one lock that numba's workqueue threading layer needs.

The count covers the places work is split: large +, -, *, / and x ** 2 and autotape's
own sin, cos and tanh in the forward, and the compiled sweep's large elementwise rows
and whole sums (numba's threads: one pool; every split gives the one-thread values bit
for bit); numpy's other elementwise functions on large arrays (``ufunc_in_threads``:
numpy's own loop on a piece of the array per thread, so numpy's values to the bit); and
numpy's OpenBLAS (its own threads, set to the same count, so that a matrix product
never uses more threads than asked for).
Default: ``OMP_NUM_THREADS`` if set, else the cores this process may run on.

>>> at.set_num_threads(1); at.get_num_threads()
1
"""
import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from .errstate import ignore_fp_errors
from .kernels.blas import set_blas_threads
from .tuning import PARALLEL_MIN

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
    if n > 1 and _state.get("forked_omp"):
        raise RuntimeError(
            "set_num_threads: this process was forked after its parent ran numba's GNU "
            "OpenMP threads, which abort a forked child that uses them; it runs on one "
            "thread. Start worker processes with the spawn start method "
            "(multiprocessing.get_context('spawn')) to use threads in them.")
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
    """Tell numba, for the calling thread, how many threads its parallel loops get (the
    count set_num_threads set, or less inside ``limit_threads``); returns it."""
    n = _state["threads"]
    cap = getattr(_local, "cap", None)
    if cap is not None:
        n = min(n, cap)
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    return n


_local = threading.local()


@contextlib.contextmanager
def limit_threads(n):
    """At most ``n`` threads for the calling thread's work inside the block (chunks
    that run side by side in one worker process must not oversubscribe its cores)."""
    saved = getattr(_local, "cap", None)
    _local.cap = n if saved is None else min(n, saved)
    try:
        yield
    finally:
        _local.cap = saved


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


def on_threads(workers, work):
    """``work(w)`` for w = 0 .. workers - 1, each on a thread of its own (compiled code
    that releases the GIL runs side by side), inline where ``workers`` is 1; once all
    are done, the exception of the lowest w that raised one is raised here.

    >>> seen = []; on_threads(2, seen.append); sorted(seen)
    [0, 1]
    """
    if workers <= 1:
        work(0)
        return
    with ThreadPoolExecutor(workers) as pool:
        for done in [pool.submit(work, w) for w in range(workers)]:
            done.result()


def pieces(size):
    """How many pieces an op on ``size`` elements is split into (1: not split): up to
    the thread count, none smaller than PARALLEL_MIN / 2."""
    n = _state["threads"]
    if n == 1 or size < PARALLEL_MIN:
        return 1
    return min(n, size // (PARALLEL_MIN // 2))


_POOL = []              # the helper threads of ufunc_in_threads, made at first use
_POOL_LOCK = threading.Lock()


def _in_forked_child():
    """In a forked child the parent's helper threads do not exist (a pool there would
    take work and never run it): the child makes its own at first use. And where numba's
    threads are GNU OpenMP's, which aborts a forked child that uses them, the child runs
    on one thread (as torch does after a fork)."""
    global _POOL_LOCK
    _POOL.clear()
    _POOL_LOCK = threading.Lock()
    try:
        layer = numba.threading_layer()
    except ValueError:                      # no parallel kernel ran in the parent
        return
    if layer == "omp":
        _state["threads"], _state["forked_omp"] = 1, True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)


def _helpers():
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max(1, numba.config.NUMBA_NUM_THREADS - 1),
                                            thread_name_prefix="autotape-ufunc"))
    return _POOL[0]


def _ufunc_piece(ufunc, args, out, lo, hi):
    with ignore_fp_errors():                 # (numpy's error state is per thread)
        ufunc(*[a[lo:hi] if type(a) is np.ndarray else a for a in args], out=out[lo:hi])


def ufunc_in_threads(ufunc, args, out, count):
    """``ufunc(*args, out=out)`` in ``count`` pieces, one per thread, the calling thread
    doing the first: numpy's own loop on each piece (it releases the GIL), so the values
    are numpy's to the bit. ``args``: flat float64 arrays of out's size, or floats.

    >>> x = np.linspace(0.0, 1.0, 1 << 19)
    >>> out = np.empty_like(x)
    >>> ufunc_in_threads(np.exp, (x,), out, 2)
    >>> bool((out == np.exp(x)).all())
    True
    """
    n = out.size
    bounds = [k * n // count for k in range(count + 1)]
    pool = _helpers()
    rest = [pool.submit(_ufunc_piece, ufunc, args, out, bounds[k], bounds[k + 1])
            for k in range(1, count)]
    try:
        _ufunc_piece(ufunc, args, out, 0, bounds[1])
    finally:
        for f in rest:          # the pieces write into out: never return before they end
            f.result()


set_num_threads(_default_threads())
