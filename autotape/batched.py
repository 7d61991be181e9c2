"""Results from a lean program's runs as Tensors, at one point or at many (vmap):
the methods a compiled function maps (``METHOD_KINDS``), the points' checks, values
and Jacobians split per output and per argument. Shared by at.compile and at.jit.

>>> sorted(METHOD_KINDS)[:3]
['__call__', 'grad', 'hessian']
"""
import itertools
import math

import numpy as np

from . import gpu
from .pytree import flatten
from .recording import per_argument
from .tensor import F64, new_leaf


# the methods a compiled function evaluates at many points at once (vmap, dask), and
# the recording each runs: f's own, or f's and its gradient's (create_graph)
METHOD_KINDS = {"__call__": "value", "grad": "value", "value_and_grad": "value",
                "jacobian": "value", "jacfwd": "value", "jacrev": "value",
                "hessian": "hessian"}


def mapped_method(method, owner, methods=tuple(METHOD_KINDS)):
    """``method`` where ``owner`` (at.compile, at.jit) maps it (one of ``methods``),
    else vmap's ValueError naming those it maps."""
    if method not in methods:
        raise ValueError(f"vmap: {owner} maps {', '.join(methods[:-1])} or {methods[-1]}, "
                         f"not {method!r}")
    return method


def point_count(batch):
    """B, the points in ``batch`` (arrays each with a leading axis of B points), or
    vmap's ValueError."""
    if not batch or any(a.ndim == 0 for a in batch):
        raise ValueError("vmap: every argument needs a leading axis of points; "
                         f"got shapes {[a.shape for a in batch]}")
    B = batch[0].shape[0]
    if any(a.shape[0] != B for a in batch):
        raise ValueError("vmap: the arguments' leading axes differ: "
                         f"{[a.shape[0] for a in batch]}")
    return B


def stacked(results, method):
    """Per-point results of a method, stacked on a leading axis (vmap's fallback)."""
    if not results:
        raise ValueError(f"vmap: no points to evaluate {method} at")
    leaves, rebuild = flatten(results[0])
    per_point = [flatten(r)[0] for r in results]
    return rebuild([new_leaf(np.stack([pt[k].numpy() for pt in per_point]),
                             (len(results),) + leaves[k].shape, F64)
                    for k in range(len(leaves))])


def forward_jacobian(p, X):
    """Values and the Jacobian (B, outputs, inputs) at the points X by forward mode: a
    tangent lane per colour of the inputs where the Jacobian is sparse enough (inputs
    of one colour never meet in an output; LeanProgram.compression), else per input
    element (by reverse through users' compiled ops, which have VJPs only)."""
    lean = p.lean
    if lean.user_calls is not None:
        return lean.run(X, jacobian=True)
    compressed = lean.compression()
    if compressed is None:
        return lean.tangents(X, np.eye(p.total_in, dtype=X.dtype)[None])
    seeds, rows, cols, lanes = compressed
    values, packed = lean.tangents(X, seeds.astype(X.dtype)[None])
    jac = np.zeros((X.shape[0], lean.out_slots.size, p.total_in), packed.dtype)
    jac[:, rows, cols] = packed[:, rows, lanes]
    return values, jac


def gpu_run(p, X, method, shapes=None):
    """Values and, but for ``__call__``, the Jacobian of the program's outputs at the
    points X on the GPU: forward mode (a tangent lane per input, in registers) for
    jacfwd and hessian, and for jacobian where inputs are fewer than outputs; else a
    reverse sweep per output. Forward mode where the GPU cannot run it (a program
    written for the interpreter kernel, too many lanes) is done in reverse. ``shapes``:
    device results' shapes (gpu.run_points)."""
    if method == "__call__":
        return gpu.run_points(p.lean, X, False, shapes)
    forward = method in ("jacfwd", "hessian") or (
        method == "jacobian" and p.total_in < p.lean.out_slots.size)
    if forward:
        try:
            return gpu.run_tangents(p.lean, X, np.eye(p.total_in), shapes)
        except gpu.Unsupported:
            pass
    return gpu.run_points(p.lean, X, True, shapes)


def lean_jacobian_at(p, X):
    """Values and the Jacobian at the points X, in forward mode where inputs are fewer
    than outputs (a lane per input), else in reverse (a sweep per output)."""
    if p.total_in < p.lean.out_slots.size:
        return forward_jacobian(p, X)
    return p.lean.run(X, jacobian=True)


def lean_values(targets, values, lead=(), tangent=False):
    """Each target's value as a Tensor, from a lean program's output values (the row
    targets' elements one after another, on a leading axis of points when ``lead`` is
    (B,); without one, ``values`` is one point's). With ``tangent``, values are
    tangents, and a constant target's is zero."""
    if not lead and len(targets) == 1 and targets[0][0] == "row" and not targets[0][2]:
        return [new_leaf(float(values[0]), (), values.dtype)]   # (one scalar: ~0.5 us)
    out, start = [], 0
    for kind, v, shape in targets:
        if kind == "row":
            n = math.prod(shape)
            data = values[..., start:start + n].reshape(lead + shape).copy()
            start += n
        else:
            data = np.broadcast_to(0.0 if tangent else v, lead + shape).astype(values.dtype)
        out.append(new_leaf(data if data.ndim else float(data), data.shape, data.dtype))
    return out


def lean_jacobian(p, targets, jac, lead=()):
    """For every target, its derivative with respect to each argument (one Tensor, or
    a tuple for several), from a lean program's Jacobian (row targets' elements by the
    arguments' elements; a leading axis of points as in ``lean_values``)."""
    if len(targets) == 1 and len(p.shapes) == 1 and targets[0][0] == "row":
        # (one output, one argument: a value_and_grad call's, in ~1 us, not ~4)
        g = jac[..., :math.prod(targets[0][2]), :].reshape(lead + targets[0][2] + p.shapes[0])
        return [new_leaf(g.copy() if g.ndim else float(g), g.shape, g.dtype)]
    cols = list(itertools.accumulate(p.sizes, initial=0))
    out, start = [], 0
    for kind, _, shape in targets:
        n = math.prod(shape)
        if kind == "row":
            block = jac[..., start:start + n, :]
            start += n
        else:
            block = np.zeros(lead + (n, p.total_in), jac.dtype)
        per_arg = []
        for a, b, s in zip(cols, cols[1:], p.shapes):
            g = block[..., a:b].reshape(lead + shape + s)
            per_arg.append(new_leaf(g.copy() if g.ndim else float(g), g.shape, g.dtype))
        out.append(per_argument(per_arg))
    return out
