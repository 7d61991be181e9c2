"""Checkpointing a compiled program's loop: memory like the square root of its steps.

A lean program with a compiled loop body (kernels/loops.py) keeps, for the reverse
sweep, what every repetition computes: memory grows with the number of steps. Swept
in segments it keeps only a window of S repetitions and, at each segment's start, the
few repetitions the next one reads back (the checkpoints). The forward pass runs the
segments one after another, saving the checkpoints; the reverse sweep runs them from
the last back to the first, each recomputed from its checkpoint, then swept. What the
code after the loop reads of earlier repetitions (an ODE solve's table of steps, a few
slots each) is copied out of the window as each segment runs, and its adjoints back in
before the segment is swept. Uniform
segments of S = sqrt(steps) repetitions keep about 2 sqrt(steps) repetitions' values
and cost one more forward pass than storing everything (revolve's binomial schedules
save recomputation only under tighter budgets than that, which autotape refuses).

The window moves: the body's kernels address a repetition's slots as its slot number
plus ``t * delta - shift``, and a segment starting at repetition t0 runs with shift =
``(t0 - back) * delta``, so that its repetitions land in the same few slots. The code
before the loop keeps its slots; the code after it is renumbered once to read the last
segment's window.
"""
import math

import numpy as np

from .kernels.instruction_format import I_N, I_OUT, read_runs, rewrite_slots
from .kernels.driver import points_driver, tangents_driver, zero_nothing
from .kernels.program import (forward_range, forward_range_points, reverse_range,
                              reverse_range_points, tangent_range, tangent_range_points)

__all__ = ["Segments", "NotCheckpointable", "segment_length"]


class NotCheckpointable(Exception):
    """Why a program's loop cannot be swept in segments (the program then keeps every
    value, with a warning)."""


def segment_length(repeats, back, carried, budget):
    """Repetitions per segment: sqrt(repeats * back) (about the least memory: windows
    of values and adjoints of S + back repetitions, and ``carried`` repetitions' worth
    per segment boundary); with a budget (repetitions' worth), the same, refused where
    even that does not fit."""
    S = max(1, math.ceil(math.sqrt(repeats * back)))
    need = 2 * (S + back) + carried * (math.ceil(repeats / S) - 1)
    if budget is not None and need > budget:
        raise ValueError(
            f"compile: checkpoint={budget} repetitions' worth of values is too little for "
            f"this loop of {repeats} repetitions: uniform segments need at least "
            f"{math.ceil(need)} (sqrt(steps) for each window, the checkpoints besides)")
    return S


