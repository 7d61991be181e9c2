"""Record once, replay many: ``at.compile(f, *example_args)``.

f is recorded once on a tape of its own. Each later call writes the new arguments into
the tape's input rows, recomputes every other row with the compiled forward replay
(kernels/replay.py), checks the guards taken while recording (guards.py), and runs the
compiled reverse sweep when derivatives are asked for: no Python per op, no
re-recording. A Hessian comes from a second recording, of f and its gradient
(create_graph), replayed the same way and swept once with one lane per row.

What f computes must follow from its arguments through autotape ops. Values f
captures (arrays, tensors, numbers from outside) are read once, when recorded, as in
``jax.jit``. Decisions taken in Python from traced values (comparisons, ``.item()``,
``if`` on a tensor) are guards: a call whose decisions would differ is recorded
again at its own arguments, so results are never stale; ``traces`` counts
recordings. A new argument shape is recorded once and kept.

>>> f = at.compile(lambda x: (x ** 3).sum(), np.ones(2))
>>> f.grad(np.array([1.0, 2.0]))
tensor([ 3., 12.])
"""
import functools
import itertools
import math
import pickle
import sys
import warnings

import numpy as np

try:
    import cloudpickle                         # (pickles lambdas and closures)
except ImportError:
    cloudpickle = None

from . import eager_calls, engine, gpu, guards
from .errstate import ignore_fp_errors
from .explain import explain
from .executor import NO_ROWS, executor_for
from .pytree import flatten
from .grad_mode import enable_grad, is_grad_enabled
from .opcodes import (BINARY_LAST, CONST, CUSTOM, MATMUL, MEAN, PYTHON_LAST, SUM,
                      UNARY_FIRST, opcode_name)
from .ops.elementwise import forward_values
from .ops.indexing import reshape
from .ops.reduce import reduction_values
from .ops.linalg import values_of
from .ops.recording import row_of
from .checkpointing import NotCheckpointable
from .program import LeanProgram, loop_of
from .tape import close_open_tape, open_tape, same_bits
from .tape_format import OP, reduced_axes, saved_row
from .complex_numbers import ComplexTensor
from .complex_numbers.tensor import real_view
from .tensor import F32, F64, Tensor, is_complex_data, new_leaf
from .tuning import LOOP_WIDE_MIN, NUMPY_ROW_MIN, WARN_AFTER_RECORDINGS

__all__ = ["compile", "Compiled"]



def compile(f, *example_args, checkpoint=None):
    """f recorded once at ``example_args`` (float arrays, numbers or Tensors; f returns
    a Tensor or a tuple / list / dict of them), returned as a ``Compiled`` function
    that replays the recording: call it for f's value, or use ``.grad``,
    ``.value_and_grad``, ``.jacobian``, ``.hessian``. Derivatives are taken with
    respect to every argument.

    ``checkpoint="sqrt"`` sweeps a long time-stepping loop in segments: memory like
    the square root of its steps for about one more forward pass (checkpointing.py);
    an int is a budget, the repetitions' worth of values kept at once at most.

    >>> rosen = at.compile(lambda x: (100 * (x[1:] - x[:-1] ** 2) ** 2).sum(), np.zeros(3))
    >>> rosen.hessian(np.ones(3)).shape
    (3, 3)
    """
    if any(is_complex_data(a) for a in example_args):
        return ComplexArguments(f, example_args, checkpoint)
    return Compiled(f, example_args, checkpoint)


