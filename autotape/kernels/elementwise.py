"""Elementwise ops, compiled tier: the value and the partial derivatives of each op
per element, and the forward and VJP kernels built on them.

The tables dispatch on the opcode (a constant within a row), so each kernel's element
loop folds to one line of the table. Conventions at kinks follow torch (see
ops/elementwise.py, whose table names each op and documents it): abs'(0) = relu'(0) = 0,
sqrt'(0) = inf, maximum/minimum split the gradient evenly on ties, d(x**y)/dx = 0
where y == 0, d(x**y)/dy = 0 where x == 0 and y >= 0. An opcode a table does not know
gives nan; tests/test_op_table.py checks that every opcode is in every table.
"""
import math

import numba
import numpy as np
from numba.extending import register_jitable

from . import libm, scalar, vmath
from ..opcodes import (ABS, ADD, ARCCOS, ARCCOSH, ARCSIN, ARCSINH, ARCTAN, ARCTAN2, ARCTANH,
                       CEIL, COMPARE_FIRST, COMPARE_LAST, COS, COSH, DIV, EQUAL, ERF, EXP,
                       EXP2, EXPM1, FLOOR, FMOD, GREATER, GREATER_EQUAL, HYPOT, LESS,
                       LESS_EQUAL, LOG, LOG1P, LOG2, LOG10, LOGADDEXP, MAXIMUM, MINIMUM, MOD,
                       MUL, NEG, NOT_EQUAL, POW, RECIPROCAL, RELU, ROUND, SIGMOID, SIGN, SIN,
                       SINH, SOFTPLUS, SQRT, SQUARE, SUB, TAN, TANH, UNARY_LAST)
from ..tape_format import A, AUX, B, OP, where_condition
from .cache import cached_njit, distinct
from .context import (accumulator, adjoint, first_write, first_write_lane, has_adjoint,
                      lane_block, live, operand_map, size_of, trailing, value)

LN2, LN10 = libm.log(2.0), libm.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / libm.sqrt(math.pi)
MIN_NORMAL = 2.2250738585072014e-308            # the smallest normal float64


# ---- the tables: each op's value and its partial derivatives, z = f(x) or f(x, y) ----------
# Each value table is followed by its partial tables, in the same order of ops. The
# arithmetic ops are kept in small functions that the compiler inlines into the kernels'
# element loops; the rest of each table follows in a second function.

@register_jitable
def power(x, p):
    """x ** p; by repeated squaring when p is a small integer (libm pow costs ~40 ns)."""
    if p == scalar.floor(p) and abs(p) <= 64:
        n = int(abs(p))
        r = 1.0
        while n:
            if n & 1:
                r *= x
            x *= x
            n >>= 1
        return 1.0 / r if p < 0 else r
    return x ** p


@register_jitable
def _remainder(x, y):
    """numpy's remainder: the sign of y, a zero signed as y (numba's np.remainder on
    floats is not numpy's there, and 1 / -0 is -inf)."""
    r = scalar.fmod(x, y)
    if r != 0.0:
        if (r < 0.0) != (y < 0.0):
            r += y
    else:
        r = math.copysign(0.0, y)
    return r


@register_jitable
def _floor_divide(x, y):
    """Python's x // y on floats, which numpy's mod pairs with (mod(x, y) = x - (x // y)
    * y), so d mod / dy = -(x // y). Not floor(x / y): -0.5 // inf is -1, while
    floor(-0.5 / inf) is -0. CPython's algorithm, through fmod."""
    if y == 0.0:
        return x / y
    m = scalar.fmod(x, y)
    d = (x - m) / y
    if m != 0.0 and ((y < 0.0) != (m < 0.0)):
        d -= 1.0
    if d != 0.0:
        f = scalar.floor(d)
        return f + 1.0 if d - f > 0.5 else f
    return math.copysign(0.0, x / y)


@register_jitable
def _over(a, b):
    """a / b, or 0 where b is 0 (arctan2's partials at the origin, as torch's)."""
    return a / b if b != 0.0 else 0.0


@register_jitable
def _round_half_even(x):
    if not abs(x) < 4503599627370496.0:          # 2**52: already an integer (or nan, inf)
        return x
    r = scalar.floor(x)
    d = x - r
    if d > 0.5 or (d == 0.5 and r % 2 != 0):
        r += 1.0
    return math.copysign(r, x) if r == 0 else r


