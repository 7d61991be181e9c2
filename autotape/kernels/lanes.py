"""A broadcast operand's lane sum over contiguous terms, as vector additions (CPU).

kernels/program.py's ``lane_sum`` adds term k into lane k % LANES, each lane in order,
then the lanes in ``lane_tree``'s order: the sum every runner of a lean program makes,
so that their answers agree bit for bit. Written as eight scalar accumulators it stays
scalar: numba turns LLVM's SLP vectorizer off, and the loop vectorizer may not reorder
a floating-point sum. A cubic oscillator's reverse sweep (four parameters broadcast
over 32 cells) spent 9 of its 19.5 us there. Here the eight lanes are one
``<8 x double>`` accumulator, each block of eight terms one vector addition: the same
additions in the same order, so the same bits (16 us).
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable

from ..tuning import LANES

_LANE_VECTOR = ir.VectorType(ir.DoubleType(), LANES)
_I64 = ir.IntType(64)


@intrinsic
def lane_blocks(typingctx, W, first, blocks):
    """The LANES lanes of ``W[first + LANES * i + j]`` (i < blocks, lane j), each added
    from 0.0 in order of i, as a tuple: one vector addition per block."""
    if not (isinstance(W, types.Array) and W.dtype == types.float64 and W.ndim == 1
            and W.layout == "C"):
        return None
    signature = types.UniTuple(types.float64, LANES)(W, first, blocks)

    def codegen(context, builder, sig, args):
        w, start, count = args
        data = context.make_array(sig.args[0])(context, builder, w).data
        total = cgutils.alloca_once_value(builder, ir.Constant(_LANE_VECTOR, [0.0] * LANES))
        with cgutils.for_range(builder, count) as loop:
            at = builder.gep(data, [builder.add(start, builder.mul(loop.index,
                                                                   ir.Constant(_I64, LANES)))])
            block = builder.load(builder.bitcast(at, _LANE_VECTOR.as_pointer()), align=8)
            builder.store(builder.fadd(builder.load(total), block), total)
        lanes = builder.load(total)
        return context.make_tuple(builder, sig.return_type, [
            builder.extract_element(lanes, ir.Constant(ir.IntType(32), j))
            for j in range(LANES)])
    return signature, codegen


@register_jitable
def contiguous_lane_sum(W, first, n):
    """``lane_sum(W, first, n, 1)``, bit for bit: the whole blocks of LANES terms as
    vector additions, the last terms one lane each (an unused lane adds 0.0)."""
    m = n - n % LANES
    s0, s1, s2, s3, s4, s5, s6, s7 = lane_blocks(W, first, m // LANES)
    last = first + max(n - 1, 0)
    s0 += W[min(first + m, last)] if m < n else 0.0
    s1 += W[min(first + m + 1, last)] if m + 1 < n else 0.0
    s2 += W[min(first + m + 2, last)] if m + 2 < n else 0.0
    s3 += W[min(first + m + 3, last)] if m + 3 < n else 0.0
    s4 += W[min(first + m + 4, last)] if m + 4 < n else 0.0
    s5 += W[min(first + m + 5, last)] if m + 5 < n else 0.0
    s6 += W[min(first + m + 6, last)] if m + 6 < n else 0.0
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
