"""The lean program's instruction format, written once for lowering, the interpreters,
the loop finder, the code generators and the analyses over a program.

An instruction is one row of WIDTH int64s over the program's value slots (a slot holds
one element of one value, for every point):

=========  ================================================================
I_OP       the kind: an elementwise opcode (opcodes.py, >= 0), or COPY, GATHER,
           SCATTER_ADD, CALL, PICK, PLACE, SEARCH (< 0)
I_OUT      the first of the I_N slots it writes, one per element
I_A..I_C   its operand slots a, b, c (-1: none)
I_N        its element count
I_SA..I_SC each operand's stride: 1 (a slot per element) or 0 (one slot, broadcast)
I_P        where its list starts in the program's int pool
=========  ================================================================

Each kind has one layout, written by its ``encode_*`` function here:

- elementwise: ``out[k] = op(a[k sa], b[k sb])``; a WHERE's condition is c
  (``c[k sc] != 0 ? a : b``); a unary op has b = c = -1.
- COPY: ``out[k] = a[k]``, from I_A (strides unused).
- GATHER: ``out[k] = pool[p + k]``: a source slot per element.
- SCATTER_ADD: I_SA (source, output offset) pairs in the pool from p, each source
  added into ``out + offset``; the program's divisor for the instruction then divides
  (a mean's count, else 1).
- PICK: ``out[k] = a[int(b[k])]``: a gather whose positions are values the program
  computed (a ``take`` by a traced index), one per element; I_SA holds a's size m.
  Positions are read as numpy's (negative: from the end; kernels/indexing.py's
  ``picked``). Its adjoint goes to a only.
- PLACE: PICK's transpose: ``out[int(b[k])] += a[k]`` for the I_SA elements of a (and
  of b), into I_N zeroed elements. Its adjoint goes to a only.
- SEARCH: ``out[k]`` = how many of a's I_SA slots (non-decreasing) lie below ``b[k]``
  (numpy's searchsorted, as positions a PICK reads); no adjoint.
- CALL: a user's numba op (kernels/calls.py): its tape row in I_A; in the pool its
  operand count, then (first slot, size) for each operand.

The walk over the slots an instruction reads (``operand_fields``) and the decoders
beside it are the only code that knows these layouts; every ``register_jitable``
function here runs as plain Python too.
"""
import numpy as np
from numba.extending import register_jitable

from ..opcodes import BINARY_LAST, UNARY_LAST
from .elementwise import passes_nothing

GATHER, SCATTER_ADD, COPY, CALL, PICK, SEARCH, PLACE = -1, -2, -3, -4, -5, -6, -7
I_OP, I_OUT, I_A, I_B, I_C, I_N, I_SA, I_SB, I_SC, I_P = range(10)
WIDTH = 10
OPERAND_COLUMNS = (I_A, I_B, I_C)
STRIDE_COLUMNS = (I_SA, I_SB, I_SC)     # operand t's stride is in STRIDE_COLUMNS[t]
KIND_NAMES = {GATHER: "GATHER", SCATTER_ADD: "SCATTER_ADD", COPY: "COPY", CALL: "CALL",
              PICK: "PICK", SEARCH: "SEARCH", PLACE: "PLACE"}


# ---- encoders: an instruction appended to a flat list of code (and the pool) ------------

@register_jitable(inline="always")
def _encode(code, op, out, a, b, c, n, sa, sb, sc, p):
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
def encode_elementwise(code, op, out, n, a, b, c, sa, sb, sc):
    """``out[k] = op(a[k sa], b[k sb])`` over n elements (c: a WHERE's condition)."""
    _encode(code, op, out, a, b, c, n, sa, sb, sc, 0)


@register_jitable
def encode_copy(code, out, src, n):
    """``out[k] = src[k]`` over n elements."""
    _encode(code, COPY, out, src, -1, -1, n, 1, 0, 0, 0)


@register_jitable
def encode_gather(code, pool, out, sources):
    """``out[k] = sources[k]``, a source slot per element."""
    _encode(code, GATHER, out, -1, -1, -1, sources.size, 0, 0, 0, len(pool))
    for k in range(sources.size):
        pool.append(sources[k])


@register_jitable
def encode_scatter_add(code, pool, out, n, first_source, offsets):
    """``out[offsets[k]] += first_source + k`` for every k, into n zeroed elements."""
    _encode(code, SCATTER_ADD, out, -1, -1, -1, n, offsets.size, 0, 0, len(pool))
    for k in range(offsets.size):
        pool.append(first_source + k)
        pool.append(offsets[k])


@register_jitable
def encode_call(code, pool, out, n, row, slots, sizes):
    """A user's op (its tape ``row``) writing n elements from operands at ``slots``, of
    ``sizes`` elements each."""
    _encode(code, CALL, out, row, -1, -1, n, 0, 0, 0, len(pool))
    pool.append(slots.size)
    for k in range(slots.size):
        pool.append(slots[k])
        pool.append(sizes[k])


