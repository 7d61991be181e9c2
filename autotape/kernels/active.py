"""Differentiable values inside numba-compiled code (``at.jit``, jit.py).

``Active`` is a numba type: a float64 value, its row on a tape that lives in compiled
code, and the address of that tape's header. Arithmetic operators, comparisons and the
``math`` / numpy scalar functions are overloaded for it: an op on an Active computes
its value with the op table's function (elementwise.py) and appends one row (opcode,
operand rows, value) to the tape, with no Python objects per op. An Active with row -1
is a constant that is not on any tape (an element of a fresh ``np.zeros``, say): ops on
constants only give constants, and a constant meeting a recorded value is written to
the tape as a CONST row then.

``ActiveArray`` holds arrays of them (values and rows, the same shape) for the arrays a
model allocates (``np.zeros`` and friends, rewritten to ``zeros`` below) and for array
arguments; indexing by integers reads and writes Actives, slicing gives views.

The tape is three buffers a Python caller owns for the whole compiled call (never
freed, moved or shared meanwhile): the header int64 [rows, capacity, address of the
(op, a, b) rows, address of the values, overflow, decisions], the rows and the values.
A tape that fills up keeps counting rows without writing them (overflow set); the
caller records again with room for all of them.
"""
import math
import operator

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.experimental import structref
from numba.extending import (intrinsic, lower_cast, make_attribute_wrapper, models,
                             overload, overload_attribute, overload_method, register_model)

from ..opcodes import (ABS, ADD, ARCCOS, ARCCOSH, ARCSIN, ARCSINH, ARCTAN, ARCTAN2,
                       ARCTANH, CONST, COSH, DIV, ERF, EXP, EXP2, EXPM1, HYPOT, LEAF, LOG,
                       LOG10, LOG1P, LOG2, MAXIMUM, MINIMUM, MUL, NEG, POW, SIN, COS,
                       SINH, SQRT, SUB, TAN, TANH, UNARY_LAST)
from .cache import cached_njit, distinct
from .elementwise import (binary_partial_x, binary_partial_y, binary_value, times,
                          unary_partial, unary_value)

# header fields
H_ROWS, H_CAPACITY, H_OPS, H_VALUES, H_OVERFLOW, H_DECISIONS = range(6)
HEADER = 6


# ---- the scalar type ----------------------------------------------------------------------

class ActiveType(types.Type):
    def __init__(self):
        super().__init__(name="autotape.Active")

    def unify(self, typingctx, other):
        """A variable that holds a number in one place and an Active in another (an
        accumulator ``s = 0.0`` then ``s += x``) is an Active (the number a constant)."""
        if isinstance(other, (types.Float, types.Integer, types.Boolean)):
            return self
        return None

    def can_convert_from(self, typingctx, other):
        if isinstance(other, (types.Float, types.Integer, types.Boolean)):
            return types.Conversion.safe
        return None


active = ActiveType()


@register_model(ActiveType)
class _ActiveModel(models.StructModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, [("value", types.float64), ("row", types.int64),
                                        ("tape", types.intp)])


make_attribute_wrapper(ActiveType, "value", "value")
make_attribute_wrapper(ActiveType, "row", "row")
make_attribute_wrapper(ActiveType, "tape", "tape")


@lower_cast(types.Float, ActiveType)
@lower_cast(types.Integer, ActiveType)
@lower_cast(types.Boolean, ActiveType)
def _number_to_active(context, builder, fromty, toty, value):
    s = cgutils.create_struct_proxy(active)(context, builder)
    s.value = context.cast(builder, value, fromty, types.float64)
    s.row = context.get_constant(types.int64, -1)
    s.tape = context.get_constant(types.intp, 0)
    return s._getvalue()


@intrinsic
def make_active(typingctx, value, row, tape):
    """Active(value, row, tape)."""
    sig = active(types.float64, types.int64, types.intp)

    def codegen(context, builder, sig, args):
        s = cgutils.create_struct_proxy(active)(context, builder)
        s.value, s.row, s.tape = args
        return s._getvalue()
    return sig, codegen


def _pointer(builder, address, index, llty):
    return builder.gep(builder.inttoptr(address, llty.as_pointer()), [index])