@register_jitable
def unary_value(op, x):
    """z = f(x)."""
    if op == NEG:     return -x
    if op == ABS:     return abs(x)
    if op == EXP:     return libm.exp(x)
    if op == LOG:     return libm.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    if op == SQRT:    return libm.sqrt(x) if x >= 0 else math.nan
    if op == SIN:     return vmath.sin(x)
    if op == COS:     return vmath.cos(x)
    if op == TAN:     return libm.tan(x)
    if op == TANH:    return libm.tanh(x)
    if op == SIGMOID: return 1.0 / (1.0 + libm.exp(-x)) if x >= 0 else \
                             libm.exp(x) / (1.0 + libm.exp(x))
    if op == RELU:    return 0.0 if x <= 0 else x   # (nan stays nan, as torch's)
    return _more_unary_value(op, x)


@register_jitable
def unary_partial(op, x, z):
    """dz/dx."""
    if op == NEG:     return -1.0
    if op == ABS:     return 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)   # 0 at 0, nan
    if op == EXP:     return z
    if op == LOG:     return 1.0 / x
    if op == SQRT:    return 1.0 / (2.0 * z)
    if op == SIN:     return vmath.cos(x)
    if op == COS:     return -vmath.sin(x)
    if op == TAN:     return 1.0 + z * z
    if op == TANH:    return 1.0 - z * z
    if op == SIGMOID: return z * (1.0 - z)
    if op == RELU:    return 0.0 if z <= 0 else 1.0   # (nan passes, as torch's)
    return _more_unary_partial(op, x, z)


