"""The compiled reverse sweep: one call per backward / grad, no Python per tape row.

The sweep marks the rows reachable backwards from the seeded outputs (``reach``), gives
each reachable row that can carry a gradient a slice of one flat adjoint buffer
(``allocate``), seeds the outputs (``seed``), then walks the rows in reverse and hands
each one to its family's VJP kernel. ``reverse_sweep`` composes the stages; it stops
at a run of large elementwise rows, which ``segment_vjp`` sweeps tile by tile on
numba's threads, and resumes. Both are called from executor.py only.

Lanes. One sweep can carry K cotangents at once (a whole Jacobian, a Hessian,
``is_grads_batched``): the adjoint buffer then holds K lane copies, lane k at
``k * total``, each with its own written-marks. Each row is handed to its kernel once
per lane while its values are still in cache; the kernels themselves never know about
lanes: the context's ``lane`` array says which copy of the adjoints they work on.
"""
import functools
import types

import numba
import numpy as np
from numba import carray
from numba.extending import register_jitable

from ..opcodes import (BINARY_FIRST, BINARY_LAST, CONST, INDEX_FIRST, INDEX_LAST,
                       LINALG_FIRST, LINALG_LAST, MATMUL, MEAN, REDUCE_FIRST, REDUCE_LAST,
                       PYTHON_FIRST, PYTHON_LAST, SELECT_LAST, SOURCE_LAST, SUM, UNARY_FIRST,
                       UNARY_LAST, WHERE)
from ..tape_format import A, B, OP, SHAPE, VLOC, operand, operand_count, reach
from .cache import cached_njit
from .context import (adjoint, f64_pointer, first_write, has_adjoint, size_of,
                      sweep_context, value)
from .elementwise import (binary_chunk, binary_partial_x, binary_partial_y, binary_vjp,
                          elementwise_vjp_lanes, passes_nothing, times, unary_loop,
                          unary_partial, unary_vjp, where_vjp)
from .indexing import indexing_vjp
from .linalg import linalg_vjp, matmul_vjp, matmul_vjp_lanes
from .reduce import reduce_vjp

# Status codes of a sweep; with UNKNOWN_OP and SPLIT the second result is the row.
OK, RELEASED, UNKNOWN_OP, SPLIT = 0, 1, 2, 3

# Kernel families (bits), so that a program compiles only what it uses. 0-d elementwise
# rows (scalar code) take the sweep's own path, in every variant; ``sweep_for`` gives the
# variant of ``reverse_sweep`` (which holds every family) for a tape's families, rounded
# up to one of VARIANTS so that few are ever compiled. numpy.linalg rows (LINALG) are in
# none: the sweep stops at one and the executor runs ``linalg_row_vjp``, a kernel of its
# own (their VJPs are the costliest to compile, and cost far more than a stop to run).
ELEMENTWISE, REDUCE, INDEX, MATMUL_FAMILY, LINALG, PYTHON = 1, 2, 4, 8, 16, 32
ALL_FAMILIES = ELEMENTWISE | REDUCE | INDEX | MATMUL_FAMILY     # those swept inline
VARIANTS = {0: "scalar", ELEMENTWISE | REDUCE: "elementwise and reduction",
            ALL_FAMILIES: "array"}
HAS_ELEMENTWISE = HAS_REDUCE = HAS_INDEX = HAS_MATMUL = True      # (see sweep_for)
# The state a sweep carries between its calls (``reverse_sweep``), int64, by position:
RESUME = 0          # the row it goes on from (< 0: a fresh sweep)
STRIDE = 1          # the adjoint space of a lane (elements)
TOP = 2             # the highest row it reached
STOPPED = 3         # why it stopped: SEGMENT, LINALG_ROW, HOOK_ROW or PYTHON_ROW
SEGMENT_BOTTOM = 4  # a segment's lowest row
SEGMENT_SIZE = 5    # the element count of a segment's rows
ONE_ROW_MIN = 6     # the size from which one row is a segment of its own (threads)
STOP_DONE = 10      # the stop row whose stop has been handled
SPLIT_STATE = 11
SEGMENT = 1         # state[STOPPED] of a sweep stopped at a segment (see segment_at)
LINALG_ROW = 4      # ... at a numpy.linalg row
HOOK_ROW = 5        # ... at a row named in ``stops``
PYTHON_ROW = 6      # ... at a CUSTOM row: the caller runs its VJP


