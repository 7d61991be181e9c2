"""Elementwise instructions cut where the pieces they read, or are read as, are cut.

A stencil written with slices and ``np.concatenate`` (Burgers' ``ux =
concatenate([u[1:2] - u[0:1], 0.5 * (u[2:] - u[:-2]), u[-1:] - u[-2:-1]])``) lowers to
pieces of 1, 126 and 1 cells among instructions over all 128 cells: ``c * u`` is read
by the three pieces of ``c * u * ux``, and ``u - c * u * ux`` reads them. A fused run
(fusion.py) takes instructions of one width, so Burgers' step was ~13 element loops.
``aligned_pieces`` cuts an elementwise instruction

- where the instructions that read it read it in pieces that tile it (every cell read
  at stride 1 by exactly one of them), and every other read stays within a piece;
- where an operand it reads at stride 1 is exactly the outputs of several instructions
  (or pieces cut by the rule above), one after another.

The two rules apply again to what they cut until nothing changes: a 1-D heat step
``u + p[0] * lap + c * u`` has ``u + p[0] * lap`` cut by the second rule, then the sum
with ``c * u`` by the second, then ``c * u`` by the first; cut only halfway, the step
kept two loops and gained boundary lines (3% slower than uncut).

Gathers, scatters and users' calls read slots whatever wrote them, so their reads
neither cut nor prevent a cut. A read of another alignment (``u[k + 1]`` against
``u[k]``) cuts nothing, and must lie within one piece of what it reads; cuts are made
only within EDGE_CELLS of an instruction's ends (the boundary cells of a stencil), so
that they do not spread along a stencil's shifted reads into instructions of one cell
each, and only in instructions over PIECES_MIN_CELLS cells or more (tuning.py). Every
cell computes what it did, so values keep their bits; a broadcast operand's adjoint
terms are summed piece by piece.
"""
import numpy as np

from ..tuning import PIECES_MIN_CELLS
from .instruction_format import COPY, I_N, I_OP, I_OUT, OPERAND_COLUMNS, STRIDE_COLUMNS

EDGE_CELLS = 2                  # cuts only this close to an instruction's ends


def aligned_pieces(instr, divisor):
    """(instr, divisor, origin): the program's instructions with elementwise ones cut
    (see above), their divisors, and for each instruction the index of the one it came
    from.

    >>> from autotape.kernels.instruction_format import WIDTH
    >>> from autotape.opcodes import MUL, SUB
    >>> code = np.full((5, WIDTH), -1, np.int64)
    >>> code[:, 5:9] = [[40, 1, 0, 0], [1, 1, 1, 0], [38, 1, 1, 0], [1, 1, 1, 0],
    ...                 [40, 1, 1, 0]]
    >>> code[0, :4] = [MUL, 100, 0, 500]  # c * u over 40 cells, read in pieces of 1, 38, 1
    >>> code[1, :4] = [MUL, 200, 100, 300]
    >>> code[2, :4] = [MUL, 201, 101, 301]
    >>> code[3, :4] = [MUL, 239, 139, 339]
    >>> code[4, :4] = [SUB, 400, 0, 200]  # u - c * u * ux reads the pieces
    >>> cut, _, origin = aligned_pieces(code, np.ones(5))
    >>> origin.tolist(), cut[:, I_N].tolist()
    ([0, 0, 0, 1, 2, 3, 4, 4, 4], [1, 38, 1, 1, 38, 1, 1, 38, 1])
    """
    count = instr.shape[0]
    origin = np.arange(count)
    ops, outs, sizes = instr[:, I_OP], instr[:, I_OUT], instr[:, I_N]
    elementwise = ops >= 0
    wide = elementwise & (sizes >= PIECES_MIN_CELLS)      # (those that may be cut)
    if count == 0 or not wide.any():
        return instr, divisor, origin
    nslots = int((outs + sizes).max()) + 1
    owner = np.full(nslots, -1, np.int64)
    for q in np.nonzero(sizes > 0)[0]:
        owner[outs[q]:outs[q] + sizes[q]] = q
    reads = {}                      # producer -> [(reader, first slot, count, stride 1)]
    operands = {}                   # reader -> [(first slot, count)] read at stride 1
    feeds = {}                      # reader -> the producers it reads
    for q in range(count):
        if elementwise[q]:
            for col, scol in zip(OPERAND_COLUMNS, STRIDE_COLUMNS):
                c = int(instr[q, col])
                if c < 0 or c >= nslots or owner[c] < 0:
                    continue
                strided = int(instr[q, scol]) == 1
                reads.setdefault(int(owner[c]), []).append(
                    (q, c, int(sizes[q]) if strided else 1, strided))
                feeds.setdefault(q, set()).add(int(owner[c]))
                if strided and wide[q] and c + sizes[q] <= nslots:
                    operands.setdefault(q, []).append((c, int(sizes[q])))
        elif ops[q] == COPY:
            c = int(instr[q, OPERAND_COLUMNS[0]])
            if 0 <= c < nslots and owner[c] >= 0:
                reads.setdefault(int(owner[c]), []).append((q, c, int(sizes[q]), False))
    cuts = {}
    slot_owner, out_list, size_list = owner.tolist(), outs.tolist(), sizes.tolist()
    producers = {q for q in reads if wide[q]}   # (to look at again: the first rule,
    readers = set(operands)                     # then the second)
    while producers or readers:
        q = producers.pop() if producers else readers.pop()
        if q in reads and wide[q]:              # (a producer read in tiling pieces)
            edges = _tiled_edges(reads[q], cuts, int(outs[q]), int(sizes[q]))
        else:
            edges = set()
        for c, n in operands.get(q, ()):        # (a reader of pieces)
            found = set(_piece_edges(slot_owner, out_list, size_list, cuts, c, n))
            if _near_ends(found, n):
                edges |= found
        if edges - cuts.get(q, set()):          # (cut further: what it reads, and
            cuts.setdefault(q, set()).update(edges)     # what reads it, again)
            producers |= {p for p in feeds.get(q, ()) if wide[p]}
            readers |= {r for r, _, _, _ in reads.get(q, ()) if r in operands}
    if not cuts:
        return instr, divisor, origin
    pieces = np.ones(count, np.int64)
    for q, edges in cuts.items():
        pieces[q] += len(edges)
    where = np.repeat(origin, pieces)
    rows = instr[where]
    at = 0
    for q in range(count):                      # (cut rows: each piece its cells)
        if q in cuts:
            bounds = [0] + sorted(cuts[q]) + [int(sizes[q])]
            for first, end in zip(bounds, bounds[1:]):
                row = rows[at]
                row[I_OUT] += first
                row[I_N] = end - first
                for col, scol in zip(OPERAND_COLUMNS, STRIDE_COLUMNS):
                    if row[col] >= 0 and row[scol] == 1:
                        row[col] += first
                at += 1
        else:
            at += 1
    return rows, divisor[where].astype(np.float64), where


