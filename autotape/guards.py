"""Guards: the decisions a traced function took from recorded values.

``at.compile`` records f once and then re-evaluates the tape at new inputs. That is
only right if every choice made in Python while recording would come out the same:
a comparison feeding ``where``, the sign mask in abs's second derivative, a float
pulled out with ``.item()`` and used in an ``if``. Each place that reads recorded
values to decide something calls ``observe(fn, *tensors)`` instead of reading them
directly. Outside a trace that is just ``fn(*values)``; inside one it also keeps
``(fn, rows, result, the user's line)``, and the replay recomputes ``fn`` on the new values and
compares: a replay whose decisions would differ is re-traced, never silently wrong.

Reading a recorded tensor's numbers with ``.numpy()``, ``.item()``, ``float()`` and
the like keeps the strictest guard, the values themselves.

Conditions are data, not guards: a comparison of recorded values is also recorded, as
a row of 1.0 / 0.0 that the replay recomputes (ops/elementwise.py, ``compare``), and
where / clip / masks read that row. Its guard is taken but kept only if the result is
read from Python too (``decide`` and ``Pending``).
"""
import contextlib
import dis
import os
import sys
import warnings

import numpy as np

from .thread_state import here


class Traced:
    """The base of autotape.Tensor: what guards read from a tensor (its ``_value``,
    ``_dtype``, ``_tape`` and ``_row``). It lives here so guards sit below Tensor."""
    __slots__ = ()


class Trace:
    """What one compile trace keeps besides its tape: rows of its input leaves and the
    guards (fn, operand rows or constant values, result) taken while recording, and the
    arrays and tensors it read as constants with the values it read."""
    __slots__ = ("tape", "leaf_rows", "guards", "captured")

    def __init__(self, tape):
        self.tape = tape
        self.leaf_rows = {}            # id(leaf tensor) -> its LEAF row
        self.guards = []
        self.captured = []             # (numpy array or Tensor, the value the tape holds)

    def row(self, t):
        """t's row on the traced tape, or None when t is a constant to the trace."""
        if t._tape is self.tape:
            return t._row
        if t._tape is None:
            return self.leaf_rows.get(id(t))
        return None


def current_trace():
    """The Trace this thread is recording, or None."""
    return here().trace


@contextlib.contextmanager
def tracing(trace):
    """Record guards into ``trace`` inside the block (compile.py); per thread."""
    state = here()
    saved, state.trace = state.trace, trace
    try:
        yield trace
    finally:
        state.trace = saved


def observe(fn, *operands):
    """``fn`` applied to the operands' values (Tensors as numpy arrays, anything else
    as given), kept as a guard when a trace is being recorded and an operand is one of
    its recorded values. The result must not depend on anything but the operands."""
    result, pending = decide(fn, *operands)
    if pending is not None:
        pending.keep()
    return result


def decide(fn, *operands):
    """``(fn(values), pending)``: observe's result, its guard not yet kept. ``pending``
    is None outside a trace or when no operand is recorded; else ``pending.keep()``
    keeps the guard, which a decision that ends up read from Python must do (a
    comparison whose result a replay recomputes as a row need not)."""
    values = [_value(v) for v in operands]
    result = fn(*values)
    trace = here().trace
    if trace is not None:
        rows = [trace.row(v) if isinstance(v, Traced) else None for v in operands]
        if any(r is not None for r in rows):
            args = [("row", r) if r is not None else ("value", v)
                    for r, v in zip(rows, values)]
            return result, Pending(trace, (fn, args, np.array(result, copy=True),
                                           caller_line()))
    return result, None


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def caller_line():
    """"file:line" of the innermost frame outside autotape: where the user's f took a
    decision (named in compile's warning about recording again and again)."""
    frame = sys._getframe(1)
    while frame is not None and (os.path.abspath(frame.f_code.co_filename) + os.sep) \
            .startswith(_PACKAGE_DIR + os.sep):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Pending:
    """A guard taken but not yet kept (see ``decide``)."""
    __slots__ = ("trace", "guard")

    def __init__(self, trace, guard):
        self.trace, self.guard = trace, guard

    def keep(self):
        if self.guard is not None:
            self.trace.guards.append(self.guard)
            self.guard = None


