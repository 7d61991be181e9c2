"""Element-by-element code rolled back into array instructions.

``at.jit`` of numba code written cell by cell (``for i in range(n): new[i] = u[i] +
...``) records a scalar instruction per element: a step of a 128-cell stencil is a
thousand instructions, past what a loop body may hold, and the interpreter runs them
one at a time (30-40x the same model written with numpy arrays). The cells' groups of
instructions are alike: the same ops in the same order, each operand either a value
computed earlier in the same cell or one from before the cells. ``reroll`` finds such
runs of like groups (a cell each) and writes each position of the group as one array
instruction over the cells: an operand the same in every cell read broadcast, one the
cells read at consecutive slots read in place, any other gathered first (a neighbour
``u[i - 1]``, a ring's ``x[(i + 1) % n]``). A position that reads a value an earlier
cell of the run computed (a running sum: ``s = s + x[i]``) stays scalar, a cell at a
time after the rolled positions; a group whose positions mostly do is a time step,
whose loop the loop finder finds (kernels/loops.py).

Each element's value is the op applied to the same operands, so values keep their bits;
an adjoint's terms are summed in the array instructions' order rather than the
recording's, so gradients can differ from the recording's sweep in the last bits.
"""
import numpy as np

from .kernels.instruction_format import GATHER, I_A, I_B, I_C, I_N, I_OP, I_OUT, I_P, \
    OPERAND_COLUMNS, STRIDE_COLUMNS, WIDTH
from .opcodes import BINARY_LAST, UNARY_FIRST, WHERE
from .tuning import MAX_GROUP, MIN_CELLS, PERIODS


def reroll(instr, nslots, in_slots, const_slots, const_vals, out_slots):
    """``(instr, pool, nslots, const_slots, const_vals, out_slots)`` of the program with
    its runs of like scalar groups as array instructions, or None where there are none.
    Inputs keep their slots, constants follow them, the instructions' outputs come
    after, and last the constants cells read at consecutive slots (a forcing term in
    cell 0 only: ``[F[t], 0.0, 0.0, ...]``; a loop over steps reads a step's from a
    table, where a gather of them would differ from step to step).

    >>> from autotape.opcodes import MUL
    >>> instr = np.zeros((8, WIDTH), np.int64)       # y[i] = x[i] * x[i], 8 cells
    >>> instr[:, I_OP], instr[:, I_OUT], instr[:, I_A], instr[:, I_B] = MUL, 8 + np.arange(8), \\
    ...     np.arange(8), np.arange(8)
    >>> instr[:, I_C], instr[:, I_N] = -1, 1
    >>> instr[:, list(STRIDE_COLUMNS[:2])] = 1       # a and b read in place
    >>> none = np.zeros(0, np.int64)
    >>> code, pool, nslots, _, _, out = reroll(instr, 16, np.arange(8), none, none,
    ...                                        8 + np.arange(8))
    >>> code[:, I_N].tolist(), out.tolist() == list(range(8, 16))
    ([8], True)
    """
    count = instr.shape[0]
    runs = _runs(instr, nslots) if count >= MIN_CELLS else []
    if not runs:
        return None
    new_slot = np.full(nslots, -1, np.int64)
    new_slot[in_slots] = in_slots
    low = int(in_slots.size)
    new_slot[const_slots] = low + np.arange(const_slots.size)
    top = low + const_slots.size
    blocks, pool, gathered = [], [], {}
    constants, late = {}, []     # {values' bits: their first slot - top}, [(row, column, it)]
    at = 0
    for start, group, cells, rolled in runs + [(count, 0, 0, None)]:
        if start > at:                                   # scalar instructions, as they are
            top = _scalars(instr[at:start], new_slot, top, blocks)
        if not cells:
            break
        rows = instr[start:start + group * cells].reshape(cells, group, WIDTH)
        for q in np.nonzero(rolled)[0]:
            row = np.array(rows[0, q])
            for col, scol in zip(OPERAND_COLUMNS, STRIDE_COLUMNS):
                if row[col] < 0:
                    row[scol] = 0
                    continue
                read = new_slot[rows[:, q, col]]
                if (read == read[0]).all():
                    row[col], row[scol] = read[0], 0
                elif (np.diff(read) == 1).all():
                    row[col], row[scol] = read[0], 1
                elif ((read >= low) & (read < low + const_slots.size)).all():
                    bits = const_vals[read - low].tobytes()
                    if bits not in constants:
                        constants[bits] = sum(len(b) for b in constants) // 8
                    late.append((row, col, constants[bits]))
                    row[scol] = 1
                else:
                    key = read.tobytes()
                    if key not in gathered:
                        gathered[key] = top
                        blocks.append(_gather(top, read, len(pool)))
                        pool.extend(read.tolist())
                        top += cells
                    row[col], row[scol] = gathered[key], 1
            # (slots given in the order instructions write them: a loop over steps
            # finds each step's slots in one stretch)
            same = not row[list(STRIDE_COLUMNS)].any()  # every cell the same value (0.01 * p[1]):
            width = 1 if same else cells         # one, read broadcast
            row[I_OUT], row[I_N] = top, width
            new_slot[rows[:, q, I_OUT]] = top + (0 if same else np.arange(cells))
            top += width
            blocks.append(row[None])
        if not rolled.all():                             # the rest cell by cell, after
            top = _scalars(rows[:, ~rolled].reshape(-1, WIDTH), new_slot, top, blocks)
        at = start + group * cells
    for row, col, offset in late:          # (the blocks of constants after every output)
        row[col] = top + offset
    extra = np.frombuffer(b"".join(constants), np.float64)
    code = np.concatenate(blocks)
    pool = np.array(pool or [0], np.int64)
    const_slots = np.concatenate([low + np.arange(const_slots.size, dtype=np.int64),
                                  top + np.arange(extra.size, dtype=np.int64)])
    return code, pool, top + extra.size, const_slots, \
        np.concatenate([const_vals, extra]), new_slot[out_slots]


