"""Elementwise ops: forward functions and the derivative table.

Each op has a scalar forward (Python floats, used for 0-d tensors because a numpy call
costs a microsecond), an array forward (numpy), and one line in the partial-derivative
table that the compiled sweep evaluates per element. Where a scalar forward raises
(math.log(0), 1.0 / 0.0), the recorder falls back to the array forward, so 0-d results
follow numpy: inf and nan, never an exception. Conventions at kinks follow torch:
abs'(0) = relu'(0) = 0, sqrt'(0) = inf, maximum/minimum split the gradient evenly on
ties, d(x**y)/dx = 0 where y == 0, d(x**y)/dy = 0 where x == 0 and y >= 0.
"""
import math
import operator

import numpy as np
from numba.extending import register_jitable

from . import vmath
from ..guards import observe
from .codes import (ABS, ADD, ARCCOS, ARCCOSH, ARCSIN, ARCSINH, ARCTAN, ARCTAN2, ARCTANH,
                    CEIL, COS, COSH, DIV, ERF, EXP, EXP2, EXPM1, FLOOR, FMOD, HYPOT, LOG,
                    LOG1P, LOG2, LOG10, LOGADDEXP, MAXIMUM, MINIMUM, MOD, MUL, NEG, POW,
                    RECIPROCAL, RELU, ROUND, SIGMOID, SIGN, SIN, SINH, SOFTPLUS, SQRT, SQUARE,
                    SUB, TAN, TANH, UNARY_LAST, WHERE)
from ..kernels.cache import cached_njit
from ..kernels.layout import (A, AUX, B, OP, accumulator, adjoint, first_write,
                              first_write_lane, has_adjoint, lane_block, live, operand_map,
                              size_of, trailing, value)


class Elementwise:
    """One elementwise primitive: opcode, name, scalar forward, array forward, doc."""
    __slots__ = ("code", "name", "scalar", "array", "doc")

    def __init__(self, code, name, scalar, array, doc):
        self.code, self.name, self.scalar, self.array, self.doc = code, name, scalar, array, doc

    def __repr__(self):
        return f"<op {self.name}>"


def _sigmoid_scalar(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x) if x > -745.2 else 0.0
    return e / (1.0 + e)


def _sigmoid_array(x):
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _relu_scalar(x):
    return 0.0 if x <= 0 else x


def _relu_array(x):
    return np.where(x > 0, x, np.zeros((), x.dtype)) if x.size else x.copy()


def _softplus_scalar(x):
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def _softplus_array(x):
    x = x.astype(np.float64) if x.dtype.kind != "f" else x
    return np.where(x > 0, x, 0) + np.log1p(np.exp(-np.abs(x)))


@cached_njit()
def _erf_loop(x, out):
    for k in range(x.size):
        out[k] = math.erf(x[k])


def _erf_array(x):
    """numpy has no erf; a compiled loop over math.erf."""
    x64 = np.ascontiguousarray(x, np.float64)
    out = np.empty(x64.shape)
    _erf_loop(x64.reshape(-1), out.reshape(-1))
    return out.astype(x.dtype) if x.dtype == np.float32 else out


def _sign(x):
    return 1.0 if x > 0 else (-1.0 if x < 0 else x)       # 0.0, -0.0 and nan unchanged


def _logaddexp(x, y):
    m = x if x > y else y
    if m == -math.inf:
        return -math.inf
    return m + math.log1p(math.exp(-abs(x - y)))


def _maximum(x, y):
    return x if (x >= y or x != x) else y


def _minimum(x, y):
    return x if (x <= y or x != x) else y


