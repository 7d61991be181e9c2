"""Tape lifetime: memory stays flat, tapes die with their results, graphs may span tapes."""
import gc
import importlib
import os
import resource
import subprocess
import sys
import weakref

import numpy as np
import pytest

import autotape as at
from autotape import opcodes
tape_module = importlib.import_module("autotape.tape")


@pytest.fixture
def small_tapes(monkeypatch):
    """Tapes that close after a few rows, so graphs span many of them."""
    def set_rows(n):
        monkeypatch.setattr(tape_module, "MAX_ROWS", n)
        tape_module.close_open_tape()
    return set_rows


def rss_kib():
    """The process's resident memory now (Linux), else its peak: a leak shows in both,
    but in a long test process the peak is an earlier test's, and a step of a few MB
    above it says nothing about this one."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * (resource.getpagesize() // 1024)
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def live_tapes():
    return sum(1 for o in gc.get_objects() if type(o) is tape_module.Tape)


_MEMORY_LOOP = """
import gc, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import autotape as at
from autotape import tape as tape_module
sys.path.insert(0, sys.argv[2])
from test_tape import rss_kib
w = at.tensor(np.linspace(0.0, 1.0, 1000), requires_grad=True)
s = at.tensor(0.5, requires_grad=True)
for it in range(10_000):
    loss = (at.sin(w) * w).sum() + s * s * 3.0
    loss.backward()
    if it == 1000:
        gc.collect()
        start_tapes = sum(1 for o in gc.get_objects() if type(o) is tape_module.Tape)
    if it == 5000:
        gc.collect()
        start_rss = rss_kib()
gc.collect()
print(sum(1 for o in gc.get_objects() if type(o) is tape_module.Tape) - start_tapes,
      rss_kib() - start_rss)
"""


def test_backward_loop_keeps_memory_flat():
    """10,000 backward passes on fresh graphs: no tape outlives its results and the
    resident memory stays flat (5,000 leaked graphs would be ~40 MB). In a process of
    its own: a test worker's memory after a thousand other tests moves by more than a
    leak would (glibc's arenas, numba's compiles)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", _MEMORY_LOOP,
                          os.path.dirname(here), here], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    more_tapes, more_kib = map(int, out.stdout.split())
    assert more_tapes <= 0
    assert more_kib < 5_000                        # KiB


def test_dropped_results_free_their_tape():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    refs = []
    for _ in range(50):
        y = (x * x).sum()
        refs.append(weakref.ref(y._tape))
        y.backward()
    del y
    assert all(r() is None for r in refs)


def test_forward_only_loop_is_bounded(small_tapes):
    """Without backward a tape stays open, but only until it is full; the full tapes
    are freed with their last result."""
    small_tapes(200)
    x = at.tensor(0.3, requires_grad=True)
    refs = []
    for _ in range(2000):
        y = at.sin(x) * x + 1.0
        refs.append(weakref.ref(y._tape))
    alive = {id(r()) for r in refs if r() is not None}
    assert len(alive) <= 2
    assert len({id(r) for r in refs}) > 1


def test_deep_chain_has_no_recursion_limit():
    x = at.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(100_000):          # 200,000 rows
        y = y + y * 1e-6
    y.backward()
    assert x.grad.item() == pytest.approx((1 + 1e-6) ** 100_000, rel=1e-9)      # 1e5 rounded products


def chain(x, n):
    y = x
    for i in range(n):
        y = at.sin(y) * 0.9 + x * 0.1 + float(i % 3)
    return y


def test_graph_spanning_many_tapes_matches_one_tape(small_tapes):
    x = at.tensor(0.7, requires_grad=True)
    expected, = at.grad(chain(x, 300), x)
    small_tapes(37)
    y = chain(x, 300)
    assert y._tape.imports                       # the graph really spans tapes
    got, = at.grad(y, x)
    assert got.item() == pytest.approx(expected.item(), rel=1e-14)


def test_arrays_and_broadcasting_across_tapes(small_tapes):
    rng = np.random.default_rng(0)
    a0, b0 = rng.normal(size=(3, 4)), rng.normal(size=4)

    def f(a, b):
        h = a
        for _ in range(20):
            h = at.tanh(h * b + 0.1) @ at.ones(4, 4) * 0.25
        return (h * h).sum()
    a, b = at.tensor(a0, requires_grad=True), at.tensor(b0, requires_grad=True)
    expected = at.grad(f(a, b), [a, b])
    small_tapes(9)
    got = at.grad(f(a, b), [a, b])
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-13)


def test_retain_graph_and_release_across_tapes(small_tapes):
    small_tapes(10)
    x = at.tensor(0.5, requires_grad=True)
    y = chain(x, 40)
    g1, = at.grad(y, x, retain_graph=True)
    g2, = at.grad(y, x)
    assert g1.item() == g2.item()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        at.grad(y, x)