def _scalars(block, new_slot, top, blocks):
    """Scalar instructions appended to ``blocks`` as they are, their outputs given the
    slots from ``top`` on and their operands renamed; the next free slot."""
    block = block.copy()
    new_slot[block[:, I_OUT]] = top + np.arange(block.shape[0])
    block[:, I_OUT] = new_slot[block[:, I_OUT]]
    for col in OPERAND_COLUMNS:
        read = block[:, col] >= 0
        block[read, col] = new_slot[block[read, col]]
    blocks.append(block)
    return top + block.shape[0]


def _gather(out, sources, p):
    row = np.zeros((1, WIDTH), np.int64)
    row[0, I_OP], row[0, I_OUT], row[0, I_N], row[0, I_P] = GATHER, out, sources.size, p
    row[0, I_A:I_C + 1] = -1
    return row


def _runs(instr, nslots):
    """``[(first instruction, group size, groups, rolled)]``, in program order: the runs
    of like groups of scalar elementwise instructions, and the positions in a group
    (``rolled``, a mask) reading no value an earlier group of the run computed."""
    count = instr.shape[0]
    op = instr[:, I_OP]
    scalar = (instr[:, I_N] == 1) & (((op >= UNARY_FIRST) & (op <= BINARY_LAST)) | (op == WHERE))
    sig = np.where(scalar, op * 8 + (instr[:, I_B] >= 0) * 2 + (instr[:, I_C] >= 0), -1)
    producer = np.full(nslots, -1, np.int64)
    producer[instr[:, I_OUT]] = np.arange(count)
    rows = np.arange(count)
    made_by = [np.where(instr[:, col] >= 0, producer[np.maximum(instr[:, col], 0)], -1)
               for col in OPERAND_COLUMNS]
    # how far back each operand was computed (far: before any group it could share)
    back = [np.where(p >= 0, rows - p, MAX_GROUP + 1) for p in made_by]
    key = (sig * (MAX_GROUP + 2) + np.minimum(back[0], MAX_GROUP + 1)) * (MAX_GROUP + 2) \
        + np.minimum(back[1], MAX_GROUP + 1)
    claimed = sig < 0
    found = []
    # runs whose every position rolls first, at any period: a matrix-vector product's
    # rows (a multiply and an add a term) roll as rows, not as a run of products beside
    # one long chain of adds
    for partial in (False, True):
        for group in _periods(key, claimed):
            if group * MIN_CELLS > count:
                break
            like = (sig[:-group] == sig[group:]) & ~claimed[:-group] & ~claimed[group:]
            for lo, hi in _true_runs(like, (MIN_CELLS - 1) * group):
                s, end = lo, hi + group  # rows lo .. hi + group - 1 repeat with this period
                while end - s >= MIN_CELLS * group:
                    tries = [(_independent(made_by, s + phase, group, end, partial), s + phase)
                             for phase in range(group)]
                    (cells, rolled), start = max(
                        tries, key=lambda t: t[0][0] * (t[0][1].sum() if t[0][0] else 0))
                    if cells < MIN_CELLS:
                        break
                    found.append((start, group, cells, rolled))
                    claimed[start:start + group * cells] = True
                    s = start + group * cells
    return sorted(found, key=lambda run: run[0])


