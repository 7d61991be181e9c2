"""Elementwise ops, Python tier: the op table, the forwards, the derivative rules that
create_graph records, and the recorders. The compiled tier (each op's value and partial
derivatives per element, and the kernels) is kernels/elementwise.py.

Each table entry is one op: opcode, numpy name, scalar forward (Python floats, used for
0-d tensors because a numpy call costs a microsecond), array forward (numpy), doc, and
its derivative written with autotape ops, ``d`` (unary) or ``dx`` / ``dy`` (binary):
``(at, g, r)`` -> the gradient of that operand, where ``at`` is the ops namespace and
``r.x``, ``r.y``, ``r.z`` the row's operands and output, recorded, so the result can be
differentiated again (graph_backward.py sums broadcast operands back). Where a scalar
forward raises (math.log(0), 1.0 / 0.0), the recorder falls back to the array forward,
so 0-d results follow numpy: inf and nan, never an exception.
"""
import builtins
import math
import operator

import numpy as np

from ..errstate import ignore_fp_errors
from ..guards import current_trace, decide, observe
from ..kernels import vmath
from ..kernels.elementwise import (LN2, LN10, TWO_OVER_SQRT_PI, binary_parallel, unary_into,
                                  unary_parallel)
from ..parallel import (for_numba, get_num_threads, parallel_launch, pieces,
                        ufunc_in_threads)
from ..opcodes import (ABS, ADD, ARCCOS, ARCCOSH, ARCSIN, ARCSINH, ARCTAN, ARCTAN2, ARCTANH,
                       CEIL, COS, COSH, DIV, EQUAL, ERF, EXP, EXP2, EXPM1, FLOOR, FMOD,
                       GREATER, GREATER_EQUAL, HYPOT, LESS, LESS_EQUAL, LOG, LOG1P, LOG2,
                       LOG10, LOGADDEXP, MAXIMUM, MINIMUM, MOD, MUL, NEG, NOT_EQUAL, POW,
                       RECIPROCAL, RELU, ROUND, SIGMOID, SIGN, SIN, SINH, SOFTPLUS, SQRT,
                       SQUARE, SUB, TAN, TANH, WHERE, opcode_name)
from ..tape import open_tape
from ..tape_format import NO_ROW, where_params
from ..tensor import (F32, F64, ComplexOperand, DeviceOperand, Tensor, array_of, canonical,
                      complex_call, device_call, new_leaf, round_f32)
from ..thread_state import per_thread
from .indexing import as_tensor
from .recording import record, row_of
from ..tuning import PARALLEL_MIN


class Elementwise:
    """One elementwise primitive: its table entry (see the module's docstring)."""
    __slots__ = ("code", "name", "scalar", "array", "doc", "vjps")

    def __init__(self, code, name, scalar, array, doc, d=None, dx=None, dy=None):
        self.code, self.name, self.scalar, self.array, self.doc = code, name, scalar, array, doc
        self.vjps = (d,) if d is not None else (dx, dy)

    def __repr__(self):
        return f"<op {self.name}>"


def _sigmoid_scalar(x):
    if x != x:
        return x                                   # nan, as numpy and torch
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x) if x > -745.2 else 0.0
    return e / (1.0 + e)


def _relu_scalar(x):
    return 0.0 if x <= 0 else x


def _relu_array(x):
    return np.where(x <= 0, np.zeros((), x.dtype), x) if x.size else x.copy()   # nan stays


def _softplus_scalar(x):
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def _softplus_array(x):
    x = x.astype(np.float64) if x.dtype.kind != "f" else x
    return np.where(x > 0, x, 0) + np.log1p(np.exp(-np.abs(x)))


def _by_value_table(code):
    """The array forward of an op as one compiled loop over its line of the value table
    (kernels/elementwise.py), where numpy has no such function or rounds differently."""
    def array(x):
        x64 = np.ascontiguousarray(x, np.float64)
        out = np.empty(x64.shape)
        unary_into(code, x64.reshape(-1), out.reshape(-1))
        return out.astype(x.dtype) if x.dtype == np.float32 else out
    return array


def _signed_integral(n, x):
    """floor / ceil / round's int result as numpy's float: a zero keeps x's sign
    (np.ceil(-0.5) is -0.0; math.ceil's 0 would lose it)."""
    return float(n) if n else math.copysign(0.0, x)


def _sign(x):
    return 1.0 if x > 0 else (-1.0 if x < 0 else x)       # 0.0, -0.0 and nan unchanged


def _logaddexp(x, y):
    if x == y:                                     # (inf, inf): inf, not inf - inf
        return x + LN2
    m = x if x > y else y
    if m == -math.inf:
        return -math.inf
    return m + math.log1p(math.exp(-builtins.abs(x - y)))


def _maximum(x, y):
    return x if (x >= y or x != x) else y      # x on ties (0.0 vs -0.0), as torch's


def _minimum(x, y):
    return x if (x <= y or x != x) else y


def _maximum_array(x, y):
    """np.maximum, but x on ties, as the 0-d and compiled forwards (numpy returns y, so
    maximum(0.0, -0.0) would differ in the sign of its zero between them)."""
    dtype = np.result_type(x, y)               # (before asarray: a float stays weak)
    x, y = np.asarray(x), np.asarray(y)
    return np.where((x >= y) | (x != x), x, y).astype(dtype, copy=False)