@register_jitable
def _pass_scalar(adj, adj_off, touched, op, i, r, d, total, lanes):
    """0-d rows: r's adjoint += d * i's adjoint (``times``), in every lane where i's is
    written."""
    for k in range(lanes):
        if touched[k, i]:
            v = times(op, adj[k * total + adj_off[i]], d)
            if touched[k, r]:
                adj[k * total + adj_off[r]] += v
            else:
                adj[k * total + adj_off[r]] = v
                touched[k, r] = True


@register_jitable
def allocate(rows, ipool, shape_size, released, reached, top, seed_rows, read, adj_off):
    """Give each reached row that can carry a gradient its adjoint offset; returns the
    lane stride, or -1 when a reached row was released by an earlier sweep."""
    total = 0
    for i in range(top + 1):
        if reached[i] and rows[i, OP] != CONST:
            if released[i]:
                return -1
            if read.size == 0:
                adj_off[i] = total
                total += shape_size[rows[i, SHAPE]]
    if read.size:
        total = _recycled_offsets(rows, ipool, shape_size, reached, top, seed_rows, read,
                                  adj_off)
    return total


@register_jitable
def _recycled_offsets(rows, ipool, shape_size, reached, top, seed_rows, read, adj_off):
    """Adjoint offsets that reuse space: a row's adjoint is needed from the first write
    into it (when its last consumer is swept) until the row itself is swept, then its
    space goes to rows swept later. Rows in ``read`` (and sources) keep theirs. The
    lane stride shrinks to the peak of the live adjoints, so the lanes of a Hessian stay
    in cache. Returns that stride."""
    pinned = np.zeros(top + 1, np.bool_)
    for r in read:
        if 0 <= r <= top:
            pinned[r] = True
    free_off = np.empty(top + 1, np.int64)
    free_size = np.empty(top + 1, np.int64)
    nfree, bump = 0, 0
    pending = np.empty(max(top + 2, seed_rows.size), np.int64)   # rows to place
    for step in range(top + 2):
        count = 0
        if step == 0:
            for s in seed_rows:
                pending[count] = s
                count += 1
        else:
            i = top + 1 - step
            if not reached[i] or rows[i, OP] <= SOURCE_LAST or adj_off[i] < 0:
                continue
            for k in range(operand_count(rows, ipool, i)):
                pending[count] = operand(rows, ipool, i, k)
                count += 1
        for j in range(count):
            r = pending[j]
            if adj_off[r] >= 0 or rows[r, OP] == CONST:
                continue
            size = shape_size[rows[r, SHAPE]]
            found = -1
            for f in range(nfree - 1, max(nfree - 16, 0) - 1, -1):   # recent, same size
                if free_size[f] == size:
                    found = f
                    break
            if found >= 0:
                adj_off[r] = free_off[found]
                nfree -= 1
                free_off[found], free_size[found] = free_off[nfree], free_size[nfree]
            else:
                adj_off[r] = bump
                bump += size
        if step > 0 and not pinned[top + 1 - step]:    # swept: its space is free again
            i = top + 1 - step
            free_off[nfree], free_size[nfree] = adj_off[i], shape_size[rows[i, SHAPE]]
            nfree += 1
    return bump


@register_jitable
def seed(ctx, rows, shape_size, touched, seed_rows, seed_vals, seed_off, lanes):
    """Write (or add) each seed's values into its row's adjoint in every lane."""
    for j in range(seed_rows.size):
        r = seed_rows[j]
        size = shape_size[rows[r, SHAPE]]
        for k in range(lanes):
            ctx.lane[0] = k              # the kernels now see lane k
            values, start = adjoint(ctx, r), seed_off[j] + k * size
            if first_write(ctx, r):
                nonzero = 0
                for e in range(size):
                    values[e] = seed_vals[start + e]
                    nonzero += values[e] != 0.0
                touched[k, r] = nonzero > 0     # a zero lane stays unwritten: skipped
            else:
                for e in range(size):
                    values[e] += seed_vals[start + e]


