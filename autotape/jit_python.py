"""at.jit's recording run by Python, for the calls that come before numba has compiled it.

``at.jit`` compiles fn a second time for differentiable values (jit.py, with the types
of kernels/active.py): seconds of numba on a function's first call on a machine. Until
a helper process has compiled that recorder into the disk cache, a call runs the same
transformed source in Python instead, with the values here standing in for active.py's:

- ``Active`` (value, row, tape) and ``ActiveArray`` (values, rows, a cell holding the
  tape, shared by an array and its views) behave as active.py's types do: the same
  functions recorded, with the same opcodes (active.py's tables), the op table's value
  functions (elementwise.py), constants written to the tape where they first meet a
  recorded value, comparisons on recorded values counted as decisions, and the same
  refusals (``float(x)``, ``bool(x)``, ``math.floor(x)``). So a recording has the rows
  the compiled recorder writes, in the same order, and the lean program made from it is
  the same program.
- Values are numpy float64 scalars: a division by zero gives inf and a power of a
  negative number nan, as compiled code does, where Python's floats raise. A
  nan may have the other sign bit (numpy's power against the C library's pow); every
  other value has the compiled recorder's bits (kernels/libm.py).
- What this cannot run as numba would (an op numba refuses, Python's own integer or
  float32 rules) raises here, and the call waits for the compiled recorder instead,
  which records it or says why it cannot. Recordings longer than ``PYTHON_ROWS_MAX``
  stop and wait too: Python records ~1 M rows in a few seconds, about what compiling
  takes.
"""
import math
import operator

import numpy as np

from .kernels import active
from .kernels.elementwise import binary_value, unary_value
from .opcodes import ADD, CONST, DIV, LEAF, MUL
from .tuning import PYTHON_ROWS_MAX



class TooLong(RuntimeError):
    """A recording in Python passed PYTHON_ROWS_MAX rows (the compiled recorder takes
    over)."""


class Tape:
    """Rows (op, a, b) and values, as the compiled recorder's buffers hold them."""
    __slots__ = ("ops", "values", "decisions")

    def __init__(self):
        self.ops, self.values, self.decisions = [], [], 0

    def push(self, op, a, b, value):
        row = len(self.values)
        if row >= PYTHON_ROWS_MAX:
            raise TooLong(row)
        self.ops += (op, a, b)
        self.values.append(value)
        return Active(value, row, self)


class Active:
    """A differentiable float: its value, its row (-1: a constant on no tape), its tape."""
    __slots__ = ("value", "row", "tape")

    def __init__(self, value, row, tape):
        self.value, self.row, self.tape = value, row, tape

    def __repr__(self):
        return f"Active({self.value!r}, row={self.row})"

    @property
    def real(self):
        return self

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _ufunc(ufunc, method, inputs, kwargs)

    def __pos__(self):
        return self

    def __bool__(self):
        raise TypeError(active.REFUSED[bool])

    def __float__(self):
        raise TypeError(active.REFUSED[float])

    def __int__(self):
        raise TypeError(active.REFUSED[int])

    __index__ = __trunc__ = __int__

    def __floor__(self):
        raise TypeError(active.REFUSED[math.floor])

    def __ceil__(self):
        raise TypeError(active.REFUSED[math.ceil])

    __hash__ = None


def constant(value):
    return Active(np.float64(value), -1, None)


def _is_number(x):
    return isinstance(x, (int, float, np.integer, np.floating, np.bool_))


def _as_active(x):
    """x as an Active (a number becomes a constant), or None. (numpy hands a numpy
    scalar meeting an Active to ``__array_ufunc__`` as a 0-d array.)"""
    if isinstance(x, Active):
        return x
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "biuf":
        x = x[()]
    return constant(x) if _is_number(x) else None


def _row_of(tape, x):
    return x.row if x.row >= 0 else tape.push(CONST, -1, -1, x.value).row


def unary(op, x):
    z = np.float64(unary_value(op, x.value))
    if x.row < 0:
        return Active(z, -1, x.tape)
    return x.tape.push(op, x.row, -1, z)