@intrinsic
def load_int(typingctx, address, index):
    """The int64 at address[index] (a buffer the caller keeps alive)."""
    def codegen(context, builder, sig, args):
        return builder.load(_pointer(builder, args[0], args[1], ir.IntType(64)))
    return types.int64(types.intp, types.int64), codegen


@intrinsic
def store_int(typingctx, address, index, value):
    def codegen(context, builder, sig, args):
        builder.store(args[2], _pointer(builder, args[0], args[1], ir.IntType(64)))
        return context.get_dummy_value()
    return types.void(types.intp, types.int64, types.int64), codegen


@intrinsic
def store_float(typingctx, address, index, value):
    def codegen(context, builder, sig, args):
        builder.store(args[2], _pointer(builder, args[0], args[1], ir.DoubleType()))
        return context.get_dummy_value()
    return types.void(types.intp, types.int64, types.float64), codegen


@numba.njit(inline="always")
def push(tape, op, a, b, value):
    """Append the row (op, a, b, value); the Active it made."""
    n = load_int(tape, H_ROWS)
    store_int(tape, H_ROWS, n + 1)
    if n >= load_int(tape, H_CAPACITY):
        store_int(tape, H_OVERFLOW, 1)
        return make_active(value, -1, tape)
    rows = load_int(tape, H_OPS)
    store_int(rows, 3 * n, op)
    store_int(rows, 3 * n + 1, a)
    store_int(rows, 3 * n + 2, b)
    store_float(load_int(tape, H_VALUES), n, value)
    return make_active(value, n, tape)


@numba.njit(inline="always")
def row_of(tape, x):
    """x's row, writing a constant to the tape first."""
    if x.row >= 0:
        return x.row
    return push(tape, CONST, -1, -1, x.value).row


@numba.njit(inline="always")
def leaf(tape, value):
    """A new input row."""
    return push(tape, LEAF, -1, -1, value)


@numba.njit(inline="always")
def constant(value):
    return make_active(value, -1, 0)


@numba.njit(inline="always")
def unary(op, x):
    z = unary_value(op, x.value)
    if x.row < 0:
        return make_active(z, -1, x.tape)
    return push(x.tape, op, x.row, -1, z)


@numba.njit(inline="always")
def binary(op, x, y):
    z = binary_value(op, x.value, y.value)
    if x.row < 0 and y.row < 0:
        return make_active(z, -1, x.tape if x.tape else y.tape)
    tape = x.tape if x.row >= 0 else y.tape
    return push(tape, op, row_of(tape, x), row_of(tape, y), z)


@numba.njit(inline="always")
def decide(x, y, outcome):
    """A decision taken on recorded values (a comparison): counted, since a recording
    with decisions holds only where they come out the same."""
    tape = x.tape if x.row >= 0 else (y.tape if y.row >= 0 else 0)
    if tape:
        store_int(tape, H_DECISIONS, load_int(tape, H_DECISIONS) + 1)
    return outcome


def _is_number(t):
    return isinstance(t, (types.Float, types.Integer, types.Boolean))


_same = numba.njit(inline="always")(distinct(lambda x: x, "same"))
_constant_of = numba.njit(inline="always")(distinct(lambda x: constant(float(x)), "constant_of"))


def _operands(x, y):
    """(convert x, convert y) into Actives when at least one is an Active and the other
    an Active or a number; else None."""
    if not (isinstance(x, ActiveType) or isinstance(y, ActiveType)):
        return None
    if not all(isinstance(t, ActiveType) or _is_number(t) for t in (x, y)):
        return None
    return tuple(_same if isinstance(t, ActiveType) else _constant_of for t in (x, y))


# ---- operators and functions ----------------------------------------------------------------

def _register_binary(fn, op):
    @overload(fn)
    def impl(x, y):
        conv = _operands(x, y)
        if conv is None:
            return None
        fx, fy = conv
        return distinct(lambda x, y: binary(op, fx(x), fy(y)), op, fx is _same, fy is _same)


# The functions an Active is differentiated through, and their opcodes (jit_python.py's
# recorder reads the same tables)
BINARY_FUNCTIONS = [(operator.add, ADD), (operator.sub, SUB), (operator.mul, MUL),
                    (operator.truediv, DIV), (operator.pow, POW), (math.pow, POW),
                    (np.power, POW), (math.atan2, ARCTAN2), (np.arctan2, ARCTAN2),
                    (math.hypot, HYPOT), (np.hypot, HYPOT), (np.maximum, MAXIMUM),
                    (np.minimum, MINIMUM), (np.add, ADD), (np.subtract, SUB),
                    (np.multiply, MUL), (np.divide, DIV), (max, MAXIMUM), (min, MINIMUM)]
