"""Custom ops: a forward and its VJP supplied by the user, as ``torch.autograd.Function``
or ``jax.custom_vjp`` (autotape's spelling: ``at.custom_op(forward, vjp)``).

The op is one tape row (CUSTOM) whose operands are its inputs. The compiled sweep stops
at it and the engine calls ``vjp`` with numpy arrays; with ``create_graph=True`` the
engine calls it with recorded Tensors instead, so a VJP written with autotape ops (or
with numpy functions, which record on Tensors) is itself differentiated. The VJP
receives the primal inputs and output rather than opaque residuals: whatever it needs
is recomputed from them, which is what keeps higher derivatives exact.
"""
import numba
import numpy as np

from .engine import grad as engine_grad
from .grad_mode import enable_grad, no_grad
from .opcodes import CUSTOM
from .ops.recording import record_listed
from .tape_format import custom_params
from .tensor import Tensor, array_of, canonical, new_leaf

__all__ = ["custom_op", "CustomOp", "checkpoint"]


class CustomOp:
    """A differentiable op made of a ``forward`` and a ``vjp`` (see ``custom_op``).

    >>> square = at.CustomOp(lambda x: x * x, lambda xs, y, g: (2 * xs[0] * g,), "square")
    >>> square
    <autotape custom op 'square'>
    >>> x = at.tensor(3.0, requires_grad=True)
    >>> at.grad(square(x), x)
    (tensor(6.),)
    """

    def __init__(self, forward, vjp, name=None):
        if not callable(forward) or not callable(vjp):
            raise TypeError("custom_op: forward and vjp must be callables")
        self.forward, self.vjp = forward, vjp
        self.name = name or getattr(forward, "__name__", "custom_op")
        # both numba-compiled: compiled programs call them from compiled code
        # (kernels/calls.py), and every caller passes them the same things
        self.compiled = _is_njit(forward) and _is_njit(vjp)

    def __repr__(self):
        return f"<autotape custom op {self.name!r}>"

    def __call__(self, *inputs):
        if not inputs:
            raise TypeError(f"custom op {self.name!r} needs at least one input")
        operands = [x if isinstance(x, Tensor) else np.asarray(x) for x in inputs]
        for x in operands:
            if not isinstance(x, Tensor) and x.dtype.kind not in "fiub":
                raise TypeError(f"custom op {self.name!r}: inputs must be numeric, not "
                                f"{x.dtype}")
        operands = [x if isinstance(x, Tensor) else x.astype(np.float64) for x in operands]
        values = [np.asarray(array_of(x), np.float64) if isinstance(x, Tensor) else x
                  for x in operands]
        if self.compiled:
            values = [_compiled_arg(v) for v in values]
        out = np.asarray(self.forward(*values), np.float64)
        if out.dtype.kind != "f":
            raise TypeError(f"custom op {self.name!r}: forward must return floats")
        tensors = [x if isinstance(x, Tensor) else new_leaf(*canonical(x)) for x in operands]
        result = record_listed(CUSTOM, out.copy(), tensors, custom_params)
        if result._tape is not None:
            result._tape.customs[result._row] = self
        return result

    def graph_vjp(self, at, g, r, k):
        """The create_graph rule: vjp on recorded Tensors, once per row."""
        cached = getattr(r, "custom_cotangents", None)
        if cached is None:
            inputs = [r.value(j) for j in range(len(r.operands))]
            cached = r.custom_cotangents = self.cotangents(inputs, r.z, g)
        c = cached[k]
        return None if c is None else (c if isinstance(c, Tensor) else
                                       new_leaf(*canonical(np.asarray(c, np.float64))))

    def cotangents(self, inputs, output, g):
        """vjp's result, checked: one cotangent per input (None for none), each of its
        input's shape."""
        if self.compiled:
            if any(isinstance(v, Tensor) for v in (*inputs, output, g)):
                raise RuntimeError(
                    f"custom op {self.name!r}: its vjp is numba-compiled, so it cannot be "
                    "differentiated again (create_graph=True, Hessians); give a vjp "
                    "written with autotape or numpy ops for higher derivatives")
            result = self.vjp(tuple(_compiled_arg(np.asarray(v, np.float64)) for v in inputs),
                              _compiled_arg(np.asarray(output, np.float64)),
                              _compiled_arg(np.asarray(g, np.float64)))
            if not isinstance(result, tuple):
                raise TypeError(f"custom op {self.name!r}: a numba-compiled vjp must return "
                                f"a tuple of cotangents, one per input, not "
                                f"{type(result).__name__}")
        else:
            result = self.vjp(inputs, output, g)
        if not isinstance(result, (tuple, list)):
            result = (result,)
        if len(result) != len(inputs):
            raise RuntimeError(f"custom op {self.name!r}: vjp returned {len(result)} "
                               f"cotangent(s) for {len(inputs)} input(s)")
        checked = []
        for k, (c, x) in enumerate(zip(result, inputs)):
            if c is None:
                checked.append(None)
                continue
            shape = tuple(np.shape(c))
            if shape != tuple(np.shape(x)):
                raise RuntimeError(
                    f"custom op {self.name!r}: vjp's cotangent for input {k} has shape "
                    f"{shape}, but the input has shape {tuple(np.shape(x))}")
            checked.append(c)
        return checked