def _minimum_array(x, y):
    dtype = np.result_type(x, y)               # (before asarray: a float stays weak)
    x, y = np.asarray(x), np.asarray(y)
    return np.where((x <= y) | (x != x), x, y).astype(dtype, copy=False)


def _power(x, y):
    """x ** y, and x * x * x where y is 3, as torch computes it (libm's pow, which
    numpy and math.pow call, differs from it in the last bit for a quarter of x)."""
    return x * x * x if y == 3.0 else math.pow(x, y)


def _power_array(x, y):
    dtype = np.result_type(x, y)
    z = np.power(x, y)
    three = np.equal(y, 3.0)
    if dtype.kind != "f" or not three.any():
        return z
    x = np.asarray(x, np.float64)              # (float32: computed in float64, rounded,
    cube = (x * x * x).astype(dtype, copy=False)   # as the compiled kernels do)
    return cube if three.all() and cube.shape == z.shape else np.where(three, cube, z)


U = Elementwise
unary_ops = {op.code: op for op in [
    U(NEG, "negative", operator.neg, np.negative,
      "-x.",
      d=lambda at, g, r: -g),
    U(ABS, "abs", builtins.abs, np.abs,
      "|x|. Gradient sign(x); 0 at x = 0 and at nan (torch's sgn).",
      d=lambda at, g, r: g * at.where(r.x > 0, 1.0, at.where(r.x < 0, -1.0, 0.0))),
    U(EXP, "exp", math.exp, np.exp,
      "e**x.",
      d=lambda at, g, r: g * r.z),
    U(LOG, "log", math.log, np.log,
      "Natural logarithm. Gradient 1/x (inf at 0).",
      d=lambda at, g, r: g / r.x),
    U(SQRT, "sqrt", math.sqrt, np.sqrt,
      "Square root. Gradient 1/(2 sqrt(x)): inf at 0, nan below.",
      d=lambda at, g, r: g / (2.0 * r.z)),
    U(SIN, "sin", math.sin, vmath.sin_array,
      "Sine.",
      d=lambda at, g, r: g * at.cos(r.x)),
    U(COS, "cos", math.cos, vmath.cos_array,
      "Cosine.",
      d=lambda at, g, r: -g * at.sin(r.x)),
    U(TAN, "tan", math.tan, np.tan,
      "Tangent.",
      d=lambda at, g, r: g * (1.0 + r.z * r.z)),
    U(TANH, "tanh", math.tanh, vmath.tanh_array,
      "Hyperbolic tangent.",
      d=lambda at, g, r: g * (1.0 - r.z * r.z)),
    U(SIGMOID, "sigmoid", _sigmoid_scalar, _by_value_table(SIGMOID),
      "1 / (1 + e**-x), without overflow.",
      d=lambda at, g, r: g * (r.z * (1.0 - r.z))),
    U(RELU, "relu", _relu_scalar, _relu_array,
      "max(x, 0). Gradient 0 at x = 0.",
      d=lambda at, g, r: at.where(r.z <= 0, 0.0, g)),    # (nan passes, as torch's)
    U(LOG1P, "log1p", math.log1p, np.log1p,
      "log(1 + x), accurate near 0.",
      d=lambda at, g, r: g / (1.0 + r.x)),
    U(EXPM1, "expm1", math.expm1, np.expm1,
      "e**x - 1, accurate near 0.",
      d=lambda at, g, r: g * (r.z + 1.0)),
    U(LOG2, "log2", math.log2, np.log2,
      "Base-2 logarithm.",
      d=lambda at, g, r: g / (r.x * LN2)),
    U(LOG10, "log10", math.log10, np.log10,
      "Base-10 logarithm.",
      d=lambda at, g, r: g / (r.x * LN10)),
    U(EXP2, "exp2", lambda x: math.pow(2.0, x), np.exp2,
      "2**x.",
      d=lambda at, g, r: g * r.z * LN2),
    U(SQUARE, "square", lambda x: x * x, np.square,
      "x * x.",
      d=lambda at, g, r: g * 2.0 * r.x),
    U(RECIPROCAL, "reciprocal", lambda x: 1.0 / x, np.reciprocal,
      "1 / x (integer division for integer arrays, as in numpy).",
      d=lambda at, g, r: -g * r.z * r.z),
    U(SINH, "sinh", math.sinh, np.sinh,
      "Hyperbolic sine.",
      d=lambda at, g, r: g * at.cosh(r.x)),
    U(COSH, "cosh", math.cosh, np.cosh,
      "Hyperbolic cosine.",
      d=lambda at, g, r: g * at.sinh(r.x)),
    U(ARCSIN, "arcsin", math.asin, np.arcsin,
      "Inverse sine. Gradient inf at |x| = 1.",
      d=lambda at, g, r: g / at.sqrt(1.0 - r.x * r.x)),
    U(ARCCOS, "arccos", math.acos, np.arccos,
      "Inverse cosine. Gradient -inf at |x| = 1.",
      d=lambda at, g, r: -g / at.sqrt(1.0 - r.x * r.x)),
    U(ARCTAN, "arctan", math.atan, np.arctan,
      "Inverse tangent.",
      d=lambda at, g, r: g / (1.0 + r.x * r.x)),
    U(ARCSINH, "arcsinh", math.asinh, np.arcsinh,
      "Inverse hyperbolic sine.",
      d=lambda at, g, r: g / at.sqrt(r.x * r.x + 1.0)),
    U(ARCCOSH, "arccosh", math.acosh, np.arccosh,
      "Inverse hyperbolic cosine. Gradient inf at x = 1.",
      d=lambda at, g, r: g / at.sqrt(r.x * r.x - 1.0)),
    U(ARCTANH, "arctanh", math.atanh, np.arctanh,
      "Inverse hyperbolic tangent. Gradient inf at |x| = 1.",
      d=lambda at, g, r: g / (1.0 - r.x * r.x)),
    U(SOFTPLUS, "softplus", _softplus_scalar, _softplus_array,
      "log(1 + e**x), without overflow. Gradient sigmoid(x).",
      d=lambda at, g, r: g * at.sigmoid(r.x)),
    U(ERF, "erf", math.erf, _by_value_table(ERF),
      "The error function.",
      d=lambda at, g, r: g * TWO_OVER_SQRT_PI * at.exp(-(r.x * r.x))),
    U(SIGN, "sign", _sign, np.sign,
      "-1, 0 or 1. Gradient 0 everywhere (as in torch).",
      d=lambda at, g, r: _zero(at, g)),
    U(FLOOR, "floor", lambda x: _signed_integral(math.floor(x), x), np.floor,
      "Largest integer <= x. Gradient 0 everywhere (as in torch).",
      d=lambda at, g, r: _zero(at, g)),
    U(CEIL, "ceil", lambda x: _signed_integral(math.ceil(x), x), np.ceil,
      "Smallest integer >= x. Gradient 0 everywhere (as in torch).",
      d=lambda at, g, r: _zero(at, g)),
    U(ROUND, "round", lambda x: _signed_integral(builtins.round(x), x), np.round,
      "Nearest integer, halves to even. Gradient 0 everywhere (as in torch).",
      d=lambda at, g, r: _zero(at, g)),
]}

