"""The whole program as generated numba code on the CPU (codegen.py, target "cpu"): a
compiled function whose recording has a loop runs, once the code is compiled, as one
njit function per kind (values, reverse, forward mode): every slot a local, the loop a
loop, every repetition's state kept for the reverse sweep. Its answers equal the
interpreter's bit for bit (the same op functions in the same order, no contraction)."""
import functools
import math
import os
import pickle
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import autotape as at
import autotape.func as F
from autotape import codegen, program
from autotape.kernels import background
from autotape.kernels.instruction_format import I_OP
from autotape.opcodes import EXP, SIN
from autotape.tuning import OWN_SCRATCH_MAX
from programs import LOOP_BODIES, broadcast_where, loop_model, loss_in_the_loop
from test_background import THETA, _model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import workloads as W  # noqa: E402


def _lean(c, x):
    return c._lean("value", [x]).lean


def _twins(f, x):
    """c runs generated code (compiled now), twin the interpreter and loop bodies."""
    c, twin = at.compile(f, x), at.compile(f, x)
    _lean(twin, x).codegen = {"plan": codegen.Unsupported("the test's interpreter twin")}
    c.wait_compiled()
    return c, twin


def _identical(c, twin, points, methods):
    for method in methods:
        for k in range(len(points)):               # one point at a time
            want = at.func.flatten(getattr(twin, method)(points[k]))[0]
            got = at.func.flatten(getattr(c, method)(points[k]))[0]
            for w, g in zip(want, got):
                np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=method)
        want = at.func.flatten(F.vmap(getattr(twin, method))(points))[0]
        got = at.func.flatten(F.vmap(getattr(c, method))(points))[0]
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=f"vmap {method}")


def _ran_generated(c, x, lanes=0):
    kept = _lean(c, x).codegen or {}
    return ("cpu", "reverse") in kept and (not lanes or ("cpu", "tangent", lanes) in kept)


def test_the_driven_pendulum_bit_for_bit():
    th = W.thetas(5)
    c, twin = _twins(lambda t: W.driven_pendulum_at(t, 60), th[0])
    _identical(c, twin, th, ("__call__", "value_and_grad", "jacfwd", "hessian"))
    assert _ran_generated(c, th[0], 4)


_loss_in_the_loop = loss_in_the_loop(at)


def test_several_outputs_a_loss_in_the_loop_and_nan():
    th = W.thetas(4)
    th[1, 0] = np.nan
    c, twin = _twins(_loss_in_the_loop, th[0])
    _identical(c, twin, th, ("__call__", "jacobian", "jacrev", "jacfwd"))
    assert _ran_generated(c, th[0], 4)


def test_arrays_in_the_loop():
    def f(k):
        x = at.tensor(np.linspace(0.0, 1.0, 6)) * k[0]
        v = x * 0.0
        for _ in range(25):
            v = v + 0.01 * (at.concatenate([x[1:] - x[:-1], x[:1] * 0.0]) * k[1] - x * k[2])
            x = x + 0.01 * v
        return (x * x).sum() + v.mean()
    ks = np.array([1.0, 2.0, 0.5]) * np.random.default_rng(1).uniform(0.8, 1.2, (3, 3))
    c, twin = _twins(f, ks[0])
    _identical(c, twin, ks, ("value_and_grad", "jacfwd"))
    assert _ran_generated(c, ks[0], 3)


def test_a_where_with_a_constant_branch_in_the_loop():
    # the constant branch has no adjoint: its loop body wrote "None += ..." (a
    # SyntaxError at the second call of a compiled adaptive ODE solve)
    def f(k):
        x, y = k[0], k[1]
        for _ in range(40):
            accept = at.where(x * y > 0.5, 1.0, 0.0)
            x = at.where(accept > 0.5, x * 0.99 + 0.01 * y, x)
            y = y * 0.98 + 0.02 * accept
        return x * y
    ks = np.array([[1.0, 0.8], [0.2, 0.3], [0.9, 0.4]])
    c, twin = _twins(f, ks[0])
    _identical(c, twin, ks, ("value_and_grad",))


def test_a_broadcast_operand_in_the_loop_and_in_a_where():
    ks = np.array([1.0, 0.5, 0.7]) * np.random.default_rng(4).uniform(0.8, 1.2, (3, 3))
    c, twin = _twins(broadcast_where(at), ks[0])
    _identical(c, twin, ks, ("value_and_grad",))
    assert _ran_generated(c, ks[0])