for _fn, _op in BINARY_FUNCTIONS + [(operator.iadd, ADD), (operator.isub, SUB),
                                    (operator.imul, MUL), (operator.itruediv, DIV),
                                    (operator.ipow, POW)]:
    _register_binary(_fn, _op)


def _register_unary(fn, op):
    @overload(fn)
    def impl(x):
        if isinstance(x, ActiveType):
            return distinct(lambda x: unary(op, x), op)
        return None


UNARY_FUNCTIONS = [(operator.neg, NEG), (abs, ABS), (np.abs, ABS), (np.absolute, ABS),
          (math.fabs, ABS), (np.negative, NEG)]
for _name, _op in [("exp", EXP), ("log", LOG), ("sqrt", SQRT), ("sin", SIN), ("cos", COS),
                   ("tan", TAN), ("tanh", TANH), ("sinh", SINH), ("cosh", COSH),
                   ("log1p", LOG1P), ("expm1", EXPM1), ("log2", LOG2), ("log10", LOG10)]:
    UNARY_FUNCTIONS += [(getattr(math, _name), _op), (getattr(np, _name), _op)]
for _m, _n, _op in [("asin", "arcsin", ARCSIN), ("acos", "arccos", ARCCOS),
                    ("atan", "arctan", ARCTAN), ("asinh", "arcsinh", ARCSINH),
                    ("acosh", "arccosh", ARCCOSH), ("atanh", "arctanh", ARCTANH)]:
    UNARY_FUNCTIONS += [(getattr(math, _m), _op), (getattr(np, _n), _op)]
UNARY_FUNCTIONS += [(math.erf, ERF), (np.exp2, EXP2)]
for _fn, _op in UNARY_FUNCTIONS:
    _register_unary(_fn, _op)


@overload(operator.pos)
def _pos(x):
    if isinstance(x, ActiveType):
        return lambda x: x


def _register_compare(fn):
    @overload(fn)
    def impl(x, y):
        conv = _operands(x, y)
        if conv is None:
            return None
        fx, fy = conv

        def compare(x, y):
            a, b = fx(x), fy(y)
            return decide(a, b, fn(a.value, b.value))
        return distinct(compare, fn.__name__, fx is _same, fy is _same)


for _fn in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne):
    _register_compare(_fn)


def _refuse(fn, why):
    @overload(fn)
    def impl(x):
        if isinstance(x, ActiveType):
            raise TypingError(why)
        return None


REFUSED = {
    float: "float() of a differentiable value would drop its derivative (at.jit); keep "
           "computing with it, or use a plain number where no derivative is wanted",
    int: "int() of a differentiable value would drop its derivative (at.jit)",
    bool: "bool() of a differentiable value: compare it instead (x > 0)",
    math.floor: "math.floor of a differentiable value returns an int, which drops the "
                "derivative (at.jit)",
    math.ceil: "math.ceil of a differentiable value returns an int, which drops the "
               "derivative (at.jit)"}
for _fn, _why in REFUSED.items():
    _refuse(_fn, _why)


@overload_attribute(ActiveType, "real")
def _real(x):
    return lambda x: x


# ---- arrays of Actives ----------------------------------------------------------------------

@structref.register
class ActiveArrayType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(t)) for name, t in fields)


class ActiveArray(structref.StructRefProxy):
    """An array of differentiable values in compiled code: their values, their tape
    rows (-1: a constant) and a one-element cell holding the tape's address, shared by
    an array and its views (0 while it holds constants only)."""


structref.define_proxy(ActiveArray, ActiveArrayType, ["values", "rows", "cell"])


def _is_active_array(t):
    return isinstance(t, ActiveArrayType)


@overload(len)
def _len(a):
    if _is_active_array(a):
        return lambda a: len(a.values)


@overload_attribute(ActiveArrayType, "shape")
def _shape(a):
    return lambda a: a.values.shape


@overload_attribute(ActiveArrayType, "size")
def _size(a):
    return lambda a: a.values.size