def _pieces(cuts, q, n):
    """Instruction q's pieces (first, count) relative to its start, n cells in all."""
    at = [0] + sorted(cuts.get(q, ())) + [n]
    return [(a, b - a) for a, b in zip(at, at[1:])]


def _tiled_edges(found, cuts, low, n):
    """The cuts (relative to ``low``) of a producer of n cells whose stride-1 readers'
    pieces tile it, every other read within one tile; empty where they do not."""
    tiles = sorted({(c + a, m) for r, c, count, strided in found if strided
                    for a, m in _pieces(cuts, r, count)})
    if len(tiles) < 2 or tiles[0][0] != low or tiles[-1][0] + tiles[-1][1] != low + n or \
            any(a + m != b for (a, m), (b, _) in zip(tiles, tiles[1:])):
        return set()
    edges = [c - low for c, _ in tiles[1:]]
    if not _near_ends(edges, n) or not all(
            _within(c - low + a, m, edges) for r, c, count, strided in found
            for a, m in (_pieces(cuts, r, count) if strided else [(0, count)])):
        return set()
    return set(edges)


def _near_ends(edges, n):
    return all(e <= EDGE_CELLS or e >= n - EDGE_CELLS for e in edges)


def _within(first, count, edges):
    """Whether cells [first, first + count) lie within one piece between ``edges``."""
    return not any(first < e < first + count for e in edges)


def _piece_edges(owner, outs, sizes, cuts, c, n):
    """The cuts (relative to c) of a read of slots [c, c + n) that is exactly the outputs
    of several instructions, or of the pieces they are cut into, one after another; []
    where it is not."""
    q = owner[c]
    if q < 0 or (owner[c + n - 1] == q and q not in cuts):
        return []                               # (one instruction's cells, or none)
    edges, k = [], 0
    while k < n:
        q = owner[c + k]
        if q < 0:
            return []
        starts = [outs[q]] + [outs[q] + e for e in sorted(cuts.get(q, ()))]
        if c + k not in starts:
            return []
        following = [s for s in starts[1:] if s > c + k] + [outs[q] + sizes[q]]
        end = min(following) - c
        if end > n:
            return []
        if k:
            edges.append(k)
        k = end
    return edges
