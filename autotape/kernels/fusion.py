"""Element loops fused: a run of a loop body's elementwise instructions over the same
cells written as one loop over the cells, each value a scalar, in the forward and in
the reverse sweep (kernels/loops.py writes the code, one loop per instruction, and
hands the runs it finds here).

Unfused, every instruction stores its cells and the next one loads them again, and the
reverse sweep adds each adjoint into memory for the one before to read back: a Burgers
step's body was ~20 loops over 128 cells, each a few loads and stores an element.
Fused, a value another instruction of the run reads at the same cell is a local
(``z{q}``), stored only where something outside the run reads it, and an adjoint that
stays in the run is a local too (``a{q}``).

The bits stay the interpreter's: values are rounded to the storage dtype where they
would have been stored, and each adjoint element receives its terms in the order the
unfused sweep adds them:

- a run ends where an instruction would read an output of the run at another cell
  (``u[k + 1]``, which the loop has not computed yet);
- a broadcast operand's terms (every cell adds to it) go to a float64 buffer and are
  summed in lanes after the loop (kernels/program.py, LANES); where two instructions
  of the run add into the adjoint of one outside array and the loop would deliver an
  earlier one's term first (a stencil reading ``u`` at a larger offset first), the
  earlier ones' terms go to that buffer too and are added after the loop, one
  instruction after another (``deferred``); a WHERE's terms (one branch writes
  nothing) end the run instead;
- a gather from V (a roll of the last step's grid: loops.py's plain_gather) is a
  member whose element reads ``Vo[S[k]]``; its adjoint terms, which may land anywhere
  in its sources, are always deferred. The reverse sweep loads it before the run's
  loop (an indexed load among the loop's stores keeps LLVM from vectorizing it).
"""
import re

from ..opcodes import WHERE
from .instruction_format import COPY, GATHER, I_N, I_OP, I_OUT, OPERAND_COLUMNS, SCATTER_ADD, \
    pooled, stride
from ..tuning import LANES_MIN, MIN_RUN

ROUNDED = "V.dtype.type"    # a scalar as the storage holds it (float32 values round)
POOL = "pool"               # a gather's sources, in _adds' terms (not a column)


def _reads(body, q):
    """Instruction q's operands: (column, slot, stride, moved) for each present one that
    is not a per-repetition constant (those are read from the table, no adjoint)."""
    instr, out = body.instr, []
    for col in OPERAND_COLUMNS:
        c = int(instr[q, col])
        if c < 0 or (q, col) in body.table[2]:
            continue
        strided = int(stride(instr, q, col))
        out.append((col, c, strided, int(instr[q + body.period, col]) != c))
    return out


def fusable(body, q):
    """Whether instruction q may be a member of a run: elementwise, WHERE, COPY or a
    gather from V (loops.py's plain_gather), over more than one cell."""
    op, n = int(body.instr[q, I_OP]), int(body.instr[q, I_N])
    return n > 1 and op != SCATTER_ADD and op >= COPY and \
        (op != GATHER or body.plain_gather(q))


def _adds(body, q, outs=()):
    """The operand elements whose adjoints in memory instruction q adds to, as (slot,
    length, stride, moved, column): all but the run's own outputs ``outs`` (locals). A
    gather's sources, anywhere in their span, count as one broadcast operand (column
    POOL): its terms are always deferred."""
    if q in body.unswept:
        return []                               # (no reverse: adds nothing)
    if int(body.instr[q, I_OP]) == GATHER:
        if not body.plain_gather(q):
            return []
        index, kinds = body.sources(q)
        low = int(index.min())
        return [(low, int(index.max()) - low + 1, 0, bool(kinds[0] == 1), POOL)]
    n = int(body.instr[q, I_N])
    return [(c, n if stride else 1, stride, moved, col)
            for col, c, stride, moved in _reads(body, q)
            if body.gets_adjoint(q, col) and not (moved and stride == 1 and c in outs)]