@overload_attribute(ActiveArrayType, "ndim")
def _ndim(a):
    return lambda a: a.values.ndim


@overload_attribute(ActiveArrayType, "T")
def _transposed(a):
    return lambda a: ActiveArray(a.values.T, a.rows.T, a.cell)


@overload_method(ActiveArrayType, "copy")
def _copy(a):
    return lambda a: ActiveArray(a.values.copy(), a.rows.copy(), a.cell.copy())


@overload_method(ActiveArrayType, "reshape")
def _reshape(a, s0, s1=None, s2=None):
    """A view with another shape (a tuple, or up to three sizes), as ndarray.reshape:
    values and rows alike."""
    def given(s):
        return s is not None and not isinstance(s, (types.NoneType, types.Omitted))
    if isinstance(s0, types.BaseTuple):
        return lambda a, s0, s1=None, s2=None: ActiveArray(
            a.values.reshape(s0), a.rows.reshape(s0), a.cell)
    if given(s2):
        return lambda a, s0, s1=None, s2=None: ActiveArray(
            a.values.reshape((s0, s1, s2)), a.rows.reshape((s0, s1, s2)), a.cell)
    if given(s1):
        return lambda a, s0, s1=None, s2=None: ActiveArray(
            a.values.reshape((s0, s1)), a.rows.reshape((s0, s1)), a.cell)
    return lambda a, s0, s1=None, s2=None: ActiveArray(
        a.values.reshape((s0,)), a.rows.reshape((s0,)), a.cell)


def _is_scalar_index(a, index):
    """Whether ``a[index]`` is one element: an integer per axis."""
    ndim = a.field_dict["values"].ndim
    if isinstance(index, types.Integer):
        return ndim == 1
    return isinstance(index, types.BaseTuple) and len(index.types) == ndim and all(
        isinstance(t, types.Integer) for t in index.types)


@overload(operator.getitem)
def _getitem(a, index):
    if not _is_active_array(a):
        return None
    if _is_scalar_index(a, index):
        return lambda a, index: make_active(a.values[index], a.rows[index], a.cell[0])
    return lambda a, index: ActiveArray(a.values[index], a.rows[index], a.cell)


@overload(operator.setitem)
def _setitem(a, index, value):
    if not _is_active_array(a):
        return None
    if isinstance(value, ActiveType):
        def set_active(a, index, value):
            a.values[index] = value.value
            a.rows[index] = value.row
            if value.row >= 0:
                a.cell[0] = value.tape
        return set_active
    if _is_number(value):
        def set_number(a, index, value):
            a.values[index] = value
            a.rows[index] = -1
        return set_number
    if _is_active_array(value):
        def set_array(a, index, value):
            a.values[index] = value.values
            a.rows[index] = value.rows
            if value.cell[0]:
                a.cell[0] = value.cell[0]
        return set_array
    return None


# ---- whole-array arithmetic on arrays of Actives ------------------------------------------
# Elementwise ops, sums and matrix products, one recorded op per element: what a model
# written with array expressions (x = x + dt * v) records, the same rows its loop would.

@numba.njit(inline="always")
def _element(a, index):
    return make_active(a.values[index], a.rows[index], a.cell[0])


@numba.njit(inline="always")
def _put(a, index, x):
    a.values[index] = x.value
    a.rows[index] = x.row
    if x.row >= 0:
        a.cell[0] = x.tape


@numba.njit(inline="always")
def _fresh(shape):
    return ActiveArray(np.empty(shape), np.full(shape, -1, np.int64), np.zeros(1, np.intp))


@numba.njit(inline="always")
def _same_shape(x, y):
    if x.values.shape != y.values.shape:
        raise ValueError("at.jit: arrays of differentiable values combine elementwise "
                         "only at the same shape (or with a scalar)")


