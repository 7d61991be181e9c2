"""Differentiating code that is already numba-compiled: ``at.jit(fn)``.

fn is a ``numba.njit`` function (or a plain one numba can compile) written for floats.
``at.jit`` compiles it a second time with its float arguments replaced by
differentiable values (kernels/active.py): every arithmetic op, comparison and
``math`` / numpy scalar function appends a row to a tape that lives in compiled code,
the arrays fn allocates (``np.zeros``, ``np.empty``, ``np.ones``) hold such values, and
the njit functions fn calls are compiled the same way. A call records fn at its
arguments (loops and branches as they run) and sweeps the tape backwards with the op
table's partials, all in compiled code.

>>> import numba
>>> @numba.njit
... def f(x, k):
...     for _ in range(3):
...         x = x * k + math.sin(x)
...     return x
>>> at.jit(f).grad(0.5, 2.0)
(tensor(7.8997146), tensor(7.26941224))
"""
import ast
import builtins
import functools
import hashlib
import importlib
import inspect
import io
import math  # noqa: F401  (the examples' njit functions use it)
import os
import pickle
import re
import sys
import textwrap
import threading
import types

import numba
import numpy as np
from numba.core.caching import NullCache
from numba.core.dispatcher import Dispatcher
from numba.core.errors import NumbaError

from . import eager_calls, jit_python
from .batched import mapped_method, point_count, stacked
from .custom import CustomOp
from .grad_mode import is_grad_enabled
from . import engine
from .kernels import active, background
from .kernels.cache import (cache_dir, code_of, compile_notice, generated_file, named_value,
                            import_generated, on_disk)
from .kernels.active import ActiveArray, ActiveType
from .kernels.instruction_format import I_A, I_B, I_C, I_N, I_OP, I_OUT, I_SA, I_SB, WIDTH
from .kernels.pieces import aligned_pieces
from .opcodes import CONST, SOURCE_LAST
from .reroll import reroll
from .program import LeanProgram, loop_of
from .tensor import F64, Tensor, float_leaf, new_leaf
from .thread_state import here
from .tuning import KEEP_PROGRAMS, KEEP_TAPE_BYTES, PYTHON_SWEEP_MAX, START_ROWS

JIT_METHODS = ("__call__", "grad", "value_and_grad", "jacobian")   # (vmap maps these)

__all__ = ["jit", "Jit"]

ALLOCATORS = {np.zeros: active.zeros, np.empty: active.empty, np.ones: active.ones,
              np.zeros_like: active.zeros_like, np.empty_like: active.empty_like,
              np.ones_like: active.ones_like, np.full: active.full, np.array: active.array}
_EVERY_PROCESS = ("in each process: it reads values numba cannot keep on disk, see "
                  "docs/guide/numba.md; the calls after this one take microseconds")


def jit(fn, argnums=None):
    """fn, a numba-compiled function of floats (scalars or float arrays), made
    differentiable: ``.value_and_grad``, ``.grad``, ``.jacobian`` take fn's arguments,
    and calling it gives fn's value. ``argnums`` (an int or a tuple of them, as jax's):
    the arguments differentiated, the others data (integer arrays too) that get no
    gradient; all of them by default. See jit.py.

    >>> import numba
    >>> @numba.njit
    ... def energy(q):
    ...     e = 0.0
    ...     for i in range(q.size - 1):
    ...         e += (q[i + 1] - q[i]) ** 2
    ...     return e
    >>> at.jit(energy).grad(np.array([0.0, 1.0, 3.0]))
    tensor([-2., -2.,  4.])
    >>> @numba.njit
    ... def misfit(k, data):
    ...     e = 0.0
    ...     for d in data:
    ...         e += (k * d - 1.0) ** 2
    ...     return e
    >>> at.jit(misfit, argnums=0).grad(2.0, np.array([0.5, 1.0]))
    tensor(2.)
    """
    return Jit(fn, argnums)