@register_jitable
def _more_unary_value(op, x):
    if op == LOG1P:   return libm.log1p(x) if x >= -1 else math.nan
    if op == EXPM1:   return libm.expm1(x)
    if op == LOG2:    return libm.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    if op == LOG10:   return libm.log10(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    if op == EXP2:    return 2.0 ** x
    if op == SQUARE:  return x * x
    if op == RECIPROCAL: return 1.0 / x
    if op == SINH:    return libm.sinh(x)
    if op == COSH:    return libm.cosh(x)
    if op == ARCSIN:  return libm.asin(x) if abs(x) <= 1 else math.nan
    if op == ARCCOS:  return libm.acos(x) if abs(x) <= 1 else math.nan
    if op == ARCTAN:  return libm.atan(x)
    if op == ARCSINH: return libm.asinh(x)
    if op == ARCCOSH: return libm.acosh(x) if x >= 1 else math.nan
    if op == ARCTANH: return libm.atanh(x) if abs(x) < 1 else (
                             math.copysign(math.inf, x) if abs(x) == 1 else math.nan)
    if op == SOFTPLUS: return (x if x > 0 else 0.0) + libm.log1p(libm.exp(-abs(x)))
    if op == ERF:     return math.erf(x)
    if op == SIGN:    return 1.0 if x > 0 else (-1.0 if x < 0 else x)
    if op == FLOOR:   return scalar.floor(x)      # (numba's math.floor is an int64:
    if op == CEIL:    return scalar.ceil(x)       # garbage at inf, nan, 1e20)
    if op == ROUND:   return _round_half_even(x)
    return math.nan


@register_jitable
def _more_unary_partial(op, x, z):
    if op == LOG1P:   return 1.0 / (1.0 + x)
    if op == EXPM1:   return z + 1.0
    if op == LOG2:    return 1.0 / (x * LN2)
    if op == LOG10:   return 1.0 / (x * LN10)
    if op == EXP2:    return z * LN2
    if op == SQUARE:  return 2.0 * x
    if op == RECIPROCAL: return -z * z
    if op == SINH:    return libm.cosh(x)
    if op == COSH:    return libm.sinh(x)
    if op == ARCSIN:  return 1.0 / libm.sqrt(1.0 - x * x)
    if op == ARCCOS:  return -1.0 / libm.sqrt(1.0 - x * x)
    if op == ARCTAN:  return 1.0 / (1.0 + x * x)
    if op == ARCSINH: return 1.0 / libm.sqrt(x * x + 1.0)
    if op == ARCCOSH: return 1.0 / libm.sqrt(x * x - 1.0)
    if op == ARCTANH: return 1.0 / (1.0 - x * x)
    if op == SOFTPLUS: return 1.0 / (1.0 + libm.exp(-x)) if x >= 0 else libm.exp(x) / (
                                    1.0 + libm.exp(x))
    if op == ERF:     return TWO_OVER_SQRT_PI * libm.exp(-x * x)
    if op == SIGN or op == FLOOR or op == CEIL or op == ROUND:
        return 0.0
    return math.nan


@register_jitable
def _pow_partial(x, y, z):
    """d (x ** y) / dx = y x ** (y - 1): as y * (z / x) where y is not a small integer
    and z is a finite normal number (pow costs ~10 ns a call: n-body's r2 ** 1.5 paid one
    in its forward and another in its partial), else by ``power`` (x = 0, inf, or z
    underflowed: 1e-300 ** 1.5 is 0.0, its partial 1.5e-150). A square's and a cube's
    are written out (power's bits: 2 x and 3 (x x)): power's loop inside a loop body's
    element loop kept it scalar, 9 ns a cell of a cubic oscillator against 0.1."""
    if y == 2.0:
        return 2.0 * x
    if y == 3.0:
        return 3.0 * (x * x)
    if (y != scalar.floor(y) or abs(y) > 64) and MIN_NORMAL <= abs(z) < math.inf:
        return y * (z / x)
    return y * power(x, y - 1.0)


@register_jitable
def _pow_value(x, y):
    """x ** y; a square as x * x, as numpy, torch and jax compute it (correctly rounded,
    where libm's pow differed from it in 0.08% of random doubles, and cost 13 ns a call
    against 1), a cube as torch's x * x * x."""
    if y == 2.0:
        return x * x
    return x * x * x if y == 3.0 else x ** y


@register_jitable
def binary_value(op, x, y):
    """z = f(x, y)."""
    if op == ADD:     return x + y
    if op == SUB:     return x - y
    if op == MUL:     return x * y
    if op == DIV:     return x / y
    if op == POW:     return _pow_value(x, y)
    return _more_binary_value(op, x, y)


@register_jitable
def binary_partial_x(op, x, y, z):
    """dz/dx."""
    if op == ADD:     return 1.0
    if op == SUB:     return 1.0
    if op == MUL:     return y
    if op == DIV:     return 1.0 / y
    if op == POW:     return 0.0 if y == 0 else _pow_partial(x, y, z)
    return _more_binary_partial_x(op, x, y, z)


@register_jitable
def binary_partial_y(op, x, y, z):
    """dz/dy."""
    if op == ADD:     return 1.0
    if op == SUB:     return -1.0
    if op == MUL:     return x
    if op == DIV:     return -x / (y * y)
    if op == POW:     return 0.0 if (x == 0 and y >= 0) else z * libm.log(x)
    return _more_binary_partial_y(op, x, y, z)


@register_jitable
def _more_binary_value(op, x, y):
    if op == MAXIMUM: return x if (x >= y or x != x) else y
    if op == MINIMUM: return x if (x <= y or x != x) else y
    if op == ARCTAN2: return libm.atan2(x, y)
    if op == HYPOT:   return libm.hypot(x, y)
    if op == LOGADDEXP:
        if x == y:                                 # (inf, inf): inf, not inf - inf
            return x + LN2
        m = x if x > y else y
        return m if m == -math.inf else m + libm.log1p(libm.exp(-abs(x - y)))
    if op == FMOD:    return scalar.fmod(x, y)
    if op == MOD:     return _remainder(x, y)
    if op == LESS:    return 1.0 if x < y else 0.0
    if op == LESS_EQUAL: return 1.0 if x <= y else 0.0
    if op == GREATER: return 1.0 if x > y else 0.0
    if op == GREATER_EQUAL: return 1.0 if x >= y else 0.0
    if op == EQUAL:   return 1.0 if x == y else 0.0
    if op == NOT_EQUAL: return 1.0 if x != y else 0.0
    return math.nan


@register_jitable
def _more_binary_partial_x(op, x, y, z):
    if op == MAXIMUM: return 0.5 if x == y else (0.0 if x < y else 1.0)
    if op == MINIMUM: return 0.5 if x == y else (0.0 if x > y else 1.0)
    if op == ARCTAN2: return _over(y, x * x + y * y)
    if op == HYPOT:   return x / z
    if op == LOGADDEXP: return 1.0 / (1.0 + libm.exp(y - x))   # (torch's form: no inf - inf)
    if op == FMOD:    return 1.0
    if op == MOD:     return 1.0
    if COMPARE_FIRST <= op <= COMPARE_LAST:
        return 0.0
    return math.nan


@register_jitable
def _more_binary_partial_y(op, x, y, z):
    if op == MAXIMUM: return 0.5 if x == y else (0.0 if y < x else 1.0)
    if op == MINIMUM: return 0.5 if x == y else (0.0 if y > x else 1.0)
    if op == ARCTAN2: return _over(-x, x * x + y * y)
    if op == HYPOT:   return y / z
    if op == LOGADDEXP: return 1.0 / (1.0 + libm.exp(x - y))
    if op == FMOD:    return -scalar.trunc(x / y)
    if op == MOD:     return -_floor_divide(x, y)
    if COMPARE_FIRST <= op <= COMPARE_LAST:
        return 0.0
    return math.nan


@register_jitable
def selects(op):
    """Whether a zero partial of op is a mask (torch selects there): relu, maximum /
    minimum, the step functions (sign, floor, ceil, round), and power, whose
    derivatives torch masks where the exponent is 0 (d/dx) or the base is 0 (d/dy)."""
    return (op == RELU or op == MAXIMUM or op == MINIMUM or op == SIGN or op == FLOOR
            or op == CEIL or op == ROUND or op == POW
            or (COMPARE_FIRST <= op <= COMPARE_LAST))


@register_jitable
def passes_nothing(op):
    """The ops whose derivative is zero everywhere (step functions, comparisons): their
    VJP writes nothing, so an operand reached only through them stays untouched and
    passes nothing on (0 * inf further down would make nan; torch's rounding division
    and comparisons pass nothing either)."""
    return (op == SIGN or op == FLOOR or op == CEIL or op == ROUND
            or (COMPARE_FIRST <= op <= COMPARE_LAST))


@register_jitable
def times(op, g, d):
    """g * d, the chain rule's product, except that where op's derivative selects, a
    zero partial passes 0 even when g is inf or nan (torch's masks do the same:
    sqrt(relu(x)) has gradient 0, not nan, at x <= 0). With op a constant the test
    folds away."""
    if d == 0.0 and selects(op):
        return 0.0
    return g * d


@register_jitable
def tangent_times(op, t, d):
    """t * d for a tangent t in forward mode: a zero tangent carries nothing, even
    through an inf or nan partial (the twin of the reverse sweep's live sets: an input
    a value does not depend on, or a zero direction, gives 0, not nan)."""
    if t == 0.0:
        return 0.0
    return times(op, t, d)


# ---- forward kernels: the compiled replay of a row ------------------------------------------

@register_jitable
def elementwise_forward(ctx, i):
    """Recompute a unary or binary row's value from its operands (numpy broadcasting)."""
    op = ctx.rows[i, OP]
    a, b = ctx.rows[i, A], ctx.rows[i, B]
    z, x = value(ctx, i), value(ctx, a)
    n = z.size
    if op == TANH and n > 1:                     # the SIMD loops of the eager forward
        vmath._tanh_into(x, z)
    elif (op == SIN or op == COS) and n > 1:
        vmath._sin_into(x, z, 0.0 if op == SIN else 1.0)
    elif op <= UNARY_LAST:
        for k in range(n):
            z[k] = unary_value(op, x[k])
    if op <= UNARY_LAST:
        return
    y = value(ctx, b)
    if (x.size == n or x.size == 1) and (y.size == n or y.size == 1):
        sx, sy = (1 if x.size == n else 0), (1 if y.size == n else 0)
        if op == ADD:
            for k in range(n):
                z[k] = x[k * sx] + y[k * sy]
        elif op == SUB:
            for k in range(n):
                z[k] = x[k * sx] - y[k * sy]
        elif op == MUL:
            for k in range(n):
                z[k] = x[k * sx] * y[k * sy]
        elif op == POW and y.size == 1 and y[0] == 2.0:    # numpy squares too
            for k in range(n):
                z[k] = x[k * sx] * x[k * sx]
        else:
            for k in range(n):
                z[k] = binary_value(op, x[k * sx], y[k * sy])
        return
    ma, mb = operand_map(ctx, a, i), operand_map(ctx, b, i)
    for k in range(n):
        z[k] = binary_value(op, x[ma[k]], y[mb[k]])


@register_jitable
def where_forward(ctx, i):
    a, b, c = ctx.rows[i, A], ctx.rows[i, B], where_condition(ctx.ipool, ctx.rows[i, AUX])
    z, x, y, cond = value(ctx, i), value(ctx, a), value(ctx, b), value(ctx, c)
    ma, mb, mc = operand_map(ctx, a, i), operand_map(ctx, b, i), operand_map(ctx, c, i)
    for k in range(z.size):
        z[k] = x[ma[k]] if cond[mc[k]] != 0 else y[mb[k]]


# ---- VJP kernels for the three families ------------------------------------------------

def _unary_loops(code):
    """The VJP loop of a unary op; with ``code`` >= 0 the opcode is a closure constant,
    so the table folds to its one line and the loop vectorises (as _same_shape_loops)."""
    def loops(op, x, z, g, ga, assign):
        if code >= 0:
            op = code
        if assign:
            for k in range(z.size):
                ga[k] = times(op, g[k], unary_partial(op, x[k], z[k]))
        else:
            for k in range(z.size):
                ga[k] += times(op, g[k], unary_partial(op, x[k], z[k]))
    return register_jitable(distinct(loops, code))


_unary_tanh, _unary_exp, _unary_sigmoid, _unary_relu, _unary_square, _unary_neg, \
    _unary_any = (_unary_loops(c) for c in (TANH, EXP, SIGMOID, RELU, SQUARE, NEG, -1))


@register_jitable
def unary_vjp(ctx, i):
    op = ctx.rows[i, OP]
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a) or passes_nothing(op):
        return
    x, z, g, ga = value(ctx, a), value(ctx, i), adjoint(ctx, i), adjoint(ctx, a)
    unary_loop(op, x, z, g, ga, first_write(ctx, a))