U = Elementwise
unary_ops = {op.code: op for op in [
    U(NEG,     "negative", operator.neg,                              np.negative,
      "-x."),
    U(ABS,     "abs",      abs,                                       np.abs,
      "|x|. Gradient sign(x); 0 at x = 0."),
    U(EXP,     "exp",      math.exp,                                  np.exp,
      "e**x."),
    U(LOG,     "log",      math.log,                                  np.log,
      "Natural logarithm. Gradient 1/x (inf at 0)."),
    U(SQRT,    "sqrt",     math.sqrt,                                 np.sqrt,
      "Square root. Gradient 1/(2 sqrt(x)): inf at 0, nan below."),
    U(SIN,     "sin",      math.sin,                                  vmath.sin_array,
      "Sine."),
    U(COS,     "cos",      math.cos,                                  vmath.cos_array,
      "Cosine."),
    U(TAN,     "tan",      math.tan,                                  np.tan,
      "Tangent."),
    U(TANH,    "tanh",     math.tanh,                                 vmath.tanh_array,
      "Hyperbolic tangent."),
    U(SIGMOID, "sigmoid",  _sigmoid_scalar,                           _sigmoid_array,
      "1 / (1 + e**-x), without overflow."),
    U(RELU,    "relu",     _relu_scalar,                              _relu_array,
      "max(x, 0). Gradient 0 at x = 0."),
    U(LOG1P,   "log1p",    math.log1p,                                np.log1p,
      "log(1 + x), accurate near 0."),
    U(EXPM1,   "expm1",    math.expm1,                                np.expm1,
      "e**x - 1, accurate near 0."),
    U(LOG2,    "log2",     math.log2,                                 np.log2,
      "Base-2 logarithm."),
    U(LOG10,   "log10",    math.log10,                                np.log10,
      "Base-10 logarithm."),
    U(EXP2,    "exp2",     lambda x: math.pow(2.0, x),                np.exp2,
      "2**x."),
    U(SQUARE,  "square",   lambda x: x * x,                           np.square,
      "x * x."),
    U(RECIPROCAL, "reciprocal", lambda x: 1.0 / x,                    np.reciprocal,
      "1 / x (integer division for integer arrays, as in numpy)."),
    U(SINH,    "sinh",     math.sinh,                                 np.sinh,
      "Hyperbolic sine."),
    U(COSH,    "cosh",     math.cosh,                                 np.cosh,
      "Hyperbolic cosine."),
    U(ARCSIN,  "arcsin",   math.asin,                                 np.arcsin,
      "Inverse sine. Gradient inf at |x| = 1."),
    U(ARCCOS,  "arccos",   math.acos,                                 np.arccos,
      "Inverse cosine. Gradient -inf at |x| = 1."),
    U(ARCTAN,  "arctan",   math.atan,                                 np.arctan,
      "Inverse tangent."),
    U(ARCSINH, "arcsinh",  math.asinh,                                np.arcsinh,
      "Inverse hyperbolic sine."),
    U(ARCCOSH, "arccosh",  math.acosh,                                np.arccosh,
      "Inverse hyperbolic cosine. Gradient inf at x = 1."),
    U(ARCTANH, "arctanh",  math.atanh,                                np.arctanh,
      "Inverse hyperbolic tangent. Gradient inf at |x| = 1."),
    U(SOFTPLUS, "softplus", _softplus_scalar,                         _softplus_array,
      "log(1 + e**x), without overflow. Gradient sigmoid(x)."),
    U(ERF,     "erf",      math.erf,                                  _erf_array,
      "The error function."),
    U(SIGN,    "sign",     _sign,                                     np.sign,
      "-1, 0 or 1. Gradient 0 everywhere (as in torch)."),
    U(FLOOR,   "floor",    lambda x: float(math.floor(x)),            np.floor,
      "Largest integer <= x. Gradient 0 everywhere (as in torch)."),
    U(CEIL,    "ceil",     lambda x: float(math.ceil(x)),             np.ceil,
      "Smallest integer >= x. Gradient 0 everywhere (as in torch)."),
    U(ROUND,   "round",    lambda x: float(round(x)),                 np.round,
      "Nearest integer, halves to even. Gradient 0 everywhere (as in torch)."),
]}

binary_ops = {op.code: op for op in [
    U(ADD,     "add",      operator.add,                              np.add,
      "x + y."),
    U(SUB,     "subtract", operator.sub,                              np.subtract,
      "x - y."),
    U(MUL,     "multiply", operator.mul,                              np.multiply,
      "x * y."),
    U(DIV,     "divide",   operator.truediv,                          np.true_divide,
      "x / y."),
    U(POW,     "power",    math.pow,                                  np.power,
      "x ** y. d/dx is 0 where y == 0; d/dy is 0 where x == 0 and y >= 0."),
    U(MAXIMUM, "maximum",  _maximum,                                  np.maximum,
      "Elementwise maximum; on ties the gradient is split evenly."),
    U(MINIMUM, "minimum",  _minimum,                                  np.minimum,
      "Elementwise minimum; on ties the gradient is split evenly."),
    U(ARCTAN2, "arctan2",  math.atan2,                                np.arctan2,
      "The angle of the point (y, x) for arctan2(x1=y, x2=x); nan gradient at (0, 0)."),
    U(HYPOT,   "hypot",    math.hypot,                                np.hypot,
      "sqrt(x**2 + y**2). nan gradient at (0, 0), as in torch."),
    U(LOGADDEXP, "logaddexp", _logaddexp,                             np.logaddexp,
      "log(e**x + e**y), without overflow."),
    U(FMOD,    "fmod",     math.fmod,                                 np.fmod,
      "Remainder with the sign of x. d/dy = -trunc(x / y)."),
    U(MOD,     "mod",      operator.mod,                              np.mod,
      "Remainder with the sign of y (Python's %). d/dy = -floor(x / y)."),
]}