class Jit:
    """A numba function made differentiable (see ``at.jit``).

    >>> import numba
    >>> sq = at.jit(numba.njit(lambda x: x * x))
    >>> sq.value_and_grad(3.0)
    (tensor(9.), tensor(6.))
    """

    def __init__(self, fn, argnums=None):
        if isinstance(fn, Jit):
            fn = fn.fn
        if not callable(fn):
            raise TypeError(f"at.jit: expected a function, got {type(fn).__name__}")
        self.fn = fn
        self.argnums = _argnums(argnums)
        self._tuple = isinstance(argnums, (tuple, list))   # (results as a tuple, as jax)
        self.name = getattr(fn, "__name__", "fn")
        self._recorders, self._trees, self._helper_args = {}, {}, {}
        self._python_fails = False   # (fn raised in Python mode: record compiled only)
        self._programs = {}      # argument shapes -> (lean program, output shape), or
        self._lock = threading.Lock()   # False where fn takes decisions on values
        self._rows = START_ROWS

    def __repr__(self):
        return f"<autotape.jit {self.name!r}>"

    def __getstate__(self):
        """fn only: the recorders and programs are made again where it is loaded."""
        return {"fn": self.fn, "argnums": self.argnums if self._tuple or self.argnums is None
                else self.argnums[0]}

    def __setstate__(self, state):
        self.__init__(state["fn"], state.get("argnums"))

    # -- public calls ------------------------------------------------------------------------

    def __call__(self, *args):
        """fn's value at args (a Tensor of its shape). Tensors that require grad among
        the differentiated arguments give a result on their graph (one custom op whose
        VJP is this recording's sweep), so ``at.jit`` code composes with eager code:
        ``loss = sim(params); loss.backward()``.

        >>> import numba
        >>> sim = at.jit(numba.njit(lambda k: k * k + 1.0))
        >>> k = at.tensor(3.0, requires_grad=True)
        >>> sim(k).backward(); k.grad
        tensor(6.)
        """
        tracked = [k for k, a in enumerate(args) if isinstance(a, Tensor) and
                   a.requires_grad and self._differentiated(k)]
        if tracked and is_grad_enabled():
            return self._on_the_graph(args, tracked)
        args = [a.detach().numpy() if isinstance(a, Tensor) else a for a in args]
        values, _, shape, _ = self._evaluate(args, False)
        return _tensor(values.reshape(shape))

    def _on_the_graph(self, args, tracked):
        """fn(*args) recorded as one custom op of the Tensors ``tracked`` (positions)."""
        def filled(values):
            given = [a.detach().numpy() if isinstance(a, Tensor) else a for a in args]
            for k, v in zip(tracked, values):
                given[k] = np.asarray(v, np.float64)
            return given

        def forward(*values):
            out, _, shape, _ = self._evaluate(filled(values), False)
            return out.reshape(shape)

        def vjp(inputs, output, g):
            if isinstance(g, Tensor):
                raise RuntimeError(f"at.jit({self.name}): its gradient is computed once "
                                   "(a sweep of the recording), not recorded, so it cannot "
                                   "be differentiated again (create_graph=True, Hessians "
                                   "through it); use its .jacobian / .jacfwd, or "
                                   "at.compile for higher derivatives")
            given = filled(inputs)
            _, jac, _, wrt = self._evaluate(given, True)
            flat = np.reshape(g, -1) @ jac if jac.size else np.zeros(0)
            cotangents, start = {}, 0
            for k, a in zip([k for k in range(len(given)) if self._differentiated(k)], wrt):
                cotangents[k] = flat[start:start + a.size].reshape(a.shape)
                start += a.size
            return tuple(cotangents[k] for k in tracked)

        op = CustomOp(forward, vjp, name=self.name)
        return op(*[args[k] for k in tracked])

    def value_and_grad(self, *args):
        """``(fn(*args), gradient)`` for a scalar fn; the gradient has the arguments'
        structure (one Tensor, or a tuple for several)."""
        if self.argnums is None and len(args) == 1:   # (a small model's call: ~3 us less)
            a = args[0]
            if type(a) is np.ndarray and a.dtype == F64 and a.flags.c_contiguous:
                program = self._programs.get((a.shape,))
                if program and program[1] == () and eager_calls.ready():
                    grad = np.empty(a.shape)
                    value = program[0].gradient_at(a, grad)
                    if value is not None:
                        return float_leaf(value), new_leaf(grad, a.shape, F64)
        values, jac, shape, arrays = self._evaluate(args, True)
        if values.size != 1:
            raise RuntimeError(f"at.jit: grad needs {self.name} to return a scalar, but it "
                               f"returned shape {shape}")
        return _tensor(values.reshape(shape)), self._per_argument(_split(jac[0], arrays, ()))

    def grad(self, *args):
        """The gradient of a scalar fn with respect to every argument."""
        return self.value_and_grad(*args)[1]

    def jacobian(self, *args):
        """d output / d argument, shape ``output.shape + argument.shape`` (a tuple over
        arguments for several): one reverse sweep per output element."""
        values, jac, shape, arrays = self._evaluate(args, True)
        return self._per_argument(_split(jac, arrays, shape))

    def jacfwd(self, *args):
        """The Jacobian, as ``jacobian`` gives it, by forward mode (a tangent lane per
        argument element, one pass) where fn's recording is replayed (it took no
        decisions on values); else by reverse sweeps.

        >>> import numba
        >>> at.jit(numba.njit(lambda t: np.array([t * t, 3.0 * t]))).jacfwd(2.0)
        tensor([4., 3.])
        """
        arrays = self._arguments(args)
        program = self._program(arrays)
        if program is None:
            return self.jacobian(*args)
        lean, shape = program
        wrt = self._wrt(arrays)
        X = np.concatenate([a.reshape(-1) for a in wrt])[None]
        _, tangents = lean.tangents(X, np.eye(X.shape[1])[None])
        return self._per_argument(_split(tangents[0], wrt, shape))

    def map_points(self, method, args, device=None):
        """``method`` at B points (a leading axis on every argument): one compiled call
        for all of them where fn's recording takes no decisions on values (its lean
        program, on every core), else one recording and sweep per point
        (autotape.func.vmap's spelling)."""
        if device is not None:
            raise ValueError("vmap: at.jit functions run on the CPU (their recording is "
                             "CPU code); device= applies to at.compile's")
        mapped_method(method, "at.jit", JIT_METHODS)
        batch = [np.asarray(a, np.float64) if self._differentiated(k) else np.asarray(a)
                 for k, a in enumerate(args)]
        B = point_count(batch)
        # (with argnums, the data arguments' values are in the recording: per point)
        program = self._program([a[0] for a in batch]) if B > 1 and \
            self.argnums is None else None
        if program is None:
            return stacked([getattr(self, method)(*(a[k] for a in batch)) for k in range(B)],
                           method)
        lean, shape = program
        arrays = [a[0] for a in batch]
        X = np.concatenate([a.reshape(B, -1) for a in batch], axis=1)
        values, jac = lean.run(X, jacobian=method != "__call__")
        value = _tensor(values.reshape((B,) + shape))
        if method == "__call__":
            return value
        if method == "jacobian":
            return self._per_argument(_split(jac, arrays, shape, (B,)))
        if values.shape[1] != 1:
            raise RuntimeError(f"at.jit: grad needs {self.name} to return a scalar, but it "
                               f"returned shape {shape}")
        grads = self._per_argument(_split(jac[:, 0], arrays, (), (B,)))
        return grads if method == "grad" else (value, grads)

    def _evaluate(self, args, jacobian):
        """(values flat, d values / d inputs (outputs, inputs) or None, output shape, the
        arguments as arrays): the lean program's replay where fn's recording at these
        shapes took no decisions on values, else a recording and its sweeps."""
        arrays = self._arguments(args)
        wrt = self._wrt(arrays)
        key = self._key(arrays)
        program = self._programs.get(key)
        if program and eager_calls.ready():    # (else its kernels compile beside)
            lean, shape = program
            if jacobian and len(wrt) == 1:     # (the generated kernel straight away)
                grad = np.empty((1, wrt[0].size))
                value = lean.gradient_at(wrt[0], grad[0])
                if value is not None:
                    return np.array([value]), grad, shape, wrt
            X = np.concatenate([a.reshape(-1) for a in wrt])[None] if len(wrt) > 1 \
                else wrt[0].reshape(1, -1)
            values, jac = lean.run(X, jacobian=jacobian)
            return values[0], (jac[0] if jacobian else None), shape, wrt
        try:
            values, rows, tape, shape, decisions = self._record(arrays)
            total = sum(a.size for a in wrt)
            jac = np.stack([self._gradient(tape, r, total) for r in rows]) \
                if jacobian else None
            if program is None:
                if len(self._programs) >= KEEP_PROGRAMS:
                    self._programs.clear()     # (data arguments seen once each)
                lean = None if decisions else _recording_as_program(tape, total, rows, values)
                if lean is not None:
                    lean.what = loop_of(self.fn)
                self._programs[key] = False if decisions else (lean, shape)
        finally:
            _drop_large_buffers()
        return values, jac, shape, wrt

    def _per_argument(self, values):
        return tuple(_per_argument(values[k:k + 1]) for k in range(len(values))) \
            if self._tuple else _per_argument(values)

    def _arguments(self, args):
        """The arguments as arrays: float64 where differentiated, data as given."""
        if self.argnums is not None and self.argnums[-1] >= len(args):
            raise ValueError(f"at.jit({self.name}): argnums {self.argnums} names an argument "
                             f"past the {len(args)} given")
        return [_argument(a, k, self.name) if self._differentiated(k) else
                _data(a, k, self.name) for k, a in enumerate(args)]

    def _differentiated(self, k):
        return self.argnums is None or k in self.argnums

    def _wrt(self, arrays):
        return [a for k, a in enumerate(arrays) if self._differentiated(k)]

    def _key(self, arrays):
        """A program's key: the arguments' shapes, and the data arguments' dtypes and
        bits (the recording holds their values as constants)."""
        key = tuple(a.shape for a in arrays)
        if self.argnums is None:
            return key
        data = hashlib.blake2b(digest_size=16)
        for k, a in enumerate(arrays):
            if not self._differentiated(k):
                data.update(f"{k}:{a.dtype.str};".encode())
                data.update(a.tobytes())
        return key + (data.hexdigest(),)

    def _program(self, arrays):
        """(lean program, output shape) for arguments of these shapes, recording at
        ``arrays`` first if need be; None where fn takes decisions on values, or while
        the lean program's kernels compile beside the calls (eager_calls.py)."""
        key = self._key(arrays)
        if key not in self._programs:
            self._evaluate(arrays, False)
        return (self._programs.get(key) or None) if eager_calls.ready() else None

    # -- recording --------------------------------------------------------------------------

    def _record(self, arrays):
        """Record fn at the arguments: (output values, their rows, (ops, values, rows
        used), output shape, the decisions it took on recorded values)."""
        ndims = [a.ndim if self._differentiated(k) else None for k, a in enumerate(arrays)]
        recorder = self._recorder(ndims)
        inputs = [a if a.ndim else a.item() for a in arrays]
        if not recorder.signatures:
            recorded = self._record_beside(recorder, ndims, arrays, inputs)
            if recorded is not None:
                return recorded
        while True:
            rows = self._rows
            header, ops, values = _buffers(rows)
            try:
                if recorder.signatures:
                    out_values, out_rows, shape = recorder(header, *inputs)
                else:                          # (its first call compiles it: say so)
                    with compile_notice(f"{self.name} for at.jit (its ops recorded in "
                                        "compiled code)", once=_EVERY_PROCESS if
                                        isinstance(recorder._cache, NullCache) else None):
                        out_values, out_rows, shape = recorder(header, *inputs)
            except NumbaError as e:
                raise _clear_error(self.name, e) from None
            used = int(header[active.H_ROWS])
            if not header[active.H_OVERFLOW]:
                break
            self._rows = max(used + used // 4, 2 * rows)
        return (out_values, out_rows, (ops.reshape(-1, 3), values, used), tuple(shape),
                int(header[active.H_DECISIONS]))

    def _recorder(self, ndims):
        key = tuple(ndims)
        recorder = self._recorders.get(key)
        if recorder is None:
            with self._lock:
                recorder = self._recorders.get(key)
                if recorder is None:
                    tree = _Tree()
                    tree.user = _transformed(self.fn, tree)
                    recorder = _make_recorder(tree.user, ndims, self.name, tree)
                    self._trees[key] = tree
                    self._recorders[key] = recorder
        return recorder

    def _record_beside(self, recorder, ndims, arrays, inputs):
        """A recording while numba compiles the recorder in a helper process: fn run by
        Python (jit_python.py; the same rows); None where the compiled recorder is to
        record: it is compiled or on disk, or cannot be compiled beside (background
        compiling off, a tree read values it cannot name), or Python cannot run fn as
        numba would (the call then waits for the helper)."""
        tree = self._trees[tuple(ndims)]
        if engine.FORCE_PYTHON_TIER[0]:
            return self._record_in_python(tree, ndims, inputs)
        if self._python_fails or tree.module is None or not background.enabled() or \
                not all(a.dtype in _PYTHON_DTYPES for a in arrays):
            return None          # (float32 or int32 data: numpy's promotions differ)
        signature = tuple(numba.typeof(a) for a in (np.empty(active.HEADER, np.int64),
                                                    *inputs))
        key = f"at.jit {tree.module[0]} {signature}"
        was = background.state(key)
        if was is None and on_disk(recorder):
            return None
        if was is None:
            recipe = tree.recipe(*tree.module, signature)
            if recipe is None:
                return None
            path = os.path.join(os.path.dirname(tree.module[1]), "recipe_" + hashlib.sha256(
                key.encode()).hexdigest()[:24] + ".pkl")
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(recipe)
            os.replace(tmp, path)
            self._helper_args[key] = [path]
        what = f"{loop_of(self.fn)[len('the loop in '):]} for at.jit"
        if background.beside(key, was, _HELPER, self._helper_args.get(key, []), what, False,
                             key, cache_dir(), meanwhile="its calls record in Python until "
                             "it is ready"):
            return None
        try:
            return self._record_in_python(tree, ndims, inputs)
        except jit_python.TooLong:
            pass
        except Exception:                      # (numba's recording says what, or records)
            self._python_fails = True
        background.beside(key, background.state(key), _HELPER, [], what, True, key,
                          cache_dir())
        return None

    def _record_in_python(self, tree, ndims, inputs):
        """The recording by Python (None where fn had no source to transform)."""
        if id(tree.user) not in tree.python:
            return None
        values, rows, tape, shape, decisions = jit_python.record(
            tree.python_function(tree.user), inputs, ndims)
        return values, rows, tape, tuple(shape), decisions

    def _gradient(self, tape, row, total):
        """d output(row) / d the inputs, flat (the inputs are the tape's first rows)."""
        ops, values, used = tape
        if row < 0:                            # a constant output
            return np.zeros(total)
        adj, reached = _sweep_scratch(max(used, 1))
        _sweep_for(used)(ops, values, used, row, adj, reached)
        return adj[:total].copy()


# the arguments' dtypes Python mode takes: numpy's scalars of these combine with Python
# numbers as numba's do (not float32's or int32's under numpy 2's promotion rules)
_PYTHON_DTYPES = (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_))
_SWEEP_JOB = "at.jit's reverse sweep"
_SWEEP_HELPER = ("import numpy as np\nfrom autotape.kernels.active import sweep\n"
                 "sweep(np.zeros((1, 3), np.int64), np.zeros(1), 1, 0, np.zeros(1), "
                 "np.zeros(1, np.bool_))\n")
