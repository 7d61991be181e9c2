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

Only elementwise ops, WHERE and COPY go in a body; a stretch with anything else stays
with the interpreter (kernels/program.py), as does a reverse sweep that does not reach
every instruction of the body.
"""
import hashlib
import importlib.util
import os
import sys
import threading

import numpy as np

from ..opcodes import (ADD, BINARY_LAST, DIV, MUL, SUB, UNARY_FIRST, UNARY_LAST, WHERE,
                       opcode_name)
from .cache import cache_dir
from .elementwise import passes_nothing
from .program import COPY, I_A, I_N, I_OP, I_OUT, I_SA

MIN_REPEATS = 4
MIN_COVERED = 256            # instructions a loop must cover to be worth compiling
CANDIDATES = 64              # periods tried


def _signatures(instr):
    """Per instruction: the fields that must repeat exactly (kind, count, strides), or
    -1 where the kind cannot go in a body."""
    op = instr[:, I_OP]
    ok = ((op >= UNARY_FIRST) & (op <= BINARY_LAST)) | (op == WHERE) | (op == COPY)
    sig = (op + 1000) * 1_000_003 + instr[:, I_N] * 8 + instr[:, I_SA] * 4 \
        + instr[:, I_SA + 1] * 2 + instr[:, I_SA + 2]
    return np.where(ok, sig, -1)


def _matches(instr, sig, period):
    """``(delta, ok)``: ok[q] when instruction q + period repeats q with its output
    moved by delta and each operand fixed or moved by delta, as q's own was
    relative to q - period."""
    n = instr.shape[0] - period
    if n <= 0:
        return 0, np.zeros(0, bool)
    moved = instr[period:, I_OUT] - instr[:n, I_OUT]
    delta = int(np.median(moved))
    ok = (sig[:n] == sig[period:]) & (sig[:n] >= 0) & (moved == delta) & (delta > 0)
    for col in (I_A, I_A + 1, I_A + 2):
        a, b = instr[:n, col], instr[period:, col]
        d = b - a
        ok &= ((a < 0) & (b < 0)) | ((a >= 0) & (b >= 0) & ((d == 0) | (d == delta)))
        same = np.ones(n, bool)                # the choice (fixed or moved) repeats too
        same[:-period] = d[:-period] == d[period:]
        ok &= same
    return delta, ok


def find_loop(instr):
    """``(start, period, repeats, delta)`` of the longest repeating stretch, or None."""
    count = instr.shape[0]
    if count < MIN_COVERED:
        return None
    sig = _signatures(instr)
    middle = count // 2
    if sig[middle] < 0:
        ahead = np.nonzero(sig[middle:] >= 0)[0]
        if not ahead.size:
            return None
        middle += int(ahead[0])
    later = np.nonzero(sig[middle + 1:] == sig[middle])[0][:CANDIDATES] + 1
    best = None
    for period in later:
        period = int(period)
        if period * MIN_REPEATS > count:
            break
        delta, ok = _matches(instr, sig, period)
        if middle >= ok.size or not ok[middle]:
            continue
        lo = middle - int(np.argmin(ok[middle::-1])) + 1 if not ok[:middle + 1].all() else 0
        bad = np.nonzero(~ok[middle:])[0]
        hi = middle + (int(bad[0]) if bad.size else ok.size - middle)   # ok on [lo, hi)
        repeats = (hi - lo) // period + 1
        if repeats < MIN_REPEATS:
            continue
        covered = repeats * period
        if best is None or covered > best[1] * best[2]:
            best = (lo, period, repeats, delta)
    if best is None or best[1] * best[2] < MIN_COVERED:
        return None
    return best


# ---- the body as code ---------------------------------------------------------------------

def _slot(instr, start, period, q, col):
    s = int(instr[q, col])
    return f"{s} + o" if int(instr[q + period, col]) - s != 0 else f"{s}"


def _body(instr, start, period, constants):
    """The forward and reverse lines of one repetition (iteration 0's slots). No
    adjoint is summed into ``constants`` (slots nothing differentiates: a sum into one
    inside an element loop would also keep that loop from vectorising)."""
    fwd, rev = [], []

    def gets_adjoint(q, col):
        s = int(instr[q, col])
        return s not in constants or int(instr[q + period, col]) != s
    for q in range(start, start + period):
        op, n = int(instr[q, I_OP]), int(instr[q, I_N])
        z, x = _slot(instr, start, period, q, I_OUT), _slot(instr, start, period, q, I_A)
        sa = int(instr[q, I_SA]) if op != COPY else 1
        lead, kz, kx = ("for k in range(%d):\n            " % n, " + k", " + k" * sa) \
            if n > 1 else ("", "", "")
        name = opcode_name(op) if op >= 0 else "COPY"
        if op == COPY:
            fwd.append(f"{lead}V[{z}{kz}] = V[{x}{kx}]  # COPY")
            if gets_adjoint(q, I_A):
                rev.append(f"{lead}G[{x}{kx}] += G[{z}{kz}]  # COPY")
            continue
        if op <= UNARY_LAST:
            fwd.append(f"{lead}V[{z}{kz}] = unary_value({op}, f64(V[{x}{kx}]))  # {name}")
            if not passes_nothing(op) and gets_adjoint(q, I_A):
                rev.append(f"{lead}G[{x}{kx}] += times({op}, f64(G[{z}{kz}]), unary_partial("
                           f"{op}, f64(V[{x}{kx}]), f64(V[{z}{kz}])))  # {name}")
            continue
        y = _slot(instr, start, period, q, I_A + 1)
        ky = " + k" * int(instr[q, I_SA + 1]) if n > 1 else ""
        X, Y, Z = f"f64(V[{x}{kx}])", f"f64(V[{y}{ky}])", f"f64(V[{z}{kz}])"
        if op == WHERE:
            w = _slot(instr, start, period, q, I_A + 2)
            kw = " + k" * int(instr[q, I_SA + 2]) if n > 1 else ""
            fwd.append(f"{lead}V[{z}{kz}] = V[{x}{kx}] if V[{w}{kw}] != 0 else V[{y}{ky}]"
                       "  # WHERE")
            rev.append(f"{lead}if V[{w}{kw}] != 0:\n            {'    ' if n > 1 else ''}"
                       f"G[{x}{kx}] += G[{z}{kz}]\n        {'    ' if n > 1 else ''}else:\n"
                       f"            {'    ' if n > 1 else ''}G[{y}{ky}] += G[{z}{kz}]"
                       "  # WHERE")
            continue
        symbol = {ADD: "+", SUB: "-", MUL: "*", DIV: "/"}.get(op)
        fwd.append(f"{lead}V[{z}{kz}] = " + (f"{X} {symbol} {Y}" if symbol else
                                             f"binary_value({op}, {X}, {Y})") + f"  # {name}")
        if passes_nothing(op):
            continue
        g = f"f64(G[{z}{kz}])"
        if op == ADD or op == SUB:
            dx, dy = g, (g if op == ADD else f"-{g}")
        elif op == MUL:
            dx, dy = f"{g} * {Y}", f"{g} * {X}"
        else:
            dx = f"times({op}, {g}, binary_partial_x({op}, {X}, {Y}, {Z}))"
            dy = f"times({op}, {g}, binary_partial_y({op}, {X}, {Y}, {Z}))"
        inner = "\n        " + ("    " if n > 1 else "")
        sums = ([f"G[{x}{kx}] += {dx}"] if gets_adjoint(q, I_A) else []) + \
            ([f"G[{y}{ky}] += {dy}"] if gets_adjoint(q, I_A + 1) else [])
        if len(sums) == 2:                     # (both read before either is written)
            sums = [f"gx, gy = {dx}, {dy}", f"G[{x}{kx}] += gx", f"G[{y}{ky}] += gy"]
        if sums:
            rev.append(lead + inner.join(sums) + f"  # {name}")
    return fwd, rev[::-1]


_TEMPLATE = '''"""Generated by autotape.kernels.loops: one loop body of a lean program."""
import numba
import numpy as np

from autotape.kernels.elementwise import (binary_partial_x, binary_partial_y, binary_value,
                                          times, unary_partial, unary_value)

f64 = np.float64


@numba.njit(cache=True, error_model="numpy", nogil=True)
def forward(V, delta, first, repeats):
    for t in range(first, repeats):
        o = t * delta
        {forward}


@numba.njit(cache=True, error_model="numpy", nogil=True)
def reverse(V, G, delta, first, repeats):
    for t in range(repeats - 1, first - 1, -1):
        o = t * delta
        {reverse}
'''

_compiled = {}
_lock = threading.Lock()


def loop_kernels(instr, start, period, constants):
    """(forward, reverse) of the body at ``instr[start:start + period]``: forward(V,
    delta, first, repeats) runs repetitions first .. repeats - 1, reverse the same
    backwards (G the adjoints). ``constants``: slots whose adjoints nobody reads.
    Compiled once per distinct body, kept on disk."""
    fwd, rev = _body(instr, start, period, set(int(c) for c in constants))
    source = _TEMPLATE.replace("{forward}", "\n        ".join(fwd)).replace(
        "{reverse}", "\n        ".join(rev) or "pass")
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    with _lock:
        kernels = _compiled.get(key)
        if kernels is None:
            folder = os.path.join(cache_dir(), "loops")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"loop_{key}.py")
            if not os.path.exists(path):
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    f.write(source)
                os.replace(tmp, path)          # (atomic: another process may race)
            name = f"autotape_loop_{key}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module         # (numba's cache finds its globals by name)
            spec.loader.exec_module(module)
            kernels = _compiled[key] = (module.forward, module.reverse)
    return kernels
