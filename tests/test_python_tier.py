"""The Python tier: a sweep whose kernel is not compiled yet runs the op table's
create_graph rules on numbers while a helper compiles it (engine.py). Its results, hooks,
``.grad`` and retain_grad rules must be the compiled sweep's."""
import numpy as np
import pytest

import autotape as at
from autotape import engine
from autotape.kernels import background

rng = np.random.default_rng(7)


def programs():
    x = at.tensor(rng.uniform(0.1, 1.0, (3, 4)), requires_grad=True)
    a = at.tensor(np.eye(3) + 0.1 * rng.normal(size=(3, 3)), requires_grad=True)
    s = at.tensor(0.7, requires_grad=True)
    yield "scalar", [s], lambda: at.sin(s) * s + s ** 2 / (1.0 + at.exp(-s))
    yield "arrays", [x, a], lambda: (
        (at.exp(x) * x).sum(axis=0).max() + x[1:, ::2].reshape(-1).sum() + (a @ x).sum()
        + at.where(x > 0.5, x, 0.0).sum() + np.roll(x, 1).cumsum(axis=1).prod()
        + at.tanh(x).mean() + (x ** 3).std())
    yield "linalg", [a], lambda: at.linalg.det(a) + at.linalg.inv(a).sum() + \
        at.linalg.solve(a, at.ones(3)).sum()
    yield "views and in place", [x], lambda: _in_place(x)


def _in_place(x):
    h = x * 1.0
    h[0] = h[1] * 2.0
    h[:, 1] *= 3.0
    return (h * h).sum()


def both(fn):
    """fn() run compiled, then on the Python tier."""
    engine.FORCE_PYTHON_TIER[0] = False
    compiled = fn()
    engine.FORCE_PYTHON_TIER[0] = True
    try:
        python = fn()
    finally:
        engine.FORCE_PYTHON_TIER[0] = False
    return compiled, python


def same(a, b):
    for u, v in zip(a, b):
        u, v = np.asarray(u), np.asarray(v)
        assert u.shape == v.shape
        np.testing.assert_allclose(u, v, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name, inputs, f", list(programs()), ids=lambda v: v if
                         isinstance(v, str) else "")
def test_grad_and_backward_as_compiled(name, inputs, f):
    compiled, python = both(lambda: [g.numpy() for g in at.grad(f(), inputs)])
    same(compiled, python)

    def backward():
        for t in inputs:
            t.grad = None
        f().backward()
        f().backward()                         # (accumulated)
        return [t.grad.numpy().copy() for t in inputs]
    same(*both(backward))


def test_hooks_retain_grad_and_inputs_as_compiled():
    def run():
        x = at.tensor([0.5, 1.5, 2.5], requires_grad=True)
        w = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
        seen = []
        x.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
        h = at.sin(x) * w
        h.retain_grad()
        h.register_hook(lambda g: g + 1)
        w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.numpy().copy()))
        y = (h * h).sum()
        y.backward(retain_graph=True)
        g_in, = at.grad(y, [h], retain_graph=True)
        y.backward(inputs=[w])
        return seen + [x.grad.numpy(), w.grad.numpy(), h.grad.numpy(), g_in.numpy()]
    same(*both(run))


def test_accumulates_into_the_same_grad_object():
    def run():
        x = at.ones(3, requires_grad=True)
        y = x * 2
        y.sum().backward(retain_graph=True)
        first = x.grad
        y.sum().backward()
        return first is x.grad, x.grad.numpy()
    (same_object_compiled, g1), (same_object_python, g2) = both(run)
    assert same_object_compiled and same_object_python
    same([g1], [g2])


