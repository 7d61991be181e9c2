"""One recording of a compiled function, and what runs it on the tape.

``Recording`` is f recorded at one set of argument shapes: its tape (closed, never
written again), input rows, outputs, guards and, where it lowers, its lean program.
Here: the arguments as arrays (``call_arguments``), a recording's outputs as targets,
its replay at new arguments with the guards checked (``replay``), and the tape path's
sweeps (``sweep_replayed``, ``tape_jacobian``). compile.py decides which runs a call.

>>> [a.shape for a in call_arguments([np.ones(3), 2.0])]
[(3,), ()]
"""
import itertools
import math
import sys

import numpy as np

from . import engine, guards
from .errstate import ignore_fp_errors
from .executor import NO_ROWS
from .opcodes import BINARY_LAST, CONST, CUSTOM, MEAN, SUM, UNARY_FIRST, opcode_name
from .ops.elementwise import forward_values
from .ops.indexing import reshape
from .ops.linalg import values_of
from .ops.reduce import reduction_values
from .tape import same_bits
from .tape_format import OP, reduced_axes, saved_row
from .grad_mode import is_grad_enabled
from .tensor import F32, F64, Tensor, new_leaf


class Recording:
    """One recording of f: the tape (closed to new rows, never written again), its input
    rows, its outputs (rows, or constants) and the guards taken while recording. A call
    replays into a twin of the tape (the same rows, values of its own) taken from
    ``twins`` and put back after: concurrent calls each have their own, and a thread's
    next call reuses one."""
    __slots__ = ("tape", "twins", "executor", "inputs", "input_rows", "shapes", "sizes",
                 "fused", "total_in", "outputs", "rebuild", "guards", "grads", "plans",
                 "lean", "wide", "captured", "pending", "dtype", "tape_path", "calls")

    def acquire(self):
        try:
            return self.twins.pop()            # (list.pop and append are atomic)
        except IndexError:
            return self.tape.twin()

    def release(self, tape):
        self.twins.append(tape)


def row_value(tape, row):
    """A tape row's value as an array (a 0-d one for a number)."""
    return np.asarray(tape.value(row))


def call_arguments(args, example=False):
    """The arguments as float64 arrays, or float32 ones when every float array among
    them is float32 (a float32 program). A call's argument that requires grad is refused
    (grad mode on): a compiled function is not a differentiable op, and its result would
    silently not depend on it."""
    out, f32 = [], 0
    for k, a in enumerate(args):
        if type(a) is np.ndarray and a.dtype == F64 and a.flags.c_contiguous:
            out.append(a)                      # the common case, as is
            continue
        if isinstance(a, Tensor):
            if not example and a.requires_grad and is_grad_enabled():
                raise TypeError(
                    f"compile: argument {k} requires grad, but a compiled function is not "
                    "a differentiable op: its result would not depend on the argument. Take "
                    "derivatives with .grad / .jacobian / .hessian, pass a .detach()ed "
                    "value, or call f itself to record it")
            a = a._value
        elif isinstance(a, (list, tuple)):        # (as numpy and autotape.func take them)
            a = np.asarray(a)
        if isinstance(a, (bool, np.bool_)) or not isinstance(
                a, (int, float, np.number, np.ndarray)):
            raise TypeError(f"compile: argument {k} must be a float array, a number or a "
                            f"Tensor, but got {type(a).__name__}")
        a = np.asarray(a)
        if a.dtype.kind not in "iuf" or a.dtype == np.float16:
            raise TypeError(f"compile: argument {k} has dtype {a.dtype}; compiled "
                            "functions take float64 or float32 (or integer) arguments")
        f32 += a.dtype == F32
        out.append(a)
    if not out:
        raise TypeError("compile: f needs at least one argument to replay at")
    dtype = F32 if f32 and all(a.dtype == F32 or a.dtype.kind in "iu" for a in out) else F64
    return [a if a.dtype == dtype and a.flags.c_contiguous and type(a) is np.ndarray
            else np.array(a, dtype, order="C") for a in out]   # (not ascontiguousarray:


def output_of(t, leaves, zeros_like=None):
    """An output of the recording: on the tape, or a constant (an output that is an
    argument itself is recorded as a reshape of it, so that it has a row)."""
    dtype = leaves[0].dtype
    if t is None:
        return np.zeros(zeros_like.shape)
    if isinstance(t, Tensor):
        if t.dtype != dtype:
            raise TypeError(f"compile: f returned a {t.dtype} Tensor from {dtype} "
                            f"arguments; a compiled function computes in its arguments' "
                            "float dtype")
        if any(t is leaf for leaf in leaves):
            return reshape(t, t.shape)
        return t if t._tape is not None else np.array(t._value, F64)
    a = np.asarray(t)
    if a.dtype.kind != "f":
        raise TypeError(f"compile: f must return float Tensors or arrays, but returned "
                        f"{type(t).__name__}")
    return np.array(a, F64)