_sweep_ready = []


def _sweep_for(rows):
    """The reverse sweep of at.jit's recordings: compiled, or, until a helper has
    compiled it (a first call on a cold cache), for a recording of at most
    PYTHON_SWEEP_MAX rows, the same code run by Python (the op table's partials are
    plain functions there: the same numbers)."""
    if engine.FORCE_PYTHON_TIER[0]:
        return active.sweep.py_func
    if _sweep_ready or rows > PYTHON_SWEEP_MAX:
        return active.sweep
    if active.sweep.signatures or on_disk(active.sweep) or not background.enabled() or \
            background.beside(_SWEEP_JOB, background.state(_SWEEP_JOB), _SWEEP_HELPER, (),
                              _SWEEP_JOB, False, _SWEEP_JOB, cache_dir()):
        _sweep_ready.append(True)
        return active.sweep
    return active.sweep.py_func


def _split(jac, arrays, shape, lead=()):
    """A Jacobian block (lead + outputs, inputs) per argument, shaped lead + shape +
    the argument's shape."""
    out, start = [], 0
    for a in arrays:
        block = jac[..., start:start + a.size]
        out.append(_tensor(block.reshape(lead + shape + a.shape)))
        start += a.size
    return out


def _recording_as_program(tape, total, out_rows, out_values):
    """The recording as a lean program (program.py): one slot per row, one instruction
    per op row; constants one slot per distinct value (fn pushes a constant at every
    op that meets a number, and the same slot in every repetition lets the loop finder
    see one body). Distinct means distinct bits: 0.0 and -0.0 (atan2, 1 / x) and
    NaNs of different payloads each keep a slot. Cells written one by one are rolled
    back into array instructions (reroll.py)."""
    ops, values, used = tape
    op, a, b = ops[:used, 0], ops[:used, 1], ops[:used, 2]
    rows = np.arange(used)
    const_rows = rows[op == CONST]
    const_values = np.ascontiguousarray(values[const_rows], np.float64)
    _, first, inverse = np.unique(const_values.view(np.int64), return_index=True,
                                  return_inverse=True)
    distinct = const_values[first]
    canonical = rows.copy()
    canonical[const_rows] = const_rows[first][inverse]
    q = rows[op > SOURCE_LAST]
    instr = np.zeros((q.size, WIDTH), np.int64)
    instr[:, I_OP], instr[:, I_OUT] = op[q], q
    instr[:, I_A] = canonical[a[q]]
    instr[:, I_B] = np.where(b[q] >= 0, canonical[np.maximum(b[q], 0)], -1)
    instr[:, I_C] = -1
    instr[:, I_N] = 1
    instr[:, I_SA] = 1
    instr[:, I_SB] = (b[q] >= 0).astype(np.int64)
    const_slots, const_vals = const_rows[first], distinct
    out_slots, nslots = np.array(out_rows, np.int64), used
    for k in np.nonzero(out_slots < 0)[0]:     # a constant output: a slot of its own
        const_slots = np.append(const_slots, nslots)
        const_vals = np.append(const_vals, out_values[k])
        out_slots[k] = nslots
        nslots += 1
    pool, in_slots = np.zeros(1, np.int64), np.arange(total)
    rolled = reroll(instr, nslots, in_slots, const_slots, const_vals, out_slots)
    if rolled is not None:                 # (cells written one by one, as arrays again)
        instr, pool, nslots, const_slots, const_vals, out_slots = rolled
    instr, divisor, _ = aligned_pieces(instr, np.ones(instr.shape[0]))
    return LeanProgram.of(instr, pool, divisor, in_slots, out_slots, nslots, const_slots,
                          const_vals)


