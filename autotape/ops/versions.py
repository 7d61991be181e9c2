"""Version counters, as torch's: every in-place op bumps a tensor's ``_version`` (shared
with its views), and a backward that would need a value an in-place op has replaced
since it was recorded raises torch's "modified by an inplace operation" error.

autotape's tapes keep every recorded value, so it could still compute the gradient of
the program as written; it raises as torch does, because such a program is almost
always a mistake (the author expects the new value to be used). Which values a
gradient needs is read off the op table's create_graph rules (``reads``): ``g * r.y``
reads operand y, ``r.x.shape`` only its shape. Only a rule that will run counts: the
derivative of ``x * y`` for x needs y, so y is saved only while x is not a constant.

The same table decides which released rows a second sweep may walk again: as torch
frees only saved tensors after a backward without retain_graph, a row whose derivative
reads nothing (an addition, a sum) is swept again (``unreleased``).

Cost: nothing on the recording path; an in-place op on a recorded tensor notes what it
replaced on the tape (``tape.replaced``); the first sweep of that tape afterwards finds
the rows that read those values (a search of the rows recorded since each) and checks
whether it reaches one. Tapes without in-place ops pay one test per sweep.

>>> x = at.tensor([1.0, 2.0], requires_grad=True)
>>> y = x * 1.0
>>> z = y * y
>>> y += 1
>>> z.sum().backward()
Traceback (most recent call last):
RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: [float64 (2,)], which is output 0 of <AddBackward>, is at version 1; expected version 0 instead. ...
"""
import dis
import types

import numpy as np

from ..opcodes import (CHOLESKY, CONCAT, CONST, CUMPROD, CUMSUM, CUSTOM, DET, EIGH, INV,
                       MATMUL, MAX, MEAN, MIN, PINV, PROD, PUT_ADD, RESHAPE, SCATTER,
                       SEARCHSORTED, SETITEM, SLOGDET, SOLVE, STRIDED, SUM, SVD, TAKE, WHERE)
from ..tuning import FLUSH_ROWS
from ..tape_format import reach
from ..thread_state import here
from . import elementwise, indexing, linalg, reduce

# ---- the graph's nodes as torch names them ------------------------------------------------

GRAD_FN_NAMES = {op.code: op.name.capitalize() + "Backward" for op in
                 list(elementwise.unary_ops.values()) + list(elementwise.binary_ops.values())}
GRAD_FN_NAMES.update({
    TAKE: "IndexBackward", SEARCHSORTED: "SearchsortedBackward", PUT_ADD: "IndexPutBackward",
    WHERE: "WhereBackward",
    SUM: "SumBackward", MEAN: "MeanBackward", MAX: "MaxBackward", MIN: "MinBackward",
    SCATTER: "ScatterBackward", PROD: "ProdBackward", CUMSUM: "CumsumBackward",
    CUMPROD: "CumprodBackward", RESHAPE: "ReshapeBackward", STRIDED: "ViewBackward",
    SETITEM: "CopySlices", CONCAT: "CatBackward", MATMUL: "MatmulBackward",
    INV: "LinalgInvBackward", SOLVE: "LinalgSolveBackward",
    SLOGDET: "LinalgSlogdetBackward", DET: "LinalgDetBackward", CHOLESKY: "LinalgCholeskyBackward",
    EIGH: "LinalgEighBackward", SVD: "LinalgSvdBackward",
    PINV: "LinalgPinvBackward"})


def node_name(tape, row):
    """The grad_fn name of a recorded row ("MultiplyBackward")."""
    op = tape.opcode(row)
    if op == CUSTOM:
        return f"{tape.customs[row].name}Backward"
    return GRAD_FN_NAMES.get(op, str(op))


# ---- which recorded values each derivative reads (torch's saved tensors) ----------------

_VALUES = ("x", "y", "z")                      # operand 0, operand 1, the row's own value
_SHAPE_ONLY = ("shape", "ndim", "size", "dtype")


def reads(rule, _seen=None):
    """The recorded values (a subset of "xyz") that a create_graph rule reads, from its
    code and the helpers it calls: ``r.y`` is a read, ``r.x.shape`` is not."""
    seen = set() if _seen is None else _seen
    if rule in seen:
        return ""
    seen.add(rule)
    code = rule.__code__ if isinstance(rule, types.FunctionType) else rule
    found = set()
    ops = list(dis.get_instructions(code))
    for i, ins in enumerate(ops):
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in _VALUES:
            following = ops[i + 1] if i + 1 < len(ops) else None
            if not (following is not None and following.opname == "LOAD_ATTR"
                    and following.argval in _SHAPE_ONLY):
                found.add(ins.argval)
        elif ins.opname == "LOAD_GLOBAL" and isinstance(rule, types.FunctionType):
            helper = rule.__globals__.get(ins.argval)
            if isinstance(helper, types.FunctionType) and \
                    helper.__module__.startswith("autotape."):
                found.update(reads(helper, seen))
    for const in code.co_consts:                  # (lambdas and functions defined inside)
        if isinstance(const, types.CodeType):
            found.update(reads(const, seen))
    if isinstance(rule, types.FunctionType):      # (a rule built around another: a cell)
        for cell in rule.__closure__ or ():
            value = cell.cell_contents
            if isinstance(value, types.FunctionType):
                found.update(reads(value, seen))
    return "".join(v for v in _VALUES if v in found)


