"""The one driver (kernels/driver.py): its steps, the same answers compiled and in
Python, and every runner of a lean program going through it (that a program's runners
give the same numbers: test_program, test_gpu, test_settling, test_checkpointing and
test_calls_beside's Python driver against the compiled one)."""
import pathlib
import re

import numba
import numpy as np
import pytest
from numba.extending import register_jitable

import autotape as at
from autotape.kernels.driver import (load_points, load_tangent_points, points_driver,
                                     seed_points, store_points, store_tangent_points,
                                     tangents_driver, zero_nothing)

PACKAGE = pathlib.Path(at.__file__).parent


def test_a_short_last_chunk_repeats_its_last_point_and_stores_only_real_ones():
    X = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    C, p0 = 4, 2                                 # (points 2, then 2 again, 2, 2)
    V = np.full(4 * C, np.nan)
    load_points(V, C, 0, C, np.array([3]), np.array([7.0]), np.array([1, 0]), X, p0)
    assert V[C:2 * C].tolist() == [3.0] * 4 and V[:C].tolist() == [30.0] * 4
    assert V[3 * C:].tolist() == [7.0] * 4 and np.isnan(V[2 * C:3 * C]).all()
    values = np.zeros((3, 1))
    store_points(V, C, 0, C, np.array([1]), values, p0)
    assert values[:, 0].tolist() == [0.0, 0.0, 3.0]


def test_one_lane_loads_only_its_own_point():
    X = np.arange(6.0).reshape(3, 2)
    V = np.full(2 * 3, -1.0)
    load_points(V, 3, 1, 2, np.zeros(0, np.int64), np.zeros(0), np.array([0, 1]), X, 0)
    assert V.tolist() == [-1.0, 2.0, -1.0, -1.0, 3.0, -1.0]


def test_one_lane_loads_and_stores_only_its_own_point_s_tangents():
    X, K = np.arange(6.0).reshape(3, 2), 2
    S = np.arange(12.0).reshape(3, 2, K)
    V, T = np.full(2 * 3, -1.0), np.full(2 * K * 3, -1.0)
    load_tangent_points(V, T, 3, K, 1, 2, np.zeros(0, np.int64), np.zeros(0),
                        np.array([0, 1]), X, S, 0)
    assert V.tolist() == [-1.0, 2.0, -1.0, -1.0, 3.0, -1.0]
    assert T.reshape(2, K, 3)[:, :, 1].tolist() == [[4.0, 5.0], [6.0, 7.0]]
    assert (np.delete(T.reshape(2, K, 3), 1, axis=2) == -1.0).all()
    values, tangents = np.zeros((3, 1)), np.zeros((3, 1, K))
    store_tangent_points(V, T, 3, K, 1, 2, np.array([1]), values, tangents, 0)
    assert values[:, 0].tolist() == [0.0, 3.0, 0.0]
    assert tangents[:, 0].tolist() == [[0.0, 0.0], [6.0, 7.0], [0.0, 0.0]]


def test_the_seed_zeroes_all_but_the_slots_the_hook_kept():
    C = 2
    G = np.full(5 * C, 9.0)
    seed_points(G, C, 0, C, 1, 3, 4)             # (slots 1 and 2 kept)
    assert G.tolist() == [0, 0, 9, 9, 9, 9, 0, 0, 1, 1]
    G[:] = 9.0
    seed_points(G, C, 0, C, 0, 0, 2)             # ((0, 0): none kept)
    assert G.tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 0, 0]


# a tiny program by hand: slot 2 = x0 * x1 (slot 0, 1), slot 3 = slot 2 + c (slot 4)

@register_jitable
def _forward(code, V, C, lane):
    for j in range(C):
        V[2 * C + j] = V[j] * V[C + j]
        V[3 * C + j] = V[2 * C + j] + V[4 * C + j]
    return 0


@register_jitable
def _reverse(code, V, G, C, j0, j1, o, ran):
    for j in range(C):
        G[2 * C + j] += G[3 * C + j]
        G[j] += G[2 * C + j] * V[C + j]
        G[C + j] += G[2 * C + j] * V[j]
    return ran + code[0]


@register_jitable
def _tangents(code, V, T, C, K, lane):
    _forward(code, V, C, 0)
    for l in range(K):
        for j in range(C):
            T[(2 * K + l) * C + j] = T[l * C + j] * V[C + j] + V[j] * T[(K + l) * C + j]
            T[(3 * K + l) * C + j] = T[(2 * K + l) * C + j]


_drive_chunks = points_driver(_forward, zero_nothing, _reverse, "test")[1]
_tangent_chunks = tangents_driver(_tangents, "test")[1]