def binary(op, x, y):
    z = np.float64(binary_value(op, x.value, y.value))
    if x.row < 0 and y.row < 0:
        return Active(z, -1, x.tape if x.tape is not None else y.tape)
    tape = x.tape if x.row >= 0 else y.tape
    a = _row_of(tape, x)
    return tape.push(op, a, _row_of(tape, y), z)


def _scalar_binary(op, x, y):
    """op(x, y) where one is an Active and the other an Active or a number; else
    NotImplemented (as active.py's overloads type nothing else)."""
    ax, ay = _as_active(x), _as_active(y)
    if ax is None or ay is None:
        return NotImplemented
    return binary(op, ax, ay)


def _compare(fn, x, y):
    ax, ay = _as_active(x), _as_active(y)
    if ax is None or ay is None:
        return NotImplemented
    tape = ax.tape if ax.row >= 0 else (ay.tape if ay.row >= 0 else None)
    if tape is not None:
        tape.decisions += 1
    return bool(fn(ax.value, ay.value))


_OPERATORS = [("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
              ("truediv", operator.truediv), ("pow", operator.pow)]


def _install_binary(cls, table, combine):
    """x + y and its peers (and y + x) on ``cls``: ``combine(opcode, x, y)``, the opcode
    from one of active.py's tables."""
    ops = dict(table)
    for name, fn in _OPERATORS:
        setattr(cls, f"__{name}__", lambda x, y, op=ops[fn]: combine(op, x, y))
        setattr(cls, f"__r{name}__", lambda y, x, op=ops[fn]: combine(op, x, y))


def _install_operators():
    _install_binary(Active, active.BINARY_FUNCTIONS, _scalar_binary)
    for fn, op in active.UNARY_FUNCTIONS:
        if fn is operator.neg:
            Active.__neg__ = lambda x, op=op: unary(op, x)
        elif fn is abs:
            Active.__abs__ = lambda x, op=op: unary(op, x)
    for fn in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq,
               operator.ne):
        setattr(Active, f"__{fn.__name__}__", lambda x, y, fn=fn: _compare(fn, x, y))


_install_operators()


# ---- arrays of Actives ------------------------------------------------------------------

class ActiveArray:
    """An array of Actives: values, rows (-1: a constant) and a one-element cell holding
    the tape (None while it holds constants only), shared with its views."""
    __slots__ = ("values", "rows", "cell")

    def __init__(self, values, rows, cell):
        self.values, self.rows, self.cell = values, rows, cell

    def __repr__(self):
        return f"ActiveArray({self.values!r})"

    shape = property(lambda a: a.values.shape)
    size = property(lambda a: a.values.size)
    ndim = property(lambda a: a.values.ndim)

    def __len__(self):
        return len(self.values)

    def __iter__(self):
        raise TypeError("at.jit: iterating over an array of differentiable values")

    def copy(self):
        return ActiveArray(self.values.copy(), self.rows.copy(), list(self.cell))

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return ActiveArray(self.values.reshape(shape), self.rows.reshape(shape), self.cell)

    def _is_element(self, index):
        if isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_)):
            return self.values.ndim == 1
        return isinstance(index, tuple) and len(index) == self.values.ndim and all(
            isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))
            for i in index)

    def __getitem__(self, index):
        if isinstance(index, Active):
            raise TypeError("at.jit: an index must be an integer, not a differentiable value")
        if self._is_element(index):
            return Active(self.values[index], int(self.rows[index]), self.cell[0])
        return ActiveArray(self.values[index], self.rows[index], self.cell)

    def __setitem__(self, index, value):
        if isinstance(value, Active):
            self.values[index] = value.value
            self.rows[index] = value.row
            if value.row >= 0:
                self.cell[0] = value.tape
        elif _is_number(value):
            self.values[index] = value
            self.rows[index] = -1
        elif isinstance(value, ActiveArray):
            self.values[index] = value.values
            self.rows[index] = value.rows
            if value.cell[0] is not None:
                self.cell[0] = value.cell[0]
        else:
            raise TypeError(f"at.jit: cannot store {type(value).__name__} in an array of "
                            "differentiable values")

    def sum(self):
        return _total(self)

    def mean(self):
        return binary(DIV, _total(self), constant(float(self.values.size)))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if kwargs or func not in _ARRAY_FUNCTIONS or len(args) != (2 if func is np.dot
                                                                   else 1):
            return NotImplemented
        return _ARRAY_FUNCTIONS[func](*args)


