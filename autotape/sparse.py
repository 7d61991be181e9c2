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

from . import func
from .compile import Compiled
from .recording import call_arguments, joined
from .pytree import flatten
from .sparsity import colour_seeds, column_colours, dependency_pattern

__all__ = ["jacobian", "sparsity", "recorded_sparsity", "colours", "column_colours",
           "hessian", "hessian_sparsity", "star_colours"]


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
    the same at every point of them): a boolean ``scipy.sparse.csr_matrix``. Where f
    does not run as a lean program (guards: its ops may differ elsewhere), every entry
    (no pattern holds everywhere; the nonzeros at one point could miss another's)."""
    _check(compiled)
    args = call_arguments(args)
    found = _program(compiled, args)
    if found is None:
        return _everything(compiled, args)
    return found[1]


def recorded_sparsity(compiled, *args):
    """The Jacobian's pattern as ``sparsity`` finds it from the recording, or None where
    f does not run as a lean program (guards, user calls): then no pattern holds at
    every point, and ``sparsity`` gives only the nonzeros at these arguments.

    >>> c = at.compile(lambda u: u * np.roll(u, 1), np.zeros(3))
    >>> recorded_sparsity(c, np.zeros(3)).toarray().astype(int)   # (zero here, not in general)
    array([[1, 0, 1],
           [1, 1, 0],
           [0, 1, 1]])
    """
    _check(compiled)
    args = call_arguments(args)
    found = _program(compiled, args)
    return None if found is None else found[1]


def colours(compiled, *args):
    """Each column's colour (an int array): no two columns of one colour share a row."""
    _check(compiled)
    args = call_arguments(args)
    found = _program(compiled, args)
    if found is None:
        return np.arange(sum(a.size for a in args))
    return found[2]


def hessian(compiled, *args):
    """The Hessian of a compiled scalar function at ``args``, a symmetric
    ``scipy.sparse.csr_matrix`` over the arguments' elements: one forward-over-reverse
    pass with a tangent lane per colour of a star colouring.

    The pattern is that of the gradient's Jacobian, found from the recording of
    ``grad(f)`` (``hessian_sparsity``). A star colouring (no two neighbours share a
    colour, and every path of four vertices has three colours) lets symmetry recover
    every entry: H_ij is read from row i where j's colour is unique among i's neighbours,
    else from row j. An arrowhead Hessian takes two lanes, where colouring its columns
    as a Jacobian's would take all of them.

    >>> import autotape.sparse as ats
    >>> def energy(x):                      # a chain: each element meets its neighbours
    ...     return ((x[1:] - x[:-1]) ** 2).sum() + at.cos(x).sum()
    >>> c = at.compile(energy, np.zeros(8))
    >>> H = ats.hessian(c, np.linspace(0, 1, 8))
    >>> H.shape, H.nnz, int(ats.star_colours(c, np.zeros(8)).max()) + 1
    ((8, 8), 22, 3)
    """
    _check(compiled)
    args = call_arguments(args)
    found = _hessian_program(compiled, args)
    if found is None:
        leaves, _ = flatten(compiled.hessian(*args))
        n = sum(a.size for a in args)
        if len(args) == 1:
            return scipy.sparse.csr_matrix(np.asarray(leaves[0].numpy()).reshape(n, n))
        return scipy.sparse.csr_matrix(np.block(
            [[np.asarray(leaves[i * len(args) + j].numpy()).reshape(a.size, b.size)
              for j, b in enumerate(args)] for i, a in enumerate(args)]))
    p, pattern, colour, seeds, source = found
    _, compressed = p.lean.tangents(joined(args)[None], seeds[None])
    values = compressed[0][source[0], source[1]]
    return scipy.sparse.csr_matrix((values, pattern.indices.copy(), pattern.indptr.copy()),
                                   shape=pattern.shape)


def hessian_sparsity(compiled, *args):
    """The Hessian's pattern at arguments of these shapes, symmetric: a boolean
    ``scipy.sparse.csr_matrix`` (from the recording of the gradient)."""
    _check(compiled)
    args = call_arguments(args)
    found = _hessian_program(compiled, args)
    if found is None:                      # (as sparsity's: no pattern holds everywhere)
        n = sum(a.size for a in args)
        return scipy.sparse.csr_matrix(np.ones((n, n), bool))
    return found[1]


def star_colours(compiled, *args):
    """Each argument element's colour in the Hessian's star colouring (an int array)."""
    _check(compiled)
    args = call_arguments(args)
    found = _hessian_program(compiled, args)
    return np.arange(sum(a.size for a in args)) if found is None else found[2]


_gradients = weakref.WeakKeyDictionary()    # Compiled -> the Compiled of its gradient


def _hessian_program(compiled, args):
    """(the gradient's program, the symmetric pattern, star colours, seeds, where each
    entry is read in the compressed product), or None (no lean program, a dense
    pattern)."""
    gradient = _gradients.get(compiled)
    if gradient is None:
        f = compiled.f

        def grad_of_f(*a):
            out = f(*a)
            if getattr(out, "size", 1) != 1:
                raise ValueError(f"autotape.sparse.hessian: f must return a scalar, got "
                                 f"shape {out.shape}")
            return func.grad(f, argnums=tuple(range(len(a))))(*a)
        gradient = _gradients.setdefault(compiled, Compiled(grad_of_f, args))
    found = _program(gradient, args)
    if found is None:
        return None
    p, jac_pattern = found[0], found[1]
    known = _found.setdefault(gradient, {})
    entry = known.get(("star", id(p.lean)))
    if entry is None or entry[0] is not p.lean:
        pattern = ((jac_pattern + jac_pattern.T) > 0).tocsr()
        pattern.sort_indices()
        colour = _star_colour(pattern)
        seeds = colour_seeds(colour)
        entry = (p.lean, pattern, colour, seeds, _recovery(pattern, colour))
        known[("star", id(p.lean))] = entry
    return (p,) + entry[1:]


def _star_colour(pattern):
    """Greedy star colouring of the symmetric pattern's graph (Gebremedhin, Manne and
    Pothen 2005, algorithm 4.1): a vertex takes the least colour that no neighbour has,
    no vertex two steps away through an uncoloured one has, and that would not make a
    path of four vertices two-coloured."""
    n = pattern.shape[0]
    neighbours = [pattern.indices[pattern.indptr[v]:pattern.indptr[v + 1]] for v in range(n)]
    neighbours = [nb[nb != v] for v, nb in enumerate(neighbours)]
    colour = np.full(n, -1, np.int64)
    for v in range(n):
        forbidden = set()
        for w in neighbours[v]:
            cw = colour[w]
            if cw >= 0:
                forbidden.add(cw)
            for x in neighbours[w]:
                cx = colour[x]
                if x == v or cx < 0:
                    continue
                if cw < 0:
                    forbidden.add(cx)
                elif (colour[neighbours[x]] == cw).sum() > 1:
                    forbidden.add(cx)       # (v-w-x-y, y another of w's colour)
        c = 0
        while c in forbidden:
            c += 1
        colour[v] = c
    return colour


def _recovery(pattern, colour):
    """(rows, colours): where each stored entry of the pattern (in its order) is read in
    the compressed product H S. H_ij comes from row i when j's colour is unique among
    i's row, else from row j (a star colouring makes i's colour unique there)."""
    rows = np.repeat(np.arange(pattern.shape[0]), np.diff(pattern.indptr))
    cols = pattern.indices
    counts = np.zeros((pattern.shape[0], int(colour.max(initial=-1)) + 1), np.int64)
    np.add.at(counts, (rows, colour[cols]), 1)
    direct = counts[rows, colour[cols]] == 1
    if not np.all(direct | (counts[cols, colour[rows]] == 1)):
        raise RuntimeError("autotape internal error: the Hessian's colouring does not "
                           "recover every entry")
    return (np.where(direct, rows, cols), np.where(direct, colour[cols], colour[rows]))


def _check(compiled):
    if not isinstance(compiled, Compiled):
        raise TypeError(f"autotape.sparse: expected a Compiled (at.compile), not "
                        f"{type(compiled).__name__}")


def _everything(compiled, args):
    """The pattern with every entry: outputs' elements by the arguments'."""
    rows = sum(np.size(leaf) for leaf in flatten(compiled(*args))[0])
    return scipy.sparse.csr_matrix(np.ones((rows, sum(a.size for a in args)), bool))


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
        pattern = dependency_pattern(p.lean)
        if pattern is not None:
            pattern = scipy.sparse.csr_matrix(
                (np.ones(pattern.indices.size, bool), pattern.indices, pattern.indptr),
                shape=pattern.shape)
        if pattern is None:
            entry = (p.lean, None, None, None)
        else:
            colour = column_colours(pattern)
            seeds = colour_seeds(colour)
            entry = (p.lean, pattern, colour, seeds)
        known[id(p.lean)] = entry
    if entry[1] is None:
        return None
    return p, entry[1], entry[2], entry[3]
