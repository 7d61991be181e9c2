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

from .program import lane_forward, lane_reverse



@cuda.jit
def run_points_cuda(instr, pool, divisor, live, const_slots, const_vals, in_slots,
                    out_slots, X, values, jac, want_jac, V, G):
    """Point ``cuda.grid(1)`` of X (B, inputs): its values (B, outputs) and, with
    ``want_jac``, d output / d input (B, outputs, inputs). V and G hold B points per
    slot; ``live[o]`` marks the instructions output o reaches."""
    p = cuda.grid(1)
    B = X.shape[0]
    if p >= B:
        return
    nslots = V.size // B
    for k in range(const_slots.size):
        V[const_slots[k] * B + p] = const_vals[k]
    for e in range(in_slots.size):
        V[in_slots[e] * B + p] = X[p, e]
    lane_forward(instr, pool, divisor, V, B, p, 0, instr.shape[0])
    for o in range(out_slots.size):
        values[p, o] = V[out_slots[o] * B + p]
    if not want_jac:
        return
    for o in range(out_slots.size):
        for s in range(nslots):
            G[s * B + p] = 0.0
        G[out_slots[o] * B + p] = 1.0
        lane_reverse(instr, pool, divisor, live[o], V, G, B, p, 0, instr.shape[0])
        for e in range(in_slots.size):
            jac[p, o, e] = G[in_slots[e] * B + p]
