"""Fused element loops in compiled loop bodies (kernels/fusion.py): runs of elementwise
instructions over the same cells become one loop with scalar locals, and give the
interpreter's values and gradients bit for bit (float64 and float32), also where
adjoint terms must be deferred to keep their order: stencils reading one array at
several offsets, broadcast parameters, boundary pieces amid a run."""
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotape as at
import autotape.func as F
from autotape.kernels import fusion
from autotape.kernels.instruction_format import COPY, I_N, I_OP, I_OUT
from autotape.integrate import solve_ivp
from autotape.opcodes import EXP, NEG, POW, SIN
from programs import broadcast_where, compiled_and_interpreted, same_bits

CELLS = 20
OFFSETS = st.sampled_from([0, 1, 2])
TERMS = st.lists(st.tuples(OFFSETS, OFFSETS, st.sampled_from(["add", "sub", "mul", "where",
                                                                "param", "scalar"])),
                 min_size=2, max_size=6)


def _stencil_model(terms, steps=40):
    """A step reading u[o:o+n] slices at the drawn offsets, combined by the drawn ops,
    a parameter broadcast over the cells, a scalar carried from step to step (updated
    amid the terms, read after them), a boundary kept by concatenate."""
    def f(p):
        u = np.cos(np.linspace(0.0, 3.0, CELLS)).astype(p.dtype)
        loss = p[0] * 0.0
        s = p[1] * 1.0
        for _ in range(steps):
            n = CELLS - 2
            acc = u[1:-1] * p[1]
            for a, b, kind in terms:
                x, y = u[a:a + n], u[b:b + n]
                if kind == "add":
                    acc = acc + 0.1 * x + y * 0.05
                elif kind == "sub":
                    acc = acc - 0.05 * (x - y)
                elif kind == "mul":
                    acc = acc + 0.1 * x * y
                elif kind == "scalar":
                    s = s * 0.99 + 0.001
                    acc = acc + 0.1 * x
                elif kind == "where":
                    acc = np.where(x > y, acc + 0.01 * x, acc - 0.01 * y)
                else:
                    acc = acc + p[0] * (x - 0.5 * y)
            if any(kind == "scalar" for _, _, kind in terms):
                acc = acc * s
            u = np.concatenate([u[:1], 0.5 * u[1:-1] + 0.01 * acc, u[-1:]])
            loss = loss + (u * u).mean()
        return loss
    return f


@pytest.fixture(params=[True, False], ids=["fused", "unfused"])
def fused(request, monkeypatch):
    """Runs fused (kernels/fusion.py) or not: MIN_RUN past any body's length."""
    if not request.param:
        monkeypatch.setattr(fusion, "MIN_RUN", 10 ** 9)
    return request.param


def _chunks_agree(c, points, got):
    """vmap's gradients (the bodies' chunk kernels) are the one-point calls' bit for bit."""
    np.testing.assert_array_equal(F.vmap(c.grad)(np.stack(points)).numpy(),
                                  np.stack([g.numpy() for _, g in got]))