def _argument(a, k, name):
    if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, float, np.number,
                                                             np.ndarray, list, tuple)):
        raise TypeError(f"at.jit({name}): argument {k} must be a float or a float array, "
                        f"not {type(a).__name__}")
    kind = np.asarray(a).dtype.kind
    if kind == "c":
        raise TypeError(f"at.jit({name}): argument {k} is complex; at.jit differentiates "
                        "real numba code (for complex numbers use at.compile, or pass the "
                        "parts: z.real and z.imag)")
    if kind not in "iuf":
        raise TypeError(f"at.jit({name}): argument {k} has dtype {np.asarray(a).dtype}")
    if kind in "iu" and np.ndim(a):
        raise TypeError(f"at.jit({name}): argument {k} is an integer array, and it is "
                        "differentiated; name the arguments to differentiate with "
                        "argnums (at.jit(fn, argnums=0)) to pass integer data")
    return np.array(a, np.float64, order="C")


def _data(a, k, name):
    """An argument that is not differentiated: numbers or arrays of them, as given."""
    a = np.array(a, order="C")
    if a.dtype.kind not in "biuf":
        raise TypeError(f"at.jit({name}): argument {k} has dtype {a.dtype}")
    return a


def _argnums(argnums):
    if argnums is None:
        return None
    one = isinstance(argnums, (int, np.integer)) and not isinstance(argnums, bool)
    many = isinstance(argnums, (tuple, list)) and argnums and all(
        isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 0
        for k in argnums)
    if not (one and argnums >= 0) and not many:
        raise TypeError(f"at.jit: argnums must be a non-negative int or a tuple of them, "
                        f"not {argnums!r}")
    return (int(argnums),) if one else tuple(sorted({int(k) for k in argnums}))