# Where one rule serves two operands, what each operand's derivative reads (the rule's
# code cannot tell them apart): d(A @ B)/dA reads B, d/dB reads A; solve(A, b) saves A
# and its result for A, A for b.
_BY_OPERAND = {MATMUL: ("y", "x"), SOLVE: ("xz", "x")}


def _saved_table():
    table = {}
    for code, op in {**elementwise.unary_ops, **elementwise.binary_ops}.items():
        table[code] = tuple(reads(rule) for rule in op.vjps)
    table[WHERE] = ("", "")                       # (its condition is a constant)
    for rules in (reduce.graph_vjps, indexing.graph_vjps, linalg.graph_vjps):
        for code, rule in rules.items():
            table[code] = _BY_OPERAND.get(code) or (reads(rule),) * 2
    return table


SAVED = {}                                        # opcode -> per operand, "xyz" read
_READS_OWN_VALUE = set()                          # opcodes whose derivative reads "z"


def saved(op):
    if not SAVED:
        table = _saved_table()
        _READS_OWN_VALUE.update(code for code, reads in table.items()
                                if any("z" in r for r in reads))
        SAVED.update(table)
    return SAVED.get(op, ("", ""))


# ---- the counter and the marks ---------------------------------------------------------

def version(t):
    """t's version: the number of in-place ops on it or on any view of its storage."""
    link = t._view_of
    root = t if link is None else link[0]
    return getattr(root, "_versions", 0)


def before_inplace(t):
    """What an in-place op on t is about to replace: (tape, row, rows recorded so far)
    for the recorded value of t, of its root and of the root's live views (one
    storage), and of its import onto this thread's open tape. Called before the op
    records anything; ``after_inplace`` takes it."""
    link = t._view_of
    root = t if link is None else link[0]
    group = [root]
    refs = root._views
    if refs:
        group.extend(w for w in (ref() for ref in refs[1:]) if w is not None)
    replaced = []
    state = here()
    current = state.tape() if state.tape is not None else None
    for s in group:
        if s._tape is not None:
            replaced.append((s, s._tape, s._row, s._tape.nrows))
            imported = None if current is None or current is s._tape else \
                current.import_rows.get((s._tape.id, s._row))
            if imported is not None:          # (read on this thread's newer tape)
                replaced.append((s, current, imported, current.nrows))
        elif s._requires_grad and s._cache is not None:     # a leaf, on its last tape
            tape = s._cache[0]()
            if tape is not None:
                replaced.append((s, tape, s._cache[1], tape.nrows))
    return replaced


def after_inplace(t, replaced):
    """After an in-place op on t: bump the storage's version, and note on each tape the
    recorded values it replaced; ``resolve`` finds the rows that read them when a sweep
    first needs to know (a tape never swept again costs nothing more)."""
    link = t._view_of
    root = t if link is None else link[0]
    old = getattr(root, "_versions", 0)
    root._versions = old + 1
    for s, tape, row, stop in replaced:              # (torch names the tensor's grad_fn
        made = None if s._tape is None else node_name(s._tape, s._row)     # after the op)
        tape.replaced.append((row, stop, s._shape, s._dtype, made, old + 1, old))


def resolve(tape):
    """Mark in ``tape.stale`` every row whose derivative reads a value an in-place op
    replaced, for the replacements noted since the last call. The list only grows, so
    threads that resolve at once do the same idempotent work."""
    pending = tape.replaced
    done, n = tape.resolved, len(pending)
    if done == n:
        return
    if not SAVED:
        saved(0)
    for row, stop, *about in pending[done:n]:
        for reader in _readers(tape, row, stop):
            tape.stale.setdefault(reader, about)
    tape.resolved = n


def _readers(tape, row, stop):
    """The rows among ``row`` itself and those recorded after it, up to ``stop``, whose
    derivatives read row's value."""
    found = []
    if tape.opcode(row) in _READS_OWN_VALUE:
        for op, a, b in _rows(tape, row, row + 1):
            if _reads(tape, op, a, b, "z"):
                found.append(row)
    for i, op, a, b in _using(tape, row, stop):
        if (a == row and _reads(tape, op, a, b, "x")) or \
                (b == row and _reads(tape, op, a, b, "y")):
            found.append(i)
    return found