class Segments:
    """The segmented sweep of one lean program's loop (see the module's docstring).
    ``size``: slots per point of its values (and of its adjoints)."""

    def __init__(self, lean, budget):
        start, period, repeats, delta = lean.loop
        base, last = lean.loop_slots
        instr, count = lean.instr, lean.instr.shape[0]
        end = start + period * repeats
        self.lean, self.delta, self.repeats, self.base = lean, delta, repeats, base
        self.budget = budget
        self.start, self.end = start, end
        constant = np.zeros(lean.nslots, bool)
        constant[lean.const_slots] = True
        moved = _moved_reads(instr, lean.pool, start, period, base, constant)
        self.back = back = _reach_back(moved, base, delta)
        self.carry = _carried(moved, base, back * delta)
        self.S = S = segment_length(repeats, back, self.carry.size / delta, budget)
        self.bounds = [(t0, min(t0 + S, repeats)) for t0 in range(0, repeats, S)]
        self.lows = [0] + [t0 - back for t0, _ in self.bounds[1:]]
        window = max(t1 - lo for (_, t1), lo in zip(self.bounds, self.lows)) * delta
        lo_last = self.lows[-1]
        # What the code after the loop reads of repetitions before the last window (an
        # ODE solve's table of steps): those offsets of every repetition are copied out
        # of the window after each segment's forward, into slots of their own past it.
        self.kept = np.array(sorted({
            (e - base) % delta for q in range(end, count)
            for s, n in read_runs(instr, lean.pool, q) for e in range(s, s + n)
            if base <= e < last and (e - base) // delta < lo_last}), np.int64)
        kept_index = {int(off): i for i, off in enumerate(self.kept)}
        self.kept_base = base + window
        post = self.kept_base + repeats * self.kept.size   # where the slots after the loop
        self.size = post + (lean.nslots - last)            # start

        def compact(s, n=1):
            """Slots s .. s + n - 1 (a run) in the segmented layout."""
            if s + n <= base:
                return s
            if s >= last:
                return s - last + post
            if base <= s and s + n <= last:
                places = [divmod(s + i - base, delta) for i in range(n)]  # (repetition,
                if all(o in kept_index for _, o in places):               #  offset)
                    at = [self.kept_base + r * self.kept.size + kept_index[o]
                          for r, o in places]
                    if at == list(range(at[0], at[0] + n)):
                        return at[0]
                elif places[0][0] >= lo_last and not any(o in kept_index for _, o in places):
                    return s - lo_last * delta
            raise NotCheckpointable(
                "the code after the loop reads values from inside it that the segments "
                "do not keep (a run of them across repetitions, or partly kept)")

        for q in range(start):                 # the code before the loop keeps its slots
            for s, n in [(int(instr[q, I_OUT]), int(instr[q, I_N]))] + \
                    read_runs(instr, lean.pool, q):
                if s + n > base:
                    raise NotCheckpointable("the code before the loop writes past its start")
        self.instr, self.pool = instr.copy(), lean.pool.copy()
        for q in range(end, count):
            rewrite_slots(self.instr, self.pool, q, compact)
        if (lean.in_slots >= base).any():
            raise NotCheckpointable("an input's slot lies past the loop's start")
        self.out_slots = np.array([compact(int(s)) for s in lean.out_slots], np.int64)
        # the table of per-repetition constants (after every other slot): its place here
        self.table_base = 0 if lean.loop_table is None else compact(lean.loop_table[0])
        inside = (lean.const_slots >= base) & (lean.const_slots < last)
        self.const_slots = np.array([compact(int(s)) for s in lean.const_slots[~inside]],
                                    np.int64)
        self.const_vals = lean.const_vals[~inside]
        rep = (lean.const_slots[inside] - base) // delta   # constants inside the loop:
        self.loop_consts = (rep, lean.const_slots[inside] - base - rep * delta,
                            lean.const_vals[inside])    # loaded per segment

    def states(self):
        """Repetitions' worth of values and adjoints kept at once: both windows, the
        checkpoints (the slots carried across each segment boundary) and what the code
        after the loop reads of every repetition."""
        window = max(t1 - lo for (_, t1), lo in zip(self.bounds, self.lows))
        return 2 * window + (self.carry.size * (len(self.bounds) - 1) +
                             2 * self.repeats * self.kept.size) / self.delta

    def _kept_at(self, k):
        """(window slots, their kept slots): the offsets ``kept`` of segment k's
        repetitions."""
        t0, t1 = self.bounds[k]
        t = np.arange(t0, t1)[:, None]
        window = self.base + (t - self.lows[k]) * self.delta + self.kept
        kept = self.kept_base + t * self.kept.size + np.arange(self.kept.size)
        return window.reshape(-1), kept.reshape(-1)

    def _keep(self, k, arrays):
        """After segment k's forward: its repetitions' kept offsets out of the window.
        ``arrays``: (array, width per slot)."""
        if self.kept.size:
            window, kept = self._kept_at(k)
            for a, w in arrays:
                a.reshape(-1, w)[kept] = a.reshape(-1, w)[window]

    def _give_back(self, k, G, C):
        """Before segment k's reverse: the adjoints the code after the loop gave its
        repetitions' kept offsets, added into the window."""
        if self.kept.size:
            window, kept = self._kept_at(k)
            G.reshape(-1, C)[window] += G.reshape(-1, C)[kept]

    # -- moving the window ---------------------------------------------------------------

    def _enter(self, k, arrays):
        """Before running segment k forward after segment k - 1: the last ``back``
        repetitions of k - 1 move to the bottom of the window; segment k's constants
        are loaded. ``arrays``: (array, width per slot)."""
        if k:
            self._move(k - 1, k, arrays)
        self._load_consts(k, arrays[0])

    def _move(self, k_from, k_to, arrays):
        """The ``back`` repetitions before segment max(k_from, k_to)'s start, from
        their place in segment k_from's window to segment k_to's."""
        t = self.bounds[max(k_from, k_to)][0] - self.back
        src = self.base + (t - self.lows[k_from]) * self.delta
        dst = self.base + (t - self.lows[k_to]) * self.delta
        n = self.back * self.delta
        for a, w in arrays:
            a[dst * w:(dst + n) * w] = a[src * w:(src + n) * w].copy()

    def _load_consts(self, k, values_and_width):
        rep, offset, vals = self.loop_consts
        if not rep.size:
            return
        V, C = values_and_width
        lo, t1 = self.lows[k], self.bounds[k][1]
        pick = (rep >= lo) & (rep < t1)
        slots = self.base + (rep[pick] - lo) * self.delta + offset[pick]
        V.reshape(-1, C)[slots] = vals[pick][:, None]

    def _carried_at(self, C):
        """Where the carried slots of a segment's first ``back`` repetitions lie in V,
        for C points."""
        return ((self.base + self.carry)[:, None] * C + np.arange(C)).reshape(-1)

    # -- one chunk of C points: the one driver (kernels/driver.py) over _Chunk's hooks ----

    def run(self, X, p0, C, V, G, values, jac, live):
        """Values and (with ``jac``) each output's gradient at points p0 .. p0 + C - 1,
        V and G of ``size * C``."""
        _DRIVE(_Chunk(self, C, V.dtype, live), self.const_slots, self.const_vals,
               self.lean.in_slots, self.out_slots, X, values, jac, jac is not None, p0, C,
               0, C, V, G)

    def tangents(self, X, S, p0, C, V, D, values, tangents):
        """Forward mode at points p0 .. p0 + C - 1: the segments run forward once, the
        tangents beside the values (V of ``size * C``, D of ``size * K * C``)."""
        _DRIVE_TANGENTS(_Chunk(self, C, V.dtype, None), self.const_slots, self.const_vals,
                        self.lean.in_slots, self.out_slots, X, S, values, tangents, p0, C,
                        0, C, V, D)


class _Chunk:
    """One chunk's pass through the segments: the checkpoints it saves on the way
    forward, and the hooks the driver calls."""

    def __init__(self, segments, C, dtype, live):
        self.segments, self.live, self.C = segments, live, C
        self.kernels = segments.lean.loop_kernels[0 if C == 1 else 1]
        self.extra = () if C == 1 else (C,)
        self.carried = segments._carried_at(C)
        self.saved = np.empty((len(segments.bounds), self.carried.size), dtype)

    def forward(self, V, C, lane):
        """The code before the loop, the segments (saving their checkpoints), the code
        after it."""
        seg, lean, forward = self.segments, self.segments.lean, self.kernels[0]
        _interpret(lean.instr, lean.pool, lean.divisor, V, C, 0, seg.start)
        for k, (t0, t1) in enumerate(seg.bounds):
            seg._enter(k, [(V, C)])
            if k:
                self.saved[k] = V[self.carried]
            forward(V, seg.delta, t0, t1, seg.lows[k] * seg.delta, seg.table_base, 0,
                    *self.extra)
            seg._keep(k, [(V, C)])
        _interpret(seg.instr, seg.pool, lean.divisor, V, C, seg.end, seg.instr.shape[0])
        return 0

    def reverse(self, V, G, C, j0, j1, o, ran):
        """Output o's sweep: the code after the loop, each segment from the last
        (recomputed from its checkpoint, then swept), the code before."""
        seg, lean, reverse, live = self.segments, self.segments.lean, self.kernels[1], self.live
        last, delta = len(seg.bounds) - 1, seg.delta
        if o:                              # (the window holds the first segment now)
            self._recompute(last, V)
        _interpret_reverse(seg.instr, seg.pool, lean.divisor, live[o], V, G, C, seg.end,
                           seg.instr.shape[0])
        for k in range(last, -1, -1):
            t0, t1 = seg.bounds[k]
            if k != last:
                self._recompute(k, V)
                seg._move(k + 1, k, [(G, C)])    # the adjoints the later segment left
                keep0 = seg.base + (seg.bounds[k + 1][0] - seg.back - seg.lows[k]) * delta
                G[seg.base * C:keep0 * C] = 0.0
                G[(keep0 + seg.back * delta) * C:(seg.base + (t1 - seg.lows[k]) * delta)
                  * C] = 0.0
            seg._give_back(k, G, C)
            reverse(V, G, delta, t0, t1, seg.lows[k] * delta, seg.table_base, t1,
                    *self.extra)
        _interpret_reverse(lean.instr, lean.pool, lean.divisor, live[o], V, G, C, 0,
                           seg.start)
        return ran

    def _recompute(self, k, V):
        seg = self.segments
        t0, t1 = seg.bounds[k]
        if k:
            V[self.carried] = self.saved[k]
        seg._load_consts(k, (V, self.C))
        self.kernels[0](V, seg.delta, t0, t1, seg.lows[k] * seg.delta, seg.table_base, 0,
                        *self.extra)

    def tangents(self, V, D, C, K, lane):
        """Forward mode: the values and their K tangent lanes through the code before
        the loop, the segments and the code after it."""
        seg, lean, tangent = self.segments, self.segments.lean, self.kernels[3]
        if seg.loop_consts[0].size:           # (their tangents: zero, once for all)
            D[seg.base * K * C:(seg.base + (seg.size - seg.base)) * K * C] = 0.0
        _tangents(lean.instr, lean.pool, lean.divisor, V, D, C, K, 0, seg.start)
        for k, (t0, t1) in enumerate(seg.bounds):
            seg._enter(k, [(V, C), (D, K * C)])
            tangent(V, D, seg.delta, t0, t1, K, seg.lows[k] * seg.delta, seg.table_base,
                    *self.extra)
            seg._keep(k, [(V, C), (D, K * C)])
        _tangents(seg.instr, seg.pool, lean.divisor, V, D, C, K, seg.end,
                  seg.instr.shape[0])


_DRIVE = points_driver(_Chunk.forward, zero_nothing, _Chunk.reverse, in_python=True)[0]
_DRIVE_TANGENTS = tangents_driver(_Chunk.tangents, in_python=True)[0]


def _tangents(instr, pool, divisor, V, D, C, K, q0, q1):
    if C == 1:
        forward_range(instr, pool, divisor, V, q0, q1)
        tangent_range(instr, pool, divisor, V, D, K, q0, q1)
    else:
        forward_range_points(instr, pool, divisor, V, C, q0, q1)
        tangent_range_points(instr, pool, divisor, V, D, C, K, q0, q1)


def _interpret(instr, pool, divisor, V, C, q0, q1):
    if C == 1:
        forward_range(instr, pool, divisor, V, q0, q1)
    else:
        forward_range_points(instr, pool, divisor, V, C, q0, q1)


def _interpret_reverse(instr, pool, divisor, live, V, G, C, q0, q1):
    if C == 1:
        reverse_range(instr, pool, divisor, live, V, G, q0, q1)
    else:
        reverse_range_points(instr, pool, divisor, live, V, G, C, q0, q1)


def _moved_reads(instr, pool, start, period, base, constant):
    """The slots below ``base`` (an earlier repetition's) that the body's instructions
    read and the next repetition's read moved along: an operand's, a gather's or a
    scatter's source, never a constant (a per-repetition one changes slot too)."""
    read = set()
    for q in range(start, start + period):
        for (s, n), (u, _) in zip(read_runs(instr, pool, q), read_runs(instr, pool, q + period)):
            if s != u and not constant[s]:
                read.update(e for e in range(s, s + n) if e < base)
    return read


def _carried(moved, base, span):
    """The slots (offsets into the ``span`` slots before the body's own) that a
    repetition reads from earlier ones: all a checkpoint needs to keep."""
    return np.array(sorted(e - (base - span) for e in moved), np.int64)


def _reach_back(moved, base, delta):
    """How many repetitions back the body reads (at least 1)."""
    return max([1] + [-(-(base - e) // delta) for e in moved])
