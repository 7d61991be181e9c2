"""A lean program's sparsity: which inputs each output element depends on, found from
its instructions, and a colouring of the inputs so that inputs of one colour never meet
in an output element. One forward-mode pass with a tangent lane per colour then gives
the whole Jacobian (autotape.sparse's matrices; compiled Hessians and Jacobians by
forward mode, batched.py): a banded one of 10^4 columns in three lanes. Exact: a zero
tangent carries nothing (elementwise.tangent_times), so a lane's other inputs add only
exact zeros to an entry.

>>> column_colours(Pattern(np.array([0, 2, 4]), np.array([0, 1, 1, 2]), (2, 3)))
array([0, 1, 0])
"""
from collections import namedtuple

import numpy as np

from .kernels.elementwise import passes_nothing
from .kernels.instruction_format import (CALL, COPY, GATHER, I_A, I_B, I_N, I_OP, I_OUT,
                                         I_SA, I_SB, PICK, PLACE, SCATTER_ADD, SEARCH, call_operands,
                                         pool_reads)
from .opcodes import BINARY_LAST, WHERE
from .tuning import MAX_DEPENDENCIES

Pattern = namedtuple("Pattern", ["indptr", "indices", "shape"])
Pattern.__doc__ = """A boolean matrix's nonzeros in csr form: row i's columns are
``indices[indptr[i]:indptr[i + 1]]``, ascending (scipy.sparse.csr_matrix's fields)."""


def dependency_pattern(lean):
    """The inputs each output element depends on, through the instructions: a
    ``Pattern`` (outputs, inputs), or None past MAX_DEPENDENCIES inputs per element.
    Each slot holds up to W input indices, padded with ``none``; an instruction's
    elements take the union of their sources' (none for ops whose derivative is zero
    everywhere, and not a WHERE's condition)."""
    n_in, none = lean.in_slots.size, np.iinfo(np.int64).max
    width = 4
    deps = np.full((lean.nslots, width), none, np.int64)
    deps[lean.in_slots, 0] = np.arange(n_in)
    for q in range(lean.instr.shape[0]):
        op, out, n = (int(v) for v in lean.instr[q, [I_OP, I_OUT, I_N]])
        if op == COPY:
            sources = [deps[int(lean.instr[q, I_A]) + np.arange(n)]]
        elif op == GATHER:
            sources = [deps[pool_reads(lean.instr, lean.pool, q)[0]]]
        elif op == SCATTER_ADD:
            src, at = pool_reads(lean.instr, lean.pool, q)
            per = np.bincount(at, minlength=n)
            order, start = np.argsort(at, kind="stable"), np.cumsum(per) - per
            sources = [np.full((n, width), none, np.int64)]
            for k in range(int(per.max(initial=0))):     # (the k-th source of each element)
                block = np.full((n, width), none, np.int64)
                has = per > k
                block[has] = deps[src[order[start[has] + k]]]
                sources.append(block)
        elif op == SEARCH:
            sources = []                       # (piecewise constant)
        elif op == PLACE:                      # (any element of its source)
            a, m = int(lean.instr[q, I_A]), int(lean.instr[q, I_SA])
            everything = np.unique(deps[a:a + m])
            everything = everything[everything != none]
            sources = [np.broadcast_to(_padded(everything, none), (n, everything.size))]
        elif op == CALL or op == PICK:         # (a PICK: any element of its table)
            runs = call_operands(lean.instr, lean.pool, q) if op == CALL else \
                [(int(lean.instr[q, I_A]), int(lean.instr[q, I_SA]))]
            slots = np.concatenate([s + np.arange(size) for s, size in runs]) if runs else \
                np.zeros(0, np.int64)
            everything = np.unique(deps[slots])
            everything = everything[everything != none]
            sources = [np.broadcast_to(_padded(everything, none), (n, everything.size))]
        elif passes_nothing(op):
            sources = []
        elif op <= BINARY_LAST or op == WHERE:
            strides = (int(lean.instr[q, I_SA]), int(lean.instr[q, I_SB]))
            operands = (int(lean.instr[q, I_A]), int(lean.instr[q, I_B]))
            sources = [deps[a + np.arange(n) * s] for a, s in zip(operands, strides)
                       if a >= 0]              # (not a WHERE's condition, I_C)
        else:                  # (a kind this walk does not know: no pattern rather than
            return None        # a wrong one; the Jacobian is then taken whole)
        merged = _union(sources, n, none)
        if merged.shape[1] > MAX_DEPENDENCIES:
            return None
        if merged.shape[1] > width:
            grown = np.full((lean.nslots, merged.shape[1]), none, np.int64)
            grown[:, :width] = deps
            deps, width = grown, merged.shape[1]
        deps[out:out + n] = none
        deps[out:out + n, :merged.shape[1]] = merged
    rows = deps[lean.out_slots]
    r, k = np.nonzero(rows != none)
    cols = rows[r, k]
    order = np.lexsort((cols, r))
    indptr = np.zeros(lean.out_slots.size + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=lean.out_slots.size), out=indptr[1:])
    return Pattern(indptr, cols[order], (lean.out_slots.size, n_in))