def _is_njit(f):
    return isinstance(f, numba.core.dispatcher.Dispatcher)


def _compiled_arg(v):
    """What a numba-compiled forward or vjp gets: a float for a 0-d value, else a
    C-contiguous float64 array (the same in eager calls and compiled programs)."""
    return float(v) if v.ndim == 0 else np.ascontiguousarray(v, np.float64)


def custom_op(forward, vjp, name=None):
    """A differentiable op from ``forward(*inputs) -> output`` (numpy arrays in and
    out) and ``vjp(inputs, output, g) -> cotangents`` (one per input, each of its
    input's shape; None for none: a leaf reached only through it gets zeros, where
    torch gives None). In a compiled sweep vjp gets numpy arrays;
    with ``create_graph=True`` it gets recorded Tensors, so a vjp written with autotape
    ops or numpy functions is differentiated again. It works eagerly, in
    ``autotape.func``, in batched Jacobians (vjp once per cotangent lane) and in
    ``at.compile`` (forward called in the replay).

    When forward and vjp are both ``numba.njit`` functions, a compiled program calls
    them from compiled code, with no Python per call (an existing numba solver becomes
    one differentiable op): forward gets arrays (floats for 0-d inputs), vjp gets
    ``(inputs tuple, output, g)`` and returns a tuple of arrays, one per input. Such a
    vjp is not differentiated again (no create_graph, no Hessians through it), and
    forward-mode calls through it take the reverse sweep.

    >>> cube = at.custom_op(lambda x: x ** 3, lambda xs, y, g: (3 * xs[0] ** 2 * g,))
    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> at.grad(cube(x).sum(), x)
    (tensor([ 3., 12.]),)
    """
    return CustomOp(forward, vjp, name)


def checkpoint(f, *args):
    """``f(*args)`` without keeping f's internals: the forward runs without recording,
    and the sweep runs f again (recorded, on copies of the arguments) when it reaches
    this point, then takes its VJP. Memory for a long chain of checkpointed segments
    grows with the number of segments, not of ops. f takes Tensors and returns one.

    >>> x = at.tensor([0.5, 1.0], requires_grad=True)
    >>> y = at.checkpoint(lambda u: at.sin(u) * u, x)
    >>> at.grad(y.sum(), x)
    (tensor([0.91821682, 1.38177329]),)
    """
    def forward(*values):
        with no_grad():
            out = f(*(new_leaf(*canonical(v)) for v in values))
        if not isinstance(out, Tensor):
            raise TypeError(f"checkpoint: f must return a Tensor, not {type(out).__name__}")
        return array_of(out)

    def vjp(inputs, output, g):
        recorded = isinstance(g, Tensor)
        if recorded:
            # create_graph: f on fresh rows that are the inputs times 1, so the gradient
            # stays connected to them (higher derivatives) while the walk from f's
            # output stops at those rows (graph_backward.run) instead of re-walking
            # everything recorded before
            leaves = [x * 1.0 for x in inputs]
        else:
            leaves = [new_leaf(*canonical(np.array(v))).requires_grad_() for v in inputs]
        with enable_grad():
            out = f(*leaves)
            grads = engine_grad(out, leaves, g if recorded else new_leaf(*canonical(g)),
                                create_graph=recorded, allow_unused=True)
        return [c if recorded or c is None else array_of(c) for c in grads]

    name = getattr(f, "__name__", "f")
    return CustomOp(forward, vjp, name=f"checkpoint({name})")(*args)