def _burgers(p, cells=CELLS):
    u = np.sin(np.linspace(0.0, 2.0 * np.pi, cells)).astype(p.dtype)
    for _ in range(40):
        ux = np.concatenate([u[1:2] - u[0:1], 0.5 * (u[2:] - u[:-2]), u[-1:] - u[-2:-1]])
        uxx = np.concatenate([np.zeros(1, p.dtype), u[2:] - 2.0 * u[1:-1] + u[:-2],
                              np.zeros(1, p.dtype)])
        u = u - 0.01 * p[1] * u * ux + 0.01 * p[0] * uxx
    return (u * u).sum()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_stencil_run_is_one_loop_with_deferred_terms(loop_bodies, dtype):
    # u read at offsets 2, 0 and 1 in one run (uxx, then ux's middle): the later
    # instructions' terms would reach an element first, so the earlier ones go through
    # the buffer W, added after the loop in the unfused order; a boundary piece amid the
    # run is skipped over, its reverse run between the deferred terms
    x = np.array([0.3, 0.9], dtype)
    c, plain, points, got, lean = compiled_and_interpreted(_burgers, x)
    reverse = _function(lean.loop_code[1], "reverse")
    assert re.search(r"\bz\d+ = V\.dtype\.type\(", reverse)      # values as locals
    assert re.search(r"\ba\d+ = ", reverse)                        # adjoints as locals
    assert len(re.findall(r"\bW\[\d+ \+ k\] = ", reverse)) >= 2    # deferred terms
    # added back with the boundary pieces' terms in one pass over u's cells
    # (kernels/cell_adds.py); a chunk's code keeps its loops
    assert "for cell in range(" in reverse
    assert "for cell in range(" not in _function(lean.loop_code[1], "reverse_points")
    same_bits(plain, points, got)
    many = np.stack(points)                                  # (the chunk-of-points code)
    np.testing.assert_array_equal(F.vmap(c.grad)(many).numpy(),
                                  np.stack([g.numpy() for _, g in got]))


def test_fused_and_unfused_code_agree_and_fusing_shortens_the_body(loop_bodies,
                                                                  monkeypatch):
    terms = [(0, 2, "add"), (1, 0, "mul"), (2, 1, "sub")]
    x = np.array([0.3, 0.9])
    c, _, points, got, lean = compiled_and_interpreted(_stencil_model(terms), x)
    fused = lean.loop_code[1]
    monkeypatch.setattr(fusion, "MIN_RUN", 10 ** 9)
    _, _, _, plain_got, plain_lean = compiled_and_interpreted(_stencil_model(terms), x)
    unfused = plain_lean.loop_code[1]
    assert not re.search(r"\bz\d+ = ", unfused) and re.search(r"\bz\d+ = ", fused)
    assert fused.count("for k in range(") < unfused.count("for k in range(")
    for (v, g), (pv, pg) in zip(got, plain_got):
        np.testing.assert_array_equal(g.numpy(), pg.numpy())
        np.testing.assert_array_equal(v.numpy(), pv.numpy())


def _function(source, name):
    """The text of one generated function of a loop body's module."""
    start = source.index(f"def {name}(")
    return source[start:source.index("@numba.njit", start)]


def test_nothing_hoisted_out_of_the_loop_reads_what_the_loop_writes(loop_bodies, fused):
    # p[0] * (u[0:18] - 0.5 * u[0:18]) reads a split op's pieces: its first cell
    # computed from fixed slots, the rest from this step's u. Hoisting it out of the
    # loop as invariant read cells the loop had not written yet (an older bug of the
    # loop bodies, fused or not: values off in the 5th digit, or nan)
    f = _stencil_model([(1, 2, "mul"), (0, 1, "param"), (0, 0, "param")])
    x = np.array([0.3, 0.9])
    c, plain, points, got, lean = compiled_and_interpreted(f, x)
    same_bits(plain, points, got)
    eager = at.tensor(points[0], requires_grad=True)
    np.testing.assert_allclose(got[0][0].numpy(), f(eager).numpy(), rtol=1e-14)


def _scalar_amid_a_run(p):
    """Runs of 4-cell instructions with a scalar step (h, then g) computed amid each
    that a later member of the run reads, broadcast: it must be computed before the
    run's loop. (Twice in the step: wherever the loop's repetition is cut, one stays
    whole.)"""
    u = np.linspace(0.5, 1.0, 4).astype(p.dtype) * p[1]
    h, g = p[0] * 1.0, p[0] * 2.0
    loss = p[0] * 0.0
    for _ in range(40):
        a = u * 0.9                   # a member
        h = h * 0.99 + 0.001          # a scalar: not a member, skipped over
        b = a + 0.1                   # a member
        c = b * h                     # a member that reads h
        d = np.sin(c)
        g = g * 0.98 + 0.002
        e = d + 0.2
        u = e * g - 0.1 * c
        loss = loss + (u * u).sum()
    return loss


