"""The reverse sweep as recorded ops: what grad / backward do with create_graph=True.

The compiled sweep computes numbers. Here the same rows are walked newest first in
Python, and each row's derivative is applied with autotape ops (the ``graph_vjps`` rules
of the op table), so every gradient is itself a result on a tape and can be
differentiated again, to any order. Python runs per row, which is the price of a
differentiable backward; the next sweep over the gradient's tape is compiled again.

Without recording (``record=False``) the same walk is the Python tier, the numbers of a
sweep whose kernel is still compiling (engine.py): scalar rows on floats, the rules of
array rows on numpy where they allow it (``_Numbers``, number_rules.py).
"""
import heapq
import types

import numpy as np

from . import creation, linalg
from .executor import RELEASED_MSG
from .functions import products, shaping, statistics
from .grad_mode import enable_grad, no_grad
from .hooks import run_hooks
from .kernels.elementwise import (binary_partial_x, binary_partial_y, passes_nothing, times,
                                  unary_partial)
from .opcodes import (ADD, BINARY_LAST, CONST, CUSTOM, IMPORT, LEAF, SOURCE_LAST,
                      MUL, NEG, STRIDED, SUB, UNARY_FIRST, UNARY_LAST, opcode_name)
from .ops import elementwise, indexing, linalg as linalg_ops, reduce, versions
from .number_rules import NUMBERS, ON_NUMBERS, NumberRow, as_number, read_number
from .tape_format import (A, AUX, B, OP, SHAPE, VLOC, array_index, operand_list,
                          view_offset)
from .tensor import F64, Tensor, array_of, canonical, new_leaf, new_result
from .thread_state import here

GRAPH_VJPS = {**elementwise.graph_vjps, **reduce.graph_vjps, **indexing.graph_vjps,
              **linalg_ops.graph_vjps}


def _public(module):
    return {name: getattr(module, name) for name in dir(module) if not name.startswith("_")
            and callable(getattr(module, name))}


# The ops the rules record with (their ``at``): every op and function under its public
# name, autotape.linalg, and the indexing primitives (gather, scatter, take_flat, put_add).
OPS = types.SimpleNamespace(**{
    name: fn for module in (creation, elementwise, reduce, indexing, linalg_ops, shaping,
                            products, statistics) for name, fn in _public(module).items()},
    linalg=linalg)


def handle(tape, row):
    """A row's value as a tensor on the tape (a constant for CONST rows)."""
    op, shape, value = tape.read(row)
    if op == CONST:
        return new_leaf(value, shape, F64)
    return new_result(value, shape, F64, tape, row)


class RowView(NumberRow):
    """One tape row as the graph_vjps rules see it: operands and output as recorded
    tensors (``x``, ``y``, ``z``, ``value(k)``), int parameters, output shape. (No
    slots: a custom op's rule keeps its cotangents on the row.)"""

    def __init__(self, tape, i):
        super().__init__(tape, i, handle)


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
    return g + elementwise.where(np.zeros(x.shape, bool), x, 0.0)


