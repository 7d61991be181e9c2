"""The reverse sweep as recorded ops: what grad / backward do with create_graph=True.

The compiled sweep computes numbers. Here the same rows are walked newest first in
Python, and each row's derivative is applied with autotape ops (the ``graph_vjps`` rules
of the op table), so every gradient is itself a result on a tape and can be
differentiated again, to any order. Python runs per row, which is the price of a
differentiable backward; the next sweep over the gradient's tape is compiled again.
"""
import functools
import heapq
import types

import numpy as np

from .grad_mode import enable_grad
from .ops import elementwise, linalg, reduce, shape
from .ops.codes import CONCAT, CONST, IMPORT, LEAF, SOURCE_LAST, WHERE
from .record import gather, put_add, scatter, take_flat, where
from .tensor import F64, Tensor, _plain, _result

GRAPH_VJPS = {**elementwise.graph_vjps, **reduce.graph_vjps, **shape.graph_vjps,
              **linalg.graph_vjps}


@functools.cache
def _namespace():
    """The ops the rules record with: autotape's public names plus the layout
    primitives (built once, on the first create_graph)."""
    import autotape
    ns = {name: getattr(autotape, name) for name in autotape.__all__}
    return types.SimpleNamespace(**ns, gather=gather, scatter=scatter, take_flat=take_flat,
                                 put_add=put_add)


class RowView:
    """One tape row as the graph_vjps rules see it: operands and output as recorded
    tensors (``x``, ``y``, ``z``, ``value(k)``), int parameters, output shape."""

    def __init__(self, tape, cols, i):
        self.tape, self.cols, self.i = tape, cols, i
        row = cols.rows[i]
        self.op, aux = int(row[0]), int(row[4])
        self.params = cols.ipool[aux:] if aux >= 0 else cols.ipool[:0]
        self.shape = _shape(tape, cols, i)
        if self.op == CONCAT:
            self.operands = [int(self.params[3 + 3 * t]) for t in range(int(self.params[2]))]
        else:
            self.operands = [r for r in (int(row[1]), int(row[2])) if r >= 0]

    def value(self, k):
        return handle(self.tape, self.cols, self.operands[k])

    @property
    def x(self):
        return self.value(0)

    @property
    def y(self):
        return self.value(1)

    @property
    def z(self):
        return handle(self.tape, self.cols, self.i)

    @property
    def cond(self):
        assert self.op == WHERE
        return handle(self.tape, self.cols, int(self.params[0])).numpy() != 0


def _shape(tape, cols, row):
    return tape.shapes[cols.rows[row, 3]]


def handle(tape, cols, row):
    """A row's value as a tensor on the tape (a constant for CONST rows)."""
    shape, loc = _shape(tape, cols, row), int(cols.rows[row, 5])
    value = float(tape.arena[loc]) if loc >= 0 else tape.arrays[-loc - 1].reshape(shape)
    if cols.rows[row, 0] == CONST:
        return _plain(value, shape, F64)
    return _result(value, shape, F64, tape, row)


def sum_to(t, shape):
    """Sum a broadcast gradient back to an operand's shape."""
    if t.shape == shape:
        return t
    lead = t.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(shape)
                                      if n == 1 and t.shape[lead + d] != 1)
    return t.sum(axis=axes, keepdims=True).reshape(shape) if axes else t.reshape(shape)


def connect(g, x):
    """g, made a result that depends on x with derivative exactly zero: a constant
    derivative stays differentiable (the next derivative is zeros, not an error)."""
    if g.requires_grad:
        return g
    return g + where(np.zeros(x.shape, bool), x, 0.0)


def run(outputs, seeds, retain, released_error):
    """Walk every tape the outputs reach, applying the recorded rules. Returns leaf
    gradients by id ([leaf, tensor]), adjoint tensors by (tape id, row), and the tapes
    walked by id."""
    ops = _namespace()
    adj, leaf_grads, tapes = {}, {}, {}
    with enable_grad():
        for t, g in zip(outputs, seeds):
            if t._tape is None:
                _add_leaf(leaf_grads, t, g)
            else:
                _add(adj, t._tape.id, t._row, g)
                tapes[t._tape.id] = t._tape
        queue = [-tid for tid in tapes]
        heapq.heapify(queue)
        while queue:
            tape = tapes[-heapq.heappop(queue)]
            cols = tape.columns()
            top = max(row for tid, row in adj if tid == tape.id)
            visited = []
            for i in range(top, -1, -1):
                g = adj.get((tape.id, i))
                if g is None:
                    continue
                op = int(cols.rows[i, 0])
                if op == LEAF:
                    _add_leaf(leaf_grads, tape.leaves[i], g)
                    continue
                if op == IMPORT:
                    parent, prow = tape.imports[i]
                    if parent.id not in tapes:
                        tapes[parent.id] = parent
                        heapq.heappush(queue, -parent.id)
                    _add(adj, parent.id, prow, g)
                    continue
                if op <= SOURCE_LAST:
                    continue
                if tape.released[i]:
                    raise RuntimeError(released_error)
                visited.append(i)
                r = RowView(tape, cols, i)
                rule = GRAPH_VJPS[op]
                for k, operand in enumerate(r.operands):
                    if cols.rows[operand, 0] == CONST:
                        continue
                    c = rule(ops, g, r, k)
                    _add(adj, tape.id, operand, sum_to(c, _shape(tape, cols, operand)))
            if not retain:
                tape.released[visited] = 1
                tape.open = False
    return leaf_grads, adj, tapes


def _add(adj, tid, row, g):
    cur = adj.get((tid, row))
    adj[(tid, row)] = g if cur is None else cur + g


def _add_leaf(leaf_grads, leaf, g):
    entry = leaf_grads.get(id(leaf))
    if entry is None:
        leaf_grads[id(leaf)] = [leaf, g]
    else:
        entry[1] = entry[1] + g


def as_tensor_seed(g, t):
    """The gradient seed for output t under create_graph: the user's tensor (its graph
    kept, as torch does) or ones."""
    if isinstance(g, Tensor):
        return g
    return _plain(np.ones(t.shape), t.shape, F64)