def _tensor(a):
    a = np.asarray(a, F64)
    return new_leaf(a.copy() if a.ndim else float(a), a.shape, F64)


def _per_argument(values):
    values = [v if hasattr(v, "_value") else _tensor(v) for v in values]
    return values[0] if len(values) == 1 else tuple(values)


def _buffers(rows):
    """The calling thread's tape buffers for ``rows`` rows: header, (op, a, b) rows,
    values. Held by this thread for its whole compiled call, so no other thread or
    Python code frees or moves them meanwhile."""
    state = here()
    kept = state.jit_tape
    if kept is None or kept[2].size < rows:
        kept = (np.empty(active.HEADER, np.int64), np.empty(3 * rows, np.int64),
                np.empty(rows, np.float64))
        state.jit_tape = kept
    header, ops, values = kept
    header[:] = 0
    header[active.H_CAPACITY] = values.size
    header[active.H_OPS], header[active.H_VALUES] = ops.ctypes.data, values.ctypes.data
    return header, ops, values




def _drop_large_buffers():
    """A large recording's buffers go back once it is swept (a thread keeps small ones
    for its next call: fresh pages cost more than a small recording)."""
    state = here()
    for name in ("jit_tape", "jit_sweep"):
        kept = getattr(state, name)
        if kept is not None and sum(a.nbytes for a in kept) > KEEP_TAPE_BYTES:
            setattr(state, name, None)