def _register_array_binary(fn, op):
    @overload(fn)
    def impl(x, y):
        ax, ay = _is_active_array(x), _is_active_array(y)
        if ax and ay:
            def both(x, y):
                _same_shape(x, y)
                out = _fresh(x.values.shape)
                for index in np.ndindex(x.values.shape):
                    _put(out, index, binary(op, _element(x, index), _element(y, index)))
                return out
            return distinct(both, op)
        scalar = y if ax else x
        if not (ax or ay) or not (isinstance(scalar, ActiveType) or _is_number(scalar)):
            return None
        convert = _same if isinstance(scalar, ActiveType) else _constant_of
        if ax:
            def array_scalar(x, y):
                s, out = convert(y), _fresh(x.values.shape)
                for index in np.ndindex(x.values.shape):
                    _put(out, index, binary(op, _element(x, index), s))
                return out
            return distinct(array_scalar, op, convert is _same)

        def scalar_array(x, y):
            s, out = convert(x), _fresh(y.values.shape)
            for index in np.ndindex(y.values.shape):
                _put(out, index, binary(op, s, _element(y, index)))
            return out
        return distinct(scalar_array, op, convert is _same)


ARRAY_BINARY_FUNCTIONS = [
    (operator.add, ADD), (operator.sub, SUB), (operator.mul, MUL), (operator.truediv, DIV),
    (operator.pow, POW), (np.power, POW), (np.add, ADD), (np.subtract, SUB),
    (np.multiply, MUL), (np.divide, DIV), (np.maximum, MAXIMUM), (np.minimum, MINIMUM),
    (np.arctan2, ARCTAN2), (np.hypot, HYPOT)]
for _fn, _op in ARRAY_BINARY_FUNCTIONS:
    _register_array_binary(_fn, _op)


def _register_array_update(fn, op):
    """a += b and friends: in place, as numpy's."""
    @overload(fn)
    def impl(a, b):
        if not _is_active_array(a):
            return None
        if _is_active_array(b):
            def update_array(a, b):
                _same_shape(a, b)
                for index in np.ndindex(a.values.shape):
                    _put(a, index, binary(op, _element(a, index), _element(b, index)))
                return a
            return distinct(update_array, op)
        if not (isinstance(b, ActiveType) or _is_number(b)):
            return None
        convert = _same if isinstance(b, ActiveType) else _constant_of

        def update_scalar(a, b):
            s = convert(b)
            for index in np.ndindex(a.values.shape):
                _put(a, index, binary(op, _element(a, index), s))
            return a
        return distinct(update_scalar, op, convert is _same)


for _fn, _op in [(operator.iadd, ADD), (operator.isub, SUB), (operator.imul, MUL),
                 (operator.itruediv, DIV)]:
    _register_array_update(_fn, _op)


def _register_array_unary(fn, op):
    @overload(fn)
    def impl(a):
        if not _is_active_array(a):
            return None

        def each(a):
            out = _fresh(a.values.shape)
            for index in np.ndindex(a.values.shape):
                _put(out, index, unary(op, _element(a, index)))
            return out
        return distinct(each, op)


for _fn, _op in UNARY_FUNCTIONS:
    if _fn is not math.fabs and not getattr(_fn, "__module__", "") == "math" and \
            _fn is not abs:
        _register_array_unary(_fn, _op)


def _total(a):
    """The sum of an array of Actives (one ADD row per element after the first)."""


@overload(_total)
def _total_impl(a):
    def total(a):
        s = constant(0.0)
        first = True
        for index in np.ndindex(a.values.shape):
            s = _element(a, index) if first else binary(ADD, s, _element(a, index))
            first = False
        return s
    return total


@overload(np.sum)
def _np_sum(a):
    if _is_active_array(a):
        return lambda a: _total(a)


@overload_method(ActiveArrayType, "sum")
def _sum(a):
    return lambda a: _total(a)


@overload(np.mean)
def _np_mean(a):
    if _is_active_array(a):
        return lambda a: binary(DIV, _total(a), constant(float(a.values.size)))


@overload_method(ActiveArrayType, "mean")
def _mean(a):
    return lambda a: binary(DIV, _total(a), constant(float(a.values.size)))


def _dims(t):
    """The number of axes of an array of Actives or of floats."""
    return t.field_dict["values"].ndim if _is_active_array(t) else t.ndim


@numba.njit(inline="always")
def _inner(x, y):
    """sum_p x[p] y[p] of two 1-D arrays, summed from 0.0 in the order of p: the tape
    replay's order for a matmul."""
    s = constant(0.0)
    for p in range(x.shape[0]):
        s = binary(ADD, s, binary(MUL, _active_at(x, p), _active_at(y, p)))
    return s