def run(outputs, seeds, retain, inputs=None, record=True):
    """Walk every tape the outputs reach, applying the recorded rules. Returns leaf
    gradients by id ([leaf, tensor]), adjoint tensors by (tape id, row) (after the
    row's hooks), the tapes walked by id, and the adjoints of hooked rows before their
    hooks. With ``record`` false (numbers only) a 0-d row's adjoint may be a float:
    the scalar rows run on floats (``_Numbers``).

    With ``inputs`` that are all non-leaves, the walk stops below the earliest of them
    on each tape and never enters a tape older than theirs: nothing there lies on a path
    to them (torch prunes its graph the same way). A custom op's VJP that
    differentiates its own segment relies on this (checkpoint)."""
    adj, leaf_grads, tapes, before_hooks = {}, {}, {}, {}
    floors, oldest = {}, None
    if inputs is not None and inputs and all(t._tape is not None for t in inputs):
        for t in inputs:
            floors[t._tape.id] = min(floors.get(t._tape.id, t._row), t._row)
        oldest = min(floors)
    with enable_grad() if record else no_grad():    # (record=False: numbers only, the
        for t, g in zip(outputs, seeds):              # sweep while its kernel compiles)
            if t._tape is None:
                _add_leaf(leaf_grads, t, g)
            else:
                _add(adj, t._tape.id, t._row, g)
                tapes[t._tape.id] = t._tape
        queue = [-tid for tid in tapes]
        heapq.heapify(queue)
        while queue:
            tape = tapes[-heapq.heappop(queue)]
            versions.resolve(tape)
            top = max(row for tid, row in adj if tid == tape.id)
            visited = []
            floor = floors.get(tape.id, 0) if oldest is not None else 0
            numbers = None if record else _Numbers(tape, adj, floor, top, {
                t._row for t in inputs or () if t._tape is tape} | set(tape.retained))
            i = top + 1
            while i > floor:
                i -= 1
                if numbers is not None and numbers.plain[i - floor]:
                    i = numbers.run_plain(i, visited)   # (and the plain rows below it)
                    continue
                g = adj.get((tape.id, i))
                if numbers is not None and i in numbers.pending:
                    g = numbers.merge(i, g)
                if g is None:
                    continue
                op = tape.op(i) if numbers is None else numbers.op[i - floor]
                if op == LEAF:
                    _add_leaf(leaf_grads, tape.leaves[i], as_tensor_adjoint(g))
                    continue
                if op == IMPORT:
                    parent, prow = tape.imports[i]
                    if oldest is not None and parent.id < oldest:
                        continue                   # older than every input
                    if parent.id not in tapes:
                        tapes[parent.id] = parent
                        heapq.heappush(queue, -parent.id)
                    _add(adj, parent.id, prow, g)
                    continue
                if op <= SOURCE_LAST:
                    continue
                if tape.released[i] and versions.saves(tape, i):
                    raise RuntimeError(RELEASED_MSG)
                if tape.stale and i in tape.stale:
                    raise versions.stale_error(tape, i)
                hooked = tape.hooks.get(i) if tape.hooks else None
                visited.append(i)
                if hooked is None and numbers is not None and numbers.apply(i, g):
                    continue
                g = as_tensor_adjoint(g)
                if hooked is not None and hooked[1]:
                    before_hooks[(tape.id, i)] = g
                    g = adj[(tape.id, i)] = run_hooks(hooked[1], g, tape.shape(i),
                                                      hooked[0])
                r = RowView(tape, i)
                rule = tape.customs[i].graph_vjp if op == CUSTOM else GRAPH_VJPS.get(op)
                if rule is None:
                    raise RuntimeError(f"autotape internal error: op {opcode_name(op)} has "
                                       "no create_graph rule; please report this")
                for k, operand in enumerate(r.operands):
                    if tape.op(operand) == CONST:
                        continue
                    c = rule(OPS, g, r, k)
                    if c is None:                  # (a custom op's None: no gradient)
                        continue
                    c = sum_to(c, tape.shape(operand))
                    if numbers is None:
                        _add(adj, tape.id, operand, c)
                    else:
                        numbers.add(operand, as_number(c))
            if not retain:
                tape.released[visited] = 1
                if tape.owner is here():       # (only the recording thread closes it)
                    tape.close()
    return leaf_grads, adj, tapes, before_hooks