binary_ops = {op.code: op for op in [
    U(ADD, "add", operator.add, np.add,
      "x + y.",
      dx=lambda at, g, r: g,
      dy=lambda at, g, r: g),
    U(SUB, "subtract", operator.sub, np.subtract,
      "x - y.",
      dx=lambda at, g, r: g,
      dy=lambda at, g, r: -g),
    U(MUL, "multiply", operator.mul, np.multiply,
      "x * y.",
      dx=lambda at, g, r: g * r.y,
      dy=lambda at, g, r: g * r.x),
    U(DIV, "divide", operator.truediv, np.true_divide,
      "x / y.",
      dx=lambda at, g, r: g / r.y,
      dy=lambda at, g, r: -g * r.x / (r.y * r.y)),
    U(POW, "power", _power, _power_array,
      "x ** y (x * x * x where y is 3, as torch). d/dx is 0 where y == 0; d/dy is 0 where "
      "x == 0 and y >= 0.",
      dx=lambda at, g, r: _pow_rule_x(at, g, r),
      dy=lambda at, g, r: _pow_rule_y(at, g, r)),
    U(MAXIMUM, "maximum", _maximum, _maximum_array,
      "Elementwise maximum; on ties the gradient is split evenly.",
      dx=lambda at, g, r: _select(at, g, _share(r.x, r.y, np.less)),
      dy=lambda at, g, r: _select(at, g, _share(r.y, r.x, np.less))),
    U(MINIMUM, "minimum", _minimum, _minimum_array,
      "Elementwise minimum; on ties the gradient is split evenly.",
      dx=lambda at, g, r: _select(at, g, _share(r.x, r.y, np.greater)),
      dy=lambda at, g, r: _select(at, g, _share(r.y, r.x, np.greater))),
    U(ARCTAN2, "arctan2", math.atan2, np.arctan2,
      "The angle of the point (y, x) for arctan2(x1=y, x2=x); gradient 0 at (0, 0), as in "
      "torch.",
      dx=lambda at, g, r: _over(at, g * r.y, r.x * r.x + r.y * r.y),
      dy=lambda at, g, r: _over(at, -g * r.x, r.x * r.x + r.y * r.y)),
    U(HYPOT, "hypot", math.hypot, np.hypot,
      "sqrt(x**2 + y**2). nan gradient at (0, 0), as in torch.",
      dx=lambda at, g, r: g * r.x / r.z,
      dy=lambda at, g, r: g * r.y / r.z),
    U(LOGADDEXP, "logaddexp", _logaddexp, np.logaddexp,
      "log(e**x + e**y), without overflow.",
      dx=lambda at, g, r: g / (1.0 + at.exp(r.y - r.x)),
      dy=lambda at, g, r: g / (1.0 + at.exp(r.x - r.y))),
    U(FMOD, "fmod", math.fmod, np.fmod,
      "Remainder with the sign of x. d/dy = -trunc(x / y).",
      dx=lambda at, g, r: g,
      dy=lambda at, g, r: -g * _trunc(at, r.x / r.y)),
    U(MOD, "mod", operator.mod, np.mod,
      "Remainder with the sign of y (Python's %). d/dy = -(x // y).",
      dx=lambda at, g, r: g,
      dy=lambda at, g, r: -g * _floor_divide(at, r.x, r.y)),
    *(U(code, name, (lambda f: lambda x, y: 1.0 if f(x, y) else 0.0)(getattr(operator, op)),
        (lambda f: lambda x, y: f(x, y).astype(np.float64))(getattr(np, name)),
        f"x {symbol} y as 1.0 or 0.0, gradient 0: the row a comparison of recorded values "
        "adds inside at.compile, so that replays recompute it (see compare).",
        dx=lambda at, g, r: _zero(at, g), dy=lambda at, g, r: _zero(at, g))
      for code, name, op, symbol in (
          (LESS, "less", "lt", "<"), (LESS_EQUAL, "less_equal", "le", "<="),
          (GREATER, "greater", "gt", ">"), (GREATER_EQUAL, "greater_equal", "ge", ">="),
          (EQUAL, "equal", "eq", "=="), (NOT_EQUAL, "not_equal", "ne", "!="))),
]}