@register_jitable
def unary_loop(op, x, z, g, ga, assign):
    """ga (=, or += unless ``assign``) g times op's partial, over the given elements."""
    if op == SIN or op == COS:
        # the table's cos(x) and -sin(x) as one SIMD loop, by the identity
        # d/dx sin(x + k pi/2) = sin(x + (k + 1) pi/2)
        vmath.shifted_sin_times(g, x, 1.0 if op == SIN else 2.0, ga, assign)
    elif op == TANH:                     # the common activations get folded loops
        _unary_tanh(op, x, z, g, ga, assign)
    elif op == EXP:
        _unary_exp(op, x, z, g, ga, assign)
    elif op == SIGMOID:
        _unary_sigmoid(op, x, z, g, ga, assign)
    elif op == RELU:
        _unary_relu(op, x, z, g, ga, assign)
    elif op == SQUARE:
        _unary_square(op, x, z, g, ga, assign)
    elif op == NEG:
        _unary_neg(op, x, z, g, ga, assign)
    else:
        _unary_any(op, x, z, g, ga, assign)


def _same_shape_loops(code):
    """The VJP loops of a binary op on operands of the output's size (or one element).
    With ``code`` >= 0 the opcode is a closure constant, so the table folds to one line
    and the loops vectorise; with -1 they take the runtime opcode ``op``."""
    def loops(ctx, op, a, b, x, y, z, g, sx, sy):
        if code >= 0:
            op = code
        n = z.size
        if has_adjoint(ctx, a):
            if sx == 1 and first_write(ctx, a):
                ga = adjoint(ctx, a)
                for k in range(n):
                    ga[k] = times(op, g[k], binary_partial_x(op, x[k], y[k * sy], z[k]))
            else:
                ga = accumulator(ctx, a)
                for k in range(n):
                    ga[k * sx] += times(op, g[k], binary_partial_x(op, x[k * sx], y[k * sy],
                                                                   z[k]))
        if has_adjoint(ctx, b):
            if sy == 1 and first_write(ctx, b):
                gb = adjoint(ctx, b)
                for k in range(n):
                    gb[k] = times(op, g[k], binary_partial_y(op, x[k * sx], y[k], z[k]))
            else:
                gb = accumulator(ctx, b)
                for k in range(n):
                    gb[k * sy] += times(op, g[k], binary_partial_y(op, x[k * sx], y[k * sy],
                                                                   z[k]))
    return register_jitable(distinct(loops, code))


