"""The compiled reverse sweep: one call per backward / grad, no Python per tape row.

The sweep marks the rows reachable backwards from the seeded outputs (``reach``), gives
each reachable row that can carry a gradient a slice of one flat adjoint buffer
(``allocate``), seeds the outputs (``seed``), then walks the rows in reverse and hands
each one to its family's VJP kernel. ``reverse_sweep`` composes the stages; with
threads set, it stops at a large elementwise row, which ``split_row_vjp`` runs on
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
from .context import (accumulator, adjoint, f64_pointer, first_write, has_adjoint, size_of,
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
LINALG_ROW = 4      # state[3] of a sweep stopped at a numpy.linalg row (see split_row)
HOOK_ROW = 5        # state[3] of a sweep stopped at a row named in ``stops``
PYTHON_ROW = 6      # state[3] of a sweep stopped at a CUSTOM row: the caller runs its VJP


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

    Splitting: with ``split_min`` > 0 (one lane), the sweep stops at an elementwise row
    of at least that many elements, prepares it (``split_row``) and returns SPLIT with
    the row; the caller runs ``split_row_vjp`` on its pieces in threads, then calls again
    with ``state[0]`` set to the next row down. ``state`` (int64, SPLIT_STATE long)
    carries the sweep between calls (written only with SPLIT); ``state[0] < 0`` starts
    one.

    Stops: a row r with ``stops[r]`` (uint8; ``stops`` may be shorter than the tape,
    or empty) that the sweep reaches makes it return SPLIT with state[3] == HOOK_ROW
    when r's adjoint is complete and before r passes it on: the caller reads and may
    rewrite that adjoint (tensor hooks), marks it written in every lane, and calls again
    with state[0] = state[STOP_DONE] = r."""
    fresh = state[0] < 0
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
        total, top = state[1], state[2]
    lane = np.array([0, total])               # [lane being swept, lane stride]
    ctx = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                        arena_addr, big_addr, adj.ctypes.data, adj_off, row_addr, touched,
                        lane, dgemm)
    start = top if fresh else state[0]
    arena = carray(f64_pointer(arena_addr), arena_size)
    if fresh:
        seed(ctx, rows, shape_size, touched, seed_rows, seed_vals, seed_off, lanes)
    # sweep the rows: top .. 0 handed to their VJP kernels. (This stage stays in the
    # entry point's body: as a function of its own it costs a 50-lane Jacobian 8 us,
    # and numba compiles an always-inlined one twice, 12 s more of cold compile.)
    for i in range(start, -1, -1):
        if i < stops.size and stops[i] and adj_off[i] >= 0 and state[STOP_DONE] != i:
            state[1], state[2], state[3] = total, top, HOOK_ROW
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
            state[1], state[2], state[3] = total, top, PYTHON_ROW
            return SPLIT, i, adj_off, touched
        if (HAS_ELEMENTWISE or HAS_REDUCE) and split_min > 0 and \
                split_row(ctx, i, state, split_min):
            state[1], state[2] = total, top
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
            state[1], state[2], state[3] = total, top, LINALG_ROW
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


_FAMILY_OF = np.zeros(PYTHON_LAST + 1, np.int64)
_FAMILY_OF[UNARY_FIRST:SELECT_LAST + 1] = ELEMENTWISE
_FAMILY_OF[REDUCE_FIRST:REDUCE_LAST + 1] = REDUCE
_FAMILY_OF[INDEX_FIRST:INDEX_LAST + 1] = INDEX
_FAMILY_OF[LINALG_FIRST:LINALG_LAST + 1] = LINALG
_FAMILY_OF[MATMUL] = MATMUL_FAMILY
_FAMILY_OF[PYTHON_FIRST:PYTHON_LAST + 1] = PYTHON


@cached_njit()
def families_of(rows):
    """The kernel families a sweep of these rows may need (a bitmask). A 0-d elementwise
    row of 0-d arena values needs none: the same test as the sweep's scalar path. (One
    compiled loop: as numpy calls it cost a small tape's sweep 12 us more.)"""
    families = 0
    for i in range(rows.shape[0]):
        op = rows[i, OP]
        if op < UNARY_FIRST or (op <= BINARY_LAST and rows[i, VLOC] >= 0 and
                                rows[rows[i, A], VLOC] >= 0 and
                                (rows[i, B] < 0 or rows[rows[i, B], VLOC] >= 0)):
            continue                           # a source, or the scalar path's
        families |= _FAMILY_OF[op]
    return families


def sweep_for(families):
    """The variant of ``reverse_sweep`` for a tape of these kernel ``families`` (a
    bitmask from ``families_of``)."""
    kernel = _FOR_FAMILIES.get(families)
    if kernel is None:
        masked = families & ALL_FAMILIES
        variant = next(v for v in VARIANTS if masked & ~v == 0)
        kernel = _FOR_FAMILIES[families] = _variant(variant)
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
    variant = types.FunctionType(fn.__code__, dict(fn.__globals__, **flags),
                                 f"reverse_sweep_{families}")
    variant.__qualname__ = variant.__name__
    variant.__doc__ = fn.__doc__
    return cached_njit(what=f"the reverse sweep for {VARIANTS[families]} ops")(variant)


