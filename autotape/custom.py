"""Custom ops: a forward and its VJP supplied by the user, as ``torch.autograd.Function``
or ``jax.custom_vjp`` (autotape's spelling: ``at.custom_op(forward, vjp)``).

The op is one tape row (CUSTOM) whose operands are its inputs. The compiled sweep stops
at it and the engine calls ``vjp`` with numpy arrays; with ``create_graph=True`` the
engine calls it with recorded Tensors instead, so a VJP written with autotape ops (or
with numpy functions, which record on Tensors) is itself differentiated. The VJP
receives the primal inputs and output rather than opaque residuals: whatever it needs
is recomputed from them, which is what keeps higher derivatives exact.
"""
import contextlib

import numba
import numpy as np

from .creation import random_generator
from .engine import grad as engine_grad
from .grad_mode import enable_grad, is_grad_enabled
from .guards import current_trace, tracing
from .ops.indexing import astype
from .opcodes import CUSTOM
from .ops.recording import record_listed
from .pytree import flatten
from .tape import open_tape, tape_of_its_own
from .tape_format import custom_params
from .thread_state import here
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
        out = self.value(values)
        tensors = [x if isinstance(x, Tensor) else new_leaf(*canonical(x)) for x in operands]
        return self.record(tensors, out.copy())

    def value(self, values, shape=None):
        """forward's result on the operands' values as a float64 array, checked: a
        number or an array of floats, of ``shape`` when given (a compiled replay's
        row has the shape it was recorded with)."""
        if self.compiled:
            values = [_compiled_arg(np.asarray(v, np.float64)) for v in values]
        out = self.forward(*values)
        if out is None or not isinstance(out, (Tensor, np.ndarray, float, int, np.number)):
            raise TypeError(f"custom op {self.name!r}: forward must return an array or a "
                            f"number, not {type(out).__name__}")
        out = np.asarray(array_of(out) if isinstance(out, Tensor) else out)
        if out.dtype.kind not in "fiu":
            raise TypeError(f"custom op {self.name!r}: forward must return floats, not "
                            f"{out.dtype}")
        if shape is not None and out.shape != tuple(shape):
            raise RuntimeError(f"custom op {self.name!r}: forward returned shape "
                               f"{out.shape} where it was recorded with shape "
                               f"{tuple(shape)}; a compiled function needs the same "
                               "output shape at every call (compile it again for others)")
        return out.astype(np.float64)

    def record(self, tensors, value):
        """The op's row: output ``value`` (float64) from operands ``tensors``."""
        result = record_listed(CUSTOM, value, tensors, custom_params)
        if result._tape is not None:
            result._tape.customs[result._row] = self
        return result

    def graph_vjp(self, at, g, r, k):
        """The create_graph rule: vjp on recorded Tensors, once per row. Where the rules
        run on numbers (graph_backward.run without recording, grad mode off: the sweep's
        Python tier in engine.py), vjp gets numpy arrays, as from the compiled sweep."""
        cached = getattr(r, "custom_cotangents", None)
        if cached is None:
            inputs = [r.value(j) for j in range(len(r.operands))]
            output = r.z
            if not is_grad_enabled():
                inputs = [_numbers(v) for v in inputs]
                output, g = _numbers(output), _numbers(g)
            cached = r.custom_cotangents = self.cotangents(inputs, output, g)
        c = cached[k]
        return None if c is None else (c if isinstance(c, Tensor) else
                                       new_leaf(*canonical(np.asarray(c, np.float64))))

    def cotangents(self, inputs, output, g, needed=None):
        """vjp's result, checked: one cotangent per input (None for none), each of its
        input's shape. (``needed``, which inputs need one, is a hint a user's vjp does
        not get: it computes them all.)"""
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


