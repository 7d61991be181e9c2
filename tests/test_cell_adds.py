"""kernels/cell_adds.py: runs of adds into one array at shifted cells written as one pass
over its cells, each cell's terms in the run's order (the same bits), run under Python."""
import types

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from autotape.kernels.cell_adds import cell_order, local_adds, permuted_order
from autotape.kernels.index_runs import affine_loops

BURGERS = """\
for k in range(126):
    GT[2 + k] += W[254 + k]
for k in range(126):
    GT[1 + k] += W[380 + k]
gx, gy = f64(GT[381]), -f64(GT[381])
GT[127] += gx
GT[126] += gy
for k in range(126):
    GT[2 + k] += W[506 + k]
    GT[0 + k] += W[632 + k]
gx, gy = f64(GT[128]), -f64(GT[128])
GT[1] += gx
GT[0] += gy
for k in range(128):
    gx, gy = f64(GT[0 + k]), f64(GT[0 + k])
    Go[1372 + k] += gx
    Go[1501 + k] += gy""".split("\n")


def _run(lines, dtype=np.float64, seed=0, arrays=None):
    rng = np.random.default_rng(seed)
    V = np.zeros(1, dtype)
    index = {k: np.array(v) for k, v in (arrays or {}).items()}
    arrays = {"GT": rng.standard_normal(800).astype(dtype),
              "Go": rng.standard_normal(1700).astype(dtype),
              "T": rng.standard_normal(100).astype(dtype),
              "W": rng.standard_normal(800) * 10.0 ** rng.integers(-8, 8, 800)}
    names = dict(arrays, V=V, f64=np.float64, **index)
    exec("\n".join(lines), names)
    return {k: names[k] for k in arrays}


def _same(a, b):
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_stencils_adjoint_adds_become_one_pass_with_the_same_bits(dtype):
    new = cell_order(BURGERS)
    headers = [line for line in new if line.startswith("for ")]
    # GT's three loops and four boundary adds: one pass (cells 2-125 in a loop, the
    # boundary cells each their own lines); the last loop writes Go at disjoint cells
    assert headers == ["for cell in range(2, 126):", "for k in range(128):"]
    _same(_run(BURGERS, dtype), _run(new, dtype))


class _Terms:
    """W whose element i is the tuple (i,): adds concatenate, so a cell ends up holding
    the indices of its terms in the order it received them."""
    def __getitem__(self, i):
        return (i,)


def _orders(lines):
    G = np.empty(16, object)
    G[:] = [() for _ in range(16)]
    identity = types.SimpleNamespace(type=lambda x: x)
    exec("\n".join(lines), {"G": G, "W": _Terms(), "V": types.SimpleNamespace(dtype=identity),
                            "f64": lambda x: x})
    return list(G)


def test_each_cell_gets_its_terms_in_the_runs_order():
    # within a loop, the statement whose iteration reaches a cell first adds first
    lines = ["for k in range(4):", "    G[1 + k] += W[k]", "    G[0 + k] += W[10 + k]",
             "G[2] += W[20]", "for k in range(3):", "    G[0 + k] += W[30 + k]"]
    new = cell_order(lines)
    assert new != lines and _orders(new) == _orders(lines)
    assert _orders(lines)[2] == (1, 12, 20, 32)


@pytest.mark.parametrize("lines", [
    # a term reads a cell the run writes
    ["for k in range(4):", "    GT[1 + k] += W[k]", "for k in range(4):",
     "    GT[0 + k] += GT[2]"],
    # a term reads the array at cells moving with k
    ["for k in range(4):", "    GT[1 + k] += W[k]", "for k in range(4):",
     "    GT[0 + k] += GT[100 + k]"],
    # a local the run would drop is read after it
    ["for k in range(4):", "    GT[1 + k] += W[k]", "gx = W[7]", "GT[0] += gx",
     "Go[0] += gx"],
    # no cell receives two terms
    ["for k in range(4):", "    GT[0 + k] += W[k]", "    GT[4 + k] += W[10 + k]"],
    # a loop within the loop
    ["for k in range(4):", "    for j in range(2):", "        GT[1 + k] += W[k]",
     "for k in range(4):", "    GT[0 + k] += W[9 + k]"],
    # Go is a view of G
    ["for k in range(4):", "    Go[1 + k] += W[k]", "for k in range(4):",
     "    Go[0 + k] += G[3]"],
    # scalar adds only
    ["GT[0] += W[1]", "GT[0] += W[2]"],
])
def test_runs_it_cannot_reorder_are_left_alone(lines):
    assert cell_order(lines) == lines