def test_a_run_never_reads_what_an_instruction_it_skips_over_writes(loop_bodies, fused):
    # h is skipped over (one cell), then b joins the run, then c, which reads h: c
    # joined because only the instructions skipped since the run's last member were
    # checked, so the run's loop read h before the code after it wrote h (an older bug
    # of fused bodies: an ODE solve's compiled value off in the 3rd digit)
    x = np.array([0.3, 0.9])
    c, plain, points, got, lean = compiled_and_interpreted(_scalar_amid_a_run, x)
    same_bits(plain, points, got)
    eager = at.tensor(points[0], requires_grad=True)
    np.testing.assert_allclose(got[0][0].numpy(), _scalar_amid_a_run(eager).numpy(),
                               rtol=1e-14)


def test_a_broadcast_operands_lanes_agree_with_the_interpreters(loop_bodies, fused):
    # a parameter broadcast into a where's branch and into a product: its terms go to
    # W and are summed in lanes after the loop (lane_sum), as the interpreter sums them
    x = np.array([1.0, 0.5, 0.7])
    c, plain, points, got, lean = compiled_and_interpreted(broadcast_where(np), x)
    assert "lane_sum(W, " in lean.loop_code[1]
    same_bits(plain, points, got)


def _dear(p):
    """Transcendentals and a non-integer power in the step (n-body's r2 ** 1.5)."""
    u = np.linspace(0.1, 1.0, 8).astype(p.dtype)
    for _ in range(40):
        r = (u * u + p[0]) ** 1.5
        u = u - 0.01 * np.sin(u) * p[1] / r + 0.001 * np.exp(-u)
    return (u * u).sum()


def test_a_body_reads_back_dear_values_instead_of_recomputing_them(loop_bodies, fused):
    # pow, sin and exp cost ~10 ns a call: the forward keeps their values (in V) and
    # the reverse reads them back; the cheap ops around them it recomputes
    x = np.array([0.3, 0.9])
    c, plain, points, got, lean = compiled_and_interpreted(_dear, x)
    reverse, forward = (_function(lean.loop_code[1], k) for k in ("reverse", "forward"))
    for dear in (f"binary_value({POW},", f"unary_value({SIN},", f"unary_value({EXP},"):
        assert dear in forward and dear not in reverse
    assert f"unary_value({NEG}," in reverse                 # (recomputed: cheap)
    same_bits(plain, points, got)


GRID = 6
SHIFTS = st.sampled_from([-2, -1, 1, 2])
ROLLS = st.lists(st.tuples(SHIFTS, st.sampled_from([0, 1]),
                           st.sampled_from(["add", "mul", "inner"])), min_size=1, max_size=4)