class ComplexArguments:
    """A compiled function of complex arguments (``at.compile`` makes one): compiled
    on their parts, real arrays of shape ``shape + (2,)`` (complex_numbers/), so that
    the lean program, ``vmap`` and the derivatives are the real ones. A derivative with
    respect to a complex argument is the one with respect to its parts read as complex
    numbers: ``dL/dx + i dL/dy``, torch's convention.

    >>> c = at.compile(lambda z: (abs(z) ** 2).sum(), np.array([1 + 2j]))
    >>> c.grad(np.array([3 - 1j]))
    tensor([6.-2.j])
    """

    def __init__(self, f, example_args, checkpoint=None):
        flags = self.complex_at = tuple(is_complex_data(a) for a in example_args)
        self.f = f

        self.complex_outputs = False

        def on_parts(*parts):
            result = f(*[ComplexTensor(a) if c else a for a, c in zip(parts, flags)])
            self.complex_outputs |= _holds_complex(result)
            return result
        self.compiled = Compiled(on_parts, self._parts(example_args), checkpoint)

    def _parts(self, args):
        if len(args) != len(self.complex_at):
            raise TypeError(f"compile: f was compiled with {len(self.complex_at)} "
                            f"arguments, got {len(args)}")
        out = []
        for a, c in zip(args, self.complex_at):
            if c:
                a = real_view(np.asarray(
                    a.detach().numpy() if isinstance(a, ComplexTensor) else a, np.complex128))
            elif is_complex_data(a):
                raise TypeError("compile: a complex argument where f was compiled with "
                                "a real one; compile it again with complex examples")
            out.append(a)
        return tuple(out)

    def _complex(self, grads, lead=0):
        """Gradients of the parts as complex gradients (for the complex arguments)."""
        many = isinstance(grads, tuple)
        grads = grads if many else (grads,)
        out = tuple(ComplexTensor(g) if c else g for g, c in zip(grads, self.complex_at))
        return out if many else out[0]

    def __call__(self, *args):
        """f(*args)."""
        return self.compiled(*self._parts(args))

    def value_and_grad(self, *args):
        """``(f(*args), gradient)`` for a real scalar f."""
        value, grads = self.compiled.value_and_grad(*self._parts(args))
        return value, self._complex(grads)

    def grad(self, *args):
        """The gradient of a real scalar f (complex for the complex arguments)."""
        return self.value_and_grad(*args)[1]

    def jacobian(self, *args):
        """d output / d argument for real outputs (complex for complex arguments, in the
        gradient's convention)."""
        return self._jacobian("jacobian", args)

    def jacfwd(self, *args):
        """The Jacobian by forward mode (see Compiled.jacfwd)."""
        return self._jacobian("jacfwd", args)

    def jacrev(self, *args):
        """The Jacobian by reverse mode (see Compiled.jacrev)."""
        return self._jacobian("jacrev", args)

    def _jacobian(self, method, args):
        self._refuse_complex_outputs(method)
        return self._complex(getattr(self.compiled, method)(*self._parts(args)))

    def jvp(self, primals, tangents):
        """``(f(*primals), J @ tangents)``; a complex argument's tangent is complex."""
        return self.compiled.jvp(self._parts(tuple(primals)), self._parts(tuple(tangents)))

    def hessian(self, *args):
        """Refused: the gradient of a real f with respect to complex arguments,
        dL/dx + i dL/dy, is not holomorphic, so its Jacobian is no complex matrix."""
        raise TypeError("hessian of a function of complex arguments: compile it on the "
                        "parts instead, at.compile(lambda p: f(at.view_as_complex(p)), "
                        "parts), and take that hessian")

    def _refuse_complex_outputs(self, name):
        if self.complex_outputs:
            raise TypeError(f"{name} of a function with complex outputs: it is not one "
                            "complex matrix unless f is holomorphic; use "
                            "at.func.jacrev(f, holomorphic=True) for that, or view the "
                            "outputs' parts (at.view_as_real)")

    def explain(self, *args):
        """What calls at these arguments run (see Compiled.explain)."""
        return self.compiled.explain(*self._parts(args))

    def map_points(self, method, args, device=None):
        """vmap of a method (Compiled.map_points): results as the method's."""
        if method == "hessian":
            self.hessian()
        if method in ("jacobian", "jacfwd", "jacrev"):
            self._refuse_complex_outputs(method)
        parts = []
        for a, c in zip(args, self.complex_at):
            if c:
                a = real_view(np.asarray(
                    a.detach().numpy() if isinstance(a, ComplexTensor) else a, np.complex128))
            parts.append(a)
        result = self.compiled.map_points(method, parts, device)
        if method in ("grad", "jacobian", "jacfwd", "jacrev"):
            return self._complex(result)
        if method == "value_and_grad":
            return result[0], self._complex(result[1])
        return result


def _holds_complex(tree):
    if isinstance(tree, (tuple, list)):
        return any(_holds_complex(t) for t in tree)
    if isinstance(tree, dict):
        return any(_holds_complex(t) for t in tree.values())
    return isinstance(tree, ComplexTensor)


class _Program:
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


def _row_value(tape, row):
    return np.asarray(tape.value(row))