@cached_njit(what="the reverse sweep for array ops")
def reverse_sweep(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                  arena_addr, arena_size, big_addr, released, retain,
                  seed_rows, seed_vals, seed_off, lanes, adj, row_addr, dgemm, read,
                  adj_off, touched, state, split_min, stops):
    """Returns (status, lane stride or the unknown or split row, adj_off, touched).
    ``adj`` is scratch
    space at least ``lanes`` times as long as the sizes of all rows together; seed j's
    values for all lanes are ``seed_vals[seed_off[j]:seed_off[j + 1]]``, lane-major.
    ``row_addr[row]``, where nonzero, is the address of a row's own adjoint buffer (one
    lane only; see kernels/context.py). ``dgemm`` is the address of a CBLAS dgemm, or 0
    for none (kernels/blas.py). ``read``: the rows whose adjoints the caller reads
    (every row when empty; -1 names none); those come back written in every lane, zeros
    included, and the others' space is reused as the sweep goes. The adjoint offsets
    (-1: no gradient reached the row) land in ``adj_off``, the written-marks in
    ``touched`` (lanes, rows); given empty, both are made here.

    Segments: with ``split_min`` > 0 (one lane), the sweep stops at an elementwise row
    of at least that many elements that starts a segment (``segment_at``) and returns
    SPLIT with the row, the segment in state; the caller runs ``segment_vjp``, then
    calls again with ``state[RESUME]`` set to the row below the segment.
    ``state[ONE_ROW_MIN]``: the size from which a segment of one row is worth it
    (threads). ``state`` (int64, SPLIT_STATE long, by the positions named above)
    carries the sweep between calls (written only with SPLIT); ``state[RESUME] < 0``
    starts one.

    Stops: a row r with ``stops[r]`` (uint8; ``stops`` may be shorter than the tape,
    or empty) that the sweep reaches makes it return SPLIT with state[STOPPED] ==
    HOOK_ROW when r's adjoint is complete and before r passes it on: the caller reads and may
    rewrite that adjoint (tensor hooks), marks it written in every lane, and calls again
    with state[RESUME] = state[STOP_DONE] = r."""
    fresh = state[RESUME] < 0
    if fresh:
        n = rows.shape[0]
        if adj_off.size < n:                      # (the caller may leave them to us)
            adj_off = np.empty(n, np.int64)
            touched = np.empty((lanes, n), np.bool_)
        adj_off[:] = -1
        reached, top = reach(rows, ipool, seed_rows)
        total = allocate(rows, ipool, shape_size, released, reached, top, seed_rows, read,
                         adj_off)
        if total < 0:
            return RELEASED, 0, adj_off, touched
        touched[:, :] = False                     # per lane: a lane never written is zero
    else:
        total, top = state[STRIDE], state[TOP]
    lane = np.array([0, total])               # [lane being swept, lane stride]
    ctx = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                        arena_addr, big_addr, adj.ctypes.data, adj_off, row_addr, touched,
                        lane, dgemm)
    start = top if fresh else state[RESUME]
    arena = carray(f64_pointer(arena_addr), arena_size)
    if fresh:
        seed(ctx, rows, shape_size, touched, seed_rows, seed_vals, seed_off, lanes)
    # sweep the rows: top .. 0 handed to their VJP kernels. (This stage stays in the
    # entry point's body: as a function of its own it costs a 50-lane Jacobian 8 us,
    # and numba compiles an always-inlined one twice, 12 s more of cold compile.)
    for i in range(start, -1, -1):
        if i < stops.size and stops[i] and adj_off[i] >= 0 and state[STOP_DONE] != i:
            state[STRIDE], state[TOP], state[STOPPED] = total, top, HOOK_ROW
            return SPLIT, i, adj_off, touched
        any_lane = False
        for k in range(lanes):
            if touched[k, i]:
                any_lane = True
                break
        if not any_lane:                       # unreached, a constant, or a zero adjoint
            continue
        op = rows[i, OP]
        if op <= SOURCE_LAST:
            continue
        a, b = rows[i, A], rows[i, B]
        if op <= BINARY_LAST and rows[i, VLOC] >= 0 and rows[a, VLOC] >= 0 and (
                b < 0 or rows[b, VLOC] >= 0):
            # all 0-d: the hot path of scalar code, straight from the derivative table
            x, z = arena[rows[a, VLOC]], arena[rows[i, VLOC]]
            if UNARY_FIRST <= op <= UNARY_LAST:
                if adj_off[a] >= 0:
                    _pass_scalar(adj, adj_off, touched, op, i, a, unary_partial(op, x, z),
                                 total, lanes)
                continue
            if BINARY_FIRST <= op <= BINARY_LAST:
                y = arena[rows[b, VLOC]]
                if adj_off[a] >= 0:
                    _pass_scalar(adj, adj_off, touched, op, i, a,
                                 binary_partial_x(op, x, y, z), total, lanes)
                if adj_off[b] >= 0:
                    _pass_scalar(adj, adj_off, touched, op, i, b,
                                 binary_partial_y(op, x, y, z), total, lanes)
                continue
        if PYTHON_FIRST <= op <= PYTHON_LAST:   # a user's op: its VJP is Python
            state[STRIDE], state[TOP], state[STOPPED] = total, top, PYTHON_ROW
            return SPLIT, i, adj_off, touched
        if (HAS_ELEMENTWISE or HAS_REDUCE) and split_min > 0 and \
                segment_at(ctx, i, state, split_min, stops):
            state[STRIDE], state[TOP] = total, top
            return SPLIT, i, adj_off, touched
        # kernels that take every lane at once (a row's partials or index map are
        # computed once); the others run once per lane. A family this variant leaves
        # out (see sweep_for) is an unknown op: the executor never lets that happen.
        if HAS_INDEX and INDEX_FIRST <= op <= INDEX_LAST:
            if not indexing_vjp(ctx, i, lanes):
                return UNKNOWN_OP, i, adj_off, touched
            continue
        if HAS_ELEMENTWISE and op == WHERE:
            where_vjp(ctx, i, lanes)
            continue
        if HAS_ELEMENTWISE and lanes > 1 and UNARY_FIRST <= op <= BINARY_LAST and \
                elementwise_vjp_lanes(ctx, i, lanes):
            continue
        if MATMUL < op <= LINALG_LAST:         # numpy.linalg: linalg_row_vjp
            state[STRIDE], state[TOP], state[STOPPED] = total, top, LINALG_ROW
            return SPLIT, i, adj_off, touched
        done = 0
        if HAS_MATMUL and op == MATMUL:
            done = matmul_vjp_lanes(ctx, i, lanes)
        for k in range(lanes):
            if not touched[k, i]:        # a zero adjoint in this lane
                continue
            ctx.lane[0] = k              # the kernels now see lane k
            if HAS_ELEMENTWISE and UNARY_FIRST <= op <= UNARY_LAST:
                unary_vjp(ctx, i)
            elif HAS_ELEMENTWISE and BINARY_FIRST <= op <= BINARY_LAST:
                binary_vjp(ctx, i)
            elif HAS_REDUCE and REDUCE_FIRST <= op <= REDUCE_LAST:
                if not reduce_vjp(ctx, i):
                    return UNKNOWN_OP, i, adj_off, touched
            elif HAS_MATMUL and op == MATMUL:
                if done != 3:
                    matmul_vjp(ctx, i, 3 & ~done)
            else:
                return UNKNOWN_OP, i, adj_off, touched
    for k in range(lanes):                     # read by the caller: never left unwritten
        ctx.lane[0] = k
        for j in range(read.size if read.size else top + 1):
            i = read[j] if read.size else j
            if 0 <= i <= top and adj_off[i] >= 0 and not touched[k, i]:
                adjoint(ctx, i)[:] = 0.0
    if not retain:
        for i in range(top + 1):
            if adj_off[i] >= 0 and rows[i, OP] > SOURCE_LAST:
                released[i] = 1
    lane[0] = touched[0, 0]                    # the owners of ctx's arrays live to here
    return OK, total, adj_off, touched