# ---- helpers of the derivative rules ---------------------------------------------------------

def _zero(at, g):
    """An exact zero gradient of g's shape, connected to nothing (torch's zeros_like): a
    later sweep sends nothing into g's graph, where 0 * inf would make nan. The engine
    keeps a gradient that ends up constant connected to its input."""
    return at.zeros(g.shape)


def _share(u, v, loses):
    """0 where u loses to v, 1/2 on ties, 1 elsewhere, nan included (the compiled
    partials' rule, and torch's masked_fill); a function of conditions, so that
    replays recompute it."""
    return where(compare(np.equal, u, v), 0.5, where(compare(loses, u, v), 0.0, 1.0))


def _select(at, g, share):
    """g times a constant 0 / 1/2 / 1 mask, exactly 0 where the mask is (not nan where g
    is inf: the compiled tier's ``times`` does the same)."""
    return at.where(share != 0, g * share, 0.0)


def _over(at, a, b):
    """a / b, exactly 0 where b is 0 (as the compiled tier's ``_over``)."""
    zero = b == 0
    return at.where(zero, 0.0, a / at.where(zero, 1.0, b))


def _floor_divide(at, x, y):
    """Python's x // y from recorded ops (gradient 0), as the compiled tier's
    ``_floor_divide``: through fmod, so that -0.5 // inf is -1."""
    m = at.fmod(x, y)
    d = (x - m) / y
    d = at.where(m * y < 0, d - 1.0, d)          # m and y of opposite signs
    return at.round(at.where(y == 0, x / y, d))  # (round passes nothing back)


def _trunc(at, q):
    """numpy's trunc from recorded ops (gradient 0, as trunc's)."""
    return at.where(q < 0, at.ceil(q), at.floor(q))


def _pow_rule_x(at, g, r):
    """y x^(y-1), 0 where y == 0. The untaken branch gets a harmless exponent, so that
    higher derivatives there are 0 too, not 0 * inf. A constant scalar exponent c (x ** 2,
    the common case) needs neither: g c x^(c-1) in two or three recorded ops."""
    if not r.y.requires_grad and r.y.ndim == 0:
        c = r.y.item()                         # (g * c) first: a constant g folds into it
        return g * 0.0 if c == 0 else (g * 2.0) * r.x if c == 2 else \
            (g * c) * r.x ** (c - 1.0)
    flat = r.y == 0
    return at.where(flat, 0.0, g * r.y * r.x ** at.where(flat, 1.0, r.y - 1.0))


def _pow_rule_y(at, g, r):
    """x^y log x, 0 where x == 0 <= y (x^y is 0 or 1 there for every such y)."""
    at_zero, nonnegative = r.x == 0, r.y >= 0       # zero: both (as conditions, data)
    base = at.where(at_zero, at.where(nonnegative, 1.0, r.x), r.x)
    d = g * r.z * at.log(base)
    return at.where(at_zero, at.where(nonnegative, 0.0, d), d)


def _where_x(at, g, r):
    return at.where(r.cond, g, 0.0)


def _where_y(at, g, r):
    return at.where(r.cond, 0.0, g)


# (at, g, r, k) -> the gradient of operand k, as graph_backward.py calls every family's rules
graph_vjps = {code: (lambda vjps: lambda at, g, r, k: vjps[k](at, g, r))(op.vjps)
              for code, op in {**unary_ops, **binary_ops}.items()}
graph_vjps[WHERE] = lambda at, g, r, k: (_where_x, _where_y)[k](at, g, r)


# ---- recorders ------------------------------------------------------------------------------

def _scalar_fallback(op, *args):
    """numpy's answer where a ``math`` function raises (log(0), 1/0, exp(1000))."""
    with ignore_fp_errors():
        return float(op.array(*(np.float64(v) for v in args)))


_new = object.__new__

# Docstring examples: each op on two sample values, with the result the op gives (the
# doctests check it); inputs outside [-1, 1] or [1, inf) where the op needs them.
_SAMPLES = {"arcsin": [0.25, 0.5], "arccos": [0.25, 0.5], "arctanh": [0.25, 0.5],
            "arccosh": [1.5, 2.0], "sign": [-2.0, 0.5], "round": [0.5, 1.5],
            "floor": [-0.5, 1.5], "ceil": [-0.5, 1.5], "relu": [-1.0, 2.0],
            "negative": [-1.0, 2.0], "abs": [-1.0, 2.0]}