def target_of(t):
    """("row", row, shape) for a recorded output, ("const", value, shape) otherwise."""
    if isinstance(t, Tensor):
        return ("row", t._row, t.shape)
    return ("const", t, t.shape)


def read_from_outside(trace):
    """The arrays and tensors f read as constants that something besides the recording
    still references (f's own temporaries are gone), each with the value it read."""
    first = {}
    for source, value in trace.captured:
        first.setdefault(id(source), (source, value))
    trace.captured = None
    kept = []
    for source, value in first.values():
        # references: the dict's tuple, this loop's name, getrefcount's argument
        if sys.getrefcount(source) > 3:
            kept.append((source, value))
    return kept


def unchanged(captured):
    """Whether every array / tensor in ``captured`` still holds the value read."""
    for source, value in captured:
        kind = type(source)
        live = source if kind is np.ndarray else np.array(source, np.float64) \
            if kind is list else source._value
        if live is value:
            continue
        if type(value) is float:
            if type(live) is not float or not same_bits(np.array(value), np.array(live)):
                return False
        elif type(live) is float or not same_bits(value, live):
            return False
    return True


def replay(p, tape, args):
    """Re-evaluate the program at ``args`` in ``tape`` (a twin of its own); returns the
    first guard that says to record again, or None."""
    p.executor.replay(tape, p.input_rows, joined(args), lambda i: _replay_row(tape, i))
    for guard in p.guards:
        fn, operands, expected, _ = guard
        values = [row_value(tape, v) if kind == "row" else v for kind, v in operands]
        try:
            with ignore_fp_errors():
                if not guards.same(fn(*values), expected):
                    return guard
        except Exception:                      # recording again raises it, if it must
            return guard
    return None


def joined(args):
    """The arguments' values one after another, as the replay kernels take them."""
    return args[0].reshape(-1) if len(args) == 1 else np.concatenate(
        [a.reshape(-1) for a in args])


def has_wide_rows(tape, min_size):
    """Whether the recording has elementwise rows of ``min_size`` elements or more."""
    rows, _ = tape.large_arrays(np.arange(tape.nrows), min_size)
    ops = tape.columns().rows[rows, OP]
    return bool(((ops >= UNARY_FIRST) & (ops <= BINARY_LAST)).any())


def _replay_row(tape, i):
    """A row the compiled replay leaves to Python: a large elementwise row by the eager
    forward's functions (numpy's, on threads: the values its recording had); a
    numpy.linalg row recomputed by numpy, and the values its VJP reads; a user's op
    (custom.py) by its forward."""
    code, operands, params, _ = tape.row(i)
    if code <= BINARY_LAST:
        out = tape.buffer(i).reshape(tape.shape(i))      # (large: never a 0-d value)
        forward_values(code, *(row_value(tape, r).reshape(tape.shape(r))
                               for r in operands), out=out)
        return
    if code == SUM or code == MEAN:
        x = row_value(tape, operands[0]).reshape(tape.shape(operands[0]))
        tape.write(i, reduction_values(code, x, reduced_axes(params, x.ndim)))
        return
    if code == CUSTOM:
        tape.write(i, tape.customs[i].value(
            [row_value(tape, r).reshape(tape.shape(r)) for r in operands], tape.shape(i)))
        return
    if code not in values_of:
        raise RuntimeError(f"autotape internal error: op {opcode_name(code)} has neither a "
                           "compiled forward nor a numpy one; please report this")
    value, saved = values_of[code](row_value(tape, operands[0]),
                                   row_value(tape, operands[1])
                                   if len(operands) > 1 else None, params)
    tape.write(i, value)
    if saved is not None:
        assert tape.op(int(saved_row(params, 0))) == CONST
        tape.write(int(saved_row(params, 0)), saved)


def recording_key(kind, args):
    """A recording's key: its kind and argument shapes (and float32, for such programs)."""
    shapes = tuple(a.shape for a in args)
    return (kind,) + shapes if args[0].dtype == F64 else (kind, "float32") + shapes


def jvp_tangents(args, tangents):
    """jvp's tangents as arrays of the arguments' shapes and dtype."""
    tangents = tuple(tangents)
    if len(tangents) != len(args):
        raise RuntimeError(f"jvp: Expected primals and tangents to have the same structure, "
                           f"got {len(args)} primals and {len(tangents)} tangents")
    out = []
    for a, t in zip(args, tangents):
        t = np.asarray(t._value if isinstance(t, Tensor) else t)
        if t.dtype.kind not in "iuf":
            raise TypeError(f"jvp: tangents must be float arrays, got dtype {t.dtype}")
        if t.shape != a.shape:
            raise RuntimeError(f"jvp: Expected primals and tangents to have the same "
                               f"shape, got {a.shape} and {t.shape}")
        out.append(np.array(t, a.dtype, order="C"))
    return out