def observe_value(t, decision=False):
    """t's value read out of the graph (``.numpy()``, ``.item()``, ``float()``): under
    a trace the guard is the values themselves. Unless the read is a ``decision`` (a
    branch on ``bool(t)``), the user's code now computes with a number autotape cannot
    follow: a warning names the line (autotape's own reads are not warned about)."""
    trace = here().trace
    if trace is not None and trace.row(t) is not None:
        observe(_identity, t)
        if not decision:
            _warn_left_graph()


LEFT_GRAPH_MSG = (
    "at.compile: {what} reads a traced value that depends on the inputs, so from here "
    "on it is a plain number: no gradient flows through it, and the function is "
    "recorded again whenever it changes. Keep the computation in autotape ops (at.exp, "
    "not math.exp) to keep the gradient; to branch, compare the tensor itself "
    "(`if s > 0:`), which records again only when the branch changes.")
_TENSOR_FILE = os.path.join(_PACKAGE_DIR, "tensor.py")


STORED_MSG = (
    "{who}a tensor that requires grad, stored into a numpy array (x[i] = t), leaves only "
    "its number there: the gradient is lost at this line. Build the array with autotape "
    "ops instead (at.stack or at.concatenate of the values, or x = at.zeros(n) and "
    "x[i] = t on a Tensor).{after}")


def _warn_left_graph():
    found = _conversion_site()
    if found is not None:
        _warn_at(STORED_MSG.format(who="at.compile: ", after=" f is also recorded again "
                                   "whenever that number changes.") if _stores(found[0]) else
                 LEFT_GRAPH_MSG.format(what=found[1]), found[0])


SCALAR_MSG = ("Converting a tensor with requires_grad=True to a scalar may lead to "
              "unexpected behavior.\nConsider using tensor.detach() first.")


def warn_scalar_conversion():
    """torch's warning for ``float(t)`` of a tensor that requires grad (eager: the
    number carries no gradient), at the user's line; one that says the gradient is lost
    where the number is being stored into an array. Not while a compiled function's
    call runs f eagerly: its recording warned already (LEFT_GRAPH_MSG)."""
    if here().eager_call:
        return
    found = _conversion_site()
    if found is not None:
        _warn_at(STORED_MSG.format(who="", after="") if _stores(found[0]) else SCALAR_MSG,
                 found[0])


_STORE_SUBSCR = dis.opmap["STORE_SUBSCR"]


def _stores(frame):
    """Whether the user's line is at a store into an element (``x[i] = t``: numpy
    converts t with float())."""
    code, at = frame.f_code.co_code, frame.f_lasti
    return 0 <= at < len(code) and code[at] == _STORE_SUBSCR


def _conversion_site():
    """(the user's frame, what it called) for a value read out of a Tensor, or None
    when autotape itself read it, or ``detach`` / ``data`` cut the graph on purpose."""
    frame = sys._getframe(3)
    what = "a conversion"
    while frame is not None and os.path.abspath(frame.f_code.co_filename) == _TENSOR_FILE:
        name = frame.f_code.co_name
        if name in ("detach", "data"):
            return None
        what = {"__float__": "float()", "__int__": "int()", "__index__": "an index",
                "item": ".item()", "numpy": ".numpy()", "tolist": ".tolist()",
                "__repr__": "str() or repr()", "__format__": "format()"}.get(
                    name, what)
        frame = frame.f_back
    if frame is None or (os.path.abspath(frame.f_code.co_filename) + os.sep).startswith(
            _PACKAGE_DIR + os.sep):
        return None
    return frame, what


def _warn_at(message, frame):
    warnings.warn_explicit(message, UserWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__", ""),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))


def _identity(v):
    return v


def _value(v):
    if isinstance(v, Traced):
        x = v._value
        return np.array(x, v._dtype) if type(x) is float else x
    return v


def same(result, expected):
    """Whether a guard's recomputed result equals the traced one: floats bit for bit
    (0.0 and -0.0 differ, as a later copysign or 1 / x tells; a NaN equals a NaN)."""
    a, b = np.asarray(result), expected
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        if not np.array_equal(a, b, equal_nan=True):
            return False
        return bool(np.array_equal(np.signbit(a[a == 0]), np.signbit(b[b == 0])))
    return bool(np.array_equal(a, b))