_same_shape_add, _same_shape_sub, _same_shape_mul, _same_shape_div, _same_shape_pow, \
    _same_shape_any = (_same_shape_loops(c) for c in (ADD, SUB, MUL, DIV, POW, -1))


def _chunk_loops(code):
    """The loops of binary_chunk; ``code`` as in _same_shape_loops (a constant opcode
    folds the table to its line, so the loops vectorise)."""
    def loops(op, x, y, z, g, sx, sy, want_a, assign_a, ga, want_b, assign_b, gb):
        if code >= 0:
            op = code
        n = z.size
        if want_a and assign_a:
            for k in range(n):
                ga[k] = times(op, g[k], binary_partial_x(op, x[k * sx], y[k * sy], z[k]))
        elif want_a:
            for k in range(n):
                ga[k] += times(op, g[k], binary_partial_x(op, x[k * sx], y[k * sy], z[k]))
        if want_b and assign_b:
            for k in range(n):
                gb[k] = times(op, g[k], binary_partial_y(op, x[k * sx], y[k * sy], z[k]))
        elif want_b:
            for k in range(n):
                gb[k] += times(op, g[k], binary_partial_y(op, x[k * sx], y[k * sy], z[k]))
    return register_jitable(distinct(loops, code))


_chunk_add, _chunk_sub, _chunk_mul, _chunk_div, _chunk_pow, _chunk_any = (
    _chunk_loops(c) for c in (ADD, SUB, MUL, DIV, POW, -1))


