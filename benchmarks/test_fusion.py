"""Fused element loops in compiled loop bodies (autotape/kernels/fusion.py) against the
same bodies unfused, paired round by round in one process (``run_paired``: the median
of the per-round time ratios, fused / unfused, in extra_info["fused_over_unfused"]).
Both bodies give the same bits (checked here). Models: the zoo's loops over arrays.

    python -m pytest benchmarks/test_fusion.py --benchmark-json=fusion.json
"""
import numpy as np
import pytest

import autotape as at
import zoo
from autotape.kernels import fusion, loops
from conftest import run_paired

MODELS = ["reaction_diffusion", "burgers", "n_body", "spring_chain"]


def _body_kernels(lean, fused):
    """The loop body's kernels (one point, value and gradient), fused or not."""
    end = lean.loop[0] + lean.loop[1] * lean.loop[2]
    saved = fusion.MIN_RUN
    fusion.MIN_RUN = 2 if fused else 10 ** 9
    try:
        key, source = loops.loop_source(lean.instr, lean.loop, lean.const_slots,
                                        lean._read_after(end), lean.loop_table, lean.pool,
                                        lean.divisor)
    finally:
        fusion.MIN_RUN = saved
    return loops.loop_kernels(key, source, np.float64, "reverse", wait="every")


@pytest.mark.parametrize("name", MODELS)
def test_fused_against_unfused_body(benchmark, name, monkeypatch):
    monkeypatch.setenv("AUTOTAPE_GENERATED", "0")         # (the loop body, not codegen.py)
    benchmark.group = f"fused loop body: {name}, value + gradient"
    p = zoo.PARAMS[name]
    c = at.compile(getattr(zoo, name), p)
    c.value_and_grad(p)
    c = c.wait_compiled()
    lean = next(iter(c._programs.values())).lean
    assert lean.loop is not None
    kernels = {fused: _body_kernels(lean, fused) for fused in (True, False)}
    results = {}

    def run(fused):
        def call():
            lean.loop_kernels = kernels[fused]
            results[fused] = c.value_and_grad(p)
        return call
    run(True)()
    run(False)()
    np.testing.assert_array_equal(results[True][1].numpy(), results[False][1].numpy())
    run_paired(benchmark, run(True), run(False), "fused_over_unfused",
               rounds=30 if name == "reaction_diffusion" else 200)