@register_jitable
def encode_pick(code, out, n, table, m, positions):
    """``out[k] = table[int(positions[k])]`` over n elements, ``table`` m slots long."""
    _encode(code, PICK, out, table, positions, -1, n, m, 1, 0, 0)


@register_jitable
def encode_place(code, out, n, source, positions, m):
    """``out[int(positions[k])] += source[k]`` for k < m, into n zeroed elements."""
    _encode(code, PLACE, out, source, positions, -1, n, m, 1, 0, 0)


@register_jitable
def encode_search(code, out, n, sorted_values, m, values):
    """``out[k]`` = how many of the m slots from ``sorted_values`` lie below
    ``values[k]``, over n elements."""
    _encode(code, SEARCH, out, sorted_values, values, -1, n, m, 1, 0, 0)


@register_jitable
def as_instructions(code):
    """The flat list of code as the (count, WIDTH) array the runners read."""
    count = len(code) // WIDTH
    instr = np.empty((count, WIDTH), np.int64)
    for q in range(count):
        for c in range(WIDTH):
            instr[q, c] = code[q * WIDTH + c]
    return instr


# ---- decoders ----------------------------------------------------------------------------

@register_jitable
def pooled(op):
    """Whether an instruction of kind ``op`` lists its sources in the pool (one slot per
    element or pair)."""
    return op == GATHER or op == SCATTER_ADD


@register_jitable
def operand_columns(op):
    """How many of the columns I_A, I_B, I_C an elementwise instruction or a COPY reads:
    1 (COPY, unary), 2 (binary) or 3 (WHERE)."""
    if op == COPY or op <= UNARY_LAST:
        return 1
    return 2 if op <= BINARY_LAST else 3


@register_jitable
def adjoint_columns(op):
    """How many of I_A, I_B an elementwise instruction or a COPY passes an adjoint to: none
    where its derivative is zero everywhere, never a WHERE's condition."""
    if op != COPY and passes_nothing(op):
        return 0
    return min(operand_columns(op), 2)


@register_jitable
def operand_slot(instr, q, t):
    """The first slot of instruction q's operand t (0: a, 1: b, 2: c), or -1."""
    return instr[q, I_A + t]


@register_jitable
def operand_stride(instr, q, t):
    """The stride (1 or 0) at which instruction q reads its operand t (0: a, 1: b, 2: c)."""
    return 1 if instr[q, I_OP] == COPY else instr[q, I_SA + t]


@register_jitable
def stride(instr, q, col):
    """The stride (1 or 0) at which instruction q reads its operand in column ``col``."""
    return operand_stride(instr, q, col - I_A)


@register_jitable
def operand_count_of(instr, q, col):
    """How many slots instruction q reads from its operand in column ``col``."""
    return instr[q, I_N] if stride(instr, q, col) else 1


def pool_reads(instr, pool, q):
    """The slots a GATHER (each element's source) or a SCATTER_ADD (each pair's source)
    reads, and a SCATTER_ADD's pairs' output offsets (a GATHER: None)."""
    p = int(instr[q, I_P])
    if instr[q, I_OP] == GATHER:
        return pool[p:p + int(instr[q, I_N])], None
    pairs = int(instr[q, I_SA])
    return pool[p:p + 2 * pairs:2], pool[p + 1:p + 2 * pairs:2]


def call_operands(instr, pool, q):
    """A CALL's operands as (first slot, size) pairs."""
    p = int(instr[q, I_P])
    return [(int(pool[p + 1 + 2 * k]), int(pool[p + 2 + 2 * k])) for k in range(int(pool[p]))]


# ---- the walk over the slots an instruction reads -------------------------------------------
# A field is where an instruction names slots it reads: (IN_ROW, column, count) for the
# column's slot and the count - 1 after it, (IN_POOL, position, count) for a slot kept
# in the pool. Rewriting a field's slot (``set_field_slot``) renumbers the program.

IN_ROW, IN_POOL = 0, 1


@register_jitable
def operand_fields(instr, pool, q, adjoint_only, fields):
    """Instruction q's operand fields into ``fields`` (at least ``field_capacity`` rows
    of 3); returns how many. With ``adjoint_only``, only those its VJP passes an adjoint
    to."""
    op, n, p = instr[q, I_OP], instr[q, I_N], instr[q, I_P]
    m = 0
    if op == CALL:
        for k in range(pool[p]):
            fields[m, 0], fields[m, 1], fields[m, 2] = IN_POOL, p + 1 + 2 * k, pool[p + 2 + 2 * k]
            m += 1
    elif op == PICK or op == PLACE or op == SEARCH:   # (positions pass no adjoint, nor
        if op != SEARCH or not adjoint_only:          # does anything of a SEARCH)
            fields[0, 0], fields[0, 1], fields[0, 2] = IN_ROW, I_A, instr[q, I_SA]
            m = 1
        if not adjoint_only:
            fields[m, 0], fields[m, 1] = IN_ROW, I_B
            fields[m, 2] = instr[q, I_SA] if op == PLACE else n
            m += 1
    elif op == GATHER or op == SCATTER_ADD:
        step = 1 if op == GATHER else 2
        for k in range(n if op == GATHER else instr[q, I_SA]):
            fields[m, 0], fields[m, 1], fields[m, 2] = IN_POOL, p + step * k, 1
            m += 1
    else:
        for t in range(adjoint_columns(op) if adjoint_only else operand_columns(op)):
            if instr[q, I_A + t] >= 0:
                fields[m, 0], fields[m, 1] = IN_ROW, I_A + t
                fields[m, 2] = n if stride(instr, q, I_A + t) else 1
                m += 1
    return m


