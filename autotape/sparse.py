"""Sparse Jacobians of compiled functions, as ``scipy.sparse`` matrices.

The pattern comes from the recording itself: every instruction of the lean program
passes on, for each element it writes, the set of input elements it depends on
(``sparsity``). The columns are then coloured so that no two columns of one colour
share a row (greedy distance-1 colouring), and one forward-mode pass with a tangent
lane per colour gives every entry (``jacobian``): a banded Jacobian of 10^4 columns
takes three lanes, not 10^4.

    >>> import autotape.sparse as ats
    >>> def rhs(u):                        # a 1-D diffusion: each cell's neighbours
    ...     return np.roll(u, 1) - 2.0 * u + np.roll(u, -1) + at.sin(u)
    >>> c = at.compile(rhs, np.zeros(6))
    >>> J = ats.jacobian(c, np.linspace(0, 1, 6))
    >>> J.shape, J.nnz, int(ats.colours(c, np.zeros(6)).max()) + 1
    ((6, 6), 18, 3)

Rows run over f's output elements (several outputs one after another), columns over
its arguments' elements (likewise). Where f does not run as a lean program (see
``Compiled.explain``), the Jacobian is taken whole and returned as a sparse matrix
of its nonzeros.
"""
import weakref

import numpy as np
import scipy.sparse

from .compile import Compiled, call_arguments, joined
from .kernels.elementwise import passes_nothing
from .opcodes import BINARY_LAST, WHERE
from .kernels.program import (CALL, COPY, GATHER, I_A, I_B, I_N, I_OP, I_OUT, I_P, I_SA,
                              I_SB, SCATTER_ADD)
from .pytree import flatten

__all__ = ["jacobian", "sparsity", "colours"]

MAX_DEPENDENCIES = 512     # inputs one element may depend on before the pattern is taken
                           # as dense (a sum over everything: colouring gains nothing)

_found = weakref.WeakKeyDictionary()    # Compiled -> {lean program id: (lean, pattern,
                                        # colours, seeds)}


def jacobian(compiled, *args):
    """d outputs / d arguments at ``args``, a ``scipy.sparse.csr_matrix`` (output
    elements by argument elements), from one forward-mode pass with a lane per colour.
    """
    _check(compiled)
    args = call_arguments(args)
    found = _program(compiled, args)
    if found is None:
        return scipy.sparse.csr_matrix(_dense(compiled, args))
    p, pattern, colours_, seeds = found
    _, compressed = p.lean.tangents(joined(args)[None], seeds[None])
    rows = np.repeat(np.arange(pattern.shape[0]), np.diff(pattern.indptr))
    values = compressed[0][rows, colours_[pattern.indices]]     # (in the pattern's order)
    return scipy.sparse.csr_matrix((values, pattern.indices.copy(), pattern.indptr.copy()),
                                   shape=pattern.shape)


def sparsity(compiled, *args):
    """The Jacobian's pattern at arguments of these shapes (found from the recording, so
    the same at every point of them): a boolean ``scipy.sparse.csr_matrix``."""
    _check(compiled)
    args = call_arguments(args)
    found = _program(compiled, args)
    if found is None:
        return scipy.sparse.csr_matrix(_dense(compiled, args) != 0)
    return found[1]


def colours(compiled, *args):
    """Each column's colour (an int array): no two columns of one colour share a row."""
    _check(compiled)
    args = call_arguments(args)
    found = _program(compiled, args)
    if found is None:
        return np.arange(sum(a.size for a in args))
    return found[2]


def _check(compiled):
    if not isinstance(compiled, Compiled):
        raise TypeError(f"autotape.sparse: expected a Compiled (at.compile), not "
                        f"{type(compiled).__name__}")


def _dense(compiled, args):
    """The whole Jacobian as (output elements, argument elements)."""
    leaves, _ = flatten(compiled.jacobian(*args))      # (outputs, then arguments)
    rows = []
    for k in range(0, len(leaves), len(args)):
        blocks = [np.asarray(t.numpy()) for t in leaves[k:k + len(args)]]
        m = blocks[0].size // max(args[0].size, 1)
        rows.append(np.concatenate([b.reshape(m, -1) for b in blocks], axis=1))
    return np.concatenate(rows, axis=0)