def _rolls_model(rolls, steps=30, grid=GRID):
    """A 2-D step of np.roll terms (gathers from the last step's grid; "inner": of a
    value of this step, which stays unfused), a fancy-indexed cell pattern with repeats
    (a gather whose sources repeat) and a parameter."""
    pick = np.array([3, 1, 1, 4, 0, 5] * grid * (grid // 6))

    def f(p):
        axis = np.linspace(-1.0, 1.0, grid)
        u = np.exp(-axis[:, None] ** 2 - 2.0 * axis[None, :] ** 2).astype(p.dtype)
        for _ in range(steps):
            acc = -4.0 * u
            for shift, axis_, kind in rolls:
                r = np.roll(u, shift, axis_)
                acc = acc + r if kind == "add" else acc + 0.1 * r * u if kind == "mul" \
                    else acc + 0.1 * np.roll(acc, shift, axis_)
            flat = u.reshape(-1)[pick].reshape(grid, grid)
            u = u + 0.05 * (p[0] * acc + p[1] * u * (1.0 - flat))
        return (u * u).mean()
    return f


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gathers_from_the_last_step_join_a_run(loop_bodies, dtype):
    # a 2-D np.roll is a gather: read from the last step's grid (V), it joins the run
    # (an element reads Vo[S[k]]) and its adjoint terms, added anywhere in the grid,
    # go to W and are added after the loop in the unfused order
    x = np.array([0.3, 0.9], dtype)
    c, plain, points, got, lean = compiled_and_interpreted(
        _rolls_model([(1, 0, "add"), (-1, 0, "add"), (1, 1, "add"), (-1, 1, "mul")]), x)
    forward, reverse = (_function(lean.loop_code[1], k) for k in ("forward", "reverse"))
    assert re.search(r"\bz\d+ = V\.dtype\.type\(Vo\[S\d+\[k\]\]\)", forward)
    assert "# GATHER" not in forward                     # (none left unfused)
    assert re.search(r"Go\[S\d+\[k\]\] \+= W\[\d+ \+ k\]", reverse)
    same_bits(plain, points, got)
    many = np.stack(points)                                  # (the chunk-of-points code)
    np.testing.assert_array_equal(F.vmap(c.grad)(many).numpy(),
                                  np.stack([g.numpy() for _, g in got]))
    eager = at.tensor(points[0], requires_grad=True)
    np.testing.assert_allclose(got[0][0].numpy(), _rolls_model(
        [(1, 0, "add"), (-1, 0, "add"), (1, 1, "add"), (-1, 1, "mul")])(eager).numpy(),
        rtol=1e-5 if dtype == np.float32 else 1e-13)


ADVECT_U0 = np.sin(np.linspace(0.0, 2.0 * np.pi, 40, endpoint=False)) + 0.5


def _advection(p):
    """1-D upwind advection on a periodic grid: differences by ``np.diff`` with
    ``append`` / ``prepend`` (a wrapped block: ``u[1:]`` then ``u[:1]``) and diffusion
    by ``np.roll``, a ``where`` picking the upwind side."""
    u = ADVECT_U0.astype(p.dtype)
    for _ in range(30):
        du = np.diff(u, append=u[:1])
        db = np.diff(u, prepend=u[-1:])
        flux = np.where(u > 0, db, du)
        u = u - p[0] * u * flux + p[1] * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return (u ** 2).sum()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_1d_roll_and_a_periodic_diff_stay_gathers_and_join_the_step_s_run(loop_bodies,
                                                                            dtype):
    # copies of a roll's two runs cut every instruction reading it into pieces (a
    # 64-cell advection step: 53 one-cell instructions); one gather of the last step's
    # grid keeps every instruction over all 40 cells, and the step fuses
    x = np.array([0.05, 0.1], dtype)
    c, plain, points, got, lean = compiled_and_interpreted(_advection, x)
    body = lean.instr[lean.loop[0]:lean.loop[0] + lean.loop[1]]
    assert set(body[body[:, I_OP] != COPY, I_N].tolist()) == {40}   # (p[0], p[1]: one)
    forward = _function(lean.loop_code[1], "forward").split("for t in range(")[1]
    assert "# GATHER" not in forward            # (fused: its index runs, 1 + 38 + 1 cells,
    assert len(re.findall(r"for k in range\(", forward)) == 3    # one loop each)
    same_bits(plain, points, got)
    _chunks_agree(c, points, got)
    eager = at.tensor(points[0], requires_grad=True)
    np.testing.assert_allclose(got[0][1].numpy(), at.grad(_advection(eager), eager)[0]
                               .numpy(), rtol=1e-4 if dtype == np.float32 else 1e-12)


def test_the_rolls_of_a_larger_grid_scatter_over_runs(loop_bodies):
    # on an 18 x 18 grid a roll's runs (17 cells in order, one wrapped) average over
    # INDEX_RUN_MEAN_MIN: the three rolls' adjoint terms (along rows too: one block
    # reordered, a gather), and the in-order one between them, reach the grid in one
    # loop through the inverse permutations
    # (kernels/cell_adds.py); pick's stays an index array; the values of this step that
    # the reverse reads and that read the rolls the forward keeps, so that no gather
    # runs again in the reverse; the interpreter's bits
    x = np.array([0.3, 0.9])
    c, plain, points, got, lean = compiled_and_interpreted(
        _rolls_model([(1, 0, "add"), (-1, 1, "mul"), (1, 1, "add")], steps=20, grid=18), x)
    reverse = _function(lean.loop_code[1], "reverse")
    assert "# GATHER" not in reverse and "Vo[S" not in reverse
    assert len(re.findall(r"acc = V\.dtype\.type\(acc \+ \(W\[\d+ \+ R\d+\[k\]\]\)\)",
                          reverse)) == 3
    assert re.search(r"Go\[S\d+\[k\]\] \+= W\[\d+ \+ k\]", reverse)       # (pick's)
    same_bits(plain, points, got)
    _chunks_agree(c, points, got)


HEAT2D_AXIS = np.linspace(-1.0, 1.0, GRID + 2)
HEAT2D_SOURCE = np.exp(-(HEAT2D_AXIS[:, None] - 0.3) ** 2 - 2.0 * HEAT2D_AXIS[None, :] ** 2)
HEAT2D_PROBE = np.exp(-HEAT2D_AXIS[:, None] ** 2 - HEAT2D_AXIS[None, :] ** 2)


def _heat_2d(p):
    """A 2-D heat step of rolls on both axes with a source (a constant grid, recorded
    afresh in each step), and a probe's mean reading summed in the loop."""
    u = np.outer(np.sin(HEAT2D_AXIS + 1.5), np.sin(HEAT2D_AXIS + 1.5)).astype(p.dtype)
    total = p[0] * 0.0
    for _ in range(30):
        lap = np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) \
            - 4.0 * u
        u = u + 0.1 * (p[0] * lap + p[1] * HEAT2D_SOURCE.astype(p.dtype) - 0.01 * u)
        total = total + (u * HEAT2D_PROBE.astype(p.dtype)).mean()
    return total


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_heat_step_sums_in_its_loop_and_keeps_what_its_reverse_reads_of_rolls(
        loop_bodies, dtype):
    # the probe's mean adds each cell as the run's loop computes it (no loop of its
    # own), then divides; the Laplacian, which p[0]'s adjoint reads, the forward keeps (it
    # read the rolls: recomputed, they would be gathered again), and nothing else but
    # the state (0.1 * (...) reads (...) only for the constant's adjoint); the source's
    # copies of each step leave no slots behind; the interpreter's bits
    x = np.array([0.3, 0.9], dtype)
    c, plain, points, got, lean = compiled_and_interpreted(_heat_2d, x)
    forward, reverse, chunk = (_function(lean.loop_code[1], k) for k in (
        "forward", "reverse", "forward_points"))
    summed = r"sum\d+ = V\.dtype\.type\(sum\d+ \+ f64\(z\d+\)\)  # SCATTER_ADD"
    assert len(re.findall(summed, forward)) == 1 and re.search(r"= sum\d+ / 64\.0", forward)
    assert not re.search(r"\+ f\)?\] \+= ", forward)           # (no loop of pairs)
    assert len(re.findall(r"\+ f64\(z\d+\)\)  # SCATTER_ADD", chunk)) == 1   # (a chunk's:
    assert not re.search(r"\+ f\)?\] \+= ", chunk)             # in the sum's cell)
    assert "# GATHER" not in reverse and "Vo[S" not in reverse
    stored = re.findall(r"\bVo(?:_\d+)?\[(\d+) \+ [^\]]*\] = z\d+", forward)
    assert len(set(stored)) == 2, stored
    first = int(lean.instr[:, I_OUT].min())
    sources = set(lean.in_slots.tolist()) | set(lean.const_slots.tolist())
    assert set(range(first)) <= sources
    same_bits(plain, points, got)
    many = np.stack(points)
    np.testing.assert_array_equal(F.vmap(c.grad)(many).numpy(),
                                  np.stack([g.numpy() for _, g in got]))
    eager = at.tensor(points[0], requires_grad=True)
    value = _heat_2d(eager)
    value.backward()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got[0][0].numpy(), value.numpy(), rtol=tol)
    np.testing.assert_allclose(got[0][1].numpy(), eager.grad.numpy(), rtol=tol)