def _overlap(a, b):
    return a[3] == b[3] and a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _clash(later, earlier):
    """Whether adjoint term ``later`` (of a later instruction than ``earlier``'s) would
    reach a shared element after it in one element loop: a broadcast one shares an
    element with any other; a stencil's at a smaller offset than the earlier one's."""
    return _overlap(later, earlier) and (later[2] == 0 or earlier[2] == 0 or
                                         later[0] < earlier[0])


def _touches(body, q, outs, n):
    """Whether instruction q reads any of the outputs starting at ``outs`` (n cells)."""
    if pooled(int(body.instr[q, I_OP])):
        return any(o <= e < o + n for e in body.moved_reads(q) for o in outs)
    m = int(body.instr[q, I_N])
    return any(moved and o < c + (m if stride else 1) and c < o + n
               for col, c, stride, moved in _reads(body, q) for o in outs)


def _liftable(body, q, start, before, reads):
    """Whether instruction q, amid the run that begins at instruction ``start``, may
    run before the run's loop (``fused_groups``' lifted ones): elementwise or a COPY,
    reading only what the repetitions before, the fixed slots, the table and the
    instructions before the run (or ``before`` it: lifted or hoisted) wrote, and read
    by none of those in between. A forcing term ``c * cos(w * t)`` between the two halves of an
    oscillator's step then no longer cuts its run in two (its forward 12 -> 8 us)."""
    op = int(body.instr[q, I_OP])
    if op != COPY and op < 0:
        return False
    out, n = int(body.instr[q, I_OUT]), int(body.instr[q, I_N])
    mine = reads(q)
    for b in range(start, q):
        if b in before:
            continue
        if pooled(int(body.instr[b, I_OP])) and int(body.instr[b, I_OP]) != GATHER:
            return False                        # (a scatter: it may add anywhere)
        o, m = int(body.instr[b, I_OUT]), int(body.instr[b, I_N])
        if any(o <= e < o + m for e in mine) or any(out <= e < out + n for e in reads(b)):
            return False
    return True


def fused_groups(body, order, hoisted):
    """Runs of the body's instructions ``order`` (ascending) that fuse (see the module's
    rules), as (members, skipped, lifted): two or more members, and the instructions
    amid them that are not (``hoisted`` ones, run before the loop over repetitions;
    ``lifted`` ones, which members may read, run before the run's loop (``_liftable``);
    and others that no later member reads and that read no member, run after the run's
    loop). Skipped ones' reverse runs where it did: lifted ones too."""
    groups, group, outs, adds, skipped = [], [], {}, [], []
    between, lifted = [], []                    # skipped since the run's last member
    skipped_adds = []                           # (the adjoint terms of those skipped)
    moved = {}

    def reads(q):
        if q not in moved:
            moved[q] = body.moved_reads(q)
        return moved[q]

    def close():
        if len(group) >= max(MIN_RUN, 2):
            groups.append((list(group), list(skipped), [b for b in lifted if b in skipped]))
    for q in order:
        n = int(body.instr[q, I_N])
        if group:
            size = int(body.instr[group[0], I_N])
            # every instruction skipped over since the run began runs after its
            # loop (but those lifted before it): a member may read none of them
            after = [b for b in skipped + between if b not in hoisted and b not in lifted]
            joins = q not in hoisted and n == size and fusable(body, q) and \
                not _touches(body, q, [int(body.instr[b, I_OUT]) for b in after],
                             max([int(body.instr[b, I_N]) for b in after] + [0]))
            if joins:
                for col, c, strided, moved_ in _reads(body, q):
                    length = n if strided else 1
                    inside = [m for m, o in outs.items()
                              if moved_ and o < c + length and c < o + n]
                    if inside and (strided != 1 or c != outs[inside[0]]):
                        joins = False           # (another cell of the run's own output)
                if pooled(int(body.instr[q, I_OP])) and \
                        _touches(body, q, list(outs.values()), size):
                    joins = False               # (a gather of the run's own output)
                for term in _adds(body, q, set(outs.values())):
                    for a, m in adds:           # (a WHERE's terms are never deferred:
                        if _overlap(term, a) and WHERE in (   # one branch writes nothing)
                                int(body.instr[q, I_OP]), int(body.instr[m, I_OP])):
                            joins = False
                    if int(body.instr[q, I_OP]) == WHERE and \
                            any(_overlap(term, a) for a in skipped_adds):
                        joins = False           # (and a skipped one's would defer them)
            if joins:
                skipped += between
                between = []
                group.append(q)
                outs[q] = int(body.instr[q, I_OUT])
                adds.extend((a, q) for a in _adds(body, q, set(outs.values())))
                continue
            # (skipped, its reverse runs amid the members' deferred terms: never with
            # a WHERE member's, which the run cannot defer)
            if (q in hoisted or (not pooled(int(body.instr[q, I_OP])) and
                                 not _touches(body, q, list(outs.values()), size))) and \
                    not any(_overlap(t, a) and int(body.instr[m, I_OP]) == WHERE
                            for t in _adds(body, q) for a, m in adds):
                between.append(q)               # (a later member may still come)
                skipped_adds.extend(_adds(body, q))
                if q not in hoisted and _liftable(body, q, group[0], set(lifted) | hoisted,
                                                  reads):
                    lifted.append(q)
                continue
            close()
            group, outs, adds, skipped, between, lifted = [], {}, [], [], [], []
            skipped_adds = []
        if q not in hoisted and fusable(body, q):
            group, outs, adds = [q], {q: int(body.instr[q, I_OUT])}, []
            adds.extend((a, q) for a in _adds(body, q))
    close()
    return groups