def _product(a, b):
    """a @ b (and np.dot) of 1-D or 2-D arrays, one of Actives: a MUL and an ADD per
    multiply-add."""
    if not (_is_active_array(a) or _is_active_array(b)):
        return None
    if not all(_is_active_array(t) or isinstance(t, types.Array) for t in (a, b)) or \
            _dims(a) not in (1, 2) or _dims(b) not in (1, 2):
        return None
    shapes = "at.jit: a matrix product of arrays whose inner sizes differ"
    if _dims(a) == 1 and _dims(b) == 1:
        def dot(a, b):
            if a.shape[0] != b.shape[0]:
                raise ValueError(shapes)
            return _inner(a, b)
        return dot
    if _dims(a) == 2 and _dims(b) == 1:
        def matrix_vector(a, b):
            n, k = a.shape
            if b.shape[0] != k:
                raise ValueError(shapes)
            out = _fresh((n,))
            for r in range(n):
                _put(out, r, _inner(a[r], b))
            return out
        return matrix_vector
    if _dims(a) == 1:
        def vector_matrix(a, b):
            k, m = b.shape
            if a.shape[0] != k:
                raise ValueError(shapes)
            out = _fresh((m,))
            for c in range(m):
                _put(out, c, _inner(a, b[:, c]))
            return out
        return vector_matrix

    def matrix_matrix(a, b):
        n, k = a.shape
        m = b.shape[1]
        if b.shape[0] != k:
            raise ValueError(shapes)
        out = _fresh((n, m))
        for r in range(n):
            for c in range(m):
                _put(out, (r, c), _inner(a[r], b[:, c]))
        return out
    return matrix_matrix


@overload(np.dot)
def _dot(a, b):
    return _product(a, b)


@overload(operator.matmul)
def _matmul(a, b):
    return _product(a, b)


def _active_at(a, k):
    """a[k] as an Active, for an array of Actives or of floats."""


@overload(_active_at)
def _active_at_impl(a, k):
    if _is_active_array(a):
        return lambda a, k: _element(a, k)
    return lambda a, k: constant(float(a[k]))


# ---- allocation (the model's np.zeros and friends, rewritten by jit.py) -------------------

def zeros(shape, dtype=None):
    """np.zeros, of Actives where the dtype is float."""


def empty(shape, dtype=None):
    """np.empty, of Actives where the dtype is float."""


def ones(shape, dtype=None):
    """np.ones, of Actives where the dtype is float."""


def _float_dtype(dtype):
    if dtype is None or isinstance(dtype, types.NoneType) or isinstance(dtype, types.Omitted):
        return True
    target = getattr(dtype, "dtype", dtype)
    if isinstance(target, types.NumberClass):
        target = target.instance_type
    return isinstance(target, types.Float)


def _allocator(stub, fill, numpy_fn):
    @overload(stub)
    def impl(shape, dtype=None):
        if _float_dtype(dtype):
            def alloc(shape, dtype=None):
                return ActiveArray(np.full(shape, fill), np.full(shape, -1, np.int64),
                                   np.zeros(1, np.intp))
            return distinct(alloc, stub.__name__)
        return distinct(lambda shape, dtype=None: numpy_fn(shape, dtype), stub.__name__)


_allocator(zeros, 0.0, np.zeros)
_allocator(empty, math.nan, np.empty)
_allocator(ones, 1.0, np.ones)


def zeros_like(a, dtype=None):
    """np.zeros_like, of Actives where the result is float."""


def empty_like(a, dtype=None):
    """np.empty_like, of Actives where the result is float."""


def ones_like(a, dtype=None):
    """np.ones_like, of Actives where the result is float."""


def _like(stub, fill, numpy_fn):
    @overload(stub)
    def impl(a, dtype=None):
        values = a.field_dict["values"] if _is_active_array(a) else a
        if not isinstance(values, types.Array):
            return None
        if _float_dtype(dtype) and (dtype is not None and not isinstance(
                dtype, (types.NoneType, types.Omitted)) or
                isinstance(values.dtype, types.Float)):
            if _is_active_array(a):
                return distinct(lambda a, dtype=None: ActiveArray(
                    np.full(a.values.shape, fill), np.full(a.values.shape, -1, np.int64),
                    np.zeros(1, np.intp)), stub.__name__, "active", "values")
            return distinct(lambda a, dtype=None: ActiveArray(
                np.full(a.shape, fill), np.full(a.shape, -1, np.int64), np.zeros(1, np.intp)),
                stub.__name__, "array", "values")
        if _is_active_array(a):
            return distinct(lambda a, dtype=None: numpy_fn(a.values, dtype), stub.__name__,
                            "active", "numbers")
        return distinct(lambda a, dtype=None: numpy_fn(a, dtype), stub.__name__, "array",
                        "numbers")