def _sum_of_state(p):
    """A 1-D step whose new state itself (kept: the next step reads it) is summed in the
    loop."""
    u = np.cos(np.linspace(0.0, 3.0, CELLS)).astype(p.dtype)
    total = p[0] * 0.0
    for _ in range(30):
        u = u + 0.05 * (p[0] * u * (1.0 - u) - p[1] * u)
        total = total + u.mean()
    return total


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_sum_of_the_state_adds_up_in_the_step_s_loop(loop_bodies, dtype):
    x = np.array([0.3, 0.9], dtype)
    c, plain, points, got, lean = compiled_and_interpreted(_sum_of_state, x)
    forward = _function(lean.loop_code[1], "forward")
    assert len(re.findall(r"sum\d+ = V\.dtype\.type\(sum\d+ \+ f64\(z\d+\)\)", forward)) == 1
    assert not re.search(r"\+ f\)?\] \+= ", forward)
    same_bits(plain, points, got)
    _chunks_agree(c, points, got)


@settings(max_examples=16, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(TERMS.map(_stencil_model), ROLLS.map(_rolls_model)))
def test_random_stencils_and_rolls_keep_the_interpreters_bits(loop_bodies, model):
    # stencils of slices at drawn offsets and ops; 2-D rolls of the last step's grid
    # (fused gathers) and of this step's values (not fused)
    x = np.array([0.3, 0.9])
    c, plain, points, got, lean = compiled_and_interpreted(model, x)
    same_bits(plain, points, got)