def _element(a, index):
    return Active(a.values[index], int(a.rows[index]), a.cell[0])


def _put(a, index, x):
    a.values[index] = x.value
    a.rows[index] = x.row
    if x.row >= 0:
        a.cell[0] = x.tape


def _fresh(shape):
    return ActiveArray(np.empty(shape), np.full(shape, -1, np.int64), [None])


def _same_shape(x, y):
    if x.values.shape != y.values.shape:
        raise ValueError("at.jit: arrays of differentiable values combine elementwise "
                         "only at the same shape (or with a scalar)")


def _array_binary(op, x, y, out=None):
    """op elementwise, one row per element in C order (as active.py's loops); into x
    when ``out`` is x (an in-place update)."""
    ax, ay = isinstance(x, ActiveArray), isinstance(y, ActiveArray)
    if ax and ay:
        _same_shape(x, y)
    elif not (ax or ay):
        return NotImplemented
    else:
        scalar = _as_active(y if ax else x)
        if scalar is None:
            return NotImplemented
        x, y = (x, scalar) if ax else (scalar, y)
    shape = (x if ax else y).values.shape
    out = _fresh(shape) if out is None else out
    for index in np.ndindex(shape):
        _put(out, index, binary(op, _element(x, index) if ax else x,
                                _element(y, index) if ay else y))
    return out


def _array_unary(op, a):
    out = _fresh(a.values.shape)
    for index in np.ndindex(a.values.shape):
        _put(out, index, unary(op, _element(a, index)))
    return out


def _total(a):
    s = constant(0.0)
    first = True
    for index in np.ndindex(a.values.shape):
        s = _element(a, index) if first else binary(ADD, s, _element(a, index))
        first = False
    return s


def _active_at(a, k):
    return _element(a, k) if isinstance(a, ActiveArray) else constant(float(a[k]))


def _dot(a, b):
    if not all(isinstance(t, ActiveArray) or (isinstance(t, np.ndarray) and t.ndim == 1)
               for t in (a, b)):
        return NotImplemented
    if len(a) != len(b):
        raise ValueError("at.jit: np.dot of arrays of different lengths")
    s = constant(0.0)
    for k in range(len(a)):
        s = binary(ADD, s, binary(MUL, _active_at(a, k), _active_at(b, k)))
    return s


_ARRAY_FUNCTIONS = {np.sum: _total, np.dot: _dot,
                    np.mean: lambda a: binary(DIV, _total(a), constant(float(a.values.size)))}


def _install_array_operators():
    _install_binary(ActiveArray, active.ARRAY_BINARY_FUNCTIONS, _array_binary)
    ops = dict(active.ARRAY_BINARY_FUNCTIONS)
    for name, fn in [("iadd", operator.add), ("isub", operator.sub), ("imul", operator.mul),
                     ("itruediv", operator.truediv)]:
        setattr(ActiveArray, f"__{name}__",
                lambda x, y, op=ops[fn]: _array_binary(op, x, y, out=x)
                if isinstance(y, ActiveArray) or _as_active(y) is not None else NotImplemented)
    ActiveArray.__neg__ = lambda a: _array_unary(dict(active.UNARY_FUNCTIONS)[operator.neg], a)


_install_array_operators()


# numpy's ufuncs on Actives and their arrays: the ones active.py overloads
_UFUNC_UNARY = {fn: op for fn, op in active.UNARY_FUNCTIONS if isinstance(fn, np.ufunc)}
_UFUNC_BINARY = {fn: op for fn, op in active.BINARY_FUNCTIONS if isinstance(fn, np.ufunc)}
_UFUNC_ARRAY_BINARY = {fn: op for fn, op in active.ARRAY_BINARY_FUNCTIONS
                       if isinstance(fn, np.ufunc)}


_UFUNC_COMPARE = {np.less: operator.lt, np.less_equal: operator.le, np.greater: operator.gt,
                  np.greater_equal: operator.ge, np.equal: operator.eq,
                  np.not_equal: operator.ne}   # (a numpy float meeting an Active: x[i] < y)