# ---- the derivative table: z = f(x) or z = f(x, y), one element ----------------------

_LN2, _LN10 = math.log(2.0), math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

@register_jitable
def power(x, p):
    """x ** p; by repeated squaring when p is a small integer (libm pow costs ~40 ns)."""
    if p == math.floor(p) and abs(p) <= 64:
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
def unary_partial(op, x, z):
    """dz/dx."""
    if op == NEG:     return -1.0
    if op == ABS:     return 1.0 if x > 0 else (-1.0 if x < 0 else (0.0 if x == 0 else x))
    if op == EXP:     return z
    if op == LOG:     return 1.0 / x
    if op == SQRT:    return 1.0 / (2.0 * z)
    if op == SIN:     return vmath.cos(x)
    if op == COS:     return -vmath.sin(x)
    if op == TAN:     return 1.0 + z * z
    if op == TANH:    return 1.0 - z * z
    if op == SIGMOID: return z * (1.0 - z)
    if op == RELU:    return 1.0 if z > 0 else 0.0
    return _more_unary_partial(op, x, z)


@register_jitable
def _more_unary_partial(op, x, z):
    if op == LOG1P:   return 1.0 / (1.0 + x)
    if op == EXPM1:   return z + 1.0
    if op == LOG2:    return 1.0 / (x * _LN2)
    if op == LOG10:   return 1.0 / (x * _LN10)
    if op == EXP2:    return z * _LN2
    if op == SQUARE:  return 2.0 * x
    if op == RECIPROCAL: return -z * z
    if op == SINH:    return math.cosh(x)
    if op == COSH:    return math.sinh(x)
    if op == ARCSIN:  return 1.0 / math.sqrt(1.0 - x * x)
    if op == ARCCOS:  return -1.0 / math.sqrt(1.0 - x * x)
    if op == ARCTAN:  return 1.0 / (1.0 + x * x)
    if op == ARCSINH: return 1.0 / math.sqrt(x * x + 1.0)
    if op == ARCCOSH: return 1.0 / math.sqrt(x * x - 1.0)
    if op == ARCTANH: return 1.0 / (1.0 - x * x)
    if op == SOFTPLUS: return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (
                                    1.0 + math.exp(x))
    if op == ERF:     return _TWO_OVER_SQRT_PI * math.exp(-x * x)
    if op == SIGN or op == FLOOR or op == CEIL or op == ROUND:
        return 0.0
    return math.nan


# The arithmetic ops are kept in small functions that the compiler inlines into the
# sweep's element loops; the rest of the table follows in a second function each.

@register_jitable
def binary_partial_x(op, x, y, z):
    """dz/dx."""
    if op == ADD:     return 1.0
    if op == SUB:     return 1.0
    if op == MUL:     return y
    if op == DIV:     return 1.0 / y
    if op == POW:     return 0.0 if y == 0 else y * power(x, y - 1.0)
    return _more_binary_partial_x(op, x, y, z)


@register_jitable
def _more_binary_partial_x(op, x, y, z):
    if op == MAXIMUM: return 0.5 if x == y else (0.0 if x < y else 1.0)
    if op == MINIMUM: return 0.5 if x == y else (0.0 if x > y else 1.0)
    if op == ARCTAN2: return y / (x * x + y * y)
    if op == HYPOT:   return x / z
    if op == LOGADDEXP: return math.exp(x - z)
    if op == FMOD:    return 1.0
    if op == MOD:     return 1.0
    return math.nan


