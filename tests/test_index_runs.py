"""Index arrays as runs (kernels/index_runs.py): the patterns of rolls, tiles, repeats
and concatenations, and the rewritten loops visiting the same elements in the same
order as the index array did."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotape.kernels.index_runs import (affine_loops, index_pattern, index_runs,
                                         joint_pattern, joint_runs)


def _expanded(pattern):
    repeats, (dk, ds), runs = pattern
    out = {}
    for i in range(repeats):
        for k0, s0, length, step in runs:
            for k in range(length):
                out[i * dk + k0 + k] = i * ds + s0 + step * k
    return [out[k] for k in range(len(out))]


@pytest.mark.parametrize("index", [
    np.roll(np.arange(32).reshape(4, 8), 1, 1).ravel(),     # a 2-D roll, last axis
    np.roll(np.arange(32).reshape(4, 8), -3, 0).ravel(),    # first axis
    np.tile(np.arange(5), 6),                               # a broadcast operand
    np.repeat(np.arange(6), 5),                             # the other side of a pair
    np.concatenate([[0], np.arange(1, 9), [8]]),            # an edge kept by concatenate
    np.arange(7)])
def test_patterns_of_rolls_tiles_repeats_and_edges(index):
    pattern = index_pattern(list(index))
    assert pattern is not None and len(pattern[2]) <= 4
    assert _expanded(pattern) == list(index)


def test_no_pattern_for_scattered_indices():
    assert index_pattern([3, 1, 1, 4, 0, 5] * 6) is None      # five runs a period
    assert index_runs([5, 5, 6, 9]) == [(0, 5, 2, 0), (2, 6, 1, 1), (3, 9, 1, 1)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=40))
def test_a_found_pattern_expands_to_the_index(index):
    pattern = index_pattern(index)
    if pattern is not None:
        assert _expanded(pattern) == index


def _run(source, arrays, n):
    """Run the loop ``source`` (over k < n) with numpy arrays; return what it wrote."""
    scope = {name: np.array(v) for name, v in arrays.items()}
    scope.update(T=np.zeros(n), Vo=np.arange(100.0) * 1.5, Go=np.zeros(100),
                 W=np.arange(n) + 0.25, order=[])
    exec(source, scope)
    return scope["T"], scope["Go"], scope["order"]


def test_rewritten_loops_visit_the_same_elements_in_the_same_order():
    index = list(np.roll(np.arange(48).reshape(3, 16), 2, 1).ravel() + 40)
    source = "\n".join([
        "for k in range(48):",
        "    T[3 + k - 3] = Vo[S4[k]]  # GATHER",
        "for k in range(48):",
        "    Go[S4[k]] += W[0 + k]",
        "    order.append(S4[k])",
        "for k in range(48):",
        "    T[k] += Vo[S4[k]] * M4[k]",        # (two arrays by k: their joint runs)
        "for k in range(48):",
        "    T[k] += Vo[S4[k]] * R4[k]"])       # (R4 has no pattern: left as it is)
    arrays = {"S4": index, "M4": [1] * 48,
              "R4": list(np.random.default_rng(1).permutation(48))}
    rewritten = affine_loops(source, arrays)
    assert rewritten.count("for kr in range(3):") == 3 and rewritten.count("S4[k]") == 1
    assert "M4[k]" not in rewritten and "R4[k]" in rewritten
    want, got = _run(source, arrays, 48), _run(rewritten, arrays, 48)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == want[2]


def test_short_runs_keep_their_index_array():
    # a 2 x 2 broadcast's pieces: nested loops of two save no indexed load worth their
    # nesting (INDEX_RUN_MEAN_MIN)
    source = "for k in range(4):\n    T[k] = T[S9[k]]  # GATHER"
    assert affine_loops(source, {"S9": [8, 8, 9, 9]}) == source
    assert index_pattern([8, 8, 9, 9]) is not None


def test_two_rolls_along_the_last_axis_share_runs_of_three():
    # a 2-D Laplacian's rolls by +1 and -1 along the last axis, read in one loop: cut
    # where either wraps, each row is one cell, 30 in order, one cell
    grid = np.arange(64 * 32).reshape(64, 32)
    left, right = (list(np.roll(grid, s, 1).ravel()) for s in (1, -1))
    repeats, (dk, ds), runs = joint_pattern([left, right], 8)
    assert repeats == 64 and dk == 32 and ds == (32, 32)
    assert [n for _, _, n, _ in runs] == [1, 30, 1]
    source = "for k in range(2048):\n    T[k] = Vo[S1[k]] - 2.0 * Vo[S2[k]]"
    arrays = {"S1": left, "S2": right}
    rewritten = affine_loops(source, arrays)
    assert "S1[k]" not in rewritten and "S2[k]" not in rewritten
    scope = {"Vo": np.random.default_rng(0).standard_normal(2048)}
    got, want = dict(scope, T=np.zeros(2048)), dict(scope, T=np.zeros(2048), **{
        k: np.array(v) for k, v in arrays.items()})
    exec(rewritten, got)
    exec(source, want)
    np.testing.assert_array_equal(got["T"], want["T"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=40))
def test_joint_runs_cover_every_arrays_elements(pairs):
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    got = {}
    for k0, s0, n, step in joint_runs([a, b]):
        for k in range(n):
            got[k0 + k] = tuple(s + t * k for s, t in zip(s0, step))
    assert [got[k] for k in range(len(pairs))] == pairs


def test_rows_read_and_write_through_views_from_the_row():
    # a roll along the last axis (a pattern of rows) and a first-axis roll beside it,
    # which wraps in the last row only (a frame after the rows): every plain index in
    # the rows goes through a view from the row; one that is not plain keeps kr
    grid = np.arange(16 * 16).reshape(16, 16)
    last, first = list(np.roll(grid, 1, 1).ravel() + 5), list(np.roll(grid, -1, 0).ravel())
    source = "\n".join(["for k in range(256):",
                        "    T[300 + k] = Vo[S1[k]] + 2.0 * Vo[S2[k]] + Vo[(3 + k) * C + 1]"])
    arrays = {"S1": last, "S2": first}
    rewritten = affine_loops(source, arrays)
    assert "for kr in range(15):" in rewritten and "T_16 = T[kr * 16:]" in rewritten
    assert "Vo[(3 + (kr * 16 + 0 + k)) * C + 1]" in rewritten
    scope = {"Vo": np.random.default_rng(2).standard_normal(800), "C": 2}
    got, want = dict(scope, T=np.zeros(600)), dict(scope, T=np.zeros(600), **{
        k: np.array(v) for k, v in arrays.items()})
    exec(rewritten, got)
    exec(source, want)
    np.testing.assert_array_equal(got["T"], want["T"])