def deferred(body, group, skipped):
    """The run's adjoint terms, as (member, column), that its element loop writes to a
    buffer and adds after the loop instead, one member after another (latest first):
    a broadcast operand's (summed in lanes after the loop, as every runner sums them:
    kernels/program.py, LANES; a WHERE's in loops.py's _broadcast_lanes), those that
    would otherwise reach an element before a later member's term (a stencil), and then
    every earlier member's terms that share an element with a deferred one (they must
    come after it); and those that share an element with a skipped instruction's
    (whose reverse runs amid the members' deferred terms, in the sweep's order)."""
    outs = {int(body.instr[m, I_OUT]) for m in group}
    looped, later, chosen = [], [], set()
    for s in skipped:
        later += _adds(body, s)
    for m in reversed(group):                   # (the sweep's order)
        terms = _adds(body, m, outs)
        lanes = int(body.instr[m, I_OP]) != WHERE and int(body.instr[m, I_N]) >= LANES_MIN
        mine = {t[4] for t in terms
                if any(_overlap(t, d) for d in later) or any(_clash(l, t) for l in looped)
                or (t[2] == 0 and lanes) or t[4] == POOL}   # (a broadcast sum, a
                                                                # gather's: after the loop)
        grown = True
        while grown:                            # (one member's terms on an element stay
            grown = False                       # in its own order: deferred together)
            for t in terms:
                if t[4] not in mine and any(_overlap(t, u) for u in terms if u[4] in mine):
                    mine.add(t[4])
                    grown = True
        for t in terms:
            if t[4] in mine:
                later.append(t)
                chosen.add((m, t[4]))
            else:
                looped.append(t)
    return chosen


def _name_pattern(ref):
    """A regex finding the array reference ``ref`` and not a longer name ending in it
    (``T[3 + k]`` inside ``GT[3 + k]``)."""
    return re.compile(r"(?<![A-Za-z0-9_])" + re.escape(ref))


def _statement(line):
    """(target, expression) of a generated ``target = expression  # comment`` line."""
    code = line.split("  #", 1)[0]
    target, expr = code.split(" = ", 1)
    return target, expr