_like(zeros_like, 0.0, np.zeros_like)
_like(empty_like, math.nan, np.empty_like)
_like(ones_like, 1.0, np.ones_like)


def copy(a):
    """``a.copy()``, where a float array becomes one of Actives (constants, until fn
    stores differentiable values in it: ``x = X0.copy(); x[j] = x[j] + k[j]``)."""


@overload(copy)
def _copy_of(a):
    if _is_active_array(a):
        return lambda a: a.copy()
    if isinstance(a, types.Array) and isinstance(a.dtype, types.Float):
        return lambda a: ActiveArray(a.astype(np.float64), np.full(a.shape, -1, np.int64),
                                     np.zeros(1, np.intp))
    return lambda a: a.copy()


def array(obj, dtype=None):
    """np.array, of Actives where obj is a list or tuple of them."""


def _of_actives(obj):
    return isinstance(obj, (types.List, types.UniTuple)) and isinstance(obj.dtype,
                                                                         ActiveType)


@overload(np.array)
def _numpy_array(obj, dtype=None):
    """np.array of a list of Actives, wherever it is written (no allocation to rewrite:
    its elements say what it holds)."""
    if _of_actives(obj):
        return lambda obj, dtype=None: array(obj)
    return None


@overload(array)
def _array(obj, dtype=None):
    if _of_actives(obj):
        def from_actives(obj, dtype=None):
            n = len(obj)
            values, rows, cell = np.empty(n), np.empty(n, np.int64), np.zeros(1, np.intp)
            for k in range(n):
                x = obj[k]
                values[k], rows[k] = x.value, x.row
                if x.row >= 0:
                    cell[0] = x.tape
            return ActiveArray(values, rows, cell)
        return from_actives
    if dtype is None or isinstance(dtype, (types.NoneType, types.Omitted)):
        return lambda obj, dtype=None: np.array(obj)
    return lambda obj, dtype=None: np.array(obj, dtype)


def full(shape, fill_value, dtype=None):
    """np.full, of Actives where the dtype is float (the fill may be one)."""


@overload(full)
def _full(shape, fill_value, dtype=None):
    if not _float_dtype(dtype):
        return lambda shape, fill_value, dtype=None: np.full(shape, fill_value, dtype)
    if isinstance(fill_value, ActiveType):
        def full_active(shape, fill_value, dtype=None):
            cell = np.zeros(1, np.intp)
            if fill_value.row >= 0:
                cell[0] = fill_value.tape
            return ActiveArray(np.full(shape, fill_value.value),
                               np.full(shape, fill_value.row, np.int64), cell)
        return full_active
    return lambda shape, fill_value, dtype=None: ActiveArray(
        np.full(shape, float(fill_value)), np.full(shape, -1, np.int64), np.zeros(1, np.intp))


# ---- the reverse sweep of such a tape --------------------------------------------------------

@cached_njit()
def sweep(ops, values, n, seed_row, adj, reached):
    """The adjoints of every row for the output ``seed_row`` (seed 1), rows n - 1 .. 0,
    only rows the output reaches (a row it does not reach would multiply its zero
    adjoint by inf partials into nan). The op math is the op table's."""
    adj[:n] = 0.0
    reached[:n] = False
    adj[seed_row] = 1.0
    reached[seed_row] = True
    for r in range(seed_row, -1, -1):
        if not reached[r]:
            continue
        op, a, b = ops[r, 0], ops[r, 1], ops[r, 2]
        if a < 0:
            continue
        g = adj[r]
        if op <= UNARY_LAST:
            adj[a] += times(op, g, unary_partial(op, values[a], values[r]))
            reached[a] = True
        else:
            x, y, z = values[a], values[b], values[r]
            adj[a] += times(op, g, binary_partial_x(op, x, y, z))
            adj[b] += times(op, g, binary_partial_y(op, x, y, z))
            reached[a] = True
            reached[b] = True
