"""Users' numba-compiled ops inside a lean program (CALL instructions).

A program whose recording holds ``at.custom_op`` rows made of ``numba.njit`` functions
runs through one compiled driver: the interpreter's ranges between the calls
(``forward_range`` / ``reverse_range``) and, at each call, the user's forward or VJP
on the operands' slots, for every point, with no Python per call. The driver is
generated per program (the calls' shapes and functions are constants in its source)
and compiled in this process only: numba's disk cache would not notice a change to the
user's functions, and a stale driver would be a silent wrong answer.

The user's functions see arrays of their operands' shapes (0-d operands as floats),
the forward returns an array (or a float), the VJP gets ``(inputs tuple, output, g)``
and returns a tuple with one cotangent per input.
"""
import threading

import numba
import numpy as np
from numba.core import types
from numba.extending import overload

from .program import CALL, I_A, I_N, I_OP, I_OUT, I_P, forward_range, reverse_range

__all__ = ["driver", "flat"]


def flat(x):
    """x as a flat float64 array, a copy (a scalar as one element); compiled code only."""
    return np.asarray(x, np.float64).reshape(-1).copy()


# (no reshape and no slice assignment in the driver: numba compiles their error
# messages, string formatting included, ~2 s in every process, into the first function
# that uses them)

@overload(flat)
def _flat(x):
    if isinstance(x, types.Array):
        def copied(x):
            out = np.empty(x.size)
            k = 0
            for v in x.flat:                   # (C order, as reshape(-1))
                out[k] = v
                k += 1
            return out
        return copied
    if isinstance(x, (types.Float, types.Integer)):
        return lambda x: np.full(1, x, np.float64)
    return None


_RUN = '''
def run(instr, pool, divisor, live, const_slots, const_vals, in_slots, out_slots, X,
        values, jac, want_jac, V, G):
    count = instr.shape[0]
    for p in range(X.shape[0]):
        for k in range(const_slots.size):
            V[const_slots[k]] = const_vals[k]
        for e in range(in_slots.size):
            V[in_slots[e]] = X[p, e]
{forward}
        for o in range(out_slots.size):
            values[p, o] = V[out_slots[o]]
        if not want_jac:
            continue
        for o in range(out_slots.size):
            G[:] = 0.0
            G[out_slots[o]] = 1.0
{reverse}
            for e in range(in_slots.size):
                jac[p, o, e] = G[in_slots[e]]
'''

_CALL = '''
def forward_{k}(instr, pool, V, q):
    p, out, n = instr[q, {I_P}], instr[q, {I_OUT}], instr[q, {I_N}]
{load}
    y = flat(user_forward_{k}({args}))
    if y.size != n:
        raise ValueError("custom op {name}: forward returned the wrong number of elements "
                         "(it must return the output's shape at every call)")
    for e in range(n):
        V[out + e] = y[e]


def vjp_{k}(instr, pool, V, G, q):
    p, out, n = instr[q, {I_P}], instr[q, {I_OUT}], instr[q, {I_N}]
{load}
{output}
{cotangent}
    cots = user_vjp_{k}(({args},), y, g)
{scatter}
'''


def _shaped(name, array, start, shape):
    """Lines binding ``name`` to a copy of ``array[start:]`` of ``shape`` (a float when
    0-d), element by element beyond one axis."""
    if shape == ():
        return [f"    {name} = {array}[{start}]"]
    if len(shape) == 1:
        return [f"    {name} = {array}[{start}:{start} + {shape[0]}].copy()"]
    lines = [f"    {name} = np.empty({tuple(shape)!r})", f"    at = {start}"]
    for axis, size in enumerate(shape):
        lines.append("    " * (axis + 1) + f"for i{axis} in range({size}):")
    index = ", ".join(f"i{axis}" for axis in range(len(shape)))
    lines += ["    " * (len(shape) + 1) + f"{name}[{index}] = {array}[at]",
              "    " * (len(shape) + 1) + "at += 1"]
    return lines


def _operand(j, shape, array="V"):
    """Lines binding x{j} to call operand j (a float when 0-d)."""
    return _shaped(f"x{j}", array, f"pool[p + {1 + 2 * j}]", tuple(shape))


