"""The lean program: a recorded tape lowered once into instructions over flat value
slots, run for many points at once (compile.py's fast path).

Lowering (``lower``) gives every row an output needs a run of slots, one per element,
and turns each row into one instruction: an elementwise op reading its operands' slots
with a stride of 1 or 0 (a broadcast operand first gathered into slots of its own), a
GATHER (reshape, views, concatenation, take, index assignment: every output element is
one input element, found by running the row's own forward on slot numbers), or a
SCATTER_ADD (sum and mean reductions, the scatters); a small matmul is a MUL of its
products and a SCATTER_ADD of them (``_emit_matmul``); a take at positions the program
computes is a PICK (its transpose a PLACE), a search of sorted values a SEARCH. Rows it cannot express (max /
min / prod reductions, scans, a matmul BLAS computes, linear algebra) leave the tape to
the interpreting sweep.

Running (``run_points``): the values of B points live as ``V[slot][point]``, the point
innermost, so each instruction is one contiguous loop over points. Points go in chunks
of C, each chunk through the whole forward program and then one reverse sweep per
output element with seeds of 1, its slots small enough to stay in cache; with
``parallel`` the chunks are spread over numba's threads. Every op's math is the op
table's (elementwise.py): values, partials, masks and ``passes_nothing`` are the same
functions the tape's kernels call. The storage may be float32: each op then computes
in float64 and rounds its result, as float32 tensors do.
"""
import numba
import numpy as np
from numba import prange
from numba.extending import register_jitable

from ..opcodes import (ADD, BINARY_LAST, CONCAT, CONST, CUSTOM, DIV, MATMUL, MEAN, MUL,
                       PUT_ADD, RESHAPE, SCATTER, SEARCHSORTED, SETITEM, SOURCE_LAST,
                       STRIDED, SUB, SUM, TAKE, UNARY_LAST, WHERE)
from ..tape_format import A, AUX, B, OP, VLOC, array_location, operand, operand_count, \
    where_condition
from .cache import cached_njit, distinct
from .driver import points_driver, tangents_driver, zero_nothing
from .context import broadcast_map, operand_map, shape_of, size_of, sweep_context, value
from .elementwise import (binary_partial_x, binary_partial_y, binary_value, passes_nothing,
                          selects, tangent_times, times, unary_partial, unary_value)
from .indexing import PICKED_OUTSIDE, indexing_forward, pattern_map, picked, search
from .linalg import matmul_dims
from .instruction_format import (COPY, GATHER, I_A, I_B, I_C, I_N, I_OP, I_OUT, I_P,
                                 I_SA, I_SB, I_SC, PICK, PLACE, SCATTER_ADD, SEARCH, WIDTH,
                                 as_instructions, encode_call, encode_copy,
                                 encode_elementwise, encode_gather, encode_pick, encode_place,
                                 encode_scatter_add, encode_search, field_capacity,
                                 field_slot, mark_producers, operand_columns, operand_fields,
                                 operand_stride, producers, set_field_slot)
from .reduce import kept_map
from ..tuning import BLAS_MIN_FLOPS, LANES, LANES_MIN, MAX_PIECES

LOWERED, UNSUPPORTED = 0, 1