def _sweep_scratch(n):
    state = here()
    kept = state.jit_sweep
    if kept is None or kept[0].size < n:
        kept = state.jit_sweep = (np.empty(n), np.empty(n, np.bool_))
    return kept


# ---- compiling fn for differentiable values --------------------------------------------------

_RECORD = '''"""at.jit's recording entry point for {name} (generated: autotape/jit.py)."""
from autotape.jit import leaves_of as leaves, output
from autotape.kernels.active import leaf

user = None                 # (fn, compiled for differentiable values: set on import)


def record(header, {params}):
    tape = header.ctypes.data
{leaves}
    return output(user({args}))
'''


def _make_recorder(user, ndims, name, tree):
    """The recording entry point; ``ndims`` per argument, None for data (no leaves). It
    is a generated module in the kernel cache, named after a digest of everything
    compiled into it (``tree``), so numba keeps it on disk for later processes; where
    fn reads a value the digest cannot name (an object of its own), it is compiled in
    each process."""
    params = ", ".join(f"x{k}" for k in range(len(ndims)))
    leaves = "\n".join(f"    a{k} = " + ("x{k}" if nd is None else "leaf(tape, x{k})"
                                          if nd == 0 else "leaves(tape, x{k})").format(k=k)
                       for k, nd in enumerate(ndims))
    source = _RECORD.format(name=name, params=params or "", leaves=leaves or "    pass",
                            args=", ".join(f"a{k}" for k in range(len(ndims))))
    digest = tree.digest(source)
    if digest is None:
        namespace = {"__name__": "autotape_jit_record"}
        exec(source, namespace)
        namespace["user"] = user
        return numba.njit(error_model="numpy", nogil=True)(namespace["record"])
    tree.module = (f"autotape_jit_{digest}",
                   generated_file("jit", f"record_{digest}.py", source))
    return _cached_recorder(*tree.module, user)


def _cached_recorder(name, path, user):
    """The recorder kept in numba's disk cache: the generated module at ``path`` calling
    ``user`` (fn compiled for differentiable values)."""
    module = import_generated(name, path)
    module.user = user
    return numba.njit(error_model="numpy", nogil=True, cache=True)(module.record)


# ---- compiling a recorder in a helper process ------------------------------------------------

_HELPER = "from autotape.jit import compile_recorder\ncompile_recorder(sys.argv[1])\n"


def compile_recorder(path):
    """A helper process's job: the recorder whose recipe (``_Tree.recipe``) is at
    ``path``, compiled for its signature into numba's disk cache."""
    functions = {}

    class Callee(str):
        """A function of the recipe, by its symbol (built before its callers)."""

    def load(pid):
        kind, name = pid
        return importlib.import_module(name) if kind == "module" else Callee(name)

    with open(path, "rb") as f:
        unpickler = pickle.Unpickler(f)
        unpickler.persistent_load = load
        recipe = unpickler.load()
    for name, symbol, source, names in recipe["functions"]:
        namespace = {k: functions[v] if isinstance(v, Callee) else v
                     for k, v in names.items()}
        namespace["__builtins__"] = builtins
        exec(compile(source, f"<at.jit {name}>", "exec"), namespace)
        fn = namespace[name]
        fn.__name__ = fn.__qualname__ = symbol
        functions[symbol] = numba.njit(error_model="numpy", nogil=True)(fn)
    user = functions[recipe["functions"][-1][1]]
    _cached_recorder(recipe["module"], recipe["path"], user).compile(recipe["signature"])


