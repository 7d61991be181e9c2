"""Reads an element loop does not change, loaded once before it
(kernels/invariant_reads.py): what may move, and what must stay in the loop."""
from autotape.kernels.invariant_reads import hoisted_reads


def _loop(*lines, n=8):
    return "\n".join(["        x = 1", f"        for k in range({n}):"] +
                     ["            " + line for line in lines] + ["        y = 2"])


def test_fixed_values_and_parameters_load_before_the_loop():
    got = hoisted_reads(_loop("T[8 + k] = f64(T[0]) * f64(Vo[40 + k]) + f64(V[3])",
                              "Vo[90 + k] = f64(T[8 + k]) * f64(V[3]) + f64(V[tb + t * 2 + 1])"))
    assert got.split("\n") == [
        "        x = 1",
        "        inv0 = f64(T[0])",
        "        inv1 = f64(V[3])",
        "        inv2 = f64(V[tb + t * 2 + 1])",
        "        for k in range(8):",
        "            T[8 + k] = inv0 * f64(Vo[40 + k]) + inv1",
        "            Vo[90 + k] = f64(T[8 + k]) * inv1 + inv2",
        "        y = 2"]


def test_what_the_loop_may_write_stays_in_it():
    cases = [
        ("T[8 + k] = f64(T[12]) * 2.0",),              # T[12] is one of the cells written
        ("T_32[8 + k] = f64(T[70]) * 2.0",),           # a row's view writes anywhere in T
        ("T[S3[k]] = f64(T[70]) * 2.0",),              # so does a scatter
        ("V[5 + k] = f64(V[3]) * 2.0",),               # V written: nothing of it moves
        ("Vo[5 + k] = f64(Vo[6]) * 2.0",),             # a moved cell among those written
        ("T[8 + k] = f64(Vo[40 + k]) * f64(Vo[90 + k])",),   # reads of the cells
        ("T[(8 + k) * C + j] = f64(V[(3) * C + j])",),  # a chunk's point j
        ("GT[3] += f64(G[8]) * f64(GT[9 + k])",),       # adjoints are added to in loops
    ]
    for lines in cases:
        text = _loop(*lines)
        assert hoisted_reads(text) == text, lines


def test_a_read_beside_the_cells_written_moves():
    got = hoisted_reads(_loop("T[8 + k] = f64(T[16]) + f64(Vo[7])", n=8))
    assert "inv0 = f64(T[16])" in got and "inv1 = f64(Vo[7])" in got


def test_each_loop_hoists_its_own_reads_and_nested_text_keeps_its_indent():
    text = "\n".join([
        "    for k in range(4):",
        "        T[4 + k] = f64(V[1]) + f64(Vo[k])",
        "    if c:",
        "        for k in range(4):",
        "            T[8 + k] = f64(V[1]) * f64(T[4 + k])"])
    assert hoisted_reads(text).split("\n") == [
        "    inv0 = f64(V[1])",
        "    for k in range(4):",
        "        T[4 + k] = inv0 + f64(Vo[k])",
        "    if c:",
        "        inv1 = f64(V[1])",
        "        for k in range(4):",
        "            T[8 + k] = inv1 * f64(T[4 + k])"]
