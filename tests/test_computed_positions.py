"""A take at positions the program computes (``search_positions`` then ``take_flat``):
eager, replayed and as a lean program's SEARCH and PICK instructions, the same numbers;
positions read again at every call, never the recording's; a position outside the
array raised, never a neighbour read."""
import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.kernels.indexing import PICKED_OUTSIDE, picked
from autotape.kernels.instruction_format import I_OP, PICK, PLACE, SEARCH
from autotape.ops.indexing import put_add, search_positions, take_flat
from autotape.sparsity import dependency_pattern

GRID = np.array([0.0, 0.25, 0.5, 0.75])


def lookup(x):
    """Rows of a table computed from x, picked where x[:2] falls in GRID, weighed."""
    table = at.stack([x * x, at.sin(x), x * 3.0, x + 1.0])           # (4, 4)
    rows = search_positions(GRID, x[:2])
    picked_rows = take_flat(table.reshape(-1), rows[:, None] * 4.0 + np.arange(4.0))
    return (picked_rows * np.arange(1.0, 9.0).reshape(2, 4)).sum() + x[3]


X = np.array([0.1, 0.6, 0.3, 0.9])
INSIDE = np.array([0.1, 0.2, 0.3, 0.9])     # (positions doubled still inside 4)
POINTS = np.array([[0.1, 0.6, 0.3, 0.9], [0.7, 0.05, 0.3, 0.2], [0.4, 0.4, 0.1, 0.5]])


def _eager(f, x):
    xt = at.tensor(x, requires_grad=True)
    value = f(xt)
    return value.detach().numpy(), at.grad(value, xt)[0].numpy()


def test_search_positions_is_numpys_searchsorted_left():
    values = np.array([-1.0, 0.0, 0.25, 0.3, 0.75, 2.0, np.nan])
    np.testing.assert_array_equal(search_positions(GRID, values).numpy(),
                                  np.searchsorted(GRID, values).astype(float))
    with pytest.raises(ValueError, match="1-D"):
        search_positions(GRID.reshape(2, 2), values)


def test_picked_reads_positions_as_numpy_and_refuses_the_rest():
    assert [picked(p, 4) for p in (0.0, 3.0, -1.0, -4.0)] == [0, 3, 3, 0]
    assert [picked(p, 4) for p in (4.0, -5.0, 1.5, np.nan, np.inf)] == [-1] * 5


def test_the_lean_program_searches_and_picks_at_every_call():
    c = at.compile(lookup, X)
    kinds = set(c._lean("value", [X]).lean.instr[:, I_OP].tolist())
    assert {SEARCH, PICK} <= kinds
    for x in POINTS:                # (rows other than the recording's: read again)
        value, grad = _eager(lookup, x)
        got_value, got_grad = c.value_and_grad(x)       # (numpy's sum is pairwise)
        np.testing.assert_allclose(got_value.numpy(), value, rtol=1e-15)
        np.testing.assert_allclose(got_grad.numpy(), grad, rtol=1e-15)
        np.testing.assert_allclose(c.jacfwd(x).numpy(), grad, rtol=1e-15)
    values, grads = F.vmap(c.value_and_grad)(POINTS)
    for x, v, g in zip(POINTS, values.numpy(), grads.numpy()):
        want_value, want_grad = c.value_and_grad(x)
        np.testing.assert_array_equal(v, want_value.numpy())
        np.testing.assert_array_equal(g, want_grad.numpy())


def test_no_gradient_reaches_the_positions():
    # the picked rows move with x[0], but only through the table: d/dx0 is the table's
    x = X.copy()
    _, grad = _eager(lookup, x)
    fd = (lookup(at.tensor(x + [1e-7, 0, 0, 0])).item() -
          lookup(at.tensor(x - [1e-7, 0, 0, 0])).item()) / 2e-7
    np.testing.assert_allclose(grad[0], fd, rtol=1e-6)
    x = at.tensor(X, requires_grad=True)
    g, = at.grad(lookup(x), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), _eager(lookup, X)[1], rtol=1e-15)


def test_negative_positions_count_from_the_end():
    def f(x):
        return (take_flat(x * 2.0, search_positions(GRID, x[:2]) - 4.0) * [1.0, 5.0]).sum()
    c = at.compile(f, X)
    for x in POINTS:
        np.testing.assert_allclose(c.value_and_grad(x)[1].numpy(), _eager(f, x)[1],
                                   rtol=1e-15)


def test_a_position_outside_the_array_is_an_index_error_eagerly_and_compiled():
    def f(x):
        return take_flat(x * 2.0, search_positions(GRID, x[:2]) * 2.0).sum()
    with pytest.raises(IndexError):
        f(at.tensor(np.array([0.9, 0.9, 0.0, 0.0])))            # (position 8 of 4)
    c = at.compile(f, INSIDE)
    with pytest.raises(IndexError, match="outside its array"):
        c.value_and_grad(np.array([0.9, 0.9, 0.0, 0.0]))
    with pytest.raises(IndexError, match="outside its array"):
        F.vmap(c)(np.array([[0.1, 0.1, 0.0, 0.0], [0.9, 0.9, 0.0, 0.0]]))
    with pytest.raises(IndexError, match="whole numbers"):
        take_flat(at.tensor([1.0, 2.0]), at.tensor([0.5]))
    assert "numpy raises IndexError" in PICKED_OUTSIDE


def test_a_replay_of_the_tape_checks_positions_too():
    # a guard keeps this program on the tape's replay (not a lean program)
    def f(x):
        y = take_flat(x * 2.0, search_positions(GRID, x[:2]) * 2.0).sum()
        return y * 2.0 if x[2] > 0 else y
    c = at.compile(f, INSIDE)
    np.testing.assert_array_equal(c.grad(INSIDE * 0.5).numpy(), _eager(f, INSIDE * 0.5)[1])
    with pytest.raises(IndexError, match="outside its array"):
        c(np.array([0.9, 0.9, 0.5, 0.0]))


def test_a_pick_may_read_any_element_of_its_array():
    c = at.compile(lookup, X)
    pattern = dependency_pattern(c._lean("value", [X]).lean)
    assert list(pattern.indices) == [0, 1, 2, 3]       # (x3 directly, the rest by the table)


def test_second_derivatives_add_back_at_the_computed_positions():
    # the gradient of a PICK is a PLACE at the same positions (put_add's), so the
    # Hessian's recording is a lean program too, read again at every point
    c = at.compile(lookup, X)
    assert PLACE in set(c._lean("hessian", [X]).lean.instr[:, I_OP].tolist())
    for x in POINTS:
        np.testing.assert_allclose(c.hessian(x).numpy(), F.hessian(lookup)(x).numpy(),
                                   rtol=1e-14, atol=1e-14)

    def spread(x):
        positions = search_positions(GRID, x[:3]) + 1.0
        return (put_add((x * x)[:3], positions, (5,)) * np.arange(1.0, 6.0)).sum()
    c = at.compile(spread, INSIDE)
    for x in POINTS:
        np.testing.assert_allclose(c.grad(x).numpy(), _eager(spread, x)[1], rtol=1e-15)
    with pytest.raises(IndexError, match="outside its array"):
        c.grad(X + 10.0)                       # (position 4 + 1 of 5)