def _example(name, scalar, *inputs):
    """A docstring's example: ``at.<name>`` on tensors of ``inputs`` and its result,
    by the op's scalar forward (plain Python: nothing compiles at import)."""
    with ignore_fp_errors():
        value = np.array([scalar(*args) for args in zip(*inputs)])
    body = np.array2string(value, separator=", ", prefix="tensor(")
    args = ", ".join(f"at.tensor({v})" for v in inputs)
    return f"\n\n>>> at.{name}({args})\ntensor({body})\n"


def _unary_function(op):
    """The recording function for a unary elementwise op: ``f(x)``. The 0-d branch is
    the hot path of scalar code (see _binary_function)."""
    scalar, code = op.scalar, op.code

    def unary(x):
        if type(x) is not Tensor:
            try:
                x = as_tensor(x)
            except ComplexOperand:
                return complex_call(op.name, x)
            except DeviceOperand:
                return device_call(op.name, x)
        v = x._value
        if type(v) is not float:
            return _unary_array(op, x)
        try:
            z = scalar(v)
        except (ArithmeticError, ValueError):
            z = _scalar_fallback(op, v)
        dtype = x._dtype
        if dtype is F32:
            z = round_f32(z)
        state = per_thread.state                   # (thread_state.here(), inlined)
        if not state.grad_enabled:
            return new_leaf(z, (), dtype)
        tape = x._tape
        if tape is not None and tape.owner is state:
            a = x._row
        elif tape is None and not x._requires_grad:
            return new_leaf(z, (), dtype)
        else:
            tape = open_tape()
            a = row_of(x, tape)
        t = _new(Tensor)
        t._value = z
        t._shape = ()
        t._dtype = dtype
        t._tape = tape
        t._view_of = t._views = None
        row = tape.nrows                            # tape.push_scalar, inlined (a
        tape.arena.append(z)                        # call costs 5% of scalar recording;
        tape.staged.extend((code, a, NO_ROW))       # test_tape checks the two agree)
        tape.nrows = row + 1
        if row >= tape.flush_at:
            tape.flush_staged()
        t._row = row
        return t

    unary.__name__ = unary.__qualname__ = op.name
    unary.__doc__ = op.doc + _example(op.name, op.scalar, _SAMPLES.get(op.name, [0.5, 2.0]))
    return unary


def _unary_array(op, x):
    return record(op.code, _unary_values(op, x._value), x)


def _unary_values(op, v, out=None):
    """op at an array (into ``out`` when given): on threads when large (see below),
    else numpy's call."""
    count = pieces(v.size)
    if count > 1 and (v.dtype != F64 or not v.flags.c_contiguous):
        count = 1
    if count > 1 and op.code in _OWN_SIMD:
        for_numba()
        with parallel_launch():
            return op.array(v, count, out)
    if count > 1 and (op.code == NEG or type(op.array) is np.ufunc):
        z = np.empty(v.shape) if out is None else out
        if op.code == NEG:
            for_numba()
            with parallel_launch():
                unary_parallel(NEG, v.reshape(-1), z.reshape(-1), count)
        else:
            ufunc_in_threads(op.array, (v.reshape(-1),), z.reshape(-1), count)
        return z
    with ignore_fp_errors():
        if out is not None and type(op.array) is np.ufunc:
            return op.array(v, out=out)
        return vmath.written_to(op.array(v), out)


def forward_values(code, x, y=None, out=None):
    """What recording op ``code`` computes at numpy values x (and y), into ``out`` (a
    C-contiguous float64 array of the result's shape) when given: the same functions,
    threads and bits. A compiled function's replay computes
    its large elementwise rows so, as their eager recording did.

    >>> forward_values(EXP, np.zeros(2))
    array([1., 1.])
    """
    if y is None:
        return _unary_values(unary_ops[code], np.asarray(x), out)
    return _binary_values(binary_ops[code], _operand(x), _operand(y), out)


def _operand(v):
    return float(v) if np.ndim(v) == 0 else v


# sin, cos and tanh are autotape's own SIMD loops (kernels/vmath.py), which split among
# numba's threads on large arrays with the same values as on one. The other ops that
# are numpy ufuncs split among threads as numpy's own loop on pieces of the array.
_OWN_SIMD = {SIN, COS, TANH}