def test_released_and_version_errors_as_compiled():
    engine.FORCE_PYTHON_TIER[0] = True
    try:
        x = at.ones(3, requires_grad=True)
        y = (x * x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.backward()
        h = x * 1.0
        z = (h * h).sum()
        h += 1
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.backward()
        u = (x + 1).sum()
        u.backward()
        u.backward()                                 # (saved nothing: as torch)
    finally:
        engine.FORCE_PYTHON_TIER[0] = False


def test_a_sweep_whose_kernel_is_not_ready_runs_on_the_python_tier(monkeypatch):
    submitted = []
    monkeypatch.setattr(engine, "_READY", set())
    monkeypatch.setattr(background, "enabled", lambda: True)
    monkeypatch.setattr(engine, "on_disk", lambda kernel: False)
    monkeypatch.setattr(background, "beside",
                        lambda job, *args: submitted.append(job) or False)
    fresh = type("Fresh", (), {"signatures": []})()
    monkeypatch.setattr(engine, "sweep_for", lambda variant: fresh)
    x = at.tensor([0.5, 1.5], requires_grad=True)
    ran = []
    real = engine._run_python
    monkeypatch.setattr(engine, "_run_python", lambda *a, **k: ran.append(1) or real(*a, **k))
    g, = at.grad((at.sin(x) * x).sum(), x)
    np.testing.assert_allclose(g.numpy(), np.cos([0.5, 1.5]) * [0.5, 1.5] + np.sin([0.5, 1.5]))
    assert ran and submitted == ["reverse sweep 3"]
    monkeypatch.setattr(background, "beside", lambda job, *args: True)     # (compiled)
    ran.clear()
    at.grad((at.sin(x) * x).sum(), x)
    assert not ran


def test_batched_gradients_and_jacobians_as_compiled():
    import autotape.func as F

    def run():
        x = at.tensor(np.linspace(0.2, 0.9, 4), requires_grad=True)
        y = at.tanh(x) * x.sum() + at.exp(-x)
        rows, = at.grad(y, x, at.eye(4), is_grads_batched=True)
        jac = F.jacrev(lambda v: at.sin(v) * v.prod())(x.detach())
        return rows.numpy(), jac.numpy()
    same(*both(run))




def test_hooks_run_without_grad_mode_and_det_at_a_singular_matrix():
    def run():
        modes = []
        x = at.tensor([1.0, 2.0], requires_grad=True)
        x.register_hook(lambda g: modes.append(at.is_grad_enabled()))
        h = x * 2
        h.register_hook(lambda g: modes.append(at.is_grad_enabled()))
        h.sum().backward()
        m = at.tensor([[1.0, 2.0], [2.0, 4.0]], requires_grad=True)     # singular
        g, = at.grad(at.linalg.det(m), m)
        return modes, g.numpy()
    (modes_compiled, g1), (modes_python, g2) = both(run)
    assert modes_compiled == modes_python == [False, False]
    same([g1], [g2])
    same([g2], [[[4.0, -2.0], [-2.0, 1.0]]][0:1])                      # the cofactors


def test_custom_ops_get_numbers_as_from_the_compiled_sweep():
    """Python ones, numba ones and checkpoints, on a tape older than the output's: their
    vjps get numpy arrays on the Python tier too, so a first gradient through them on a
    cold cache does not wait for the sweep's kernel."""
    import numba
    from autotape import tape as tape_module
    seen = []

    def cube_vjp(xs, y, g):
        seen.append(type(g))
        return (3 * xs[0] ** 2 * g,)
    cube = at.custom_op(lambda x: x ** 3, cube_vjp)
    twice = at.custom_op(numba.njit(lambda x: 2.0 * x), numba.njit(
        lambda inputs, y, g: (2.0 * g,)))
    x = at.tensor([1.0, 2.0, -0.5], requires_grad=True)

    def f():
        y = twice(cube(x)) + at.checkpoint(lambda v: at.sin(v) * v, x)
        tape_module.close_open_tape()          # (later ops go to a new tape)
        return (y * at.tensor([1.0, -2.0, 3.0])).sum()
    compiled, python = both(lambda: at.grad(f(), x)[0].numpy())
    same([compiled], [python])
    assert seen == [np.ndarray, np.ndarray]
    v = np.array([1.0, 2.0, -0.5])
    same([python], [np.array([1.0, -2.0, 3.0]) * (6 * v ** 2 + np.cos(v) * v + np.sin(v))])


def _readers_not_compiled(monkeypatch):
    """Make decode_rows and families_of neither compiled nor on disk (calling one
    fails); returns the list their numpy twins append to when tape.py calls them."""
    from autotape import tape as tape_module
    calls = []

    class NotCompiled:
        signatures = ()

        def __call__(self, *args):
            raise AssertionError("compiled while the kernel is not ready")
    for name_ in ("decode_rows", "families_of"):
        monkeypatch.setattr(tape_module, name_, NotCompiled())
        twin = getattr(tape_module, name_ + "_numpy")
        monkeypatch.setattr(tape_module, name_ + "_numpy", lambda *args, twin=twin: (
            calls.append(twin), twin(*args))[1])
    monkeypatch.setattr(tape_module, "on_disk", lambda kernel: False)
    monkeypatch.setattr(background, "enabled", lambda: True)
    return calls


COLUMNS = ("rows", "shape_start", "shape_size", "total_size", "families")


@pytest.mark.parametrize("name, inputs, make", list(programs()), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_a_tape_read_by_numpy_gives_the_compiled_columns(name, inputs, make, monkeypatch):
    """A cold cache reads tapes with decode_rows' and families_of's numpy twins while
    the kernels compile (tape._reader): the kernels' columns."""
    tape = make()._tape
    compiled = tape.columns()
    tape._columns = tape._decoded = None
    calls = _readers_not_compiled(monkeypatch)
    by_numpy = tape.columns()
    assert len(calls) == 2
    for field in COLUMNS:
        np.testing.assert_array_equal(getattr(by_numpy, field), getattr(compiled, field))


def test_a_growing_tape_read_in_pieces_by_numpy_as_compiled(monkeypatch):
    """Read while it grows (each read decodes the rows since the last, past a flush of
    the staged rows), a tape of scalars, arrays and shapes gets the kernels' columns."""
    with monkeypatch.context() as patched:
        _readers_not_compiled(patched)
        x = at.tensor(rng.uniform(0.1, 1.0, (3, 4)), requires_grad=True)
        s, pieces = x[0, 0], []
        for k in range(3000):                   # (past FLUSH_ROWS)
            s = at.sin(s) * x[k % 3, k % 4] + 0.5
            if k % 700 == 0:
                y = (x * s).sum(axis=0) + x[1]
                pieces.append(y._tape.columns())
        tape = s._tape
        by_numpy = tape.columns()
    tape._columns = tape._decoded = None
    compiled = tape.columns()
    for field in COLUMNS:
        np.testing.assert_array_equal(getattr(by_numpy, field), getattr(compiled, field))
    assert len(pieces) == 5 and by_numpy.families == compiled.families != 0


# ---- scalar rows on floats (graph_backward._Numbers) ----------------------------------------

from autotape import graph_backward  # noqa: E402
from autotape.ops import elementwise as ew  # noqa: E402

UNARY = sorted(ew.unary_ops)
BINARY = [c for c in sorted(ew.binary_ops) if ew.binary_ops[c].name not in (
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal")]  # (bools)


def _scalar_program(x, picks):
    """A scalar program over the elements of x: each pick applies an op of the table to
    earlier values (or a Python float), kept where every op is defined."""
    vals = [x[0], x[1], x[2] * 0.5]

    def squash(v):                             # into (0.2, 0.8): every op defined there
        return at.tanh(v) * 0.3 + 0.5
    for kind, code, i, j, c in picks:
        a = squash(vals[i % len(vals)])
        if kind == "unary":
            op = ew.unary_ops[code]
            vals.append(getattr(at, op.name)(a + 1.5 if op.name == "arccosh" else a))
        else:
            op = ew.binary_ops[code]
            b = c if j % 3 == 0 else squash(vals[j % len(vals)])
            vals.append(getattr(at, op.name)(a, b) if j % 2 else getattr(at, op.name)(b, a))
    out = vals[-1]
    for v in vals[-4:]:
        out = out + v * 0.25
    return out


@pytest.mark.parametrize("seed", range(6))
def test_scalar_programs_on_floats_as_compiled(seed):
    """Every unary and binary op of the table, as 0-d rows from x's elements, with Python
    float operands on either side: the Python tier (floats, the compiled partials)
    gives the compiled sweep's gradient."""
    r = np.random.default_rng(seed)
    picks = [("unary", c, int(r.integers(99)), 0, 0.0) for c in UNARY] + \
            [("binary", c, int(r.integers(99)), int(r.integers(99)), float(r.uniform(0.2, 2)))
             for c in BINARY]
    r.shuffle(picks)
    x0 = r.uniform(-1.0, 1.0, 3)

    def run():
        x = at.tensor(x0, requires_grad=True)
        g, = at.grad(_scalar_program(x, picks), x)
        return [g.numpy()]
    compiled, python = both(run)
    assert np.isfinite(compiled[0]).all()
    same(compiled, python)


def test_scalar_rows_skip_the_rules(monkeypatch):
    """A scalar model's rows do not run the create_graph rules on the Python tier (the
    rules on tensors cost ~6 us a row); an array row still does (on numbers)."""
    calls = []
    for code in (ew.binary_ops[300].code, 100 + 5):              # add, sin
        rule = graph_backward.GRAPH_VJPS[code]
        monkeypatch.setitem(graph_backward.GRAPH_VJPS, code, lambda *a, rule=rule: (
            calls.append(1), rule(*a))[1])
    x = at.tensor([0.3, 0.4], requires_grad=True)

    def run():
        s = x[0]
        for _ in range(50):
            s = at.sin(s) + x[1]
        return at.grad(s, x)[0].numpy()
    compiled, python = both(run)
    same([compiled], [python])
    assert calls == []
    both(lambda: at.grad(at.sin(x * 1.0).sum() + x[0], x))
    assert len(calls) == 1                                      # (the array sin)


def test_scalar_rows_edge_values_hooks_and_non_leaf_inputs():
    """Kinks and infinities as the compiled sweep has them (relu at 0 under an inf
    adjoint, a power's zero exponent, maximum's tie, floor passing nothing), hooks and
    retain_grad on scalar rows, and a non-leaf input (the walk's floor)."""
    def run():
        x = at.tensor([0.0, 2.0, 3.0, -1.0], requires_grad=True)
        seen = []
        a = at.relu(x[0]) * (1.0 / x[0])                     # relu'(0) * inf
        b = x[1] ** (x[0] * 1.0) + at.maximum(x[1], x[1] * 1.0)
        c = at.floor(x[2] * x[3]) + at.sqrt(x[2])
        c.register_hook(lambda g: seen.append(float(g)) or g * 3.0)
        b.retain_grad()
        d = b * c + a * 0.0
        y = d * d + at.log(x[2])
        y.backward(retain_graph=True)
        gb, gc = at.grad(y, [b, c])
        return [x.grad.numpy(), b.grad.numpy(), gb.numpy(), gc.numpy(), np.array(seen)]
    compiled, python = both(run)
    same(compiled, python)


def test_scalar_rows_released_as_compiled():
    engine.FORCE_PYTHON_TIER[0] = True
    try:
        x = at.tensor([0.5, 2.0], requires_grad=True)
        y = at.sin(x[0]) * x[1]
        y.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.backward()
    finally:
        engine.FORCE_PYTHON_TIER[0] = False


def test_plain_scalar_rows_take_adjoints_from_array_rows_and_element_reads():
    """A scalar row's adjoint gathered from the walk's fast run over plain rows
    (graph_backward._Numbers.run_plain), from an array row's rule (a stack of scalars),
    from a read of its element (``s[()]``) and from a seed, at once; a non-leaf input
    in the middle of the run; a negative index read on the fast path."""
    def run():
        x = at.tensor([0.3, -0.7, 1.1], requires_grad=True)
        s = at.sin(x[0]) * x[-1]
        t = s * s + x[1]
        u = at.stack([s, t, s * 2.0]) * at.tensor([1.0, 2.0, 3.0])
        v = u.sum() + s[()] * 0.5 + at.exp(t)
        gx, gs, gt = at.grad([v, s], [x, s, t], retain_graph=True)
        v.backward()
        return [gx.numpy(), gs.numpy(), gt.numpy(), x.grad.numpy()]
    compiled, python = both(run)
    same(compiled, python)
    x = at.tensor([0.3, -0.7, 1.1], requires_grad=True)
    assert float(x[-1].detach()) == 1.1 and float(x[-3].detach()) == 0.3
    for bad in (3, -4):
        with pytest.raises(IndexError):
            x[bad]


from autotape import number_rules  # noqa: E402
from autotape.ops import indexing as ix  # noqa: E402
from autotape.opcodes import opcode_name  # noqa: E402


def _rows_of_every_rule_on_numbers():
    """A recorded row of each opcode whose rule runs on numbers, operands broadcast
    where the op allows."""
    x = at.tensor(rng.uniform(0.15, 0.85, (3, 4)), requires_grad=True)
    y = at.tensor(rng.uniform(0.15, 0.85, 4), requires_grad=True)
    s = at.tensor(0.4, requires_grad=True)
    rows = [ew.unary_functions[code](x + 1.0 if ew.unary_ops[code].name == "arccosh" else x)
            for code in ew.unary_ops]
    rows += [ew.binary_functions[code](x, y) for code in ew.binary_ops
             if code in number_rules.ON_NUMBERS]
    rows += [ew.binary_functions[code](s, x) for code in ew.binary_ops
             if code in number_rules.ON_NUMBERS]
    h = x * 1.0
    h[1] = y * 2.0                                       # SETITEM
    positions = ix.search_positions([0.0, 1.0, 2.0, 3.0], y[:3] * 3.0)
    rows += [at.where(x > 0.5, x, y), x.reshape(-1), x[1:, ::-2], x.T,
             at.broadcast_to(y, (2, 3, 4)), ix.scatter(y[:2] * 1.0, ((2,), 1, (2,)), (6,)), h,
             at.concatenate([x, y[None] * 2.0]), np.roll(x, 1, axis=1),
             ix.put_add(y, np.array([0, 2, 0, 1]), (3,)), positions,
             ix.take_flat(y, positions), x.sum(axis=0), x.mean(), at.cumsum(x, axis=1)]
    return rows


def test_every_rule_on_numbers_gives_the_tensor_rules_numbers():
    """number_rules: each rule of ON_NUMBERS, given numpy's namespace and the row's
    values as numpy, computes what it computes on tensors (bit for bit); the programs
    cover every opcode of the set."""
    rows = _rows_of_every_rule_on_numbers()
    covered = set()
    for t in rows:
        tape, i = t._tape, t._row
        op = tape.op(i)
        covered.add(op)
        rule = graph_backward.GRAPH_VJPS[op]
        g = rng.normal(size=t.shape)
        g.reshape(-1)[-1:] = np.inf                  # (masks: 0, not nan, where they select)
        tensor_row, number_row = graph_backward.RowView(tape, i), number_rules.NumberRow(tape, i)
        for k in range(len(tensor_row.operands)):
            with np.errstate(all="ignore"):
                want = rule(graph_backward.OPS, at.tensor(g), tensor_row, k)
                got = rule(number_rules.NUMBERS, number_rules.as_number(g), number_row, k)
            if want is None:
                assert got is None
                continue
            want, got = np.asarray(want.numpy()), np.asarray(got)
            assert got.shape == want.shape, opcode_name(op)
            np.testing.assert_array_equal(got, want, err_msg=opcode_name(op))
    assert number_rules.ON_NUMBERS <= covered, sorted(
        opcode_name(op) for op in number_rules.ON_NUMBERS - covered)


def test_array_rows_skip_tensors_on_the_python_tier(monkeypatch):
    """An array model's rows on the Python tier make no tensor per rule (the rules on
    tensors cost ~15 us a row): the same gradients as compiled, with the tensor path's
    rule calls counted by the namespace they get."""
    namespaces = []
    x = at.tensor(rng.uniform(0.1, 1.0, 12), requires_grad=True)
    p = at.tensor([0.3, 0.7], requires_grad=True)

    def run():
        u = x
        for _ in range(5):
            lap = at.concatenate([u[1:2] - u[:1], u[2:] - 2.0 * u[1:-1] + u[:-2],
                                  u[-2:-1] - u[-1:]])
            u = u + p[0] * lap - p[1] * at.sin(u) * np.roll(u, 1)
        return at.grad((u * u).mean() + u[3], [x, p])
    for code, rule in list(graph_backward.GRAPH_VJPS.items()):
        monkeypatch.setitem(graph_backward.GRAPH_VJPS, code, lambda at_, *a, rule=rule: (
            namespaces.append(at_), rule(at_, *a))[1])
    compiled, python = both(lambda: [g.numpy() for g in run()])
    same(compiled, python)
    assert namespaces and all(n is number_rules.NUMBERS for n in namespaces)