FAMILY_OF = np.zeros(PYTHON_LAST + 1, np.int64)
FAMILY_OF[UNARY_FIRST:SELECT_LAST + 1] = ELEMENTWISE
FAMILY_OF[REDUCE_FIRST:REDUCE_LAST + 1] = REDUCE
FAMILY_OF[INDEX_FIRST:INDEX_LAST + 1] = INDEX
FAMILY_OF[LINALG_FIRST:LINALG_LAST + 1] = LINALG
FAMILY_OF[MATMUL] = MATMUL_FAMILY
FAMILY_OF[PYTHON_FIRST:PYTHON_LAST + 1] = PYTHON


@cached_njit()
def families_of(rows, first):
    """The kernel families a sweep of rows ``first``... may need (a bitmask). A 0-d
    elementwise row of 0-d arena values needs none: the same test as the sweep's scalar
    path. (One compiled loop: as numpy calls it cost a small tape's sweep 12 us more.)"""
    families = 0
    for i in range(first, rows.shape[0]):
        op = rows[i, OP]
        if op < UNARY_FIRST or (op <= BINARY_LAST and rows[i, VLOC] >= 0 and
                                rows[rows[i, A], VLOC] >= 0 and
                                (rows[i, B] < 0 or rows[rows[i, B], VLOC] >= 0)):
            continue                           # a source, or the scalar path's
        families |= FAMILY_OF[op]
    return families