def _dense_output(p):
    """An adaptive solve with outputs at 5 times: per attempt each stage feeds a product
    per coefficient of the dense output's polynomial (integrate._extension), so the
    stage's adjoint takes several deferred terms, of which the first (in the sweep's
    order) assigns."""
    sol = solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), np.array([1.0, 2.0]),
                    t_eval=np.linspace(0.0, 1.0, 5), args=(p,), rtol=1e-6, atol=1e-9,
                    max_steps=40)
    return (sol.y ** 2).sum()


def test_a_deferred_first_term_assigns_after_the_loop(loop_bodies, fused, monkeypatch):
    # (cut as without lifting: with it, the run's terms first reach memory, not a
    # temporary's adjoint)
    monkeypatch.setattr(fusion, "_liftable", lambda *args: False)
    c, plain, points, got, lean = compiled_and_interpreted(_dense_output, np.array([1.3]))
    same_bits(plain, points, got)
    reverse = lean.loop_code[1].split("def reverse(")[1].split("\ndef ")[0]
    assert re.search(r"GT\[\d+ \+ k\] = W\[", reverse) or not fused


def test_instructions_over_all_cells_cut_like_the_boundary_pieces_join_one_run(loop_bodies):
    # c * u (40 cells) read by the pieces of c * u * ux (1 + 38 + 1), and u - c * u * ux
    # reading them: cut alike (kernels/pieces.py), the 38-cell pieces fuse into one
    # element loop a step in each direction; the interpreter's bits
    x = np.array([0.3, 0.9])
    c, plain, points, got, lean = compiled_and_interpreted(lambda p: _burgers(p, 40), x)
    widths = lean.instr[lean.loop[0]:lean.loop[0] + lean.loop[1], I_N]
    assert sorted(set(widths.tolist())) == [1, 38]
    forward, reverse = (_function(lean.loop_code[1], k) for k in ("forward", "reverse"))
    assert forward.count("for k in range(38):") == 1
    assert reverse.count("for k in range(38):") <= 3
    same_bits(plain, points, got)


