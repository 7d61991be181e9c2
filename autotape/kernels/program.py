"""The lean program: a recorded tape lowered once into instructions over flat value
slots, run for many points at once (compile.py's fast path).

Lowering (``lower``) gives every row an output needs a run of slots, one per element,
and turns each row into one instruction: an elementwise op reading its operands' slots
with a stride of 1 or 0 (a broadcast operand first gathered into slots of its own), a
GATHER (reshape, views, concatenation, take, index assignment: every output element is
one input element, found by running the row's own forward on slot numbers), or a
SCATTER_ADD (sum and mean reductions, the scatters). Rows it cannot express (max / min
/ prod reductions, scans, linear algebra) leave the tape to the interpreting sweep.

Running (``run_points``): the values of B points live as ``V[slot][point]``, the point
innermost, so each instruction is one contiguous loop over points. Points go in chunks
of C, each chunk through the whole forward program and then one reverse sweep per
output element with seeds of 1, its slots small enough to stay in cache; with
``parallel`` the chunks are spread over numba's threads. Every op's math is the op
table's (elementwise.py): values, partials, masks and ``passes_nothing`` are the same
functions the tape's kernels call. The storage may be float32: each op then computes
in float64 and rounds its result, as float32 tensors do.
"""
import numpy as np
from numba import prange
from numba.extending import register_jitable

from ..opcodes import (BINARY_LAST, CONCAT, LEAF, MEAN, PUT_ADD, RESHAPE, SCATTER,
                       SETITEM, SOURCE_LAST, STRIDED, SUM, TAKE, UNARY_LAST, WHERE, ADD,
                       SUB, MUL, DIV)
from ..tape_format import AUX, B, OP, VLOC, A, array_location, operand, operand_count, \
    where_condition
from .cache import cached_njit
from .context import operand_map, shape_of, size_of, sweep_context, value
from .elementwise import (binary_partial_x, binary_partial_y, binary_value, passes_nothing,
                          times, unary_partial, unary_value)
from .indexing import indexing_forward, pattern_map
from .reduce import kept_map

GATHER, SCATTER_ADD = -1, -2            # instruction kinds beside the tape's opcodes
# Instruction columns: kind or opcode, output slot, operand slots a / b / condition,
# element count, the operands' strides (1 or 0), where a gather's slots start in the
# pool. A SCATTER_ADD keeps its pair count in I_SA and its (source, output offset)
# pairs in the pool, and divides by its divisor (a mean's count).
I_OP, I_OUT, I_A, I_B, I_C, I_N, I_SA, I_SB, I_SC, I_P = range(10)
WIDTH = 10

LOWERED, UNSUPPORTED = 0, 1


