"""``Compiled.explain``: what a compiled function's calls run at some arguments, and why
not something faster, in the user's terms: the source lines of f where its recording
takes decisions, has an op the lean program does not lower, or stops repeating (the
loop finder's stretch, kernels/loops.py).

f is recorded once more for this, with Python's line tracing on, which notes how many
rows the recording tape had when each line of f (and of what it calls, outside
autotape and numpy) began: a row's line is the last one that began before it.
"""
import bisect
import contextlib
import linecache
import os
import sys

import numpy as np

from .kernels.loops import first_unlike_body, repetition
from .tuning import BLAS_MIN_FLOPS, MIN_COVERED, MIN_REPEATS
from .opcodes import MATMUL, opcode_name
from .program import LeanProgram
from .thread_state import here

WHOLE = 90          # % of the program in its loop from which what lies outside goes unsaid

# frames not the user's: autotape's, numpy's (a numpy function called on Tensors) and
# the standard library's (``isinstance`` through abc), by their files
_SKIPPED = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                 for m in (sys.modules["autotape"], np, os)) + ("<frozen",)


def explain(compiled, args):
    """The text ``Compiled.explain`` returns, for ``args`` (already checked)."""
    lines = _Lines()
    traces = compiled.traces
    with lines.tracing():
        p = compiled._record("value", args)
    compiled.traces = traces                   # (this recording is not one of f's calls)
    tape, name = p.tape, getattr(compiled.f, "__name__", "f")
    shapes = ", ".join(str(a.shape) for a in args)
    say = [f"{name} at arguments of shapes {shapes}: {tape.nrows} recorded rows."]
    if p.guards:
        where = sorted({_at(*guard[3].rsplit(":", 1)) for guard in p.guards})
        say.append(f"It takes {len(p.guards)} decision(s) in Python on traced values "
                   f"({_listed(where)}), so calls replay its tape with those checks "
                   "(the interpreter of rows) and record again where one comes out "
                   "otherwise; keep decisions in autotape ops (at.where) to run it as a "
                   "lean program.")
        return "\n".join(say)
    unsupported = []
    lean = LeanProgram.lower(tape, p.inputs, [v for k, v, _ in p.outputs if k == "row"],
                             why=unsupported)
    if lean is None:
        row = unsupported[0]
        why = f" (a product of {BLAS_MIN_FLOPS} multiply-adds or more runs through BLAS, " \
            "whose rounding lean instructions would not repeat)" if tape.op(row) == MATMUL \
            else ""
        say.append(f"Its {opcode_name(tape.op(row)).lower()} at {lines.of(tape, row)} has no "
                   f"lean form{why}, so calls replay its tape (the interpreter of rows), and "
                   "no loop is looked for.")
        return "\n".join(say)
    count = lean.instr.shape[0]
    say.append(f"It runs as a lean program of {count} instructions.")
    if lean.user_calls is not None:
        say.append("It calls numba functions of yours (custom ops): it runs through "
                   "their driver, and no loop is looked for.")
        return "\n".join(say)
    constant = np.zeros(lean.nslots, bool)
    constant[lean.const_slots] = True
    found = repetition(lean.instr, constant, lean.pool)
    if found is None:
        say.append("No stretch of it repeats, so no loop is compiled: every call runs "
                   "its instructions one by one (or as generated code, where it is small).")
        return "\n".join(say)
    start, period, repeats, breaks = found
    body = _span(lines, tape, lean.made_by[start:start + period])
    share = 100.0 * period * repeats / count
    if lean.loop is not None:
        say.append(f"Its loop: {repeats} repetitions of {period} instructions ({body}), "
                   f"{share:.0f}% of the program, compiled as one loop body from its "
                   "second call on.")
    else:
        short = repeats < MIN_REPEATS or period * repeats < MIN_COVERED
        say.append(f"No loop is compiled: the longest repeating stretch is {repeats} "
                   f"repetitions of {period} instructions ({body}), {share:.0f}% of the "
                   "program" + (f", under the {MIN_REPEATS} repetitions of at least "
                                f"{MIN_COVERED} instructions in all a loop needs."
                                if short else "."))
    if lean.loop is not None and share >= WHOLE:
        return "\n".join(say)                # (what lies outside: set-up and the loss)
    say += _other_stretches(lean, constant, lines, tape, (start, period, repeats), count)
    for q, why in breaks:
        side = "begins" if q < start else "ends"
        say.append(f"The repetition {side} at {lines.of(tape, int(lean.made_by[q]))}: "
                   f"{why}.")
    return "\n".join(say)


