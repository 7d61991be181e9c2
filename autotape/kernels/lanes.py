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


def _summed_blocks(builder, data, start, count):
    """The <LANES x double> of lanes, block after block from 0.0 (see lane_blocks)."""
    total = cgutils.alloca_once_value(builder, ir.Constant(_LANE_VECTOR, [0.0] * LANES))
    with cgutils.for_range(builder, count) as loop:
        at = builder.gep(data, [builder.add(start, builder.mul(loop.index,
                                                               ir.Constant(_I64, LANES)))])
        block = builder.load(builder.bitcast(at, _LANE_VECTOR.as_pointer()), align=8)
        builder.store(builder.fadd(builder.load(total), block), total)
    return builder.load(total)


def _typed(W):
    return isinstance(W, types.Array) and W.dtype == types.float64 and W.ndim == 1 and \
        W.layout == "C"


@intrinsic
def lane_blocks(typingctx, W, first, blocks):
    """The LANES lanes of ``W[first + LANES * i + j]`` (i < blocks, lane j), each added
    from 0.0 in order of i, as a tuple: one vector addition per block."""
    if not _typed(W):
        return None
    signature = types.UniTuple(types.float64, LANES)(W, first, blocks)

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        lanes = _summed_blocks(builder, data, args[1], args[2])
        return context.make_tuple(builder, sig.return_type, [
            builder.extract_element(lanes, ir.Constant(ir.IntType(32), j))
            for j in range(LANES)])
    return signature, codegen


@intrinsic
def lane_total(typingctx, W, first, blocks):
    """lane_blocks' lanes added in lane_tree's order, neighbours in pairs as vectors:
    (s0 + s1, s2 + s3, ...), then their pairs, down to one."""
    if not _typed(W):
        return None
    signature = types.float64(W, first, blocks)

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        terms = _summed_blocks(builder, data, args[1], args[2])
        width = LANES
        while width > 1:
            width //= 2
            even = builder.shuffle_vector(terms, terms, ir.Constant(
                ir.VectorType(ir.IntType(32), width), list(range(0, 2 * width, 2))))
            odd = builder.shuffle_vector(terms, terms, ir.Constant(
                ir.VectorType(ir.IntType(32), width), list(range(1, 2 * width, 2))))
            terms = builder.fadd(even, odd)
        return builder.extract_element(terms, ir.Constant(ir.IntType(32), 0))
    return signature, codegen


@register_jitable
def contiguous_lane_sum(W, first, n):
    """``lane_sum(W, first, n, 1)``, bit for bit: the whole blocks of LANES terms as
    vector additions, then the last terms one lane each. Where there are none (n a
    multiple of LANES, a constant in generated code: the branch folds), the lanes are
    added as vectors too; lane_sum's 0.0 added to each there changes no bit (a sum
    from 0.0 is never -0.0)."""
    m = n - n % LANES
    if m == n:
        return lane_total(W, first, m // LANES)
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