def _numbers(t):
    """A tensor's value as the compiled sweep passes it to a vjp: a float64 array of its
    shape (a copy: the vjp may write to it)."""
    return np.array(array_of(t) if isinstance(t, Tensor) else t, np.float64).reshape(
        np.shape(t))


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


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """``function(*args, **kwargs)`` without keeping its internals, as torch's
    ``torch.utils.checkpoint.checkpoint``: when the sweep reaches the result it runs
    ``function`` again, recorded, and takes its VJP there. Memory for a long chain of
    checkpointed segments grows with the number of segments, not of ops.

    Gradients reach every tensor requiring grad that ``function`` reads: its arguments
    (positional or keyword, nested in tuples / lists / dicts or not Tensors at all)
    and what it reads from its closure or from objects. It may return a Tensor or any
    tuple / list / dict of Tensors and other values. The recomputation sees the random
    state (``at.rand``, ``np.random``) the first run saw (``preserve_rng_state``), so
    a dropout mask is the same both times; it must read the same tensors. Checkpoints
    nest, and hooks fire once. ``use_reentrant`` is accepted for torch's code: the
    behaviour is always torch's ``use_reentrant=False``.

    >>> x = at.tensor([0.5, 1.0], requires_grad=True)
    >>> w = at.tensor(2.0, requires_grad=True)
    >>> y = at.checkpoint(lambda u: at.sin(u) * u * w, x)
    >>> at.grad(y.sum(), (x, w))
    (tensor([1.83643364, 2.76354658]), tensor(1.08118375))
    """
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, not "
                        f"{type(function).__name__}")
    if not is_grad_enabled():
        return function(*args, **kwargs)
    rng = _random_state() if preserve_rng_state else None
    # The first run is recorded (then dropped) to find out which tensors it reads.
    reads = _Reads()
    with tape_of_its_own(), tracing(None), reads:
        first = open_tape().id
        out = function(*args, **kwargs)
    leaves, rebuild = flatten(out)
    made = [k for k, v in enumerate(leaves) if isinstance(v, Tensor) and
            v._tape is not None and v._tape.id >= first and v.dtype.kind == "f"]
    sources = reads.tensors
    if not made or not sources:
        return rebuild([_detached_if_made(v, first) for v in leaves])
    shapes = [leaves[k].shape for k in made]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    splits = np.cumsum([0] + sizes)

    passed, rebuild_args = flatten((args, kwargs))
    passed_ids = {id(v) for v in passed}
    closure = [k for k, t in enumerate(sources) if id(t) not in passed_ids]

    def rerun(inputs, recorded, why):
        """function run again, recorded on a tape of its own, on ``aliases`` (this
        checkpoint's own variables, holding ``inputs``) in place of the sources: as its
        arguments, and wherever it reads a source from elsewhere (whose value must still
        be the one in ``inputs``: ``why`` says what it means if not). Returns (the
        outputs it made, aliases)."""
        for k in closure:
            if not np.array_equal(_value_of(sources[k]), _value_of(inputs[k]), equal_nan=True):
                raise RuntimeError(why.format(name=name))
        if recorded and current_trace() is not None:
            # the Hessian of a compiled function: recorded on the compiled recording's
            # own tape, where a read of a tensor already on it cannot be redirected
            if closure:
                raise RuntimeError(f"checkpoint inside at.compile: second derivatives need "
                                   f"every tensor that the checkpointed {name} reads passed "
                                   "to checkpoint as an argument")
            with enable_grad(), _random_state_of(rng):
                aliases = [astype(x, t.dtype) for x, t in zip(inputs, sources)]
                remap = dict(zip(map(id, sources), aliases))
                a, kw = rebuild_args([remap.get(id(v), v) for v in passed])
                again = flatten(function(*a, **kw))[0]
            return _made_again(again), aliases
        with tape_of_its_own(), tracing(None), enable_grad(), _random_state_of(rng):
            if recorded:
                aliases = [astype(x, t.dtype) for x, t in zip(inputs, sources)]
            else:
                aliases = [new_leaf(*canonical(np.asarray(x, t.dtype))).requires_grad_()
                           for x, t in zip(inputs, sources)]
            start = open_tape().id
            with _Redirected(sources, aliases, start) as redirected:
                a, kw = rebuild_args([redirected.map.get(id(v), v) for v in passed])
                again = flatten(function(*a, **kw))[0]
        return _made_again(again), aliases

    def _made_again(again):
        outs = [again[k] if k < len(again) else None for k in made]
        for o, shape in zip(outs, shapes):
            if not isinstance(o, Tensor) or o.shape != shape:
                raise RuntimeError(f"checkpoint: {name} returned other outputs when run again "
                                   "for the gradient; it must compute the same thing every "
                                   "time it runs")
        return outs

    def forward(*values):
        # (a compiled replay: the sources have new values)
        outs, _ = rerun(values, False, REPLAY_READS)
        return _packed([np.asarray(array_of(o), np.float64) for o in outs], shapes)

    def vjp(inputs, output, g):
        recorded = isinstance(g, Tensor)
        outs, aliases = rerun(inputs, recorded, MODIFIED)
        flat = g.reshape(-1) if recorded else np.reshape(g, -1)
        parts = [flat[a:b].reshape(shape) if len(made) > 1 else g
                 for a, b, shape in zip(splits, splits[1:], shapes)]
        if not recorded:
            parts = [new_leaf(*canonical(np.array(p, np.float64))) for p in parts]
        with enable_grad():
            grads = engine_grad(outs, aliases, parts, create_graph=recorded,
                                allow_unused=True)
        return [c if recorded or c is None else array_of(c) for c in grads]

    name = getattr(function, "__name__", "function")
    op = CustomOp(forward, vjp, name=f"checkpoint({name})")
    packed = op.record(sources, _packed([np.asarray(array_of(leaves[k]), np.float64)
                                         for k in made], shapes))
    results = list(leaves)
    for k, a, b, shape in zip(made, splits, splits[1:], shapes):
        part = packed if len(made) == 1 else packed[a:b].reshape(shape)
        results[k] = part if leaves[k].dtype == np.float64 else astype(part, leaves[k].dtype)
    return rebuild([_detached_if_made(v, first) if k not in made else v
                    for k, v in enumerate(results)])