def _named(fn, name, globals_=None):
    """fn under another name (and other globals): numba's disk cache keys a function by
    its qualified name, so two compilations of one function need two names."""
    renamed = types.FunctionType(fn.__code__, globals_ or fn.__globals__, name)
    renamed.__qualname__ = name
    renamed.__doc__ = fn.__doc__
    return renamed


def variant_of(families):
    """The VARIANTS key whose kernel sweeps a tape of these ``families``."""
    masked = families & ALL_FAMILIES
    return 0 if not masked else next(v for v in VARIANTS if masked & ~v == 0)


def sweep_for(families):
    """The variant of ``reverse_sweep`` for a tape of these kernel ``families`` (a
    bitmask from ``families_of``)."""
    kernel = _FOR_FAMILIES.get(families)
    if kernel is None:
        kernel = _FOR_FAMILIES[families] = _variant(variant_of(families))
    return kernel


_FOR_FAMILIES = {}      # families -> the variant (a dict read per sweep)


@functools.cache
def _variant(families):
    """``reverse_sweep`` with only ``families``: the same code, the other families'
    branches pruned by numba (their HAS_* globals are False), cached on disk under a
    name of its own."""
    if families == ALL_FAMILIES:
        return reverse_sweep
    fn = reverse_sweep.py_func
    flags = {"HAS_ELEMENTWISE": bool(families & ELEMENTWISE),
             "HAS_REDUCE": bool(families & REDUCE), "HAS_INDEX": bool(families & INDEX),
             "HAS_MATMUL": bool(families & MATMUL_FAMILY)}
    variant = _named(fn, f"reverse_sweep_{families}", dict(fn.__globals__, **flags))
    return cached_njit(what=f"the reverse sweep for {VARIANTS[families]} ops")(variant)


@cached_njit(what="the reverse sweep for numpy.linalg ops")
def linalg_row_vjp(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
                   big_addr, adj, adj_off, row_addr, touched, dgemm, i, lanes, stride):
    """The VJP of the numpy.linalg row a sweep stopped at (status SPLIT, state[STOPPED] ==
    LINALG_ROW), every lane; False for an opcode with no kernel."""
    lane = np.array([0, stride])
    ctx = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                        arena_addr, big_addr, adj.ctypes.data, adj_off, row_addr, touched,
                        lane, dgemm)
    known = True
    for k in range(lanes):
        if touched[k, i]:
            lane[0] = k
            known = linalg_vjp(ctx, i)
            if not known:
                break
    lane[0] = touched[0, 0]                    # the owners of ctx's arrays live to here
    return known


# ---- a run of large elementwise rows, swept tile by tile ------------------------------------
# A segment: consecutive rows that are all elementwise on n elements (n >= the sweep's
# fuse_min), their operands of n elements or single elements that get no gradient, or
# whole sums and means of n elements, or rows no gradient reaches. segment_vjp sweeps it
# one tile of elements at a time: every row's VJP on elements lo .. hi, then the next
# tile. Per element that is the unfused sweep's arithmetic in its order (so its bits); the
# adjoints that live only inside the segment stay in a tile-sized buffer in cache instead
# of going to memory and back (an elementwise chain's sweep is memory-bound); and the
# tiles go to numba's threads, one launch per segment.
SEGMENT_MAX = 64    # rows
TILE = 16384       # elements: the tiles a row reads and writes stay in L2 (measured: 4096
                    # costs the 1M-element benchmark 6% more on one thread, 1024 20%)


@register_jitable
def _fits(ctx, r, n):
    """An operand of a segment's row: n elements, or one that gets no gradient."""
    size = size_of(ctx, r)
    return size == n or (size == 1 and not has_adjoint(ctx, r))


