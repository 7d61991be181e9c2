"""The one driver of a lean program's points: load, forward, store, seed, reverse, store.

Every runner of a lean program takes its points through ``points_driver``'s ``drive``:
the interpreter's chunks of C points on one thread or on numba's threads
(kernels/program.py), a GPU thread's one point (kernels/gpu.py), a compiled loop
body's programs (kernels/loops.py), programs with users' compiled ops
(kernels/calls.py) and a loop swept in checkpointed segments (checkpointing.py). What
differs between them is how the program runs, given as three hooks:

    ran = forward(code, V, C, lane)                  the program forward at the points
    first, last = prepare(code, G, C, j0, j1, o, ran)     before output o's sweep: the
                                                     adjoints it zeroes itself, slots
                                                     [first, last) ((0, 0): none)
    ran = reverse(code, V, G, C, j0, j1, o, ran)     output o's reverse sweep

``code`` is the hook's own (a tuple of arrays, or any object in Python), ``ran`` what
the forward says it did (a settled loop's repetitions, kernels/settling.py; the reverse
may run them all and say so). Values live as ``V[slot * C + j]``: lane j of a chunk of
C holds point p0 + j (a short last chunk repeats its last point); ``drive`` fills lanes
j0 .. j1 - 1 (all C on a CPU thread, one on a GPU thread, whose hooks run lane j0).

Forward mode has its driver too, ``tangents_driver``: load the values and their K
tangent lanes (``T[(slot * K + l) * C + j]``), one hook ``tangents(code, V, T, C, K,
lane)`` running the program forward with them, store both; lanes as above.

Generated code (codegen.py) is not among them: it binds a point's inputs to scalars and
has no slots to load.

One source serves every caller: compiled into CPU kernels (taken into them whole, with
the steps called as kernels of the disk cache), into the GPU's (register_jitable), and
run as Python over the compiled steps, for hooks written in Python (checkpointed
segments, users' ops while their driver compiles).
"""
import numba
import numpy as np
from numba.extending import register_jitable

from .cache import cached_njit, distinct

__all__ = ["points_driver", "tangents_driver", "load_points", "store_points", "seed_points",
           "store_adjoint_points", "load_tangent_points", "store_tangent_points",
           "zero_nothing", "compile_steps"]


@register_jitable
def load_points(V, C, j0, j1, const_slots, const_vals, in_slots, X, p0):
    """Constants and points p0 + j of X (B, inputs) into lanes j0 <= j < j1 of V."""
    m = min(C, X.shape[0] - p0)
    for k in range(const_slots.size):
        s = const_slots[k] * C
        for j in range(j0, j1):
            V[s + j] = const_vals[k]
    for e in range(in_slots.size):
        s = in_slots[e] * C
        for j in range(j0, j1):
            V[s + j] = X[p0 + min(j, m - 1), e]      # (a short last chunk repeats)


@register_jitable
def store_points(V, C, j0, j1, out_slots, values, p0):
    """The output slots' lanes into rows p0 + j of values (B, outputs), points < B."""
    m = min(j1, values.shape[0] - p0)
    for o in range(out_slots.size):
        s = out_slots[o] * C
        for j in range(j0, m):
            values[p0 + j, o] = V[s + j]


