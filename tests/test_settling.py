"""A compiled loop stops where its state settles, with every repetition's answers
(kernels/settling.py): the same bits as the interpreter, which runs them all."""
import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.integrate import solve_ivp
from autotape.kernels.instruction_format import I_B, as_instructions, encode_elementwise
from autotape.kernels.loops import _Body, constant_table
from autotape.kernels.driver import load_points
from autotape.kernels.program import forward_range
from autotape.opcodes import ADD, MUL


def _newton_sqrt(p):
    """sqrt(p0) by 100 Newton steps (exact in ~6): its passes back multiply by the step's
    Jacobian, 0 at the root, so the sweep of the settled copies stops after one."""
    x = p[0] * 0.0 + 1.0
    for _ in range(100):
        x = 0.5 * (x + p[0] / x)
    return x * p[1]


def _doubling(p):
    """x = 2 x from x = p0 - 1 = 0: settled from the first repetition, yet each pass back
    doubles the adjoint (d/dp0 = 2 ** 300): every copy must be swept."""
    x = p[0] - 1.0
    for _ in range(300):
        x = 2.0 * x
    return x + p[1]


def _powers(p):
    """x = x p0 from x = 1 at p0 = 1: settled, the state's adjoint passes unchanged, but
    each pass adds to p0's (d/dp0 = 300): no pass changes nothing."""
    x = p[0] * 0.0 + 1.0
    for _ in range(300):
        x = x * p[0]
    return x * p[1]


def _two_back(p):
    """x_{k+1} = sin(x_k) / 2 + cos(x_{k-1}) / 4: two values carried from step to step."""
    x, previous = p[0] * 0.0 + 1.0, p[1] * 1.0
    for _ in range(100):
        x, previous = 0.5 * at.sin(x) + 0.25 * at.cos(previous), x
    return x


def _decay(p):
    """An adaptive solve past its end: the attempts after it are steps of size 0."""
    sol = solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), np.array([1.0, 2.0]),
                    t_eval=np.linspace(0.0, 1.0, 5), args=(p,), rtol=1e-6, atol=1e-9,
                    max_steps=60)
    return (sol.y ** 2).sum()


def _lean(c, x):
    return c._lean("value", [x]).lean


def _repetitions_run(lean, x):
    """How many repetitions the compiled body's forward runs at x."""
    V = np.full(lean.nslots, np.nan)
    load_points(V, 1, 0, 1, lean.const_slots, lean.const_vals, lean.in_slots,
                x.reshape(1, -1), 0)
    start, _, repeats, delta = lean.loop
    forward_range(lean.instr, lean.pool, lean.divisor, V, 0, start)
    return lean.loop_kernels[0][0](V, delta, 0, repeats, 0, lean._table_base(), 1)


def _interpreted(f, x):
    plain = at.compile(f, x)
    for p in plain._programs.values():
        p.lean.loop = None
    return plain


CASES = [(_newton_sqrt, np.array([2.0, 3.0]), 100), (_doubling, np.array([1.0, 0.5]), 300),
         (_powers, np.array([1.0, 2.0]), 300), (_decay, np.array([1.3]), 60)]


@pytest.mark.parametrize("f, x, repeats", CASES, ids=["newton", "doubling", "powers", "ode"])
def test_a_settled_loop_gives_the_interpreters_bits(f, x, repeats, loop_bodies):
    c = at.compile(f, x)
    for _ in range(5):
        value, grad = c.value_and_grad(x)
    lean = _lean(c, x)
    assert lean.loop_kernels is not None and lean.loop[2] >= 0.9 * repeats
    ran = _repetitions_run(lean, x)
    assert 2 <= ran < lean.loop[2] - 1                    # (it stopped early)
    want_value, want_grad = _interpreted(f, x).value_and_grad(x)
    np.testing.assert_array_equal(value.numpy(), want_value.numpy())
    np.testing.assert_array_equal(grad.numpy(), want_grad.numpy())


def test_the_copies_left_out_are_swept_back_as_often_as_they_would_have_run(loop_bodies):
    # (leaving the passes out would give 2 ** ran and 2 * ran instead)
    c = at.compile(_doubling, np.array([1.0, 0.5]))
    for _ in range(5):
        g = c.grad(np.array([1.0, 0.5])).numpy()
    assert g[0] == 2.0 ** 300 and g[1] == 1.0
    c = at.compile(_powers, np.array([1.0, 2.0]))
    for _ in range(5):
        g = c.grad(np.array([1.0, 2.0])).numpy()
    assert g[0] == 600.0 and g[1] == 1.0