def _source(k, name, in_shapes, out_shape):
    load = "\n".join(line for j, shape in enumerate(in_shapes) for line in _operand(j, shape))
    args = ", ".join(f"x{j}" for j in range(len(in_shapes)))
    output = "\n".join(_shaped("y", "V", "out", tuple(out_shape)))
    cotangent = "\n".join(_shaped("g", "G", "out", tuple(out_shape)))
    scatter = []
    for j, shape in enumerate(in_shapes):
        size = int(np.prod(shape, dtype=np.int64))
        scatter += [f"    c{j} = flat(cots[{j}])",
                    f"    if c{j}.size != {size}:",
                    f"        raise ValueError(\"custom op {name}: vjp's cotangent for input "
                    f"{j} has the wrong number of elements (it must have the input's shape)\")",
                    f"    s{j} = pool[p + {1 + 2 * j}]",
                    f"    for e in range({size}):",
                    f"        G[s{j} + e] += c{j}[e]"]
    return _CALL.format(k=k, name=repr(name)[1:-1].replace('"', "'"), load=load, args=args,
                        output=output, cotangent=cotangent, scatter="\n".join(scatter),
                        I_P=I_P, I_OUT=I_OUT, I_N=I_N)


def driver(instr, calls):
    """The compiled ``run`` for a program with CALL instructions. ``calls``: for each
    CALL (in instruction order) ``(forward, vjp, name, operand shapes, output shape)``.
    run(instr, pool, divisor, live, const_slots, const_vals, in_slots, out_slots, X,
    values, jac, want_jac, V, G) evaluates the points X one after another (V and G:
    one point's slots)."""
    at = [int(q) for q in np.nonzero(instr[:, I_OP] == CALL)[0]]
    assert len(at) == len(calls)
    namespace = {"np": np, "flat": flat, "forward_range": forward_range,
                 "reverse_range": reverse_range}
    source = []
    for k, (forward, vjp, name, in_shapes, out_shape) in enumerate(calls):
        namespace[f"user_forward_{k}"], namespace[f"user_vjp_{k}"] = forward, vjp
        source.append(_source(k, name, in_shapes, out_shape))
    bounds = [-1] + at + [None]
    fwd, rev = [], []
    # (the ranges' bounds as np.int64, not literals: numba would compile the interpreter's
    # forward_range / reverse_range again for every literal, seconds each per program,
    # where these take the int64 ones in the disk cache)
    for k in range(len(at) + 1):
        q0 = f"np.int64({bounds[k] + 1})"
        q1 = "count" if bounds[k + 1] is None else f"np.int64({bounds[k + 1]})"
        fwd.append(f"        forward_range(instr, pool, divisor, V, {q0}, {q1})")
        if k < len(at):
            fwd.append(f"        forward_{k}(instr, pool, V, {at[k]})")
    for k in range(len(at), -1, -1):
        q0 = f"np.int64({bounds[k] + 1})"
        q1 = "count" if bounds[k + 1] is None else f"np.int64({bounds[k + 1]})"
        rev.append(f"            reverse_range(instr, pool, divisor, live[o], V, G, {q0}, "
                   f"{q1})")
        if k:
            rev.append(f"            if live[o, {at[k - 1]}]:")
            rev.append(f"                vjp_{k - 1}(instr, pool, V, G, {at[k - 1]})")
    source.append(_RUN.format(forward="\n".join(fwd), reverse="\n".join(rev)))
    code = "\n".join(source)
    key = (code,) + tuple(id(f) for call in calls for f in call[:2])
    with _lock:
        known = _drivers.get(key)
        if known is None:
            known = _drivers[key] = (_compiled(code, namespace, len(calls)), calls)
    return known[0]                            # (calls kept with it: their ids stay valid)


_drivers = {}          # (source, the functions' ids) -> (driver, calls), this process only
_lock = threading.Lock()


def _compiled(code, namespace, count):
    """The source's ``run`` and its per-call helpers as numba functions (compiled at the
    first call)."""
    exec(compile(code, "<autotape custom-op driver>", "exec"), namespace)
    options = dict(error_model="numpy", nogil=True)
    for k in range(count):
        for kind in ("forward", "vjp"):
            namespace[f"{kind}_{k}"] = numba.njit(**options)(namespace[f"{kind}_{k}"])
    return numba.njit(**options)(namespace["run"])


def call_rows(instr):
    """The tape rows of a program's CALL instructions, in instruction order."""
    return [int(instr[q, I_A]) for q in np.nonzero(instr[:, I_OP] == CALL)[0]]