def test_a_local_read_again_at_the_next_repetition_keeps_the_run():
    # gx is read at the top of the sweep's next repetition before it is assigned
    lines = ["Go[0] += gx", "for k in range(4):", "    GT[1 + k] += W[k]", "gx = W[7]",
             "GT[2] += gx"]
    assert cell_order(lines) == lines


def test_a_local_read_before_its_assignment_keeps_the_run():
    lines = ["for k in range(4):", "    GT[1 + k] += gx", "    gx = W[k]",
             "for k in range(4):", "    GT[0 + k] += W[9 + k]"]
    assert cell_order(lines) == lines


def test_a_loops_locals_are_not_read_outside_it():
    lines = ["for k in range(4):", "    gx = W[k]", "    GT[1 + k] += gx",
             "GT[2] += gx"]                       # (gx: the loop's last value)
    assert cell_order(lines) == lines


_ITEM = st.one_of(
    st.tuples(st.just("loop"), st.integers(1, 6),
              st.lists(st.tuples(st.integers(0, 8), st.integers(0, 60),
                                 st.sampled_from(["+=", "="])), min_size=1, max_size=3)),
    st.tuples(st.just("line"), st.integers(0, 14), st.integers(0, 60),
              st.sampled_from(["+=", "="])),
    st.tuples(st.just("pair"), st.integers(0, 14), st.integers(0, 14), st.integers(0, 60)),
    # a line writing another array, and an add whose term reads it (kept lines)
    st.tuples(st.just("kept"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 20),
              st.sampled_from(["+=", "="])),
    st.tuples(st.just("reads T"), st.integers(0, 14), st.integers(0, 3)))


def _lines(items):
    out = []
    for item in items:
        if item[0] == "loop":
            out.append(f"for k in range({item[1]}):")
            out += [f"    GT[{a} + k] {how} W[{w} + k]" for a, w, how in item[2]]
        elif item[0] == "line":
            out.append(f"GT[{item[1]}] {item[3]} W[{item[2]}]")
        elif item[0] == "pair":
            out += [f"gx, gy = f64(W[{item[3]}]), -f64(GT[{700 + item[3]}])",
                    f"GT[{item[1]}] += gx", f"GT[{item[2]}] += gy"]
        elif item[0] == "kept":
            out += [f"gx, gy = f64(T[{item[2]}]), f64(GT[{item[3]}])",
                    f"T[{item[1]}] {item[4]} gx * 0.5 + gy"]
        else:
            out.append(f"GT[{item[1]}] += f64(T[{item[2]}]) * 3.0")
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(_ITEM, min_size=1, max_size=6), st.sampled_from([np.float64, np.float32]))
def test_random_runs_give_the_same_bits(items, dtype):
    lines = _lines(items) + ["Go[0] += W[1]"]
    _same(_run(lines, dtype, seed=len(lines)), _run(cell_order(lines), dtype, seed=len(lines)))


def test_lines_writing_other_arrays_run_before_the_pass():
    # Burgers' boundary cells: scalar adjoints written to GT between the adds into Go
    # (one of them into G[1], a parameter's, which cannot be one of Go's cells)
    lines = ["gx, gy = f64(GT[16]), -f64(GT[16])", "Go[140] += gx", "GT[88] = gy",
             "for k in range(10):", "    Go[130 + k] += W[10 + k]",
             "gx = f64(GT[88]) * 2.0", "GT[76] = gx", "Go[129] += f64(GT[76])",
             "G[1] += f64(GT[76]) * 3.0",
             "for k in range(10):", "    Go[129 + k] += W[30 + k]",
             "    Go[131 + k] += W[50 + k]"]
    new = cell_order(lines)
    assert new[:4] == ["GT[88] = (-f64(GT[16]))", "GT[76] = (f64(GT[88]) * 2.0)",
                       "G[1] += f64(GT[76]) * 3.0", "acc = Go[129]"]
    assert sum(line.startswith("for ") for line in new) == 1
    rng = np.random.default_rng(3)
    for dtype in (np.float64, np.float32):
        start, results = rng.standard_normal(300).astype(dtype), []
        for code in (lines, new):
            G = start.copy()                    # (Go: the window G[7:], as in a loop body)
            names = {"G": G, "Go": G[7:], "GT": np.arange(100.0).astype(dtype),
                     "W": np.linspace(-1.0, 1.0, 60) ** 3, "V": G, "f64": np.float64}
            exec("\n".join(code), names)
            results.append((G, names["GT"]))
        for a, b in zip(*results):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("between", [
    "W[12] = 1.0",                      # writes what an earlier term reads
    "GT[3] = f64(Go[140]) * 2.0",       # reads the run's target
    "GT[3] = f64(G[150]) * 2.0",        # reads its window's array where the cells may be
    "G[200] += 1.0",                    # writes where Go's cells may be
])
def test_lines_that_touch_the_runs_cells_or_terms_keep_it_apart(between):
    lines = ["for k in range(10):", "    Go[130 + k] += W[10 + k]", between,
             "for k in range(10):", "    Go[131 + k] += W[30 + k]"]
    assert cell_order(lines) == lines