def test_instructions_over_a_few_cells_are_not_cut(loop_bodies):
    # 20 cells (under PIECES_MIN_CELLS): a boundary line in each direction per cut
    # instruction cost more than the shorter loops saved
    c, plain, points, got, lean = compiled_and_interpreted(_burgers, np.array([0.3, 0.9]))
    widths = lean.instr[lean.loop[0]:lean.loop[0] + lean.loop[1], I_N]
    assert 20 in widths.tolist()
    same_bits(plain, points, got)


def _heat(p):
    u = np.exp(-np.linspace(-3.0, 3.0, 48) ** 2).astype(p.dtype)
    for i in range(30):
        lap = np.concatenate([u[1:2] - u[0:1], u[2:] - 2.0 * u[1:-1] + u[:-2],
                              u[-2:-1] - u[-1:]])
        u = u + p[0] * lap + 0.001 * p[1] * np.sin(0.01 * i) * u
    return (u * u).sum()


def test_cuts_carry_on_through_what_they_cut(loop_bodies):
    # u + p0 * lap is cut as it reads lap's pieces, then the sum with c * u as it reads
    # those, then c * u as the sum's pieces read it: every instruction of the step is
    # pieces of 1 + 46 + 1 cells (cut halfway, the step kept a loop over 48 cells and
    # took 3% longer than uncut)
    c, plain, points, got, lean = compiled_and_interpreted(_heat, np.array([0.2, 0.5]))
    widths = lean.instr[lean.loop[0]:lean.loop[0] + lean.loop[1], I_N]
    assert sorted(set(widths.tolist())) == [1, 46]
    assert "range(48)" not in _function(lean.loop_code[1], "forward")
    same_bits(plain, points, got)


def _oscillators(p):
    """Cubic oscillators forced from the loop index (a Duffing model): powers with
    literal exponents 3 and 2 and a non-integer one, parameters read in every cell."""
    x, v = np.linspace(-1.0, 1.0, 12).astype(p.dtype), np.zeros(12, p.dtype)
    for k in range(30):
        a = -p[0] * v - p[1] * x - p[2] * x ** 3 + 0.3 * float(np.cos(1.2 * k * 0.01)) \
            + 0.01 * (x * x + 1.0) ** 2.5 - 0.01 * v ** 2
        v = v + 0.01 * a
        x = x + 0.01 * v
    return (x * x).mean()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_constant_exponents_are_literals_and_parameters_load_before_the_loop(
        loop_bodies, dtype):
    # x ** 3's partial branches on the exponent: read from V at run time it kept the
    # element loop scalar (44 -> 26 us a cubic oscillator's reverse); a parameter read
    # in every cell was reloaded per element (LLVM cannot tell it from the cells the
    # loop stores)
    x = np.array([0.1, -1.0, 1.0]).astype(dtype)
    c, plain, points, got, lean = compiled_and_interpreted(_oscillators, x)
    forward, reverse = (_function(lean.loop_code[1], k) for k in ("forward", "reverse"))
    for exponent in ("3.0", "2.0", "2.5"):
        assert f"binary_value({POW}, f64(Vo[" in forward
        assert re.search(rf"binary_value\({POW}, [^\n]*, f64\({re.escape(exponent)}\)\)",
                         forward), exponent
    assert not re.search(rf"binary_value\({POW}, [^\n]*V\[", forward)  # (no exponent read)
    # a cube and a square recomputed by the reverse (a product or two), the x ** 2.5 read
    # back (a libm pow)
    assert re.search(rf"binary_value\({POW}, [^\n]*f64\(3\.0\)", reverse)
    assert not re.search(rf"binary_value\({POW}, [^\n]*f64\(2\.5\)", reverse)
    for text in (forward, reverse):
        for loop in re.finditer(r"\n(\s*)for k in range\(\d+\):\n((?:\1    .*\n)+)", text):
            assert not re.search(r"f64\(V\[\d+\]\)", loop.group(2)), loop.group(0)
    same_bits(plain, points, got)


