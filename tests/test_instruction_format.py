"""The lean program's instruction format (kernels/instruction_format.py): each layout's
encoder and the one walk over the slots an instruction reads, which lowering, the
analyses, checkpointing and the sparsity finder share; and that no other module
knows the layouts."""
import pathlib
import re

import numpy as np
import autotape as at
from autotape.kernels import instruction_format as fmt
from autotape.opcodes import GREATER, MUL, SIN, WHERE


def _program():
    """One instruction of every kind, over slots 0..3 (inputs) and later outputs."""
    code, pool = [], []
    fmt.encode_elementwise(code, SIN, 10, 2, 0, -1, -1, 1, 0, 0)          # 10, 11
    fmt.encode_elementwise(code, MUL, 12, 2, 10, 3, -1, 1, 0, 0)          # 12, 13
    fmt.encode_elementwise(code, GREATER, 14, 2, 12, 3, -1, 1, 0, 0)           # 14, 15
    fmt.encode_elementwise(code, WHERE, 16, 2, 10, 12, 14, 1, 1, 1)       # 16, 17
    fmt.encode_copy(code, 18, 16, 2)                                      # 18, 19
    fmt.encode_gather(code, pool, 20, np.array([19, 18, 1]))              # 20..22
    fmt.encode_scatter_add(code, pool, 23, 1, 20, np.array([0, 0, 0]))    # 23
    fmt.encode_call(code, pool, 24, 1, 7, np.array([23, 2]), np.array([1, 2]))
    return fmt.as_instructions(code), np.array(pool, np.int64)


def _reads(instr, pool, q, adjoint_only=False):
    fields = np.empty((fmt.field_capacity(instr, pool), 3), np.int64)
    m = fmt.operand_fields(instr, pool, q, adjoint_only, fields)
    return [(int(fmt.field_slot(instr, pool, q, fields, j)), int(fields[j, 2]))
            for j in range(m)]


def test_each_layout_reads_the_slots_its_encoder_was_given():
    instr, pool = _program()
    assert instr.shape == (8, fmt.WIDTH)
    assert [_reads(instr, pool, q) for q in range(8)] == [
        [(0, 2)], [(10, 2), (3, 1)], [(12, 2), (3, 1)], [(10, 2), (12, 2), (14, 2)],
        [(16, 2)], [(19, 1), (18, 1), (1, 1)], [(20, 1), (21, 1), (22, 1)],
        [(23, 1), (2, 2)]]
    assert [fmt.read_runs(instr, pool, q) for q in range(8)] == \
        [_reads(instr, pool, q) for q in range(8)]
    assert fmt.pool_reads(instr, pool, 6)[1].tolist() == [0, 0, 0]
    assert fmt.call_operands(instr, pool, 7) == [(23, 1), (2, 2)]
    assert int(instr[7, fmt.I_A]) == 7                   # a CALL keeps its tape row


def test_may_read_covers_every_slot_read_and_leaves_out_others():
    instr, pool = _program()
    read = fmt.may_read(instr, pool, 30)
    every = {s + k for q in range(8) for s, n in fmt.read_runs(instr, pool, q)
             for k in range(n)}
    assert every <= set(np.nonzero(read)[0].tolist())
    assert not read[[4, 5, 6, 24, 29]].any()                   # (never read)


def test_adjoints_skip_a_where_condition_and_a_comparison():
    instr, pool = _program()
    assert _reads(instr, pool, 2, adjoint_only=True) == []       # GREATER
    assert _reads(instr, pool, 3, adjoint_only=True) == [(10, 2), (12, 2)]
    assert _reads(instr, pool, 1, adjoint_only=True) == [(10, 2), (3, 1)]


def test_producers_are_marked_through_every_kind():
    instr, pool = _program()
    producer = fmt.producers(instr, 25)
    for adjoint_only, expected in ((False, [1, 1, 1, 1, 1, 1, 1, 1]),
                                   (True, [1, 1, 0, 1, 1, 1, 1, 1])):
        mark = np.zeros(8, np.uint8)
        mark[7] = 1
        fmt.mark_producers(instr, pool, producer, mark, adjoint_only)
        assert mark.tolist() == expected


def test_rewriting_renames_every_slot_but_never_a_scatters_offsets():
    instr, pool = _program()
    for q in range(8):
        fmt.rewrite_slots(instr, pool, q, lambda s, n: s + 100)
    assert [_reads(instr, pool, q)[0][0] for q in range(8)] == \
        [100, 110, 112, 110, 116, 119, 120, 123]
    assert instr[:, fmt.I_OUT].tolist() == [110, 112, 114, 116, 118, 120, 123, 124]
    assert fmt.pool_reads(instr, pool, 6)[1].tolist() == [0, 0, 0]
    assert fmt.call_operands(instr, pool, 7) == [(123, 1), (102, 2)]


def test_no_other_module_computes_an_instructions_columns():
    """The layouts live in one module: nobody else adds to a column number or spells a
    stride rule out."""
    package = pathlib.Path(at.__file__).parent
    pattern = re.compile(r"I_(?:A|SA|P|OUT|N) \+ |== COPY else int\(|\brange\(10\)")
    offenders = [str(p.relative_to(package)) for p in package.rglob("*.py")
                 if p.name != "instruction_format.py" and pattern.search(p.read_text())]
    assert offenders == []