def _ufunc(ufunc, method, inputs, kwargs):
    if method != "__call__" or kwargs:
        return NotImplemented
    arrays = any(isinstance(x, ActiveArray) for x in inputs)
    if not arrays and len(inputs) == 2 and ufunc in _UFUNC_COMPARE:
        return _compare(_UFUNC_COMPARE[ufunc], *inputs)
    if len(inputs) == 1 and ufunc in _UFUNC_UNARY:
        x = inputs[0]
        return _array_unary(_UFUNC_UNARY[ufunc], x) if arrays else unary(_UFUNC_UNARY[ufunc], x)
    if len(inputs) == 2:
        if arrays and ufunc in _UFUNC_ARRAY_BINARY:
            return _array_binary(_UFUNC_ARRAY_BINARY[ufunc], *inputs)
        if not arrays and ufunc in _UFUNC_BINARY:
            return _scalar_binary(_UFUNC_BINARY[ufunc], *inputs)
    return NotImplemented


# ---- the functions fn's namespace names, in Python mode ------------------------------------

def _scalar_function(fn, op, arity):
    """math.<fn> (or max / min) that records on Actives and is itself on numbers."""
    if arity == 1:
        def python(x):
            return unary(op, x) if isinstance(x, Active) else fn(x)
    else:
        def python(*args, **kwargs):
            if len(args) == 2 and not kwargs and any(isinstance(a, Active) for a in args):
                result = _scalar_binary(op, *args)
                if result is not NotImplemented:
                    return result
            return fn(*args, **kwargs)
    python.__name__ = getattr(fn, "__name__", "fn")
    return python


def _refusing(fn, why):
    def python(*args, **kwargs):
        if any(isinstance(a, (Active, ActiveArray)) for a in args):
            raise TypeError(why)
        return fn(*args, **kwargs)
    return python


FUNCTIONS = {}           # a function fn's source may name -> what it is in Python mode
for _fn, _op in active.UNARY_FUNCTIONS:
    if getattr(_fn, "__module__", None) == "math":
        FUNCTIONS[_fn] = _scalar_function(_fn, _op, 1)
for _fn, _op in active.BINARY_FUNCTIONS:
    if getattr(_fn, "__module__", None) == "math" or _fn in (max, min):
        FUNCTIONS[_fn] = _scalar_function(_fn, _op, 2)
for _fn, _why in active.REFUSED.items():
    if _fn not in (float, int, bool):        # (these call Active's own refusing methods)
        FUNCTIONS[_fn] = _refusing(_fn, _why)


class _Math:
    """The ``math`` module as fn sees it in Python mode."""

    def __getattr__(self, name):
        fn = getattr(math, name)
        return FUNCTIONS.get(fn, fn)


MATH = _Math()
BUILTINS = {"max": FUNCTIONS[max], "min": FUNCTIONS[min]}


# ---- allocation (the stand-ins of active.py's, which jit.py's rewrite calls) -----------------

def _float_dtype(dtype):
    return dtype is None or np.dtype(dtype).kind == "f"


def _allocator(fill, numpy_fn):
    def alloc(shape, dtype=None):
        if _float_dtype(dtype):
            return ActiveArray(np.full(shape, fill), np.full(shape, -1, np.int64), [None])
        return numpy_fn(shape, dtype)
    return alloc


def _like(fill, numpy_fn):
    def alloc(a, dtype=None):
        values = a.values if isinstance(a, ActiveArray) else a
        if not isinstance(values, np.ndarray):
            raise TypeError(f"at.jit: {numpy_fn.__name__} of {type(a).__name__}")
        if _float_dtype(dtype) and (dtype is not None or values.dtype.kind == "f"):
            return ActiveArray(np.full(values.shape, fill),
                               np.full(values.shape, -1, np.int64), [None])
        return numpy_fn(values, dtype)
    return alloc


def _copy(a):
    if isinstance(a, ActiveArray):
        return a.copy()
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return ActiveArray(a.astype(np.float64), np.full(a.shape, -1, np.int64), [None])
    return a.copy()