@register_jitable
def binary_partial_y(op, x, y, z):
    """dz/dy."""
    if op == ADD:     return 1.0
    if op == SUB:     return -1.0
    if op == MUL:     return x
    if op == DIV:     return -x / (y * y)
    if op == POW:     return 0.0 if (x == 0 and y >= 0) else z * math.log(x)
    return _more_binary_partial_y(op, x, y, z)


@register_jitable
def _more_binary_partial_y(op, x, y, z):
    if op == MAXIMUM: return 0.5 if x == y else (0.0 if y < x else 1.0)
    if op == MINIMUM: return 0.5 if x == y else (0.0 if y > x else 1.0)
    if op == ARCTAN2: return -x / (x * x + y * y)
    if op == HYPOT:   return y / z
    if op == LOGADDEXP: return math.exp(y - z)
    if op == FMOD:    return -math.trunc(x / y)
    if op == MOD:     return -math.floor(x / y)
    return math.nan


# ---- the value table: what a compiled replay of the tape computes per element ---------
# The same functions as the scalar / numpy forwards above, as compiled code (results
# agree with numpy to a few ulp; numpy's own SIMD exp or log may round differently).

@register_jitable
def unary_value(op, x):
    """z = f(x)."""
    if op == NEG:     return -x
    if op == ABS:     return abs(x)
    if op == EXP:     return math.exp(x)
    if op == LOG:     return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    if op == SQRT:    return math.sqrt(x) if x >= 0 else math.nan
    if op == SIN:     return vmath.sin(x)
    if op == COS:     return vmath.cos(x)
    if op == TAN:     return math.tan(x)
    if op == TANH:    return math.tanh(x)
    if op == SIGMOID: return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else \
                             math.exp(x) / (1.0 + math.exp(x))
    if op == RELU:    return x if x > 0 else 0.0
    return _more_unary_value(op, x)