@register_jitable
def binary_chunk(op, x, y, z, g, sx, sy, want_a, assign_a, ga, want_b, assign_b, gb):
    """Part of a same-shape binary VJP, elements given as slices: each wanted operand is
    of the slice's size (kernels/sweep.py sweeps large rows in tiles this way), the
    others of the slice's size (stride ``sx`` / ``sy`` 1) or one element (0).
    ``assign``: write rather than add. The same arithmetic as binary_vjp's loops."""
    if op == POW and sy == 0 and y[0] == 2.0 and not want_b:
        if want_a and assign_a:                  # x ** 2: 2 x g, as _square_vjp
            for k in range(z.size):
                ga[k] = 2.0 * x[k] * g[k]
        elif want_a:
            for k in range(z.size):
                ga[k] += 2.0 * x[k] * g[k]
    elif op == ADD:
        _chunk_add(op, x, y, z, g, sx, sy, want_a, assign_a, ga, want_b, assign_b, gb)
    elif op == SUB:
        _chunk_sub(op, x, y, z, g, sx, sy, want_a, assign_a, ga, want_b, assign_b, gb)
    elif op == MUL:
        _chunk_mul(op, x, y, z, g, sx, sy, want_a, assign_a, ga, want_b, assign_b, gb)
    elif op == DIV:
        _chunk_div(op, x, y, z, g, sx, sy, want_a, assign_a, ga, want_b, assign_b, gb)
    elif op == POW:
        _chunk_pow(op, x, y, z, g, sx, sy, want_a, assign_a, ga, want_b, assign_b, gb)
    else:
        _chunk_any(op, x, y, z, g, sx, sy, want_a, assign_a, ga, want_b, assign_b, gb)


@register_jitable
def _square_vjp(ctx, a, x, g):
    if not has_adjoint(ctx, a):
        return
    if first_write(ctx, a):
        ga = adjoint(ctx, a)
        for k in range(x.size):
            ga[k] = 2.0 * x[k] * g[k]
    else:
        ga = accumulator(ctx, a)
        for k in range(x.size):
            ga[k] += 2.0 * x[k] * g[k]