class _Tree:
    """What goes into a recorder: the transformed source of fn and of every njit
    function it calls, and the values they read from outside (numba compiles them in
    as constants). ``digest`` names it all, or is None where a value has no name.

    It also keeps what a recording needs without numba: each function's code and
    namespace (``python_function``: jit_python.py runs them), and the recipe a helper
    process compiles the recorder from (``functions``: name, symbol, source and the
    values its names read, callees first)."""

    def __init__(self):
        self.done, self.parts, self.unnamed = {}, [], False   # (done: by id, this process)
        self.functions, self.symbols, self.python = [], {}, {}
        self.module = None        # (the recorder's module name and file, when cached)
        self.user = None          # (fn compiled for differentiable values)
        self._in_python = {}

    def add(self, name, module, namespace):
        """One transformed function: its source and the globals and closure values its
        names and dotted names read. Returns its symbol: a name made of its code, what
        it reads and its callees' symbols, so that two recorders cached by different
        processes never hold two different functions under one name (a process that
        loads both would link one of them for both: kernels/cache.py's ``distinct``)."""
        source = ast.unparse(module)
        self.parts.append(source)
        own = hashlib.sha256(source.encode())
        names = {node.id: namespace[node.id] for node in ast.walk(module)
                 if isinstance(node, ast.Name) and node.id in namespace}
        for alias, value in sorted(names.items()):
            if alias.startswith("__autotape_call_"):
                own.update(f"{alias}={self.symbols.get(id(value))}".encode())
        seen = set()
        for node in ast.walk(module):
            if self.unnamed or not isinstance(node, (ast.Name, ast.Attribute)):
                continue
            text = ast.unparse(node)
            if text in seen or text.startswith("__autotape_"):
                continue
            seen.add(text)
            value = _resolve(node, namespace)
            if value is None:
                continue
            named = named_value(value)
            if named is None:
                self.unnamed = True
                continue
            self.parts.append(f"{text}={named}")
            own.update(self.parts[-1].encode())
        symbol = f"{name}_{own.hexdigest()[:16]}"
        self.functions.append((name, symbol, source, names))
        return symbol

    def python_function(self, compiled):
        """The transformed function behind ``compiled``, as Python runs it with
        jit_python.py's values (its callees too)."""
        fn = self._in_python.get(id(compiled))
        if fn is None:
            code, namespace, name = self.python[id(compiled)]
            names = jit_python.namespace(namespace, self.python_function)
            exec(code, names)
            fn = self._in_python[id(compiled)] = names[name]
        return fn

    def recipe(self, module, path, signature):
        """What a helper process compiles the recorder from (``compile_recorder``):
        pickled bytes, or None where some value cannot be pickled."""
        by_id = {id(compiled): symbol for compiled, symbol in
                 ((c, self.symbols[id(c)]) for c in self.done.values()
                  if id(c) in self.symbols)}
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.persistent_id = lambda v: ("module", v.__name__) if isinstance(
            v, types.ModuleType) else (("function", by_id[id(v)]) if isinstance(
                v, Dispatcher) and id(v) in by_id else None)
        try:
            pickler.dump({"functions": self.functions, "module": module, "path": path,
                          "signature": signature})
        except (pickle.PicklingError, TypeError, AttributeError):
            return None
        return buffer.getvalue()

    def digest(self, source):
        if self.unnamed:
            return None
        h = hashlib.sha256(source.encode())
        h.update(_own_code().encode())
        for part in self.parts:
            h.update(b"\0" + part.encode())
        return h.hexdigest()[:24]


@functools.cache
def _own_code():
    """This module's code (what it compiles into every recorder: ``leaves_of``,
    ``output``), without comments or docstrings."""
    return code_of(inspect.getsource(sys.modules[__name__]))


@numba.njit(error_model="numpy", nogil=True)
def leaves_of(tape, x):
    """A float array argument as an array of differentiable values, each a leaf row of
    the tape (the generated recorders call it)."""
    rows = np.empty(x.shape, np.int64)
    flat_rows = rows.reshape(-1)
    flat = x.reshape(-1)
    for k in range(flat.size):
        flat_rows[k] = active.leaf(tape, flat[k]).row
    cell = np.empty(1, np.intp)
    cell[0] = tape
    return ActiveArray(x.copy(), rows, cell)


def output(out):
    """(values, rows, shape) of fn's result."""


@numba.extending.overload(output)
def _output_impl(out):
    if isinstance(out, ActiveType):
        return lambda out: (np.full(1, out.value), np.full(1, out.row),
                            np.zeros(0, np.int64))
    if isinstance(out, active.ActiveArrayType):
        def array_out(out):
            shape = np.empty(out.values.ndim, np.int64)
            for k in range(out.values.ndim):
                shape[k] = out.values.shape[k]
            return (out.values.copy().reshape(-1), out.rows.copy().reshape(-1), shape)
        return array_out
    if isinstance(out, (numba.types.Float, numba.types.Integer)):
        return lambda out: (np.full(1, float(out)), np.full(1, -1), np.zeros(0, np.int64))
    if isinstance(out, numba.types.Array) and isinstance(out.dtype, numba.types.Float):
        def plain_array(out):
            shape = np.empty(out.ndim, np.int64)
            for k in range(out.ndim):
                shape[k] = out.shape[k]
            return (out.copy().reshape(-1).astype(np.float64),
                    np.full(out.size, -1, np.int64), shape)
        return plain_array
    raise numba.core.errors.TypingError(
        f"at.jit: the function must return a float or a float array (of differentiable "
        f"values), not {out}")