def test_leaf_updated_under_no_grad_is_snapshotted_again():
    """Optimiser steps: a new recording uses the leaf's new value; a gradient of one
    recorded before the step raises torch's version error (its value was replaced)."""
    w = at.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    with at.no_grad():
        w -= 0.5
    z = (w * w).sum()
    gz, = at.grad(z, w)
    assert gz.tolist() == [1.0, 3.0]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        at.grad(y, w)


def test_leaf_reused_in_one_tape_gets_one_row():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = x * x + x
    tape = y._tape
    assert len(tape.leaves) == 1


def test_rows_flushed_in_chunks_decode_the_same(small_tapes):
    """A tape longer than one flush chunk: opcodes and gradients survive the flush."""
    x = at.tensor(0.2, requires_grad=True)
    y = x
    for _ in range(5000):                     # > FLUSH_ROWS rows on one tape
        y = at.sin(y) + x * 0.001
    tape = y._tape
    assert tape.flushed > 0 and tape.nrows > tape_module.FLUSH_ROWS
    assert {tape.opcode(r) for r in range(tape.nrows)} == set(
        int(c) for c in tape.columns().rows[:, 0])
    g, = at.grad(y, x)
    h = 1e-6
    with at.no_grad():
        def f(v):
            t = at.tensor(v)
            z = t
            for _ in range(5000):
                z = at.sin(z) + t * 0.001
            return z.item()
        assert g.item() == pytest.approx((f(0.2 + h) - f(0.2 - h)) / (2 * h), rel=1e-6)


def test_columns_decoded_as_the_tape_grows_equal_one_decode_of_it_all():
    """columns() decodes only the rows added since its last call (a recording that takes
    create_graph gradients as it goes reads its tape after each): read at many lengths,
    across flushes, with arrays, shapes and parameters, it gives what decoding the
    whole tape at once gives, and the columns handed out earlier keep their rows."""
    x = at.tensor(np.linspace(0.1, 0.9, 3), requires_grad=True)
    y, earlier = x, []
    for k in range(1500):                     # > FLUSH_ROWS rows: chunks and staged rows
        y = at.sin(y) * 0.5 + at.sum(y) * (x[k % 3] if k % 2 else 1.0)
        if k % 2:
            y = at.where(y > 0.0, y, y.reshape(3, 1)[:, 0])
        if k % 97 == 0:
            cols = y._tape.columns()
            earlier.append((cols, cols.rows.copy(), cols.ipool.copy()))
    tape = y._tape
    grown = tape.columns()
    tape._columns = tape._decoded = None
    whole = tape.columns()
    assert grown.nrows == whole.nrows == tape.nrows > tape_module.FLUSH_ROWS
    for field in ("rows", "ipool", "shape_ndim", "shape_start", "shape_dims", "shape_size",
                  "big_addr", "total_size", "families"):
        np.testing.assert_array_equal(getattr(grown, field), getattr(whole, field), field)
    for cols, rows, ipool in earlier:
        np.testing.assert_array_equal(cols.rows, rows)
        np.testing.assert_array_equal(cols.ipool, ipool)


def test_large_leaf_gradients_are_written_in_place_and_owned():
    """Large leaves get their gradient written into a fresh array by the sweep (no copy
    out of the shared adjoint buffer); it must survive later sweeps unchanged."""
    from autotape.engine import OWN_BUFFER_MIN
    n = OWN_BUFFER_MIN + 3
    w = at.tensor(np.linspace(-1, 1, n), requires_grad=True)
    small = at.tensor([1.0, 2.0], requires_grad=True)
    g1, s1 = at.grad((w * w).sum() + (small * 3.0).sum(), [w, small])
    g2, = at.grad((w * 5.0).sum(), w)                   # reuses the shared buffer
    np.testing.assert_array_equal(g1.numpy(), 2 * np.linspace(-1, 1, n))
    assert s1.tolist() == [3.0, 3.0] and g2.numpy()[0] == 5.0
    (w * 2.0).sum().backward()
    (w * 3.0).sum().backward()
    assert w.grad.numpy()[0] == 5.0
    w2 = at.tensor(np.ones(n), requires_grad=True)      # reached but never touched: zeros
    y = (w * 0.0).sum() + (w2[:2] * 0.0).sum()
    gw2, = at.grad(y, w2)
    assert not gw2.numpy().any()


def test_inlined_scalar_push_writes_what_push_scalar_writes():
    """ops/elementwise.py inlines Tape.push_scalar in its 0-d recorders (a call there
    costs 5% of scalar recording): both must leave the same tape."""
    x = at.tensor(0.5, requires_grad=True)
    y = at.sin(x * 3.0)                            # the inlined unary and binary paths
    recorded = y._tape
    by_method = tape_module.Tape()
    by_method.leaf(x, 0.5)
    c = by_method.const(3.0, ())
    m = by_method.push_scalar(opcodes.MUL, 0, c, 1.5)
    by_method.push_scalar(opcodes.SIN, m, -1, float(np.sin(1.5)))
    assert recorded.staged == by_method.staged and list(recorded.arena) == list(by_method.arena)
    assert recorded.nrows == by_method.nrows == 4
    np.testing.assert_array_equal(recorded.columns().rows, by_method.columns().rows)