@settings(max_examples=6, deadline=None)
@given(*LOOP_BODIES)
def test_random_loop_bodies(ops, steps):
    # a random update of a three-value state, repeated: the loop finder, the carried
    # values and the sweep against the interpreter
    f = loop_model(at, ops, steps)
    points = np.random.default_rng(2).uniform(-1.0, 1.0, (3, 3))
    c, twin = _twins(f, points[0])
    _identical(c, twin, points, ("value_and_grad",))


def test_compiled_beside_the_calls_then_switched_to(monkeypatch, capfd,
                                                   compiled_function_kernels):
    # a body no earlier run compiled: the calls run the interpreter (bit for bit the
    # generated code's answers) while a helper process compiles it, then switch
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    model = _model(int.from_bytes(os.urandom(6), "little"))
    c = at.compile(model, THETA)
    lean = _lean(c, THETA)
    got = []
    for s in (1.0, 1.1, 0.9):
        start = time.perf_counter()
        got.append(c.value_and_grad(THETA * s)[1].numpy())
        assert time.perf_counter() - start < 1.0            # no call waits on numba
    assert lean.compiled_code() is None                      # (the helper takes seconds)
    assert "beside the calls" in capfd.readouterr().err
    job = next(k for k in background._jobs if k.startswith("generated "))
    assert background.wait(job) == background.DONE
    again = [c.value_and_grad(THETA * s)[1].numpy() for s in (1.0, 1.1, 0.9)]
    assert lean.compiled_code() == "generated"
    np.testing.assert_array_equal(again, got)


def test_waiting_calls_write_the_code_once_and_look_now_and_then(monkeypatch):
    # while a helper compiles the code, a call costs what the interpreter costs: the
    # code is written once (~2 ms a time), the cache looked at once every LOOK_EVERY
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    written, looks = [], []
    source = codegen.reverse_source
    monkeypatch.setattr(codegen, "reverse_source",
                        lambda *a: written.append(a) or source(*a))
    monkeypatch.setattr(codegen, "cpu_module", lambda *a, **k: looks.append(a))  # (never ready)
    monkeypatch.setattr(program, "LOOK_EVERY", 3600.0)
    th = W.thetas(2)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 30), th[0])
    want = c.value_and_grad(th[1])[1].numpy()
    for _ in range(6):
        np.testing.assert_array_equal(c.value_and_grad(th[1])[1].numpy(), want)
    assert len(written) == 1 and len(looks) == 1
    _lean(c, th[1]).next_look -= 3600.0          # (the hour has passed)
    c.value_and_grad(th[1])
    assert len(written) == 1 and len(looks) == 2


def test_autotape_generated_0_turns_it_off(monkeypatch):
    monkeypatch.setenv(program.GENERATED_ENV, "0")
    th = W.thetas(1)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 40), th[0]).wait_compiled()
    c.value_and_grad(th[0])
    assert not _ran_generated(c, th[0])
    assert _lean(c, th[0]).loop_ready                     # (the loop body instead)


def test_a_pickled_function_generates_again():
    th = W.thetas(2)
    c = at.compile(lambda t: W.driven_pendulum_at(t, 30), th[0]).wait_compiled()
    want = c.value_and_grad(th[1])[1].numpy()
    twin = pickle.loads(pickle.dumps(c))
    np.testing.assert_array_equal(twin.wait_compiled().value_and_grad(th[1])[1].numpy(), want)


def test_points_in_runs_that_fit_the_scratch(monkeypatch):
    monkeypatch.setattr(program, "GENERATED_SCRATCH_BYTES", 8 * 2 * 40 * 3)   # 3 points
    monkeypatch.setattr(program, "GENERATED_SLICE", 4)
    th = W.thetas(11)
    c, twin = _twins(lambda t: W.driven_pendulum_at(t, 40), th[0])
    np.testing.assert_array_equal(F.vmap(c.grad)(th).numpy(), F.vmap(twin.grad)(th).numpy())