@register_jitable
def _segment_row(ctx, r, n):
    """Whether row r may be in a segment of n-element rows: a row no gradient reaches or
    passes through (skipped), a same-size unary or binary elementwise row, or a whole
    sum or mean of n elements."""
    op = ctx.rows[r, OP]
    if not has_adjoint(ctx, r) or op <= SOURCE_LAST or passes_nothing(op):
        return True
    a = ctx.rows[r, A]
    if UNARY_FIRST <= op <= UNARY_LAST:
        return size_of(ctx, r) == n and size_of(ctx, a) == n
    if BINARY_FIRST <= op <= BINARY_LAST:
        return size_of(ctx, r) == n and _fits(ctx, a, n) and _fits(ctx, ctx.rows[r, B], n)
    return (op == SUM or op == MEAN) and size_of(ctx, r) == 1 and size_of(ctx, a) == n


@register_jitable
def _passes(ctx, r):
    op = ctx.rows[r, OP]
    return has_adjoint(ctx, r) and op > SOURCE_LAST and not passes_nothing(op)


@register_jitable
def segment_at(ctx, i, state, fuse_min, stops):
    """Whether the sweep hands rows i, i - 1, ... to segment_vjp: row i is elementwise on
    (or sums) at least ``fuse_min`` elements, and the segment below it holds two rows
    that pass a gradient, or is large enough for threads. If so, leaves the segment's
    lowest row and size in state."""
    op, a = ctx.rows[i, OP], ctx.rows[i, A]
    if not _passes(ctx, i):
        return False
    if UNARY_FIRST <= op <= BINARY_LAST:
        n = size_of(ctx, i)
    elif op == SUM or op == MEAN:
        n = size_of(ctx, a)
    else:
        return False
    if n < fuse_min or not _segment_row(ctx, i, n):
        return False
    j, passing = i, 1              # (row 0 stays out: the sweep resumes below a segment)
    while j > 1 and i - j + 1 < SEGMENT_MAX and not (j - 1 < stops.size and stops[j - 1]) \
            and _segment_row(ctx, j - 1, n):
        j -= 1
        passing += _passes(ctx, j)
    if passing < 2 and n < state[ONE_ROW_MIN]:
        return False
    state[STOPPED], state[SEGMENT_BOTTOM], state[SEGMENT_SIZE] = SEGMENT, j, n
    return True


@register_jitable
def _segment_plan(ctx, top, bottom, read):
    """What segment_vjp does at each row, top down, in the unfused sweep's order:
    plan[m] for row top - m is [live, own slot, then for operands a and b: wanted,
    assign (else add), slot]. A slot >= 0 is a tile buffer: a row of the segment whose
    adjoint starts there (nothing wrote it before) and that the caller does not read;
    slots are reused once their row is swept. Marks the written operands in ``touched``
    as the unfused sweep does. Returns (plan, slots)."""
    count = top - bottom + 1
    plan = np.full((count, 8), -1, np.int64)
    local = np.zeros(count, np.bool_)          # may live in a tile buffer
    for m in range(count):
        local[m] = not ctx.touched[0, top - m]
    if read.size == 0:
        local[:] = False                       # every adjoint is read
    for r in read:
        if bottom <= r <= top:
            local[top - r] = False
    slot_of = np.full(count, -1, np.int64)
    free = np.empty(count, np.int64)
    nfree, slots = 0, 0
    for m in range(count):
        r = top - m
        plan[m, 0] = 0
        if _passes(ctx, r) and ctx.touched[0, r]:
            plan[m, 0], plan[m, 1] = 1, slot_of[m]
            op = ctx.rows[r, OP]
            binary = BINARY_FIRST <= op <= BINARY_LAST
            for k in range(2 if binary else 1):
                o = ctx.rows[r, A + k]
                plan[m, 2 + 3 * k] = has_adjoint(ctx, o)
                if not has_adjoint(ctx, o):
                    continue
                assign = first_write(ctx, o)
                plan[m, 3 + 3 * k] = assign
                if bottom <= o and local[top - o]:
                    if assign:
                        if nfree > 0:
                            nfree -= 1
                            slot_of[top - o] = free[nfree]
                        else:
                            slot_of[top - o] = slots
                            slots += 1
                    plan[m, 4 + 3 * k] = slot_of[top - o]
        if slot_of[m] >= 0:                    # swept: its buffer is free again
            free[nfree] = slot_of[m]
            nfree += 1
    return plan, slots