def _transformed(fn, tree):
    """fn compiled for differentiable values: its source with np.zeros / np.empty /
    np.ones made to allocate arrays of them, and the njit functions it calls
    transformed the same way (``tree``: what was transformed so far)."""
    done = tree.done
    key = id(fn)
    if key in done:
        return done[key]
    py = fn.py_func if isinstance(fn, Dispatcher) else fn
    try:
        source = textwrap.dedent(inspect.getsource(py))
        parsed = ast.parse(source)
        if _definition(parsed.body[0], py) is None:
            raise SyntaxError("the source found is not this function's")
    except (OSError, TypeError, SyntaxError, IndexError):
        # no source to read (typed at a prompt): compiled as it is, which serves every
        # op on values; arrays it allocates with np.zeros cannot hold differentiable
        # values then, and numba's typing error says where
        compiled = done[key] = numba.njit(error_model="numpy", nogil=True)(py)
        tree.unnamed = True                    # (no source: nothing to name it by)
        return compiled
    node = _definition(parsed.body[0], py)
    namespace = dict(py.__globals__)
    if py.__closure__:
        namespace.update(zip(py.__code__.co_freevars,
                             (c.cell_contents for c in py.__closure__)))
    name = f"__autotape_{py.__name__}_{len(done)}".replace("<", "").replace(">", "")
    if isinstance(node, ast.Lambda):          # as a def, on the lambda's line
        line = node.lineno
        node = ast.parse(f"def {name}({ast.unparse(node.args)}):\n"
                         f"    return {ast.unparse(node.body)}\n").body[0]
        ast.increment_lineno(node, line - 1)
    node.name, node.decorator_list = name, []
    module = ast.Module(body=[_Rewrite(namespace, tree, py).visit(node)], type_ignores=[])
    ast.fix_missing_locations(module)
    symbol = tree.add(name, module, namespace)
    ast.increment_lineno(module, py.__code__.co_firstlineno - 1)
    code = compile(module, py.__code__.co_filename, "exec")
    exec(code, namespace)
    fn = namespace[name]
    fn.__name__ = fn.__qualname__ = symbol
    compiled = done[key] = numba.njit(error_model="numpy", nogil=True)(fn)
    tree.symbols[id(compiled)] = symbol
    tree.python[id(compiled)] = (code, namespace, name)
    return compiled


def _definition(statement, py):
    """py's definition in the parsed statement (a def, or the statement's only lambda),
    when it has py's name and arguments; else None: source read from a file that
    changed since, or from the wrong lines, must not be compiled."""
    if py.__name__ == "<lambda>":
        found = [n for n in ast.walk(statement) if isinstance(n, ast.Lambda)]
        node = found[0] if len(found) == 1 else None
    else:
        node = statement if isinstance(statement, ast.FunctionDef) and \
            statement.name == py.__name__ else None
    if node is None:
        return None
    code = py.__code__
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    return node if names == list(code.co_varnames[:code.co_argcount]) else None


class _Rewrite(ast.NodeTransformer):
    """Calls to np.zeros / np.empty / np.ones, ``x.copy()`` and other numba functions,
    redirected (resolved through fn's globals)."""

    def __init__(self, namespace, tree, py):
        self.namespace, self.tree, self.py = namespace, tree, py
        self.calls = 0

    def visit_With(self, node):
        for item in node.items:
            call = item.context_expr
            target = _resolve(call.func if isinstance(call, ast.Call) else call,
                              self.namespace)
            if target is numba.objmode:
                line = node.lineno + self.py.__code__.co_firstlineno - 1
                raise TypeError(
                    f"at.jit({self.py.__name__}): cannot record at "
                    f"{self.py.__code__.co_filename}:{line}: numba.objmode runs Python, "
                    "which cannot follow differentiable values; compute that part "
                    "outside the function and pass its result in, or write it with "
                    "numba-supported ops")
        self.generic_visit(node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "copy" and \
                not node.args and not node.keywords:    # x.copy(): a float array's holds
            self.namespace["__autotape_copy"] = active.copy     # differentiable values
            return ast.copy_location(ast.Call(func=ast.Name(id="__autotape_copy",
                                                            ctx=ast.Load()),
                                              args=[node.func.value], keywords=[]), node)
        target = _resolve(node.func, self.namespace)
        alias = None
        if any(target is k for k in ALLOCATORS):
            alias = f"__autotape_alloc_{target.__name__}"
            self.namespace[alias] = next(v for k, v in ALLOCATORS.items() if k is target)
        elif isinstance(target, Dispatcher):
            alias = f"__autotape_call_{self.calls}"     # (names alike in every process:
            self.calls += 1                             # the recorder's digest reads them)
            self.namespace[alias] = _transformed(target, self.tree)
        if alias is not None:
            node.func = ast.copy_location(ast.Name(id=alias, ctx=ast.Load()), node.func)
        return node


def _resolve(expr, namespace):
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id)
    if isinstance(expr, ast.Attribute):
        base = _resolve(expr.value, namespace)
        return getattr(base, expr.attr, None) if base is not None else None
    return None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _clear_error(name, error):
    """numba's typing error as one message naming the construct and the line."""
    text = _ANSI.sub("", str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    where = [w for w in re.findall(r'File "([^"]+)", line (\d+):\s*\n(?:.*\n)*?\s*(?:<source elided>\s*\n\s*)?(.+)', text)
             if not w[0].startswith("<")]
    found = re.search(r"No implementation of function (.+?) found for signature:\s*\n\s*"
                      r">>> (.+)", text)
    explained = next((line.split("TypingError: ")[-1] for line in lines
                      if "differentiable value" in line), None)
    if explained is None and found:
        explained = f"numba has no {found.group(1)} for {found.group(2).strip()}"
    if explained is None:
        explained = next((line for line in lines if line.startswith("Cannot unify")), None)
    if explained is None:
        explained = next((line for line in lines if not line.startswith(("Failed in",
                                                                          "During:"))),
                         lines[0] if lines else text)
    place = ""
    if where:
        file, line, _ = where[0]
        place = f" at {file}:{line}"
    return TypeError(f"at.jit({name}): cannot record{place}: {explained}. Differentiable "
                     "values support arithmetic, comparisons, math / numpy scalar "
                     "functions, arrays from np.zeros / np.empty / np.ones indexed by "
                     "integers and slices, and @ / np.dot of 1-D and 2-D arrays")