def _rolled(grid, shift, axis, first=100):
    return [int(v) + first for v in np.roll(np.arange(grid * grid).reshape(grid, grid),
                                            shift, axis).ravel()]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_rolls_adjoint_adds_become_one_loop_with_the_same_bits(dtype):
    # a 2-D Laplacian's four rolls scatter into the grid's adjoint, an add in order
    # between them: one loop over the cells, reading each roll's term through its
    # inverse; then index_runs writes the inverses as runs (a frame row at each end)
    n = 24 * 24
    arrays = {f"S{q}": _rolled(24, shift, axis)
              for q, (shift, axis) in enumerate([(1, 0), (-1, 0), (1, 1), (-1, 1)])}
    lines = []
    for q, w in zip(range(4), (0, 50, 100, 150)):
        lines += [f"for k in range({n}):", f"    Go[S{q}[k]] += W[{w} + k]"]
        if q == 1:
            lines += [f"for k in range({n}):", "    Go[100 + k] += f64(GT[0 + k]) * 2.0"]
    new, inverses = permuted_order(lines, arrays)
    assert new[0] == f"for k in range({n}):" and sum(line.startswith("for ")
                                                    for line in new) == 1
    assert sorted(inverses) == ["R0", "R1", "R2", "R3"]
    every = dict(arrays, **inverses)
    _same(_run(lines, dtype, arrays=arrays), _run(new, dtype, arrays=every))
    rewritten = affine_loops("\n".join(new), every).split("\n")
    assert not any("R0[k]" in line for line in rewritten) and any(
        "for kr in range(22):" in line for line in rewritten)
    _same(_run(lines, dtype, arrays=arrays), _run(rewritten, dtype, arrays=every))


def test_adds_that_are_not_permutations_stay_as_they_are():
    arrays = {"S1": [100, 101, 101], "S2": [102, 100, 101], "S3": [100, 101, 102]}
    for other in ("S1", "S2"):                  # (a repeat; the same cells: no run of 2)
        lines = ["for k in range(3):", f"    Go[{other}[k]] += W[k]",
                 "for k in range(3):", "    Go[S9[k]] += W[3 + k]"]
        assert permuted_order(lines, arrays)[0] == lines
    lines = ["for k in range(3):", "    Go[S2[k]] += Go[3 + k]",     # (reads the target)
             "for k in range(3):", "    Go[S3[k]] += W[3 + k]"]
    assert permuted_order(lines, arrays)[0] == lines


_BODY = ["gx, gy = f64(W[k]), f64(W[20 + k])", "Go[40 + k] += gx", "Go[41 + k] += gy",
         "GT[40 + k] += gy", "gx = f64(GT[3 + k]) * 3.0", "Go[40 + k] += gx",
         "Go[41 + k] += f64(W[40 + k])", "GT[40 + k] += gx", "Go[40 + k] += -gy"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adds_into_one_cell_in_an_element_loop_go_through_a_local(dtype):
    new = local_adds(_BODY)
    assert sum("Go[40 + k]" in line for line in new) == 2        # (one load, one store)
    assert sum("GT[40 + k]" in line for line in new) == 2        # (its own local)
    loop = ["for k in range(12):"]
    _same(_run(loop + ["    " + line for line in _BODY], dtype),
          _run(loop + ["    " + line for line in new], dtype))


@pytest.mark.parametrize("between", [
    "gx = f64(Go[40 + k])",             # reads the cell
    "Go[S1[k]] += gx",                  # may write it
    "G[3] += gx",                       # its view's array
    "gx = f64(Go[52])",                 # a numbered cell, one of the loop's
])
def test_a_cell_touched_between_its_adds_is_left_in_memory(between):
    body = ["Go[40 + k] += f64(W[k])", between, "Go[40 + k] += f64(W[20 + k])"]
    assert local_adds(body) == body