@numba.njit
def _compiled(code, const_slots, const_vals, in_slots, out_slots, X, values, jac, C, V, G):
    chunks = (X.shape[0] + C - 1) // C
    _drive_chunks(code, const_slots, const_vals, in_slots, out_slots, X, values, jac, True,
                  0, chunks, 1, C, V, G)


@numba.njit
def _compiled_tangents(code, const_slots, const_vals, in_slots, out_slots, X, S, values,
                       tangents, C, V, T):
    chunks = (X.shape[0] + C - 1) // C
    _tangent_chunks(code, const_slots, const_vals, in_slots, out_slots, X, S, values,
                    tangents, 0, chunks, 1, C, V, T)


def _by_hand(X):
    values = (X[:, 0] * X[:, 1] + 0.5)[:, None]
    jac = np.stack([X[:, 1], X[:, 0]], axis=1)[:, None, :]
    return values, jac


@pytest.mark.parametrize("C", [1, 2, 4])
def test_compiled_and_python_drivers_give_the_program_s_values_and_jacobian(C):
    X = np.random.default_rng(0).normal(size=(7, 2))
    args = ((0,), np.array([4]), np.array([0.5]), np.array([0, 1]), np.array([3]), X)
    values, jac = np.zeros((7, 1)), np.zeros((7, 1, 2))
    _compiled(*args, values, jac, C, np.zeros(5 * C), np.zeros(5 * C))
    expected = _by_hand(X)
    np.testing.assert_array_equal(values, expected[0])
    np.testing.assert_array_equal(jac, expected[1])
    in_python = points_driver(_forward, zero_nothing, _reverse, in_python=True)[1]
    values2, jac2 = np.zeros((7, 1)), np.zeros((7, 1, 2))
    in_python(*args, values2, jac2, True, 0, (7 + C - 1) // C, 1, C, np.zeros(5 * C),
              np.zeros(5 * C))
    np.testing.assert_array_equal(values2, values)
    np.testing.assert_array_equal(jac2, jac)


@pytest.mark.parametrize("shared", [True, False])
def test_the_tangents_driver_gives_jacobian_times_directions(shared):
    rng = np.random.default_rng(1)
    X, C, K = rng.normal(size=(5, 2)), 2, 3
    S = rng.normal(size=(1 if shared else 5, 2, K))
    args = ((0,), np.array([4]), np.array([0.5]), np.array([0, 1]), np.array([3]), X, S)
    values, tangents = np.zeros((5, 1)), np.zeros((5, 1, K))
    _compiled_tangents(*args, values, tangents, C, np.zeros(5 * C), np.zeros(5 * K * C))
    expected = _by_hand(X)
    np.testing.assert_array_equal(values, expected[0])
    np.testing.assert_allclose(tangents, expected[1] @ S, rtol=1e-14)
    in_python = tangents_driver(_tangents, in_python=True)[0]
    values2, tangents2 = np.zeros((5, 1)), np.zeros((5, 1, K))
    for p0 in range(0, 5, C):
        in_python(*args, values2, tangents2, p0, C, 0, C, np.zeros(5 * C),
                  np.zeros(5 * K * C))
    np.testing.assert_array_equal(values2, values)
    np.testing.assert_array_equal(tangents2, tangents)


def test_the_reverse_hook_s_count_reaches_the_next_output():
    """``ran`` flows from the forward through each output's reverse to the next (a
    settled loop's fallback runs every repetition once, for all later outputs)."""
    seen = []

    def forward(code, V, C, lane):
        return 10

    def prepare(code, G, C, j0, j1, o, ran):
        seen.append(("prepare", o, ran))
        return 0, 0

    def reverse(code, V, G, C, j0, j1, o, ran):
        seen.append(("reverse", o, ran))
        return ran + 1
    drive = points_driver(forward, prepare, reverse, in_python=True)[0]
    X = np.zeros((1, 1))
    drive(None, np.zeros(0, np.int64), np.zeros(0), np.array([0]), np.array([0, 0]), X,
          np.zeros((1, 2)), np.zeros((1, 2, 1)), True, 0, 1, 0, 1, np.zeros(1), np.zeros(1))
    assert seen == [("prepare", 0, 10), ("reverse", 0, 10), ("prepare", 1, 11),
                    ("reverse", 1, 11)]


def test_no_runner_but_the_driver_loads_seeds_or_stores_points():
    """Loading points into slots, seeding outputs and storing values and Jacobian rows
    are the driver's steps alone (generated code, codegen.py, binds a point's inputs to
    scalars and has no slots: it is not a runner of slots)."""
    step = re.compile(r"(values|jac|tangents)\[p0 \+ j|G\[out_slots?\[o\][^\]]*\] = 1\.0|"
                      r"X\[p0 \+ min\(j")
    found = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
             if step.search(path.read_text()) and path.name != "driver.py"]
    assert found == []