def _array(obj, dtype=None):
    if isinstance(obj, (list, tuple)) and any(isinstance(x, Active) for x in obj):
        elements = [_as_active(x) for x in obj]
        if any(x is None for x in elements):
            raise TypeError("at.jit: np.array of differentiable values and other things")
        values = np.array([x.value for x in elements], np.float64)
        rows = np.array([x.row for x in elements], np.int64)
        cell = [next((x.tape for x in elements if x.row >= 0), None)]
        return ActiveArray(values, rows, cell)
    return np.array(obj) if dtype is None else np.array(obj, dtype)


def _full(shape, fill_value, dtype=None):
    if not _float_dtype(dtype):
        return np.full(shape, fill_value, dtype)
    if isinstance(fill_value, Active):
        return ActiveArray(np.full(shape, fill_value.value),
                           np.full(shape, fill_value.row, np.int64),
                           [fill_value.tape if fill_value.row >= 0 else None])
    if isinstance(fill_value, ActiveArray):
        raise TypeError("at.jit: np.full's fill must be a number")
    return ActiveArray(np.full(shape, float(fill_value)), np.full(shape, -1, np.int64), [None])


STAND_INS = {active.zeros: _allocator(0.0, np.zeros), active.empty: _allocator(math.nan, np.empty),
             active.ones: _allocator(1.0, np.ones), active.zeros_like: _like(0.0, np.zeros_like),
             active.empty_like: _like(math.nan, np.empty_like),
             active.ones_like: _like(1.0, np.ones_like), active.full: _full,
             active.array: _array, active.copy: _copy}


def namespace(names, compiled_to_python):
    """fn's namespace for Python mode: its ``math``, math functions, allocators and the
    njit functions it calls (``compiled_to_python``: the Python mode of a transformed
    callee, by the callee's compiled function) replaced by the stand-ins above."""
    out = dict(names)
    for name, value in names.items():
        if value is math:
            out[name] = MATH
        elif callable(value):
            try:
                stand_in = STAND_INS.get(value) or FUNCTIONS.get(value)
            except TypeError:                    # (unhashable)
                stand_in = None
            if stand_in is None and name.startswith("__autotape_call_"):
                stand_in = compiled_to_python(value)
            if stand_in is not None:
                out[name] = stand_in
    for name, stand_in in BUILTINS.items():
        out.setdefault(name, stand_in)
    return out


# ---- a recording ---------------------------------------------------------------------------

def record(user, inputs, ndims):
    """user (fn in Python mode) recorded at ``inputs`` (``ndims``: per argument, None for
    data): (output values, their rows, (ops (n, 3), values, n), output shape,
    decisions), as jit.py's compiled recorder returns them."""
    tape = Tape()
    args = []
    for x, nd in zip(inputs, ndims):
        if nd is None:
            args.append(x)
        elif nd == 0:
            args.append(tape.push(LEAF, -1, -1, np.float64(x)))
        else:
            rows = np.array([tape.push(LEAF, -1, -1, v).row for v in x.reshape(-1)],
                            np.int64).reshape(x.shape)
            args.append(ActiveArray(x.copy(), rows, [tape]))
    with np.errstate(all="ignore"):
        values, rows, shape = _output(user(*args))
    n = len(tape.values)
    ops = np.array(tape.ops, np.int64).reshape(n, 3)
    return values, rows, (ops, np.array(tape.values, np.float64), n), shape, tape.decisions


def _output(out):
    if isinstance(out, Active):
        return np.full(1, out.value), np.full(1, out.row), ()
    if isinstance(out, ActiveArray):
        return (out.values.reshape(-1).copy(), out.rows.reshape(-1).copy(),
                out.values.shape)
    if isinstance(out, (int, float, np.integer, np.floating)) and \
            not isinstance(out, (bool, np.bool_)):
        return np.full(1, float(out)), np.full(1, -1), ()
    if isinstance(out, np.ndarray) and out.dtype.kind == "f":
        return (out.reshape(-1).astype(np.float64), np.full(out.size, -1, np.int64),
                out.shape)
    raise TypeError(f"at.jit: the function must return a float or a float array, not "
                    f"{type(out).__name__}")