def plain_copy(tape, target):
    """A target's value in ``tape`` as a new Tensor that records nothing."""
    kind, v, shape = target
    data = (row_value(tape, v) if kind == "row" else v).copy()
    return new_leaf(data if data.ndim else float(data), shape, F64)


def scalar_output(p, name):
    """The recording's one output, where it is a scalar, else ``name``'s RuntimeError."""
    if len(p.outputs) != 1 or math.prod(p.outputs[0][2]) != 1:
        raise RuntimeError(f"{name}: f must return a single scalar Tensor")
    return p.outputs[0]


def sweep_replayed(p, tape, targets, lanes, args):
    """One compiled sweep of the program's tape seeded on the target rows: with one
    lane, ones; with ``lanes`` = the targets' total size, the identity (lane k seeds
    element k). Returns each argument's adjoint, ``(lanes, *shape)`` or ``shape``. A
    fused program is replayed at ``args`` in the same compiled call; any other has been
    replayed already."""
    key = (id(targets), lanes)                 # targets: the program's own lists
    plan = p.plans.get(key)
    if plan is None:
        plan = p.plans[key] = _seeds(targets, lanes)
    seed_rows, seed_vals, seed_off = plan
    lead = (lanes,) if lanes > 1 else ()
    if not seed_rows.size:
        if p.fused:
            replay(p, tape, args)             # (the value may still be read)
        return [np.zeros(lead + s) for s in p.shapes]
    if p.fused:
        out = np.empty((lanes, p.total_in))
        p.executor.replay_and_sweep(tape, p.input_rows, joined(args), plan, lanes, out)
        if len(args) == 1:
            return [out.reshape(lead + p.shapes[0])]
        cols = list(itertools.accumulate(p.sizes, initial=0))
        return [out[:, a:b].reshape(lead + s) for a, b, s in zip(cols, cols[1:], p.shapes)]
    # one lane: large inputs' gradients are written into arrays of their own (no copy)
    own, row_addr = engine.leaf_buffers(tape) if lanes == 1 else (None, NO_ROWS)
    adj, adj_off, stride = p.executor.sweep(tape, seed_rows, seed_vals, seed_off, lanes,
                                            True, row_addr=row_addr, read=p.input_rows,
                                            on_custom=engine.custom_vjps(tape))
    lanes_view = adj[:lanes * stride].reshape(lanes, stride)
    out = []
    for row, s, n in zip(p.inputs, p.shapes, p.sizes):
        off = adj_off[row]
        if off < 0:
            g = np.zeros(lead + s)
        elif own and row in own:
            g = own.pop(row).reshape(s)
        else:
            g = np.array(lanes_view[:, off:off + n]).reshape(lead + s)
        out.append(g)
    return out


def _seeds(targets, lanes):
    """(seed rows, lane-major seed values, offsets) for _sweep."""
    rows, vals, offsets, start = [], [], [0], 0
    total = sum(math.prod(shape) for _, _, shape in targets)
    for kind, v, shape in targets:
        n = math.prod(shape)
        if kind == "row":
            if lanes == 1:
                block = np.ones(n)
            else:
                block = np.zeros((total, n))
                block[start:start + n] = np.eye(n)
            rows.append(v)
            vals.append(block.reshape(-1))
            offsets.append(offsets[-1] + block.size)
        start += n
    return (np.array(rows, np.int64), np.concatenate(vals) if vals else np.zeros(0),
            np.array(offsets, np.int64))


def tape_jacobian(p, tape, targets, args):
    """For every target i and argument j, d target_i / d argument_j with shape
    ``target_i.shape + argument_j.shape``, from one sweep with a lane per element of
    the targets."""
    sizes = [math.prod(shape) for _, _, shape in targets]
    total = sum(sizes)
    if not total and p.fused:
        replay(p, tape, args)
    rows = sweep_replayed(p, tape, targets, total, args) if total else [np.zeros((0,) + s)
                                                          for s in p.shapes]
    if len(targets) == 1 and len(rows) == 1:   # the common case, without the slicing
        g = rows[0].reshape(targets[0][2] + p.shapes[0])
        return [[new_leaf(g if g.ndim else float(g), g.shape, F64)]]
    jac, start = [], 0
    for (_, _, shape), n in zip(targets, sizes):
        per_input = []
        for g, s in zip(rows, p.shapes):
            block = g.reshape((total,) + s)[start:start + n].reshape(shape + s)
            per_input.append(new_leaf(block if block.ndim else float(block), block.shape, F64))
        jac.append(per_input)
        start += n
    return jac


def per_argument(values):
    """One value per argument as a call returns them: the value itself for one argument,
    a tuple for several."""
    return values[0] if len(values) == 1 else tuple(values)