def _segment_vjp(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
                 big_addr, adj, adj_off, row_addr, touched, dgemm, top, bottom, n, stride,
                 read, chunks):
    """The VJPs of the segment rows top .. bottom (see segment_at), tile by tile, the
    tiles in ``chunks`` runs on numba's threads (one lane). A parallel entry point of
    its own: inside the sweep it would keep the sweep out of numba's on-disk cache.
    ``segment_vjp_serial`` is the same code compiled without threads, for one chunk:
    no launch to pay, and no OpenMP call in a forked child (which GNU OpenMP aborts)."""
    lane = np.array([0, stride])
    ctx = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                        arena_addr, big_addr, adj.ctypes.data, adj_off, row_addr, touched,
                        lane, dgemm)
    plan, slots = _segment_plan(ctx, top, bottom, read)
    tiles = (n + TILE - 1) // TILE
    for c in numba.prange(chunks):
        _segment_tiles(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                       arena_addr, big_addr, adj, adj_off, row_addr, touched, dgemm, top,
                       plan, np.empty((max(slots, 1), TILE)), stride, n,
                       c * tiles // chunks, (c + 1) * tiles // chunks)
    lane[0] = touched[0, 0]                    # the owners of ctx's arrays live to here


segment_vjp = cached_njit(parallel=True)(_named(_segment_vjp, "segment_vjp"))
segment_vjp_serial = cached_njit()(_named(_segment_vjp, "segment_vjp_serial"))


@register_jitable
def _tile_of(ctx, r, slot, buf, lo, hi):
    """Elements lo .. hi of row r's adjoint: its tile buffer, or its adjoint."""
    if slot >= 0:
        return buf[slot, :hi - lo]
    return adjoint(ctx, r)[lo:hi]


@register_jitable
def _segment_tiles(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                   arena_addr, big_addr, adj, adj_off, row_addr, touched, dgemm, top, plan,
                   buf, stride, n, first, last):
    """Tiles first .. last of a segment (the tiles never share an element)."""
    lane = np.array([0, stride])
    ctx = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                        arena_addr, big_addr, adj.ctypes.data, adj_off, row_addr, touched,
                        lane, dgemm)
    for t in range(first, last):
        lo, hi = t * TILE, min(n, (t + 1) * TILE)
        for m in range(plan.shape[0]):
            if plan[m, 0] != 1:
                continue
            r = top - m
            op, a, b = rows[r, OP], rows[r, A], rows[r, B]
            unary_like = op == SUM or op == MEAN or op <= UNARY_LAST
            if unary_like and plan[m, 2] != 1:    # its operand takes no gradient (as
                continue                          # unary_vjp checks; not so today)
            ga = _tile_of(ctx, a, plan[m, 4], buf, lo, hi)
            if op == SUM or op == MEAN:           # a whole sum: its gradient, everywhere
                v = adjoint(ctx, r)[0]
                if op == MEAN:
                    v /= n
                if plan[m, 3]:
                    ga[:] = v
                else:
                    for k in range(hi - lo):
                        ga[k] += v
                continue
            g, z = _tile_of(ctx, r, plan[m, 1], buf, lo, hi), value(ctx, r)[lo:hi]
            if UNARY_FIRST <= op <= UNARY_LAST:
                unary_loop(op, value(ctx, a)[lo:hi], z, g, ga, plan[m, 3] == 1)
                continue
            sx, sy = (1 if size_of(ctx, a) == n else 0), (1 if size_of(ctx, b) == n else 0)
            x = value(ctx, a)[lo:hi] if sx else value(ctx, a)
            y = value(ctx, b)[lo:hi] if sy else value(ctx, b)
            gb = _tile_of(ctx, b, plan[m, 7], buf, lo, hi) if plan[m, 5] == 1 else g
            if plan[m, 2] != 1:
                ga = g
            binary_chunk(op, x, y, z, g, sx, sy, plan[m, 2] == 1, plan[m, 3] == 1, ga,
                         plan[m, 5] == 1, plan[m, 6] == 1, gb)
    lane[0] = touched[0, 0]                    # the owners of ctx's arrays live to here