def _program(compiled, args):
    """(program, pattern, colours, seeds) for these argument shapes, or None where f
    does not run as a lean program or its pattern is dense."""
    p = compiled._lean("value", args, eager=False)
    if p is None or p.lean.user_calls is not None or any(kind != "row" for kind, _, _ in
                                                          p.outputs):
        return None
    known = _found.setdefault(compiled, {})
    entry = known.get(id(p.lean))
    if entry is None or entry[0] is not p.lean:
        pattern = _pattern(p.lean)
        if pattern is None:
            entry = (p.lean, None, None, None)
        else:
            colour = _colour(pattern)
            seeds = np.zeros((pattern.shape[1], int(colour.max(initial=-1)) + 1))
            seeds[np.arange(pattern.shape[1]), colour] = 1.0
            entry = (p.lean, pattern, colour, seeds)
        known[id(p.lean)] = entry
    if entry[1] is None:
        return None
    return p, entry[1], entry[2], entry[3]


def _pattern(lean):
    """The inputs each output element depends on, through the instructions: a boolean
    csr matrix (outputs, inputs), or None past MAX_DEPENDENCIES inputs per element.
    Each slot holds up to W input indices, padded with ``none``; an instruction's
    elements take the union of their sources' (none for ops whose derivative is zero
    everywhere, and not a WHERE's condition)."""
    n_in, none = lean.in_slots.size, np.iinfo(np.int64).max
    width = 4
    deps = np.full((lean.nslots, width), none, np.int64)
    deps[lean.in_slots, 0] = np.arange(n_in)
    for q in range(lean.instr.shape[0]):
        op, out, n = (int(v) for v in lean.instr[q, [I_OP, I_OUT, I_N]])
        p = int(lean.instr[q, I_P])
        if op == COPY:
            sources = [deps[int(lean.instr[q, I_A]) + np.arange(n)]]
        elif op == GATHER:
            sources = [deps[lean.pool[p:p + n]]]
        elif op == SCATTER_ADD:
            pairs = int(lean.instr[q, I_SA])
            src, at = lean.pool[p:p + 2 * pairs:2], lean.pool[p + 1:p + 2 * pairs:2]
            per = np.bincount(at, minlength=n)
            order, start = np.argsort(at, kind="stable"), np.cumsum(per) - per
            sources = [np.full((n, width), none, np.int64)]
            for k in range(int(per.max(initial=0))):     # (the k-th source of each element)
                block = np.full((n, width), none, np.int64)
                has = per > k
                block[has] = deps[src[order[start[has] + k]]]
                sources.append(block)
        elif op == CALL:
            count = int(lean.pool[p])
            slots = np.concatenate([int(lean.pool[p + 1 + 2 * j]) + np.arange(
                int(lean.pool[p + 2 + 2 * j])) for j in range(count)]) if count else \
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
    return scipy.sparse.csr_matrix((np.ones(r.size, bool), (r, rows[r, k])),
                                   shape=(lean.out_slots.size, n_in))


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


def _colour(pattern):
    """Greedy distance-1 colouring of the columns: in column order, a column takes the
    least colour that no column sharing one of its rows has (a band of width w takes w
    colours; a periodic one, whose last columns meet the first, up to w + 2)."""
    by_column = pattern.tocsc()
    colour = np.full(pattern.shape[1], -1, np.int64)
    for j in range(pattern.shape[1]):
        rows = by_column.indices[by_column.indptr[j]:by_column.indptr[j + 1]]
        if not rows.size:
            colour[j] = 0
            continue
        neighbours = np.concatenate([pattern.indices[pattern.indptr[r]:pattern.indptr[r + 1]]
                                     for r in rows])
        taken = colour[neighbours]
        used = np.zeros(neighbours.size + 1, bool)
        used[taken[(taken >= 0) & (taken <= neighbours.size)]] = True
        colour[j] = int(np.argmin(used))            # (the least colour not used)
    return colour
