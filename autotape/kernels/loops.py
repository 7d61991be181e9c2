"""Loops found again in a lean program, and compiled as loops.

A simulation's time-stepping loop, recorded, is one body of instructions repeated: from
one repetition to the next every slot an instruction names either stays (a parameter,
a constant, something computed before the loop) or moves by the same distance (the
slots the repetition itself writes). ``find_loop`` finds the longest such stretch;
``loop_kernels`` writes the body's forward and reverse out as straight-line numba code
(a loop over repetitions, each slot ``fixed`` or ``fixed + t * delta``) and compiles it
once, cached on disk by the source's hash. The op math is the op table's: the body
calls the same ``unary_value`` / ``binary_partial_x`` / ``times`` the interpreter does,
with the opcode a constant.

Elementwise ops, WHERE, COPY, GATHER and SCATTER_ADD go in a body (a gather's or a
scatter's sources each fixed or moved alike, read from index arrays in the generated
module); a stretch with anything else stays with the interpreter (kernels/program.py).
The body's reverse leaves out the instructions no output reaches in any repetition (an
adaptive step's frozen control: zero adjoints, which an inf partial would turn into
nan); an output whose sweep skips others in some repetitions is swept by the
interpreter.
"""
import difflib
import hashlib
import os
import re
import threading

import numba
import numpy as np

from ..opcodes import (ABS, ADD, ARCTAN2, BINARY_LAST, CEIL, DIV, FLOOR, HYPOT, LOGADDEXP, MUL,
                       NEG, POW, RELU, ROUND, SIGN, SQUARE, SUB, UNARY_FIRST, UNARY_LAST, WHERE,
                       opcode_name)
from . import background
from .cache import cache_dir, generated_file, import_generated
from .cell_adds import cell_order, local_adds, permuted_order
from .elementwise import passes_nothing
from .fusion import ROUNDED, deferred, fused_forward, fused_groups, fused_reverse
from .index_runs import affine_loops
from .invariant_reads import hoisted_reads
from .instruction_format import (CALL, COPY, GATHER, I_A, I_B, I_C, I_N, I_OP, I_OUT,
                                 I_SA, I_SB, I_SC, KIND_NAMES, OPERAND_COLUMNS, PICK, PLACE,
                                 SCATTER_ADD, SEARCH, WIDTH, adjoint_columns, pool_reads,
                                 pooled, read_runs, stride)
from .driver import compile_steps
from .program import (forward_range, forward_range_points, reverse_range,
                      reverse_range_points, tangent_range, tangent_range_points)
from ..tuning import CANDIDATES, LANES_MIN, MAX_PERIOD, MIN_COVERED, MIN_REPEATS

# ops codegen.py's CPU reverse sweep recomputes from a repetition's state; every other
# op's values (exp, sin, pow, ...) it keeps from the forward pass and reads back: the
# 100k-op scalar chain (sin, exp) took 1.23 ms recomputing them, 5 transcendentals a
# step (loop bodies keep fewer: ``_dear``)
RECOMPUTED = frozenset({ADD, SUB, MUL, DIV, NEG, ABS, SQUARE, RELU, SIGN, FLOOR, CEIL, ROUND})


def _dear(op):
    """Whether an op's value costs a libm call (exp, sin, pow...): a loop body's reverse
    reads such values back rather than recomputing them. The rest (arithmetic,
    comparisons, WHERE) it recomputes: storing them cost more (the Lotka-Volterra solve's
    forward 15% more)."""
    return (UNARY_FIRST <= op <= UNARY_LAST and op not in RECOMPUTED) or \
        op in (POW, ARCTAN2, HYPOT, LOGADDEXP)


# a power's exponents whose value and partial are a product or two (_pow_value)
_CHEAP_EXPONENTS = ("2.0", "3.0")


def _literal_exponents(instr, body, period, value_of):
    """{q: the exponent as a literal} for the body's powers whose exponent is one
    constant (the same slot every repetition, broadcast): ``x ** 3``'s partial branches
    on the exponent (_pow_partial), which read from V at run time kept its element loop
    scalar (a cubic oscillator's reverse 44 -> 26 us). The literal is in the source, so
    the module is another for another exponent. ``value_of``: constant slot -> value."""
    out = {}
    for q in body:
        c = int(instr[q, I_B])
        if int(instr[q, I_OP]) == POW and int(instr[q, I_SB]) == 0 and c in value_of and \
                int(instr[q + period, I_B]) == c and np.isfinite(value_of[c]):
            out[q] = repr(value_of[c])
    return out


def _signatures(instr):
    """Per instruction: the fields that must repeat exactly (kind, count, strides or a
    scatter's pair count), or -1 where the kind cannot go in a body."""
    op = instr[:, I_OP]
    ok = ((op >= UNARY_FIRST) & (op <= BINARY_LAST)) | (op == WHERE) | (op == COPY) | \
        (op == GATHER) | (op == SCATTER_ADD)
    sig = (op + 1000) * 1_000_003 + instr[:, I_N] * 8 + instr[:, I_SA] * 4 \
        + instr[:, I_SB] * 2 + instr[:, I_SC]
    return np.where(ok, sig, -1)


def _matches(instr, sig, period, constant=None, pool=None, lowest=0):
    """``(delta, ok)``: ok[q] when instruction q + period repeats q with its output
    moved by delta and each operand fixed or moved by delta, as q's own was
    relative to q - period; or, with ``constant`` (per slot: whether it holds a
    constant), constants in both (a forcing term's value per repetition, t = i * h).
    A gather's or a scatter's sources (in the pool) each fixed or moved by delta alike,
    and moved only from ``lowest`` on (the instructions' outputs: below lie the inputs
    and constants)."""
    n = instr.shape[0] - period
    if n <= 0:
        return 0, np.zeros(0, bool)
    moved = instr[period:, I_OUT] - instr[:n, I_OUT]
    delta = int(np.median(moved))
    ok = (sig[:n] == sig[period:]) & (sig[:n] >= 0) & (moved == delta) & (delta > 0)
    repeats_choice = []
    for col in OPERAND_COLUMNS:
        a, b = instr[:n, col], instr[period:, col]
        d = b - a
        regular = ((a < 0) & (b < 0)) | ((a >= 0) & (b >= 0) & ((d == 0) | (d == delta)))
        same = np.ones(n, bool)                # the choice (fixed or moved) repeats too
        same[:-period] = d[:-period] == d[period:]
        if constant is not None:
            both = (a >= 0) & (b >= 0) & constant[np.maximum(a, 0)] & \
                constant[np.maximum(b, 0)]
            regular, same = regular | both, same | both
        ok &= regular
        repeats_choice.append(same)
    same = np.ones(n, bool)
    for q in np.nonzero(ok & ((instr[:n, I_OP] == GATHER) |
                              (instr[:n, I_OP] == SCATTER_ADD)))[0]:
        ok[q], same[q] = _pool_repeats(instr, pool, q, period, delta, lowest) \
            if pool is not None else (False, False)
    repeats_choice.append(same)
    # ... except from a stretch's last repetition to the one after it, which ends the
    # stretch anyway (the choice from the last but one to the last is checked at the
    # row before): so a loop's last repetition is in it too
    ends = np.ones(n, bool)
    ends[:-period] = ~ok[period:]
    for same in repeats_choice:
        ok &= same | ends
    return delta, ok


def _pool_repeats(instr, pool, q, period, delta, lowest):
    """(whether a gather's or a scatter's sources at q + period are each those at q,
    fixed or moved by delta; whether the choice repeats at q + 2 period)."""
    here, offsets = pool_reads(instr, pool, q)
    there, offsets2 = pool_reads(instr, pool, q + period)
    if here.size != there.size or (offsets is not None and not (offsets == offsets2).all()):
        return False, False
    d = there - here
    if not ((d == 0) | ((d == delta) & (here >= lowest))).all():
        return False, False
    if q + 2 * period < instr.shape[0] and instr[q + 2 * period, I_OP] == instr[q, I_OP]:
        later, _ = pool_reads(instr, pool, q + 2 * period)
        if later.size == there.size and not (later - there == d).all():
            return True, False                 # (the choice, fixed or moved, repeats)
    return True, True


def _anchor(sig, middle, window):
    """The instruction the periods are measured from: of those that may go in a body
    in the ``window`` instructions from the middle on, the first whose kind repeats
    least often there. Its next occurrences are then the candidate periods: the first
    few occurrences of a common kind (one of the 60 row copies of a 2-D roll) all lie
    inside one repetition."""
    part = sig[middle:middle + max(window, 1)]
    usable = np.nonzero(part >= 0)[0]
    if not usable.size:
        return None
    kinds, inverse, counts = np.unique(part[usable], return_inverse=True,
                                       return_counts=True)
    return middle + int(usable[np.argmin(counts[inverse])])


def find_loop(instr, constant=None, pool=None):
    """``(start, period, repeats, delta)`` of the longest repeating stretch, or None.
    ``constant`` (per slot): constant operands may differ from one repetition to the
    next (see constant_table); ``pool``: the program's, for its gathers and scatters
    (without it they end a stretch)."""
    count = instr.shape[0]
    if count < MIN_COVERED:
        return None
    best = None

    # A multiple of a period found repeats that period's stretch, but may repeat longer
    # where the period's breaks off (at.jit's x = A @ x + ...: four tanh in a row repeat
    # with period 1, the step with period 44): skipped only once the stretch found is
    # most of the program.
    def known(period):
        return best is not None and period % best[1] == 0 and 2 * best[1] * best[2] >= count
    for at in ANCHORS:
        if best is not None and 2 * best[1] * best[2] >= count:
            break             # (over half the program: no stretch elsewhere is longer)
        for lo, period, repeats, delta, _ in _stretches(instr, constant, pool, MIN_REPEATS,
                                                        int(count * at), known):
            if repeats >= MIN_REPEATS and (best is None or
                                           repeats * period > best[1] * best[2]):
                best = (lo, period, repeats, delta)
    if best is None or best[1] * best[2] < MIN_COVERED:
        return None
    return best


# where in the program stretches are looked for: the middle, then the quarters (a
# forced step halfway through, an event, cuts the stretch through the middle short)
ANCHORS = (0.5, 0.25, 0.75)