def test_code_too_long_to_compile_leaves_it_to_the_loop_body(monkeypatch):
    # forward mode's lanes multiply the code: past MAX_LINES the loop body runs it
    monkeypatch.setattr(codegen, "MAX_LINES", 670)   # (reverse: 668 lines, forward: 674)
    th = W.thetas(2)
    c, twin = _twins(lambda t: W.driven_pendulum_at(t, 30), th[0])
    lean = _lean(c, th[0])
    assert lean.codegen[("cpu", "reverse")] and lean.codegen[("cpu", "tangent", 4)] is False
    _identical(c, twin, th, ("value_and_grad", "jacfwd"))
    assert lean.loop_ready                               # (the tangent's loop body)


def test_a_program_codegen_refuses_costs_nothing_more_call_after_call():
    # the kept refusal was raised again at every call: its traceback grew by a frame
    # each time (memory, and every call slower than the last)
    th = W.thetas(1)[0]
    c, twin = _twins(lambda t: W.driven_pendulum_at(t, 30), th)
    twin.value_and_grad(th)
    kept = _lean(twin, th).codegen["plan"]
    depth = len(traceback.extract_tb(kept.__traceback__))
    for _ in range(20):
        twin.value_and_grad(th)
    assert len(traceback.extract_tb(kept.__traceback__)) == depth
    assert not codegen.supported(_lean(twin, th))
    with pytest.raises(codegen.Unsupported, match="interpreter twin"):
        codegen.plan(_lean(twin, th))
    assert len(traceback.extract_tb(kept.__traceback__)) == depth


def test_the_reverse_sweep_reads_back_dear_values_instead_of_recomputing():
    # sin and exp values kept from the forward pass (codegen.RECOMPUTED says which ops
    # are recomputed): the same bits as recomputing them, and as the interpreter
    c, twin = _twins(_chain, np.array([0.3]))
    plan = codegen.plan(_lean(c, np.array([0.3])))
    kept = plan.kept("cpu")
    assert {int(plan.instr[q, I_OP]) for q in kept} == {SIN, EXP}
    assert plan.width("cpu") == len(plan.carried) + len(kept)
    assert plan.kept("cuda") == []
    _identical(c, twin, [np.array([0.3]), np.array([-1.2])], ("value_and_grad",))
    whole = _lean(c, np.array([0.3])).codegen[("cpu", "reverse")]
    with pytest.raises(ValueError, match="scratch too small"):      # (never past it)
        whole.run_reverse(np.array([[0.3]]), plan.table, np.empty((1, 1)),
                          np.empty((1, 1, 1)), np.empty(plan.width("cpu")), np.empty(1))


def _chain(x):
    y = x[0]
    for _ in range(300):
        y = at.exp(at.sin(y * 1.0001 + 0.5)) / 2.5
    return y


def _sir(p, days=120):
    """A loss summed in the loop over 120 days (the zoo's epidemic, smaller)."""
    s, i, loss = 1.0 - p[2], p[2], 0.0
    for day in range(days):
        new = p[0] * s * i
        s, i = s - new, i + new - p[1] * i
        loss = loss + (i - 0.01 * math.cos(0.1 * day)) ** 2
    return loss


@pytest.mark.parametrize("days", [120, 3000])
def test_a_call_at_one_point_goes_straight_to_the_generated_kernel(monkeypatch, days):
    # value_and_grad and calls at one float64 array run the generated kernel without
    # the batch machinery (LeanProgram.run), with its bits; anything else takes the
    # common path. 3000 days: its states outgrow the scratch run_one allocates itself
    x = np.array([0.25, 0.1, 0.001])
    c, twin = _twins(functools.partial(_sir, days=days), x)
    c.value_and_grad(x), c(x)
    lean = _lean(c, x)
    kept = lean._one_point()
    assert kept is not None and kept[4] is not None
    own = kept[2] + kept[3] <= OWN_SCRATCH_MAX
    assert own == (days == 120) and kept[4].py_func.__code__.co_argcount == (3 if own else 4)
    ran = []
    monkeypatch.setattr(type(lean), "run", lambda *a, **k: ran.append(1) or (_ for _ in ()).throw(
        AssertionError("the batch path")))
    points = x * np.array([[1.0, 1.0, 1.0], [1.1, 0.9, 2.0]])
    got = [(c.value_and_grad(p), c(p)) for p in points]
    assert not ran
    monkeypatch.undo()
    for p, ((v, g), value) in zip(points, got):
        want_v, want_g = twin.value_and_grad(p)
        np.testing.assert_array_equal(g.numpy(), want_g.numpy())
        assert v.shape == value.shape == () and v.item() == value.item() == want_v.item()
    v, g = c.value_and_grad(list(points[1]))            # (a list: the common path)
    np.testing.assert_array_equal(g.numpy(), got[1][0][1].numpy())