@register_jitable
def field_slot(instr, pool, q, fields, j):
    """The first slot field j of instruction q names."""
    return instr[q, fields[j, 1]] if fields[j, 0] == IN_ROW else pool[fields[j, 1]]


@register_jitable
def set_field_slot(instr, pool, q, fields, j, s):
    """Field j of instruction q names slot s from now on."""
    if fields[j, 0] == IN_ROW:
        instr[q, fields[j, 1]] = s
    else:
        pool[fields[j, 1]] = s


@register_jitable
def field_capacity(instr, pool):
    """Rows of ``fields`` enough for any instruction of the program."""
    most = 3
    for q in range(instr.shape[0]):
        op = instr[q, I_OP]
        if op == GATHER:
            most = max(most, instr[q, I_N])
        elif op == SCATTER_ADD:
            most = max(most, instr[q, I_SA])
        elif op == CALL:
            most = max(most, pool[instr[q, I_P]])
    return most


@register_jitable
def producers(instr, nslots):
    """Per slot: the instruction that writes it (-1: an input or a constant)."""
    producer = np.full(nslots, -1, np.int64)
    for q in range(instr.shape[0]):
        for k in range(instr[q, I_N]):
            producer[instr[q, I_OUT] + k] = q
    return producer


@register_jitable
def mark_producers(instr, pool, producer, mark, adjoint_only):
    """Mark, from the marked instructions back, those whose values a marked one reads
    (with ``adjoint_only``: those its VJP passes an adjoint to)."""
    fields = np.empty((field_capacity(instr, pool), 3), np.int64)
    for q in range(instr.shape[0] - 1, -1, -1):
        if not mark[q]:
            continue
        for j in range(operand_fields(instr, pool, q, adjoint_only, fields)):
            s = field_slot(instr, pool, q, fields, j)
            for k in range(fields[j, 2]):
                r = producer[s + k]
                if r >= 0:
                    mark[r] = 1


def may_read(instr, pool, nslots):
    """Per slot, whether an instruction may read it (from Python, with numpy: every
    operand column's run, every pool entry; a few more than those read, never fewer)."""
    ends = np.zeros(nslots + 1, np.int64)
    for col in OPERAND_COLUMNS:
        c = instr[:, col]
        whole = (instr[:, I_OP] == COPY) | (instr[:, I_SA + col - I_A] != 0)
        n = np.where(whole, instr[:, I_N], 1)
        op = instr[:, I_OP]                   # (I_SA: a PICK's table, a SEARCH's sorted
        n = np.where(((op == PICK) | (op == SEARCH)) & (col == I_A), instr[:, I_SA], n)
        n = np.where((op == PLACE) & (col != I_C), instr[:, I_SA], n)   # values, a PLACE's)
        at = c >= 0
        np.add.at(ends, np.minimum(c[at], nslots), 1)
        np.add.at(ends, np.minimum(c[at] + n[at], nslots), -1)
    read = np.cumsum(ends)[:nslots] > 0
    listed = pool[(pool >= 0) & (pool < nslots)]
    read[listed] = True
    return read


def fields_of(instr, pool, q, adjoint_only=False):
    """Instruction q's operand fields (``operand_fields``), from Python."""
    op = int(instr[q, I_OP])
    size = int(instr[q, I_N]) if op == GATHER else int(instr[q, I_SA]) if op == SCATTER_ADD \
        else int(pool[instr[q, I_P]]) if op == CALL else 3
    fields = np.empty((max(size, 1), 3), np.int64)
    return fields[:operand_fields(instr, pool, q, adjoint_only, fields)]


def read_runs(instr, pool, q, adjoint_only=False):
    """The slot runs (first slot, length) instruction q reads (with ``adjoint_only``:
    those its VJP passes an adjoint to), from Python."""
    fields = fields_of(instr, pool, q, adjoint_only)
    return [(int(field_slot(instr, pool, q, fields, j)), int(fields[j, 2]))
            for j in range(len(fields))]


def rewrite_slots(instr, pool, q, new_slot):
    """Rename every slot instruction q writes and reads, in place: ``new_slot(first,
    length)`` gives a run's new first slot."""
    instr[q, I_OUT] = new_slot(int(instr[q, I_OUT]), int(instr[q, I_N]))
    fields = fields_of(instr, pool, q)
    for j in range(len(fields)):
        s = int(field_slot(instr, pool, q, fields, j))
        set_field_slot(instr, pool, q, fields, j, new_slot(s, int(fields[j, 2])))