@cached_njit(what="the reverse sweep for numpy.linalg ops")
def linalg_row_vjp(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
                   big_addr, adj, adj_off, row_addr, touched, dgemm, i, lanes, stride):
    """The VJP of the numpy.linalg row a sweep stopped at (status SPLIT, state[3] ==
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


# ---- one large elementwise row, split among threads ------------------------------------------
# state[3:]: what split_row resolved for split_row_vjp: the kind (1 unary, 2 binary, 3 a
# whole sum or mean), for
# each operand whether it gets a gradient and whether it is written (not added to),
# and each operand's stride (1: the row's size, 0: one element).
SPLIT_STATE = 11
STOP_DONE = 10      # state[STOP_DONE]: the stop row whose stop has been handled


@register_jitable
def split_row(ctx, i, state, split_min):
    """Whether row i (one lane) is split: at least ``split_min`` elements, and a unary
    op, a binary one whose operands are each of the row's size or get no gradient, or a
    sum or mean of a whole operand (its VJP fills the operand). If so, marks the
    operands written (zeroing those added to) and leaves what split_row_vjp needs in
    state."""
    op, a, b = ctx.rows[i, OP], ctx.rows[i, A], ctx.rows[i, B]
    n = size_of(ctx, i)
    if (op == SUM or op == MEAN) and n == 1 and size_of(ctx, a) >= split_min and \
            has_adjoint(ctx, a):
        state[3], state[4] = 3, first_write(ctx, a)
        return True
    if n < split_min or passes_nothing(op):
        return False
    if UNARY_FIRST <= op <= UNARY_LAST:
        if not has_adjoint(ctx, a) or size_of(ctx, a) != n:
            return False
        state[3], state[4] = 1, first_write(ctx, a)
        return True
    if not (BINARY_FIRST <= op <= BINARY_LAST):
        return False
    na, nb = size_of(ctx, a), size_of(ctx, b)
    want_a, want_b = has_adjoint(ctx, a), has_adjoint(ctx, b)
    if not ((na == n or (na == 1 and not want_a)) and (nb == n or (nb == 1 and not want_b))):
        return False
    assign_a = want_a and first_write(ctx, a)
    if want_a and not assign_a:
        accumulator(ctx, a)
    assign_b = want_b and first_write(ctx, b)
    if want_b and not assign_b:
        accumulator(ctx, b)
    state[3], state[4], state[5], state[6], state[7] = 2, want_a, assign_a, want_b, assign_b
    state[8], state[9] = (1 if na == n else 0), (1 if nb == n else 0)
    return True


@cached_njit(parallel=True)
def split_row_vjp(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
                  big_addr, adj, adj_off, row_addr, touched, dgemm, i, state, chunks):
    """The VJP of the row a sweep returned SPLIT at (see split_row), in ``chunks``
    pieces on numba's threads. A parallel entry point of its own: called from the
    sweep, it would keep the sweep out of numba's on-disk cache."""
    n = shape_size[rows[i, SHAPE]] if state[3] != 3 else shape_size[rows[rows[i, A], SHAPE]]
    for c in numba.prange(chunks):
        _row_piece(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
                   big_addr, adj, adj_off, row_addr, touched, dgemm, i, state,
                   c * n // chunks, (c + 1) * n // chunks)


@register_jitable
def _row_piece(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
               big_addr, adj, adj_off, row_addr, touched, dgemm, i, state, lo, hi):
    """Elements lo .. hi of the split row's VJP (pieces never share an element)."""
    lane = np.array([0, state[1]])
    ctx = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                        arena_addr, big_addr, adj.ctypes.data, adj_off, row_addr, touched,
                        lane, dgemm)
    op, a, b = rows[i, OP], rows[i, A], rows[i, B]
    if state[3] == 3:                          # a whole sum or mean: fill the operand
        v = adjoint(ctx, i)[0]
        if op == MEAN:
            v /= size_of(ctx, a)
        ga = adjoint(ctx, a)
        if state[4]:
            ga[lo:hi] = v
        else:
            for k in range(lo, hi):
                ga[k] += v
        lane[0] = touched[0, 0]
        return
    z, g = value(ctx, i)[lo:hi], adjoint(ctx, i)[lo:hi]
    if state[3] == 1:
        unary_loop(op, value(ctx, a)[lo:hi], z, g, adjoint(ctx, a)[lo:hi], state[4] != 0)
    else:
        sx, sy = state[8], state[9]
        x = value(ctx, a)[lo:hi] if sx else value(ctx, a)
        y = value(ctx, b)[lo:hi] if sy else value(ctx, b)
        ga = adjoint(ctx, a)[lo:hi] if state[4] else g
        gb = adjoint(ctx, b)[lo:hi] if state[6] else g
        binary_chunk(op, x, y, z, g, sx, sy, state[4] != 0, state[5] != 0, ga,
                     state[6] != 0, state[7] != 0, gb)
    lane[0] = touched[0, 0]                    # the owners of ctx's arrays live to here
