"""The whole lean program written out as code: every slot a local variable, the
program's loop a loop; for a CUDA GPU (one thread per point) and for the CPU (a numba
function looping over a run of points).

The CPU's instruction interpreter (kernels/program.py) re-reads every instruction and
keeps every slot in memory; its loop bodies (kernels/loops.py) are code, but one loop
per instruction over slot arrays. Here the program is straight code instead:

- the instructions before the loop (the prologue) and after it (the epilogue) as
  straight-line statements, ``v{slot} = ...``;
- the loop body once, inside ``for t in range(repeats)``: its slots are ``b{j}`` (j the
  slot's place in the repetition), the values a repetition hands the next are carried
  as ``s{j}``, the per-repetition constants (a forcing term's ``t = i * h``) read from
  the table ``tab[t, k]``, constants are literals;
- the reverse sweep per point: the forward pass stores the carried state every
  ``stride`` repetitions (``CK``); the sweep steps back through the repetitions, each
  one's values recomputed from its state. On the CPU every state is kept (stride 1:
  memory is cheap there, recomputing is not), and so on the GPU up to KEEP_ALL_BYTES a
  point; past that every ~sqrt(repeats)-th, and the sweep re-runs each segment from
  its checkpoint keeping the segment's states (``SG``), so a point needs
  ``(segments + stride) * carried`` doubles: memory grows with the state and
  sqrt(steps), not with the program;
- forward mode with ``L`` tangent lanes per value, all locals (``d{name}_{l}``).

The op math is the op table's (kernels/elementwise.py: ``unary_value``, ``times``,
``tangent_times``...), called with the opcode a literal, so each call folds to one
op's code; the arithmetic is the interpreter's, in the same order: on the CPU the
answers are the interpreter's bit for bit, on a GPU up to its libm (a few ulps in sin,
exp...), except a zero's sign: an adjoint's first term assigns where the interpreter
adds it to 0.0 (``first_terms_assign``). Each output's reverse sweep visits only the instructions it reaches, as the
interpreter's live sets do (an unreached one would multiply its zero adjoint by an inf
partial into nan).

``plan(lean)`` says whether a program can be written so (``Unsupported`` says why not:
a user's numba op, a body reading two repetitions back, code too large to compile in
reasonable time or to fit a thread's registers); the interpreter (and the loop bodies)
then run it. The modules are written to the kernel cache (kernels/cache.py: its folder
changes with the op math) and compiled by numba, cached on disk: CUDA modules at their
first launch, CPU modules beside the calls (``cpu_module``, kernels/background.py).
"""
import hashlib
import math
import os
import re
import sys
import threading

import numba
import numpy as np

from .kernels import background
from .kernels.cache import cache_dir, generated_file, import_generated
from .kernels.elementwise import passes_nothing
from .kernels.instruction_format import (COPY, GATHER, I_N, I_OP, I_OUT, KIND_NAMES,
                                         OPERAND_COLUMNS, SCATTER_ADD, operand_columns, pool_reads, stride)
from .kernels.loops import RECOMPUTED, binary_adjoints
from .kernels.program import lane_tree, live_sets
from .opcodes import ADD, BINARY_LAST, DIV, MUL, SUB, UNARY_LAST, opcode_name
from .tuning import (KEEP_ALL_BYTES, LANES, LANES_MIN, MAX_BODY, MAX_CARRIED, MAX_LINES,
                     MAX_STRAIGHT, OWN_SCRATCH_MAX)



class Unsupported(Exception):
    """Why a lean program is not written as a CUDA kernel (gpu.py then interprets)."""


def _literal(x):
    x = float(x)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INF" if x > 0 else "-INF"
    return repr(x)