def _binary_function(op):
    """The recording function for a binary elementwise op: ``f(x, y)``.

    One of x, y is a Tensor, the other a Tensor or any array-like. The branch for two
    0-d floats is the hot path of scalar code (Python arithmetic, one row appended), so
    it reads the op's scalar function and opcode from closure cells and builds the
    result inline: every attribute lookup and call here costs a visible fraction.
    """
    scalar, code = op.scalar, op.code

    def binary(x, y):
        tx, ty = type(x) is Tensor, type(y) is Tensor
        if tx:
            xv = x._value
            if ty:
                yv = y._value
                if type(xv) is not float or type(yv) is not float:
                    return _binary_arrays(op, x, y)
                dtype = x._dtype if x._dtype is y._dtype else F64
            elif type(xv) is float and type(y) in _NUMBER_TYPES:
                yv = y
                dtype = x._dtype
            else:
                return _binary_arrays(op, x, y)
        elif ty and type(y._value) is float and type(x) in _NUMBER_TYPES:
            xv = x
            yv = y._value
            dtype = y._dtype
        else:                                       # arrays, or no Tensor at all
            return _binary_arrays(op, x, y)
        try:
            z = scalar(xv, yv)
        except (ArithmeticError, ValueError):
            z = _scalar_fallback(op, xv, yv)
        if dtype is F32:
            z = round_f32(z)
        state = per_thread.state                   # (thread_state.here(), inlined)
        if not state.grad_enabled:
            return new_leaf(z, (), dtype)
        # the tape: an operand's, if this thread records on it, else the thread's own
        tape = x._tape if tx else None
        if tape is None or tape.owner is not state:
            tape = y._tape if ty else None
            if tape is None or tape.owner is not state:
                if not ((tx and (x._tape is not None or x._requires_grad)) or
                        (ty and (y._tape is not None or y._requires_grad))):
                    return new_leaf(z, (), dtype)
                tape = open_tape()
        if tx:
            if x._tape is tape:
                a = x._row
            else:                                   # a leaf already on this tape?
                c = x._cache if x._tape is None else None
                a = c[1] if (c is not None and c[0]() is tape) else row_of(x, tape)
        else:
            a = tape.consts.get(xv)
            if a is None:
                a = row_of(x, tape)
        if ty:
            if y._tape is tape:
                b = y._row
            else:
                c = y._cache if y._tape is None else None
                b = c[1] if (c is not None and c[0]() is tape) else row_of(y, tape)
        else:
            b = tape.consts.get(yv)
            if b is None:
                b = row_of(y, tape)
        t = _new(Tensor)
        t._value = z
        t._shape = ()
        t._dtype = dtype
        t._tape = tape
        t._view_of = t._views = None
        row = tape.nrows                            # tape.push_scalar, inlined (a
        tape.arena.append(z)                        # call costs 5% of scalar recording;
        tape.staged.extend((code, a, b))            # test_tape checks the two agree)
        tape.nrows = row + 1
        if row >= tape.flush_at:
            tape.flush_staged()
        t._row = row
        return t

    binary.__name__ = binary.__qualname__ = op.name
    binary.__doc__ = op.doc + _example(op.name, op.scalar, [0.5, 2.0], [1.5, 3.0])
    return binary


_NUMBER_TYPES = (float, int, bool)


def _binary_arrays(op, x, y):
    if type(x) is Condition or type(y) is Condition:
        x, y = _mask_as_data(x, y), _mask_as_data(y, x)
    try:
        if type(x) is not Tensor and type(x) not in _NUMBER_TYPES:
            x = as_tensor(x)
        if type(y) is not Tensor and type(y) not in _NUMBER_TYPES:
            y = as_tensor(y)
    except ComplexOperand:
        return complex_call(op.name, x, y)
    except DeviceOperand:
        return device_call(op.name, x, y)
    z = _binary_values(op, array_of(x) if isinstance(x, Tensor) else x,    # (a Condition
                       array_of(y) if isinstance(y, Tensor) else y)        #  too: its guard)
    if type(z) is np.ndarray and z.dtype is F64 and z.ndim and z.flags.c_contiguous:
        return _record_array(op.code, z, x, y)
    return record(op.code, z, x, y)


def _binary_values(op, xa, ya, out=None):
    """x op y of arrays or numbers (into ``out`` when given): on threads when large,
    else numpy's call."""
    big = _chunkable(xa, ya)
    if big is not None and op.code in _EXACT and (op.code != POW or (type(big[1]) is float
                                                                and big[1] == 2.0)):
        return _exact_in_threads(op.code, *big, out)
    if big is not None and type(op.array) is np.ufunc:
        z = np.empty(big[2]) if out is None else out
        ufunc_in_threads(op.array, big[:2], z.reshape(-1), pieces(z.size))
        return z
    with ignore_fp_errors():
        if out is not None and type(op.array) is np.ufunc:
            return op.array(xa, ya, out=out)
        return vmath.written_to(op.array(xa, ya), out)


# Large +, -, *, / and x ** 2 run on numba's threads (bit for bit numpy's values: IEEE
# arithmetic is exact); numpy's other binary ufuncs on numpy's loop per piece.
_EXACT = {ADD, SUB, MUL, DIV, POW}


def _exact_in_threads(code, xf, yf, shape, out=None):
    """x op y on numba's threads (kernels/elementwise.py), into ``out`` when given."""
    sx, sy = (0 if type(xf) is float else 1), (0 if type(yf) is float else 1)
    z = np.empty(shape) if out is None else out
    for_numba()
    with parallel_launch():
        binary_parallel(code, np.array([xf]) if sx == 0 else xf,
                        np.array([yf]) if sy == 0 else yf, z.reshape(-1), sx, sy,
                        pieces(z.size))
    return z


