"""at.jit's cells written one by one, rolled back into array instructions (reroll.py):
the same values bit for bit as the scalar program, the same gradients to rounding, a
recurrence left scalar, and a time loop over the rolled steps found."""
import importlib

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotape as at
from autotape.kernels.instruction_format import (GATHER, I_A, I_B, I_C, I_N, I_OP, I_OUT, I_SA,
                                                 I_SB, WIDTH)
from autotape.opcodes import ADD, COS, MUL, SIN, SUB, TANH
from autotape.program import LeanProgram
from autotape.reroll import reroll
from autotape.tuning import MIN_CELLS

jit_module = importlib.import_module("autotape.jit")   # (at.jit is the function)


@numba.njit
def burgers_cells(p, u0, steps):
    u, n = u0.copy(), u0.size
    new = np.empty_like(u)
    for _ in range(steps):
        for i in range(n):
            if i == 0:
                ux, uxx = u[1] - u[0], 0.0
            elif i == n - 1:
                ux, uxx = u[n - 1] - u[n - 2], 0.0
            else:
                ux, uxx = 0.5 * (u[i + 1] - u[i - 1]), u[i + 1] - 2.0 * u[i] + u[i - 1]
            new[i] = u[i] - 0.01 * p[1] * u[i] * ux + 0.01 * p[0] * uxx
        u, new = new, u
    return (u * u).sum()


@numba.njit
def ring_cells(p, x0, steps):
    x, n = x0.copy(), x0.size
    k = np.empty(n)
    for _ in range(steps):
        for i in range(n):
            k[i] = (x[(i + 1) % n] - x[(i - 2) % n]) * x[(i - 1) % n] - p[1] * x[i] + p[0]
        for i in range(n):
            x[i] += 0.01 * k[i]
    return ((x - 8.0) ** 2).mean()


@numba.njit
def grid_cells(p, u0, steps):
    u, n = u0.copy(), u0.shape[0]
    new = np.empty_like(u)
    for _ in range(steps):
        for i in range(n):
            for j in range(n):
                lap = u[(i - 1) % n, j] + u[(i + 1) % n, j] + u[i, (j - 1) % n] + \
                    u[i, (j + 1) % n] - 4.0 * u[i, j]
                new[i, j] = u[i, j] + 0.1 * (p[0] * lap + p[1] * u[i, j] * (1.0 - u[i, j]))
        u, new = new, u
    return (u * u).mean()


@numba.njit
def prefix_sums(p, x0):
    s = np.empty(x0.size)
    total = 0.0
    for i in range(x0.size):           # a recurrence: each cell reads the last one's sum
        total = total + p[0] * x0[i]
        s[i] = total
    out = 0.0
    for i in range(x0.size):
        out += np.sin(s[i] * p[1])
    return out


_FORCE = np.sin(np.arange(30) * 0.3)


@numba.njit
def forced_chain(p, x0):
    x, n = x0.copy(), x0.size
    a = np.empty(n)
    for t in range(30):
        for i in range(n):
            left = x[i - 1] if i > 0 else x[i]
            right = x[i + 1] if i < n - 1 else x[i]
            a[i] = p[1] * (left + right - 2.0 * x[i]) - p[0] * x[i] + \
                (_FORCE[t] if i == 0 else 0.0)
        for i in range(n):
            x[i] += 0.1 * a[i]
    return (x * x).sum()


_A16 = np.eye(16) * 0.9 + np.sin(np.arange(256.0)).reshape(16, 16) * 0.02


@numba.njit
def state_space(p, x0):
    x = x0.copy()
    for _ in range(12):
        x = _A16 @ x + p[0] * np.tanh(x)
    return (x * x).sum() + p[1]


@numba.njit
def matvec_cells(p, x0):
    x, n = x0.copy(), x0.size
    y = np.empty(n)
    for _ in range(12):
        for i in range(n):
            s = 0.0
            for j in range(n):
                s += _A16[i, j] * x[j]
            y[i] = s + p[0] * np.tanh(x[i])
        x, y = y, x
    return (x * x).sum() + p[1]