def test_a_newton_iterations_gradient_is_the_implicit_one(loop_bodies):
    c = at.compile(_newton_sqrt, np.array([2.0, 3.0]))
    for _ in range(5):
        g = c.grad(np.array([2.0, 3.0])).numpy()
    np.testing.assert_allclose(g, [3.0 * 0.5 / np.sqrt(2.0), np.sqrt(2.0)], rtol=1e-15)


def test_points_settle_each_at_their_own_repetition(loop_bodies):
    # chunks of points stop where all of theirs have settled; one at a time, each its own
    x = np.array([2.0, 3.0])
    points = np.array([[2.0, 3.0], [5.0, 1.0], [1e6, 2.0], [0.25, 0.5], [7.0, 7.0]])
    c = at.compile(_newton_sqrt, x)
    for _ in range(5):
        values, grads = F.vmap(c.value_and_grad)(points)
    assert _lean(c, x).loop_kernels is not None
    plain = _interpreted(_newton_sqrt, x)
    want_values, want_grads = F.vmap(plain.value_and_grad)(points)
    np.testing.assert_array_equal(values.numpy(), want_values.numpy())
    np.testing.assert_array_equal(grads.numpy(), want_grads.numpy())
    for point, g in zip(points, grads.numpy()):
        np.testing.assert_array_equal(g, c.grad(point).numpy())


def test_a_loop_reading_two_repetitions_back_never_settles(loop_bodies):
    # x_{t+1} = x_t + x_{t-1}, as instructions: a repetition's result fixes not all it
    # reads next, so its state's bits repeating once proves nothing
    code, repeats = [], 20
    for t in range(repeats):
        encode_elementwise(code, ADD, 2 + t, 1, 1 + t, t, -1, 1, 1, 0)
    instr = as_instructions(code)
    body = _Body(instr, 0, 1, repeats, 1, set(), {repeats + 1}, pool=np.zeros(1, np.int64),
                 active=np.ones(repeats + 2, bool))
    assert not body.settles
    one_back = _Body(instr, 1, 1, repeats - 1, 1, set(), {repeats + 1},
                     pool=np.zeros(1, np.int64), active=np.ones(repeats + 2, bool))
    assert not one_back.settles
    # (the same with x_{t+1} = 2 x_t does)
    code = []
    for t in range(repeats):
        encode_elementwise(code, ADD, 2 + t, 1, 1 + t, 1 + t, -1, 1, 1, 0)
    doubling = _Body(as_instructions(code), 0, 1, repeats, 1, set(), {repeats + 1},
                     pool=np.zeros(1, np.int64), active=np.ones(repeats + 2, bool))
    assert doubling.settles and doubling.state == [2] and doubling.active_state == [2]


def test_a_loop_with_two_states_gives_the_interpreters_bits(loop_bodies):
    x = np.array([1.0, 3.0])
    c = at.compile(_two_back, x)
    for _ in range(5):
        value, grad = c.value_and_grad(x)
    assert _lean(c, x).loop_kernels is not None
    want_value, want_grad = _interpreted(_two_back, x).value_and_grad(x)
    np.testing.assert_array_equal(value.numpy(), want_value.numpy())
    np.testing.assert_array_equal(grad.numpy(), want_grad.numpy())


def test_a_checkpointed_settling_loop_runs_every_repetition(loop_bodies):
    x = np.array([2.0, 3.0])
    c = at.compile(_newton_sqrt, x, checkpoint="sqrt")
    plain = at.compile(_newton_sqrt, x)
    for _ in range(5):
        g = c.grad(x)
        want = plain.grad(x)
    np.testing.assert_array_equal(g.numpy(), want.numpy())


@pytest.mark.parametrize("f, x", [(c[0], c[1]) for c in CASES[:3]],
                         ids=["newton", "doubling", "powers"])