class _Numbers:
    """One tape's rows on the Python tier where they are scalar: a 0-d elementwise row
    (its operands 0-d too) takes the compiled sweep's partials (kernels/elementwise.py,
    plain functions in Python) on floats, and a 0-d element read out of an array
    (``x[i]``) adds its adjoint into a numpy array kept for the operand, ``pending``,
    until the walk reaches that row (it always does: an operand is an earlier row, and
    one below the walk's floor takes the rules). Through tensors and their rules each such row
    cost ~6 us; a cold cache's first calls of a scalar model sweep tens of thousands
    of them (docs/first-run.md). Other rows take the rules, on numpy where the rule
    allows (``apply``, number_rules.py), else, and with hooks, on tensors."""

    __slots__ = ("tape", "adj", "floor", "op", "a", "b", "sid", "aux", "loc", "ipool",
                 "scalar", "pending", "plain", "route", "adjoint", "values", "wanted")

    def __init__(self, tape, adj, floor, top, wanted):
        c = tape.columns()
        self.tape, self.adj, self.floor = tape, adj, floor
        rows = c.rows[floor:top + 1]
        (self.op, self.a, self.b, self.sid, self.aux,
         self.loc) = rows[:, (OP, A, B, SHAPE, AUX, VLOC)].T.tolist()
        self.ipool = c.ipool
        self.scalar = [size == 1 and len(shape) == 0 for shape, size in
                       zip(tape.shapes, tape.shape_size)]
        self.pending = {}                       # row -> float64 adjoint array
        self.plain, self.route = self._routes(rows, floor, top)
        # plain rows' adjoints (floats, or tensors from the rules), kept out of the walk's
        # dict, where only those of ``wanted`` rows are written back (run_plain)
        self.adjoint = [None] * len(self.op)
        self.wanted = wanted
        for key in [key for key in adj if key[0] == tape.id and floor <= key[1] <= top]:
            if self.plain[key[1] - floor]:
                self.adjoint[key[1] - floor] = adj.pop(key)
        # each row's first element as a float (what run_plain reads of scalar rows); the
        # arena copied in one call (a buffer view held across bytecodes would make the
        # recording thread's next append to it raise)
        arena = np.array(tape.arena, F64) if len(tape.arena) else np.zeros(1)
        self.values = arena[np.clip(rows[:, VLOC], 0, arena.size - 1)].tolist()

    def _routes(self, rows, floor, top):
        """Per row of the walk: whether run_plain takes it (a scalar unary or binary
        row on floats, its operands in the walk, no hook, not stale, not released), and
        how apply runs it (_ON_FLOATS, _BY_RULE, or 0: the rule on tensors)."""
        op, a, b = rows[:, OP], rows[:, A], rows[:, B]
        known = (op >= 0) & (op < len(_KIND))
        kind = np.frombuffer(_KIND, np.uint8)[np.clip(op, 0, len(_KIND) - 1)] * known
        on_floats = (kind != 0) & np.array(self.scalar, bool)[rows[:, SHAPE]] & \
            (rows[:, VLOC] >= 0) & (a >= floor) & ((kind != _BINARY) | (b >= floor))
        plain = on_floats & ((kind == _UNARY) | (kind == _BINARY))
        plain &= self.tape.released[floor:top + 1] == 0
        tape = self.tape
        for i in list(tape.hooks or ()) + list(tape.stale or ()):
            if floor <= i <= top:
                plain[i - floor] = False
        by_rule = (op >= 0) & (op < len(_BY_RULE_OPS)) & \
            np.frombuffer(_BY_RULE_OPS, np.uint8)[np.clip(op, 0, len(_BY_RULE_OPS) - 1)]
        route = np.where(on_floats, _ON_FLOATS, np.where(by_rule, _BY_RULE, 0))
        return plain.tolist(), route.tolist()

    def run_plain(self, i, visited):
        """Rows i, i - 1, ... while they are plain (_routes): each one's adjoint
        passed to its operands on floats, as apply does, without a step of the walk
        per row (66,000 rows of a scalar model's call took half its time in the walk).
        An adjoint a plain row passes to a plain row waits in ``adjoint``, to any other
        row it goes to the walk's dict; a ``wanted`` row's total is written there too.
        Returns the row the walk goes on from."""
        floor, tid, adj, acc, plain, wanted = self.floor, self.tape.id, self.adj, \
            self.adjoint, self.plain, self.wanted
        ops, aa, bb, value, pending = self.op, self.a, self.b, self.values, self.pending
        r = i - floor
        while r >= 0 and plain[r]:
            g = acc[r]
            if pending and r + floor in pending:     # (read as x[()])
                g = self.merge(r + floor, g)
            if g is None:
                r -= 1
                continue
            if type(g) is not float:           # (a tensor, or np.float64)
                g = float(array_of(g)) if isinstance(g, Tensor) else float(g)
            if r + floor in wanted:
                adj[(tid, r + floor)] = g
            visited.append(r + floor)
            op, a = ops[r], aa[r] - floor
            b = bb[r] - floor
            if op == ADD:
                ga, gb = g, g
            elif op == MUL:
                ga, gb = g * value[b], g * value[a]
            elif op == SUB:
                ga, gb = g, -g
            elif op == NEG:
                ga, gb = -g, None
            elif _KIND[op] == _UNARY:
                ga, gb = _partials(op, _UNARY, g, value[a], 0.0, value[r])[0], None
            else:
                ga, gb = _partials(op, _BINARY, g, value[a], value[b], value[r])
            if ops[a] != CONST:
                if plain[a]:
                    cur = acc[a]
                    acc[a] = ga if cur is None else cur + ga
                else:
                    _add(adj, tid, a + floor, ga)
            if gb is not None and ops[b] != CONST:
                if plain[b]:
                    cur = acc[b]
                    acc[b] = gb if cur is None else cur + gb
                else:
                    _add(adj, tid, b + floor, gb)
            r -= 1
        return r + floor + 1

    def apply(self, i, g):
        """Run row i on numbers (True): a scalar row's partials on floats, as the
        compiled sweep's; an element read's adjoint into its operand's pending array;
        another row's rule on numpy (number_rules.py). False: its rule needs tensors."""
        floor = self.floor
        r = i - floor
        route = self.route[r]
        if route == _BY_RULE:
            return self._by_rule(i, g)
        if route != _ON_FLOATS:
            return False
        if type(g) is not float:               # (a tensor, or numpy)
            g = float(array_of(g)) if isinstance(g, Tensor) else float(g)
        op, a = self.op[r], self.a[r]
        kind = _KIND[op]
        ops, loc = self.op, self.loc
        if kind == _ELEMENT_OF:
            if ops[a - floor] != CONST:
                acc = self.pending.get(a)
                if acc is None:
                    acc = self.pending[a] = np.zeros(self.tape.size(a))
                acc[view_offset(self.ipool, self.aux[r])] += g
            return True
        arena = self.tape.arena
        x, z = arena[loc[a - floor]], arena[loc[r]]
        if kind == _UNARY:
            b, y = -1, 0.0
        else:
            b = self.b[r]
            y = arena[loc[b - floor]]
        ga, gb = _partials(op, kind, g, x, y, z)
        if ops[a - floor] != CONST:
            self.add(a, ga)
        if b >= 0 and ops[b - floor] != CONST:
            self.add(b, gb)
        return True

    def _by_rule(self, i, g):
        """Row i's create_graph rule, run on numbers (number_rules.py)."""
        tape, floor = self.tape, self.floor
        r = i - floor
        op, aux = self.op[r], self.aux[r]
        params = self.ipool[aux:] if aux >= 0 else self.ipool[:0]
        operands = operand_list(op, self.a[r], self.b[r], params)
        row = NumberRow(tape, i, self.number, (op, operands, params, tape.shapes[self.sid[r]]))
        rule = GRAPH_VJPS[op]
        g = as_number(g)
        for k, operand in enumerate(row.operands):
            inside = operand >= floor
            if (self.op[operand - floor] if inside else tape.op(operand)) == CONST:
                continue
            c = rule(NUMBERS, g, row, k)
            if c is not None:
                self.add(operand, sum_to(c, tape.shapes[self.sid[operand - floor]] if inside
                                         else tape.shape(operand)))
        return True

    def number(self, tape, row):
        """Row's value as numpy (number_rules.read_number), from the columns read once."""
        r = row - self.floor
        if r < 0:
            return read_number(tape, row)
        loc = self.loc[r]
        if loc >= 0:
            return np.float64(self.values[r])
        return tape.arrays[array_index(loc)].reshape(tape.shapes[self.sid[r]])

    def add(self, row, g):
        """Add g to row's adjoint: where run_plain will read it, or in the walk's dict."""
        r = row - self.floor
        if r >= 0 and self.plain[r]:
            cur = self.adjoint[r]
            self.adjoint[r] = g if cur is None else cur + g
        else:
            _add(self.adj, self.tape.id, row, g)

    def merge(self, i, g):
        """Row i's adjoint: g and what scalar reads of its elements added (numpy)."""
        acc = self.pending.pop(i).reshape(self.tape.shape(i))
        return acc if g is None else as_number(g) + acc


