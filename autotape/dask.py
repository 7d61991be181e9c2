"""autotape.dask: a compiled function over a dask array of points, on dask's workers.

When an ensemble, a parameter sweep or a batch of fits outgrows one machine, dask runs
the chunks; autotape runs each chunk as one batched compiled call
(``autotape.func.vmap``), and the results are dask arrays that compute to exactly what
one machine computes:

    import dask.array as da
    import autotape as at
    import autotape.dask as atd

    c = at.compile(loss, theta0)
    thetas = da.from_array(points, chunks=(10_000, 4))
    values, grads = atd.map_points(c.value_and_grad, thetas)
    values, grads = dask.compute(values, grads)      # any scheduler

The compiled program travels to each worker once, not once per chunk: on a
``distributed`` cluster it is the result of one task, replicated to every worker (a
worker lost with it costs that task again, not the computation; distributed's active
memory manager may later drop copies no task waits for, and a worker then fetches it
once from another); for dask's process scheduler
it is written to one temporary file that each worker process reads once; the threaded
scheduler shares the object. Workers load kernels from their own disk cache.

Threads: each chunk runs on ``threads_per_chunk`` numba threads (default 1), so a dask
worker with T threads uses T cores; size a cluster as workers x threads per worker <=
cores per node.
"""
import contextlib
import os
import pickle
import tempfile
import uuid
import weakref

import dask
import dask.array as da

try:
    import distributed                   # (optional: dask's local schedulers need none)
except ImportError:
    distributed = None
import numpy as np

from .compile import Compiled
from .parallel import limit_threads
from .pytree import flatten

__all__ = ["map_points"]

METHODS = ("__call__", "grad", "value_and_grad", "jacobian", "hessian")


def map_points(fn, points, *, threads_per_chunk=1, client=None):
    """``fn`` (a ``Compiled`` or its ``grad`` / ``value_and_grad`` / ``jacobian`` /
    ``hessian``) at every point of ``points``, a dask array (or an array) whose leading
    axis runs over points and whose other axes are f's one argument. Returns dask arrays
    in fn's result structure, each with the leading axis of points and chunked as
    ``points`` is along it.

    The program goes to the workers of ``client`` (by default the ``distributed``
    client in use, if any) or of dask's local schedulers (see the module's docstring).
    One point is evaluated here at the first call for a method and point shape, for
    the results' shapes (kept for later calls; every chunk checks its results' shapes).

    >>> import dask.array as da
    >>> import autotape.dask as atd
    >>> c = at.compile(lambda x: (x ** 2).sum(), np.ones(2))
    >>> value, grad = atd.map_points(c.value_and_grad, da.ones((6, 2), chunks=3))
    >>> value.compute()
    array([2., 2., 2., 2., 2., 2.])
    >>> grad.shape
    (6, 2)
    """
    compiled, method = _compiled_and_method(fn)
    if not isinstance(threads_per_chunk, int) or threads_per_chunk < 1:
        raise ValueError(f"map_points: threads_per_chunk must be a positive integer, "
                         f"not {threads_per_chunk!r}")
    points = da.asarray(points)
    if points.ndim == 0:
        raise ValueError("map_points: points needs a leading axis of points; got a 0-d "
                         "array")
    if points.dtype.kind not in "fiub":
        raise TypeError(f"map_points: points must be numeric, not {points.dtype}")
    shape, n = points.shape[1:], points.shape[0]
    if np.isnan(n):
        raise ValueError("map_points: the number of points must be known (call "
                         "compute_chunk_sizes() on points first)")
    flat = points.reshape(n, -1).rechunk({1: -1}) if points.ndim != 2 else \
        points.rechunk({1: -1})
    structure, shapes, dtype = _layout(compiled, method, flat, shape)
    sizes = [int(np.prod(s)) for s in shapes]
    handle = _handle(compiled, client)
    packed = flat.map_blocks(_evaluate_chunk, handle, method, shape, threads_per_chunk,
                             shapes, dtype=dtype, chunks=(flat.chunks[0], (sum(sizes),)))
    # each result one task a chunk, cut from the packed chunk (slicing then reshaping
    # the packed array made three, ~40% of the tasks a small ensemble waits on)
    results, start = [], 0
    for result_shape, size in zip(shapes, sizes):
        results.append(packed.map_blocks(
            _cut, start, size, result_shape, dtype=dtype,
            chunks=(packed.chunks[0],) + tuple((m,) for m in result_shape),
            drop_axis=[] if result_shape else [1],
            new_axis=list(range(2, 1 + len(result_shape)))))
        start += size
    return structure(results)


def _cut(packed, start, size, shape):
    """One result's columns of a packed chunk, in its shape."""
    return packed[:, start:start + size].reshape((packed.shape[0],) + shape)