CASES = {
    "burgers": (burgers_cells, np.array([0.3, 1.1]),
                (np.sin(np.linspace(0.0, 2.0 * np.pi, 24)), 12)),
    "ring": (ring_cells, np.array([8.0, 1.0]), (np.linspace(7.0, 9.0, 12), 10)),
    "grid": (grid_cells, np.array([0.2, 0.5]),
             (np.cos(np.arange(36.0)).reshape(6, 6) * 0.5 + 0.5, 6)),
    "prefix": (prefix_sums, np.array([0.7, 1.3]), (np.linspace(-1.0, 1.0, 20),)),
    "state_space": (state_space, np.array([0.1, 0.0]), (np.linspace(-1.0, 1.0, 16),)),
    "matvec": (matvec_cells, np.array([0.1, 0.0]), (np.linspace(-1.0, 1.0, 16),)),
}


def _program(f):
    return next(p for p in f._programs.values() if p)[0]


def _both(monkeypatch, fn, p, data):
    """(value, gradient, lean program) of at.jit(fn) with rolling and without."""
    out = {}
    for rolled in (True, False):
        with monkeypatch.context() as m:
            if not rolled:
                m.setattr(jit_module, "reroll", lambda *a: None)
            f = at.jit(fn, argnums=(0,))
            f.value_and_grad(p, *data)                 # (records)
            v, g = f.value_and_grad(p, *data)          # (the lean program)
            out[rolled] = (v.item(), g[0].numpy(), _program(f))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_cells_roll_into_arrays_with_the_scalar_programs_values(monkeypatch, name):
    fn, p, data = CASES[name]
    out = _both(monkeypatch, fn, p, data)
    (v, g, lean), (v0, g0, lean0) = out[True], out[False]
    assert v == v0                                     # the same ops on the same values
    np.testing.assert_allclose(g, g0, rtol=1e-12, atol=1e-15)
    assert lean.instr.shape[0] < lean0.instr.shape[0] / 2
    assert lean.instr[:, I_N].max() >= MIN_CELLS
    ref = fn(p, *data)
    assert abs(v - ref) <= 1e-12 * abs(ref)
    step = 1e-6
    for k in range(p.size):
        e = np.zeros_like(p)
        e[k] = step
        fd = (fn(p + e, *data) - fn(p - e, *data)) / (2 * step)
        assert abs(g[k] - fd) <= 1e-6 * max(1.0, abs(fd))


def test_a_time_loop_over_rolled_cells_is_found(monkeypatch):
    fn, p, _ = CASES["burgers"]
    out = _both(monkeypatch, fn, p, (np.sin(np.linspace(0.0, 2.0 * np.pi, 64)), 20))
    scalar = out[False][2]                   # a step: 64 x 12 scalar instructions, too
    assert scalar.loop[2] <= 64              # long a body: the loop found is one step's cells
    rolled = out[True][2]                    # ... or 30 array ones, once rolled: the steps
    assert rolled.loop[2] >= 17 and rolled.loop[1] * rolled.loop[2] > 0.7 * len(rolled.instr)


@pytest.mark.parametrize("name", ["state_space", "matvec"])
def test_a_matrix_products_rows_roll_as_rows(monkeypatch, name):
    """A row's multiply-adds (its sum carried from term to term) roll over the rows:
    each term's multiply and add one array instruction over 16 rows, no add left
    scalar in a step (a run of products beside one chain of 256 adds was 10x slower)."""
    fn, p, data = CASES[name]
    lean = _both(monkeypatch, fn, p, data)[True][2]
    adds = lean.instr[lean.instr[:, I_OP] == ADD]
    assert (adds[:, I_N] == 16).sum() >= 11 * 16           # (the first step reads data)
    assert (adds[:, I_N] == 1).sum() < 20                  # the final sum's
    assert lean.loop is not None and lean.loop[2] >= 8


def test_a_forcing_term_in_one_cell_is_read_from_the_loops_table(monkeypatch):
    """Cell 0 adds F[t], the others 0.0: the cells read a block of constants, one per
    step, which the loop over steps reads from its table (a gather of them would differ
    from step to step, and no loop would be found)."""
    p, x0 = np.array([0.3, 0.8]), np.linspace(-1.0, 1.0, 12)
    out = _both(monkeypatch, forced_chain, p, (x0,))
    (v, g, lean), (v0, g0, _) = out[True], out[False]
    assert v == v0
    np.testing.assert_allclose(g, g0, rtol=1e-12)
    assert lean.loop is not None and lean.loop[2] >= 25 and lean.loop_table is not None
    f = at.jit(forced_chain, argnums=(0,))
    f.value_and_grad(p, x0)
    next(iter(f._programs.values()))[0].wait_compiled()     # (the loop body compiled)
    v1, g1 = f.value_and_grad(p, x0)
    assert v1.item() == v
    np.testing.assert_allclose(g1[0].numpy(), g, rtol=1e-12)