def _chunkable(xa, ya):
    """(flat x or a float, flat y or a float, shape) when x op y is large enough for
    threads: two C-contiguous float64 arrays of one shape, or one and a Python number
    (numpy takes the number as a float64, as here); else None."""
    if get_num_threads() == 1:
        return None
    if type(xa) is np.ndarray:
        if not _big(xa):
            return None
        if type(ya) is np.ndarray:
            if ya.shape == xa.shape and ya.dtype == F64 and ya.flags.c_contiguous:
                return xa.reshape(-1), ya.reshape(-1), xa.shape
            return None
        ya = _as_float(ya)
        return None if ya is None else (xa.reshape(-1), ya, xa.shape)
    if type(ya) is np.ndarray and _big(ya):
        xa = _as_float(xa)
        return None if xa is None else (xa, ya.reshape(-1), ya.shape)
    return None


def _big(a):
    return a.size >= PARALLEL_MIN and a.dtype == F64 and a.flags.c_contiguous


def _as_float(c):
    if type(c) in _NUMBER_TYPES:
        try:
            return float(c)
        except OverflowError:                  # (an int beyond float64: numpy's error)
            return None
    return None


def _record_array(code, z, x, y):
    """record() for the common eager case, inlined (a few microseconds per op is what
    array code pays): a fresh float64 result of two Tensors or numbers."""
    state = per_thread.state
    tx, ty = type(x) is Tensor, type(y) is Tensor
    if not state.grad_enabled or not ((tx and (x._tape is not None or x._requires_grad)) or
                                      (ty and (y._tape is not None or y._requires_grad))):
        return new_leaf(z, z.shape, F64)
    tape = x._tape if tx else None
    if tape is None or tape.owner is not state:
        tape = y._tape if ty else None
        if tape is None or tape.owner is not state:
            tape = open_tape()
    a = x._row if tx and x._tape is tape else row_of(x, tape)
    b = y._row if ty and y._tape is tape else row_of(y, tape)
    row = tape.push(code, a, b, z.shape, NO_ROW, z.reshape(-1))
    t = _new(Tensor)
    t._value, t._shape, t._dtype, t._tape, t._row, t._requires_grad = \
        z, z.shape, F64, tape, row, True
    t._view_of = t._views = None
    return t


unary_functions = {code: _unary_function(op) for code, op in unary_ops.items()}
binary_functions = {code: _binary_function(op) for code, op in binary_ops.items()}

def _recorder(code):
    """The recording function of an op of the table (bound by name below)."""
    found = unary_functions.get(code) or binary_functions.get(code)
    if found is None:
        raise ImportError(f"the elementwise op table has no row for {opcode_name(code)}")
    return found


# every op of the table under its numpy name (at.exp, at.arctan2, ...). (abs and round
# shadow the builtins from here on: the forwards above call builtins.abs / .round.)
(negative, abs, exp, log, sqrt, sin, cos, tan, tanh, sigmoid, relu, log1p, expm1, log2,
 log10, exp2, square, reciprocal, sinh, cosh, arcsin, arccos, arctan, arcsinh, arccosh,
 arctanh, softplus, erf, sign, floor, ceil, round) = map(_recorder, (
    NEG, ABS, EXP, LOG, SQRT, SIN, COS, TAN, TANH, SIGMOID, RELU, LOG1P, EXPM1, LOG2, LOG10,
    EXP2, SQUARE, RECIPROCAL, SINH, COSH, ARCSIN, ARCCOS, ARCTAN, ARCSINH, ARCCOSH, ARCTANH,
    SOFTPLUS, ERF, SIGN, FLOOR, CEIL, ROUND))
(add, subtract, multiply, divide, power, maximum, minimum, arctan2, hypot, logaddexp, fmod,
 mod) = map(_recorder, (ADD, SUB, MUL, DIV, POW, MAXIMUM, MINIMUM, ARCTAN2, HYPOT,
                        LOGADDEXP, FMOD, MOD))


def binary(op, x, y):
    """z = op(x, y) for an op given by its table entry."""
    return binary_functions[op.code](x, y)


class Condition(Tensor):
    """A comparison's result inside a compile trace: a bool Tensor that is also data on
    the tape. ``_link`` is the comparison recorded as 1.0 / 0.0 (a condition row the
    replay recomputes); where, clip and masks read that row instead of the values. Any
    other read of the values (an ``if``, ``.item()``, numpy) goes through ``_value``,
    which keeps the comparison's guard first, as a plain comparison keeps it."""
    __slots__ = ("_data", "_link", "_pending")

    @property
    def _value(self):
        pending = self._pending
        if pending is not None:
            self._pending = None
            pending.keep()
        return self._data

    @_value.setter
    def _value(self, v):
        self._value                            # (a write after a read: the guard holds)
        self._data = v


_COMPARISONS = {np.less: LESS, np.less_equal: LESS_EQUAL, np.greater: GREATER,
                np.greater_equal: GREATER_EQUAL, np.equal: EQUAL, np.not_equal: NOT_EQUAL}