@cached_njit()
def lower(rows, ipool, shape_ndim, shape_start, shape_dims, shape_size, arena_addr,
          big_addr, in_rows, out_rows, dgemm):
    """Lower the rows ``out_rows`` need into instructions. Returns (status, detail,
    instructions, pool, divisor per instruction, slot of each row (-1: none), slot
    count, const slots, their values): status UNSUPPORTED names the row in detail."""
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
    slot = np.full(n, -1, np.int64)
    ns = 0
    for i in range(n):
        if needed[i]:
            slot[i] = ns
            ns += size_of(real, i)
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
    is_input = np.zeros(n, np.bool_)
    for r in in_rows:
        is_input[r] = True
    for i in range(n):
        if not needed[i]:
            continue
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
            ops[0] = rows[i, A]
            if op > UNARY_LAST:
                ops[1] = rows[i, B]
            if op == WHERE:
                ops[2] = where_condition(ipool, rows[i, AUX])
            at = np.full(3, -1, np.int64)
            for t in range(3):
                r = ops[t]
                if r < 0:
                    continue
                m = size_of(real, r)
                if m == sz or m == 1:
                    at[t], strides[t] = slot[r], (1 if m == sz else 0)
                    continue
                bmap = operand_map(real, r, i)           # broadcast: gather it first
                _emit(code, GATHER, ns, -1, -1, -1, sz, 0, 0, 0, len(pool))
                divisor.append(1.0)
                for k in range(sz):
                    pool.append(slot[r] + bmap[k])
                at[t], strides[t] = ns, 1
                ns += sz
            _emit(code, op, out, at[0], at[1], at[2], sz, strides[0], strides[1],
                  strides[2], 0)
            divisor.append(1.0)
        elif op == RESHAPE or op == STRIDED or op == SETITEM or op == CONCAT or op == TAKE:
            if op == TAKE:                      # its indices are values, not slots
                idx = rows[i, B]
                v = value(real, idx)
                for e in range(v.size):
                    track[slot[idx] + e] = v[e]
            indexing_forward(tracked, i)
            _emit(code, GATHER, out, -1, -1, -1, sz, 0, 0, 0, len(pool))
            divisor.append(1.0)
            for k in range(sz):
                pool.append(np.int64(track[out + k]))
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
            _emit(code, SCATTER_ADD, out, -1, -1, -1, sz, m, 0, 0, len(pool))
            divisor.append(m / sz if op == MEAN else 1.0)
            for k in range(m):
                pool.append(slot[a] + k)
                pool.append(dst[k])
        else:
            lane[0] = rows2[0, 0] + big2[0] + np.int64(track[0]) + touched[0, 0]
            return (UNSUPPORTED, i, np.zeros((0, WIDTH), np.int64), none, np.zeros(0),
                    slot, ns, none, np.zeros(0))
    # the owners of the contexts' borrowed arrays live to here (numba frees a local
    # after its last use, and the contexts do not count as uses)
    lane[0] = rows2[0, 0] + big2[0] + np.int64(track[0]) + touched[0, 0]
    count = len(code) // WIDTH
    instr = np.empty((count, WIDTH), np.int64)
    for q in range(count):
        for c in range(WIDTH):
            instr[q, c] = code[q * WIDTH + c]
    return (LOWERED, 0, instr, _ints(pool), _floats(divisor), slot, ns,
            _ints(const_slots), _floats(const_vals))


@register_jitable(inline="always")
def _emit(code, op, out, a, b, c, n, sa, sb, sc, p):
    code.append(op)
    code.append(out)
    code.append(a)
    code.append(b)
    code.append(c)
    code.append(n)
    code.append(sa)
    code.append(sb)
    code.append(sc)
    code.append(p)


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

@register_jitable
def _forward(instr, pool, divisor, V, C):
    """Every instruction, in order, for the C points of V (slot-major)."""
    for q in range(instr.shape[0]):
        op, out, n = instr[q, I_OP], instr[q, I_OUT], instr[q, I_N]
        if op == GATHER:
            p = instr[q, I_P]
            for k in range(n):
                src, dst = pool[p + k] * C, (out + k) * C
                for j in range(C):
                    V[dst + j] = V[src + j]
        elif op == SCATTER_ADD:
            p, pairs, d = instr[q, I_P], instr[q, I_SA], divisor[q]
            for k in range(n * C):
                V[out * C + k] = 0.0
            for k in range(pairs):
                src, dst = pool[p + 2 * k] * C, (out + pool[p + 2 * k + 1]) * C
                for j in range(C):
                    V[dst + j] += V[src + j]
            if d != 1.0:
                for k in range(n * C):
                    V[out * C + k] = np.float64(V[out * C + k]) / d
        elif op <= UNARY_LAST:
            a, sa = instr[q, I_A], instr[q, I_SA]
            for k in range(n):
                x, z = (a + k * sa) * C, (out + k) * C
                for j in range(C):
                    V[z + j] = unary_value(op, np.float64(V[x + j]))
        elif op <= BINARY_LAST:
            a, b, sa, sb = instr[q, I_A], instr[q, I_B], instr[q, I_SA], instr[q, I_SB]
            for k in range(n):
                x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                if op == ADD:
                    for j in range(C):
                        V[z + j] = np.float64(V[x + j]) + np.float64(V[y + j])
                elif op == SUB:
                    for j in range(C):
                        V[z + j] = np.float64(V[x + j]) - np.float64(V[y + j])
                elif op == MUL:
                    for j in range(C):
                        V[z + j] = np.float64(V[x + j]) * np.float64(V[y + j])
                elif op == DIV:
                    for j in range(C):
                        V[z + j] = np.float64(V[x + j]) / np.float64(V[y + j])
                else:
                    for j in range(C):
                        V[z + j] = binary_value(op, np.float64(V[x + j]),
                                                np.float64(V[y + j]))
        else:                                                   # WHERE
            a, b, c = instr[q, I_A], instr[q, I_B], instr[q, I_C]
            sa, sb, sc = instr[q, I_SA], instr[q, I_SB], instr[q, I_SC]
            for k in range(n):
                x, y, w, z = (a + k * sa) * C, (b + k * sb) * C, (c + k * sc) * C, \
                    (out + k) * C
                for j in range(C):
                    V[z + j] = V[x + j] if V[w + j] != 0 else V[y + j]