def _partials(op, kind, g, x, y, z):
    """The adjoints a scalar row passes its operands, as the compiled sweep computes
    them: on Python floats, or where those raise (1 / 0, an overflow) or turn complex
    (a negative base's fractional power), on numpy's, which give inf and nan as
    compiled code does."""
    try:
        ga, gb = _chain(op, kind, g, x, y, z)
        if not isinstance(ga, complex) and not isinstance(gb, complex):
            return ga, gb
    except (ArithmeticError, ValueError):
        pass
    with np.errstate(all="ignore"):
        f = np.float64
        ga, gb = _chain(op, kind, f(g), f(x), f(y), f(z))
    return float(ga), float(gb)


def _chain(op, kind, g, x, y, z):
    if kind == _UNARY:
        return times(op, g, unary_partial(op, x, z)), 0.0
    return times(op, g, binary_partial_x(op, x, y, z)), times(op, g, binary_partial_y(op, x, y, z))


# opcode -> how _Numbers runs a scalar row of it (0: by the rules)
_UNARY, _BINARY, _ELEMENT_OF = 1, 2, 3
# how _Numbers.apply runs a row (its route; 0: the rule on tensors)
_ON_FLOATS, _BY_RULE = 1, 2


def _kinds():
    kind = bytearray(STRIDED + 1)
    for op in range(UNARY_FIRST, BINARY_LAST + 1):
        if (op in elementwise.unary_ops or op in elementwise.binary_ops) and \
                not passes_nothing(op):                # (those pass nothing: the rules')
            kind[op] = _UNARY if op <= UNARY_LAST else _BINARY
    kind[STRIDED] = _ELEMENT_OF
    return kind


_KIND = _kinds()
_BY_RULE_OPS = bytes(op in ON_NUMBERS for op in range(max(ON_NUMBERS) + 1))  # (_routes)


def as_tensor_adjoint(g):
    """An adjoint as a tensor (``_Numbers`` keeps them as floats and numpy arrays)."""
    if isinstance(g, Tensor):
        return g
    g = np.asarray(g, F64)
    return new_leaf(*canonical(g if g.flags.writeable else g.copy()))   # (broadcast_to's)


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
    return new_leaf(np.ones(t.shape), t.shape, F64)