@register_jitable
def seed_points(G, C, j0, j1, first, last, out_slot):
    """Zero the lanes' adjoints outside slots [first, last) (those the hook's prepare
    zeroed: (0, 0) for none), then seed the output slot's with ones."""
    if j0 == 0 and j1 == C:                     # (every lane: two flat runs, a memset)
        for i in range(first * C):
            G[i] = 0.0
        for i in range(max(first, last) * C, G.size):
            G[i] = 0.0
    else:
        for s in range(first):
            for j in range(j0, j1):
                G[s * C + j] = 0.0
        for s in range(max(first, last), G.size // C):
            for j in range(j0, j1):
                G[s * C + j] = 0.0
    for j in range(j0, j1):
        G[out_slot * C + j] = 1.0


@register_jitable
def store_adjoint_points(G, C, j0, j1, in_slots, jac, p0, o):
    """The inputs' adjoints into row o of jac (B, outputs, inputs) at points p0 + j."""
    m = min(j1, jac.shape[0] - p0)
    for e in range(in_slots.size):
        s = in_slots[e] * C
        for j in range(j0, m):
            jac[p0 + j, o, e] = G[s + j]


@register_jitable
def load_tangent_points(V, T, C, K, j0, j1, const_slots, const_vals, in_slots, X, S, p0):
    """load_points, and the lanes' tangents: zero for constants, S's for the inputs (S
    has one row per point, or one for all)."""
    m = min(C, X.shape[0] - p0)
    shared = S.shape[0] == 1
    for k in range(const_slots.size):
        s = const_slots[k]
        for j in range(j0, j1):
            V[s * C + j] = const_vals[k]
            for l in range(K):
                T[(s * K + l) * C + j] = 0.0
    for e in range(in_slots.size):
        s = in_slots[e]
        for j in range(j0, j1):
            p = p0 + min(j, m - 1)
            V[s * C + j] = X[p, e]
            for l in range(K):
                T[(s * K + l) * C + j] = S[0 if shared else p, e, l]


@register_jitable
def store_tangent_points(V, T, C, K, j0, j1, out_slots, values, tangents, p0):
    """The outputs' values and tangents (B, outputs, K) at points p0 + j < B."""
    m = min(j1, values.shape[0] - p0)
    for o in range(out_slots.size):
        s = out_slots[o]
        for j in range(j0, m):
            values[p0 + j, o] = V[s * C + j]
            for l in range(K):
                tangents[p0 + j, o, l] = T[(s * K + l) * C + j]


@register_jitable
def zero_nothing(code, G, C, j0, j1, o, ran):
    """The prepare of a hook that keeps no adjoints between sweeps: seed zeroes all."""
    return 0, 0


# the steps as compiled kernels, for the driver in Python
_COMPILED_STEPS = tuple(cached_njit()(step) for step in (
    load_points, store_points, seed_points, store_adjoint_points))
_COMPILED_TANGENT_STEPS = tuple(cached_njit()(step) for step in (
    load_tangent_points, store_tangent_points))


def compile_steps(dtype):
    """Compile (or load) the steps a driver in Python calls, for values of ``dtype``,
    with the argument types its calls give them (warmup, loops.compile_around).

    >>> compile_steps(np.float64)
    """
    V, slots, consts = np.zeros(1, dtype), np.zeros(0, np.int64), np.zeros(0)
    X, values, jac = np.zeros((1, 0), dtype), np.zeros((1, 0), dtype), np.zeros((1, 0, 0), dtype)
    load, store, seed, store_adjoints = _COMPILED_STEPS
    load(V, 1, 0, 1, slots, consts, slots, X, 0)
    store(V, 1, 0, 1, slots, values, 0)
    seed(np.zeros(1, dtype), 1, 0, 1, 0, 0, np.int64(0))
    store_adjoints(V, 1, 0, 1, slots, jac, 0, 0)
    load_tangents, store_tangents = _COMPILED_TANGENT_STEPS
    load_tangents(V, np.zeros(1, dtype), 1, 1, 0, 1, slots, consts, slots, X, jac, 0)
    store_tangents(V, np.zeros(1, dtype), 1, 1, 0, 1, slots, values, jac, 0)


def _compiled(fn, inline):
    """``fn`` for compiled callers: with ``inline``, a numba function its CPU callers
    take in whole (their hooks too, if they are such functions), calling the steps as
    kernels of the disk cache: a compiled function of its own costs its callers'
    compile a pass over all it calls (a loop body's, ~1.4 s a level); else
    register_jitable, for the GPU's callers too."""
    if inline:
        return numba.njit(inline="always", error_model="numpy", nogil=True)(fn)
    return register_jitable(fn)


def points_driver(forward, prepare, reverse, *name, in_python=False, inline=False):
    """(drive, drive_chunks) over the hooks (see above); ``name``: what makes these
    hooks differ from another driver's (cache.distinct: compiled code is named by it).

        drive(code, const_slots, const_vals, in_slots, out_slots, X, values, jac,
              want_jac, p0, C, j0, j1, V, G)
        drive_chunks(code, const_slots, const_vals, in_slots, out_slots, X, values, jac,
                     want_jac, chunk0, chunks, step, C, V, G)

    ``drive`` runs points p0 + j0 .. p0 + j1 - 1 (lanes of a chunk of C): their values
    into ``values`` (B, outputs) and, with ``want_jac``, one reverse sweep per output
    into ``jac`` (B, outputs, inputs); ``drive_chunks`` the chunks chunk0, chunk0 +
    step, ... < chunks of C points each (a thread's share), with no Python between.
    ``in_python``: Python functions (over compiled steps); ``inline``: numba functions
    CPU callers take in whole (``_compiled``); neither: register_jitable.

    >>> drive, chunks = points_driver(None, None, None, "doc", in_python=True)
    >>> callable(drive) and callable(chunks)
    True
    """
    load, store, seed, store_adjoints = _COMPILED_STEPS if in_python or inline else (
        load_points, store_points, seed_points, store_adjoint_points)

    def drive(code, const_slots, const_vals, in_slots, out_slots, X, values, jac,
              want_jac, p0, C, j0, j1, V, G):
        load(V, C, j0, j1, const_slots, const_vals, in_slots, X, p0)
        ran = forward(code, V, C, j0)
        store(V, C, j0, j1, out_slots, values, p0)
        if want_jac:
            for o in range(out_slots.size):
                first, last = prepare(code, G, C, j0, j1, o, ran)
                seed(G, C, j0, j1, first, last, out_slots[o])
                ran = reverse(code, V, G, C, j0, j1, o, ran)
                store_adjoints(G, C, j0, j1, in_slots, jac, p0, o)

    return _with_chunks(drive, ("points",) + name, in_python, inline)


def tangents_driver(tangents, *name, in_python=False, inline=False):
    """(drive, drive_chunks) of forward mode over the hook ``tangents`` (see above):

        drive(code, const_slots, const_vals, in_slots, out_slots, X, S, values,
              tangents, p0, C, j0, j1, V, T)
        drive_chunks(code, ..., tangents, chunk0, chunks, step, C, V, T)

    at points p0 + j0 .. p0 + j1 - 1 (lanes of a chunk of C) of X (B, inputs), the K
    directions S (B or 1, inputs, K): values (B, outputs) and tangents (B, outputs, K).

    >>> drive, chunks = tangents_driver(None, "doc", in_python=True)
    >>> callable(drive) and callable(chunks)
    True
    """
    load, store = _COMPILED_TANGENT_STEPS if in_python or inline else (
        load_tangent_points, store_tangent_points)
    run = tangents

    def drive(code, const_slots, const_vals, in_slots, out_slots, X, S, values, tangents,
              p0, C, j0, j1, V, T):
        K = S.shape[2]
        load(V, T, C, K, j0, j1, const_slots, const_vals, in_slots, X, S, p0)
        run(code, V, T, C, K, j0)
        store(V, T, C, K, j0, j1, out_slots, values, tangents, p0)

    return _with_chunks(drive, ("tangents",) + name, in_python, inline)


def _with_chunks(drive, name, in_python, inline):
    """(drive, drive_chunks): ``drive`` compiled as asked, and its loop over a thread's
    chunks, every lane of each. The two drivers' ``drive`` take the same arguments but
    for the three after X: (values, jac, want_jac) or (S, values, tangents); ``name``
    starts with which driver it is."""
    if not in_python:
        drive = _compiled(distinct(drive, *name), inline)

    def drive_chunks(code, const_slots, const_vals, in_slots, out_slots, X, a, b, c,
                     chunk0, chunks, step, C, V, W):
        for chunk in range(chunk0, chunks, step):
            drive(code, const_slots, const_vals, in_slots, out_slots, X, a, b, c,
                  chunk * C, C, 0, C, V, W)

    if not in_python:
        drive_chunks = _compiled(distinct(drive_chunks, *name), inline)
    return drive, drive_chunks