def _stretches(instr, constant, pool, min_repeats, around, skip=lambda period: False):
    """The repeating stretches through instruction ``around``, one per candidate period
    up to count / min_repeats (but those ``skip`` names): ``(start, period, repeats,
    delta, ok)`` (ok: ``_matches``'s)."""
    count = instr.shape[0]
    if count < 2 * min_repeats:
        return
    sig = _signatures(instr)
    middle = _anchor(sig, around, count // MIN_REPEATS)
    if middle is None:
        return
    later = np.nonzero(sig[middle + 1:] == sig[middle])[0][:CANDIDATES] + 1
    lowest = int(instr[:, I_OUT].min())
    for period in later:
        period = int(period)
        if period * min_repeats > count or period > MAX_PERIOD:
            break
        if skip(period):
            continue
        # a look around the middle first: the whole program is scanned only for a
        # period that repeats there (a scan costs a pass over every instruction)
        a = max(middle - 2 * period, 0)
        b = min(middle + 3 * period, count)
        _, near = _matches(instr[a:b], sig[a:b], period, constant, pool, lowest)
        if middle - a >= near.size or not near[middle - a]:
            continue
        delta, ok = _matches(instr, sig, period, constant, pool, lowest)
        if middle >= ok.size or not ok[middle]:
            continue
        lo = middle - int(np.argmin(ok[middle::-1])) + 1 if not ok[:middle + 1].all() else 0
        bad = np.nonzero(~ok[middle:])[0]
        hi = middle + (int(bad[0]) if bad.size else ok.size - middle)   # ok on [lo, hi)
        yield lo, period, (hi - lo) // period + 1, delta, ok


def repetition(instr, constant=None, pool=None):
    """How the program repeats, for ``Compiled.explain``: None where no stretch through
    an anchor repeats, else ``(start, period, repeats, breaks)`` of find_loop's loop or,
    where it finds none, of the longest stretch (find_loop also asks for MIN_REPEATS
    repetitions covering MIN_COVERED instructions), ``breaks`` listing ``(q, why)``
    where it stops: the first instruction q past either end that does not repeat its
    twin a period away, and what differs."""
    best, count = None, instr.shape[0]
    for at in ANCHORS:
        for lo, period, repeats, delta, ok in _stretches(instr, constant, pool, 2,
                                                         int(count * at)):
            # (a loop as find_loop takes it first, else the longest stretch)
            rank = (repeats >= MIN_REPEATS, repeats * period)
            if repeats >= 2 and (best is None or rank > best[0]):
                best = (rank, lo, period, repeats, delta, ok)
    if best is None:
        return None
    _, lo, period, repeats, delta, ok = best
    sig, breaks, lowest = _signatures(instr), [], int(instr[:, I_OUT].min())
    bad = np.nonzero(~ok[lo:])[0]
    if lo > 0:                        # (the first instruction before it unlike its twin)
        breaks.append(_first_unlike(instr, sig, range(lo - 1, max(lo - 1 - 2 * period, -1),
                                                      -1), period, delta, constant, pool,
                                    lowest))
    if bad.size:                      # (after it: ok looks a repetition ahead)
        hi = lo + int(bad[0]) + period
        breaks.append(_first_unlike(instr, sig, range(hi, min(hi + 2 * period,
                                                              instr.shape[0])),
                                    -period, delta, constant, pool, lowest))
    return lo, period, repeats, [b for b in breaks if b is not None]


def _first_unlike(instr, sig, places, period, delta, constant, pool, lowest):
    """``(q, why)`` for the first instruction q of ``places`` that is not its twin at
    q + period moved along (``_matches``'s tests, in words), or None."""
    for q in places:
        t = q + period
        if not 0 <= t < instr.shape[0]:
            break
        a, b = (q, t) if t > q else (t, q)     # (a: the earlier of the two)
        why = _why_unlike(instr, sig, a, b, delta, constant, pool, lowest)
        if why is not None:
            return q, why
    return None


def first_unlike_body(instr, constant, a, period_a, b, period_b):
    """The first instruction of the repetition at ``b`` (``period_b`` instructions) that
    the one at ``a`` has not, aligned by their kinds and which operands are constants
    (``constant``: per slot) (a rotation of a's, then the longest common stretches:
    difflib), for ``Compiled.explain``: where two stretches of a program that each
    repeat (a forcing switched off after a while) part; None where they are alike.

    >>> instr = np.zeros((7, WIDTH), np.int64)
    >>> instr[:, I_OP], instr[:, I_N] = [ADD, MUL, ADD, MUL, ADD, NEG, MUL], 1
    >>> first_unlike_body(instr, np.zeros(1, bool), 0, 2, 4, 3)
    5
    """
    sig = [(int(v), tuple(bool(constant[c]) if c >= 0 else None for c in row))
           for v, row in zip(_signatures(instr), instr[:, list(OPERAND_COLUMNS)])]
    x, y = sig[a:a + period_a], sig[b:b + period_b]
    best = None
    for r in range(len(x)):
        if x[r] == y[0]:
            match = difflib.SequenceMatcher(None, x[r:] + x[:r], y, autojunk=False)
            if best is None or match.ratio() > best.ratio():
                best = match
    if best is None:
        return b
    for tag, _, _, j1, _ in best.get_opcodes():
        if tag != "equal":
            return b + min(j1, period_b - 1)
    return None


def _why_unlike(instr, sig, a, b, delta, constant, pool, lowest):
    """Why instruction b does not repeat a (b - a a period on), or None where it does."""
    x, y, name = instr[a], instr[b], instruction_name(instr[b, I_OP])
    if sig[a] < 0 or sig[b] < 0:
        return f"{instruction_name((x if sig[a] < 0 else y)[I_OP])} cannot go in a loop body"
    if x[I_OP] != y[I_OP]:
        return f"{name} where the repetition before has {instruction_name(x[I_OP])}"
    if x[I_N] != y[I_N]:
        return f"{name} of {y[I_N]} elements where the repetition before has {x[I_N]}"
    if sig[a] != sig[b]:
        return f"{name} broadcasts other operands than the repetition before"
    if y[I_OUT] - x[I_OUT] != delta:
        return (f"{name}'s result is not where the repetition's pattern puts it (an op "
                "that not every repetition has, earlier on)")
    for col in OPERAND_COLUMNS:
        u, v = int(x[col]), int(y[col])
        if (u < 0) != (v < 0):
            return f"{name} takes other operands than the repetition before"
        if u < 0 or v - u in (0, delta) or (constant is not None and constant[u] and
                                            constant[v]):
            continue
        return (f"{name} reads a value that is neither the repetition before's moved "
                "along nor the same one (one computed elsewhere: before the loop, or "
                "by an op that not every repetition has)")
    if x[I_OP] in (GATHER, SCATTER_ADD) and (pool is None or not _pool_repeats(
            instr, pool, a, b - a, delta, lowest)):
        return f"{name} reads other cells than the repetition before, moved along"
    return None


def instruction_name(op):
    """An instruction's kind in words ("sin", "gather")."""
    op = int(op)
    return {COPY: "a copy", GATHER: "a gather (indexing, a slice, a roll)",
            SCATTER_ADD: "a sum or a scatter", CALL: "a custom op's call",
            PICK: "a take at computed positions", PLACE: "a scatter to computed positions",
            SEARCH: "a search (searchsorted)"}.get(
                op, opcode_name(op).lower())


def constant_table(instr, loop, constant, const_slots, const_vals):
    """The loop's constant operands whose value changes from one repetition to the next
    (``t = i * h`` in a forcing term, a row of a data array): ``(entries, values)``,
    entries mapping (instruction of the first repetition, operand column) to (offset,
    width) in a repetition's row of ``values`` (repeats, width in all), which holds
    each repetition's values of those operands. The generated body reads them there
    (``Table``); empty where every constant operand is one slot throughout.

    An operand whose constants hold the same bits in every repetition (a mask's 0.0,
    recorded afresh each time) is made to read the first repetition's slot throughout
    (``instr`` is rewritten in place): the same values, and repetitions that are alike
    (kernels/settling.py needs them so)."""
    start, period, repeats, _ = loop
    value_of = np.zeros(constant.size)
    value_of[const_slots] = const_vals
    entries, columns = {}, []
    for q in range(start, start + period):
        for col in OPERAND_COLUMNS:
            c = int(instr[q, col])
            if c < 0 or not constant[c]:
                continue
            slots = instr[q:start + period * repeats:period, col]
            if (slots == c).all():
                continue                        # one slot throughout: fixed
            width = int(instr[q, I_N]) if stride(instr, q, col) else 1
            values = value_of[slots[:, None] + np.arange(width)[None, :]]
            if (values.view(np.int64) == values[:1].view(np.int64)).all():
                instr[q:start + period * repeats:period, col] = c
                continue
            at = sum(w for _, w in entries.values())
            entries[(q, col)] = (at, width)
            columns.append(values)
    if not entries:
        return {}, np.zeros((repeats, 0))
    return entries, np.concatenate(columns, axis=1)


# ---- the body as code ---------------------------------------------------------------------
# A slot the body writes is either kept (in V, at its own slot + t * delta: a later
# repetition or the code after the loop reads it) or a temporary of one repetition (in T,
# at slot - base). The reverse sweep of repetition t first recomputes its temporaries
# from the kept values, so a long loop stores only what crosses repetitions.

def _reads_back(op):
    """The columns whose values an instruction's VJP reads (I_OUT: its own)."""
    if op == COPY or op == GATHER or op == SCATTER_ADD or op == ADD or op == SUB or \
            passes_nothing(op):
        return ()
    if op == MUL:
        return (I_A, I_B)
    if op <= UNARY_LAST:
        return (I_A, I_OUT)
    if op == WHERE:
        return (I_C,)
    return (I_A, I_B, I_OUT)


class _Body:
    """One repetition's instructions and where each slot lives (see above)."""

    def __init__(self, instr, start, period, repeats, delta, constants, read_after,
                 table=None, pool=None, divisor=None, unswept=(), active=None,
                 value_of=None):
        self.instr, self.start, self.period, self.delta = instr, start, period, delta
        self.exponents = _literal_exponents(instr, range(start, start + period), period,
                                            value_of or {})
        self.pool, self.divisor = pool, divisor
        # the instructions no output's reverse sweep reaches in any repetition (an
        # adaptive step's control, frozen): the body's reverse leaves them out
        self.unswept = set(unswept)
        self.arrays = {}                            # module-level index arrays, by name
        self._plain = {}                            # plain_gather's answers
        self.constants = constants
        # (slot where the table of per-repetition constants starts, its width, entries):
        # the kernels take the start as ``tb`` (checkpointed segments move it)
        self.table = table if table is not None else (0, 0, {})
        body = range(start, start + period)
        self.base = min(int(instr[q, I_OUT]) for q in body)
        self.writes = writes = {}                   # element slot -> instruction
        for q in body:
            for k in range(int(instr[q, I_N])):
                writes[int(instr[q, I_OUT]) + k] = q
        # element slot -> the first instruction writing it (_owner; a scan of the body
        # per element took Gray-Scott's 24 x 24 step 1.7 s of a call)
        self._first_writes = first = {}
        for q in reversed(body):
            out = int(instr[q, I_OUT])
            first.update(dict.fromkeys(range(out, out + int(instr[q, I_N])), q))
        kept = set()
        for q in body:
            for e in self.moved_reads(q):
                if e not in writes and e < self.base:         # an earlier repetition's
                    e += -(-(self.base - e) // delta) * delta
                    if e in writes:
                        kept.add(writes[e])
        # what the code after the loop reads of any repetition (mostly the last one's
        # state; also an earlier one's values: an ODE solve's table of steps) stays in V
        end = self.base + repeats * delta
        self.read_after = read_after
        earlier = set()
        for r in read_after:
            if self.base <= r < end:
                e = self.base + (r - self.base) % delta
                if e in writes:
                    kept.add(writes[e])
                    if r < end - delta:
                        earlier.add(e - self.base)
        self.array("EARLIER", sorted(earlier))      # (kernels/settling.py: filled, when
        self._spanned(kept)
        self.temporary = {q for q in body if q not in kept}
        # The reverse sweep reads back the values of dear ops it needs (exp, sin, pow:
        # kept in V by the forward) and recomputes the rest: n-body's r2 ** 1.5 took a
        # pow in the forward, one more recomputing it and a third in its partial. So too
        # a value whose recomputation runs a gather (a Laplacian of rolls, which a
        # diffusivity's adjoint reads): each gather is a pass of its own before the
        # reverse's element loop (fusion.py); storing the value cost a 2-D heat step's
        # forward less than those passes cost its reverse.
        dear = {q for q in self._recomputed() if _dear(int(instr[q, I_OP])) and
                self.exponents.get(q) not in _CHEAP_EXPONENTS} | self._through_gathers()
        if dear:
            kept |= dear
            self._spanned(kept)
            self.temporary = {q for q in body if q not in kept}
        self.recomputed = self._recomputed()
        self.size, self.repeats = delta, repeats
        self.settles = False                        # (kernels/settling.py: below)
        if active is not None:
            self._settling(repeats, read_after, active)

    def _settling(self, repeats, read_after, active):
        """Whether the loop may stop where its state settles (kernels/settling.py), and
        what that takes: ``state``, the slots a repetition reads back (in the first
        repetition's numbering), ``active_state`` those of them whose values depend on
        the inputs, and ``fixed``, the active fixed operands the reverse adds to.
        ``active``: per slot, whether the inputs reach it, marked up to the loop."""
        instr, writes, base, delta = self.instr, self.writes, self.base, self.delta
        body = range(self.start, self.start + self.period)
        state = set()
        for q in body:
            for e in self.moved_reads(q):
                if e < base:
                    if e < base - delta or e + delta not in writes:
                        return                      # (it reads further back)
                    state.add(e + delta)
        if self.table[2] or repeats < 3:
            return                                  # (repetitions that differ)
        # active: the first repetition's outputs reached from active operands, then the
        # state it wrote taken as what it reads back, until nothing changes (the union
        # over the repetitions; more slots than that only make a settling rarer)
        active = active.copy()
        changed = True
        while changed:
            changed = False
            for q in body:
                out = int(instr[q, I_OUT])
                if active[out]:
                    continue
                if any(active[s:s + n].any() for s, n in read_runs(instr, self.pool, q,
                                                                    adjoint_only=True)):
                    active[out:out + int(instr[q, I_N])] = True
                    changed = True
            for c in state:
                if active[c] and not active[c - delta]:
                    active[c - delta] = changed = True
        fixed = set()
        for q in body:
            if q not in self.unswept:
                fixed.update(e for e in self._fixed_adjoint_reads(q)
                             if e not in self.constants and active[e])
        self.settles = True
        self.state = sorted(state)
        self.active_state = [c for c in self.state if active[c]]
        self.fixed = sorted(fixed)

    def _spanned(self, kept):
        """Add to ``kept`` the instructions an operand spans with a kept one: the pieces
        of a split op live all in V or all in T, so that one reference reads them."""
        changed = True
        while changed:
            changed = False
            for q in range(self.start, self.start + self.period):
                if pooled(int(self.instr[q, I_OP])):
                    continue                        # (it names each element apart)
                for col in OPERAND_COLUMNS:
                    owners = {self.writes[e] for e in self._elements(q, col)
                              if e in self.writes}
                    if len(owners) > 1 and owners & kept and not owners <= kept:
                        kept |= owners
                        changed = True

    def _read_back(self):
        """The temporaries a VJP reads (a product's factor only where the other one
        takes an adjoint: ``dt * f`` reads f's value for dt's, which a constant has not)."""
        instr, writes = self.instr, self.writes
        found = set()
        for q in range(self.start, self.start + self.period):
            if q in self.unswept:
                continue
            op = int(instr[q, I_OP])
            for col in _reads_back(op):
                other = I_B if col == I_A else I_A
                if op == MUL and not self.gets_adjoint(q, other):
                    continue
                found.update(writes[e] for e in self._elements(q, col) if e in writes)
        return found & self.temporary

    def _through_gathers(self):
        """The temporaries a VJP reads whose recomputation would run a GATHER."""
        found = set()
        for value in self._read_back():
            seen, todo = set(), [value]
            while todo:
                q = todo.pop()
                if int(self.instr[q, I_OP]) == GATHER:
                    found.add(value)
                    break
                seen.add(q)
                todo += [self.writes[e] for e in self.moved_reads(q) if e in self.writes
                         and self.writes[e] in self.temporary and self.writes[e] not in seen]
        return found

    def _recomputed(self):
        """The temporaries the reverse sweep recomputes: those a VJP reads, and theirs."""
        writes, body = self.writes, range(self.start, self.start + self.period)
        need = self._read_back()
        for q in reversed(body):
            if q in need:
                need |= {writes[e] for e in self.moved_reads(q) if e in writes} & \
                    self.temporary
        return need

    def ref(self, q, col, k, adjoint=False, points=False, tangent=False):
        """The array element instruction q's column ``col`` names, element suffix k; with
        ``points``, that element of point j in a chunk of C (slot-major); with
        ``tangent``, its tangent in lane l (of K, the lanes inside the slot)."""
        if col == I_B and q in self.exponents and not (adjoint or tangent):
            return self.exponents[q]                # (a literal: pow's branches fold)
        entry = self.table[2].get((q, col))
        if entry is not None:                       # a per-repetition constant
            if adjoint or tangent:
                return "None"                       # (never written: no adjoint)
            index = f"tb + t * {self.table[1]} + {entry[0]}{k}"
            return f"V[({index}) * C + j]" if points else f"V[{index}]"
        c = int(self.instr[q, col])
        moved = int(self.instr[q + self.period, col]) != c
        owner = self._owner(c) if moved else None
        if owner is not None and owner in self.temporary:
            name, index = ("GT" if adjoint else "DT" if tangent else "T"), \
                f"{c - self.base}{k}"
        else:                                       # (Vo: V from this repetition on)
            name, index = ("G" if adjoint else "D" if tangent else "V") + \
                ("o" if moved else ""), f"{c}{k}"
        if tangent:
            index = f"({index}) * K + l"
        return f"{name}[({index}) * C + j]" if points else f"{name}[{index}]"

    def _elements(self, q, col):
        """The slots instruction q's operand ``col`` reads when it moves with the
        repetitions (none when fixed or absent)."""
        c = int(self.instr[q, col])
        if c < 0 or int(self.instr[q + self.period, col]) == c or (q, col) in self.table[2]:
            return ()
        strided = int(stride(self.instr, q, col))
        return range(c, c + (int(self.instr[q, I_N]) if strided else 1))

    def moved_reads(self, q):
        """The slots instruction q reads that move with the repetitions."""
        if pooled(int(self.instr[q, I_OP])):
            here, _ = pool_reads(self.instr, self.pool, q)
            there, _ = pool_reads(self.instr, self.pool, q + self.period)
            return [int(e) for e in here[here != there]]
        return [e for col in OPERAND_COLUMNS for e in self._elements(q, col)]

    def _fixed_adjoint_reads(self, q):
        """The slots instruction q reads in every repetition alike and passes an adjoint
        to (a parameter, a value computed before the loop)."""
        instr, op = self.instr, int(self.instr[q, I_OP])
        if pooled(op):
            here, _ = pool_reads(instr, self.pool, q)
            there, _ = pool_reads(instr, self.pool, q + self.period)
            return [int(e) for e in here[here == there]]
        found = []
        for col in OPERAND_COLUMNS[:adjoint_columns(op)]:
            c = int(instr[q, col])
            if c >= 0 and int(instr[q + self.period, col]) == c and (q, col) not in self.table[2]:
                found.extend(range(c, c + (int(instr[q, I_N]) if stride(instr, q, col) else 1)))
        return found

    def sources(self, q):
        """A gather's or scatter's sources as (index, kind) per element: kind 0 a fixed
        slot of V, 1 a slot of V that moves (index + o), 2 a temporary (T[index])."""
        here, _ = pool_reads(self.instr, self.pool, q)
        there, _ = pool_reads(self.instr, self.pool, q + self.period)
        index, kind = here.copy(), np.zeros(here.size, np.int64)
        for k in np.nonzero(here != there)[0]:
            owner = self._owner(int(here[k]))
            if owner is not None and owner in self.temporary:
                index[k], kind[k] = here[k] - self.base, 2
            else:
                kind[k] = 1
        return index, kind

    def plain_gather(self, q):
        """Whether instruction q is a GATHER whose sources are all fixed slots of V or
        all values of the repetition before (a roll of the last step's grid): element k
        reads V[S[k]] or Vo[S[k]] and its reverse adds to G or Go alone, an elementwise
        instruction that kernels/fusion.py may fuse. (One of this repetition's values,
        fused, made n-body's step slower: 148 -> 161 us forward, 121 -> 142 reverse.)"""
        found = self._plain.get(q)
        if found is None:
            found = False
            if int(self.instr[q, I_OP]) == GATHER:
                index, kinds = self.sources(q)
                found = bool(kinds.size and (kinds == kinds[0]).all() and (
                    kinds[0] == 0 or (kinds[0] == 1 and index.max() < self.base)))
            self._plain[q] = found
        return found

    def array(self, name, values):
        """A module-level int64 array of the generated code."""
        self.arrays[name] = [int(v) for v in values]
        return name

    def _owner(self, c):
        """The body's first instruction whose output holds slot c; None if none does."""
        return self._first_writes.get(c)

    def gets_adjoint(self, q, col):
        c = int(self.instr[q, col])
        if (q, col) in self.table[2]:
            return False
        return c not in self.constants or int(self.instr[q + self.period, col]) != c


_ARRAY_NAMES = {False: {0: "V", 1: "V", 2: "T"}, True: {0: "G", 1: "G", 2: "GT"},
                "tangent": {0: "D", 1: "D", 2: "DT"}}


def _source(kind, points, which=False, index="s"):
    """The element a gather's or scatter's source ``index`` of ``kind`` names (which:
    False values, True adjoints, "tangent" tangents in lane l), as an expression."""
    name = _ARRAY_NAMES[which][kind] + ("o" if kind == 1 else "")
    if which == "tangent":
        index = f"({index}) * K + l"
    return f"{name}[({index}) * C + j]" if points else f"{name}[{index}]"


def _by_kind(kinds, points, which=False):
    """The source of a gather's or scatter's element ``k`` as an expression, by its kind
    (M{q}[k]) where they differ."""
    present = sorted(set(int(k) for k in kinds))
    if len(present) == 1:
        return _source(present[0], points, which)
    expr = _source(present[-1], points, which)
    for kind in present[-2::-1]:
        expr = f"({_source(kind, points, which)} if m == {kind} else {expr})"
    return expr


def _pooled_code(body, q, points):
    """A GATHER or SCATTER_ADD of the body as code, in the interpreter's order: (forward
    lines, reverse lines, tangent lines), each a whole block."""
    instr = body.instr
    op, n = int(instr[q, I_OP]), int(instr[q, I_N])
    index, kinds = body.sources(q)
    S, M = body.array(f"S{q}", index), body.array(f"M{q}", kinds)
    pick = [f"s = {S}[k]"] + ([f"m = {M}[k]"] if len(set(kinds.tolist())) > 1 else [])
    each = ["for j in range(C):"] if points else []
    elements = [f"for k in range({n}):"]

    def out(k, which=False):
        return body.ref(q, I_OUT, k, which is True, points, which == "tangent")

    def lanes(lines):
        return ["for l in range(K):"] + ["    " + line for line in lines]
    value, tan = _by_kind(kinds, points), _by_kind(kinds, points, "tangent")
    if op == GATHER:
        forward = _block(elements, pick + _block(each, [f"{out(' + k')} = {value}  # GATHER"]))
        reverse = _block(elements, pick + _block(each, [f"g = {out(' + k', True)}"] +
                                                 _scatter_to(kinds, points, "g")))
        tangent = _block(elements, pick + _block(each, [f"{out(' + k')} = {value}"] + lanes(
            [f"{out(' + k', 'tangent')} = {tan}"])))
        return forward, reverse, tangent
    _, offsets = pool_reads(instr, body.pool, q)
    F, d = body.array(f"F{q}", offsets), repr(float(body.divisor[q]))
    divided = float(body.divisor[q]) != 1.0
    pick = pick + [f"f = {F}[k]"]
    pairs = [f"for k in range({offsets.size}):"]
    forward = ["# SCATTER_ADD"] + _block(elements + each, [f"{out(' + k')} = 0.0"]) + \
        _block(pairs, pick + _block(each, [f"{out(' + f')} += {value}"])) + \
        (_block(elements + each, [f"{out(' + k')} = f64({out(' + k')}) / {d}"])
         if divided else [])
    reverse = _block(pairs, pick + _block(each, [f"g = f64({out(' + f', True)}) / {d}"] +
                                          _scatter_to(kinds, points, "g")))
    dz = out(" + k", "tangent")
    tangent = forward + _block(elements + each, lanes([f"{dz} = 0.0"])) + \
        _block(pairs, pick + _block(each, lanes([f"{out(' + f', 'tangent')} += {tan}"]))) + \
        (_block(elements + each, lanes([f"{dz} = f64({dz}) / {d}"])) if divided else [])
    return forward, reverse, tangent


def _scatter_to(kinds, points, g):
    """Lines adding ``g`` to the adjoint of element k's source, by its kind."""
    present = sorted(set(int(k) for k in kinds))
    if len(present) == 1:
        return [f"{_source(present[0], points, True)} += {g}"]
    lines = []
    for i, kind in enumerate(present):
        lines += [("if" if i == 0 else "elif") + f" m == {kind}:",
                  f"    {_source(kind, points, True)} += {g}"]
    return lines


def _block(loops, statements, before=(), after=()):
    """Statements (lists of lines, nested by 4 spaces) inside the given loop headers, as
    lines of the body (8 spaces deep in the template); ``before`` and ``after`` the
    loops, lines outside them."""
    out, depth = list(before), 0
    for header in loops:
        out.append("    " * depth + header)
        depth += 1
    for line in statements:
        out.append("    " * depth + line)
    return out + list(after)


# a broadcast operand's adjoint, added to at every element: ``GT[1145] += gx`` (one
# point) or ``GT[(1145) * C + j] += gx`` (a chunk); and a deferred term's flush
_BROADCAST_ADD = re.compile(r"^(\s*)((?:GT|Go|G)\[(?:\(\d+\) \* C \+ j|\d+)\]) \+= (.*)$")
_FLUSH = re.compile(r"^(.*) \+?= W\[\(?(\d+) \+ k")   # (a first write assigns: fusion.py)


def _lane_sum_lines(target, w, n, points):
    """The lines adding lane_sum of the n terms at W[w ...] to ``target`` (after the loop;
    for one point, contiguous: as vector additions, kernels/lanes.py)."""
    if points:
        return ["for j in range(C):", f"    {target} += lane_sum(W, {w} * C + j, {n}, C)"]
    return [f"{target} += contiguous_lane_sum(W, {w}, {n})"]


def _broadcast_lanes(loops, lines, scratch, points):
    """(statements, lines after the loop): a broadcast operand's adjoint terms in an
    element loop written to the float64 buffer W (from ``scratch[0]`` on) and summed
    after it by lane_sum, as every runner sums them (kernels/program.py, LANES): one
    running sum would make each addition wait on the last."""
    if not loops or not loops[0].startswith("for k in range("):
        return lines, []
    n = int(loops[0][len("for k in range("):-2])
    if n < LANES_MIN:
        return lines, []                        # (one after another: see LANES_MIN)
    zeroed, out, after = [], [], []
    for line in lines:
        found = _BROADCAST_ADD.match(line)
        if not found:
            out.append(line)
            continue
        indent, target, expr = found.groups()
        w = scratch[0]
        scratch[0] += n
        cell = f"({w} + k) * C + j" if points else f"{w} + k"
        if indent:                              # (a WHERE's branch: others add nothing)
            zeroed.append(f"W[{cell}] = 0.0")
        out.append(f"{indent}W[{cell}] = {expr.split('  #')[0]}")
        after += _lane_sum_lines(target, w, n, points)
    return zeroed + out, after


def _flush(loops, lines, points):
    """A fused run's deferred terms of one member added after the run's loop
    (``target += W[...]`` lines, or ``=`` for a first write): the strided ones element
    by element, then the broadcast ones' lane sums (over fewer than LANES_MIN cells: in
    the loop too; a broadcast term assigns only over one cell, _first_writes_assign)."""
    n = int(loops[0][len("for k in range("):-2])
    strided, after = [], []
    for line in lines:
        target, w = _FLUSH.match(line).groups()
        if n >= LANES_MIN and _BROADCAST_ADD.match(f"{target} += ."):
            after += _lane_sum_lines(target, int(w), n, points)
        else:
            strided.append(line)
    return (_block(loops, strided) if strided else []) + after


def _instruction(body, q, points):
    """Instruction q of the body as code: (loop headers, forward lines, reverse lines,
    the reverse lines' writes to operand adjoints as (line, column, conditional))."""
    instr = body.instr
    op, n = int(instr[q, I_OP]), int(instr[q, I_N])
    if body.plain_gather(q):                    # (an elementwise instruction to fusion)
        index, kinds = body.sources(q)
        S = body.array(f"S{q}", index)
        loops = [f"for k in range({n}):"] + (["for j in range(C):"] if points else [])
        z, gz = body.ref(q, I_OUT, " + k", False, points), body.ref(q, I_OUT, " + k", True,
                                                                  points)
        x, gx = (_source(int(kinds[0]), points, which, f"{S}[k]") for which in (False, True))
        return loops, [f"{z} = {x}  # GATHER"], [f"{gx} += {gz}  # GATHER"], []
    if pooled(op):
        forward, reverse, _ = _pooled_code(body, q, points)
        return [], forward, reverse, []
    sa = int(instr[q, I_SA]) if op != COPY else 1
    writes = []
    loops = ([f"for k in range({n}):"] if n > 1 else []) + \
        (["for j in range(C):"] if points else [])
    kz, kx = (" + k", " + k" * sa) if n > 1 else ("", "")

    def ref(col, k, adjoint=False):
        return body.ref(q, col, k, adjoint, points)
    z, x, gz, gx = ref(I_OUT, kz), ref(I_A, kx), ref(I_OUT, kz, True), ref(I_A, kx, True)
    name = opcode_name(op) if op >= 0 else KIND_NAMES[op]
    forward, backward = [], []
    if op == COPY:
        forward.append(f"{z} = {x}  # COPY")
        if body.gets_adjoint(q, I_A):
            writes.append((0, I_A, False))
            backward.append(f"{gx} += {gz}  # COPY")
    elif op <= UNARY_LAST:
        forward.append(f"{z} = unary_value({op}, f64({x}))  # {name}")
        if not passes_nothing(op) and body.gets_adjoint(q, I_A):
            writes.append((0, I_A, False))
            backward.append(f"{gx} += times({op}, f64({gz}), unary_partial({op}, "
                            f"f64({x}), f64({z})))  # {name}")
    else:
        ky = " + k" * int(instr[q, I_SB]) if n > 1 else ""
        y, gy = ref(I_B, ky), ref(I_B, ky, True)
        X, Y, Z = f"f64({x})", f"f64({y})", f"f64({z})"
        if op == WHERE:
            w = ref(I_C, " + k" * int(instr[q, I_SC]) if n > 1 else "")
            forward.append(f"{z} = {x} if {w} != 0 else {y}  # WHERE")
            take_x, take_y = body.gets_adjoint(q, I_A), body.gets_adjoint(q, I_B)
            if take_x and take_y:
                writes += [(1, I_A, True), (3, I_B, True)]
                backward += [f"if {w} != 0:", f"    {gx} += {gz}", "else:",
                             f"    {gy} += {gz}  # WHERE"]
            elif take_x or take_y:         # (a constant branch has no adjoint to write)
                writes.append((1, I_A if take_x else I_B, True))
                backward += [f"if {w} {'!=' if take_x else '=='} 0:",
                             f"    {gx if take_x else gy} += {gz}  # WHERE"]
        else:
            symbol = {ADD: "+", SUB: "-", MUL: "*", DIV: "/"}.get(op)
            forward.append(f"{z} = " + (f"{X} {symbol} {Y}" if symbol else
                                        f"binary_value({op}, {X}, {Y})") + f"  # {name}")
            if not passes_nothing(op):
                dx, dy = binary_adjoints(op, f"f64({gz})", X, Y, Z)
                cols = [c for c in (I_A, I_B) if body.gets_adjoint(q, c)]
                if len(cols) == 2:         # (both read before either is written)
                    backward += [f"gx, gy = {dx}, {dy}", f"{gx} += gx", f"{gy} += gy"]
                    writes += [(1, I_A, False), (2, I_B, False)]
                elif cols:
                    target, d = (gx, dx) if cols[0] == I_A else (gy, dy)
                    backward.append(f"{target} += {d}")
                    writes.append((0, cols[0], False))
    return loops, forward, backward, writes


def binary_adjoints(op, g, x, y, z):
    """The expressions a binary op's VJP adds to its operands' adjoints, given the
    expressions of its output's adjoint and of its operands' and output's values (the
    interpreter's arithmetic: codegen.py writes the same)."""
    if op == ADD or op == SUB:
        return g, (g if op == ADD else f"-{g}")
    if op == MUL:
        return f"{g} * {y}", f"{g} * {x}"
    return (f"times({op}, {g}, binary_partial_x({op}, {x}, {y}, {z}))",
            f"times({op}, {g}, binary_partial_y({op}, {x}, {y}, {z}))")


def _tangent_lines(body, q, points):
    """Forward mode for instruction q: its tangent in each of K lanes (the loop over
    lanes innermost, the partials computed once per element). Operands that are
    constants carry no tangent and are left out."""
    instr = body.instr
    op, n = int(instr[q, I_OP]), int(instr[q, I_N])
    sa = int(instr[q, I_SA]) if op != COPY else 1
    kz, kx = (" + k", " + k" * sa) if n > 1 else ("", "")
    ky = " + k" * int(instr[q, I_SB]) if n > 1 else ""

    def ref(col, k):
        return body.ref(q, col, k, False, points)

    def tan(col, k):
        return body.ref(q, col, k, False, points, tangent=True)
    z, dz = ref(I_OUT, kz), tan(I_OUT, kz)
    active = [c for c in (I_A, I_B) if body.gets_adjoint(q, c)] if op != COPY \
        else [I_A]
    if op == COPY:
        return [], [f"{dz} = {tan(I_A, kx)}"]
    if op == WHERE:
        w = ref(I_C, " + k" * int(instr[q, I_SC]) if n > 1 else "")
        pick = {c: (tan(c, kx if c == I_A else ky) if c in active else "0.0")
                for c in (I_A, I_B)}
        return [], [f"{dz} = {pick[I_A]} if {w} != 0 else {pick[I_B]}"]
    if passes_nothing(op) or not active:
        return [], [f"{dz} = 0.0"]
    x = f"f64({ref(I_A, kx)})"
    if op <= UNARY_LAST:
        return [f"dx = unary_partial({op}, {x}, f64({z}))"], \
            [f"{dz} = tangent_times({op}, f64({tan(I_A, kx)}), dx)"]
    y = f"f64({ref(I_B, ky)})"
    if op == ADD or op == SUB:
        partials = {I_A: None, I_B: None if op == ADD else "-"}
        terms = [("-" if partials[c] == "-" else "") + f"f64({tan(c, kx if c == I_A else ky)})"
                 for c in active]
        return [], [f"{dz} = " + " + ".join(terms)]
    if op == MUL:
        partial = {I_A: y, I_B: x}
        setup = []
    else:
        partial = {I_A: "dx", I_B: "dy"}
        setup = [f"dx = binary_partial_x({op}, {x}, {y}, f64({z}))",
                 f"dy = binary_partial_y({op}, {x}, {y}, f64({z}))"]
    terms = [f"tangent_times({op}, f64({tan(c, kx if c == I_A else ky)}), {partial[c]})"
             for c in active]
    return setup, [f"{dz} = " + " + ".join(terms)]


def _tangent_body(body, points):
    """The lines of the forward-mode kernel (values and K tangent lanes per repetition)
    and those hoisted before the loop (the invariant temporaries)."""
    lines, hoisted = [], []
    invariant = _invariant(body)
    for q in range(body.start, body.start + body.period):
        if pooled(int(body.instr[q, I_OP])):
            block = _pooled_code(body, q, points)[2]
            (hoisted if q in invariant else lines).extend(block)
            continue
        loops, forward, _, _ = _instruction(body, q, points)
        setup, per_lane = _tangent_lines(body, q, points)
        block = _block(loops, forward + setup + ["for l in range(K):"]
                       + ["    " + line for line in per_lane])
        (hoisted if q in invariant else lines).extend(block)
    return lines, hoisted


def _body(body, points):
    """The forward lines, the forward lines of the temporaries (the reverse sweep's
    recomputation), the reverse lines and the lines zeroing the kept slots' adjoints of
    one repetition; with ``points``, for a chunk of C points. Runs of elementwise
    instructions over the same cells go in one element loop (kernels/fusion.py)."""
    instr, fwd, again, rev, kept, hoisted = body.instr, [], [], [], [], []
    invariant = _invariant(body)
    code = {q: _instruction(body, q, points) for q in range(body.start, body.start + body.period)}
    forwards = {q: lines[1] for q, lines in code.items()}
    groups = fused_groups(body, list(code), invariant)
    group_of = {q: g for g, _, _ in groups for q in g}
    skipped_in = {id(g): skipped for g, skipped, _ in groups}
    lifted_before = {g[0]: lifted for g, _, lifted in groups}
    lifted = {q for found in lifted_before.values() for q in found}
    sums = {id(g): _run_sums(body, g, group_of, invariant) for g, _, _ in groups}
    summed = {s for found in sums.values() for s in found}
    readers, vjp_readers = _readers(body)
    for q in range(body.start, body.start + body.period):
        n = int(instr[q, I_N])
        loops, forward, backward, writes = code[q]
        g = group_of.get(q)
        for b in lifted_before.get(q, ()):      # (before the run's loop: its members
            fwd.extend(_block(code[b][0], code[b][1]))      # read them)
            if b in body.recomputed:
                again.extend(_block(code[b][0], code[b][1]))
        if g is not None and q != g[0]:
            pass                                # (written with the run's first)
        elif q in lifted:
            pass                                # (written before its run's loop)
        elif g is not None:
            outside = {m for m in g if readers[m] - set(g) - set(sums[id(g)])}
            lines = fused_forward(body, g, forwards, set(g),
                                  outside | (set(g) - body.temporary), points)
            fwd.extend(_summed_in_loop(body, loops, lines, sums[id(g)], points))
            redo = set(g) & body.recomputed     # (the run's reverse recomputes them
            needed = {m for m in redo if (vjp_readers[m] | readers[m] & body.recomputed)
                      - set(g)}                 # too: stored for the others only)
            if needed:
                again.extend(_block(loops, fused_forward(body, g, forwards, redo, needed,
                                                         points)))
        elif q in invariant:
            hoisted.extend(_block(loops, forward))   # (a temporary: nothing to clear)
        else:
            if q not in summed:                 # (a sum of a run's values: in its loop)
                fwd.extend(_block(loops, forward))
            if q in body.recomputed:
                again.extend(_block(loops, forward))
        if q not in invariant and q not in body.temporary:
            kept.append((int(instr[q, I_OUT]), n))
        if backward and q not in body.unswept:
            rev.append((q, loops, backward, writes))
    # a summed member that nothing else reads takes its adjoint from its sum's in the
    # run's loop: the sum's reverse (a pass storing each cell's adjoint) is left out
    summed_back = {s: m for g, _, _ in groups for s, m in sums[id(g)].items()
                   if m in body.temporary and readers[m] == {s}}
    steps, zero = _first_writes_assign(body, rev[::-1], points, summed_back)
    # the kept slots' adjoints: cleared before every sweep where their first write adds,
    # in the last two repetitions alone where it assigns (``every``: _kept_first_writes)
    added = [(b, 1) for b0, n in kept for b in range(b0, b0 + n) if b not in body.assigned]
    clear = ([line for b, e in _joined(added) for line in _zeroing("G", b, e, " + o", points)],
             [line for b, e in _joined((b, 1) for b in body.assigned)
              for line in _zeroing("G", b, e, " + o", points)])
    starts = {m: _sum_adjoint(body, s, m, points) for s, m in summed_back.items()}
    reverse, done, scratch, pending = [], set(), [0], []
    for q, loops, backward in steps + [(-1, None, None)]:
        while pending and pending[0][0] > q:    # (a run's deferred terms: each member's
            _, head, flush = pending.pop(0)     # after the skipped ones above it)
            reverse += _flush(head, flush, points)
        g = group_of.get(q)
        if q < 0:
            break
        if g is None:
            lines, after = _broadcast_lanes(loops, backward, scratch, points)
            reverse += _block(loops, lines, (), after)
        elif id(g) not in done:
            done.add(id(g))
            # gathers recomputed before the run's loop, read from T in it: an indexed
            # load among the loop's stores to G keeps LLVM from vectorizing the loop (it
            # cannot check that they do not overlap): a 2-D roll's reverse took 1.6x
            gathered = sorted(m for m in set(g) & body.recomputed if body.plain_gather(m))
            for m in gathered:
                reverse += _block(loops, forwards[m])
            values = fused_forward(body, g, forwards, set(g) & body.recomputed, set(),
                                   points, loaded=gathered)
            lines, flushes = fused_reverse(
                body, g, values, [(m, b) for m, _, b in steps if m in g],
                set(g) & body.recomputed, deferred(body, g, skipped_in[id(g)]), scratch,
                points, starts)
            lines, after = _broadcast_lanes(loops, lines, scratch, points)
            reverse += _block(loops, lines if points else local_adds(lines), (), after)
            pending = [(m, loops, flush) for m, flush in flushes] + pending
    return fwd, again, zero + reverse, clear, hoisted, scratch[0]


def _sum_adjoint(body, s, m, points):
    """The adjoint of cell k of run member m whose cells the SCATTER_ADD s sums (whole,
    or row by row), as s's reverse would have left it in m's zeroed adjoint:
    ``0.0 + g / d`` (so a -0.0 stays +0.0), rounded as stored."""
    rows = int(body.instr[s, I_N])
    cell = f" + k // {int(body.instr[m, I_N]) // rows}" if rows > 1 else ""
    g = body.ref(s, I_OUT, cell, True, points)
    return f"{ROUNDED}(0.0 + f64({g}) / {float(body.divisor[s])!r})"


def _run_sums(body, group, group_of, invariant):
    """{s: m}: the SCATTER_ADDs that sum the cells of run member m's output, in order,
    into one cell (``(u * probe).sum()``: a loss summed inside the loop) or row by row
    into consecutive cells (``A @ x``: the products of a row summed into its cell). The
    run's loop adds each cell's value to its sum as it computes it: a sum's additions,
    one after another, each wait on the last (4 cycles), and in a loop of their own
    after the run's they stood as long as the run (a 2-D heat step: 0.39 us of its
    1.2); a row's products were stored and read back (a 20-node epidemic's step 410 ->
    ... ns). The same additions in the same order: the same bits. A run has at most one
    row sum (its loop is then a loop over the rows), or any number of whole sums."""
    instr, n = body.instr, int(body.instr[group[0], I_N])
    outputs = {}
    for m in group:
        out = int(instr[m, I_OUT])
        outputs[(out - body.base, 2) if m in body.temporary else (out, 1)] = m
    found, rows = {}, {}
    for s in range(max(group) + 1, body.start + body.period):
        count = int(instr[s, I_N])
        if int(instr[s, I_OP]) != SCATTER_ADD or n % count or s in group_of or \
                s in invariant:
            continue
        _, offsets = pool_reads(instr, body.pool, s)
        index, kinds = body.sources(s)
        if offsets.size != n or (offsets != np.arange(n) // (n // count)).any() or \
                (kinds != kinds[0]).any():
            continue
        m = outputs.get((int(index[0]), int(kinds[0])))
        if m is not None and (index == index[0] + np.arange(n)).all():
            (rows if count > 1 else found)[s] = m
    if rows:
        s = min(rows)
        return {s: rows[s]}
    return found


def _summed_in_loop(body, loops, lines, sums, points):
    """A run's forward (``lines``, one element's, inside ``loops``) with the sums
    ``sums`` (_run_sums) added up in its loop: in a local (one point) or in the sum's
    cell (a chunk: one per point), as the SCATTER_ADD would, then divided as it would.
    A row sum makes the loop one over its rows (``kr``), each a loop over the row's
    cells (``kc``, the cell ``k`` = kr cols + kc)."""
    before, inside, after = [], [], []
    rows = max(int(body.instr[s, I_N]) for s in sums) if sums else 1
    cell = " + kr" if rows > 1 else ""
    for s, m in sums.items():
        total = body.ref(s, I_OUT, cell, False, points)
        d = float(body.divisor[s])
        if points:
            before += ["for j in range(C):", f"    {total} = 0.0"]
            inside.append(f"{total} = {ROUNDED}(f64({total}) + f64(z{m}))  # SCATTER_ADD")
            if d != 1.0:
                after += ["for j in range(C):", f"    {total} = f64({total}) / {d!r}"]
        else:
            before.append(f"sum{s} = 0.0")
            inside.append(f"sum{s} = {ROUNDED}(sum{s} + f64(z{m}))  # SCATTER_ADD")
            after.append(f"{total} = sum{s}" + (f" / {d!r}" if d != 1.0 else ""))
    if rows == 1:
        return _block(loops, lines + inside, before, after)
    cols = int(loops[0][len("for k in range("):-2]) // rows
    row = [f"for kc in range({cols}):", f"    k = kr * {cols} + kc"] + \
        ["    " + line for line in _block(loops[1:], lines + inside)]
    return _block([f"for kr in range({rows}):"], before + row + after)


def _readers(body):
    """Per instruction: the instructions that read its output, and those whose VJPs
    read its value."""
    instr, writes = body.instr, body.writes
    readers = {q: set() for q in range(body.start, body.start + body.period)}
    vjp_readers = {q: set() for q in readers}
    for q in readers:
        for e in body.moved_reads(q):
            if e in writes:
                readers[writes[e]].add(q)
        for col in _reads_back(int(instr[q, I_OP])):
            for e in body._elements(q, col):
                if e in writes:
                    vjp_readers[writes[e]].add(q)
    return readers, vjp_readers


def _invariant(body):
    """The temporaries every repetition computes alike (from fixed slots and other such
    temporaries): computed once, before the loop, in both directions."""
    instr, found = body.instr, set()
    for q in range(body.start, body.start + body.period):
        if q not in body.temporary:
            continue
        ok = True
        if pooled(int(instr[q, I_OP])):
            owners = {body._owner(e) for e in body.moved_reads(q)}
            if owners <= found:
                found.add(q)
            continue
        for col in OPERAND_COLUMNS:
            c = int(instr[q, col])
            if (q, col) in body.table[2]:
                ok = False                      # (its value changes every repetition)
                continue
            if c < 0 or int(instr[q + body.period, col]) == c:
                continue                        # none, or fixed
            # every element it reads: an operand may span the outputs of several
            # instructions (the pieces of a split op), of which only some are invariant
            if not {body._owner(e) for e in body._elements(q, col)} <= found:
                ok = False
        if ok:
            found.add(q)
    return found


def _first_writes_assign(body, steps, points, summed_back=None):
    """The reverse steps (q, loop headers, lines), where the first write (in the sweep's
    order) to a temporary's adjoint covering it whole assigns rather than adds; and the
    lines zeroing, at the top of each repetition, only the temporaries' adjoints that
    something reads or adds to before any such write (GT[:] = 0 would store every
    temporary, every repetition). ``summed_back``: {sum: member} whose sum's reverse
    the member's run does (left out here; the member's adjoint never read from GT)."""
    summed_back = summed_back or {}
    instr = body.instr
    assigned, body.assigned = _kept_first_writes(body, steps, summed_back), set()
    temps = {}                                  # element slot -> temporary instruction
    for u in body.temporary:
        for k in range(int(instr[u, I_N])):
            temps[int(instr[u, I_OUT]) + k] = u
    ready, zeroed, lines = set(), [], []

    def start(u):
        if u not in ready:
            ready.add(u)
            zeroed.append(u)
    ready.update(summed_back.values())          # (started from the sum's adjoint)
    for q, loops, backward, writes in steps:
        if q in body.temporary:                 # its own adjoint is read first
            start(q)
        if q in summed_back:
            continue
        if pooled(int(instr[q, I_OP])):        # (adds to its sources' adjoints, element
            for e in body.moved_reads(q):       # by element)
                if e in temps:
                    start(temps[e])
        backward = list(backward)
        for line, col, conditional in writes:
            c, n = int(instr[q, col]), int(instr[q, I_N])
            moved = int(instr[q + body.period, col]) != c
            u = temps.get(c) if moved else None
            if (q, line) in assigned:           # (a kept slot's, first: _kept_first_writes)
                backward[line] = backward[line].replace(" += ", " = ", 1)
                body.assigned |= assigned[q, line]
                continue
            if u is None:
                continue                        # a kept slot's adjoint: else added to
            strided = int(stride(instr, q, col))
            count = n if strided else 1
            whole = (c == int(instr[u, I_OUT]) and count == int(instr[u, I_N]) and
                     (strided or n == 1))
            if u not in ready and whole and not conditional:
                ready.add(u)
                backward[line] = backward[line].replace(" += ", " = ", 1)
            else:
                for e in range(c, c + count):
                    if e in temps:
                        start(temps[e])
        lines.append((q, loops, backward))
    spans = _joined((int(instr[u, I_OUT]) - body.base, int(instr[u, I_N])) for u in zeroed)
    zero = [line for b, e in spans for line in _zeroing("GT", b, e, "", points)]
    return lines, zero


def _kept_first_writes(body, steps, summed_back):
    """{(q, line): the slots (the first repetition's)} of the reverse lines that write
    a kept slot's adjoint first in the sweep's order, every repetition, so that they
    may assign: the state's adjoints then need no clearing before the sweep, nor a load
    of the zero it held (a cubic oscillator's gradient 29 -> 25 us). The sweep runs the
    repetitions from the last and each backwards, so a slot's first writer is its
    reader from furthest back (lag, that many repetitions later), then the latest one.
    Such a write assigns where it covers its slots whole, unconditionally (not a WHERE's
    branch), looks at most two repetitions back (the repetitions ``clear`` zeroes in
    full: program_prepare's last two) and nothing else adds to those slots first: not
    the code after the loop (``read_after``, an ODE solve's table of steps), nor the
    loop's fixed operands, where the first repetitions reach back before the loop; nor
    a gather or a sum, whose adds no line names. (A loop that settles: its passes over
    the settled copy clear as they go, and the settled repetition's assigned state
    adjoints are zeroed before the passes hand theirs back: settling.another_pass.)"""
    instr, base, delta, writes = body.instr, body.base, body.delta, body.writes
    kept = {e for e, q in writes.items() if q not in body.temporary}
    blocked, writers, order = set(), {}, {}
    fixed = set(body.read_after)

    def element(e):                             # (a repetition's slot: its first's)
        return e + -(-(base - e) // delta) * delta if e < base else e
    for i, (q, _, _, lines) in enumerate(steps):
        if pooled(int(instr[q, I_OP])) or body.plain_gather(q) or q in summed_back:
            blocked.update(element(e) for e in body.moved_reads(q))    # (adds no line
                                                                        # names)
        for line, col, conditional in lines:
            order[q, line] = (i, line)
    for q in range(body.start, body.start + body.period):
        fixed.update(body._fixed_adjoint_reads(q))
    for q, _, _, lines in steps:
        for line, col, conditional in lines:
            c, n = int(instr[q, col]), int(instr[q, I_N])
            if int(instr[q + body.period, col]) == c or (q, col) in body.table[2]:
                continue                        # (a fixed operand's)
            count = n if int(stride(instr, q, col)) else 1
            lag = -(-(base - c) // delta) if c < base else 0
            slots = range(c + lag * delta, c + lag * delta + count)
            if lag > 2 or conditional or (count == 1 and n > 1) or \
                    element(c + count - 1) != slots[-1] or not all(e in kept for e in slots):
                blocked.update(slots)
                continue
            for e in slots:
                writers.setdefault(e, []).append((-lag, order[q, line], q, line))
    # the slots before the loop that the first repetitions' reads reach (lag > t): no
    # other read may name them (the code before the loop is swept after the loop)
    reached = {}
    for q in range(body.start, body.start + body.period):
        for e in body.moved_reads(q):
            for t in range(min(-(-(base - e) // delta), body.repeats) if e < base else 0):
                reached.setdefault(e + t * delta, set()).add(element(e))
    for slot, elements in reached.items():
        if len(elements) > 1 or slot in fixed:
            blocked.update(elements)
    end, after = base + body.repeats * delta, {}
    for r in body.read_after:                   # (read after the loop: the sweep of the
        if base <= r < end:                     # code after it adds to it first)
            e, t = base + (r - base) % delta, (r - base) // delta
            after[e] = min(after.get(e, t), t)
    found = {}
    for e, candidates in writers.items():
        first = min(candidates)                 # (a lag L writer assigns up to the
        ok = e not in blocked and after.get(e, body.repeats) > body.repeats - 1 + first[0]
        found.setdefault((first[2], first[3]), []).append(ok)   # repetition R - 1 - L)
    assigned = {}
    for q, _, _, lines in steps:
        for line, col, conditional in lines:
            if (q, line) in found and all(found[q, line]) and \
                    len(found[q, line]) == (int(instr[q, I_N])
                                            if int(stride(instr, q, col)) else 1):
                c = int(instr[q, col])
                lag = -(-(base - c) // delta) if c < base else 0
                assigned[q, line] = set(range(c + lag * delta, c + lag * delta
                                              + len(found[q, line])))
    return assigned


def _zeroing(name, b, e, offset, points):
    """The line zeroing ``name``'s slots [b, e) (each moved by ``offset``; with
    ``points``, C cells each): one cell as a store, not a slice's fill, which costs ~8
    ns a call (a cubic oscillator's reverse zeroed four one-cell adjoints a step: 3 of
    its 19 us). (A loop of stores over several cells, its start not known to be >= 0,
    checked every index for a negative one: clearing the oscillators' 64 cells a step
    took 9 us, the slice 2.4.)"""
    if points:
        return [f"{name}[({b}{offset}) * C:({e}{offset}) * C] = 0.0"]
    if e == b + 1:
        return [f"{name}[{b}{offset}] = 0.0"]
    return [f"{name}[{b}{offset}:{e}{offset}] = 0.0"]


def _joined(runs):
    """The slot runs (first, count) as spans [first, end), sorted, touching ones joined:
    each slice's fill costs a few ns a repetition (an advection step zeroed 16)."""
    spans = []
    for b, n in sorted(runs):
        if spans and spans[-1][1] == b:
            spans[-1][1] = b + n
        else:
            spans.append([b, b + n])
    return spans


_HEADER = '''"""Generated by autotape.kernels.loops: one loop body of a lean program."""
import numba
import numpy as np

from autotape.kernels.elementwise import (binary_partial_x, binary_partial_y, binary_value,
                                          tangent_times, times, unary_partial, unary_value)
from autotape.kernels.driver import points_driver, seed_points
from autotape.kernels.lanes import contiguous_lane_sum
from autotape.kernels.program import (forward_range, forward_range_points, lane_sum,
                                      reverse_range, reverse_range_points)
from autotape.kernels.settling import (another_pass, copy_settled, fill_left_out,
                                       keep_adjoints, move_adjoints, reaches_left_out,
                                       settled, zero_left_out)

f64 = np.float64
'''

_FUNCTIONS = '''

@numba.njit(cache=True, error_model="numpy", nogil=True)
def forward{suffix}(V, delta, first, repeats, shift, tb, settle{points}):
    if first < repeats and first * delta < shift:   # (Vo = V[o:] needs o >= 0)
        raise ValueError("autotape internal error: a loop window below slot 0")
    T = np.empty({size}{times_c}, V.dtype)
    {hoisted}
    for t in range(first, repeats):
        o = t * delta - shift
        Vo = V[o{times_c}:]
        {forward}
        {settle}
    return repeats


@numba.njit(cache=True, error_model="numpy", nogil=True)
def clear{suffix}(G, delta, first, repeats, shift, tb, every{points}):
    for t in range(first, repeats):
        o = t * delta - shift
        {clear}
        if every:
            {clear_every}


@numba.njit(cache=True, error_model="numpy", nogil=True)
def tangent{suffix}(V, D, delta, first, repeats, K, shift, tb{points}):
    if first < repeats and first * delta < shift:   # (Vo = V[o:] needs o >= 0)
        raise ValueError("autotape internal error: a loop window below slot 0")
    T = np.empty({size}{times_c}, V.dtype)
    DT = np.empty({size} * K{times_c}, V.dtype)
    {tangent_hoisted}
    for t in range(first, repeats):
        o = t * delta - shift
        Vo, Do = V[o{times_c}:], D[o * K{times_c}:]
        {tangent}
        {tangent_settle}
    return repeats


@numba.njit(cache=True, error_model="numpy", nogil=True)
def reverse{suffix}(V, G, delta, first, repeats, shift, tb, ran{points}):
    if first < repeats and first * delta < shift:   # (Vo = V[o:] needs o >= 0)
        raise ValueError("autotape internal error: a loop window below slot 0")
    T = np.empty({size}{times_c}, V.dtype)
    GT = np.empty({size}{times_c}, V.dtype)
    W = np.empty({buffered}{times_c})               # (deferred adjoint terms: fusion.py)
    {hoisted}
    {reverse_loop}


# the driver's hooks (kernels/driver.py): the interpreter before and after the loop, this
# body in between, both ways; an output whose sweep the body may not run (``compiled``
# false: program.py's ``_loop_reached``) is swept by the interpreter over the loop too,
# which then runs the loop's forward
@numba.njit(inline="always", error_model="numpy", nogil=True)
def program_forward{suffix}(code, V, C, lane):
    instr, pool, divisor, live, out_slots, compiled, every, start, end, delta, repeats, \
        tb, first_slot, last_slot = code
    zero, one = np.int64(0), np.int64(1)   # (not literals: numba would compile the callees
    {forward_range}(instr, pool, divisor, V,{c_arg} zero, start)  # again for literals)
    ran = repeats
    if every:
        ran = forward{suffix}(V, delta, zero, repeats, zero, tb, one{points})
    else:
        {forward_range}(instr, pool, divisor, V,{c_arg} start, end)
    {forward_range}(instr, pool, divisor, V,{c_arg} end, np.int64(instr.shape[0]))
    return ran


@numba.njit(inline="always", error_model="numpy", nogil=True)
def program_prepare{suffix}(code, G, C, j0, j1, o, ran):
    instr, pool, divisor, live, out_slots, compiled, every, start, end, delta, repeats, \
        tb, first_slot, last_slot = code
    zero, one = np.int64(0), np.int64(1)
    if not compiled[o]:
        return zero, zero                                   # (the seed zeroes all of G)
    clear{suffix}(G, delta, zero, min(ran, repeats - 2), zero, tb, zero{points})  # (a settled
    clear{suffix}(G, delta, repeats - 2, repeats, zero, tb, one{points})  # loop's copies: swept
    zero_left_out(G, ran, repeats - 2, delta, {base}, EARLIER, {c})  # at the last two places)
    return first_slot, last_slot


@numba.njit(inline="always", error_model="numpy", nogil=True)
def program_reverse{suffix}(code, V, G, C, j0, j1, o, ran):
    instr, pool, divisor, live, out_slots, compiled, every, start, end, delta, repeats, \
        tb, first_slot, last_slot = code
    zero, one, count = np.int64(0), np.int64(1), np.int64(instr.shape[0])
    {reverse_range}(instr, pool, divisor, live[o], V, G,{c_arg} end, count)
    if compiled[o] and reaches_left_out(G, ran, repeats - 2, delta, {base}, EARLIER, {c}):
        ran = forward{suffix}(V, delta, zero, repeats, zero, tb, zero{points})  # (settling.py:
        clear{suffix}(G, delta, zero, repeats, zero, tb, one{points})          # all run)
        seed_points(G, {c}, zero, {c}, first_slot, last_slot, out_slots[o])
        {reverse_range}(instr, pool, divisor, live[o], V, G,{c_arg} end, count)
    if compiled[o]:
        reverse{suffix}(V, G, delta, zero, repeats, zero, tb, ran{points})
    else:
        {reverse_range}(instr, pool, divisor, live[o], V, G,{c_arg} start, end)
    {reverse_range}(instr, pool, divisor, live[o], V, G,{c_arg} zero, start)
    return ran


_, drive_chunks{suffix} = points_driver(program_forward{suffix}, program_prepare{suffix},
                                       program_reverse{suffix}, __name__, "{suffix}",
                                       inline=True)


@numba.njit(cache=True, error_model="numpy", nogil=True)
def run{suffix}(instr, pool, divisor, live, const_slots, const_vals, in_slots, out_slots, X,
         values, jac, jacobian, compiled, chunk0, chunks, step, V, G, start, end, delta,
         repeats, tb, first_slot, last_slot{points}):
    """Values (and, with ``jacobian``, Jacobian rows) at the chunks chunk0, chunk0 +
    step, ... < chunks of X's points{of_c}, by the one driver over this body's hooks.
    One call for a thread's points: no Python between them."""
    one = np.int64(1)
    every = True
    for o in range(compiled.size):
        every = every and compiled[o]
    code = (instr, pool, divisor, live, out_slots, compiled, every, start, end, delta,
            repeats, tb, first_slot, last_slot)
    drive_chunks{suffix}(code, const_slots, const_vals, in_slots, out_slots, X, values, jac,
                jacobian, chunk0, chunks, step, {c}, V, G)
'''


_REVERSE = """for t in range(repeats - 1, first - 1, -1):
    o = t * delta - shift
    Vo, Go = V[o{times_c}:], G[o{times_c}:]
    {again}
    {reverse}"""

# A loop that settles (kernels/settling.py): the forward stops at the repetition that
# wrote the state it read; the reverse sweeps that repetition's values at the last
# repetition's place once per repetition left out (``copies``), until a pass changes
# nothing, then the repetitions that ran.
_SETTLE = """if settle != 0 and shift == 0 and first < t < repeats - 1 and settled(Vo, STATE, delta, {c}):
    copy_settled(V, t, repeats - 1, delta, {base}, STATE, {c})
    fill_left_out(V, t, repeats - 1, delta, {base}, EARLIER, {c})
    return t + 1"""

_TANGENT_SETTLE = """if shift == 0 and repeats == {all} and first < t < repeats - 1 and \\
        settled(Vo, STATE, delta, {c}) and settled(Do, STATE, delta, K * {c}):
    copy_settled(V, t, repeats - 1, delta, {base}, STATE, {c})
    copy_settled(D, t, repeats - 1, delta, {base}, STATE, K * {c})
    fill_left_out(V, t, repeats - 1, delta, {base}, EARLIER, {c})
    fill_left_out(D, t, repeats - 1, delta, {base}, EARLIER, K * {c})
    return t + 1"""

_SETTLING_REVERSE = """A = np.empty(max(1, (ASTATE.size + FIXED.size) * {c}))
at = np.empty(2, np.int64)      # (the repetition swept next, and the copies left: not
at[0] = repeats - 1             # variables, which numba's SSA would trace back through
at[1] = repeats - ran if ran < repeats - 1 else 0     # the whole body)
while at[0] >= first:
    t = at[0]
    o = t * delta - shift
    Vo, Go = V[o{times_c}:], G[o{times_c}:]
    if at[1] > 0:
        keep_adjoints(A, Go, ASTATE, G, FIXED, {c})
    {again}
    {reverse}
    if at[1] == 0:
        at[0] -= 1
    elif another_pass(at, A, Go, G, STATE, ASTATE, FIXED, ASSIGNED, delta, shift, ran, {c}):
        {clear}
        move_adjoints(G, STATE, (t - 1) * delta - shift, t * delta - shift, {c})"""


def _settling(body, points, clear, again, rev):
    """The forward's and forward mode's lines stopping where the state (and its
    tangents) settle ("pass" where the loop never settles), and the reverse's loop over
    the repetitions (see above)."""
    fill = {"{c}": "C" if points else "1", "{times_c}": " * C" if points else "",
            "{base}": str(body.base), "{all}": str(body.repeats),
            "{again}": "\n    ".join(again) or "pass", "{reverse}": "\n    ".join(rev) or "pass",
            "{clear}": "\n        ".join(clear[0] + clear[1]) or "pass"}

    def filled(template):
        for key, value in fill.items():
            template = template.replace(key, value)
        return template.replace("\n", "\n    ")
    if not body.settles:
        return "pass", "pass", filled(_REVERSE)
    body.array("STATE", body.state)
    body.array("ASTATE", body.active_state)
    body.array("FIXED", body.fixed)
    body.array("ASSIGNED", sorted(set(body.state) & body.assigned))
    return filled(_SETTLE).replace("\n", "\n    "), \
        filled(_TANGENT_SETTLE).replace("\n", "\n    "), filled(_SETTLING_REVERSE)


def _functions(body, points):
    fwd, again, rev, clear, hoisted, buffered = _body(body, points)
    if not points:                  # (a chunk's adds are loops over its points within)
        rev, inverses = permuted_order(rev, body.arrays)
        for name, values in inverses.items():
            body.array(name, values)
        rev = cell_order(rev)
    tangent, tangent_hoisted = _tangent_body(body, points)
    settle, tangent_settle, reverse_loop = _settling(body, points, clear, again, rev)
    join = "\n        ".join
    hoisted = "\n    ".join(hoisted) or "pass"
    return _FUNCTIONS.replace("{settle}", settle).replace(
        "{forward_range}", "forward_range_points" if points else "forward_range").replace(
        "{reverse_range}", "reverse_range_points" if points else "reverse_range").replace(
        "{c_arg}", " C," if points else "").replace("{c}", "C" if points else "one").replace(
        "{of_c}", " (C points each; a short last chunk repeats its last point)" if points
        else " (one point each)").replace(
        "{tangent_settle}", tangent_settle).replace("{reverse_loop}", reverse_loop).replace(
        "{tangent_hoisted}", "\n    ".join(tangent_hoisted) or "pass") \
        .replace("{tangent}", join(tangent)).replace("{suffix}", "_points" if points else "").replace(
        "{points}", ", C" if points else "").replace("{times_c}", " * C" if points else "") \
        .replace("{base}", str(body.base)) \
        .replace("{size}", str(max(body.size, 1))).replace("{forward}", join(fwd)).replace(
            "{again}", join(again) or "pass").replace("{reverse}", join(rev) or "pass") \
        .replace("{clear}", join(clear[0]) or "pass").replace(
            "{clear_every}", "\n            ".join(clear[1]) or "pass") \
        .replace("{hoisted}", hoisted) \
        .replace("{buffered}", str(max(buffered, 1)))


_lock = threading.Lock()


def _in_forked_child():
    """A lock another thread of the parent held at a fork stays held in the child: it
    gets a new one."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)

KERNEL_NAMES = ("forward", "reverse", "clear", "tangent", "run")
_ARGUMENTS = {"forward": "V i i i i i i", "reverse": "V V i i i i i i", "clear": "V i i i i i i",
              "tangent": "V V i i i i i i",
              "run": "I2 I1 F1 U2 I1 F1 I1 I1 X2 X2 X3 b B1 i i i V V i i i i i i i"}
# what a call needs, compiled together: a gradient at one point, or at a chunk of points;
# forward mode at one point, or at a chunk
GROUPS = {"reverse": ("forward", "reverse", "clear", "run"),
          "reverse_points": ("forward_points", "reverse_points", "clear_points", "run_points"),
          "tangent": ("tangent",), "tangent_points": ("tangent_points",)}


def signatures(dtype):
    """The argument types of the body's kernels (``forward``, ..., ``forward_points``,
    ...: one point, then C points) for values of ``dtype``: a tuple of numba types, as a
    call's arguments give them (numba's disk cache is keyed on what ``compile`` gets:
    a string there would be another key)."""
    x = numba.from_dtype(np.dtype(dtype))
    types = {"V": x[::1], "i": numba.int64, "b": numba.boolean, "X2": x[:, ::1],
             "X3": x[:, :, ::1], "I1": numba.int64[::1], "I2": numba.int64[:, ::1],
             "F1": numba.float64[::1], "U2": numba.uint8[:, ::1], "B1": numba.boolean[::1]}
    sigs = {}
    for name in KERNEL_NAMES:
        args = tuple(types[a] for a in _ARGUMENTS[name].split())
        sigs[name] = args
        sigs[name + "_points"] = args + (numba.int64,)
    return sigs


def loop_source(instr, loop, constants, read_after, table=None, pool=None, divisor=None,
                unswept=(), active=None, constant_values=None):
    """(key, source): the numba module of the body of ``loop`` (find_loop's), keyed by
    its hash. Its functions are (forward, reverse, clear, tangent) for one point and the
    same for a chunk of C points (slot-major; each takes C last): forward(V, delta,
    first, repeats, shift, tb, settle) runs repetitions first .. repeats - 1 and returns
    how many ran (with ``settle``, fewer where the state settled: kernels/settling.py),
    reverse(V, G, delta, first, repeats, shift, tb, ran) the same backwards (G the
    adjoints; ``ran`` the forward's count), clear zeroes the adjoints of the slots the
    loop keeps, tangent carries K lanes. ``constants``: slots whose adjoints nobody reads;
    ``read_after``: the slots read after the loop; ``table``: (first slot, width,
    entries) of the per-repetition constants (constant_table), slots of V; ``pool``
    and ``divisor``: the program's, for its gathers and scatters; ``unswept``: the
    first repetition's instructions that no reverse sweep reaches, left out of it;
    ``active``: per slot, whether its value depends on the inputs, marked up to the
    loop (None: the loop never settles); ``constant_values``: the values of
    ``constants`` (the powers' exponents among them are written as literals)."""
    start, period, repeats, delta = loop
    body = _Body(instr, start, period, repeats, delta, set(int(c) for c in constants),
                 set(int(r) for r in read_after), table, pool, divisor, unswept, active,
                 None if constant_values is None else
                 dict(zip((int(c) for c in constants), (float(v) for v in constant_values))))
    functions = hoisted_reads(affine_loops(_functions(body, False) + _functions(body, True),
                                           body.arrays))
    arrays = "".join(f"{name} = np.array({values}, np.int64)\n"
                     for name, values in sorted(body.arrays.items())
                     if re.search(rf"\b{name}\b", functions))
    source = _HEADER + arrays + functions
    return hashlib.sha256(source.encode()).hexdigest()[:24], source


def _path(key, source):
    return generated_file("loops", f"loop_{key}.py", source)


def _import(key, path):
    return import_generated(f"autotape_loop_{key}", path)


def _mark(path, dtype, group):
    return f"{path[:-3]}.{np.dtype(dtype).name}.{group}.compiled"


def compile_file(key, path, dtype, *groups):
    """Compile the kernels of ``groups`` for ``dtype`` into numba's disk cache, and the
    interpreter's kernels that run around them, each group then marked as compiled
    (what the helper process runs)."""
    module, sigs = _import(key, path), signatures(dtype)
    for group in groups:
        for name in GROUPS[group]:
            getattr(module, name).compile(sigs[name])
        compile_around(np.dtype(dtype), group)
        with open(_mark(path, dtype, group), "w") as f:
            f.write("compiled\n")


def compile_around(dtype, group):
    """Compile (or load) the interpreter's kernels that program.py runs around a
    compiled body for ``group``, by calling each on nothing, with the argument types of
    program.py's calls (tests/test_background.py checks that they are the same)."""
    code = (np.zeros((0, WIDTH), np.int64), np.zeros(0, np.int64), np.zeros(0))
    V, G = np.zeros(1, dtype), np.zeros(1, dtype)
    live = np.zeros((1, 0), np.uint8)[0]
    one = not group.endswith("_points")
    compile_steps(dtype)
    if group.startswith("reverse"):
        if one:
            forward_range(*code, V, 0, 0)
            reverse_range(*code, live, V, G, 0, 0)
        else:
            forward_range_points(*code, V, 1, 0, 0)
            reverse_range_points(*code, live, V, G, 1, 0, 0)
    elif one:
        forward_range(*code, V, 0, 0)
        tangent_range(*code, V, G, 1, 0, 0)
    else:
        forward_range_points(*code, V, 1, 0, 0)
        tangent_range_points(*code, V, G, 1, 1, 0, 0)


_HELPER = "from autotape.kernels.loops import compile_file\ncompile_file(*sys.argv[1:])\n"


def loop_kernels(key, source, dtype, group, wait=True, what="a loop"):
    """The kernels of a body (loop_source's): ((forward, reverse, clear, tangent, run),
    (the same for C points)), once those of ``group`` (GROUPS) are ready, compiled once per
    distinct body and kept on disk. On disk already, they load at once. Otherwise, with
    ``wait=False`` and background compiling on (kernels/background.py), a helper
    process compiles them while the caller goes on without them (None) until a later
    call finds them ready. ``wait=True``: now (numba compiles each at its first call),
    or once the helper at it is done. ``wait="every"``: every kernel of the group
    compiled or loaded now, so that no later call waits."""
    name = np.dtype(dtype).name
    with _lock:
        path = _path(key, source)
        job = f"loop {key} {name} {group}"
        state = background.state(job)
        if (key, name, group) not in _ready and background.enabled() and \
                not os.path.exists(_mark(path, dtype, group)) and \
                (state is not None or wait is not True):
            if not background.beside(job, state, _HELPER, (key, path, name, group), what,
                                     wait, f"loop {key}", cache_dir()):
                return None
        module = _import(key, path)
        _ready.add((key, name, group))
        kernels = (tuple(getattr(module, k) for k in KERNEL_NAMES),
                   tuple(getattr(module, k + "_points") for k in KERNEL_NAMES))
    if wait == "every":
        sigs = signatures(dtype)
        for k in GROUPS[group]:
            getattr(module, k).compile(sigs[k])
    return kernels


_ready = set()           # (key, dtype, group) loaded in this process