def test_forward_mode_through_a_settled_loop_gives_the_interpreters_bits(f, x, loop_bodies):
    # its tangents settle too (Newton's), or the loop runs on (the doubling's tangent
    # doubles with every repetition; an ODE solve's body takes two minutes to compile)
    c = at.compile(f, x)
    for _ in range(5):
        jac = c.jacfwd(x)
    assert ("tangent" in {group for _, group in _lean(c, x).loop_ready})
    np.testing.assert_array_equal(jac.numpy(), _interpreted(f, x).jacfwd(x).numpy())


def test_forward_mode_at_points_that_settle_apart(loop_bodies):
    x = np.array([2.0, 3.0])
    points = np.array([[2.0, 3.0], [5.0, 1.0], [1e6, 2.0], [0.25, 0.5]])
    c = at.compile(_newton_sqrt, x)
    for _ in range(5):
        jacs = F.vmap(c.jacfwd)(points)
    np.testing.assert_array_equal(jacs.numpy(), F.vmap(_interpreted(_newton_sqrt, x).jacfwd)(
        points).numpy())


def test_a_constant_operand_with_the_same_bits_in_every_repetition_reads_one_slot():
    # x_{t+1} = x_t * c_t with c_t a constant of its own in each repetition (slots 0-3):
    # equal values read the first one's slot (no per-repetition table, repetitions that
    # are alike); values that differ (t = i h) stay a table; -0.0 is not 0.0
    def program(values):
        code = []
        for t in range(4):
            encode_elementwise(code, MUL, 5 + t, 1, 4 + t, t, -1, 1, 1, 0)
        instr = as_instructions(code)
        constant = np.zeros(9, bool)
        constant[:4] = True
        entries, table = constant_table(instr, (0, 1, 4, 1), constant,
                                        np.arange(4), np.array(values))
        return instr, entries, table
    instr, entries, _ = program([0.5, 0.5, 0.5, 0.5])
    assert entries == {} and (instr[:, I_B] == 0).all()
    for values in ([0.5, 0.5, 0.25, 0.5], [0.0, 0.0, -0.0, 0.0]):
        instr, entries, table = program(values)
        assert entries == {(0, I_B): (0, 1)} and list(instr[:, I_B]) == [0, 1, 2, 3]
        np.testing.assert_array_equal(table[:, 0], values)


def _halving_read_at(reads):
    """x = x / 2 + p1 cos(p2), settled after ~60 of 200 repetitions; the code after the
    loop reads x^2 of every repetition (like an ODE solve's table of steps), weighing
    those of ``reads`` only."""
    weights = np.zeros(200)
    weights[reads] = np.asarray(reads) + 1.0

    def f(p):
        x, seen = p[0], []
        for _ in range(200):
            x = 0.5 * x + p[1] * at.cos(p[2])
            seen.append(x * x)
        return x * 3.0 + (at.stack(seen) * weights).sum()
    return f


@pytest.mark.parametrize("reads", [[3, 10, 40], [3, 150, 190], [198]],
                         ids=["before", "left-out", "last-but-one"])
def test_reads_of_earlier_repetitions_after_a_settled_loop_give_the_interpreters_bits(
        reads, loop_bodies):
    # the repetitions left out are filled for the code after the loop; where it gives
    # one of them an adjoint, every repetition runs again and is swept
    f, x = _halving_read_at(reads), np.array([0.5, 0.9, 0.1])
    points = np.stack([x, x * 1.1, x * 0.9])
    c = at.compile(f, x)
    for _ in range(5):
        value, grad = c.value_and_grad(x)
    lean = _lean(c, x)
    assert lean.loop_kernels is not None
    assert 2 <= _repetitions_run(lean, x) < lean.loop[2] - 10
    plain = _interpreted(f, x)
    want_value, want_grad = plain.value_and_grad(x)
    np.testing.assert_array_equal(value.numpy(), want_value.numpy())
    np.testing.assert_array_equal(grad.numpy(), want_grad.numpy())
    assert grad.numpy()[1] > 3.0 * 2.0 * 0.99         # (the reads' adjoints count)
    values, grads = F.vmap(c.value_and_grad)(points)
    want_values, want_grads = F.vmap(plain.value_and_grad)(points)
    np.testing.assert_array_equal(values.numpy(), want_values.numpy())
    np.testing.assert_array_equal(grads.numpy(), want_grads.numpy())
    np.testing.assert_array_equal(c.jacfwd(x).numpy(), plain.jacfwd(x).numpy())