def _forced(p):
    """Oscillators whose forcing ``f`` (a parameter times the loop index's cosine: a
    per-step constant) is computed between the two halves of the step, one of which
    multiplies by it (its VJP reads f's value)."""
    x, v = np.linspace(-1.0, 1.0, 12).astype(p.dtype), np.zeros(12, p.dtype)
    for k in range(30):
        a = -p[0] * v - p[1] * x ** 3
        f = p[2] * float(np.cos(1.2 * k * 0.01))
        v = v + 0.01 * (a + f)
        x = x + 0.01 * v * f
    return (x * x).mean()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_term_amid_a_run_that_reads_none_of_it_runs_before_its_loop(loop_bodies, dtype):
    # f, computed amid the step's element loop and read by its second half, cut it in
    # two (the oscillators' forward 12 -> 8 us as one); lifted before the loop, the
    # step is one loop each way, the interpreter's bits
    x = np.array([0.1, 1.0, 0.3]).astype(dtype)
    c, plain, points, got, lean = compiled_and_interpreted(_forced, x)
    for name in ("forward", "reverse"):                  # (the reverse's other loops
        step = _function(lean.loop_code[1], name).split("for t in range(")[1]  # add W's
        assert len(re.findall(r"for k in range\(12\):\n\s+[az]\d+ = ", step)) == 1, name
    same_bits(plain, points, got)
    _chunks_agree(c, points, got)


def test_another_exponent_is_another_module(loop_bodies):
    def f(e):
        def model(p):
            u = np.linspace(0.5, 1.5, 8)
            for _ in range(80):
                u = u - 0.01 * p[0] * u ** e + 0.001 * p[0]
            return u.sum()
        return model
    x = np.array([0.7])
    sources = []
    for e in (3.0, 1.5):
        c, plain, points, got, lean = compiled_and_interpreted(f(e), x)
        same_bits(plain, points, got)
        sources.append(lean.loop_code[1])
    assert sources[0] != sources[1]


NODES = 12
_LINKS = (np.random.default_rng(3).random((NODES, NODES)) < 0.3).astype(float)


def _network(p):
    """An epidemic on a network: ``A @ i`` (a row of products summed into each cell),
    a whole sum of the state in the step too, and a mean (a divided row sum)."""
    links = _LINKS.astype(p.dtype)
    s, i = np.full(NODES, 0.99, p.dtype), np.full(NODES, 0.01, p.dtype)
    total = p[0] * 0.0
    for _ in range(30):
        new = np.clip(p[0] * (links @ i) * s, 0.0, None) * 0.1
        s, i = s - new, i + new - p[1] * i * 0.1
        total = total + (i * i).sum() + (links * i).mean(axis=1)[3]
    return total


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_matrix_vector_product_sums_its_rows_in_the_step_s_loop(loop_bodies, dtype):
    # each row's products summed as they are computed, not stored and read back by a
    # scatter's loop (a 20-node epidemic's forward 82 -> 34 us), in the same order
    x = np.array([0.8, 0.3], dtype)
    c, plain, points, got, lean = compiled_and_interpreted(_network, x)
    forward = _function(lean.loop_code[1], "forward")
    assert re.search(rf"for kr in range\({NODES}\):\n\s+sum\d+ = 0\.0\n\s+for kc in "
                     rf"range\({NODES}\):\n\s+k = kr \* {NODES} \+ kc\n", forward)
    # and the products' adjoints are read from their rows' in the run's reverse loop, not
    # stored cell by cell by the sum's reverse first (the epidemic's reverse 104 -> 59 us)
    reverse = _function(lean.loop_code[1], "reverse")
    for d in ("1.0", f"{NODES}.0"):
        assert re.search(rf"a\d+ = V\.dtype\.type\(0\.0 \+ f64\(\w+\[\d+ \+ k // {NODES}\]\) "
                         rf"/ {re.escape(d)}\)", reverse), d
    same_bits(plain, points, got)
    _chunks_agree(c, points, got)

