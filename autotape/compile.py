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
import math
import pickle
import warnings

import numpy as np

from . import eager_calls, engine, gpu, guards
from .explain import explain
from .executor import executor_for
from .pytree import flatten
from .grad_mode import enable_grad
from .opcodes import MATMUL, PYTHON_LAST
from .ops.recording import row_of
from .checkpointing import NotCheckpointable
from .program import LeanProgram, loop_of
from .tape import close_open_tape, open_tape
from .complex_numbers import ComplexTensor
from .complex_numbers.tensor import real_view
from .tensor import F32, F64, Tensor, float_leaf, is_complex_data, new_leaf
from .batched import (METHOD_KINDS, forward_jacobian, gpu_run, lean_jacobian, lean_jacobian_at,
                      lean_values, mapped_method, point_count, stacked)
from .pickling import lean_state, pickled, unpickled_program
from .recording import (Recording, call_arguments, has_wide_rows, joined, jvp_tangents,
                        output_of, per_argument, plain_copy, read_from_outside,
                        recording_key, replay, scalar_output, sweep_replayed, tape_jacobian,
                        target_of, unchanged)
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


def _recording_again(method):
    """A public call, made again once after f run eagerly (while the kernels compile:
    eager_calls.py) returned outputs of another structure than its recording: the
    recording at those shapes is dropped, and the call records f again."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except eager_calls.RecordAgain:
            self._forget_point()
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
        self._one_point = None                 # (key, program, one scalar output) of the
        #                                        last call at one point (_remember_point)
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
        programs = {key: lean_state(p) for key, p in self._programs.items()
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
        self._programs = {key: unpickled_program(fields) for key, fields in
                          state["programs"].items()}

    # -- the public calls -----------------------------------------------------------------

    @_recording_again
    def __call__(self, *args):
        """f(*args), from the replayed tape (Tensors in f's output structure)."""
        fast = self._ready_at(args)
        if fast is not None:
            p = fast[1]
            values = p.lean.values_at(args[0])
            if values is not None:
                return p.rebuild(lean_values(p.outputs, values[0]))
        args = call_arguments(args)
        p = self._lean("value", args, one_point=True)
        if p is not None:
            self._remember_point(args, p)
            values, _ = p.lean.run(joined(args)[None])
            return p.rebuild(lean_values(p.outputs, values[0]))
        p, tape = self._at("value", args, checked=True)
        try:
            return p.rebuild([plain_copy(tape, o) for o in p.outputs])
        finally:
            p.release(tape)

    def value_and_grad(self, *args):
        """``(f(*args), gradient)`` for a scalar f; the gradient has the structure of
        the arguments (one Tensor, or a tuple for several)."""
        fast = self._ready_at(args)
        if fast is not None and fast[2]:
            a = args[0]
            grad = np.empty(a.shape)
            value = fast[1].lean.gradient_at(a, grad)
            if value is not None:
                return float_leaf(value), new_leaf(grad, a.shape, F64)
        return self._value_and_grad(args)

    @_recording_again
    def _value_and_grad(self, args):
        args = call_arguments(args)
        p = self._lean("value", args, one_point=True)
        if p is not None:
            out = scalar_output(p, "value_and_grad")
            self._remember_point(args, p)
            values, jac = p.lean.run(joined(args)[None], jacobian=True)
            (value,), (grads,) = (lean_values(p.outputs, values[0]),
                                  lean_jacobian(p, p.outputs, jac[0]))
            return value, grads
        p, tape = self._at("value", args, fused=True, checked=True)
        try:
            out = scalar_output(p, "value_and_grad")
            g = [new_leaf(g if g.ndim else float(g), g.shape, F64)
                 for g in sweep_replayed(p, tape, [out], 1, args)]
            return plain_copy(tape, out), (g[0] if len(g) == 1 else tuple(g))
        finally:
            p.release(tape)

    def _remember_point(self, args, p):
        """Keep the program a call at one float64 array ran, for ``_ready_at``."""
        if len(args) == 1 and args[0].dtype == F64 and not p.pending:
            self._one_point = (recording_key("value", args), p, len(p.outputs) == 1 and
                               p.outputs[0][0] == "row" and p.outputs[0][2] == ())

    def _forget_point(self):
        """Drop ``_remember_point``'s program: its recording is about to be replaced (a
        call on another thread that read it first finishes with it, as if it came
        first)."""
        self._one_point = None

    def _ready_at(self, args):
        """``_remember_point``'s (key, program, one scalar output) of the last call at one
        point, where ``args`` is one float64 array of its shape (C order) and what the
        program read as constants is unchanged: a small model's call then goes straight
        to its kernel (~5 us less); else None."""
        fast = self._one_point
        if fast is None or len(args) != 1:
            return None
        a, (key, p, _) = args[0], fast
        if type(a) is np.ndarray and a.dtype is F64 and a.shape == key[1] and \
                a.flags.c_contiguous and not p.pending and p.lean is not None and \
                (not p.captured or unchanged(p.captured)):
            return fast
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
            _, jac = lean_jacobian_at(p, joined(args)[None])
            return p.rebuild(lean_jacobian(p, p.outputs, jac[0]))
        return self._tape_jacobian(args)

    def _tape_jacobian(self, args):
        p, tape = self._at("value", args, fused=True, checked=True)   # (after _lean)
        try:
            jac = tape_jacobian(p, tape, p.outputs, args)
        finally:
            p.release(tape)
        return p.rebuild([per_argument(per_input) for per_input in jac])

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
        _, jac = forward_jacobian(p, joined(args)[None])
        return p.rebuild(lean_jacobian(p, p.outputs, jac[0]))

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
        return p.rebuild(lean_jacobian(p, p.outputs, jac[0]))

    @_recording_again
    def jvp(self, primals, tangents):
        """``(f(*primals), J @ tangents)``, f's value and its directional derivative
        along ``tangents`` (one per argument, of its shape), by forward mode.

        >>> f = at.compile(lambda x: x ** 3, np.ones(2))
        >>> f.jvp((np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
        (tensor([1., 8.]), tensor([3., 0.]))
        """
        args = call_arguments(tuple(primals))
        tans = jvp_tangents(args, tangents)
        p = self._lean("value", args)
        if p is None:                          # the tape path: J from the reverse sweep
            p, tape = self._at("value", args, fused=True, checked=True)
            try:
                jac = tape_jacobian(p, tape, p.outputs, args)
                values = [plain_copy(tape, o) for o in p.outputs]
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
        return (p.rebuild(lean_values(p.outputs, values[0])),
                p.rebuild(lean_values(p.outputs, tan[0, :, 0], tangent=True)))

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
            _, jac = forward_jacobian(p, joined(args)[None])
            return per_argument(lean_jacobian(p, p.grads, jac[0]))
        p, tape = self._at("hessian", args, fused=True, checked=True)
        try:
            jac = tape_jacobian(p, tape, p.grads, args)
        finally:
            p.release(tape)
        return per_argument([per_argument(row) for row in jac])

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
        kind = METHOD_KINDS[mapped_method(method, "a compiled function")]
        batch = call_arguments(args)
        B = point_count(batch)
        p = self._lean(kind, [a[0] for a in batch]) if B else None
        if p is None:
            return stacked([getattr(self, method)(*(a[k] for a in batch))
                             for k in range(B)], method)
        X = np.concatenate([a.reshape(B, -1) for a in batch], axis=1)
        lead = (B,)
        if method == "__call__":
            values, _ = p.lean.run(X)
            return p.rebuild(lean_values(p.outputs, values, lead))
        if method in ("jacobian", "jacfwd", "jacrev"):
            _, jac = forward_jacobian(p, X) if method == "jacfwd" else \
                p.lean.run(X, jacobian=True) if method == "jacrev" else lean_jacobian_at(p, X)
            return p.rebuild(lean_jacobian(p, p.outputs, jac, lead))
        if method == "hessian":
            _, jac = forward_jacobian(p, X)
            return per_argument(lean_jacobian(p, p.grads, jac, lead))
        scalar_output(p, method)
        values, jac = p.lean.run(X, jacobian=True)
        (value,), (grads,) = (lean_values(p.outputs, values, lead),
                              lean_jacobian(p, p.outputs, jac, lead))
        return grads if method == "grad" else (value, grads)

    def _map_points_on(self, device, method, args):
        """map_points on the GPU: host points give Tensors as on the CPU; device points
        (one argument) give device arrays, (B,) + each result's shape."""
        if device != "cuda":
            raise ValueError(f"vmap: device must be None or 'cuda', not {device!r}")
        mapped_method(method, "a compiled function on the GPU")
        if any(gpu.is_device_array(a) for a in args):
            return self._map_device_points(method, args)
        batch = call_arguments(args)
        B = point_count(batch)
        if not B:
            raise ValueError("vmap on the GPU: no points to evaluate at")
        p = self._gpu_program(METHOD_KINDS[method], [a[0] for a in batch])
        X = np.concatenate([a.reshape(B, -1) for a in batch], axis=1)
        values, jac = gpu_run(p, X, method)
        lead = (B,)
        if method == "__call__":
            return p.rebuild(lean_values(p.outputs, values, lead))
        if method in ("jacobian", "jacfwd", "jacrev"):
            return p.rebuild(lean_jacobian(p, p.outputs, jac, lead))
        if method == "hessian":
            return per_argument(lean_jacobian(p, p.grads, jac, lead))
        scalar_output(p, method)
        (value,), (grads,) = (lean_values(p.outputs, values, lead),
                              lean_jacobian(p, p.outputs, jac, lead))
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
        p = self._gpu_program(METHOD_KINDS[method], [np.zeros(shape[1:])])
        if method == "hessian":
            scalar_output(p, method)
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
        values, jac = gpu_run(p, X, method, shapes)
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
        key = recording_key(kind, args)
        p = self._program(key)
        if p is None:
            self._forget_point()
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
        key = recording_key(kind, args)
        p = self._programs.get(key) if checked else self._program(key)
        if p is not None:
            if p.pending:
                self._lower(p, kind)
            tape = p.acquire()
            try:
                failed = None if fused and p.fused else replay(p, tape, args)
                if failed is None:
                    return p, tape
            except BaseException:
                p.release(tape)
                raise
            p.release(tape)
            self._guard_failed(failed)
        self._forget_point()
        p = self._programs[key] = self._record(kind, args)
        if p.pending:
            self._lower(p, kind)
        return p, p.acquire()

    def _program(self, key):
        """The recording for ``key``, unless an array or tensor it read as a constant
        has changed since (then f is recorded again: a call computes with the values
        f would read now, whatever recordings came before)."""
        p = self._programs.get(key)
        if p is not None and p.captured and not unchanged(p.captured):
            self._forget_point()
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
            outs = [output_of(o, leaves) for o in outs]
            grads = None
            if kind == "hessian":
                if len(outs) != 1 or not isinstance(outs[0], Tensor) or outs[0].size != 1:
                    raise RuntimeError("hessian: f must return a single scalar Tensor")
                grads = list(engine.grad(outs[0], leaves, create_graph=True,
                                         allow_unused=True, materialize_grads=True)) \
                    if outs[0].requires_grad else [None] * len(leaves)
                grads = [output_of(g, leaves, zeros_like=leaf)
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
        p = Recording()
        p.tape, p.twins, p.executor = tape, [], executor_for(tape)
        p.inputs = [trace.leaf_rows[id(leaf)] for leaf in leaves]
        p.shapes = [a.shape for a in args]
        p.input_rows = np.array(p.inputs, np.int64)
        p.sizes = [a.size for a in args]
        p.outputs, p.grads = [target_of(t) for t in outs], grads and [target_of(g) for g in grads]
        p.rebuild, p.guards, p.plans = rebuild, trace.guards, {}
        tape.frozen = {}                       # (closed: no constant joins it any more)
        p.captured = read_from_outside(trace)
        p.total_in, p.dtype, p.tape_path, p.calls = sum(p.sizes), dtype, False, False
        p.pending, p.wide, p.fused = True, False, False
        p.lean = eager_calls.EagerProgram(self.f, kind, p.grads if kind == "hessian"
                                          else p.outputs, p.shapes, output_of)
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
            has_wide_rows(tape, LOOP_WIDE_MIN if loop else NUMPY_ROW_MIN)
        p.wide, p.lean = wide, lean
        p.fused = not p.guards and not tape.has_ops(MATMUL + 1, PYTHON_LAST) and not wide
        if self.checkpoint is not None:
            self._checkpoint(p)
        p.pending = False


                                                               # it makes 0-d arrays 1-d)