def _recording_again(method):
    """A public call, made again once after f run eagerly (while the kernels compile:
    eager_calls.py) returned outputs of another structure than its recording: the
    recording at those shapes is dropped, and the call records f again."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except eager_calls.RecordAgain:
            self._programs = {k: p for k, p in self._programs.items() if not p.pending}
            return method(self, *args, **kwargs)
    return call


class Compiled:
    """f recorded once, replayed at new arguments (see ``at.compile``).

    ``traces`` counts the recordings made so far (one per argument shape, plus one
    each time a guard sent a call back to be recorded again).

    >>> f = at.compile(lambda x: (x ** 3).sum(), np.ones(2))
    >>> f(np.array([1.0, 2.0]))
    tensor(9.)
    >>> f.value_and_grad(np.array([1.0, 2.0]))
    (tensor(9.), tensor([ 3., 12.]))
    >>> f.traces
    1
    """

    def __init__(self, f, example_args, checkpoint=None):
        if not callable(f):
            raise TypeError(f"compile: expected a function, but got {type(f).__name__}")
        if checkpoint is not None and checkpoint != "sqrt" and not (
                isinstance(checkpoint, int) and not isinstance(checkpoint, bool)
                and checkpoint > 0):
            raise ValueError(f"compile: checkpoint must be None, 'sqrt' or a positive int "
                             f"(repetitions' worth of values), not {checkpoint!r}")
        self.f = f
        self.checkpoint = checkpoint
        self.traces = 0
        self._programs = {}
        self._one_point = None                 # (key, program) of value_and_grad's last
        self._guard_failures = 0
        self._lean("value", call_arguments(example_args, example=True))

    def __repr__(self):
        return f"<autotape.Compiled {getattr(self.f, '__name__', self.f)!r}: " \
               f"{self.traces} trace(s)>"

    def wait_compiled(self):
        """Compile now what the calls so far would run on the interpreter until a compile
        beside them is ready (a time-stepping loop's body, compiled from the second call
        on, for the kinds of call made so far: gradients, vmap, forward mode; see
        docs/first-run.md), and wait for it: a benchmark's warm-up, so that no timed
        call of those kinds waits or runs interpreted. Returns self.

        >>> f = at.compile(lambda x: (x ** 3).sum(), np.ones(2))
        >>> f.wait_compiled() is f
        True
        """
        if any(p.pending for p in self._programs.values()):
            eager_calls.wait()
        for key, p in list(self._programs.items()):
            if p.pending:
                self._lower(p, key[0])
            if p.lean is not None:
                p.lean.wait_compiled(F32 if "float32" in key else F64)
        return self

    # -- pickling: a program is data --------------------------------------------------------

    def __getstate__(self):
        """The recordings that run as lean programs (arrays: the kernels load from
        numba's cache on the other side) and f, when f pickles. Recordings on the tape
        path (linear algebra, max / min / prod, Python guards) are recorded again from
        f where they are needed."""
        f, why = pickled(self.f)               # f as bytes: loaded where it is needed,
                                               # so a worker that cannot import f's
                                               # module still runs the recordings
        programs = {key: _lean_state(p) for key, p in self._programs.items()
                    if p.lean is not None and not p.pending and p.lean.user_calls is None}
        return {"f": f, "why": why, "name": getattr(self.f, "__name__", repr(self.f)),
                "traces": self.traces, "programs": programs, "checkpoint": self.checkpoint}

    def __setstate__(self, state):
        f, why = state["f"], state["why"]
        if f is not None:
            try:
                f = pickle.loads(f)
            except Exception as e:             # f's module is not importable here
                f, why = None, f"{type(e).__name__}: {e}"
        self.f = f
        self._unpickled_without_f = None if f is not None else (state["name"], why)
        self.traces = state["traces"]
        self.checkpoint = state["checkpoint"]
        self._guard_failures = 0
        self._one_point = None
        self._programs = {key: _unpickled_program(fields) for key, fields in
                          state["programs"].items()}

    # -- the public calls -----------------------------------------------------------------

    @_recording_again
    def __call__(self, *args):
        """f(*args), from the replayed tape (Tensors in f's output structure)."""
        p = self._ready_at(args)
        if p is not None:
            values = p.lean.values_at(args[0])
            if values is not None:
                return p.rebuild(_lean_values(p.outputs, values[0]))
        args = call_arguments(args)
        p = self._lean("value", args, one_point=True)
        if p is not None:
            if len(args) == 1 and args[0].dtype == F64 and not p.pending:
                self._one_point = (_key("value", args), p)
            values, _ = p.lean.run(joined(args)[None])
            return p.rebuild(_lean_values(p.outputs, values[0]))
        p, tape = self._at("value", args, checked=True)
        try:
            return p.rebuild([_plain_copy(tape, o) for o in p.outputs])
        finally:
            p.release(tape)

    @_recording_again
    def value_and_grad(self, *args):
        """``(f(*args), gradient)`` for a scalar f; the gradient has the structure of
        the arguments (one Tensor, or a tuple for several)."""
        p = self._ready_at(args)
        if p is not None and len(p.outputs) == 1 and p.outputs[0][0] == "row" and \
                p.outputs[0][2] == ():
            found = p.lean.gradient_at(args[0])
            if found is not None:
                return new_leaf(float(found[0][0, 0]), (), F64), \
                    new_leaf(found[1].reshape(args[0].shape), args[0].shape, F64)
        args = call_arguments(args)
        p = self._lean("value", args, one_point=True)
        if p is not None:
            out = _scalar_output(p, "value_and_grad")
            if len(args) == 1 and args[0].dtype == F64 and not p.pending:
                self._one_point = (_key("value", args), p)
            values, jac = p.lean.run(joined(args)[None], jacobian=True)
            (value,), (grads,) = (_lean_values(p.outputs, values[0]),
                                  _lean_jacobian(p, p.outputs, jac[0]))
            return value, grads
        p, tape = self._at("value", args, fused=True, checked=True)
        try:
            out = _scalar_output(p, "value_and_grad")
            g = [new_leaf(g if g.ndim else float(g), g.shape, F64)
                 for g in _sweep_replayed(p, tape, [out], 1, args)]
            return _plain_copy(tape, out), (g[0] if len(g) == 1 else tuple(g))
        finally:
            p.release(tape)

    def _ready_at(self, args):
        """The program the last call at one point ran, where ``args`` is one float64
        array of its shape (C order) and what the program read as constants is unchanged:
        a small model's call then goes straight to its kernel (~5 us less); else None."""
        fast = self._one_point
        if fast is None or len(args) != 1:
            return None
        a, (key, p) = args[0], fast
        if type(a) is np.ndarray and a.dtype == F64 and a.shape == key[1] and \
                a.flags.c_contiguous and self._programs.get(key) is p and not p.pending and \
                p.lean is not None and (not p.captured or _unchanged(p.captured)):
            return p
        return None

    def grad(self, *args):
        """The gradient of a scalar f with respect to every argument.

        >>> at.compile(lambda x, y: (x * y).sum(), np.ones(2), 2.0).grad(np.ones(2), 3.0)
        (tensor([3., 3.]), tensor(2.))
        """
        return self.value_and_grad(*args)[1]

    @_recording_again
    def jacobian(self, *args):
        """d output / d argument, shape ``output.shape + argument.shape``. Nested as
        (outputs, then arguments) where f returns several or takes several. Taken in
        reverse (a sweep per output element) or, where arguments have fewer elements
        than outputs, in forward mode (``jacfwd``: a tangent lane per argument element).
        """
        args = call_arguments(args)
        p = self._lean("value", args)
        if p is not None:
            _, jac = _lean_jacobian_at(p, joined(args)[None])
            return p.rebuild(_lean_jacobian(p, p.outputs, jac[0]))
        return self._tape_jacobian(args)

    def _tape_jacobian(self, args):
        p, tape = self._at("value", args, fused=True, checked=True)   # (after _lean)
        try:
            jac = _jacobian(p, tape, p.outputs, args)
        finally:
            p.release(tape)
        return p.rebuild([_per_argument(per_input) for per_input in jac])

    @_recording_again
    def jacfwd(self, *args):
        """The Jacobian, as ``jacobian`` returns it, by forward mode: one pass over the
        program carrying a tangent lane per argument element. The cheap way when
        arguments are few and outputs many (a trajectory's sensitivity to a few
        parameters); ``jacobian`` picks it by itself then.

        >>> traj = at.compile(lambda k: at.stack([k[0] * t for t in (1.0, 2.0, 3.0)]), np.ones(1))
        >>> traj.jacfwd(np.array([2.0]))
        tensor([[1.],
                [2.],
                [3.]])
        """
        args = call_arguments(args)
        p = self._lean("value", args)
        if p is None:                          # (the tape path sweeps in reverse)
            return self._tape_jacobian(args)
        _, jac = _forward_jacobian(p, joined(args)[None])
        return p.rebuild(_lean_jacobian(p, p.outputs, jac[0]))

    @_recording_again
    def jacrev(self, *args):
        """The Jacobian, as ``jacobian`` returns it, by reverse mode: one sweep per
        output element (the cheap way when outputs are few).

        >>> at.compile(lambda x: (x ** 2).sum(), np.ones(2)).jacrev(np.array([1.0, 3.0]))
        tensor([2., 6.])
        """
        args = call_arguments(args)
        p = self._lean("value", args)
        if p is None:
            return self._tape_jacobian(args)
        _, jac = p.lean.run(joined(args)[None], jacobian=True)
        return p.rebuild(_lean_jacobian(p, p.outputs, jac[0]))

    @_recording_again
    def jvp(self, primals, tangents):
        """``(f(*primals), J @ tangents)``, f's value and its directional derivative
        along ``tangents`` (one per argument, of its shape), by forward mode.

        >>> f = at.compile(lambda x: x ** 3, np.ones(2))
        >>> f.jvp((np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
        (tensor([1., 8.]), tensor([3., 0.]))
        """
        args = call_arguments(tuple(primals))
        tans = _tangents(args, tangents)
        p = self._lean("value", args)
        if p is None:                          # the tape path: J from the reverse sweep
            p, tape = self._at("value", args, fused=True, checked=True)
            try:
                jac = _jacobian(p, tape, p.outputs, args)
                values = [_plain_copy(tape, o) for o in p.outputs]
            finally:
                p.release(tape)
            tan = [sum(np.tensordot(j.numpy(), t, axes=t.ndim) for j, t in zip(per, tans))
                   for per in jac]
            return p.rebuild(values), p.rebuild(
                [new_leaf(t if t.ndim else float(t), t.shape, F64) for t in tan])
        X, T = joined(args)[None], joined(tans)[None, :, None]
        if p.lean.user_calls is None:
            values, tan = p.lean.tangents(X, T)
        else:                                  # (users' compiled ops have VJPs only)
            values, jac = p.lean.run(X, jacobian=True)
            tan = jac @ T
        return (p.rebuild(_lean_values(p.outputs, values[0])),
                p.rebuild(_lean_values(p.outputs, tan[0, :, 0], tangent=True)))

    @_recording_again
    def hessian(self, *args):
        """The Hessian of a scalar f: ``argument.shape + argument.shape``, nested as
        (argument i, argument j) for several arguments. The gradient is recorded once
        (create_graph) and replayed; one pass gives every row (forward over reverse: a
        tangent lane per argument element through the gradient's program, where it
        runs as a lean program; else one reverse sweep with a lane per row).

        >>> at.compile(lambda x: x[0] ** 2 * x[1], np.ones(2)).hessian(np.array([1.0, 2.0]))
        tensor([[4., 2.],
                [2., 0.]])
        """
        args = call_arguments(args)
        p = self._lean("hessian", args)
        if p is not None:                      # forward over reverse (measured cheaper)
            _, jac = _forward_jacobian(p, joined(args)[None])
            return _per_argument(_lean_jacobian(p, p.grads, jac[0]))
        p, tape = self._at("hessian", args, fused=True, checked=True)
        try:
            jac = _jacobian(p, tape, p.grads, args)
        finally:
            p.release(tape)
        return _per_argument([_per_argument(row) for row in jac])

    # -- many points at once (autotape.func.vmap) ------------------------------------------

    @_recording_again
    def explain(self, *args):
        """What calls at these arguments run, and why not something faster, naming the
        lines of f: a decision taken in Python, an op the lean program does not lower,
        or where f's time-stepping loop stops repeating (only a repeating stretch is
        compiled as a loop). f is recorded once more for it (with line tracing on).

        >>> def f(x):
        ...     for i in range(300):
        ...         x = x * 0.99 + at.sin(x)
        ...     return x.sum()
        >>> print(at.compile(f, np.ones(2)).explain(np.ones(2)))  # doctest: +ELLIPSIS
        f at arguments of shapes (2,): ... rows.
        It runs as a lean program of ... instructions.
        Its loop: ... repetitions of ... instructions (..., line 3), ...% of the program, ...
        """
        return explain(self, call_arguments(args))

    def map_points(self, method, args, device=None):
        """``method`` ("__call__", "grad", "value_and_grad", "jacobian", "hessian") at B
        points: every argument carries a leading axis of length B, and so does every
        result. A recording the lean program runs evaluates all B points in one
        compiled call, in chunks spread over numba's threads; any other is called once
        per point. ``device="cuda"``: one kernel launch on the GPU (gpu.py).
        ``autotape.func.vmap(c.grad)(thetas)`` is the public spelling."""
        if device is not None:
            return self._map_points_on(device, method, args)
        kind = _METHOD_KINDS.get(method)
        if kind is None:
            raise ValueError(f"vmap: a compiled function maps __call__, grad, "
                             f"value_and_grad, jacobian, jacfwd, jacrev or hessian, not "
                             f"{method!r}")
        batch = call_arguments(args)
        if any(a.ndim == 0 for a in batch):
            raise ValueError("vmap: every argument needs a leading axis of points; "
                             f"got shapes {[a.shape for a in batch]}")
        B = batch[0].shape[0]
        if any(a.shape[0] != B for a in batch):
            raise ValueError("vmap: the arguments' leading axes differ: "
                             f"{[a.shape[0] for a in batch]}")
        p = self._lean(kind, [a[0] for a in batch]) if B else None
        if p is None:
            return _stacked([getattr(self, method)(*(a[k] for a in batch))
                             for k in range(B)], method)
        X = np.concatenate([a.reshape(B, -1) for a in batch], axis=1)
        lead = (B,)
        if method == "__call__":
            values, _ = p.lean.run(X)
            return p.rebuild(_lean_values(p.outputs, values, lead))
        if method in ("jacobian", "jacfwd", "jacrev"):
            _, jac = _forward_jacobian(p, X) if method == "jacfwd" else \
                p.lean.run(X, jacobian=True) if method == "jacrev" else _lean_jacobian_at(p, X)
            return p.rebuild(_lean_jacobian(p, p.outputs, jac, lead))
        if method == "hessian":
            _, jac = _forward_jacobian(p, X)
            return _per_argument(_lean_jacobian(p, p.grads, jac, lead))
        _scalar_output(p, method)
        values, jac = p.lean.run(X, jacobian=True)
        (value,), (grads,) = (_lean_values(p.outputs, values, lead),
                              _lean_jacobian(p, p.outputs, jac, lead))
        return grads if method == "grad" else (value, grads)

    def _map_points_on(self, device, method, args):
        """map_points on the GPU: host points give Tensors as on the CPU; device points
        (one argument) give device arrays, (B,) + each result's shape."""
        if device != "cuda":
            raise ValueError(f"vmap: device must be None or 'cuda', not {device!r}")
        if method not in _METHOD_KINDS:
            raise ValueError(f"vmap on the GPU maps __call__, grad, value_and_grad, "
                             f"jacobian, jacfwd, jacrev or hessian, not {method!r}")
        if any(gpu.is_device_array(a) for a in args):
            return self._map_device_points(method, args)
        batch = call_arguments(args)
        B = batch[0].shape[0] if batch and batch[0].ndim else 0
        if not B or any(a.ndim == 0 or a.shape[0] != B for a in batch):
            raise ValueError("vmap: every argument needs the same leading axis of points")
        p = self._gpu_program(_METHOD_KINDS[method], [a[0] for a in batch])
        X = np.concatenate([a.reshape(B, -1) for a in batch], axis=1)
        values, jac = _gpu_run(p, X, method)
        lead = (B,)
        if method == "__call__":
            return p.rebuild(_lean_values(p.outputs, values, lead))
        if method in ("jacobian", "jacfwd", "jacrev"):
            return p.rebuild(_lean_jacobian(p, p.outputs, jac, lead))
        if method == "hessian":
            return _per_argument(_lean_jacobian(p, p.grads, jac, lead))
        _scalar_output(p, method)
        (value,), (grads,) = (_lean_values(p.outputs, values, lead),
                              _lean_jacobian(p, p.outputs, jac, lead))
        return grads if method == "grad" else (value, grads)

    def _map_device_points(self, method, args):
        if len(args) != 1 or not gpu.is_device_array(args[0]):
            raise ValueError("vmap on the GPU: device points must be f's only argument "
                             "(pass host arrays for several)")
        points = args[0]
        shape = tuple(points.shape)
        if not shape:
            raise ValueError("vmap: every argument needs a leading axis of points")
        B = shape[0]
        p = self._gpu_program(_METHOD_KINDS[method], [np.zeros(shape[1:])])
        if method == "hessian":
            _scalar_output(p, method)
        if len(p.outputs) != 1 or p.outputs[0][0] != "row":
            raise ValueError("vmap on the GPU: with device points f must return one "
                             "recorded Tensor")
        out_shape = p.outputs[0][2]
        value = (B,) + out_shape
        if method == "hessian":
            if p.lean.out_slots.size != p.total_in:
                raise ValueError("vmap on the GPU: with device points, the hessian of an f "
                                 "whose gradient is constant in some input; pass host "
                                 "points")
            shapes = (None, (B,) + shape[1:] * 2)
        elif method == "__call__":
            shapes = (value, None)
        elif method in ("jacobian", "jacfwd", "jacrev"):
            shapes = (value, value + shape[1:])
        elif math.prod(out_shape) != 1:
            raise RuntimeError(f"{method}: f must return a single scalar Tensor")
        else:
            shapes = (value if method == "value_and_grad" else None, shape)
        X = gpu.as_device(points)
        if X.ndim != 2:
            X = X.reshape(B, -1)
        values, jac = _gpu_run(p, X, method, shapes)
        if method in ("hessian", "jacobian", "jacfwd", "jacrev", "grad"):
            return jac
        return values if method == "__call__" else (values, jac)

    def _gpu_program(self, kind, args):
        """The lean program for these arguments' shapes, which the GPU runs."""
        p = self._lean(kind, call_arguments(args), eager=False)
        if p is None:
            raise ValueError(
                "vmap on the GPU: f's recording does not run as a lean program (it takes "
                "decisions in Python from traced values, or has ops the lean program does "
                "not lower: max / min / prod, scans, matmul, linear algebra)")
        return p

    # -- recording and replay -------------------------------------------------------------

    def _lean(self, kind, args, one_point=False, eager=True):
        """The program for these arguments' shapes when it runs as a lean program (no
        guards, every row lowered), recording it first if need be; else None. With
        ``one_point``, also None for a program on large arrays (see ``wide``). While
        the kernels compile beside the calls, its lean program is f run eagerly
        (eager_calls.py), unless ``eager`` is false (then they compile here)."""
        key = _key(kind, args)
        p = self._program(key)
        if p is None:
            p = self._programs[key] = self._record(kind, args)
        if p.pending and (not eager or eager_calls.ready(p.tape_path, p.calls)):
            self._lower(p, kind, eager)
        return p if p.lean is not None and not (one_point and p.wide) else None

    def _at(self, kind, args, fused=False, checked=False):
        """The program for these arguments' shapes and a twin of its tape replayed at
        them, which the caller releases; with ``fused``, a program without guards or
        numpy.linalg rows is not replayed here (the caller replays it in the same
        compiled call as its sweep); ``checked``: the caller's ``_lean`` has just
        checked what it reads (see ``_program``)."""
        key = _key(kind, args)
        p = self._programs.get(key) if checked else self._program(key)
        if p is not None:
            if p.pending:
                self._lower(p, kind)
            tape = p.acquire()
            try:
                failed = None if fused and p.fused else _replay(p, tape, args)
                if failed is None:
                    return p, tape
            except BaseException:
                p.release(tape)
                raise
            p.release(tape)
            self._guard_failed(failed)
        p = self._programs[key] = self._record(kind, args)
        if p.pending:
            self._lower(p, kind)
        return p, p.acquire()

    def _program(self, key):
        """The recording for ``key``, unless an array or tensor it read as a constant
        has changed since (then f is recorded again: a call computes with the values
        f would read now, whatever recordings came before)."""
        p = self._programs.get(key)
        if p is not None and p.captured and not _unchanged(p.captured):
            self._programs.pop(key, None)
            return None
        return p

    def _checkpoint(self, p):
        """Sweep the new recording's loop in segments, or warn why it keeps every value."""
        why = "it runs on the tape path (guards, or ops the lean program does not " \
            "lower), which keeps every value"
        if p.lean is not None:
            try:
                p.lean.checkpoint(None if self.checkpoint == "sqrt" else self.checkpoint)
                return
            except NotCheckpointable as e:
                why = str(e)
        warnings.warn(f"at.compile(checkpoint={self.checkpoint!r}): "
                      f"{getattr(self.f, '__name__', 'f')} is not checkpointed: {why}",
                      RuntimeWarning, stacklevel=4)

    def _guard_failed(self, guard):
        """Count a recording forced by a guard; warn once when they keep coming."""
        self._guard_failures += 1
        if self._guard_failures == WARN_AFTER_RECORDINGS:
            warnings.warn(
                f"at.compile: {getattr(self.f, '__name__', 'f')} has been recorded again "
                f"{WARN_AFTER_RECORDINGS} times because a decision taken in Python from "
                f"traced values changed, last at {guard[3]}. Each call that decides "
                "differently records f again. Conditions written with where / clip / "
                "maximum / comparisons are data and replay without recording; a Python "
                "if, .item() or bool() on a traced value is not.",
                RuntimeWarning, stacklevel=4)

    def _record(self, kind, args):
        missing = getattr(self, "_unpickled_without_f", None)
        if missing is not None:
            name, why = missing
            raise RuntimeError(
                f"compile: {name} was pickled without its function ({why}), so this copy "
                f"replays only the recordings it came with, and {kind} at argument shapes "
                f"{[a.shape for a in args]} needs a new one. Define f at module level so "
                "that it pickles, or call it once at these shapes before pickling")
        if guards.current_trace() is not None:
            raise RuntimeError("compile: a function is being compiled inside another one's "
                               "recording; call the inner function directly (its ops are "
                               "recorded into the outer program)")
        close_open_tape()                     # the recording gets a tape of its own
        tape = open_tape()
        tape.whole = True
        dtype = args[0].dtype
        leaves = [new_leaf(a.copy() if a.ndim else float(a), a.shape, dtype).requires_grad_()
                  for a in args]
        trace = guards.Trace(tape)
        for leaf in leaves:
            trace.leaf_rows[id(leaf)] = row_of(leaf, tape)
        with guards.tracing(trace), enable_grad():
            result = self.f(*leaves)
            outs, rebuild = flatten(result)
            if not outs or any(o is None for o in outs):
                raise TypeError("compile: f must return a Tensor, an array, or a tuple / "
                                f"list / dict of them, but returned {result!r}")
            outs = [_output(o, leaves) for o in outs]
            grads = None
            if kind == "hessian":
                if len(outs) != 1 or not isinstance(outs[0], Tensor) or outs[0].size != 1:
                    raise RuntimeError("hessian: f must return a single scalar Tensor")
                grads = list(engine.grad(outs[0], leaves, create_graph=True,
                                         allow_unused=True, materialize_grads=True)) \
                    if outs[0].requires_grad else [None] * len(leaves)
                grads = [_output(g, leaves, zeros_like=leaf)
                         for g, leaf in zip(grads, leaves)]
        if not tape.open:
            raise RuntimeError("compile: f's recording did not stay on one open tape (it "
                               "ran a backward or grad without create_graph=True, or "
                               "recorded more than a tape holds); such an f cannot be "
                               "replayed")
        tape.close()
        tape.own_values()                     # replays must not rewrite f's own tensors
        for t in outs + (grads or []):
            if isinstance(t, Tensor) and t._tape is not None and t._tape is not tape:
                raise RuntimeError("compile: an output of f was recorded outside f's own "
                                   "tape and cannot be replayed")
        p = _Program()
        p.tape, p.twins, p.executor = tape, [], executor_for(tape)
        p.inputs = [trace.leaf_rows[id(leaf)] for leaf in leaves]
        p.shapes = [a.shape for a in args]
        p.input_rows = np.array(p.inputs, np.int64)
        p.sizes = [a.size for a in args]
        p.outputs, p.grads = [_target(t) for t in outs], grads and [_target(g) for g in grads]
        p.rebuild, p.guards, p.plans = rebuild, trace.guards, {}
        tape.frozen = {}                       # (closed: no constant joins it any more)
        p.captured = _read_from_outside(trace)
        p.total_in, p.dtype, p.tape_path, p.calls = sum(p.sizes), dtype, False, False
        p.pending, p.wide, p.fused = True, False, False
        p.lean = eager_calls.EagerProgram(self.f, kind, p.grads if kind == "hessian"
                                          else p.outputs, p.shapes, _output)
        # (a float32 program's replay rounds each op's result as float32 tensors do, but
        # not the eager tier's every step: it compiles its kernels now)
        if dtype == F32 or eager_calls.ready():
            self._lower(p, kind, eager=dtype != F32)
        if dtype == F32 and p.lean is None:
            raise TypeError(
                "compile: a float32 program runs only as a lean program, and this one "
                + ("takes decisions in Python from traced values (guards)" if p.guards else
                   "has an op the lean program does not lower (max / min / prod, a scan, "
                   "matmul or linear algebra)") + "; pass float64 arguments")
        self.traces += 1
        return p

    def _lower(self, p, kind, eager=False):
        """The recording as a lean program, where it lowers (else the tape path runs
        it), and what follows from that; with ``eager``, a program on the tape path
        stays eager code until the replay's kernels are ready too. Another thread's
        call may read p meanwhile: p's fields change from the eager program's to the
        lowered ones each in one assignment, ``pending`` last."""
        tape, dtype = p.tape, p.dtype
        targets = p.grads if kind == "hessian" else p.outputs
        lean = LeanProgram.lower(tape, p.inputs, [v for k, v, _ in targets if k == "row"]) \
            if not p.guards else None
        if lean is None and eager and not eager_calls.ready(tape_path=True):
            p.tape_path = True
            return
        if lean is not None and lean.user_calls and eager and not eager_calls.ready(calls=True):
            p.calls = True
            return
        if lean is not None:
            lean.what = loop_of(self.f)
        # a program on large arrays runs one call like eager code (numpy's forwards and
        # the sweep's segments, on threads), not as a lean program (an instruction per
        # element) or in one fused compiled call (element by element, one thread); a
        # time-stepping loop, whose body the lean program compiles, from larger arrays
        # on; with checkpoints asked for, never (only the lean program keeps them)
        loop = lean is not None and lean.loop is not None
        wide = dtype != F32 and self.checkpoint is None and \
            _wide(tape, LOOP_WIDE_MIN if loop else NUMPY_ROW_MIN)
        p.wide, p.lean = wide, lean
        p.fused = not p.guards and not tape.has_ops(MATMUL + 1, PYTHON_LAST) and not wide
        if self.checkpoint is not None:
            self._checkpoint(p)
        p.pending = False


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
                                                               # it makes 0-d arrays 1-d)


def _output(t, leaves, zeros_like=None):
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


def _target(t):
    """("row", row, shape) for a recorded output, ("const", value, shape) otherwise."""
    if isinstance(t, Tensor):
        return ("row", t._row, t.shape)
    return ("const", t, t.shape)


def _read_from_outside(trace):
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


def _unchanged(captured):
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


def _replay(p, tape, args):
    """Re-evaluate the program at ``args`` in ``tape`` (a twin of its own); returns the
    first guard that says to record again, or None."""
    p.executor.replay(tape, p.input_rows, joined(args), lambda i: _replay_row(tape, i))
    for guard in p.guards:
        fn, operands, expected, _ = guard
        values = [_row_value(tape, v) if kind == "row" else v for kind, v in operands]
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


def _wide(tape, min_size):
    """Whether the recording has elementwise rows of ``min_size`` elements or more."""
    rows, _ = tape.large_arrays(np.arange(tape.nrows), min_size)
    ops = tape.columns().rows[rows, OP]
    return bool(((ops >= UNARY_FIRST) & (ops <= BINARY_LAST)).any())


def pickled(f):
    """(f as bytes, None), or (None, why not): by pickle, else by cloudpickle where it
    is installed (a lambda or a closure; what it writes loads with pickle.loads)."""
    try:
        return pickle.dumps(f), None
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
    if cloudpickle is None:
        return None, why
    try:
        return cloudpickle.dumps(f), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def _replay_row(tape, i):
    """A row the compiled replay leaves to Python: a large elementwise row by the eager
    forward's functions (numpy's, on threads: the values its recording had); a
    numpy.linalg row recomputed by numpy, and the values its VJP reads; a user's op
    (custom.py) by its forward."""
    code, operands, params, _ = tape.row(i)
    if code <= BINARY_LAST:
        out = tape.buffer(i).reshape(tape.shape(i))      # (large: never a 0-d value)
        forward_values(code, *(_row_value(tape, r).reshape(tape.shape(r))
                               for r in operands), out=out)
        return
    if code == SUM or code == MEAN:
        x = _row_value(tape, operands[0]).reshape(tape.shape(operands[0]))
        tape.write(i, reduction_values(code, x, reduced_axes(params, x.ndim)))
        return
    if code == CUSTOM:
        tape.write(i, tape.customs[i].value(
            [_row_value(tape, r).reshape(tape.shape(r)) for r in operands], tape.shape(i)))
        return
    if code not in values_of:
        raise RuntimeError(f"autotape internal error: op {opcode_name(code)} has neither a "
                           "compiled forward nor a numpy one; please report this")
    value, saved = values_of[code](_row_value(tape, operands[0]),
                                   _row_value(tape, operands[1])
                                   if len(operands) > 1 else None, params)
    tape.write(i, value)
    if saved is not None:
        assert tape.op(int(saved_row(params, 0))) == CONST
        tape.write(int(saved_row(params, 0)), saved)


def _key(kind, args):
    """A recording's key: its kind and argument shapes (and float32, for such programs)."""
    shapes = tuple(a.shape for a in args)
    return (kind,) + shapes if args[0].dtype == F64 else (kind, "float32") + shapes



_LEAN_FIELDS = ("lean", "outputs", "grads", "shapes", "sizes", "total_in", "rebuild")


def _lean_state(p):
    return {name: getattr(p, name) for name in _LEAN_FIELDS}


def _unpickled_program(fields):
    """A program that runs only as its lean form (unpickled: no tape, no guards)."""
    p = _Program()
    p.tape, p.twins, p.executor, p.guards, p.plans, p.fused = None, [], None, [], {}, False
    p.wide = p.pending = p.tape_path = p.calls = False   # (it has only its lean form)
    p.captured = ()                            # (what f read stayed on the other side)
    p.inputs = p.input_rows = None
    for name, value in fields.items():
        setattr(p, name, value)
    return p


_METHOD_KINDS = {"__call__": "value", "grad": "value", "value_and_grad": "value",
                 "jacobian": "value", "jacfwd": "value", "jacrev": "value",
                 "hessian": "hessian"}


def _stacked(results, method):
    """Per-point results of a method, stacked on a leading axis (vmap's fallback)."""
    if not results:
        raise ValueError(f"vmap: no points to evaluate {method} at")
    leaves, rebuild = flatten(results[0])
    per_point = [flatten(r)[0] for r in results]
    return rebuild([new_leaf(np.stack([pt[k].numpy() for pt in per_point]),
                             (len(results),) + leaves[k].shape, F64)
                    for k in range(len(leaves))])


def _forward_jacobian(p, X):
    """Values and the Jacobian (B, outputs, inputs) at the points X by forward mode:
    one tangent lane per input element (by reverse through users' compiled ops, which
    have VJPs only)."""
    if p.lean.user_calls is not None:
        return p.lean.run(X, jacobian=True)
    return p.lean.tangents(X, np.eye(p.total_in, dtype=X.dtype)[None])


def _gpu_run(p, X, method, shapes=None):
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


def _lean_jacobian_at(p, X):
    """Values and the Jacobian at the points X, in forward mode where inputs are fewer
    than outputs (a lane per input), else in reverse (a sweep per output)."""
    if p.total_in < p.lean.out_slots.size:
        return _forward_jacobian(p, X)
    return p.lean.run(X, jacobian=True)


def _tangents(args, tangents):
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


def _lean_values(targets, values, lead=(), tangent=False):
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


def _lean_jacobian(p, targets, jac, lead=()):
    """For every target, its derivative with respect to each argument (one Tensor, or
    a tuple for several), from a lean program's Jacobian (row targets' elements by the
    arguments' elements; a leading axis of points as in ``_lean_values``)."""
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
        out.append(_per_argument(per_arg))
    return out


def _plain_copy(tape, target):
    kind, v, shape = target
    data = (_row_value(tape, v) if kind == "row" else v).copy()
    return new_leaf(data if data.ndim else float(data), shape, F64)


def _scalar_output(p, name):
    if len(p.outputs) != 1 or math.prod(p.outputs[0][2]) != 1:
        raise RuntimeError(f"{name}: f must return a single scalar Tensor")
    return p.outputs[0]


def _sweep_replayed(p, tape, targets, lanes, args):
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
            _replay(p, tape, args)             # (the value may still be read)
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


def _jacobian(p, tape, targets, args):
    """For every target i and argument j, d target_i / d argument_j with shape
    ``target_i.shape + argument_j.shape``, from one sweep with a lane per element of
    the targets."""
    sizes = [math.prod(shape) for _, _, shape in targets]
    total = sum(sizes)
    if not total and p.fused:
        _replay(p, tape, args)
    rows = _sweep_replayed(p, tape, targets, total, args) if total else [np.zeros((0,) + s)
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


def _per_argument(values):
    return values[0] if len(values) == 1 else tuple(values)