@cached_njit()
def lower(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
          big_addr, in_rows, out_rows, call_rows, dgemm):
    """Lower the rows ``out_rows`` need into instructions; a CUSTOM row that
    ``call_rows`` marks becomes a CALL. Returns (status, detail, instructions, pool,
    divisor per instruction, the slots of the inputs' and the outputs' elements, slot
    count, const slots, their values, the row each instruction comes from): status
    UNSUPPORTED names the row in detail."""
    n = rows.shape[0]
    none = np.zeros(1, np.int64)
    touched = np.zeros((1, 1), np.bool_)
    lane = np.zeros(2, np.int64)
    real = sweep_context(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                         arena_addr, big_addr, 0, none, none, touched, lane, dgemm)
    needed = np.zeros(n, np.bool_)
    for r in out_rows:
        needed[r] = True
    for i in range(n - 1, -1, -1):
        if not needed[i]:
            continue
        for k in range(operand_count(rows, ipool, i)):
            needed[operand(rows, ipool, i, k)] = True
        if rows[i, OP] == WHERE:
            needed[where_condition(ipool, rows[i, AUX])] = True
    for r in in_rows:
        needed[r] = True
    # Slots: the sources (inputs, constants) first, then the ops' outputs in order, so
    # that the repetitions of a loop lie evenly apart even where a repetition met a
    # new constant (t = i * h) and another reused one (kernels/loops.py).
    slot = np.full(n, -1, np.int64)
    ns = 0
    for i in range(n):
        if needed[i] and rows[i, OP] <= SOURCE_LAST:
            slot[i] = ns
            ns += size_of(real, i)
    # A broadcast operand of an elementwise row is first gathered into slots of its own,
    # just before the row's: so every repetition of a loop has its slots in one stretch.
    spread = np.full((n, 3), -1, np.int64)
    for i in range(n):
        if needed[i] and rows[i, OP] > SOURCE_LAST:
            op, sz = rows[i, OP], size_of(real, i)
            if op == MATMUL and _lowers_matmul(real, i, dgemm):   # its products, and
                spread[i, 0] = ns                                   # operands gathered
                ns += 3 * _products(real, i)
            if op <= BINARY_LAST or op == WHERE:
                for t in range(3):
                    r = _elementwise_operand(rows, ipool, i, t)
                    if r >= 0 and size_of(real, r) != sz and size_of(real, r) != 1:
                        spread[i, t] = ns
                        ns += sz
            slot[i] = ns
            ns += sz
    # Slot numbers as values: a row's own forward then says where each of its elements
    # comes from (a gather of a gather reads the first source directly).
    track = np.empty(max(ns, 1))
    for i in range(n):
        if needed[i]:
            for e in range(size_of(real, i)):
                track[slot[i] + e] = slot[i] + e
    rows2 = rows.copy()
    big2 = np.empty(n, np.int64)
    base = track.ctypes.data
    for i in range(n):
        rows2[i, VLOC] = array_location(i)
        big2[i] = base + 8 * max(slot[i], 0)
    tracked = sweep_context(rows2, ipool, shape_ndim, shape_start, shape_dims, shape_size,
                            0, big2, 0, none, none, touched, lane, dgemm)

    code = [np.int64(0)][:0]
    pool = [np.int64(0)][:0]
    divisor = [0.0][:0]
    const_slots = [np.int64(0)][:0]
    const_vals = [0.0][:0]
    selected = np.zeros(n, np.bool_)            # rows lowered as gathers (track: sources)
    is_input = np.zeros(n, np.bool_)
    for r in in_rows:
        is_input[r] = True
    made_by = [np.int64(0)][:0]                 # the row each instruction comes from
    last = -1
    for i in range(n):
        if not needed[i]:
            continue
        for _ in range(len(code) // WIDTH - len(made_by)):
            made_by.append(last)                # (a row's instructions: before the next's)
        last = i
        op, sz, out = rows[i, OP], size_of(real, i), slot[i]
        if op <= SOURCE_LAST:
            if not is_input[i]:
                v = value(real, i)
                for e in range(sz):
                    const_slots.append(out + e)
                    const_vals.append(v[e])
            continue
        if op <= BINARY_LAST or op == WHERE:
            ops = np.full(3, -1, np.int64)
            strides = np.zeros(3, np.int64)
            for t in range(3):
                ops[t] = _elementwise_operand(rows, ipool, i, t)
            at = np.full(3, -1, np.int64)
            for t in range(3):
                r = ops[t]
                if r < 0:
                    continue
                m = size_of(real, r)
                if m == sz or m == 1:
                    at[t], strides[t] = slot[r], (1 if m == sz else 0)
                    continue
                src = operand_map(real, r, i) + slot[r]  # broadcast: gather it first
                _emit_gather(code, pool, divisor, spread[i, t], src)
                at[t], strides[t] = spread[i, t], 1
            _emit_split(code, divisor, op, out, sz, ops, at, strides, selected, slot, track)
        elif op == SEARCHSORTED:
            encode_search(code, out, sz, slot[rows[i, A]], size_of(real, rows[i, A]),
                          slot[rows[i, B]])
            divisor.append(1.0)
        elif op == TAKE and rows[rows[i, B], OP] != CONST:   # positions the program computes
            encode_pick(code, out, sz, slot[rows[i, A]], size_of(real, rows[i, A]),
                        slot[rows[i, B]])
            divisor.append(1.0)
        elif op == RESHAPE or op == STRIDED or op == SETITEM or op == CONCAT or op == TAKE:
            if op == TAKE:                      # its indices are constants, not slots
                idx = rows[i, B]
                v = value(real, idx)
                for e in range(v.size):
                    track[slot[idx] + e] = v[e]
            indexing_forward(tracked, i)
            selected[i] = True
            src = np.empty(sz, np.int64)
            for k in range(sz):
                src[k] = np.int64(track[out + k])
            _emit_gather(code, pool, divisor, out, src)
        elif op == PUT_ADD and rows[rows[i, B], OP] != CONST:   # (computed positions)
            encode_place(code, out, sz, slot[rows[i, A]], slot[rows[i, B]],
                         size_of(real, rows[i, A]))
            divisor.append(1.0)
        elif op == SUM or op == MEAN or op == SCATTER or op == PUT_ADD:
            a = rows[i, A]
            m = size_of(real, a)
            if op == SCATTER:
                dst = pattern_map(real, i, shape_of(real, a))
            elif op == PUT_ADD:
                iv = value(real, rows[i, B])
                dst = np.empty(m, np.int64)
                for k in range(m):
                    dst[k] = np.int64(iv[k])
            else:
                dst = kept_map(real, i, a)
            encode_scatter_add(code, pool, out, sz, slot[a], dst)
            divisor.append(m / sz if op == MEAN else 1.0)
        elif op == MATMUL and _lowers_matmul(real, i, dgemm):
            _emit_matmul(code, pool, divisor, real, i, slot, spread[i, 0])
        elif op == CUSTOM and call_rows[i]:        # (the row itself in I_A)
            params = rows[i, AUX]                  # (custom_params: count, rows)
            slots = np.empty(ipool[params], np.int64)
            sizes = np.empty(ipool[params], np.int64)
            for k in range(ipool[params]):
                slots[k] = slot[ipool[params + 1 + k]]
                sizes[k] = size_of(real, ipool[params + 1 + k])
            encode_call(code, pool, out, sz, i, slots, sizes)
            divisor.append(1.0)
        else:
            lane[0] = rows2[0, 0] + big2[0] + np.int64(track[0]) + touched[0, 0]
            return (UNSUPPORTED, i, np.zeros((0, WIDTH), np.int64), none, np.zeros(0),
                    none, none, ns, none, np.zeros(0), none)
    # the owners of the contexts' borrowed arrays live to here (numba frees a local
    # after its last use, and the contexts do not count as uses)
    lane[0] = rows2[0, 0] + big2[0] + np.int64(track[0]) + touched[0, 0]
    instr = as_instructions(code)
    for _ in range(instr.shape[0] - len(made_by)):
        made_by.append(last)
    pool_arr = _ints(pool)
    keep = _used(instr, pool_arr, ns, _row_slots(slot, out_rows, real))
    instr, divisor_arr, made_by_arr = instr[keep], _floats(divisor)[keep], _ints(made_by)[keep]
    # Number again only the slots the kept instructions, inputs and outputs touch.
    marked = np.zeros(ns + 1, np.bool_)
    for r in in_rows:
        marked[slot[r]:slot[r] + size_of(real, r)] = True
    for r in out_rows:
        marked[slot[r]:slot[r] + size_of(real, r)] = True
    fields = np.empty((field_capacity(instr, pool_arr), 3), np.int64)
    for q in range(instr.shape[0]):
        marked[instr[q, I_OUT]:instr[q, I_OUT] + instr[q, I_N]] = True
        for j in range(operand_fields(instr, pool_arr, q, False, fields)):
            s0 = field_slot(instr, pool_arr, q, fields, j)
            marked[s0:s0 + fields[j, 2]] = True
    renumber = np.cumsum(marked) - 1
    renumber_slots(instr, pool_arr, renumber)
    cs, cv = _ints(const_slots), _floats(const_vals)
    kept = 0
    for k in range(cs.size):
        if marked[cs[k]]:
            cs[kept], cv[kept] = renumber[cs[k]], cv[k]
            kept += 1
    for i in range(slot.size):
        if slot[i] >= 0:
            slot[i] = renumber[slot[i]] if marked[slot[i]] else -1
    return (LOWERED, 0, instr, pool_arr, divisor_arr, _row_slots(slot, in_rows, real),
            _row_slots(slot, out_rows, real), np.int64(marked[:ns].sum()), cs[:kept],
            cv[:kept], made_by_arr)


@register_jitable
def renumber_slots(instr, pool, renumber):
    """Every slot the instructions write or read renamed ``renumber[slot]``, in place."""
    fields = np.empty((field_capacity(instr, pool), 3), np.int64)
    for q in range(instr.shape[0]):
        instr[q, I_OUT] = renumber[instr[q, I_OUT]]
        for j in range(operand_fields(instr, pool, q, False, fields)):
            set_field_slot(instr, pool, q, fields, j,
                           renumber[field_slot(instr, pool, q, fields, j)])


@cached_njit()
def close_slot_gaps(instr, pool, renumber):
    """renumber_slots from Python (LeanProgram.of: the slots of constants no
    instruction reads any more left out of the numbering)."""
    renumber_slots(instr, pool, renumber)


@register_jitable
def _row_slots(slot, rows, ctx):
    """The slots of every element of ``rows``, one row after another."""
    n = 0
    for r in rows:
        n += size_of(ctx, r)
    out = np.empty(n, np.int64)
    n = 0
    for r in rows:
        for e in range(size_of(ctx, r)):
            out[n] = slot[r] + e
            n += 1
    return out


@register_jitable
def _used(instr, pool, nslots, out_slots):
    """The instructions whose values the outputs need: a gather reads its first source
    directly, so the rows of a chain of reshapes and slices in between are dropped."""
    producer = producers(instr, nslots)
    used = np.zeros(instr.shape[0], np.bool_)
    for s in out_slots:
        if producer[s] >= 0:
            used[producer[s]] = True
    mark_producers(instr, pool, producer, used, False)
    return used




@register_jitable
def _emit_split(code, divisor, op, out, n, ops, at, strides, selected, slot, track):
    """An elementwise instruction. An operand that is a gather (a roll, a slice, a
    concatenation) is read at its sources instead, in as many pieces (up to MAX_PIECES)
    as its sources run in contiguous stretches: the gather itself is then unused, and
    dropped, in both directions. A roll is not (``_reordered``): read as one gather."""
    src = np.empty((3, n), np.int64)
    for t in range(3):
        for k in range(n):
            src[t, k] = at[t] + k * strides[t]
        r = ops[t]
        if r >= 0 and strides[t] == 1 and selected[r] and at[t] == slot[r]:
            for k in range(n):
                src[t, k] = np.int64(track[slot[r] + k])
            if _reordered(src[t]):              # (a roll: read as its gather's output)
                for k in range(n):
                    src[t, k] = at[t] + k
    pieces = 1
    for k in range(1, n):
        for t in range(3):
            if strides[t] == 1 and src[t, k] != src[t, k - 1] + 1:
                pieces += 1
                break
    if pieces > MAX_PIECES:
        for t in range(3):
            for k in range(n):
                src[t, k] = at[t] + k * strides[t]
    first = 0
    for k in range(1, n + 1):
        cut = k == n
        if not cut and pieces <= MAX_PIECES:
            for t in range(3):
                if strides[t] == 1 and src[t, k] != src[t, k - 1] + 1:
                    cut = True
        if cut:
            encode_elementwise(code, op, out + first, k - first,
                               src[0, first] if at[0] >= 0 else -1,
                               src[1, first] if at[1] >= 0 else -1,
                               src[2, first] if at[2] >= 0 else -1,
                               strides[0], strides[1], strides[2])
            divisor.append(1.0)
            first = k


@register_jitable
def _elementwise_operand(rows, ipool, i, t):
    """Operand t (a, b, the condition) of an elementwise or WHERE row, or -1."""
    op = rows[i, OP]
    if t == 0:
        return rows[i, A]
    if t == 1:
        return rows[i, B] if op > UNARY_LAST else -1
    return where_condition(ipool, rows[i, AUX]) if op == WHERE else -1


@register_jitable
def _reordered(src):
    """Whether the sources ``src`` are one block of slots in another order (a roll, a
    periodic wrap: ``np.diff(u, append=u[:1])``'s ``u[1:] + u[:1]``): more than one
    contiguous run, all within as many slots as there are elements. Such an operand
    stays one gather, which a loop body fuses into its step's element loop (a roll of
    the last step's state: kernels/fusion.py), where copies of its runs cut every
    instruction reading it into pieces: a 64-cell advection step took 53 one-cell
    instructions, 143 us a gradient; 79 as gathers."""
    n, runs = src.size, 1
    lo, hi = src[0] if n else 0, src[0] if n else 0
    for k in range(1, n):
        if src[k] != src[k - 1] + 1:
            runs += 1
        lo, hi = min(lo, src[k]), max(hi, src[k])
    return runs > 1 and hi - lo < n


@register_jitable
def _emit_gather(code, pool, divisor, out, src):
    """out[k] = src[k]: as COPY instructions where the sources run in few contiguous
    stretches (a slice, a concatenation: 64 elements a run on average) and are not one
    block reordered (a roll: ``_reordered``), else one GATHER through the pool. A 2-D
    roll of a 32 x 32 grid (64 runs of 16) as copies cost a compiled loop body 64 loops
    (3300 lines, 25 s to compile), as a gather one (500 lines, 1.7 s); the interpreter
    runs it 7% slower."""
    n, runs = src.size, 1
    for k in range(1, n):
        if src[k] != src[k - 1] + 1:
            runs += 1
    if runs <= max(2, n // 64) and not _reordered(src):
        start = 0
        for k in range(1, n + 1):
            if k == n or src[k] != src[k - 1] + 1:
                encode_copy(code, out + start, src[start], k - start)
                divisor.append(1.0)
                start = k
        return
    encode_gather(code, pool, out, src)
    divisor.append(1.0)


@register_jitable
def _lowers_matmul(ctx, i, dgemm):
    """Whether a matmul row has a lean form: the replay computes its blocks by loops
    (below BLAS_MIN_FLOPS multiply-adds a block, or without BLAS), whose order of
    rounding the lean instructions repeat; BLAS's they would not."""
    _, _, _, _, n, k, m, _, _ = matmul_dims(ctx, i)
    return dgemm == 0 or n * k * m < BLAS_MIN_FLOPS


@register_jitable
def _products(ctx, i):
    """How many products a matmul row's lowering forms: one per multiply-add."""
    _, _, _, _, n, k, m, _, nb = matmul_dims(ctx, i)
    return nb * n * k * m


@register_jitable
def _emit_matmul(code, pool, divisor, ctx, i, slot, at):
    """A matrix product below BLAS's size as the tape's replay computes it
    (linalg.matmul_forward's loops): each product of the batch's blocks formed by one MUL
    (into the ``at`` slots), then summed into its output element from 0.0 in the order
    of the inner index by one SCATTER_ADD; the same bits. The products run along the
    inner index for a matrix times a vector, else along the output's rows; an operand
    whose elements the products read in order is read in place, the other gathered
    first (slots after the products'). Every runner of a lean program then runs it, and
    the loop finder sees its parts."""
    a, b, sa, sb, n, k, m, batch, nb = matmul_dims(ctx, i)
    count = nb * n * k * m
    ma = broadcast_map(sa[:max(sa.size - 2, 0)], batch)        # batch -> operand block
    mb = broadcast_map(sb[:max(sb.size - 2, 0)], batch)
    src = np.empty((2, count), np.int64)
    dst = np.empty(count, np.int64)
    e = 0
    for t in range(nb):
        for r in range(n):
            for u in range(k * m):                  # (p) or (p, c), p the inner index
                p, c = (u, 0) if m == 1 else (u // m, u % m)
                src[0, e] = slot[a] + ma[t] * n * k + r * k + p
                src[1, e] = slot[b] + mb[t] * k * m + p * m + c
                dst[e] = t * n * m + r * m + c
                e += 1
    if count > 0:
        where = np.empty(2, np.int64)
        for t in range(2):
            where[t] = src[t, 0]
            for e in range(1, count):
                if src[t, e] != src[t, e - 1] + 1:
                    where[t] = at + count * (t + 1)
                    _emit_gather(code, pool, divisor, where[t], src[t])
                    break
        encode_elementwise(code, MUL, at, count, where[0], where[1], -1, 1, 1, 0)
        divisor.append(1.0)
    encode_scatter_add(code, pool, slot[i], n * m * nb, at, dst)
    divisor.append(1.0)


@register_jitable
def _ints(values):
    out = np.empty(len(values), np.int64)
    for k in range(len(values)):
        out[k] = values[k]
    return out


@register_jitable
def _floats(values):
    out = np.empty(len(values))
    for k in range(len(values)):
        out[k] = values[k]
    return out


# ---- running the program ---------------------------------------------------------------
# The forward and reverse loops are built twice from one source (``_kernels``): for one
# point, where C is the constant 1 and every index is plain, and for chunks of C points.

def _kernels(fixed_c, one_lane=False):
    """(drive, drive_chunks, tangent drive_chunks, forward, reverse, tangent) with C fixed
    to ``fixed_c``, or taken at run time (0): the interpreter, and the drivers
    (kernels/driver.py) over it. With ``one_lane``, forward and reverse run point ``lane``
    of the C only (a GPU thread's point, kernels/gpu.py); else every point."""

    @register_jitable
    def forward(instr, pool, divisor, V, C, lane, q0, q1):
        """Instructions q0 .. q1 - 1, in order, for the C points of V (slot-major)."""
        if fixed_c:
            C = fixed_c
        j0, j1 = (lane, lane + 1) if one_lane else (0, C)
        for q in range(q0, q1):
            op, out, n = instr[q, I_OP], instr[q, I_OUT], instr[q, I_N]
            if op == COPY:
                a = instr[q, I_A]
                for k in range(n):
                    for j in range(j0, j1):
                        V[(out + k) * C + j] = V[(a + k) * C + j]
            elif op == GATHER:
                p = instr[q, I_P]
                for k in range(n):
                    src, dst = pool[p + k] * C, (out + k) * C
                    for j in range(j0, j1):
                        V[dst + j] = V[src + j]
            elif op == PICK:
                a, b, m = instr[q, I_A], instr[q, I_B], instr[q, I_SA]
                for k in range(n):
                    for j in range(j0, j1):
                        i = picked(V[(b + k) * C + j], m)
                        V[(out + k) * C + j] = V[(a + i) * C + j] if i >= 0 else np.nan
                        if i < 0:
                            raise IndexError(PICKED_OUTSIDE)
            elif op == SEARCH:
                a, b, m = instr[q, I_A], instr[q, I_B], instr[q, I_SA]
                for k in range(n):
                    for j in range(j0, j1):
                        V[(out + k) * C + j] = search(V, a * C + j, m, C, V[(b + k) * C + j])
            elif op == PLACE:
                a, b, m = instr[q, I_A], instr[q, I_B], instr[q, I_SA]
                for k in range(n):
                    for j in range(j0, j1):
                        V[(out + k) * C + j] = 0.0
                for k in range(m):
                    for j in range(j0, j1):
                        i = picked(V[(b + k) * C + j], n)
                        if i < 0:                       # (a GPU goes on past the raise:
                            V[out * C + j] = np.nan     #  nan, not a write before out)
                            raise IndexError(PICKED_OUTSIDE)
                        else:
                            V[(out + i) * C + j] += V[(a + k) * C + j]
            elif op == SCATTER_ADD:
                p, pairs, d = instr[q, I_P], instr[q, I_SA], divisor[q]
                for k in range(n):
                    for j in range(j0, j1):
                        V[(out + k) * C + j] = 0.0
                for k in range(pairs):
                    src, dst = pool[p + 2 * k] * C, (out + pool[p + 2 * k + 1]) * C
                    for j in range(j0, j1):
                        V[dst + j] += V[src + j]
                if d != 1.0:
                    for k in range(n):
                        for j in range(j0, j1):
                            V[(out + k) * C + j] = np.float64(V[(out + k) * C + j]) / d
            elif op <= UNARY_LAST:
                a, sa = instr[q, I_A], instr[q, I_SA]
                for k in range(n):
                    x, z = (a + k * sa) * C, (out + k) * C
                    for j in range(j0, j1):
                        V[z + j] = unary_value(op, np.float64(V[x + j]))
            elif op <= BINARY_LAST:
                a, b, sa, sb = instr[q, I_A], instr[q, I_B], instr[q, I_SA], instr[q, I_SB]
                if fixed_c == 1 and ADD <= op <= MUL:
                    _cells_forward(op, V, out, a, b, sa, sb, n)
                elif op == ADD:
                    for k in range(n):
                        x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                        for j in range(j0, j1):
                            V[z + j] = np.float64(V[x + j]) + np.float64(V[y + j])
                elif op == SUB:
                    for k in range(n):
                        x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                        for j in range(j0, j1):
                            V[z + j] = np.float64(V[x + j]) - np.float64(V[y + j])
                elif op == MUL:
                    for k in range(n):
                        x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                        for j in range(j0, j1):
                            V[z + j] = np.float64(V[x + j]) * np.float64(V[y + j])
                elif op == DIV:
                    for k in range(n):
                        x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                        for j in range(j0, j1):
                            V[z + j] = np.float64(V[x + j]) / np.float64(V[y + j])
                else:
                    for k in range(n):
                        x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                        for j in range(j0, j1):
                            V[z + j] = binary_value(op, np.float64(V[x + j]),
                                                    np.float64(V[y + j]))
            else:                                                   # WHERE
                a, b, c = instr[q, I_A], instr[q, I_B], instr[q, I_C]
                sa, sb, sc = instr[q, I_SA], instr[q, I_SB], instr[q, I_SC]
                for k in range(n):
                    x, y, w, z = (a + k * sa) * C, (b + k * sb) * C, (c + k * sc) * C, \
                        (out + k) * C
                    for j in range(j0, j1):
                        V[z + j] = V[x + j] if V[w + j] != 0 else V[y + j]

    @register_jitable
    def reverse(instr, pool, divisor, live, V, G, C, lane, q0, q1):
        """The reverse sweep over instructions q1 - 1 .. q0 that ``live`` marks (those
        the seed reaches: a dead one would multiply its zero adjoint by inf partials
        into nan)."""
        if fixed_c:
            C = fixed_c
        j0, j1 = (lane, lane + 1) if one_lane else (0, C)
        for q in range(q1 - 1, q0 - 1, -1):
            if not live[q]:
                continue
            op, out, n = instr[q, I_OP], instr[q, I_OUT], instr[q, I_N]
            if op == COPY:
                a = instr[q, I_A]
                for k in range(n):
                    for j in range(j0, j1):
                        G[(a + k) * C + j] += G[(out + k) * C + j]
            elif op == GATHER:
                p = instr[q, I_P]
                for k in range(n):
                    src, dst = pool[p + k] * C, (out + k) * C
                    for j in range(j0, j1):
                        G[src + j] += G[dst + j]
            elif op == PICK:
                a, b, m = instr[q, I_A], instr[q, I_B], instr[q, I_SA]
                for k in range(n):
                    for j in range(j0, j1):
                        i = picked(V[(b + k) * C + j], m)
                        if i >= 0:
                            G[(a + i) * C + j] += G[(out + k) * C + j]
            elif op == SEARCH:
                continue
            elif op == PLACE:
                a, b, m = instr[q, I_A], instr[q, I_B], instr[q, I_SA]
                for k in range(m):
                    for j in range(j0, j1):
                        i = picked(V[(b + k) * C + j], n)
                        if i >= 0:
                            G[(a + k) * C + j] += G[(out + i) * C + j]
            elif op == SCATTER_ADD:
                p, pairs, d = instr[q, I_P], instr[q, I_SA], divisor[q]
                for k in range(pairs):
                    src, dst = pool[p + 2 * k] * C, (out + pool[p + 2 * k + 1]) * C
                    for j in range(j0, j1):
                        G[src + j] += np.float64(G[dst + j]) / d
            elif passes_nothing(op):
                continue
            elif n >= LANES_MIN and broadcast_operand(instr, q):
                _reverse_broadcast(instr, V, G, C, j0, j1, q)
            elif op <= UNARY_LAST:
                a, sa = instr[q, I_A], instr[q, I_SA]
                for k in range(n):
                    x, z = (a + k * sa) * C, (out + k) * C
                    for j in range(j0, j1):
                        G[x + j] += times(op, np.float64(G[z + j]), unary_partial(
                            op, np.float64(V[x + j]), np.float64(V[z + j])))
            elif op <= BINARY_LAST:
                a, b, sa, sb = instr[q, I_A], instr[q, I_B], instr[q, I_SA], instr[q, I_SB]
                if fixed_c == 1 and ADD <= op <= MUL and sa == 1 and sb == 1:
                    _cells_reverse(op, V, G, out, a, b, n)
                elif op == ADD or op == SUB:
                    sign = 1.0 if op == ADD else -1.0
                    for k in range(n):
                        x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                        for j in range(j0, j1):
                            g = np.float64(G[z + j])
                            G[x + j] += g
                            G[y + j] += sign * g
                elif op == MUL:
                    for k in range(n):
                        x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                        for j in range(j0, j1):
                            g = np.float64(G[z + j])
                            xv, yv = np.float64(V[x + j]), np.float64(V[y + j])
                            G[x + j] += g * yv
                            G[y + j] += g * xv
                else:
                    for k in range(n):
                        x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                        for j in range(j0, j1):
                            g = np.float64(G[z + j])
                            xv, yv, zv = np.float64(V[x + j]), np.float64(V[y + j]), \
                                np.float64(V[z + j])
                            G[x + j] += times(op, g, binary_partial_x(op, xv, yv, zv))
                            G[y + j] += times(op, g, binary_partial_y(op, xv, yv, zv))
            else:                                                   # WHERE: selects
                a, b, c = instr[q, I_A], instr[q, I_B], instr[q, I_C]
                sa, sb, sc = instr[q, I_SA], instr[q, I_SB], instr[q, I_SC]
                for k in range(n):
                    x, y, w, z = (a + k * sa) * C, (b + k * sb) * C, (c + k * sc) * C, \
                        (out + k) * C
                    for j in range(j0, j1):
                        if V[w + j] != 0:
                            G[x + j] += G[z + j]
                        else:
                            G[y + j] += G[z + j]

    @register_jitable
    def tangent(instr, pool, divisor, V, T, C, K, q0, q1):
        """Forward mode: the tangents of instructions q0 .. q1 - 1, whose values V holds,
        K lanes each: T[(slot * K + lane) * C + point]. A zero tangent carries nothing
        (``tangent_times``)."""
        if fixed_c:
            C = fixed_c
        KC = K * C
        # (a slot's lanes through a view from it on, T[s * KC:]: an index holding a slot
        # number could be negative to numba, whose wraparound check per lane kept the
        # lane loops from vectorizing)
        for q in range(q0, q1):
            op, out, n = instr[q, I_OP], instr[q, I_OUT], instr[q, I_N]
            if op == COPY:
                Tz, Tx = T[out * KC:], T[instr[q, I_A] * KC:]
                for k in range(n * KC):
                    Tz[k] = Tx[k]
            elif op == GATHER:
                p = instr[q, I_P]
                for k in range(n):
                    src, dst = pool[p + k] * KC, (out + k) * KC
                    for j in range(KC):
                        T[dst + j] = T[src + j]
            elif op == PICK:
                a, b, m = instr[q, I_A], instr[q, I_B], instr[q, I_SA]
                for k in range(n):
                    for j in range(C):
                        i = picked(V[(b + k) * C + j], m)
                        for l in range(K):
                            T[((out + k) * K + l) * C + j] = \
                                T[((a + i) * K + l) * C + j] if i >= 0 else np.nan
            elif op == SEARCH:
                for k in range(n * KC):
                    T[out * KC + k] = 0.0
            elif op == PLACE:
                a, b, m = instr[q, I_A], instr[q, I_B], instr[q, I_SA]
                for k in range(n * KC):
                    T[out * KC + k] = 0.0
                for k in range(m):
                    for j in range(C):
                        i = picked(V[(b + k) * C + j], n)
                        for l in range(K):
                            if i >= 0:
                                T[((out + i) * K + l) * C + j] += T[((a + k) * K + l) * C + j]
            elif op == SCATTER_ADD:
                p, pairs, d = instr[q, I_P], instr[q, I_SA], divisor[q]
                for k in range(n * KC):
                    T[out * KC + k] = 0.0
                for k in range(pairs):
                    src, dst = pool[p + 2 * k] * KC, (out + pool[p + 2 * k + 1]) * KC
                    for j in range(KC):
                        T[dst + j] += T[src + j]
                if d != 1.0:
                    for k in range(n * KC):
                        T[out * KC + k] = np.float64(T[out * KC + k]) / d
            elif passes_nothing(op):
                for k in range(n * KC):
                    T[out * KC + k] = 0.0
            elif op <= UNARY_LAST:
                a, sa = instr[q, I_A], instr[q, I_SA]
                for k in range(n):
                    x, z = a + k * sa, out + k
                    Tx, Tz = T[x * KC:], T[z * KC:]
                    for j in range(C):
                        d = unary_partial(op, np.float64(V[x * C + j]), np.float64(V[z * C + j]))
                        for l in range(K):
                            Tz[l * C + j] = tangent_times(op, np.float64(Tx[l * C + j]), d)
            elif op <= BINARY_LAST and K * C < 8:    # (few lanes: no views, see above)
                a, b, sa, sb = instr[q, I_A], instr[q, I_B], instr[q, I_SA], instr[q, I_SB]
                for k in range(n):
                    x, y, z = a + k * sa, b + k * sb, out + k
                    for j in range(C):
                        xv, yv, zv = np.float64(V[x * C + j]), np.float64(V[y * C + j]), \
                            np.float64(V[z * C + j])
                        dx, dy = binary_partials(op, xv, yv, zv)
                        mx = dx == 0.0 and selects(op)      # (tangent_times' tests,
                        my = dy == 0.0 and selects(op)      # once per element)
                        for l in range(K):
                            tx = np.float64(T[x * KC + l * C + j])
                            ty = np.float64(T[y * KC + l * C + j])
                            T[z * KC + l * C + j] = (0.0 if tx == 0.0 or mx else tx * dx) + \
                                (0.0 if ty == 0.0 or my else ty * dy)
            elif op <= BINARY_LAST:
                a, b, sa, sb = instr[q, I_A], instr[q, I_B], instr[q, I_SA], instr[q, I_SB]
                for k in range(n):
                    x, y, z = a + k * sa, b + k * sb, out + k
                    Tx, Ty, Tz = T[x * KC:], T[y * KC:], T[z * KC:]
                    for j in range(C):
                        xv, yv, zv = np.float64(V[x * C + j]), np.float64(V[y * C + j]), \
                            np.float64(V[z * C + j])
                        dx, dy = binary_partials(op, xv, yv, zv)
                        for l in range(K):
                            Tz[l * C + j] = tangent_times(op, np.float64(Tx[l * C + j]), dx) + \
                                tangent_times(op, np.float64(Ty[l * C + j]), dy)
            else:                                                   # WHERE
                a, b, c = instr[q, I_A], instr[q, I_B], instr[q, I_C]
                sa, sb, sc = instr[q, I_SA], instr[q, I_SB], instr[q, I_SC]
                for k in range(n):
                    x, y, w, z = a + k * sa, b + k * sb, c + k * sc, out + k
                    for j in range(C):
                        src = x if V[w * C + j] != 0 else y
                        for l in range(K):
                            T[(z * K + l) * C + j] = T[(src * K + l) * C + j]

    # the drivers' hooks (kernels/driver.py)
    def program_forward(code, V, C, lane):
        """The driver's forward hook (kernels/driver.py): the whole program."""
        instr, pool, divisor = code[0], code[1], code[2]
        forward(instr, pool, divisor, V, C, lane, 0, instr.shape[0])
        return 0

    def program_reverse(code, V, G, C, j0, j1, o, ran):
        """The driver's reverse hook: output o's sweep over the whole program."""
        instr, pool, divisor, live = code
        reverse(instr, pool, divisor, live[o], V, G, C, j0, 0, instr.shape[0])
        return ran

    def program_tangents(code, V, T, C, K, lane):
        """The forward-mode driver's hook: values, then the K tangent lanes (of every
        point of the chunk: forward mode runs on the CPU)."""
        instr, pool, divisor = code[0], code[1], code[2]
        forward(instr, pool, divisor, V, C, lane, 0, instr.shape[0])
        tangent(instr, pool, divisor, V, T, C, K, 0, instr.shape[0])

    for kernel in (forward, reverse, tangent, program_forward, program_reverse,
                   program_tangents):
        distinct(kernel, fixed_c, int(one_lane))  # (three sets: cache.distinct says why)
    # (on the CPU the hooks and drivers are taken into their callers whole: driver.py)
    hook = register_jitable if one_lane else numba.njit(inline="always", error_model="numpy",
                                                        nogil=True)
    program_forward, program_reverse, program_tangents = \
        hook(program_forward), hook(program_reverse), hook(program_tangents)
    drive, drive_chunks = points_driver(program_forward, zero_nothing, program_reverse,
                                        fixed_c, int(one_lane), inline=not one_lane)
    tangent_chunks = tangents_driver(program_tangents, fixed_c, int(one_lane),
                                     inline=not one_lane)[1]
    return drive, drive_chunks, tangent_chunks, forward, reverse, tangent


# A broadcast operand (stride 0) receives an adjoint term from every element of its
# instruction. Summed one after another, each addition waits on the last (4 cycles).
# Every runner of a lean program (this interpreter, loop bodies, generated code, on CPU
# and GPU) sums them alike, so that their answers agree bit for bit: over LANES_MIN
# elements or more, the strided operands' terms element by element, then each broadcast
# operand's (a, then b) as LANES partial sums, element k into lane k % LANES in order,
# added once in lane_tree's order; over fewer (an ODE's few states, its 11 output
# times), one after another in element order, where lanes cost more than they save.
# LANES is 8 (tuning.py): with 4, Burgers' two lane sums over 126 cells were a third of
# its reverse sweep (each lane a chain of 32 additions); lane_sum's accumulators and
# _lanes_combined are written out for 8.


def lane_tree(sums):
    """The expression adding LANES partial sums (names or numbers) once: neighbours in
    pairs, then the pairs' sums in pairs, as lane_sum adds its lanes.

    >>> lane_tree([f"s{j}" for j in range(8)])
    '((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))'
    """
    terms = [str(s) for s in sums]
    assert len(terms) == LANES
    while len(terms) > 2:
        terms = [f"({a} + {b})" for a, b in zip(terms[::2], terms[1::2])]
    return f"{terms[0]} + {terms[1]}"


@register_jitable
def lane_sum(W, first, n, step):
    """The broadcast sum of the terms ``W[first + k * step]``, k < n (see LANES). The
    last lanes' terms are selected, not branched to: so LLVM inlines it where a loop
    body calls it with constant arguments and makes it a vector sum (with branches,
    Burgers' reverse sweep took 1.4x as long). An unused lane adds 0.0, which leaves
    every bit (a lane that starts at 0.0 is never -0.0)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    s4 = 0.0
    s5 = 0.0
    s6 = 0.0
    s7 = 0.0
    m = n - n % LANES
    for k in range(0, m, LANES):
        s0 += W[first + k * step]
        s1 += W[first + (k + 1) * step]
        s2 += W[first + (k + 2) * step]
        s3 += W[first + (k + 3) * step]
        s4 += W[first + (k + 4) * step]
        s5 += W[first + (k + 5) * step]
        s6 += W[first + (k + 6) * step]
        s7 += W[first + (k + 7) * step]
    last = first + max(n - 1, 0) * step
    s0 += W[min(first + m * step, last)] if m < n else 0.0
    s1 += W[min(first + (m + 1) * step, last)] if m + 1 < n else 0.0
    s2 += W[min(first + (m + 2) * step, last)] if m + 2 < n else 0.0
    s3 += W[min(first + (m + 3) * step, last)] if m + 3 < n else 0.0
    s4 += W[min(first + (m + 4) * step, last)] if m + 4 < n else 0.0
    s5 += W[min(first + (m + 5) * step, last)] if m + 5 < n else 0.0
    s6 += W[min(first + (m + 6) * step, last)] if m + 6 < n else 0.0
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@register_jitable
def broadcast_operand(instr, q):
    """Whether elementwise instruction q reads an operand that takes an adjoint (not a
    WHERE's condition) with stride 0."""
    op = instr[q, I_OP]
    if op == COPY:
        return False
    for t in range(min(operand_columns(op), 2)):
        if operand_stride(instr, q, t) == 0:
            return True
    return False


@register_jitable
def _term(op, t, g, x, y, z, w):
    """The adjoint term operand t (0: a, 1: b) of an elementwise op receives from an
    element with output adjoint g, operand values x, y (and condition w), value z (0.0
    where a WHERE does not select it): the arithmetic of ``reverse``'s element loops."""
    if op <= UNARY_LAST:
        return times(op, g, unary_partial(op, x, z))
    if op == WHERE:
        return g if (w != 0) == (t == 0) else 0.0
    if op == ADD:
        return g
    if op == SUB:
        return g if t == 0 else -1.0 * g
    if op == MUL:
        return g * y if t == 0 else g * x
    if t == 0:
        return times(op, g, binary_partial_x(op, x, y, z))
    return times(op, g, binary_partial_y(op, x, y, z))


# At one point (C = 1) the interpreter's commonest instructions, sums, differences and
# products over cells in a row, run through views of V and G: indexed ``V[(a + k * sa) *
# C + j]``, with slot numbers numba must take as possibly negative, LLVM left each loop
# scalar (1.4 us for 1024 cells against 0.4). The same arithmetic element by element:
# the same bits.

@register_jitable
def _cells_forward(op, V, out, a, b, sa, sb, n):
    """ADD, SUB or MUL of n cells at one point, each operand strided (1) or broadcast (0)."""
    Vz = V[out:out + n]
    if sa == 1 and sb == 1:
        Vx, Vy = V[a:a + n], V[b:b + n]
        if op == ADD:
            for k in range(n):
                Vz[k] = np.float64(Vx[k]) + np.float64(Vy[k])
        elif op == SUB:
            for k in range(n):
                Vz[k] = np.float64(Vx[k]) - np.float64(Vy[k])
        else:
            for k in range(n):
                Vz[k] = np.float64(Vx[k]) * np.float64(Vy[k])
    elif sa == 0 and sb == 1:
        x, Vy = np.float64(V[a]), V[b:b + n]
        if op == ADD:
            for k in range(n):
                Vz[k] = x + np.float64(Vy[k])
        elif op == SUB:
            for k in range(n):
                Vz[k] = x - np.float64(Vy[k])
        else:
            for k in range(n):
                Vz[k] = x * np.float64(Vy[k])
    elif sa == 1:
        Vx, y = V[a:a + n], np.float64(V[b])
        if op == ADD:
            for k in range(n):
                Vz[k] = np.float64(Vx[k]) + y
        elif op == SUB:
            for k in range(n):
                Vz[k] = np.float64(Vx[k]) - y
        else:
            for k in range(n):
                Vz[k] = np.float64(Vx[k]) * y
    else:
        x, y = np.float64(V[a]), np.float64(V[b])
        z = x + y if op == ADD else (x - y if op == SUB else x * y)
        for k in range(n):
            Vz[k] = z


@register_jitable
def _cells_reverse(op, V, G, out, a, b, n):
    """The VJP of an ADD, SUB or MUL of n cells at one point, both operands strided."""
    Gz, Gx, Gy = G[out:out + n], G[a:a + n], G[b:b + n]
    if op == MUL:
        Vx, Vy = V[a:a + n], V[b:b + n]
        for k in range(n):
            g = np.float64(Gz[k])
            xv, yv = np.float64(Vx[k]), np.float64(Vy[k])
            Gx[k] += g * yv
            Gy[k] += g * xv
    else:
        sign = 1.0 if op == ADD else -1.0
        for k in range(n):
            g = np.float64(Gz[k])
            Gx[k] += g
            Gy[k] += sign * g


@register_jitable
def _reverse_broadcast(instr, V, G, C, j0, j1, q):
    """The VJP of elementwise instruction q (LANES_MIN elements or more) with a broadcast operand:
    the strided operands' terms element by element, then each broadcast operand's in
    LANES partial sums (lane_sum's order), added once. The instruction's fields are
    read once: in a loop that stores to G, LLVM reloads what it reads of ``instr``."""
    op, out, n = instr[q, I_OP], instr[q, I_OUT], instr[q, I_N]
    a, b, c = instr[q, I_A], instr[q, I_B], instr[q, I_C]
    sa, sb, sc = instr[q, I_SA], instr[q, I_SB], instr[q, I_SC]
    count = 1 if op <= UNARY_LAST else 2        # (a WHERE's condition has no adjoint)
    for t in range(count):
        at, st = (a, sa) if t == 0 else (b, sb)
        if st == 0:
            continue
        if (op == MUL or op == ADD or op == SUB) and C == 1 and j1 - j0 == 1:
            # (one point: through views, as _cells_forward; the other operand is the
            # broadcast one, read once)
            Gz, Gt = G[out:out + n], G[at:at + n]
            if op == MUL:
                y = np.float64(V[b if t == 0 else a])
                for k in range(n):
                    Gt[k] += np.float64(Gz[k]) * y
            elif op == ADD or t == 0:
                for k in range(n):
                    Gt[k] += np.float64(Gz[k])
            else:
                for k in range(n):
                    Gt[k] += -1.0 * np.float64(Gz[k])
            continue
        if op == MUL:                           # (a parameter times a field)
            other, so = (b, sb) if t == 0 else (a, sa)
            for k in range(n):
                for j in range(j0, j1):
                    G[(at + k) * C + j] += np.float64(G[(out + k) * C + j]) * \
                        np.float64(V[(other + k * so) * C + j])
            continue
        if op == ADD or op == SUB:
            sign = -1.0 if op == SUB and t == 1 else 1.0
            for k in range(n):
                for j in range(j0, j1):
                    g = np.float64(G[(out + k) * C + j])
                    G[(at + k) * C + j] += g if sign > 0 else -1.0 * g
            continue
        for k in range(n):
            for j in range(j0, j1):
                if op == WHERE and (V[(c + k * sc) * C + j] != 0) != (t == 0):
                    continue                    # (the branch not taken: nothing added)
                G[(at + k) * C + j] += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb,
                                                sc, k)
    for t in range(count):
        at, st = (a, sa) if t == 0 else (b, sb)
        if st != 0:
            continue
        if (op == MUL or op == ADD or op == SUB) and C == 1 and j1 - j0 == 1:
            G[at] += _lanes_one_point(op, t, V, G, out, n, a, b, sa, sb)
            continue
        for j in range(j0, j1):
            G[at * C + j] += _lanes_combined(op, t, V, G, C, j, out, n, a, b, c, sa, sb, sc)


@register_jitable
def _lanes_one_point(op, t, V, G, out, n, a, b, sa, sb):
    """_lanes_combined of an ADD, SUB or MUL at one point, through views. (One function
    for both, the views chosen by a flag, took the product 17x as long: LLVM kept the
    choice inside the element loop.)"""
    Gz = G[out:out + n]
    other, so = (b, sb) if t == 0 else (a, sa)
    Vs = V[other:other + (n if so else 1)]
    mul, f = op == MUL, -1.0 if op == SUB and t == 1 else 1.0
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    s4 = 0.0
    s5 = 0.0
    s6 = 0.0
    s7 = 0.0
    m = n - n % LANES
    for k in range(0, m, LANES):
        s0 += _cell_term(mul, f, Gz, Vs, so, k)
        s1 += _cell_term(mul, f, Gz, Vs, so, k + 1)
        s2 += _cell_term(mul, f, Gz, Vs, so, k + 2)
        s3 += _cell_term(mul, f, Gz, Vs, so, k + 3)
        s4 += _cell_term(mul, f, Gz, Vs, so, k + 4)
        s5 += _cell_term(mul, f, Gz, Vs, so, k + 5)
        s6 += _cell_term(mul, f, Gz, Vs, so, k + 6)
        s7 += _cell_term(mul, f, Gz, Vs, so, k + 7)
    if m < n:
        s0 += _cell_term(mul, f, Gz, Vs, so, m)
    if m + 1 < n:
        s1 += _cell_term(mul, f, Gz, Vs, so, m + 1)
    if m + 2 < n:
        s2 += _cell_term(mul, f, Gz, Vs, so, m + 2)
    if m + 3 < n:
        s3 += _cell_term(mul, f, Gz, Vs, so, m + 3)
    if m + 4 < n:
        s4 += _cell_term(mul, f, Gz, Vs, so, m + 4)
    if m + 5 < n:
        s5 += _cell_term(mul, f, Gz, Vs, so, m + 5)
    if m + 6 < n:
        s6 += _cell_term(mul, f, Gz, Vs, so, m + 6)
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@register_jitable
def _cell_term(mul, f, Gz, Vs, so, k):
    """_term of element k of an ADD, SUB or MUL for a broadcast operand: the adjoint
    times the other operand's value (Vs, strided or not), or the adjoint signed by f."""
    g = np.float64(Gz[k])
    if mul:
        return g * np.float64(Vs[k * so])
    return g if f > 0 else -1.0 * g


@register_jitable
def _lanes_combined(op, t, V, G, C, j, out, n, a, b, c, sa, sb, sc):
    """Broadcast operand t's adjoint terms at point j from an instruction's n elements,
    summed as lane_sum sums them: element k into lane k % LANES, in one pass over the
    elements (a pass a lane took a 1024-cell product's reverse 15 ns an element)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    s4 = 0.0
    s5 = 0.0
    s6 = 0.0
    s7 = 0.0
    m = n - n % LANES
    for k in range(0, m, LANES):
        s0 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k)
        s1 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k + 1)
        s2 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k + 2)
        s3 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k + 3)
        s4 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k + 4)
        s5 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k + 5)
        s6 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k + 6)
        s7 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k + 7)
    if m < n:
        s0 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, m)
    if m + 1 < n:
        s1 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, m + 1)
    if m + 2 < n:
        s2 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, m + 2)
    if m + 3 < n:
        s3 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, m + 3)
    if m + 4 < n:
        s4 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, m + 4)
    if m + 5 < n:
        s5 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, m + 5)
    if m + 6 < n:
        s6 += _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, m + 6)
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@register_jitable
def _term_at(op, t, V, G, C, j, out, a, b, c, sa, sb, sc, k):
    """_term of an instruction's element k at point j, for operand t."""
    g = np.float64(G[(out + k) * C + j])
    if op == MUL:
        return g * np.float64(V[(b + k * sb) * C + j] if t == 0 else V[(a + k * sa) * C + j])
    if op == ADD or op == SUB:
        return g if op == ADD or t == 0 else -1.0 * g
    x = np.float64(V[(a + k * sa) * C + j])
    y = np.float64(V[(b + k * sb) * C + j]) if op > UNARY_LAST else 0.0
    w = V[(c + k * sc) * C + j] if op == WHERE else 0.0
    return _term(op, t, g, x, y, np.float64(V[(out + k) * C + j]), w)


@register_jitable
def binary_partials(op, x, y, z):
    """(d z / d x, d z / d y) of a binary op, the common three without a call."""
    if op == ADD or op == SUB:
        return 1.0, (1.0 if op == ADD else -1.0)
    if op == MUL:
        return y, x
    return binary_partial_x(op, x, y, z), binary_partial_y(op, x, y, z)


(_, _points_one, _tangent_points_one, _forward_one, _reverse_one, _tangent_one), \
    (_, _points_many, _tangent_points_many, _forward_many, _reverse_many, _tangent_many) = \
    _kernels(1), _kernels(0)
# one point (``lane``) of C, for a GPU thread (kernels/gpu.py)
lane_drive = _kernels(0, one_lane=True)[0]


@cached_njit()
def forward_range(instr, pool, divisor, V, q0, q1):
    """Instructions q0 .. q1 - 1 at one point (around a compiled loop, kernels/loops.py)."""
    _forward_one(instr, pool, divisor, V, 1, 0, q0, q1)


@cached_njit()
def reverse_range(instr, pool, divisor, live, V, G, q0, q1):
    """The reverse sweep of instructions q1 - 1 .. q0 at one point."""
    _reverse_one(instr, pool, divisor, live, V, G, 1, 0, q0, q1)


@cached_njit()
def forward_range_points(instr, pool, divisor, V, C, q0, q1):
    """forward_range for a chunk of C points (slot-major)."""
    _forward_many(instr, pool, divisor, V, C, 0, q0, q1)


@cached_njit()
def reverse_range_points(instr, pool, divisor, live, V, G, C, q0, q1):
    """reverse_range for a chunk of C points (slot-major)."""
    _reverse_many(instr, pool, divisor, live, V, G, C, 0, q0, q1)


@cached_njit()
def run_points(instr, pool, divisor, live, const_slots, const_vals, in_slots, out_slots, X,
               values, jac, want_jac, C, V, G):
    """The program at the points X (B, inputs), C points at a time on this thread:
    values (B, outputs) and, with ``want_jac``, jac (B, outputs, inputs). V and G are
    scratch of C times the slot count, in X's dtype; ``live[o]`` marks the
    instructions output o reaches (``live_sets``)."""
    code, chunks = (instr, pool, divisor, live), (X.shape[0] + C - 1) // C
    if C == 1:
        _points_one(code, const_slots, const_vals, in_slots, out_slots, X, values, jac,
                    want_jac, 0, chunks, 1, C, V, G)
    else:
        _points_many(code, const_slots, const_vals, in_slots, out_slots, X, values, jac,
                     want_jac, 0, chunks, 1, C, V, G)


@cached_njit()
def run_tangents(instr, pool, divisor, const_slots, const_vals, in_slots, out_slots, X, S,
                 values, tangents, C, V, T):
    """Forward mode at the points X (B, inputs): values (B, outputs) and the tangents
    (B, outputs, K) of the K directions S (B or 1, inputs, K), C points at a time. V
    and T: scratch of C and K * C times the slot count."""
    code, chunks = (instr, pool, divisor), (X.shape[0] + C - 1) // C
    if C == 1:
        _tangent_points_one(code, const_slots, const_vals, in_slots, out_slots, X, S,
                            values, tangents, 0, chunks, 1, C, V, T)
    else:
        _tangent_points_many(code, const_slots, const_vals, in_slots, out_slots, X, S,
                             values, tangents, 0, chunks, 1, C, V, T)


@cached_njit(parallel=True)
def run_tangents_parallel(instr, pool, divisor, const_slots, const_vals, in_slots,
                          out_slots, X, S, values, tangents, C, workers, nslots):
    """run_tangents with the chunks spread over ``workers`` threads."""
    B, K = X.shape[0], S.shape[2]
    code, chunks = (instr, pool, divisor), (B + C - 1) // C
    for w in prange(workers):
        V = np.empty(nslots * C, X.dtype)
        T = np.empty(nslots * K * C, X.dtype)
        _tangent_points_many(code, const_slots, const_vals, in_slots, out_slots, X, S,
                             values, tangents, w, chunks, workers, C, V, T)


@cached_njit(parallel=True)
def run_points_parallel(instr, pool, divisor, live, const_slots, const_vals, in_slots,
                        out_slots, X, values, jac, want_jac, C, workers, nslots):
    """run_points with the chunks spread over ``workers`` threads, each with scratch
    of its own."""
    code, chunks = (instr, pool, divisor, live), (X.shape[0] + C - 1) // C
    for w in prange(workers):
        V = np.empty(nslots * C, X.dtype)
        G = np.empty(nslots * C, X.dtype)
        _points_many(code, const_slots, const_vals, in_slots, out_slots, X, values, jac,
                     want_jac, w, chunks, workers, C, V, G)


@cached_njit()
def live_sets(instr, pool, nslots, out_slots):
    """For each output slot, the instructions its reverse sweep reaches (uint8 marks):
    the same for every point, so found once per program."""
    producer = producers(instr, nslots)
    live = np.zeros((out_slots.size, instr.shape[0]), np.uint8)
    for o in range(out_slots.size):
        if producer[out_slots[o]] >= 0:
            live[o, producer[out_slots[o]]] = 1
        mark_producers(instr, pool, producer, live[o], True)
    return live


@cached_njit()
def reached_by_any(instr, pool, nslots, out_slots):
    """The instructions some output's reverse sweep reaches (uint8 marks): the union of
    live_sets', in one pass."""
    producer = producers(instr, nslots)
    mark = np.zeros(instr.shape[0], np.uint8)
    for o in range(out_slots.size):
        if producer[out_slots[o]] >= 0:
            mark[producer[out_slots[o]]] = 1
    mark_producers(instr, pool, producer, mark, True)
    return mark


# ---- around a compiled loop (program.py, checkpointing.py) --------------------------------

@cached_njit()
def tangent_range(instr, pool, divisor, V, T, K, q0, q1):
    """The tangents of instructions q0 .. q1 - 1 at one point (around a compiled loop)."""
    _tangent_one(instr, pool, divisor, V, T, 1, K, q0, q1)


@cached_njit()
def tangent_range_points(instr, pool, divisor, V, T, C, K, q0, q1):
    """tangent_range for a chunk of C points."""
    _tangent_many(instr, pool, divisor, V, T, C, K, q0, q1)
