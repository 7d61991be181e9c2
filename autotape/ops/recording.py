"""What every op family's recorders share: which tape an op goes to, the row that holds
an operand there, and ``record``, which turns a value the caller computed with numpy
into a Tensor and, when grad mode is on and an operand requires grad, writes its row.

Each family's module (elementwise, reduce, indexing, linalg) computes its values with
Python floats (0-d) or numpy and records through these. The 0-d elementwise paths are
the hot path of scalar code and are written for speed; the rest favour clarity.
"""
import weakref

import numpy as np

from ..tape import open_tape
from ..tape_format import NO_ROW
from ..tensor import (F32, F64, Tensor, canonical, handed_out, new_leaf, new_result,
                      round_f32, tape_value)
from ..thread_state import here


def row_of(t, tape):
    """The row that holds operand ``t`` on ``tape`` (adding one if needed): a Tensor, a
    Python number or a numpy array (both constants)."""
    if type(t) is not Tensor:
        if type(t) is np.ndarray:
            return _const_array(tape, t, t)
        return tape.const(float(t), ())
    if t._tape is tape:
        return t._row
    if t._tape is None and not t._requires_grad:
        v = t._value
        if type(v) is float:
            trace = here().trace
            if trace is not None:
                trace.captured.append((t, v))
            return tape.const(v, ())
        return _const_array(tape, v, t)
    redirect = here().redirect          # (checkpoint: a variable read from outside)
    if redirect is not None:
        other = redirect(t)
        if other is not t:
            return row_of(other, tape)
    if t._tape is None:
        cache = t._cache
        if cache is not None and cache[0]() is tape:
            return cache[1]
        row = tape.leaf(t, tape_value(t._value))
        t._cache = (weakref.ref(tape), row)
        return row
    return tape.import_row(t, tape_value(t._value))


def _const_array(tape, v, source):
    """A constant array's row, holding a value nothing can write: the array itself when
    it is read-only, or is a tensor's own value that was never handed out (frozen then:
    a later in-place update of its tensor copies first, see tensor_methods.py); else a
    copy (a user's array, or one that ``numpy()`` handed out, may be written through
    any view of it). One row per tape however often it is used, while it is unchanged.
    Inside a compile trace ``source`` (the array or tensor read) is kept with the
    value, so a call after it changed records again (compile.py)."""
    if v.dtype == F64 and v.flags.c_contiguous and v.flags.owndata and (
            not v.flags.writeable or (type(source) is Tensor and not handed_out(v))):
        v.flags.writeable = False
        row, value = tape.const_array(v), v
    else:
        row, value = tape.const_copy(v)
    trace = here().trace
    if trace is not None:
        trace.captured.append((source, value))
    return row


def tape_for(*operands):
    """The tape of a non-leaf operand that this thread is recording on, else this
    thread's open tape."""
    state = here()
    for t in operands:
        if type(t) is Tensor and t._tape is not None and t._tape.owner is state:
            return t._tape
    return open_tape()


def recording(*operands):
    """Whether an op on these operands is recorded: grad mode is on and one of them
    requires grad."""
    if not here().grad_enabled:
        return False
    for t in operands:
        if type(t) is Tensor and (t._tape is not None or t._requires_grad):
            return True
    return False


def record(code, value, x, y=None, params=None, depends=None):
    """``value`` (the op's result, as numpy computed it) as a Tensor; recorded as one
    row with opcode ``code`` and operands x (and y) when it is a float and
    ``recording(x, y, depends)``. Operands are Tensors, numbers or arrays. ``params``:
    the row's int parameters (a tape_format layout), or a function ``tape -> params``
    for parameters that name rows made on the tape (a saved value, a condition);
    ``depends``: a recorded tensor such a parameter names (a condition row)."""
    if y is None and depends is None and type(x) is Tensor and type(value) is np.ndarray \
            and value.dtype is F64 and value.ndim and value.flags.c_contiguous:
        return _record_one(code, value, x, params)    # the common case, inlined
    z, shape, dtype = canonical(value)
    if dtype.kind != "f" or not recording(x, y, depends):
        return new_leaf(z, shape, dtype)
    tape = tape_for(x, y, depends)
    a = row_of(x, tape)
    b = NO_ROW if y is None else row_of(y, tape)
    if params is not None and callable(params):
        params = params(tape)
    row = tape.push(code, a, b, shape, tape.add_params(params) if params else NO_ROW,
                    tape_value(z))
    return new_result(z, shape, dtype, tape, row)


def record_element(code, x, k):
    """Element k of a float64 vector x that ``recording(x)``, as a 0-d result: record()
    of numpy's view with parameters (k,) (a strided view's offset), in fewer steps (a
    scalar model reads its parameters, ``p[2]``, at every step: 7 us each through
    getitem's general steps, half of its calls' forward on the eager tier)."""
    value = float(x._value[k])
    tape = tape_for(x)
    row = tape.push(code, row_of(x, tape), NO_ROW, (), tape.add_params((k,)), value)
    return new_result(value, (), F64, tape, row)


def _record_one(code, z, x, params):
    """record() of a fresh C-contiguous float64 array from one Tensor operand (views,
    reshapes, unary ops): the same steps with fewer calls."""
    state = here()
    if not state.grad_enabled or (x._tape is None and not x._requires_grad):
        return new_leaf(z, z.shape, F64)
    tape = x._tape
    if tape is not None and tape.owner is state:
        a = x._row
    else:
        tape = open_tape()
        a = row_of(x, tape)
    if params is not None and callable(params):
        params = params(tape)
    row = tape.push(code, a, NO_ROW, z.shape, tape.add_params(params) if params else NO_ROW,
                    z.reshape(-1))
    return new_result(z, z.shape, F64, tape, row)


def record_listed(code, value, operands, params_of_rows):
    """``record`` for an op whose operands are listed in its parameters (CONCAT: any
    number of them): ``params_of_rows(operand rows)`` gives the parameters."""
    z, shape, dtype = canonical(value)
    if dtype.kind != "f" or not recording(*operands):
        return new_leaf(z, shape, dtype)
    tape = tape_for(*operands)
    params = params_of_rows([row_of(t, tape) for t in operands])
    row = tape.push(code, NO_ROW, NO_ROW, shape, tape.add_params(params), tape_value(z))
    return new_result(z, shape, dtype, tape, row)


def cast_result(t, dtype):
    """t's value cast to ``dtype``, in t's place on the graph."""
    v = t._value
    v = (round_f32(v) if dtype == F32 else float(v)) if type(v) is float else v.astype(dtype)
    if t._tape is None:
        return new_leaf(v, t._shape, dtype)
    return new_result(v, t._shape, dtype, t._tape, t._row)