@register_jitable
def _more_unary_value(op, x):
    if op == LOG1P:   return math.log1p(x) if x >= -1 else math.nan
    if op == EXPM1:   return math.expm1(x)
    if op == LOG2:    return math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    if op == LOG10:   return math.log10(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    if op == EXP2:    return 2.0 ** x
    if op == SQUARE:  return x * x
    if op == RECIPROCAL: return 1.0 / x
    if op == SINH:    return math.sinh(x)
    if op == COSH:    return math.cosh(x)
    if op == ARCSIN:  return math.asin(x) if abs(x) <= 1 else math.nan
    if op == ARCCOS:  return math.acos(x) if abs(x) <= 1 else math.nan
    if op == ARCTAN:  return math.atan(x)
    if op == ARCSINH: return math.asinh(x)
    if op == ARCCOSH: return math.acosh(x) if x >= 1 else math.nan
    if op == ARCTANH: return math.atanh(x) if abs(x) < 1 else (
                             math.copysign(math.inf, x) if abs(x) == 1 else math.nan)
    if op == SOFTPLUS: return (x if x > 0 else 0.0) + math.log1p(math.exp(-abs(x)))
    if op == ERF:     return math.erf(x)
    if op == SIGN:    return 1.0 if x > 0 else (-1.0 if x < 0 else x)
    if op == FLOOR:   return math.floor(x)
    if op == CEIL:    return math.ceil(x)
    if op == ROUND:   return _round_half_even(x)
    return math.nan


@register_jitable
def _round_half_even(x):
    if not abs(x) < 4503599627370496.0:          # 2**52: already an integer (or nan, inf)
        return x
    r = math.floor(x)
    d = x - r
    if d > 0.5 or (d == 0.5 and r % 2 != 0):
        r += 1.0
    return math.copysign(r, x) if r == 0 else r


@register_jitable
def binary_value(op, x, y):
    """z = f(x, y)."""
    if op == ADD:     return x + y
    if op == SUB:     return x - y
    if op == MUL:     return x * y
    if op == DIV:     return x / y
    if op == POW:     return x ** y
    return _more_binary_value(op, x, y)


@register_jitable
def _more_binary_value(op, x, y):
    if op == MAXIMUM: return x if (x >= y or x != x) else y
    if op == MINIMUM: return x if (x <= y or x != x) else y
    if op == ARCTAN2: return math.atan2(x, y)
    if op == HYPOT:   return math.hypot(x, y)
    if op == LOGADDEXP:
        m = x if x > y else y
        return m if m == -math.inf else m + math.log1p(math.exp(-abs(x - y)))
    if op == FMOD:    return np.fmod(x, y)
    if op == MOD:     return np.remainder(x, y)
    return math.nan


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
    a, b, c = ctx.rows[i, A], ctx.rows[i, B], ctx.ipool[ctx.rows[i, AUX]]
    z, x, y, cond = value(ctx, i), value(ctx, a), value(ctx, b), value(ctx, c)
    ma, mb, mc = operand_map(ctx, a, i), operand_map(ctx, b, i), operand_map(ctx, c, i)
    for k in range(z.size):
        z[k] = x[ma[k]] if cond[mc[k]] != 0 else y[mb[k]]


# ---- VJP kernels for the three families ------------------------------------------------

def _unary_loops(code):
    """The VJP loop of a unary op; with ``code`` >= 0 the opcode is a closure constant,
    so the table folds to its one line and the loop vectorises (as _same_shape_loops)."""
    @register_jitable
    def loops(op, x, z, g, ga, assign):
        if code >= 0:
            op = code
        if assign:
            for k in range(z.size):
                ga[k] = g[k] * unary_partial(op, x[k], z[k])
        else:
            for k in range(z.size):
                ga[k] += g[k] * unary_partial(op, x[k], z[k])
    return loops


_unary_tanh, _unary_exp, _unary_sigmoid, _unary_relu, _unary_square, _unary_any = (
    _unary_loops(c) for c in (TANH, EXP, SIGMOID, RELU, SQUARE, -1))


@register_jitable
def unary_vjp(ctx, i):
    op = ctx.rows[i, OP]
    a = ctx.rows[i, A]
    if not has_adjoint(ctx, a):
        return
    x, z, g, ga = value(ctx, a), value(ctx, i), adjoint(ctx, i), adjoint(ctx, a)
    assign = first_write(ctx, a)
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
    else:
        _unary_any(op, x, z, g, ga, assign)


def _same_shape_loops(code):
    """The VJP loops of a binary op on operands of the output's size (or one element).
    With ``code`` >= 0 the opcode is a closure constant, so the table folds to one line
    and the loops vectorise; with -1 they take the runtime opcode ``op``."""
    @register_jitable
    def loops(ctx, op, a, b, x, y, z, g, sx, sy):
        if code >= 0:
            op = code
        n = z.size
        if has_adjoint(ctx, a):
            if sx == 1 and first_write(ctx, a):
                ga = adjoint(ctx, a)
                for k in range(n):
                    ga[k] = g[k] * binary_partial_x(op, x[k], y[k * sy], z[k])
            else:
                ga = accumulator(ctx, a)
                for k in range(n):
                    ga[k * sx] += g[k] * binary_partial_x(op, x[k * sx], y[k * sy], z[k])
        if has_adjoint(ctx, b):
            if sy == 1 and first_write(ctx, b):
                gb = adjoint(ctx, b)
                for k in range(n):
                    gb[k] = g[k] * binary_partial_y(op, x[k * sx], y[k], z[k])
            else:
                gb = accumulator(ctx, b)
                for k in range(n):
                    gb[k * sy] += g[k] * binary_partial_y(op, x[k * sx], y[k * sy], z[k])
    return loops


_same_shape_add, _same_shape_sub, _same_shape_mul, _same_shape_div, _same_shape_pow, \
    _same_shape_any = (_same_shape_loops(c) for c in (ADD, SUB, MUL, DIV, POW, -1))


def _trailing_loops(code):
    """The VJP loops of a binary op whose operands each repeat along leading axes of the
    output (a bias row, say): the output is walked as rows of the smaller period, so
    every inner loop is contiguous and free of index arithmetic. ``code`` as above."""
    @register_jitable
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
                        gr[ox + j] = g[base + j] * binary_partial_x(
                            op, x[ox + j], y[oy + j * sy], z[base + j])
                elif operand == 0:
                    for j in range(period):
                        gr[ox + j * sx] += g[base + j] * binary_partial_x(
                            op, x[ox + j * sx], y[oy + j * sy], z[base + j])
                elif fresh:
                    for j in range(period):
                        gr[oy + j] = g[base + j] * binary_partial_y(
                            op, x[ox + j * sx], y[oy + j], z[base + j])
                else:
                    for j in range(period):
                        gr[oy + j * sy] += g[base + j] * binary_partial_y(
                            op, x[ox + j * sx], y[oy + j * sy], z[base + j])
    return loops


_trailing_add, _trailing_sub, _trailing_mul, _trailing_div, _trailing_any = (
    _trailing_loops(c) for c in (ADD, SUB, MUL, DIV, -1))


@register_jitable
def binary_vjp(ctx, i):
    op = ctx.rows[i, OP]
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
            ga[ma[k]] += g[k] * binary_partial_x(op, x[ma[k]], y[mb[k]], z[k])
    if has_adjoint(ctx, b):
        gb = accumulator(ctx, b)
        for k in range(n):
            gb[mb[k]] += g[k] * binary_partial_y(op, x[ma[k]], y[mb[k]], z[k])


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
                    s += g[lane * stride + k] * partial[k]
                fresh = first_write_lane(ctx, r, lane)
                gr[lane * stride] = s if fresh else gr[lane * stride] + s
        else:
            _times_partial_lanes(ctx, i, r, gr, g, partial, lanes, stride)
    return True


@register_jitable
def _times_partial_lanes(ctx, i, r, gr, g, partial, lanes, stride):
    """gr = g * partial (or +=) in every live lane; each lane a contiguous slice, so the
    element loop vectorises."""
    n = partial.size
    for lane in range(lanes):
        if not live(ctx, i, lane):
            continue
        fresh = first_write_lane(ctx, r, lane)
        src = g[lane * stride:lane * stride + n]
        dst = gr[lane * stride:lane * stride + n]
        if fresh:
            for k in range(n):
                dst[k] = src[k] * partial[k]
        else:
            for k in range(n):
                dst[k] += src[k] * partial[k]


@register_jitable
def where_vjp(ctx, i, lanes=1):
    """z = where(c, x, y): the gradient goes to x where c holds, to y elsewhere."""
    a, b, c = ctx.rows[i, A], ctx.rows[i, B], ctx.ipool[ctx.rows[i, AUX]]
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


# ---- the same derivatives written with autotape ops, for create_graph=True -------------
# Each rule maps (ops namespace, output gradient g, row r) to the gradient of one
# operand; r.x, r.y, r.z are the row's operands and output, recorded, so the result
# can be differentiated again. Broadcast operands are summed back by the engine.

def per_operand(*rules):
    """One rule per operand, as the engine's (at, g, r, k) protocol."""
    return lambda at, g, r, k: rules[k](at, g, r)


def _zero(at, g):
    """An exact zero gradient of g's shape, still on the graph."""
    return at.where(np.zeros(g.shape, bool), g, 0.0)


def _share(u, v, wins):
    """1 where u wins over v, 1/2 on ties, 0 elsewhere (a constant)."""
    return observe(lambda a, b: np.where(a == b, 0.5, np.where(wins(a, b), 1.0, 0.0)), u, v)


P = per_operand


def _positive(z):
    return z > 0

def _pow_rule_x(at, g, r):
    """y x^(y-1), 0 where y == 0. The untaken branch gets a harmless exponent, so that
    higher derivatives there are 0 too, not 0 * inf. A constant scalar exponent c (x ** 2,
    the common case) needs neither: g c x^(c-1) in two or three recorded ops."""
    if not r.y.requires_grad and r.y.ndim == 0:
        c = r.y.item()                         # (g * c) first: a constant g folds into it
        return g * 0.0 if c == 0 else (g * 2.0) * r.x if c == 2 else \
            (g * c) * r.x ** (c - 1.0)
    flat = observe(lambda y: y == 0, r.y)
    return at.where(flat, 0.0, g * r.y * r.x ** at.where(flat, 1.0, r.y - 1.0))


def _pow_rule_y(at, g, r):
    """x^y log x, 0 where x == 0 <= y (x^y is 0 or 1 there for every such y)."""
    zero = observe(lambda x, y: (x == 0) & (y >= 0), r.x, r.y)
    return at.where(zero, 0.0, g * r.z * at.log(at.where(zero, 1.0, r.x)))


graph_vjps = {
    NEG:     P(lambda at, g, r: -g),
    ABS:     P(lambda at, g, r: g * observe(np.sign, r.x)),
    EXP:     P(lambda at, g, r: g * r.z),
    LOG:     P(lambda at, g, r: g / r.x),
    SQRT:    P(lambda at, g, r: g / (2.0 * r.z)),
    SIN:     P(lambda at, g, r: g * at.cos(r.x)),
    COS:     P(lambda at, g, r: -g * at.sin(r.x)),
    TAN:     P(lambda at, g, r: g * (1.0 + r.z * r.z)),
    TANH:    P(lambda at, g, r: g * (1.0 - r.z * r.z)),
    SIGMOID: P(lambda at, g, r: g * (r.z * (1.0 - r.z))),
    RELU:    P(lambda at, g, r: g * observe(_positive, r.z)),
    LOG1P:   P(lambda at, g, r: g / (1.0 + r.x)),
    EXPM1:   P(lambda at, g, r: g * (r.z + 1.0)),
    LOG2:    P(lambda at, g, r: g / (r.x * _LN2)),
    LOG10:   P(lambda at, g, r: g / (r.x * _LN10)),
    EXP2:    P(lambda at, g, r: g * r.z * _LN2),
    SQUARE:  P(lambda at, g, r: g * 2.0 * r.x),
    RECIPROCAL: P(lambda at, g, r: -g * r.z * r.z),
    SINH:    P(lambda at, g, r: g * at.cosh(r.x)),
    COSH:    P(lambda at, g, r: g * at.sinh(r.x)),
    ARCSIN:  P(lambda at, g, r: g / at.sqrt(1.0 - r.x * r.x)),
    ARCCOS:  P(lambda at, g, r: -g / at.sqrt(1.0 - r.x * r.x)),
    ARCTAN:  P(lambda at, g, r: g / (1.0 + r.x * r.x)),
    ARCSINH: P(lambda at, g, r: g / at.sqrt(r.x * r.x + 1.0)),
    ARCCOSH: P(lambda at, g, r: g / at.sqrt(r.x * r.x - 1.0)),
    ARCTANH: P(lambda at, g, r: g / (1.0 - r.x * r.x)),
    SOFTPLUS: P(lambda at, g, r: g * at.sigmoid(r.x)),
    ERF:     P(lambda at, g, r: g * _TWO_OVER_SQRT_PI * at.exp(-(r.x * r.x))),
    SIGN:    P(lambda at, g, r: _zero(at, g)),
    FLOOR:   P(lambda at, g, r: _zero(at, g)),
    CEIL:    P(lambda at, g, r: _zero(at, g)),
    ROUND:   P(lambda at, g, r: _zero(at, g)),
    ADD:     P(lambda at, g, r: g,
               lambda at, g, r: g),
    SUB:     P(lambda at, g, r: g,
               lambda at, g, r: -g),
    MUL:     P(lambda at, g, r: g * r.y,
               lambda at, g, r: g * r.x),
    DIV:     P(lambda at, g, r: g / r.y,
               lambda at, g, r: -g * r.x / (r.y * r.y)),
    POW:     P(lambda at, g, r: _pow_rule_x(at, g, r),
               lambda at, g, r: _pow_rule_y(at, g, r)),
    MAXIMUM: P(lambda at, g, r: g * _share(r.x, r.y, np.greater),
               lambda at, g, r: g * _share(r.y, r.x, np.greater)),
    MINIMUM: P(lambda at, g, r: g * _share(r.x, r.y, np.less),
               lambda at, g, r: g * _share(r.y, r.x, np.less)),
    ARCTAN2: P(lambda at, g, r: g * r.y / (r.x * r.x + r.y * r.y),
               lambda at, g, r: -g * r.x / (r.x * r.x + r.y * r.y)),
    HYPOT:   P(lambda at, g, r: g * r.x / r.z,
               lambda at, g, r: g * r.y / r.z),
    LOGADDEXP: P(lambda at, g, r: g * at.exp(r.x - r.z),
                 lambda at, g, r: g * at.exp(r.y - r.z)),
    FMOD:    P(lambda at, g, r: g,
               lambda at, g, r: -g * observe(lambda x, y: np.trunc(x / y), r.x, r.y)),
    MOD:     P(lambda at, g, r: g,
               lambda at, g, r: -g * observe(lambda x, y: np.floor(x / y), r.x, r.y)),
    WHERE:   P(lambda at, g, r: at.where(r.cond, g, 0.0),
               lambda at, g, r: at.where(r.cond, 0.0, g)),
}