class Plan:
    """Where each slot of a lean program lives in the kernel, and the kernel's size.

    ``loop`` is the program's (start, period, repeats, delta) or None; ``carried`` maps
    a body slot j whose value the next repetition reads to the slot repetition 0 reads
    instead (the prologue's); ``live_out`` the body slots read after the loop (of the
    last repetition); ``stride`` the checkpoint spacing in repetitions."""

    def __init__(self, lean):
        self._kept = None
        self._scratch = {}                    # target -> scratch(target), asked per call
        if lean.user_calls is not None:
            raise Unsupported("it calls numba-compiled custom ops (CPU code)")
        self.lean = lean
        instr = lean.instr
        self.instr, self.pool, self.divisor = instr, lean.pool, lean.divisor
        self.loop = lean.loop
        table = lean.loop_table
        count = instr.shape[0]
        if table is not None:
            first_table, width, self.entries = table
            R = lean.loop[2]
            values = lean.const_vals[lean.const_slots >= first_table]
            self.table = values.reshape(R, width)
            plain = lean.const_slots < first_table
            self.const = dict(zip(lean.const_slots[plain].tolist(),
                                  lean.const_vals[plain].tolist()))
        else:
            self.entries, self.table = {}, np.zeros((1, 1))
            self.const = dict(zip(lean.const_slots.tolist(), lean.const_vals.tolist()))
        if self.loop is not None:
            start, period, repeats, delta = self.loop
            self.first, self.end = lean.loop_slots   # (program.py's _loop_slots)
            self.body = range(start, start + period)
            self.outside = list(range(start)) + list(range(start + period * repeats, count))
            self.stride = max(1, math.isqrt(repeats - 1) + 1)
            self.segments = -(-repeats // self.stride)
        else:
            self.first = self.end = -1
            self.body, self.outside = range(0), list(range(count))
            self.stride = self.segments = 0
        straight = sum(int(instr[q, I_N]) for q in self.outside)
        if straight > MAX_STRAIGHT:
            raise Unsupported(f"{straight} element operations outside a repeating loop "
                              f"(more than {MAX_STRAIGHT} unroll too slowly)")
        body = sum(int(instr[q, I_N]) for q in self.body)
        if body > MAX_BODY:
            raise Unsupported(f"its loop body has {body} element operations (more than "
                              f"{MAX_BODY} do not fit a thread's registers)")
        self.carried, self.live_out = {}, set()
        self.written = set()                    # body slots written so far (in order)
        self.checked = False
        self.inputs = {int(s): e for e, s in enumerate(lean.in_slots)}
        self._check()

    # -- where a slot's value is ------------------------------------------------------

    def operand(self, q, slot, moved, in_body):
        """The value (an expression) and its name (None for a constant: no tangent, no
        adjoint) of ``slot`` as instruction q reads it."""
        if slot in self.const and not (in_body and moved):
            return _literal(self.const[slot]), None
        if in_body and moved:
            rel = slot - self.first
            if 0 <= rel < self.loop[3]:
                if not self.checked and rel not in self.written:
                    raise Unsupported("a loop body reads a slot before writing it")
                return f"b{rel}", f"b{rel}"
            j = rel + self.loop[3]
            if not 0 <= j < self.loop[3] or j not in self.body_writes:
                raise Unsupported("a loop body reads values from two repetitions back")
            if j in self.carried and self.carried[j] != slot:
                raise Unsupported("a carried value starts from two different slots")
            self.carried[j] = slot
            return f"s{j}", f"s{j}"
        # (a slot in the loop's range that the body never writes is not the loop's: the
        # repetitions' windows can have gaps, such as a per-repetition constant's slot,
        # now a table entry)
        if self.first <= slot < self.end and \
                (slot - self.first) % self.loop[3] in self.body_writes:
            if in_body or (slot - self.first) // self.loop[3] != self.loop[2] - 1:
                raise Unsupported("a value of the loop other than its last repetition's "
                                  "is read outside it")
            j = (slot - self.first) % self.loop[3]
            self.live_out.add(j)
            return f"o{j}", f"o{j}"
        return f"v{slot}", f"v{slot}"

    def elements(self, q, in_body):
        """Per element k of instruction q: (output name, [(value, name) per operand
        column used]) for elementwise kinds; GATHER: [source]; SCATTER_ADD: the pairs
        as (offset, source)."""
        instr = self.instr
        op, out, n = int(instr[q, I_OP]), int(instr[q, I_OUT]), int(instr[q, I_N])
        if op == GATHER or op == SCATTER_ADD:
            here, offsets = pool_reads(instr, self.pool, q)
            there = pool_reads(instr, self.pool, q + self.loop[1])[0] if in_body else here
            srcs = [self.operand(q, int(s), int(s) != int(u), in_body)
                    for s, u in zip(here, there)]
            outs = [self._out(out + k, in_body) for k in range(n)]
            if op == GATHER:
                return outs, [[s] for s in srcs]
            return outs, list(zip(offsets.tolist(), srcs))
        cols = OPERAND_COLUMNS[:operand_columns(op)]
        per = []
        for k in range(n):
            row = []
            for col in cols:
                c = int(instr[q, col])
                strided = int(stride(instr, q, col))
                entry = self.entries.get((q, col)) if in_body else None
                if entry is not None:
                    row.append((f"tab[t, {entry[0] + (k if entry[1] > 1 else 0)}]", None))
                    continue
                moved = in_body and int(instr[q + self.loop[1], col]) != c
                row.append(self.operand(q, c + k * strided, moved, in_body))
            per.append(row)
        return [self._out(out + k, in_body) for k in range(n)], per

    def _out(self, slot, in_body):
        if in_body:
            rel = slot - self.first
            self.written.add(rel)
            return f"b{rel}"
        return f"v{slot}"

    def _check(self):
        """Resolve every operand once, in program order (raising Unsupported), which
        fills ``carried`` and ``live_out``."""
        instr = self.instr
        op = instr[:, I_OP]
        if ((op < 0) & (op != COPY) & (op != GATHER) & (op != SCATTER_ADD)).any():
            raise Unsupported("it has instructions other than elementwise ops, gathers "
                              "and sums")
        self.body_writes = {int(instr[q, I_OUT]) - self.first + k
                            for q in self.body for k in range(int(instr[q, I_N]))}
        self.checked = False
        for q in self.before():
            self.elements(q, False)
        for q in self.body:
            self.elements(q, True)
        for q in self.after():
            self.elements(q, False)
        for s in self.lean.out_slots.tolist():
            self.operand(-1, int(s), False, False)
        self.checked = True
        if len(self.carried) > MAX_CARRIED:
            raise Unsupported(f"its loop carries {len(self.carried)} values from one "
                              f"repetition to the next (more than {MAX_CARRIED} do not fit "
                              f"a thread's registers)")

    def before(self):
        """The instructions before the loop (all of them without one)."""
        return [q for q in self.outside if self.loop is None or q < self.body.start]

    def after(self):
        return [q for q in self.outside if self.loop is not None and q >= self.body.start]

    def stride_for(self, target):
        """Repetitions between checkpoints: 1 (every repetition's state kept) on the CPU,
        and on the GPU while a point's states fit in KEEP_ALL_BYTES; past that
        ~sqrt(repeats)."""
        if target == "cuda" and self.loop is not None and \
                8 * len(self.carried) * self.loop[2] > KEEP_ALL_BYTES:
            return self.stride
        return 1

    def kept(self, target):
        """The body instructions whose values the reverse sweep reads back rather than
        recomputes (on the CPU, where memory is cheap: those not in RECOMPUTED)."""
        if target != "cpu" or self.loop is None:
            return []
        if self._kept is None:                  # (once: the code and its scratch agree)
            self._kept = [q for q in self.body if int(self.instr[q, I_OP]) >= 0 and
                          int(self.instr[q, I_OP]) not in RECOMPUTED]
        return self._kept

    def width(self, target):
        """Doubles a repetition keeps: its state (the carried values) and, on the CPU,
        the kept instructions' values."""
        return len(self.carried) + sum(int(self.instr[q, I_N]) for q in self.kept(target))

    def scratch(self, target):
        """(CK, SG): the doubles a point's reverse sweep keeps, checkpoints and a
        segment's states."""
        found = self._scratch.get(target)
        if found is None:
            found = self._scratch[target] = self._scratch_of(target)
        return found

    def _scratch_of(self, target):
        n = len(self.carried)
        if self.loop is None:
            return 0, 0
        stride = self.stride_for(target)
        if stride == 1:
            return self.width(target) * self.loop[2], 0
        return n * self.segments, n * stride

    def bytes_per_point(self, target="cuda"):
        """Memory a point needs beyond its inputs and results: the checkpointed states
        of the reverse sweep (the kernel's own accounting)."""
        return 8 * sum(self.scratch(target))


def supported(lean):
    """Whether codegen can plan the lean program: ``plan`` without an exception raised
    and caught at every call (~4 us of a model's call)."""
    kept = lean.codegen.get("plan") if lean.codegen else None
    if kept is None:
        try:
            plan(lean)
        except Unsupported:
            return False
        return True
    return not isinstance(kept, Unsupported)


def plan(lean):
    """The Plan of a lean program (kept with it, in ``lean.codegen``), or raise
    Unsupported."""
    if lean.codegen is None:
        lean.codegen = {}
    kept = lean.codegen.get("plan")
    if kept is None:
        try:
            kept = Plan(lean)
        except Unsupported as e:
            kept = e
        lean.codegen["plan"] = kept
    if isinstance(kept, Unsupported):
        raise Unsupported(*kept.args)   # (re-raising the kept one would grow its traceback
    return kept                         # by a frame a call: slower and slower)


# ---- the code ---------------------------------------------------------------------------

class _Code:
    """Lines of a kernel, indented."""

    def __init__(self, depth=1):
        self.lines, self.depth = [], depth

    def add(self, line):
        self.lines.append("    " * self.depth + line)

    def block(self, header):
        self.add(header)
        return _Indent(self)


class _Indent:
    def __init__(self, code):
        self.code = code

    def __enter__(self):
        self.code.depth += 1

    def __exit__(self, *exc):
        self.code.depth -= 1


def _forward(code, plan, q, in_body):
    """Instruction q's values."""
    op = int(plan.instr[q, I_OP])
    outs, per = plan.elements(q, in_body)
    name = opcode_name(op) if op >= 0 else KIND_NAMES[op]
    if op == SCATTER_ADD:
        for z in outs:
            code.add(f"{z} = 0.0")
        for f, (x, _) in per:
            code.add(f"{outs[f]} = {outs[f]} + {x}  # SCATTER_ADD")
        d = float(plan.divisor[q])
        if d != 1.0:
            for z in outs:
                code.add(f"{z} = {z} / {_literal(d)}")
        return
    for z, row in zip(outs, per):
        x = row[0][0]
        if op == COPY or op == GATHER:
            code.add(f"{z} = {x}  # {name}")
        elif op <= UNARY_LAST:
            code.add(f"{z} = unary_value({op}, {x})  # {name}")
        elif op <= BINARY_LAST:
            y = row[1][0]
            symbol = {ADD: "+", SUB: "-", MUL: "*", DIV: "/"}.get(op)
            code.add(f"{z} = " + (f"{x} {symbol} {y}" if symbol else
                                  f"binary_value({op}, {x}, {y})") + f"  # {name}")
        else:
            code.add(f"{z} = {x} if {row[2][0]} != 0 else {row[1][0]}  # WHERE")


def _reverse(code, plan, q, in_body, adjoint):
    """Instruction q's VJP: adds to its operands' adjoints (``adjoint(name)`` names a
    value's adjoint; constants have none)."""
    op = int(plan.instr[q, I_OP])
    outs, per = plan.elements(q, in_body)
    g = [adjoint(z) for z in outs]
    if op == SCATTER_ADD:
        d = float(plan.divisor[q])
        for f, (_, x) in per:
            if x is not None:
                code.add(f"{adjoint(x)} += {g[f]}" + (f" / {_literal(d)}" if d != 1.0 else ""))
        return
    if op != COPY and op != GATHER and passes_nothing(op):
        return
    # a broadcast operand's terms in LANES partial sums (kernels/program.py), added after
    lanes = {}
    if len(outs) >= LANES_MIN and op != COPY and op != GATHER:
        for t in range(min(operand_columns(op), 2)):
            name = per[0][t][1]
            if stride(plan.instr, q, OPERAND_COLUMNS[t]) == 0 and name is not None and adjoint(name):
                lanes[t] = adjoint(name)
                for j in range(LANES):
                    code.add(f"l{t}_{j} = 0.0")

    def to(t, k, name):
        return f"l{t}_{k % LANES}" if t in lanes else (adjoint(name) if name else None)
    for k, (z, gz, row) in enumerate(zip(outs, g, per)):
        (x, nx) = row[0]
        gx = to(0, k, nx)
        if op == COPY or op == GATHER:
            if gx:
                code.add(f"{gx} += {gz}")
        elif op <= UNARY_LAST:
            if gx:
                code.add(f"{gx} += times({op}, {gz}, unary_partial({op}, {x}, {z}))")
        elif op <= BINARY_LAST:
            (y, ny) = row[1]
            gy = to(1, k, ny)
            dx, dy = binary_adjoints(op, gz, x, y, z)
            if gx:
                code.add(f"{gx} += {dx}")
            if gy:
                code.add(f"{gy} += {dy}")
        else:
            (y, ny), (w, _) = row[1], row[2]
            gy = to(1, k, ny)
            if gx or gy:
                with code.block(f"if {w} != 0:"):
                    code.add(f"{gx} += {gz}" if gx else "pass")
                with code.block("else:"):
                    code.add(f"{gy} += {gz}" if gy else "pass")
    for t, target in lanes.items():
        code.add(f"{target} += " + lane_tree(f"l{t}_{j}" for j in range(LANES)))


def _tangent(code, plan, q, in_body, lanes):
    """Instruction q's tangents, ``lanes`` of them per element (after its values)."""
    op = int(plan.instr[q, I_OP])
    outs, per = plan.elements(q, in_body)

    def d(name, l):
        return f"d{name}_{l}" if name is not None else None
    if op == SCATTER_ADD:
        dd = float(plan.divisor[q])
        for l in range(lanes):
            for z in outs:
                code.add(f"d{z}_{l} = 0.0")
            for f, (_, x) in per:
                if x is not None:
                    code.add(f"d{outs[f]}_{l} = d{outs[f]}_{l} + {d(x, l)}")
            if dd != 1.0:
                for z in outs:
                    code.add(f"d{z}_{l} = d{z}_{l} / {_literal(dd)}")
        return
    for z, row in zip(outs, per):
        (x, nx) = row[0]
        if op == COPY or op == GATHER:
            for l in range(lanes):
                code.add(f"d{z}_{l} = {d(nx, l) or '0.0'}")
        elif passes_nothing(op):
            for l in range(lanes):
                code.add(f"d{z}_{l} = 0.0")
        elif op <= UNARY_LAST:
            if nx is None:
                for l in range(lanes):
                    code.add(f"d{z}_{l} = 0.0")
                continue
            code.add(f"px = unary_partial({op}, {x}, {z})")
            for l in range(lanes):
                code.add(f"d{z}_{l} = tangent_times({op}, {d(nx, l)}, px)")
        elif op <= BINARY_LAST:
            (y, ny) = row[1]
            if op == ADD or op == SUB:
                for l in range(lanes):
                    dx, dy = d(nx, l), d(ny, l)
                    expr = f"{dx} {'+' if op == ADD else '-'} {dy}" if dx and dy else \
                        dx if dx else (dy if op == ADD else f"-{dy}") if dy else "0.0"
                    code.add(f"d{z}_{l} = {expr}")
                continue
            if op == MUL:
                px, py = y, x
            else:
                code.add(f"px = binary_partial_x({op}, {x}, {y}, {z})")
                code.add(f"py = binary_partial_y({op}, {x}, {y}, {z})")
                px, py = "px", "py"
            for l in range(lanes):
                terms = ([f"tangent_times({op}, {d(nx, l)}, {px})"] if nx else []) + \
                    ([f"tangent_times({op}, {d(ny, l)}, {py})"] if ny else [])
                code.add(f"d{z}_{l} = " + (" + ".join(terms) or "0.0"))
        else:
            (y, ny), (w, _) = row[1], row[2]
            for l in range(lanes):
                code.add(f"d{z}_{l} = {d(nx, l) or '0.0'} if {w} != 0 else "
                         f"{d(ny, l) or '0.0'}")


def _body_forward(code, plan, lanes=0, again=False):
    """One repetition's values (and tangents), then the carried values handed on, and
    the values read after the loop kept (not ``again``: the reverse sweep re-running
    a segment leaves the last repetition's in place)."""
    for q in plan.body:
        _forward(code, plan, q, True)
        if lanes:
            _tangent(code, plan, q, True, lanes)
    for j in sorted(plan.live_out) if not again else ():
        code.add(f"o{j} = b{j}")
        for l in range(lanes):
            code.add(f"do{j}_{l} = db{j}_{l}")
    for j in sorted(plan.carried):
        code.add(f"s{j} = b{j}")
        for l in range(lanes):
            code.add(f"ds{j}_{l} = db{j}_{l}")


def _load_inputs(code, plan, lanes=0):
    for s, e in plan.inputs.items():
        code.add(f"v{s} = X[p, {e}]")
        for l in range(lanes):
            code.add(f"dv{s}_{l} = S[{l}, {e}]")


def _straight(code, plan, instructions, lanes=0):
    """Instructions outside the loop: their values (and tangents)."""
    for q in instructions:
        _forward(code, plan, q, False)
        if lanes:
            _tangent(code, plan, q, False, lanes)


def _prologue(code, plan, lanes=0):
    """The instructions before the loop, and the carried values' first ones."""
    _straight(code, plan, plan.before(), lanes)
    for j, slot in sorted(plan.carried.items()):
        value, name = plan.operand(-1, slot, False, False)
        code.add(f"s{j} = {value}")
        for l in range(lanes):
            code.add(f"ds{j}_{l} = d{name}_{l}" if name else f"ds{j}_{l} = 0.0")
    for j in sorted(plan.live_out):            # (defined before the loop for numba)
        code.add(f"o{j} = 0.0")
        for l in range(lanes):
            code.add(f"do{j}_{l} = 0.0")


def _outputs(plan):
    return [plan.operand(-1, int(s), False, False) for s in plan.lean.out_slots]


def _state(plan, array, index, width=None):
    """Lines storing or loading the carried values at checkpoint ``index`` (of
    ``width`` doubles: the carried values first)."""
    n = len(plan.carried) if width is None else width
    return [(f"{array}[(({index}) * {n} + {k}) * B + p]", f"s{j}")
            for k, j in enumerate(sorted(plan.carried))]


def _kept_values(plan, index, target):
    """Per kept instruction (Plan.kept), its values' places in CK at repetition
    ``index`` and their names: {q: [(place, name)]}."""
    width, k, out = plan.width(target), len(plan.carried), {}
    for q in plan.kept(target):
        names, _ = plan.elements(q, True)
        out[q] = [(f"CK[(({index}) * {width} + {k + e}) * B + p]", name)
                  for e, name in enumerate(names)]
        k += len(names)
    return out


def _reverse_for_output(code, plan, o, live, stride, target="cuda"):
    """Output o's reverse sweep (its Jacobian row), over the instructions it reaches;
    the loop's state checkpointed every ``stride`` repetitions (1: every one kept)."""
    start, period, repeats, delta = plan.loop or (0, 0, 0, 0)
    names = _adjoint_names(plan)
    for name in names:
        code.add(f"g{name} = 0.0")
    value, name = _outputs(plan)[o]
    if name is not None:
        code.add(f"g{name} += 1.0")

    def adjoint(name):
        return f"g{name}"
    for q in reversed(plan.after()):
        if live[q]:
            _reverse(code, plan, q, False, adjoint)
    if plan.loop is not None:
        marks = live[start:start + period * repeats].reshape(repeats, period)
        guards = {}
        for i in range(period):
            reps = np.nonzero(marks[:, i])[0]
            if reps.size == 0:
                guards[i] = False
            elif reps.size == repeats:
                guards[i] = True
            elif reps[-1] - reps[0] + 1 == reps.size:
                guards[i] = f"{int(reps[0])} <= t <= {int(reps[-1])}"
            else:
                raise Unsupported("a loop body whose instructions one output reaches in "
                                  "scattered repetitions")
        carried = sorted(plan.carried)
        handed = sorted(set(carried) | plan.live_out)
        for j in handed:                        # adjoints handed to the repetition
            code.add(f"ga{j} = go{j}" if j in plan.live_out else f"ga{j} = 0.0")

        def step_back(array, index):
            """Repetition t's reverse: its state loaded, its values recomputed, the
            adjoints it hands back."""
            kept = _kept_values(plan, index, target) if array == "CK" else {}
            for where, s in _state(plan, array, index, plan.width(target)
                                   if array == "CK" else None):
                code.add(f"{s} = {where}")
            for q in plan.body:
                if q in kept:                   # (read back, not recomputed)
                    for where, name in kept[q]:
                        code.add(f"{name} = {where}")
                else:
                    _forward(code, plan, q, True)
            for j in range(delta):
                code.add(f"gb{j} = ga{j}" if j in handed else f"gb{j} = 0.0")
            for j in carried:
                code.add(f"gs{j} = 0.0")
            for q in reversed(plan.body):
                guard = guards[q - start]
                if guard is False:
                    continue
                if guard is True:
                    _reverse(code, plan, q, True, adjoint)
                else:
                    with code.block(f"if {guard}:"):
                        _reverse(code, plan, q, True, adjoint)
            for j in handed:
                code.add(f"ga{j} = gs{j}" if j in plan.carried else f"ga{j} = 0.0")
        if stride == 1:                         # every state kept: no segment re-run
            with code.block(f"for t in range({repeats - 1}, -1, -1):"):
                step_back("CK", "t")
        else:
            with code.block(f"for seg in range({-(-repeats // stride) - 1}, -1, -1):"):
                code.add(f"t0 = seg * {stride}")
                code.add(f"t1 = min(t0 + {stride}, {repeats})")
                for where, s in _state(plan, "CK", "seg"):
                    code.add(f"{s} = {where}")
                with code.block("for t in range(t0, t1):"):
                    for where, s in _state(plan, "SG", "t - t0"):
                        code.add(f"{where} = {s}")
                    _body_forward(code, plan, again=True)
                with code.block("for t in range(t1 - 1, t0 - 1, -1):"):
                    step_back("SG", "t - t0")
        for j, slot in sorted(plan.carried.items()):
            _, name = plan.operand(-1, slot, False, False)
            if name is not None:
                code.add(f"g{name} += ga{j}")
    for q in reversed(plan.before()):
        if live[q]:
            _reverse(code, plan, q, False, adjoint)
    for s, e in plan.inputs.items():
        code.add(f"jac[p, {o}, {e}] = gv{s}")


def _adjoint_names(plan):
    """Every value name whose adjoint the sweep keeps across instructions."""
    names = {f"v{s}" for s in plan.inputs}
    for q in plan.outside:
        names.update(f"v{int(plan.instr[q, I_OUT]) + k}" for k in range(int(plan.instr[q, I_N])))
    names.update(f"o{j}" for j in plan.live_out)
    return sorted(names)


_IMPORTS = """
from autotape.kernels.elementwise import (binary_partial_x, binary_partial_y,
                                          binary_value, tangent_times, times,
                                          unary_partial, unary_value)

NAN, INF = math.nan, math.inf
"""
HEADERS = {
    "cuda": '''"""Generated by autotape.codegen for one lean program (CUDA); do not edit."""
import math

from numba import config, cuda
''' + _IMPORTS + '''if config.ENABLE_CUDASIM:   # (the simulator runs this as Python: numpy floats give the
    import numpy as np      # compiled code's inf and nan where Python's raise)

    def unary_value(op, x, _f=unary_value):
        return np.float64(_f(op, x))

    def binary_value(op, x, y, _f=binary_value):
        return np.float64(_f(op, x, y))
''',
    "cpu": '''"""Generated by autotape.codegen for one lean program (CPU); do not edit."""
import math

import numba
import numpy as np
''' + _IMPORTS}

# A one-output program's value and gradient at one point, for a small model's call:
# numba allocates and slices (~0.9 us of Python less than calling run_reverse itself),
# its scratch too where that is small (a freed block malloc hands back warm), else in
# the caller's ``buf``.
_RUN_ONE = '''

@numba.njit(cache=True, error_model="numpy", nogil=True)
def run_one(x, tab, grad{buf_arg}):
    values = np.empty((1, 1)){alloc}
    run_reverse(x.reshape(1, x.size), tab, values, grad.reshape(1, 1, x.size), buf[:{ck}],
                buf[{ck}:{end}])
    return values[0, 0]
'''

# a kernel's head: one CUDA thread per point, or (CPU) a loop over the points
_HEADS = {
    "cuda": ("\n\n@cuda.jit(cache=True)\ndef {name}({args}):\n    p = cuda.grid(1)\n"
             "    B = X.shape[0]\n    if p >= B:\n        return\n"),
    "cpu": ("\n\n@numba.njit(cache=True, error_model=\"numpy\", nogil=True)\n"
            "def {name}({args}):\n    B = X.shape[0]\n    for p in range(B):\n"),
}
_DEPTH = {"cuda": 1, "cpu": 2}


def _kernel(name, args, code, target):
    return _HEADS[target].format(name=name, args=args) + "\n".join(code.lines) + "\n"


def reverse_source(plan, target="cuda"):
    """(key, source): the module with ``run_values(X, tab, values)`` and
    ``run_reverse(X, tab, values, jac, CK, SG)``, the latter a Jacobian row per output
    by reverse sweeps (and, on the CPU for one output, ``run_one(x, tab, grad, buf)``:
    the value at one point, its gradient written into ``grad``); ``target`` "cuda" (a thread per point, the state checkpointed
    every ``plan.stride`` repetitions) or "cpu" (numba.njit, a loop over the points;
    every repetition's state kept: memory is cheap there and recomputing is not). CK
    and SG hold ``plan.scratch(target)`` doubles a point."""
    lean = plan.lean
    stride = plan.stride_for(target)
    live = live_sets(lean.instr, lean.pool, lean.nslots, lean.out_slots)
    parts = []
    for with_jac in (False, True):
        code = _Code(_DEPTH[target])
        _load_inputs(code, plan)
        _prologue(code, plan)
        if plan.loop is not None:
            with code.block(f"for t in range({plan.loop[2]}):"):
                if with_jac and stride == 1:
                    for where, s in _state(plan, "CK", "t", plan.width(target)):
                        code.add(f"{where} = {s}")
                elif with_jac:
                    with code.block(f"if t % {stride} == 0:"):
                        for where, s in _state(plan, "CK", f"t // {stride}"):
                            code.add(f"{where} = {s}")
                _body_forward(code, plan)
                if with_jac and stride == 1:
                    for places in _kept_values(plan, "t", target).values():
                        for where, name in places:
                            code.add(f"{where} = {name}")
        _straight(code, plan, plan.after())
        for o, (value, _) in enumerate(_outputs(plan)):
            code.add(f"values[p, {o}] = {value}")
        if with_jac and target == "cpu":
            ck, sg = plan.scratch(target)
            code.lines.insert(0, " " * 4 * _DEPTH[target] + f"if CK.size < {ck} * B or "
                              f"SG.size < {sg} * B:  # (no write past them)")
            code.lines.insert(1, " " * 4 * (_DEPTH[target] + 1) + "raise ValueError("
                              "\"autotape internal error: scratch too small\")")
        if with_jac:
            for o in range(lean.out_slots.size):
                code.add(f"# output {o}")
                start = len(code.lines)
                _reverse_for_output(code, plan, o, live[o], stride, target)
                code.lines[start:] = first_terms_assign(code.lines[start:])
            parts.append(_kernel("run_reverse", "X, tab, values, jac, CK, SG", code, target))
            if target == "cpu" and lean.out_slots.size == 1:
                ck, sg = (max(1, s) for s in plan.scratch(target))
                own = ck + sg <= OWN_SCRATCH_MAX
                parts.append(_RUN_ONE.format(
                    ck=ck, end=ck + sg, buf_arg="" if own else ", buf",
                    alloc=f"\n    buf = np.empty({ck + sg})" if own else ""))
        else:
            parts.append(_kernel("run_values", "X, tab, values", code, target))
    return keyed(HEADERS[target] + "".join(parts))


_ZEROED = re.compile(r"^(\s*)(\w+) = 0\.0$")
_ADDED = re.compile(r"^(\s*)(\w+) \+= (.*)$")
_NAME = re.compile(r"[A-Za-z_]\w*")


def first_terms_assign(lines):
    """The reverse sweep's lines, where an adjoint's first term assigns rather than adds
    to the 0.0 it started at: ``g = 0.0 ... g += t`` becomes ``g = t`` where no line
    between reads g and the two are in one block (an add less on the sweep's chain of
    dependences: the epidemic's kernel 4.5 -> 4.0 us). The sum then differs from the
    interpreter's only in a zero's sign (0.0 + -0.0 is 0.0, a -0.0 assigned stays), as
    the loop bodies' first writes do (kernels/loops.py).

    >>> first_terms_assign(["ga = 0.0", "gb = 0.0", "gb += ga * x", "ga += y", "ga += z"])
    ['ga = 0.0', 'gb = ga * x', 'ga += y', 'ga += z']
    """
    out, pending, levels = list(lines), {}, {}   # zeroed name -> (its line, indent);
    for i, line in enumerate(lines):             # indent -> the names zeroed there
        indent = len(line) - len(line.lstrip())
        for d in [d for d in levels if d > indent]:
            for name in levels.pop(d):          # (its block closed: a loop runs it again)
                pending.pop(name, None)
        added = _ADDED.match(line)
        for name in set(_NAME.findall(line)) & pending.keys():
            zero, d = pending.pop(name)
            if added and added.group(2) == name and d == indent and \
                    name not in _NAME.findall(added.group(3)):
                out[zero], out[i] = None, f"{added.group(1)}{name} = {added.group(3)}"
        zeroed = _ZEROED.match(line)
        if zeroed:
            pending[zeroed.group(2)] = (i, indent)
            levels.setdefault(indent, []).append(zeroed.group(2))
    return [line for line in out if line is not None]


def tangent_source(plan, lanes, target="cuda"):
    """(key, source): the module with ``run_tangent(X, tab, S, values, tangents)``,
    values and ``lanes`` directional derivatives (S: lanes x inputs) by forward mode."""
    code = _Code(_DEPTH[target])
    _load_inputs(code, plan, lanes)
    _prologue(code, plan, lanes)
    if plan.loop is not None:
        with code.block(f"for t in range({plan.loop[2]}):"):
            _body_forward(code, plan, lanes)
    _straight(code, plan, plan.after(), lanes)
    for o, (value, name) in enumerate(_outputs(plan)):
        code.add(f"values[p, {o}] = {value}")
        for l in range(lanes):
            code.add(f"tangents[p, {o}, {l}] = {f'd{name}_{l}' if name else '0.0'}")
    return keyed(HEADERS[target] + _kernel("run_tangent", "X, tab, S, values, tangents",
                                             code, target))


def keyed(source):
    """(key, source): a generated module's name in the kernel cache (a digest of its
    text), or Unsupported where the module is too long to compile in good time."""
    lines = source.count("\n")
    if lines > MAX_LINES:
        raise Unsupported(f"its code would be {lines} lines (more than {MAX_LINES} take "
                          f"numba minutes to compile)")
    return hashlib.sha256(source.encode()).hexdigest()[:24], source


_lock = threading.Lock()


def module(key, source, target="cuda"):
    """The generated module, written once to the kernel cache and imported."""
    with _lock:
        return import_generated(f"autotape_{target}_{key}", _path(key, source, target))


def _path(key, source, target):
    return generated_file("generated", f"{target}_{key}.py", source)


# ---- on the CPU: compiled beside the calls ------------------------------------------------

def cpu_signatures():
    """The argument types of the CPU kernels, as numba types (a call's; numba's disk
    cache is keyed on what ``compile`` gets)."""
    f64 = numba.float64

    def array(n):
        return numba.types.Array(f64, n, "C")
    return {"run_values": (array(2), array(2), array(2)),
            "run_reverse": (array(2), array(2), array(2), array(3), array(1), array(1)),
            "run_one": (array(1), array(2), array(1), array(1)),   # (or without buf)
            "run_tangent": (array(2), array(2), array(2), array(2), array(3))}


def _mark(path):
    return f"{path[:-3]}.compiled"


def compile_kernels(found):
    """Compile (or load from numba's disk cache) a CPU module's kernels for the
    argument types the calls pass."""
    for name, sig in cpu_signatures().items():
        if hasattr(found, name):
            kernel = getattr(found, name)
            kernel.compile(sig[:kernel.py_func.__code__.co_argcount])


def compile_file(key, path):
    """Compile a CPU module's kernels into numba's disk cache, then mark it compiled
    (what the helper process runs)."""
    compile_kernels(import_generated(f"autotape_cpu_{key}", path))
    with open(_mark(path), "w") as f:
        f.write("compiled\n")


_HELPER = "from autotape.codegen import compile_file\ncompile_file(*sys.argv[1:])\n"


def cpu_module(key, source, wait=True, what="a compiled function"):
    """The CPU module once its kernels are compiled. On disk already, it loads at once;
    otherwise, with ``wait=False`` and background compiling on
    (kernels/background.py), a helper process compiles it while the calls go on
    without it (None) until a later call finds it ready; ``wait=True``: now, or once
    the helper at it is done."""
    name = f"autotape_cpu_{key}"
    found = sys.modules.get(name)
    if found is not None:
        return found
    with _lock:
        path = _path(key, source, "cpu")
        job = f"generated {key}"
        state = background.state(job)
        if background.enabled() and not os.path.exists(_mark(path)) and \
                (state is not None or wait is not True):
            if not background.beside(job, state, _HELPER, (key, path), what, wait, job,
                                     cache_dir()):
                return None
        return import_generated(name, path)