def _using(tape, row, stop):
    """(i, op, a, b) of the rows after ``row``, up to ``stop``, with row as an operand.
    Rows still staged (the usual case: an in-place op soon after its tensor's row) are
    searched with list.index; older ones with numpy over the tape's chunks."""
    chunks, staged = tape.rows_log
    flushed = len(chunks) * FLUSH_ROWS
    if row + 1 < flushed:
        rows = tape.rows_between(row + 1, stop)
        return [(row + 1 + h, *rows[h].tolist()) for h in
                np.nonzero((rows[:, 1] == row) | (rows[:, 2] == row))[0].tolist()]
    base = row + 1 - flushed
    seg = staged[3 * base:3 * (stop - flushed)]
    found = []
    at, remaining = 0, seg.count(row)
    while remaining:
        at = seg.index(row, at)
        k = at % 3                     # (0: an opcode that equals the row number)
        if k:
            first = at - k
            found.append((flushed + base + first // 3, *seg[first:first + 3]))
            remaining -= seg[first + 1:first + 3].count(row)    # (a and b may both be)
            at = first + 3
        else:
            remaining -= 1
            at += 1
    return found


def _rows(tape, start, stop):
    """(opcode, operand a, operand b) of rows start..stop-1, as Python ints."""
    chunks, staged = tape.rows_log
    flushed = len(chunks) * FLUSH_ROWS
    if start >= flushed:
        flat = staged[3 * (start - flushed):3 * (stop - flushed)]
        return zip(flat[0::3], flat[1::3], flat[2::3])
    return map(tuple, tape.rows_between(start, stop).tolist())


def _reads(tape, op, a, b, value):
    """Whether the derivative of a row (op, operands a, b) reads ``value`` ("x", "y" or
    "z"), counting only the derivatives of operands that are not constants (those never
    run). Concatenation reads no values; a custom op's VJP saves what its author gives
    it."""
    per_operand = SAVED.get(op) if SAVED else saved(op)
    if per_operand is None or op == CONCAT or op == CUSTOM:
        return False
    for k, r in enumerate((a, b)[:len(per_operand)]):
        if value in per_operand[k] and r >= 0 and tape.opcode(r) != CONST:
            return True
    return False


def check(tape, seed_rows):
    """Before a sweep of ``tape`` from ``seed_rows``: torch's error if it reaches a row
    whose derivative reads a value an in-place op has replaced."""
    if not tape.replaced:
        return
    resolve(tape)
    if not tape.stale:
        return
    cols = tape.columns()
    reached, top = reach(cols.rows, cols.ipool, np.asarray(seed_rows, np.int64))
    for reader in list(tape.stale):
        if reader <= top and reached[reader]:
            raise stale_error(tape, reader)


def stale_error(tape, reader):
    """torch's error for a sweep that reaches ``reader``, a marked row."""
    shape, dtype, made, now, then = tape.stale[reader]
    made = "" if made is None else f", which is output 0 of <{made}>,"
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{dtype} {shape}]{made} is at version {now}; expected "
        f"version {then} instead. Hint: it is read by the gradient of "
        f"<{node_name(tape, reader)}>. autotape records values, so it could compute the "
        "gradient of the program as written, but raises as torch does: such a program "
        "usually means the new value to be used. clone() the tensor before changing it "
        "in place to keep both.")


# ---- a second sweep through released rows ------------------------------------------------

def saves(tape, row):
    """Whether a row's derivative reads recorded values, as torch's node saves tensors
    (which a backward without retain_graph frees): constants count (torch saves a number
    it multiplies by, wrapped), a custom op saves its inputs."""
    op, a, b = next(iter(_rows(tape, row, row + 1)))
    if op == CUSTOM:
        return True
    if not SAVED:
        saved(0)
    per_operand = SAVED.get(op)
    if per_operand is None:
        return False
    for k, r in enumerate((a, b)[:len(per_operand)]):
        if r < 0 or tape.opcode(r) == CONST:
            continue                              # (that derivative never runs)
        if any(value in per_operand[k] for value in "xyz"):
            return True
    return False


def unreleased(tape, seed_rows):
    """A sweep from ``seed_rows`` met rows an earlier sweep without retain_graph
    released. As torch, which refuses only nodes whose saved tensors it freed: when no
    such row it reaches saves anything, clear their marks and return True (the sweep
    may run); else False (torch's error stands)."""
    cols = tape.columns()
    reached, top = reach(cols.rows, cols.ipool, np.asarray(seed_rows, np.int64))
    released = np.nonzero(reached & (tape.released[:top + 1] != 0))[0]
    if any(saves(tape, int(i)) for i in released):
        return False
    tape.released[released] = 0
    return True