def _trailing_loops(code):
    """The VJP loops of a binary op whose operands each repeat along leading axes of the
    output (a bias row, say): the output is walked as rows of the smaller period, so
    every inner loop is contiguous and free of index arithmetic. ``code`` as above."""
    def loops(ctx, op, a, b, x, y, z, g):
        if code >= 0:
            op = code
        n, nx, ny = z.size, x.size, y.size
        period = min(nx if nx > 1 else n, ny if ny > 1 else n)
        sx, sy = (1 if nx > 1 else 0), (1 if ny > 1 else 0)
        for operand in range(2):
            r = a if operand == 0 else b
            if not has_adjoint(ctx, r):
                continue
            # an operand of the output's size is written, not zeroed and added to
            fresh = (nx if operand == 0 else ny) == n and first_write(ctx, r)
            gr = adjoint(ctx, r) if fresh else accumulator(ctx, r)
            for row in range(n // period):
                ox = (row % (nx // period)) * period if nx > 1 else 0
                oy = (row % (ny // period)) * period if ny > 1 else 0
                base = row * period
                if operand == 0 and fresh:
                    for j in range(period):
                        gr[ox + j] = times(op, g[base + j], binary_partial_x(
                            op, x[ox + j], y[oy + j * sy], z[base + j]))
                elif operand == 0:
                    for j in range(period):
                        gr[ox + j * sx] += times(op, g[base + j], binary_partial_x(
                            op, x[ox + j * sx], y[oy + j * sy], z[base + j]))
                elif fresh:
                    for j in range(period):
                        gr[oy + j] = times(op, g[base + j], binary_partial_y(
                            op, x[ox + j * sx], y[oy + j], z[base + j]))
                else:
                    for j in range(period):
                        gr[oy + j * sy] += times(op, g[base + j], binary_partial_y(
                            op, x[ox + j * sx], y[oy + j * sy], z[base + j]))
    return register_jitable(distinct(loops, code))


_trailing_add, _trailing_sub, _trailing_mul, _trailing_div, _trailing_any = (
    _trailing_loops(c) for c in (ADD, SUB, MUL, DIV, -1))


@register_jitable
def binary_vjp(ctx, i):
    op = ctx.rows[i, OP]
    if passes_nothing(op):
        return
    a, b = ctx.rows[i, A], ctx.rows[i, B]
    x, y, z, g = value(ctx, a), value(ctx, b), value(ctx, i), adjoint(ctx, i)
    n = z.size
    if (x.size == n or x.size == 1) and (y.size == n or y.size == 1):
        # same shape or a single element: a stride of 1 or 0, no index map
        sx, sy = (1 if x.size == n else 0), (1 if y.size == n else 0)
        if op == ADD:
            _same_shape_add(ctx, op, a, b, x, y, z, g, sx, sy)
        elif op == SUB:
            _same_shape_sub(ctx, op, a, b, x, y, z, g, sx, sy)
        elif op == MUL:
            _same_shape_mul(ctx, op, a, b, x, y, z, g, sx, sy)
        elif op == DIV:
            _same_shape_div(ctx, op, a, b, x, y, z, g, sx, sy)
        elif op == POW and sy == 0 and y[0] == 2.0 and sx == 1 and not has_adjoint(ctx, b):
            _square_vjp(ctx, a, x, g)            # x ** 2: 2 x g, no pow per element
        elif op == POW:
            _same_shape_pow(ctx, op, a, b, x, y, z, g, sx, sy)
        else:
            _same_shape_any(ctx, op, a, b, x, y, z, g, sx, sy)
        return
    if trailing(ctx, a, i) and trailing(ctx, b, i):
        # each operand repeats along leading axes (a bias row, say)
        if op == ADD:
            _trailing_add(ctx, op, a, b, x, y, z, g)
        elif op == SUB:
            _trailing_sub(ctx, op, a, b, x, y, z, g)
        elif op == MUL:
            _trailing_mul(ctx, op, a, b, x, y, z, g)
        elif op == DIV:
            _trailing_div(ctx, op, a, b, x, y, z, g)
        else:
            _trailing_any(ctx, op, a, b, x, y, z, g)
        return
    ma, mb = operand_map(ctx, a, i), operand_map(ctx, b, i)
    if has_adjoint(ctx, a):
        ga = accumulator(ctx, a)
        for k in range(n):
            ga[ma[k]] += times(op, g[k], binary_partial_x(op, x[ma[k]], y[mb[k]], z[k]))
    if has_adjoint(ctx, b):
        gb = accumulator(ctx, b)
        for k in range(n):
            gb[mb[k]] += times(op, g[k], binary_partial_y(op, x[ma[k]], y[mb[k]], z[k]))


@register_jitable
def elementwise_vjp_lanes(ctx, i, lanes):
    """All K lanes of a unary or binary row whose operands have the output's size (or
    one element): each partial derivative is computed once, then applied to every
    lane. Returns False (nothing done) for other shapes, which go lane by lane."""
    op = ctx.rows[i, OP]
    a, b = ctx.rows[i, A], ctx.rows[i, B]
    z = value(ctx, i)
    n = z.size
    x = value(ctx, a)
    unary = op <= UNARY_LAST
    y = x if unary else value(ctx, b)
    if not ((x.size == n or x.size == 1) and (y.size == n or y.size == 1)):
        return False
    sx, sy = (1 if x.size == n else 0), (1 if y.size == n else 0)
    stride = ctx.lane[1]
    ctx.lane[0] = 0
    g = lane_block(ctx, i, lanes)
    partial = np.empty(n)
    for j in range(1 if unary else 2):
        r = a if j == 0 else b
        if not has_adjoint(ctx, r):
            continue
        for k in range(n):
            if unary:
                partial[k] = unary_partial(op, x[k], z[k])
            elif j == 0:
                partial[k] = binary_partial_x(op, x[k * sx], y[k * sy], z[k])
            else:
                partial[k] = binary_partial_y(op, x[k * sx], y[k * sy], z[k])
        gr = lane_block(ctx, r, lanes)
        if (sx if j == 0 else sy) == 0:          # one element: sum over the output
            for lane in range(lanes):
                if not live(ctx, i, lane):
                    continue
                s = 0.0
                for k in range(n):
                    s += times(op, g[lane * stride + k], partial[k])
                fresh = first_write_lane(ctx, r, lane)
                gr[lane * stride] = s if fresh else gr[lane * stride] + s
        else:
            _times_partial_lanes(ctx, i, r, gr, g, partial, lanes, stride, selects(op))
    return True


@register_jitable
def _times_partial_lanes(ctx, i, r, gr, g, partial, lanes, stride, select):
    """gr = g * partial (or +=) in every live lane; each lane a contiguous slice, so the
    element loop vectorises. ``select``: a zero partial passes 0 (see ``times``)."""
    n = partial.size
    for lane in range(lanes):
        if not live(ctx, i, lane):
            continue
        fresh = first_write_lane(ctx, r, lane)
        src = g[lane * stride:lane * stride + n]
        dst = gr[lane * stride:lane * stride + n]
        if select:                         # a mask: its zeros stay zeros (0 * inf is nan)
            for k in range(n):
                v = src[k] * partial[k] if partial[k] != 0.0 else 0.0
                dst[k] = v if fresh else dst[k] + v
        elif fresh:
            for k in range(n):
                dst[k] = src[k] * partial[k]
        else:
            for k in range(n):
                dst[k] += src[k] * partial[k]


@register_jitable
def where_vjp(ctx, i, lanes=1):
    """z = where(c, x, y): the gradient goes to x where c holds, to y elsewhere (zeros
    there, as torch's masked gradient: both branches are on the graph)."""
    a, b, c = ctx.rows[i, A], ctx.rows[i, B], where_condition(ctx.ipool, ctx.rows[i, AUX])
    ctx.lane[0] = 0
    g, cond, stride = lane_block(ctx, i, lanes), value(ctx, c), ctx.lane[1]
    n = size_of(ctx, i)
    mc = operand_map(ctx, c, i)
    for r, taken in ((a, True), (b, False)):
        if has_adjoint(ctx, r):
            mr, nr = operand_map(ctx, r, i), size_of(ctx, r)
            gr = lane_block(ctx, r, lanes)
            for lane in range(lanes):
                if not live(ctx, i, lane):
                    continue
                base = lane * stride
                if first_write_lane(ctx, r, lane):
                    for k in range(nr):
                        gr[base + k] = 0.0
                for k in range(n):
                    if (cond[mc[k]] != 0) == taken:
                        gr[base + mr[k]] += g[base + k]


@cached_njit()
def unary_into(op, x, out):
    """out = the value table's f(x) elementwise: the array forward of ops numpy lacks
    (erf) or computes other than the scalar forward does (sigmoid)."""
    for k in range(x.size):
        out[k] = unary_value(op, x[k])


# ---- large forward ops split among numba's threads -------------------------------------------
# +, -, *, / and x ** 2 are exact in IEEE arithmetic, so these give numpy's values bit
# for bit; ops.elementwise calls them on large arrays when more than one thread is set.

PLAIN_COPY = -1     # unary_parallel's copy


@cached_njit(parallel=True)
def unary_parallel(op, x, out, chunks):
    """out = -x (op NEG: the sign bit flipped, as numpy) or a copy of x (op PLAIN_COPY), over
    ``chunks`` pieces on numba's threads."""
    n = out.size
    for c in numba.prange(chunks):
        lo, hi = c * n // chunks, (c + 1) * n // chunks
        if op == NEG:
            for k in range(lo, hi):
                out[k] = -x[k]
        else:
            out[lo:hi] = x[lo:hi]


@cached_njit(parallel=True)
def binary_parallel(op, x, y, out, sx, sy, chunks):
    """out = x op y for op in ADD SUB MUL DIV POW (exponent 2), over ``chunks`` pieces
    on numba's threads; sx / sy are 1 for an operand of out's size, 0 for one element."""
    n = out.size
    for c in numba.prange(chunks):
        lo, hi = c * n // chunks, (c + 1) * n // chunks
        _binary_piece(op, x[lo * sx:hi * sx + (1 - sx)], y[lo * sy:hi * sy + (1 - sy)],
                      out[lo:hi], sx, sy)


@register_jitable
def _binary_piece(op, x, y, z, sx, sy):
    n = z.size
    if op == POW:                                  # (exponent 2 only: x * x)
        for k in range(n):
            z[k] = x[k] * x[k]
    elif sx == 1 and sy == 1:
        if op == ADD:
            for k in range(n):
                z[k] = x[k] + y[k]
        elif op == SUB:
            for k in range(n):
                z[k] = x[k] - y[k]
        elif op == MUL:
            for k in range(n):
                z[k] = x[k] * y[k]
        else:
            for k in range(n):
                z[k] = x[k] / y[k]
    elif sx == 1:
        v = y[0]
        if op == ADD:
            for k in range(n):
                z[k] = x[k] + v
        elif op == SUB:
            for k in range(n):
                z[k] = x[k] - v
        elif op == MUL:
            for k in range(n):
                z[k] = x[k] * v
        else:
            for k in range(n):
                z[k] = x[k] / v
    else:
        v = x[0]
        if op == ADD:
            for k in range(n):
                z[k] = v + y[k]
        elif op == SUB:
            for k in range(n):
                z[k] = v - y[k]
        elif op == MUL:
            for k in range(n):
                z[k] = v * y[k]
        else:
            for k in range(n):
                z[k] = v / y[k]