def test_a_recurrence_stays_scalar():
    fn, p, data = CASES["prefix"]
    f = at.jit(fn, argnums=(0,))
    f.value_and_grad(p, *data)
    lean = _program(f)
    sums = lean.instr[lean.instr[:, I_OP] == ADD]
    assert (sums[:, I_N] == 1).sum() >= 2 * data[0].size - 2   # both loops' running sums
    assert (lean.instr[:, I_N] == data[0].size).any()          # sin(s[i] * p[1]) rolled


# ---- random programs of cells: rolled against scalar, through the interpreter ------------

UNARY, BINARY = (SIN, COS, TANH), (ADD, SUB, MUL)


@st.composite
def cell_programs(draw):
    """A scalar program of inputs x (n slots) and constants, then loops over n cells of
    a random group of instructions, each operand: an input, a constant, a constant per
    cell, the last loop's cell at a random offset (mod n or clipped), the last cell's
    result (a recurrence), or an earlier value in the cell."""
    n = draw(st.integers(MIN_CELLS, 14))
    loops = draw(st.integers(1, 4))
    consts = np.array([0.5, -1.25, 2.0])
    slot = n + consts.size
    code, last = [], np.arange(n)
    for _ in range(loops):
        group = [(draw(st.sampled_from(UNARY + BINARY)),
                  [draw(st.tuples(st.sampled_from("xcdpqr"), st.integers(-3, 3)))
                   for _ in range(2)]) for _ in range(draw(st.integers(1, 5)))]
        wrap = draw(st.booleans())
        cells = np.empty(n, np.int64)
        for i in range(n):
            made = []
            for op, operands in group:
                reads = []
                for kind, k in operands[:1 if op in UNARY else 2]:
                    if kind == "x":
                        reads.append((i + k) % n)
                    elif kind == "c":
                        reads.append(n + k % consts.size)
                    elif kind == "d":                    # data: a constant per cell
                        reads.append(n + (i + k) % consts.size)
                    elif kind == "p":
                        j = (i + k) % n if wrap else min(max(i + k, 0), n - 1)
                        reads.append(int(last[j]))
                    elif kind == "r":                    # a recurrence: the last cell's
                        reads.append(int(cells[i - 1]) if i > 0 else int(last[i]))
                    else:
                        reads.append(made[k % len(made)] if made else int(last[i]))
                code.append((op, slot, reads))
                made.append(slot)
                slot += 1
            cells[i] = made[-1]
        last = cells
    instr = np.zeros((len(code), WIDTH), np.int64)
    for q, (op, out, reads) in enumerate(code):
        instr[q, I_OP], instr[q, I_OUT], instr[q, I_A] = op, out, reads[0]
        instr[q, I_B] = reads[1] if len(reads) > 1 else -1
        instr[q, I_C], instr[q, I_N], instr[q, I_SA], instr[q, I_SB] = -1, 1, 1, len(reads) > 1
    return instr, n, slot, consts, last


@settings(max_examples=40, deadline=None)
@given(cell_programs())
def test_random_cell_programs_roll_with_the_same_values(program):
    instr, n, nslots, consts, last = program
    in_slots, const_slots = np.arange(n), n + np.arange(consts.size)
    rolled = reroll(instr, nslots, in_slots, const_slots, consts, last)
    if rolled is None:                    # (every loop a recurrence)
        return
    code, pool, slots, const_slots2, consts2, out = rolled
    assert not (code[:, I_OP] == GATHER).any() or pool.size > 1
    X = np.random.default_rng(0).uniform(-1.0, 1.0, (3, n))
    scalar = LeanProgram.of(instr, np.zeros(1, np.int64), np.ones(len(instr)), in_slots, last,
                            nslots, const_slots, consts, loops=False)
    arrays = LeanProgram.of(code, pool, np.ones(len(code)), in_slots, out, slots,
                            const_slots2, consts2, loops=False)
    v0, j0 = scalar.run(X, jacobian=True)
    v1, j1 = arrays.run(X, jacobian=True)
    np.testing.assert_array_equal(v1, v0)
    np.testing.assert_allclose(j1, j0, rtol=1e-12, atol=1e-14)
    assert code.shape[0] < instr.shape[0]