def _periods(key, claimed):
    """Group sizes worth trying, smallest first: the distances from an instruction to
    the next one of its kind reading its operands alike, the most frequent."""
    order = np.argsort(key, kind="stable")
    same = (key[order[1:]] == key[order[:-1]]) & ~claimed[order[1:]]
    gaps = (order[1:] - order[:-1])[same]
    gaps = gaps[(gaps > 0) & (gaps <= MAX_GROUP)]
    if gaps.size == 0:
        return []
    counts = np.bincount(gaps)
    often = np.nonzero(counts >= MIN_CELLS - 1)[0]
    often = often[np.argsort(-counts[often], kind="stable")][:PERIODS]
    return sorted(int(g) for g in often)


def _true_runs(mask, least):
    """``(first, end)`` of each run of True in mask at least ``least`` long."""
    edges = np.diff(np.concatenate([[0], mask.view(np.int8), [0]]))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    keep = ends - starts >= least
    return list(zip(starts[keep].tolist(), ends[keep].tolist()))


def _independent(made_by, start, group, end, partial):
    """``(cells, rolled)``: how many groups from ``start`` (up to ``end``) roll, and the
    positions in a group that do: those reading no value an earlier group of the run
    computed, nor a position that does (a running sum's adds stay scalar, one a cell,
    after the rolled positions; unless ``partial``, none may). Which positions read
    earlier groups is seen in the first MIN_CELLS groups; the run ends where a rolled
    position would read one."""
    most = (end - start) // group
    if most < MIN_CELLS:
        return 0, None
    carried = _carried(made_by, start, group, MIN_CELLS)
    for q in range(group):                    # (a position reading a carried one)
        for p in made_by:
            back = p[start + q] - start
            if 0 <= back < q and carried[back]:
                carried[q] = True
    if 2 * carried.sum() > group or (carried.any() and not partial):
        return 0, None        # (a time step: its state carried, the loop finder's to find)
    cells = 0
    while cells < most:          # (twice as far each time: a run can span many steps)
        cells = min(max(2 * cells, MIN_CELLS), most)
        bad = _first_unlike(made_by, start, group, cells, ~carried)
        if bad < cells:
            return bad, ~carried
    return most, ~carried


def _first_unlike(made_by, start, group, cells, rolled):
    """The first of ``cells`` groups from ``start`` where a rolled position reads an
    earlier group's value, or reads its operands otherwise than the first group does
    (from another position of its own group, or from before the run): else ``cells``."""
    stop = start + cells * group
    first = start + group * np.arange(cells)[:, None]
    bad = np.zeros(cells, bool)
    for p in made_by:
        src = p[start:stop].reshape(cells, group)
        inside = np.where(src >= first, src - first, -1)         # (a position of its own)
        earlier = (src >= start) & (src < first)
        bad |= (earlier | (inside != inside[0]))[:, rolled].any(axis=1)
    hit = np.nonzero(bad)[0]
    return int(hit[0]) if hit.size else cells


def _carried(made_by, start, group, cells):
    """Per position in a group: whether it reads a value an earlier one of ``cells``
    groups from ``start`` computed."""
    stop = start + cells * group
    cell = (np.arange(start, stop) - start) // group
    carried = np.zeros(cells * group, bool)
    for p in made_by:
        q = p[start:stop]
        carried |= (q >= start) & ((q - start) // group < cell)
    return carried.reshape(cells, group).any(axis=0)