def fused_forward(body, group, forward, computed, stored, points, loaded=()):
    """The statements of one element of the run ``group``: each instruction of
    ``computed`` (in order) into ``z{q}`` from its forward line (``forward[q]``, the
    unfused one), reading the earlier ones' locals, and stored where ``stored`` says;
    those of ``loaded`` read from where their forward line stored them."""
    scalars = {}
    lines = []
    for q in group:
        if q not in computed:
            continue
        target, expr = _statement(forward[q][0])
        if q in loaded:
            expr = target
        for m, name in scalars.items():
            expr = _name_pattern(body.ref(m, I_OUT, " + k", False, points)).sub(name, expr)
        lines.append(f"z{q} = {ROUNDED}({expr})")
        if q in stored:
            lines.append(f"{target} = z{q}")
        scalars[q] = f"z{q}"
    return lines


# (a target's index may hold one more: a gather's source ``Go[S12[k]]``)
_WRITE = re.compile(r"^(\s*)([A-Za-z_]\w*\[(?:[^\[\]]|\[[^\]]*\])*\]) (\+=|=) (.*)$")


def fused_reverse(body, group, values, backward, recomputed, later, scratch, points,
                  starts=None):
    """(statements of one element of the run's reverse sweep, the statements adding its
    deferred terms after the loop, as (member, lines), latest first): ``values`` (the statements
    recomputing the run's values ``recomputed`` as locals), then the instructions'
    reverse lines ``backward`` ((member, lines), latest first, the assignments already
    chosen), reading those locals; the adjoints of the run's own outputs become locals
    ``a{q}``, started from memory (what later instructions added) unless the first term
    assigns; the terms ``later`` (deferred's) go to the float64 buffer W from element
    ``scratch[0]`` on (moved past them). ``starts``: {member: the expression its
    adjoint starts from instead of memory} (a summed member's: its sum's adjoint)."""
    starts = starts or {}
    refs = {q: body.ref(q, I_OUT, " + k", True, points) for q in group}
    patterns = {q: _name_pattern(ref) for q, ref in refs.items()}
    own = {q: _name_pattern(body.ref(q, I_OUT, " + k", False, points)) for q in recomputed}
    n = int(body.instr[group[0], I_N])
    lines, started, flushes = [], set(), []

    def start(q):
        if q not in started:
            started.add(q)
            lines.insert(0, f"a{q} = {starts.get(q, refs[q])}")
    for m, member_lines in backward:
        targets = {body.ref(m, col, " + k" if stride else "", True, points)
                   for col, c, stride, moved in _reads(body, m) if (m, col) in later}
        if (m, POOL) in later:                  # (a gather's: its one line's target)
            targets.add(_WRITE.match(member_lines[0]).group(2))
        flush = []
        for line in member_lines:
            for q, pattern in own.items():
                line = pattern.sub(f"z{q}", line)
            found = _WRITE.match(line.split("  #", 1)[0])
            if not found:
                for q, pattern in patterns.items():
                    if pattern.search(line):
                        start(q)
                        line = pattern.sub(f"a{q}", line)
                lines.append(line)
                continue
            indent, target, how, expr = found.groups()
            for q, pattern in patterns.items():
                if pattern.search(expr):
                    start(q)
                    expr = pattern.sub(f"a{q}", expr)
            owner = next((q for q, ref in refs.items() if ref == target), None)
            if owner is not None and how == "=":    # (the first term: see
                started.add(owner)                  # _first_writes_assign)
                lines.append(f"{indent}a{owner} = {ROUNDED}({expr})")
            elif owner is not None:
                start(owner)
                lines.append(f"{indent}a{owner} = {ROUNDED}(a{owner} + ({expr}))")
            elif target in targets:             # (a first write that assigns, "=",
                w = f"({scratch[0]} + k) * C + j" if points else f"{scratch[0]} + k"
                scratch[0] += n                 # stays first: every later term on its
                lines.append(f"{indent}W[{w}] = {expr}")     # elements is deferred too,
                flush.append(f"{target} {how} W[{w}]")      # flushed in the sweep's order)
            else:
                lines.append(f"{indent}{target} {how} {expr}")
        if flush:
            flushes.append((m, flush))
    return list(values) + lines, flushes