@register_jitable
def _reach(producer, live, slot, count, stride):
    """Mark live the instructions that wrote ``count`` slots from ``slot``."""
    if stride == 0:
        count = 1
    for k in range(count):
        p = producer[slot + k]
        if p >= 0:
            live[p] = True


@register_jitable
def _reverse(instr, pool, divisor, producer, live, V, G, C):
    """The reverse sweep over the instructions marked live (those the seeds reach; a
    dead one would multiply its zero adjoint by inf partials into nan)."""
    for q in range(instr.shape[0] - 1, -1, -1):
        if not live[q]:
            continue
        op, out, n = instr[q, I_OP], instr[q, I_OUT], instr[q, I_N]
        if op == GATHER:
            p = instr[q, I_P]
            for k in range(n):
                src, dst = pool[p + k], (out + k) * C
                for j in range(C):
                    G[src * C + j] += G[dst + j]
                if producer[src] >= 0:
                    live[producer[src]] = True
        elif op == SCATTER_ADD:
            p, pairs, d = instr[q, I_P], instr[q, I_SA], divisor[q]
            for k in range(pairs):
                src, dst = pool[p + 2 * k], (out + pool[p + 2 * k + 1]) * C
                for j in range(C):
                    G[src * C + j] += np.float64(G[dst + j]) / d
                if producer[src] >= 0:
                    live[producer[src]] = True
        elif op <= UNARY_LAST:
            if passes_nothing(op):
                continue
            a, sa = instr[q, I_A], instr[q, I_SA]
            for k in range(n):
                x, z = (a + k * sa) * C, (out + k) * C
                for j in range(C):
                    G[x + j] += times(op, np.float64(G[z + j]), unary_partial(
                        op, np.float64(V[x + j]), np.float64(V[z + j])))
            _reach(producer, live, a, n, sa)
        elif op <= BINARY_LAST:
            if passes_nothing(op):
                continue
            a, b, sa, sb = instr[q, I_A], instr[q, I_B], instr[q, I_SA], instr[q, I_SB]
            for k in range(n):
                x, y, z = (a + k * sa) * C, (b + k * sb) * C, (out + k) * C
                if op == ADD or op == SUB:
                    for j in range(C):
                        g = np.float64(G[z + j])
                        G[x + j] += g
                        G[y + j] += g if op == ADD else -g
                elif op == MUL:
                    for j in range(C):
                        g = np.float64(G[z + j])
                        xv, yv = np.float64(V[x + j]), np.float64(V[y + j])
                        G[x + j] += g * yv
                        G[y + j] += g * xv
                else:
                    for j in range(C):
                        g = np.float64(G[z + j])
                        xv, yv, zv = np.float64(V[x + j]), np.float64(V[y + j]), \
                            np.float64(V[z + j])
                        G[x + j] += times(op, g, binary_partial_x(op, xv, yv, zv))
                        G[y + j] += times(op, g, binary_partial_y(op, xv, yv, zv))
            _reach(producer, live, a, n, sa)
            _reach(producer, live, b, n, sb)
        else:                                                   # WHERE: selects
            a, b, c = instr[q, I_A], instr[q, I_B], instr[q, I_C]
            sa, sb, sc = instr[q, I_SA], instr[q, I_SB], instr[q, I_SC]
            for k in range(n):
                x, y, w, z = (a + k * sa) * C, (b + k * sb) * C, (c + k * sc) * C, \
                    (out + k) * C
                for j in range(C):
                    if V[w + j] != 0:
                        G[x + j] += G[z + j]
                    else:
                        G[y + j] += G[z + j]
            _reach(producer, live, a, n, sa)
            _reach(producer, live, b, n, sb)


