"""The op table's create_graph rules run on numbers: numpy arrays in, numpy arrays out.

A rule takes an ops namespace ``at``, the adjoint ``g`` and a row view ``r`` (its
operands ``r.x``, ``r.y``, output ``r.z``, parameters). Given tensors and autotape's
ops, what it computes is recorded, so that create_graph can differentiate it again.
The Python tier (the sweep while its kernel compiles, engine.py) needs only the
numbers, and through tensors an array row cost ~15 us: a tensor per operand, per
partial result and per op of the rule, each op a recorder's call. Given ``NUMBERS``
(numpy's functions, each elementwise op's own array forward) and a row whose values
read as numpy arrays (``NumberRow``), the same rule computes the same numbers without
them: each derivative stays written once, in the op table.

The rules of ``ON_NUMBERS`` run so: written with ``at``'s functions, arithmetic and
the row's values alone (tests/test_python_tier.py runs each on both and compares).
The others keep tensors: pow's shortcut for a constant exponent asks whether it
requires grad, the max / min / prod rules observe tensors for ties and zeros, linalg's
rules are written with autotape.linalg's functions, and a custom op's VJP is the user's
code.
"""
import types

import numpy as np

from .opcodes import (CONCAT, CUMSUM, MAXIMUM, MEAN, MINIMUM, POW, PUT_ADD, RESHAPE, SCATTER,
                      SEARCHSORTED, SETITEM, STRIDED, SUM, TAKE, WHERE)
from .ops.elementwise import binary_ops, unary_ops
from .ops.indexing import gathered, put_added, scattered, taken
from .tape_format import where_condition
from .tensor import F64, Tensor, array_of

ON_NUMBERS = frozenset(
    [*unary_ops, *(code for code in binary_ops if code not in (POW, MAXIMUM, MINIMUM)),
     WHERE, RESHAPE, STRIDED, SCATTER, SETITEM, CONCAT, TAKE, PUT_ADD, SEARCHSORTED,
     SUM, MEAN, CUMSUM])


def _array_forward(op):
    return lambda *args: op.array(*(np.asarray(a, F64) for a in args))


NUMBERS = types.SimpleNamespace(
    **{op.name: _array_forward(op) for op in [*unary_ops.values(), *binary_ops.values()]},
    where=np.where, zeros=np.zeros, ones=np.ones, broadcast_to=np.broadcast_to,
    flip=np.flip, cumsum=np.cumsum, gather=gathered, scatter=scattered, put_add=put_added,
    take_flat=taken)


def read_number(tape, row):
    """A row's value as numpy: a view of its array, or a float64 scalar (0-d).

    >>> import autotape as at
    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> y = x * 3.0
    >>> read_number(y._tape, y._row)
    array([3., 6.])
    """
    _, _, value = tape.read(row)
    return np.float64(value) if type(value) is float else value


def as_number(g):
    """An adjoint (a float, a tensor, numpy) as numpy: float64, a scalar when 0-d.

    >>> as_number(2.0).shape
    ()
    """
    if isinstance(g, Tensor):
        g = array_of(g)
    g = np.asarray(g, F64)
    return g if g.ndim else np.float64(g)


class NumberRow:
    """One tape row as a rule sees it: operands and output (``x``, ``y``, ``z``,
    ``value(k)``) as ``read(tape, row)`` gives them (numpy values here; graph_backward's
    RowView: recorded tensors), int parameters, output shape. ``decoded``: the row's
    (op, operands, params, shape), where the caller has them."""

    __slots__ = ("tape", "i", "op", "operands", "params", "shape", "read")

    def __init__(self, tape, i, read=read_number, decoded=None):
        self.tape, self.i, self.read = tape, i, read
        self.op, self.operands, self.params, self.shape = decoded or tape.row(i)

    def value(self, k):
        return self.read(self.tape, self.operands[k])

    @property
    def x(self):
        return self.value(0)

    @property
    def y(self):
        return self.value(1)

    @property
    def z(self):
        return self.read(self.tape, self.i)

    @property
    def cond(self):
        assert self.op == WHERE
        return self.read(self.tape, int(where_condition(self.params, 0))) != 0