def _other_stretches(lean, constant, lines, tape, loop, count):
    """Sentences on the stretches before and after the loop that repeat too (a phase of
    the simulation whose steps record other ops: a forcing switched off), which run on
    the interpreter: where their repetitions part from the loop's, and how to make them
    one."""
    start, period, repeats = loop
    say = []
    for lo, hi in ((0, start), (start + period * repeats, count)):
        found = repetition(lean.instr[lo:hi], constant, lean.pool)
        if found is None or found[2] < MIN_REPEATS or \
                found[1] * found[2] < max(MIN_COVERED, count // 20):
            continue
        first, other, times = lo + found[0], found[1], found[2]
        body = _span(lines, tape, lean.made_by[first:first + other])
        say.append(f"{'Before' if lo == 0 else 'After'} it, another stretch repeats: "
                   f"{times} repetitions of {other} instructions ({body}), "
                   f"{100.0 * other * times / count:.0f}% of the program, on the "
                   "interpreter (a program compiles one loop).")
        q = first_unlike_body(lean.instr, constant, start, period, first, other)
        if q is not None:
            say.append(f"Its repetitions part from the loop's at "
                       f"{lines.of(tape, int(lean.made_by[q]))}. Where the steps differ "
                       "only in a value (a forcing switched on or off: `p[3] if i < 40 "
                       "else 0.0`), arithmetic on it (`p[3] * (i < 40)`) records the same "
                       "ops in every step, and the stretches become one loop.")
    return say


def _skipped(frame):
    path = frame.f_code.co_filename
    if not path.startswith("<"):
        path = os.path.abspath(path)
    return path.startswith(_SKIPPED)


def _listed(items, most=4):
    return "; ".join(items[:most]) + (f"; and {len(items) - most} more"
                                       if len(items) > most else "")


def _span(lines, tape, rows):
    """Where rows were recorded: a file and its lines (first to last)."""
    places = [lines.place(tape, int(r)) for r in rows]
    places = [p for p in places if p is not None]
    if not places:
        return "lines not known"
    spans = []
    for path in sorted({f for f, _ in places}):
        numbers = [n for f, n in places if f == path]
        low, high = min(numbers), max(numbers)
        spans.append(f"{os.path.basename(path)}, " + (f"line {low}" if low == high else
                                                       f"lines {low}-{high}"))
    return "; ".join(spans)


class _Lines:
    """The lines of the user's code as they began, with the recording tape's row count
    then."""

    def __init__(self):
        self.tapes, self.counts, self.places = [], [], []
        self.on = {}                 # tape id -> (its counts, its places), found once

    @contextlib.contextmanager
    def tracing(self):
        """Note the lines inside the block (this thread's; a tracer set before, such as
        a debugger's or coverage's, is put back after)."""
        saved = sys.gettrace()
        sys.settrace(self._call)
        try:
            yield
        finally:
            sys.settrace(saved)

    def _call(self, frame, event, arg):
        return None if _skipped(frame) else self._line

    def _line(self, frame, event, arg):
        if event == "return":        # (the rest of the caller's line: its rows again)
            frame = frame.f_back
            while frame is not None and _skipped(frame):
                frame = frame.f_back
        if event in ("line", "return") and frame is not None:
            tape = here().tape
            tape = tape() if tape is not None else None
            self.tapes.append(id(tape))
            self.counts.append(tape.nrows if tape is not None else 0)
            self.places.append((frame.f_code.co_filename, frame.f_lineno))
        return self._line

    def place(self, tape, row):
        """(file, line) where ``row`` was recorded, or None. Only lines run while
        ``tape`` was the thread's count: a finalizer of other code that the garbage
        collector runs meanwhile (before the recording's tape opened) is on another."""
        found = self.on.get(id(tape))
        if found is None:
            mine = [k for k, t in enumerate(self.tapes) if t == id(tape)]
            found = self.on[id(tape)] = ([self.counts[k] for k in mine],
                                         [self.places[k] for k in mine])
        k = bisect.bisect_right(found[0], row) - 1
        return found[1][k] if k >= 0 else None

    def of(self, tape, row):
        """The row's place as text: ``model.py, line 12 (`x = x + h * v`)``."""
        place = self.place(tape, row)
        if place is None:
            return "a line not known"
        return _at(*place)


def _at(path, number):
    """``model.py, line 12 (`x = x + h * v`)``."""
    number = int(number)
    code = linecache.getline(path, number).strip()
    return f"{os.path.basename(path)}, line {number}" + (f" (`{code}`)" if code else "")