def _compiled_and_method(fn):
    if isinstance(fn, Compiled):
        return fn, "__call__"
    owner, name = getattr(fn, "__self__", None), getattr(fn, "__name__", None)
    if isinstance(owner, Compiled) and name in METHODS:
        return owner, name
    raise TypeError("map_points: expected a Compiled (at.compile) or its grad, "
                    "value_and_grad, jacobian or hessian, not "
                    f"{type(fn).__name__}")


_LAYOUTS = weakref.WeakKeyDictionary()  # Compiled -> {(method, point shape, dtype): layout}


def _layout(compiled, method, flat, shape):
    """The results' structure, each result's shape at one point, and their common dtype:
    from one point evaluated here at the first ensemble of this method and point shape
    (a round trip to the cluster for the point: ~17 ms of a 20,000-point ensemble's
    0.3 s on two workers), kept for later ones. Every chunk checks its results against
    it (_evaluate_chunk)."""
    layouts = _LAYOUTS.setdefault(compiled, {})
    key = (method, shape, flat.dtype.str)
    if key not in layouts:
        point = np.asarray(flat[:1].compute()).reshape((1,) + shape)
        leaves, structure = flatten(compiled.map_points(method, (point,)))
        layouts[key] = (structure, [leaf.shape[1:] for leaf in leaves],
                        np.result_type(*(leaf.dtype for leaf in leaves)))
    return layouts[key]


def _evaluate_chunk(block, handle, method, shape, threads, shapes):
    """One chunk of points: one batched compiled call, the results packed side by side
    as (points, values) in float; ``shapes``: each result's shape at a point, as the
    graph was laid out (a result of another shape raises: cut at the wrong columns, it
    would be silently wrong)."""
    compiled = handle if isinstance(handle, Compiled) else handle.compiled
    points = np.ascontiguousarray(block).reshape((block.shape[0],) + shape)
    with limit_threads(threads):
        result = compiled.map_points(method, (points,))
    leaves, _ = flatten(result)
    got = [tuple(leaf.shape[1:]) for leaf in leaves]
    if got != [tuple(s) for s in shapes]:
        raise RuntimeError(f"map_points: f's results at these points have shapes {got}, "
                           f"where its results at the first point had {list(shapes)}: "
                           "their shapes must not depend on the point")
    return np.concatenate([np.asarray(leaf.numpy()).reshape(block.shape[0], -1)
                           for leaf in leaves], axis=1)


# ---- the program, sent once per worker -----------------------------------------------------

_HANDLES = weakref.WeakKeyDictionary()      # Compiled -> {client id or None: handle}


def _handle(compiled, client):
    """What the chunk tasks receive for the program (see the module's docstring): made
    once per program and client, so later ensembles reuse the copies the workers hold
    (with their compiled loop bodies)."""
    if client is None:
        client = _active_client()
    handles = _HANDLES.setdefault(compiled, {})
    key = None if client is None else id(client)
    handle = handles.get(key)
    if handle is not None and (client is None or handle.status == "finished"):
        return handle
    if client is None:
        handle = _Shipped(compiled)
    else:
        # a task rather than scattered data: a worker killed while holding the program
        # loses no more than a task result, which the scheduler computes again (a
        # scattered value lost with its workers fails every computation needing it)
        handle = client.submit(pickle.loads, pickle.dumps(compiled), pure=False)
        client.replicate([handle])             # (every worker holds it once)
    handles[key] = handle
    return handle


def _active_client():
    """The distributed client dask computes with now, if any."""
    if distributed is None:
        return None
    try:
        client = distributed.default_client()
    except ValueError:
        return None
    scheduler = dask.base.get_scheduler()
    return client if scheduler is None or scheduler == client.get else None


_LOADED = {}          # token -> Compiled, in each process that read a _Shipped file


class _Shipped:
    """A Compiled that pickles as a token and the name of a file holding it, written
    once: a worker process reads the file at its first chunk and keeps the program (the
    threaded scheduler never pickles it at all). For dask's local process scheduler:
    the file is on this machine."""

    def __init__(self, compiled, token=None, path=None):
        self.compiled, self.token, self.path = compiled, token or uuid.uuid4().hex, path

    def __reduce__(self):
        if self.path is None:
            fd, path = tempfile.mkstemp(prefix="autotape-program-", suffix=".pkl")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(self.compiled, f)
            self.path = path
            weakref.finalize(self, _remove, path)
        return _load, (self.token, self.path)


def _load(token, path):
    compiled = _LOADED.get(token)
    if compiled is None:
        try:
            with open(path, "rb") as f:
                compiled = pickle.load(f)
        except FileNotFoundError:
            raise RuntimeError(
                f"autotape.dask: the compiled program was written to {path} for dask's "
                "local process scheduler, which this worker cannot read: for a "
                "distributed cluster, call map_points while its Client is active (or "
                "pass client=)") from None
        _LOADED[token] = compiled
    return _Shipped(compiled, token, path)


def _remove(path):
    with contextlib.suppress(OSError):
        os.remove(path)