@register_jitable
def _chunk(instr, pool, divisor, producer, const_slots, const_vals, in_slots, out_slots,
           X, values, jac, want_jac, p0, C, V, G, live):
    """Points p0 .. p0 + C - 1 (fewer at the end): forward, values out, and with
    ``want_jac`` one reverse sweep per output element."""
    B = X.shape[0]
    m = min(C, B - p0)
    for k in range(const_slots.size):
        s = const_slots[k] * C
        for j in range(C):
            V[s + j] = const_vals[k]
    for e in range(in_slots.size):
        s = in_slots[e] * C
        for j in range(C):
            V[s + j] = X[p0 + min(j, m - 1), e]        # (a short last chunk repeats)
    _forward(instr, pool, divisor, V, C)
    for o in range(out_slots.size):
        s = out_slots[o] * C
        for j in range(m):
            values[p0 + j, o] = V[s + j]
    if not want_jac:
        return
    for o in range(out_slots.size):
        G[:] = 0.0
        live[:] = False
        s = out_slots[o]
        for j in range(C):
            G[s * C + j] = 1.0
        if producer[s] >= 0:
            live[producer[s]] = True
        _reverse(instr, pool, divisor, producer, live, V, G, C)
        for e in range(in_slots.size):
            s = in_slots[e] * C
            for j in range(m):
                jac[p0 + j, o, e] = G[s + j]


@cached_njit()
def run_points(instr, pool, divisor, producer, const_slots, const_vals, in_slots,
               out_slots, X, values, jac, want_jac, C, V, G):
    """The program at the points X (B, inputs), C points at a time on this thread:
    values (B, outputs) and, with ``want_jac``, jac (B, outputs, inputs). V and G are
    scratch of C times the slot count, in X's dtype."""
    live = np.zeros(instr.shape[0], np.bool_)
    for p0 in range(0, X.shape[0], C):
        _chunk(instr, pool, divisor, producer, const_slots, const_vals, in_slots,
               out_slots, X, values, jac, want_jac, p0, C, V, G, live)


@cached_njit(parallel=True)
def run_points_parallel(instr, pool, divisor, producer, const_slots, const_vals, in_slots,
                        out_slots, X, values, jac, want_jac, C, workers, nslots):
    """run_points with the chunks spread over ``workers`` threads, each with scratch
    of its own."""
    B = X.shape[0]
    chunks = (B + C - 1) // C
    for w in prange(workers):
        V = np.empty(nslots * C, X.dtype)
        G = np.empty(nslots * C, X.dtype)
        live = np.zeros(instr.shape[0], np.bool_)
        for t in range(w, chunks, workers):
            _chunk(instr, pool, divisor, producer, const_slots, const_vals, in_slots,
                   out_slots, X, values, jac, want_jac, t * C, C, V, G, live)


@cached_njit()
def producers(instr, nslots):
    """For each slot, the instruction that writes it (-1: an input or a constant)."""
    out = np.full(nslots, -1, np.int64)
    for q in range(instr.shape[0]):
        for k in range(instr[q, I_N]):
            out[instr[q, I_OUT] + k] = q
    return out
