"""The lean program on a CUDA GPU (gpu.py launches it): one thread per point.

Values and adjoints are slot-major with the point innermost, ``V[slot * B + point]``,
the layout of the CPU's chunks with C = B: neighbouring threads touch neighbouring
addresses at every instruction. One launch runs the forward program and, per output,
the reverse sweep, so a call costs one launch whatever the program's length. The
interpreter and the op math are the CPU's (kernels/program.py with one lane).

Imported only when a GPU is asked for: it needs ``numba.cuda`` (the ``numba-cuda``
package, extra ``.[cuda]``; under ``NUMBA_ENABLE_CUDASIM=1`` numba's simulator).
"""
from numba import cuda

from .program import lane_drive



@cuda.jit
def run_points_cuda(instr, pool, divisor, live, const_slots, const_vals, in_slots,
                    out_slots, X, values, jac, want_jac, V, G):
    """Point ``cuda.grid(1)`` of X (B, inputs): its values (B, outputs) and, with
    ``want_jac``, d output / d input (B, outputs, inputs). V and G hold B points per
    slot; ``live[o]`` marks the instructions output o reaches."""
    p = cuda.grid(1)
    B = X.shape[0]
    if p < B:                  # (lanes p .. p of a "chunk" of all B points: driver.py)
        lane_drive((instr, pool, divisor, live), const_slots, const_vals, in_slots,
                   out_slots, X, values, jac, want_jac, 0, B, p, p + 1, V, G)