def _padded(values, none):
    return values if values.size else np.full(1, none, np.int64)


def _union(sources, n, none):
    """Row by row, the distinct indices of the sources' rows, packed left (``none``
    after them), as few columns as the longest row needs."""
    if not sources:
        return np.full((n, 1), none, np.int64)
    both = np.sort(np.concatenate(sources, axis=1), axis=1)
    repeated = np.zeros(both.shape, bool)
    repeated[:, 1:] = both[:, 1:] == both[:, :-1]
    both[repeated] = none
    both = np.sort(both, axis=1)
    used = int((both != none).sum(axis=1).max(initial=0))
    return both[:, :max(used, 1)]


def column_colours(pattern):
    """Greedy distance-1 colouring of a csr pattern's columns: in column order, a column
    takes the least colour that no column sharing one of its rows has (a band of width w
    takes w colours; a periodic one, whose last columns meet the first, up to w + 2).

    >>> column_colours(Pattern(np.array([0, 2, 4, 5]), np.array([0, 1, 1, 2, 2]), (3, 3)))
    array([0, 1, 0])
    """
    indptr, indices = np.asarray(pattern.indptr), np.asarray(pattern.indices)
    by_row = np.repeat(np.arange(pattern.shape[0]), np.diff(indptr))
    order = np.argsort(indices, kind="stable")            # (the pattern by columns)
    column_rows = by_row[order]
    column_ptr = np.zeros(pattern.shape[1] + 1, np.int64)
    np.cumsum(np.bincount(indices, minlength=pattern.shape[1]), out=column_ptr[1:])
    colour = np.full(pattern.shape[1], -1, np.int64)
    for j in range(pattern.shape[1]):
        rows = column_rows[column_ptr[j]:column_ptr[j + 1]]
        if not rows.size:
            colour[j] = 0
            continue
        neighbours = np.concatenate([indices[indptr[r]:indptr[r + 1]] for r in rows])
        taken = colour[neighbours]
        used = np.zeros(neighbours.size + 1, bool)
        used[taken[(taken >= 0) & (taken <= neighbours.size)]] = True
        colour[j] = int(np.argmin(used))            # (the least colour not used)
    return colour


def colour_seeds(colour):
    """The seed matrix (inputs, colours) of a forward pass with a lane per colour: input
    j's tangent is 1 in lane colour[j].

    >>> colour_seeds(np.array([0, 1, 0]))
    array([[1., 0.],
           [0., 1.],
           [1., 0.]])
    """
    seeds = np.zeros((colour.size, int(colour.max(initial=-1)) + 1))
    seeds[np.arange(colour.size), colour] = 1.0
    return seeds