MODIFIED = ("one of the variables needed for gradient computation has been modified by an "
            "inplace operation: a tensor that the checkpointed {name} read (not one of "
            "its arguments) changed after the checkpoint ran")
REPLAY_READS = ("checkpoint inside at.compile: the checkpointed {name} reads a tensor that "
                "is not one of its arguments and whose value changes from call to call; "
                "pass that tensor to checkpoint as an argument")


def _packed(values, shapes):
    """One output holding every output of a checkpoint: itself if one, else the
    outputs' elements one after another."""
    if len(values) == 1:
        return np.array(values[0], np.float64).reshape(shapes[0])
    return np.concatenate([np.reshape(v, -1) for v in values])


def _value_of(v):
    return np.asarray(array_of(v) if isinstance(v, Tensor) else v)


def _detached_if_made(v, first):
    """An output of the first run that does not need a gradient, off its dropped tape."""
    if isinstance(v, Tensor) and v._tape is not None and v._tape.id >= first:
        return v.detach()
    return v


class _Redirect:
    """While active (a ``with`` block), ``ops.recording.row_of`` asks it for the tensor
    to record in place of each tensor requiring grad read from outside the tape."""

    def __enter__(self):
        state = here()
        self.saved, state.redirect = state.redirect, self
        return self

    def __exit__(self, *exc):
        here().redirect = self.saved


class _Reads(_Redirect):
    """Notes every tensor requiring grad that recorded ops read from outside the tapes
    made since it became active, and changes none."""

    def __init__(self):
        self.tensors, self.caches, self.first = [], {}, None

    def __call__(self, t):
        if self.first is None:
            self.first = here().tape().id
        if t._tape is not None and t._tape.id >= self.first:
            return t                                  # (made inside: a tape of its own)
        if id(t) not in self.caches:
            self.caches[id(t)] = (t, t._cache if t._tape is None else None)
            self.tensors.append(t)
        return t

    def __exit__(self, *exc):
        super().__exit__(*exc)
        for t, cache in self.caches.values():        # (a leaf's row on the dropped tape)
            if t._tape is None:
                t._cache = cache


class _Redirected(_Redirect):
    """Recorded ops read ``aliases[k]`` wherever they read ``sources[k]``; reading any
    other tensor requiring grad from before is an error."""

    def __init__(self, sources, aliases, first):
        self.map = {id(s): a for s, a in zip(sources, aliases)}
        self.own = {id(a) for a in aliases}
        self.first = first

    def __call__(self, t):
        alias = self.map.get(id(t))
        if alias is not None:
            return alias
        if id(t) in self.own or (t._tape is not None and t._tape.id >= self.first):
            return t
        raise RuntimeError("checkpoint: the function read a tensor requiring grad when "
                           "run again for the gradient that it did not read the first "
                           "time; it must read the same tensors every time it runs")


def _random_state():
    """The random state a recomputation must see again: at.rand's and numpy's."""
    return random_generator().bit_generator.state, np.random.get_state()


@contextlib.contextmanager
def _random_state_of(saved):
    """Run with the random state ``saved`` (None: as it is), then put back the
    state from before."""
    if saved is None:
        yield
        return
    now = _random_state()
    random_generator().bit_generator.state = saved[0]
    np.random.set_state(saved[1])
    try:
        yield
    finally:
        random_generator().bit_generator.state = now[0]
        np.random.set_state(now[1])
