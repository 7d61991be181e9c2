"""A loop body's state adjoints assigned by their first write (kernels/loops.py
``_kept_first_writes``): the sweep runs the repetitions from the last, so the reader of
a repetition's state from furthest back writes its adjoint first; that write assigns,
and ``clear`` zeroes those slots only in the last two repetitions (``every``). The
gradients stay the interpreter's bit for bit (float64 and float32), one point and
chunks, Jacobians of several outputs (whose sweeps follow one another over the same
adjoints) and checkpointed segments; where something else adds to a slot first (the
code after the loop, a parameter that is also the initial state) the write adds."""
import re

import numpy as np
import pytest

import autotape as at
import autotape.func as F
from programs import compiled_and_interpreted, same_bits

CELLS, STEPS = 16, 60


def oscillators(p):
    """Cubic oscillators forced by the step's time: the state (x, v) read one step on."""
    x = np.linspace(0.1, 0.4, CELLS).astype(p.dtype) + 0.0 * p[0]
    v = np.zeros(CELLS, p.dtype) + 0.0 * p[0]
    for i in range(STEPS):
        a = -p[0] * v - p[1] * x - p[2] * x ** 3 + p[3] * float(np.cos(1.2 * i * 0.05))
        v = v + 0.05 * a
        x = x + 0.05 * v
    return (x * x).sum() + v[3]


def leapfrog(p):
    """A wave by leapfrog: this step's grid and the last (read two steps on)."""
    u = np.sin(np.linspace(0.0, 3.0, CELLS)).astype(p.dtype) * p[0]
    up = u * 1.0
    for _ in range(STEPS):
        lap = np.concatenate([u[1:2] - u[0:1], u[2:] - 2.0 * u[1:-1] + u[:-2],
                              u[-2:-1] - u[-1:]])
        u, up = 2.0 * u - up + p[1] * lap - p[2] * (u - up), u
    return (u * u).sum() * p[3]


def trajectory(p):
    """Every step's state read after the loop (a loss over the trajectory)."""
    x = np.linspace(0.1, 0.4, CELLS).astype(p.dtype) * p[3]
    states = []
    for _ in range(STEPS):
        x = x + 0.05 * (p[0] - p[1] * x * x)
        states.append(x)
    return sum((s * p[2]).sum() for s in states)


def relaxation(p):
    """The initial state is also a parameter of every step: the first step's adjoint
    of its state lands where every step adds the parameter's."""
    x0 = np.linspace(0.1, 0.4, CELLS).astype(p.dtype) * p[0]
    x = x0
    for _ in range(STEPS):
        x = x + 0.05 * (x0 * p[1] - x * x * x * p[2])
    return (x * x).sum() * p[3]


def two_outputs(p):
    """Two outputs: a Jacobian's sweeps run one after the other over the same adjoints."""
    x = np.linspace(0.1, 0.4, CELLS).astype(p.dtype) + 0.0 * p[0]
    v = np.zeros(CELLS, p.dtype) + 0.0 * p[0]
    for _ in range(STEPS):
        v = v + 0.05 * (-p[0] * v - p[1] * x * x * x + p[2])
        x = x + 0.05 * v
    return np.stack([(x * x).sum(), v[2] * p[3]])


P = np.array([0.3, 1.1, 0.6, 0.7])


def _clear(lean):
    """(the spans ``clear`` zeroes before every sweep, those only when ``every``)."""
    source = lean.loop_code[1]
    start = source.index("def clear(")
    text = source[start:source.index("@numba.njit", start)]
    bulk, every = text.split("if every:")
    return re.findall(r"G\[(\d+) \+ o", bulk), re.findall(r"G\[(\d+) \+ o", every)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("f", [oscillators, leapfrog], ids=["lag 1", "lag 2"])
def test_the_state_s_first_write_assigns_and_skips_the_clear(loop_bodies, f, dtype):
    c, plain, points, got, lean = compiled_and_interpreted(f, P.astype(dtype))
    bulk, every = _clear(lean)
    assert every                                # (the state: assigned, not cleared)
    same_bits(plain, points, got)
    np.testing.assert_array_equal(F.vmap(c.grad)(np.stack(points)).numpy(),
                                  np.stack([g.numpy() for _, g in got]))


@pytest.mark.parametrize("f", [trajectory, relaxation],
                         ids=["read after the loop", "initial state a parameter"])
def test_a_slot_something_else_adds_to_first_is_cleared_and_added_to(loop_bodies, f):
    c, plain, points, got, lean = compiled_and_interpreted(f, P)
    bulk, every = _clear(lean)
    assert bulk and not every
    same_bits(plain, points, got)


def test_a_jacobian_s_sweeps_and_checkpointed_segments_keep_the_bits(loop_bodies):
    c, plain = at.compile(two_outputs, P), at.compile(two_outputs, P)
    points = [P * s for s in (1.0, 0.9, 1.1, 0.8, 1.2)]
    got = [c.jacobian(p) for p in points]
    lean = next(iter(c._programs.values())).lean
    assert lean.loop_kernels is not None and _clear(lean)[1]
    for prog in plain._programs.values():
        prog.lean.loop = None
    for p, jac in zip(points, got):
        np.testing.assert_array_equal(jac.numpy(), plain.jacobian(p).numpy())
    segmented = at.compile(oscillators, P, checkpoint="sqrt")
    plain = at.compile(oscillators, P)
    for p in points:
        segmented.value_and_grad(p)
    segmented.wait_compiled()
    for prog in plain._programs.values():
        prog.lean.loop = None
    for p in points:
        np.testing.assert_array_equal(segmented.grad(p).numpy(), plain.grad(p).numpy())
