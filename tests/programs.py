"""Random differentiable programs for property tests, runnable on autotape or torch."""
import math

import numpy as np
from hypothesis import strategies as st

import autotape as at

# name, arity, f(lib, *operands); every op is smooth on all reals so that finite
# differences and torch agree with autotape everywhere
OPS = [
    ("add", 2, lambda L, a, b: a + b),
    ("sub", 2, lambda L, a, b: a - b),
    ("mul", 2, lambda L, a, b: a * b),
    ("div", 2, lambda L, a, b: a / (1.5 + b * b)),
    ("max", 2, lambda L, a, b: L.maximum(a, b * 0.5 + 0.25)),
    ("neg", 1, lambda L, a: -a),
    ("sin", 1, lambda L, a: L.sin(a)),
    ("cos", 1, lambda L, a: L.cos(a)),
    ("tanh", 1, lambda L, a: L.tanh(a)),
    ("exp", 1, lambda L, a: L.exp(a * 0.3)),
    ("sigmoid", 1, lambda L, a: L.sigmoid(a)),
    ("sqrt", 1, lambda L, a: L.sqrt(a * a + 1.0)),
    ("log", 1, lambda L, a: L.log(a * a + 1.0)),
    ("pow", 1, lambda L, a: (a * a + 1.0) ** 1.5),
    ("square", 1, lambda L, a: a ** 2),
    ("const", 1, lambda L, a: 2.0 * a - 1.0),
    ("arctan", 1, lambda L, a: L.arctan(a)),
    ("arcsinh", 1, lambda L, a: L.arcsinh(a)),
    ("log1p", 1, lambda L, a: L.log1p(a * a)),
    ("expm1", 1, lambda L, a: L.expm1(a * 0.5)),
    ("erf", 1, lambda L, a: L.erf(a)),
    ("hypot", 2, lambda L, a, b: L.hypot(a, b * 0.5 + 1.0)),
    ("logaddexp", 2, lambda L, a, b: L.logaddexp(a, b)),
]


@st.composite
def broadcast_shapes(draw, count):
    """``count`` shapes that broadcast together."""
    base = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    shapes = []
    for _ in range(count):
        drop = draw(st.integers(0, len(base)))
        shape = [d if not draw(st.booleans()) else 1 for d in base[drop:]]
        shapes.append(tuple(shape))
    return shapes


@st.composite
def programs(draw, max_inputs=3, max_steps=8):
    """(input arrays, steps); a step is (op index, operand indices into the pool)."""
    n_in = draw(st.integers(1, max_inputs))
    shapes = draw(broadcast_shapes(n_in))
    seed = draw(st.integers(0, 2 ** 31))
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1.5, 1.5, s) for s in shapes]
    steps = []
    for k in range(draw(st.integers(1, max_steps))):
        op = draw(st.integers(0, len(OPS) - 1))
        pool = n_in + k
        args = tuple(draw(st.integers(0, pool - 1)) for _ in range(OPS[op][1]))
        steps.append((op, args))
    return inputs, steps


def run(lib, inputs, steps):
    """Evaluate a program; the result is the sum of the last value."""
    pool = list(inputs)
    for op, args in steps:
        pool.append(OPS[op][2](lib, *[pool[i] for i in args]))
    return pool[-1].sum()


# A random loop body: a three-value state updated by a random sequence of OPS (each with
# its operands picked among the values so far), repeated ``steps * 8`` times
LOOP_BODIES = (st.lists(st.tuples(st.sampled_from(range(len(OPS))), st.integers(0, 5),
                                  st.integers(0, 5)), min_size=1, max_size=12),
               st.integers(4, 9))


def loop_model(L, ops, steps):
    """f(t) of three parameters, for library L (autotape, torch...), from a draw of
    LOOP_BODIES."""
    def f(t):
        state = [t[0], t[1], t[2]]
        for _ in range(steps * 8):
            vals = list(state)
            for k, a, b in ops:
                _, arity, g = OPS[k]
                args = (vals[a % len(vals)],) if arity == 1 else \
                    (vals[a % len(vals)], vals[b % len(vals)])
                vals.append(g(L, *args))
            state = [vals[-1] * 0.3 + state[0] * 0.7,
                     L.tanh(vals[-2] + state[1]) if len(vals) > 4 else state[1] * 0.9,
                     state[2] * 0.99 + vals[-1] * 0.01]
        return state[0] * state[1] + state[2]
    return f


def loss_in_the_loop(L):
    """f(t) of four parameters for library L: a loss summed inside the loop (carried, and
    read after it), a state the loss reads (read after the loop), a where and a step
    function in the body, four outputs."""
    def f(t):
        x, v, loss = t[0], t[1], t[0] * 0.0
        for i in range(30):
            a = L.where(x > 0.3, -t[2] * L.sin(x), -t[2] * x) - t[3] * v + L.floor(x)
            x, v = x + 0.01 * v, v + 0.01 * a
            loss = loss + (x - math.cos(0.1 * i)) ** 2
        return L.stack([loss, x * v, t[1] * 1.0, L.exp(v)])
    return f


def broadcast_where(L):
    """A parameter broadcast over 17 cells into one branch of a where and into a product
    in a loop: its adjoint is summed in lanes (kernels/program.py, LANES) by every
    runner of a lean program."""
    def f(k):
        x = k[0] * np.linspace(-1.0, 1.0, 17)
        for _ in range(60):
            x = L.where(x > 0.2, k[1], x) * 0.9 + 0.05 * x * k[2]
        return (x * x).sum()
    return f


def compiled_and_interpreted(f, x, **options):
    """(c, plain, points, got, lean): f compiled (``at.compile(f, x, **options)``) and its
    value and gradient at five points near x, enough calls for its loop body to compile
    (asserted), and ``plain``, f compiled with its loop taken away (the interpreter)."""
    c, plain = at.compile(f, x, **options), at.compile(f, x)
    points = [x * s for s in (1.0, 0.9, 1.1, 0.8, 1.2)]       # past COMPILE_LOOP_AFTER
    got = [c.value_and_grad(p) for p in points]
    lean = next(iter(c._programs.values())).lean
    assert lean.loop is not None and lean.loop_kernels is not None
    for prog in plain._programs.values():
        prog.lean.loop = None                                # (the interpreter)
    return c, plain, points, got, lean


def same_bits(plain, points, got):
    """The compiled body's (value, gradient) at each point are the interpreter's."""
    for p, (value, g) in zip(points, got):
        want, want_g = plain.value_and_grad(p)
        np.testing.assert_array_equal(value.numpy(), want.numpy())
        np.testing.assert_array_equal(g.numpy(), want_g.numpy())