def test_a_one_element_output_keeps_its_shape_at_one_point():
    def f(p):
        s = p[:1] * 1.0
        for _ in range(100):
            s = s * 0.99 + 0.01 * p[1:] * s
        return s                                       # shape (1,)
    x = np.array([0.5, 0.3])
    c = at.compile(f, x)
    for _ in range(3):
        c.value_and_grad(x)
    c.wait_compiled()
    v, g = c.value_and_grad(x)
    assert v.shape == (1,) and g.shape == (1, 2) and c(x).shape == (1,)   # (as before)
    np.testing.assert_allclose(g.numpy()[0], at.func.grad(lambda p: f(p).sum())(x).numpy(),
                               rtol=1e-13)


def test_a_first_term_assigns_only_where_nothing_read_the_zero():
    lines = ["ga = 0.0", "gb = 0.0", "gc = 0.0", "gd = 0.0",
             "for t in range(3):",                  # a loop adds to gb every repetition
             "    gb += ga",
             "    ge = 0.0",
             "    ge += gb * 2.0",                  # in the loop's own block: assigns
             "if x != 0:",
             "    gc += 1.0",                       # in a branch: adds
             "gc += 2.0",
             "gd += gd * 2.0",                      # reads itself: adds
             "ga += 1.0"]                           # read (by gb) before: adds
    assert codegen.first_terms_assign(lines) == [
        "ga = 0.0", "gb = 0.0", "gc = 0.0", "gd = 0.0", "for t in range(3):",
        "    gb += ga", "    ge = gb * 2.0", "if x != 0:", "    gc += 1.0", "gc += 2.0",
        "gd += gd * 2.0", "ga += 1.0"]
    closed = ["for t in range(2):", "    gf = 0.0", "for s in range(2):", "    gf += 1.0"]
    assert codegen.first_terms_assign(closed) == closed     # (another block)


def test_the_generated_sweep_assigns_first_terms():
    c = at.compile(loss_in_the_loop(at), THETA)
    lean = _lean(c, THETA)
    _, source = codegen.reverse_source(codegen.plan(lean), "cpu")
    sweep = source[source.index("def run_reverse"):]
    assigned = [line.strip() for line in sweep.splitlines()
                if line.strip().startswith("gs") and " = " in line]
    assert any(not line.endswith(" = 0.0") for line in assigned)  # a carried adjoint's
    assert any(line.endswith(" = 0.0") for line in assigned)      # first term; (one first
                                                                  # added in a branch)


def _oscillators(cells, coupled=False):
    x0 = np.linspace(-1.0, 1.0, cells)
    neighbour = np.random.default_rng(0).permutation(cells)

    def f(p):
        x, v = x0, np.zeros(cells)
        for k in range(60):
            a = -p[0] * v - p[1] * x - p[2] * x ** 3 + p[3] * np.cos(1.2 * k * 0.01)
            if coupled:
                a = a + 0.1 * x[neighbour]          # (a gather of all the cells)
            v = v + 0.01 * a
            x = x + 0.01 * v
        return (x * x).mean()
    return f


@pytest.mark.parametrize("cells, coupled, runs", [(4, False, "generated"),
                                                  (40, False, "loop body"),
                                                  (32, True, "generated")])
def test_a_body_of_wide_instructions_runs_as_element_loops(cells, coupled, runs):
    # every cell a statement of generated code took 69 us a gradient of 32 oscillators,
    # the loop body's element loops 49 (GENERATED_CELLS_MAX); a gather is free in
    # generated code (a local renamed), a pass of its own in element loops: a body with
    # one stays generated. Each gives the interpreter's bits.
    p = np.array([0.1, -1.0, 1.0, 0.3])
    c, twin = _twins(_oscillators(cells, coupled), p)
    points = np.stack([p, p * 1.1, p * 0.9])
    for q in points:
        c.value_and_grad(q)
    c.wait_compiled()
    _identical(c, twin, points, ("value_and_grad",))
    assert _lean(c, p).compiled_code() == runs