def compare(np_fn, x, y):
    """A comparison (np.less, ...): a bool Tensor, never differentiable. Inside a
    compile trace, comparing recorded values also records the comparison as a
    condition row, and the result is a ``Condition``: where / clip / masks built on it
    are recomputed by replays (no guard), any other use of it is a guard."""
    with ignore_fp_errors():
        result, pending = decide(np_fn, x, y)
        if pending is not None:
            link = binary_functions[_COMPARISONS[np_fn]](x, y)
            if link._tape is current_trace().tape:
                c = _new(Condition)
                c._data, c._shape, c._dtype = canonical(result)
                c._tape, c._row, c._requires_grad, c._cache = None, -1, False, None
                c._view_of = c._views = None
                c._link, c._pending = link, pending
                return c
            pending.keep()                     # (no row: recorded under no_grad)
    return new_leaf(*canonical(result))


def _comparison(np_fn):
    def comparison(x, y):
        try:
            return compare(np_fn, x if type(x) is Tensor else as_tensor(x), y)
        except ComplexOperand:
            return complex_call(np_fn.__name__, x, y)
        except DeviceOperand:
            return device_call(np_fn.__name__, x, y)
    comparison.__name__ = comparison.__qualname__ = np_fn.__name__
    comparison.__doc__ = (f"numpy.{np_fn.__name__} on Tensors: a bool Tensor (no gradient). "
                          "Inside at.compile it is recomputed per call (see compare)."
                          + _example(np_fn.__name__, np_fn, [0.5, 3.0], [1.5, 3.0]))
    return comparison


less, less_equal, greater, greater_equal, equal, not_equal = map(_comparison, _COMPARISONS)


def _mask_as_data(mask, other):
    """Arithmetic with a mask (``x * (x > 0)``) inside a trace: the Condition's 1.0 / 0.0
    row in its place, where that gives numpy's dtype (the other operand a float of the
    row's dtype); otherwise the mask as it is, whose values are then read (a guard)."""
    if type(mask) is not Condition:
        return mask
    link, trace = mask._link, current_trace()
    if trace is None or link._tape is not trace.tape:
        return mask
    if type(other) is float or (isinstance(other, Tensor) and other._dtype is link._dtype):
        return link
    return mask


def indexed_condition(condition, index):
    """``condition[index]`` (a basic index) inside its trace: a Condition again, its
    1.0 / 0.0 row indexed, so a mask sliced or broadcast (``(x > 0)[:, None]``) stays
    data; None where it cannot (then the values are read, and the guard kept)."""
    link, trace = condition._link, current_trace()
    if trace is None or link._tape is not trace.tape:
        return None
    c = _new(Condition)
    c._data, c._shape, c._dtype = canonical(np.asarray(condition._data)[index])
    c._tape, c._row, c._requires_grad, c._cache = None, -1, False, None
    c._view_of = c._views = None
    c._link, c._pending = link[index], condition._pending     # (one guard for both)
    return c


def _condition_row(condition, tape):
    """The row of a Condition's comparison on ``tape``, or None (then its values are
    read, and its guard kept)."""
    if type(condition) is Condition and condition._link._tape is tape:
        return condition._link._row
    return None


def where(condition, x, y):
    """Elements of ``x`` where ``condition`` holds, else of ``y`` (numpy broadcasting).

    Both branches are differentiated, as in torch: where(x > 0, sqrt(x), 0) has a NaN
    gradient at x < 0, because sqrt'(x) is NaN there.

    >>> x = at.tensor([-1.0, 2.0], requires_grad=True)
    >>> at.where(x > 0, x, 0.0).sum().backward(); x.grad
    tensor([0., 1.])
    """
    link = condition._link if type(condition) is Condition else None
    if link is not None:
        c = condition._data                    # (read by the row, not from Python)
    else:
        c = np.asarray(observe(_as_bool, condition) if type(condition) is Tensor
                       else condition)
    c = c.astype(bool, copy=False)
    x = as_tensor(x) if type(x) in (list, tuple) else x
    y = as_tensor(y) if type(y) in (list, tuple) else y
    xa = array_of(x) if type(x) is Tensor else x
    ya = array_of(y) if type(y) is Tensor else y

    def params(tape):
        row = _condition_row(condition, tape)
        if row is None:
            if link is not None:
                condition._value               # read as a constant: the guard holds
            row = tape.const(np.array(c, F64).reshape(-1), c.shape)
        return where_params(row)
    out = record(WHERE, np.where(c, xa, ya), as_tensor(x), as_tensor(y), params, link)
    if link is not None and out._tape is None:
        condition._value                       # a constant result: the guard holds
    return out


def _as_bool(c):
    return np.asarray(c).astype(bool, copy=False)


def clip(x, a_min, a_max):
    """x limited to [a_min, a_max] (either may be None; a_max wins if a_min > a_max, as
    in numpy). The gradient passes to x where a_min <= x <= a_max, boundaries included
    (torch's clamp), and to a_min or a_max where they are taken.

    >>> x = at.tensor([0.0, 1.0, 3.0], requires_grad=True)
    >>> at.grad(at.clip(x, 1.0, 2.0).sum(), x)
    (tensor([0., 1., 0.]),)
    """
    x = as_tensor(x)
    if a_min is None and a_max is None:
        return x.copy()                            # a new tensor, never an alias of x
    out = x
    if a_min is not None:
        out = where(compare(np.less, x, a_min), a_min, out)
    if a_max is not None:
        out = where(compare(np.greater, as_tensor(out), a_max), a_max, out)
    return out
