"""grad() and backward(): argument checks, seeding, one compiled sweep per tape, results.

Both compute, for each requested tensor, the gradient of sum_i <outputs[i],
grad_outputs[i]>. ``grad`` returns it; ``backward`` accumulates it into ``.grad``.
With ``is_grads_batched=True`` the first axis of every grad_output is a batch of K
cotangents, swept together as K lanes of one compiled sweep.
Checks and messages follow torch.autograd so that code and searches carry over.
"""
import functools
import heapq
import itertools
import threading
import warnings

import numpy as np

from . import graph_backward
from .executor import NO_ROWS, NO_STOPS, RELEASED_MSG, executor_for
from .grad_mode import no_grad
from .opcodes import CONST
from .hooks import (LEAF_HOOKS, MULTI_HOOKS, multi_grad_pass, run_hooks, run_leaf_hooks,
                    run_post_accumulate_hooks, stops_of)
from .kernels import background
from .kernels.cache import cache_dir, on_disk
from .kernels.staging import address_of
from .kernels.sweep import VARIANTS, sweep_for, variant_of
from .ops.indexing import astype, stack
from .ops import versions
from .tensor import (F64, OnDevice, Tensor, array_of, canonical, device_call, new_leaf,
                     on_device)
from .thread_state import here
from .tuning import OWN_BUFFER_MIN, RECYCLE_MIN


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs``, as a tuple (or a dict when
    ``inputs`` is a dict). Never touches ``.grad``, except of ``retain_grad()`` tensors
    (and not at all when ``is_grads_batched``).

    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> at.grad((x ** 2).sum(), x)
    (tensor([2., 4.]),)

    ``is_grads_batched=True``: each grad_output carries a batch of K cotangents on its
    first axis, and each result gets shape ``(K, *input.shape)``; one sweep does them
    all. With the identity as the batch, that is a whole Jacobian:

    >>> at.grad(x ** 2, x, at.eye(2), is_grads_batched=True)
    (tensor([[2., 0.],
            [0., 4.]]),)
    """
    if type(outputs) is not Tensor and on_device(outputs):
        return device_call("grad", outputs, inputs, grad_outputs, retain_graph,
                           create_graph, allow_unused, is_grads_batched, materialize_grads)
    if _any_complex(outputs, inputs, grad_outputs):
        outputs, inputs, grad_outputs, rewrap = _real_parts(outputs, inputs, grad_outputs)
        return rewrap(grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                           allow_unused, is_grads_batched, materialize_grads))
    if MULTI_HOOKS[0]:
        with multi_grad_pass():
            return _grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                         allow_unused, is_grads_batched, materialize_grads, None)
    return _grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                 is_grads_batched, materialize_grads, None)


# ---- complex numbers: the sweep is real ------------------------------------------------------
#
# A complex tensor (complex_numbers/) records its numbers' parts as one real Tensor of
# shape ``shape + (2,)`` (its ``parts``). A complex output with grad_output v = a + ib
# contributes <parts, (a, b)> = Re(conj(v) * output) to the real function swept, and a
# complex input's gradient is the gradient of its parts, dL/dx + i dL/dy, as torch's.

def _complex(v):
    return type(v) is not Tensor and getattr(type(v), "parts", None) is not None


def _listed(v):
    if v is None:
        return ()
    if isinstance(v, dict):
        return tuple(v.values())
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def _any_complex(outputs, inputs, grad_outputs):
    return any(type(v) is not Tensor and (_complex(v) or np.iscomplexobj(v))
               for group in (outputs, inputs, grad_outputs) for v in _listed(group))


def _parts_array(v):
    """A complex array's parts, shape + (2,)."""
    a = np.array(v, np.complex64 if np.asarray(v).dtype == np.complex64 else np.complex128)
    return a.reshape(a.shape + (1,)).view(np.float64 if a.dtype == np.complex128 else
                                          np.float32)


def _real_parts(outputs, inputs, grad_outputs):
    """Outputs, inputs and grad_outputs with complex ones replaced by their parts, and
    a function turning the gradients of the parts back into complex gradients."""
    single_out = not isinstance(outputs, (list, tuple))
    outs = _listed(outputs)
    given = (None,) * len(outs) if grad_outputs is None else (
        (grad_outputs,) if single_out or not isinstance(grad_outputs, (list, tuple))
        else tuple(grad_outputs))
    new_outs, new_given = [], []
    for k, (o, g) in enumerate(zip(outs, given)):
        if _complex(o):
            if g is None:
                raise RuntimeError("grad can be implicitly created only for real scalar "
                                   "outputs")
            new_outs.append(o.parts)
            new_given.append(g.parts if _complex(g) else new_leaf(*canonical(
                _parts_array(g.numpy() if isinstance(g, Tensor) else g).copy())))
        else:
            if g is not None and (_complex(g) or (not isinstance(g, Tensor) and
                                                  np.iscomplexobj(g))):
                raise RuntimeError(
                    "For complex Tensors, both grad_output and output are required to "
                    f"have the same dtype. Mismatch in dtype: grad_output[{k}] is complex "
                    f"and output[{k}] is real")
            new_outs.append(o)
            new_given.append(g)
    keys = list(inputs) if isinstance(inputs, dict) else None
    ins = _listed(inputs)
    kinds = [type(x) if _complex(x) else None for x in ins]
    new_ins = [x.parts if kind is not None else x for x, kind in zip(ins, kinds)]
    if keys is not None:
        new_ins = dict(zip(keys, new_ins))
    elif not isinstance(inputs, (list, tuple)) and inputs is not None:
        new_ins = new_ins[0]

    def rewrap(grads):
        values = list(grads.values()) if isinstance(grads, dict) else list(grads)
        values = [kind(g) if kind is not None and g is not None else g
                  for g, kind in zip(values, kinds)]
        return dict(zip(keys, values)) if keys is not None else tuple(values)
    return (new_outs[0] if single_out else new_outs), (
        None if inputs is None else new_ins), (
        None if grad_outputs is None else (new_given[0] if single_out else new_given)), rewrap


def transform_grad(outputs, inputs, grad_outputs, is_grads_batched=False, own=()):
    """``grad(..., retain_graph=True, allow_unused=True, materialize_grads=True)`` for a
    transform of autotape.func: recorded (create_graph) exactly when the outputs also
    depend on a tensor requiring grad other than ``inputs``, a variable of an enclosing
    transform or of the user's own graph, so that an outer derivative sees the inner
    one's dependence on it (no perturbation confusion). The fast unrecorded sweep
    finds out: it reaches every such leaf. ``own``: more leaves of the transform itself,
    not counted as others. Returns (gradients, whether recorded)."""
    others = []
    found = _grad(outputs, inputs, grad_outputs, True, False, True, is_grads_batched, True,
                  others)
    mine = {id(t) for t in own}
    if not any(id(t) not in mine for t in others):
        return found, False
    return _grad(outputs, inputs, grad_outputs, True, True, True, is_grads_batched, True,
                 None), True


UNUSED_MSG = ("The differentiated Tensor at index {} appears to not have been used in the "
              "graph. Set allow_unused=True if this is the desired behavior.")


def _grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
          is_grads_batched, materialize_grads, others):
    """grad; ``others``, a list: the leaves requiring grad, other than the inputs, that
    the sweep reached are appended to it."""
    outputs = _tensor_tuple(outputs)
    keys = None
    if isinstance(inputs, dict):
        keys, inputs = list(inputs.keys()), tuple(inputs.values())
    inputs = (inputs,) if isinstance(inputs, (Tensor, np.ndarray)) else tuple(inputs)
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    given = _grads_tuple(grad_outputs, len(outputs))
    lanes = _batch_size(outputs, given) if is_grads_batched else 1
    grads = _make_grads(outputs, given, batched=is_grads_batched)
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    _check_outputs(outputs, grads)      # (first, as torch: numpy-style code that forgot
    for t in inputs:                    # requires_grad hears about that)
        if isinstance(t, OnDevice):
            raise RuntimeError("autotape: the gradient of a CPU output with respect to a "
                               "device tensor comes from backward(), in its .grad (or "
                               "take the output on the device and call grad there)")
        if not isinstance(t, Tensor):
            raise RuntimeError("all inputs have to be Tensors or GradientEdges, but got "
                               f"{type(t).__name__}" + (
                                   ": a numpy array has no gradient; make the variable "
                                   "with at.tensor(x, requires_grad=True)"
                                   if isinstance(t, np.ndarray) else ""))
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    retain = create_graph if retain_graph is None else retain_graph
    if create_graph and is_grads_batched:
        found = _run_recorded_lanes(outputs, given, inputs, retain, lanes)
    elif create_graph:
        found = _run_recorded(outputs, given, inputs, retain)
    elif _on_the_python_tier(outputs):
        found = _run_python_lanes(outputs, grads, inputs, retain, lanes, others) \
            if is_grads_batched else _run_python(outputs, grads, inputs, retain,
                                                 others=others)
    else:
        found = _run(outputs, grads, inputs, retain, lanes=lanes if is_grads_batched else 0,
                     others=others)
    result = []
    for k, t in enumerate(inputs):
        g = found[k]
        shape = (lanes,) + t.shape if is_grads_batched else t.shape
        if g is None:
            if not allow_unused:
                raise RuntimeError(UNUSED_MSG.format(k))
            if materialize_grads:
                g = graph_backward.connect(new_leaf(np.zeros(shape), shape, F64), t) \
                    if create_graph else np.zeros(shape)
        if g is None or isinstance(g, Tensor):
            result.append(g)
        else:
            result.append(_as_grad(g, t, shape))
    return dict(zip(keys, result)) if keys is not None else tuple(result)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             inputs=None):
    """Accumulate gradients of ``tensors`` (weighted by ``grad_tensors``) into ``.grad``
    of every leaf that requires grad, or only of ``inputs``.

    >>> x = at.ones(1, requires_grad=True)
    >>> at.backward(x ** 2); at.backward(x ** 3); x.grad
    tensor([5.])
    """
    if type(tensors) is not Tensor and on_device(tensors):
        return device_call("backward", tensors, grad_tensors, retain_graph, create_graph,
                           inputs)
    if _any_complex(tensors, inputs, grad_tensors):
        tensors, inputs, grad_tensors, _ = _real_parts(tensors, inputs, grad_tensors)
    if MULTI_HOOKS[0]:
        with multi_grad_pass():
            return _backward(tensors, grad_tensors, retain_graph, create_graph, inputs)
    return _backward(tensors, grad_tensors, retain_graph, create_graph, inputs)


def _backward(tensors, grad_tensors, retain_graph, create_graph, inputs):
    state = here()
    was, state.accumulating = state.accumulating, inputs is None
    try:
        _backward_now(tensors, grad_tensors, retain_graph, create_graph, inputs)
    finally:
        state.accumulating = was


def _backward_now(tensors, grad_tensors, retain_graph, create_graph, inputs):
    tensors = _tensor_tuple(tensors)
    if inputs is not None:
        if isinstance(inputs, dict):
            inputs = tuple(inputs.values())
        inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
        if on_device(inputs):
            raise RuntimeError("autotape: backward(inputs=...) of a CPU output with device "
                               "tensors among the inputs: call backward() without inputs "
                               "(the device leaves' .grad fill), or take the loss on the "
                               "device")
        for t in inputs:
            if not t.requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    given = _grads_tuple(grad_tensors, len(tensors))
    grads = _make_grads(tensors, given)
    _check_outputs(tensors, grads)
    retain = create_graph if retain_graph is None else retain_graph
    if create_graph:
        warnings.warn(_CREATE_GRAPH_WARNING, UserWarning, stacklevel=3)
        found = _run_recorded(tensors, given, inputs, retain, accumulate=inputs is None)
        for t, g in zip(inputs or (), found or ()):
            if g is not None:
                if t._tape is not None:
                    t._retains_grad = True
                t._grad = g if getattr(t, "_grad", None) is None else t._grad + g
        return
    run = _run_python if _on_the_python_tier(tensors) else _run
    if inputs is None:
        run(tensors, grads, None, retain, accumulate=True)
        return
    unique = list({id(t): t for t in inputs}.values())
    found = run(tensors, grads, unique, retain)
    for t, g in zip(unique, found):
        if g is not None:
            if t._tape is not None:
                t._retains_grad = True
            _accumulate(t, g)


# ---- argument checks ----------------------------------------------------------------------

_BATCHED_SHAPE_MSG = (
    "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as the "
    "batch dimension. The sizes of the remaining dimensions are expected to match the shape "
    "of corresponding output, but a mismatch was detected: grad_output[{i}] has a shape of "
    "{g} and output[{i}] has a shape of {o}. If you only want some tensors in `grad_output` "
    "to be considered batched, consider using vmap.")


def _batch_size(outputs, given):
    """K, the batch of cotangents that every grad_output carries on its first axis."""
    sizes = []
    for t, g in zip(outputs, given):
        if isinstance(g, Tensor) and g.ndim == 0 or g is None and isinstance(t, Tensor) \
                and t.ndim == 0:
            raise ValueError("vmap(vjp, in_dims=0, ...)(<inputs>): Got in_dim=0 for some "
                             "input, but that input is a Tensor of dimensionality 0 so "
                             "expected in_dim to satisfy 0 <= in_dim < 0.")
        if isinstance(g, Tensor):
            sizes.append(g.shape[0])
    if len(set(sizes)) > 1:
        raise ValueError("vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension")
    return sizes[0] if sizes else 1


def _tensor_tuple(outputs):
    """``outputs`` as a tuple of Tensors, or a TypeError that names what it got."""
    if isinstance(outputs, Tensor):
        return (outputs,)
    if not isinstance(outputs, (list, tuple)):
        raise TypeError(f"outputs must be Tensors or a sequence of Tensors, but got "
                        f"{type(outputs).__name__}: did a conversion (float(), .item(), "
                        ".numpy()) drop the graph?")
    for i, t in enumerate(outputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"outputs must be Tensors, but element {i} is "
                            f"{type(t).__name__}: did a conversion (float(), .item(), "
                            ".numpy()) drop the graph?")
    return tuple(outputs)


def _grads_tuple(grads, n):
    if grads is None:
        return (None,) * n
    if isinstance(grads, Tensor):
        return (grads,)
    return tuple(grads)


def _shape_text(shape):
    return str(tuple(shape))


def _make_grads(outputs, grads, batched=False):
    """Check each (output, gradient) pair and return the gradients as float64 arrays."""
    out = []
    for i, (t, g) in enumerate(zip(outputs, grads)):
        if isinstance(g, Tensor) and batched:
            if g.shape[1:] != t.shape:
                raise RuntimeError(_BATCHED_SHAPE_MSG.format(
                    i=i, g=_shape_text(g.shape[1:]), o=_shape_text(t.shape)))
            out.append(np.asarray(g._value, F64))
        elif isinstance(g, Tensor):
            if g.shape != t.shape:
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of "
                    f"{_shape_text(g.shape)} and output[{i}] has a shape of "
                    f"{_shape_text(t.shape)}.")
            out.append(np.asarray(g._value, F64))
        elif g is None:
            if t.requires_grad:
                if t.size != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar "
                                       "outputs")
                out.append(np.ones(t.shape))
            else:
                out.append(None)
        else:
            raise TypeError("gradients can be either Tensors or None, but got "
                            f"{type(g).__name__}")
    return out


def _check_outputs(outputs, grads):
    if len(grads) < len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grads)} gradients")
    for i, t in enumerate(outputs):              # (all Tensors: _tensor_tuple)
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               "have a grad_fn")


# ---- create_graph=True: the backward pass recorded (graph_backward.py) ---------------------------

_CREATE_GRAPH_WARNING = (
    "Using backward() with create_graph=True will create a reference cycle between the "
    "parameter and its gradient which can cause a memory leak. We recommend using "
    "autograd.grad when creating the graph to avoid this. If you have to use this "
    "function, make sure to reset the .grad fields of your parameters to None after use "
    "to break the cycle and avoid the leak.")


def _run_recorded(outputs, given, inputs, retain, accumulate=False):
    """As _run, with gradients that are themselves recorded tensors."""
    seeds = [graph_backward.as_tensor_seed(g, t) for t, g in zip(outputs, given)]
    leaf_grads, adj, tapes, before_hooks = graph_backward.run(outputs, seeds, retain,
                                                              inputs)
    asked = None if inputs is None else {id(t) for t in inputs}
    for entry in leaf_grads.values():
        if asked is None or id(entry[0]) in asked:
            entry[1] = run_leaf_hooks(entry[0], entry[1], 0)
    for tape in tapes.values():
        for row, ref in list(tape.retained.items()):
            t = ref()
            g = adj.get((tape.id, row))
            if t is not None and g is not None and t._tape is tape and t._row == row:
                t._grad = g if getattr(t, "_grad", None) is None else t._grad + g
    if accumulate:
        for leaf, g in leaf_grads.values():
            if leaf._requires_grad:
                g = _recorded_grad(g, leaf)
                with ACCUMULATE_LOCK:
                    leaf._grad = g if getattr(leaf, "_grad", None) is None else \
                        leaf._grad + g
                run_post_accumulate_hooks(leaf)
    return None if inputs is None else _input_grads(inputs, leaf_grads,
                                                    {**adj, **before_hooks}, _recorded_grad)


def _run_recorded_lanes(outputs, given, inputs, retain, lanes):
    """create_graph with a batch of cotangents: one recorded run per lane, stacked (the
    results are recorded tensors, so their own later sweeps are compiled)."""
    per_lane = []
    for k in range(lanes):
        lane = [None if g is None else g[k] for g in given]
        per_lane.append(_run_recorded(outputs, lane, inputs, retain or k < lanes - 1))
    return [None if any(f[j] is None for f in per_lane) else stack([f[j] for f in per_lane])
            for j in range(len(inputs))]


def _recorded_grad(g, t):
    """A recorded gradient for t: connected to t, in t's dtype."""
    g = graph_backward.connect(g, t)
    return g if g.dtype == t.dtype else astype(g, t.dtype)


# ---- the Python tier: the sweep while its kernel compiles ------------------------------------

# The first sweep of a process whose kernel is neither compiled nor in numba's disk cache
# runs the op table's create_graph rules on numbers (graph_backward.run without
# recording) while a helper process compiles the kernel (kernels/background.py); the
# sweeps after it is ready run compiled. Tests set FORCE_PYTHON_TIER[0] to compare.
FORCE_PYTHON_TIER = [False]
_READY = set()                    # sweep variants compiled here or on disk
_SWEEP_HELPER = "import sys\nfrom autotape import warmup\nwarmup.sweep_variant(int(sys.argv[1]))"


def _on_the_python_tier(outputs):
    """Whether this sweep runs on the Python tier: a reverse-sweep kernel it needs is
    not ready (its compile is started beside the calls; see above)."""
    if FORCE_PYTHON_TIER[0]:
        return True
    for t in outputs:
        tape = t._tape
        if tape is None:
            continue
        variant = variant_of(tape.columns().families)
        if variant in _READY:
            continue
        if not background.enabled():
            return False
        kernel = sweep_for(variant)
        if kernel.signatures or on_disk(kernel):
            _READY.add(variant)
            continue
        job = f"reverse sweep {variant}"
        if not background.beside(job, background.state(job), _SWEEP_HELPER, (str(variant),),
                                 f"the reverse sweep for {VARIANTS[variant]} ops", False,
                                 job, cache_dir()):
            return True
    return False


def _run_python_lanes(outputs, grads, inputs, retain, lanes, others):
    """_run_python once per cotangent lane, stacked (``is_grads_batched``); as the
    compiled batched sweep, retain_grad tensors get nothing."""
    per_lane = [_run_python(outputs, [None if g is None else g[k] for g in grads], inputs,
                            retain or k < lanes - 1, others=others if k == 0 else None,
                            retained=False) for k in range(lanes)]
    return [None if any(f[j] is None for f in per_lane) else np.stack([f[j] for f in per_lane])
            for j in range(len(inputs))]


def _run_python(outputs, grads, inputs, retain, accumulate=False, others=None,
                retained=True):
    """_run on the Python tier: the same results (within rounding: numpy's functions
    where the kernels call libm's), the same hooks, ``.grad`` and retain_grad rules."""
    seeds = [new_leaf(*canonical(np.array(g, F64).reshape(t.shape))) for t, g in
             zip(outputs, grads)]
    leaf_grads, adj, tapes, before_hooks = graph_backward.run(outputs, seeds, retain,
                                                              inputs, record=False)
    asked = None if inputs is None else {id(t) for t in inputs}
    numbers = {}                              # id(leaf) -> [leaf, float64 gradient]
    for key, (leaf, g) in leaf_grads.items():
        if asked is None or key in asked:
            with no_grad():                    # (as the compiled sweep runs them)
                g = run_leaf_hooks(leaf, g, 0)
        numbers[key] = [leaf, np.array(array_of(g), F64)]
    for tape in tapes.values() if retained else ():
        for row, ref in list(tape.retained.items()):
            t = ref()
            g = adj.get((tape.id, row))
            if t is not None and g is not None and t._tape is tape and t._row == row:
                _accumulate(t, _numbers(g).reshape(t.shape))
    if accumulate:
        for leaf, g in numbers.values():
            if leaf._requires_grad:
                _accumulate(leaf, g.reshape(leaf.shape))
                run_post_accumulate_hooks(leaf)
    if others is not None:
        others.extend(leaf for leaf, _ in numbers.values()
                      if leaf._requires_grad and id(leaf) not in asked)
    if inputs is None:
        return None
    rows = {**adj, **before_hooks}
    by_row = {(t._tape.id, t._row): _numbers(rows[(t._tape.id, t._row)]) for t in inputs
              if t._tape is not None and (t._tape.id, t._row) in rows}
    return _input_grads(inputs, numbers, by_row, lambda g, t: g.reshape(t.shape))


def _numbers(g):
    """An adjoint of the Python tier (a tensor, or a float) as a float64 array."""
    return np.array(array_of(g) if isinstance(g, Tensor) else g, F64)


# ---- the run: sweep tapes newest first ----------------------------------------------------

def _run(outputs, grads, inputs, retain, accumulate=False, lanes=0, others=None):
    """Sweep every tape the outputs reach. With ``inputs``, return their gradients as
    float64 arrays (None where unused); with ``accumulate``, add the gradient of every
    reached leaf that requires grad into its ``.grad``. ``lanes=K`` (K >= 1): every
    gradient carries K cotangents on a leading axis, and so does every result.
    ``others``: a list to which the reached leaves that require grad and are not among
    ``inputs`` are appended."""
    batched = lanes > 0
    lanes = max(lanes, 1)
    seeds = {}                  # tape -> [(row, gradient)]
    leaf_grads = {}             # id(leaf) -> [leaf, summed float64 gradient]
    for t, g in zip(outputs, grads):
        if t._tape is None:
            _add_grad(leaf_grads, t, np.array(g, F64))
        else:
            seeds.setdefault(t._tape, []).append((t._row, g.reshape(-1)))
    wanted = {}                 # (tape id, row) -> input positions, for non-leaf inputs
    if inputs is not None:
        for k, t in enumerate(inputs):
            if t._tape is not None:
                wanted.setdefault((t._tape.id, t._row), []).append(k)
    found = {}                  # (tape id, row) -> gradient of a wanted non-leaf
    queue = [(-tape.id, tape) for tape in seeds]
    heapq.heapify(queue)
    state = here()
    while queue:
        _, tape = heapq.heappop(queue)
        adj, adj_off, before_hooks = _sweep(tape, seeds.pop(tape), retain, lanes,
                              [row for (tid, row) in wanted if tid == tape.id] if wanted
                              else ())
        swept = adj_off.size    # another thread may still be recording past these rows:
        for row, (parent, prow) in list(tape.imports.items()):   # (one C call: a copy)
            if row < swept and adj_off[row] >= 0:
                if parent not in seeds:
                    heapq.heappush(queue, (-parent.id, parent))
                    seeds[parent] = []
                seeds[parent].append((prow, adj(row).reshape(-1)))
        for row, leaf in list(tape.leaves.items()):
            if row < swept and adj_off[row] >= 0:
                _add_grad(leaf_grads, leaf, adj(row))
        for row, ref in list(tape.retained.items()):
            t = ref()
            if t is None:
                tape.retained.pop(row, None)
            elif row < swept and adj_off[row] >= 0 and t._tape is tape and t._row == row and not batched:
                _accumulate(t, adj(row).reshape(t.shape))
        for (tid, row), ks in wanted.items():
            if tid == tape.id and adj_off[row] >= 0:
                found[(tid, row)] = before_hooks[row] if row in before_hooks else adj(row)
        # Later ops go to a new tape (importing what they use from this one), so the
        # next sweep never walks or decodes the rows of this one again. Only the thread
        # recording on it closes it (it may be between the two halves of an append).
        if tape.owner is state:
            tape.close()
    hooked = LEAF_HOOKS[0]
    if hooked:                                 # a leaf's hooks see its whole gradient;
        asked = None if inputs is None else {id(t) for t in inputs}   # (as torch: only
        for entry in leaf_grads.values():      # those of the leaves asked for)
            if getattr(entry[0], "_hooks", None) and (asked is None or id(entry[0]) in asked):
                entry[1] = run_leaf_hooks(entry[0], entry[1], lanes if batched else 0)
    if accumulate:
        for leaf, g in leaf_grads.values():
            if leaf._requires_grad:
                _accumulate(leaf, g.reshape(leaf.shape))
                if hooked:
                    run_post_accumulate_hooks(leaf)
    if others is not None:
        mine = {id(t) for t in inputs}
        others.extend(leaf for leaf, _ in leaf_grads.values()
                      if leaf._requires_grad and id(leaf) not in mine)
    if inputs is None:
        return None
    lead = (lanes,) if batched else ()
    return _input_grads(inputs, leaf_grads, found, lambda g, t: g.reshape(lead + t.shape))


def _input_grads(inputs, leaf_grads, by_row, finish):
    """Each input's gradient (None where unused): a leaf's summed over its rows, a
    non-leaf's from its row; ``finish(g, t)`` shapes it for t."""
    result = []
    for t in inputs:
        if t._tape is None:
            entry = leaf_grads.get(id(t))
            g = None if entry is None else entry[1]
        else:
            g = by_row.get((t._tape.id, t._row))
        result.append(None if g is None else finish(g, t))
    return result


def _sweep(tape, seeds, retain, lanes, wanted=()):
    """One compiled sweep of ``tape`` with ``lanes`` cotangents per seed. Returns the
    adjoint offsets and ``adjoint(row)``: a copy of row's adjoint, ``(lanes, size)`` when
    lanes > 1, else flat. In a large sweep only rows the engine reads (leaves, imports,
    retain_grad() rows, ``wanted`` non-leaf inputs) keep their adjoint to the end, so
    the others' space is reused as the sweep goes (a working set that stays in cache)."""
    offsets = [0]
    for _, g in seeds:
        offsets.append(offsets[-1] + g.size)
    seed_rows = np.array([r for r, _ in seeds], np.int64)
    versions.check(tape, seed_rows)
    seed_off = np.array(offsets, np.int64)
    seed_vals = seeds[0][1] if len(seeds) == 1 else np.concatenate([g for _, g in seeds])
    own, row_addr = leaf_buffers(tape) if lanes == 1 else (None, NO_ROWS)
    if lanes * tape.columns().total_size < RECYCLE_MIN:
        read = NO_ROWS                 # every adjoint kept: small enough to stay in cache
    else:
        read = np.fromiter(itertools.chain(list(tape.leaves), list(tape.imports),
                                           list(tape.retained), wanted), np.int64)
        if not read.size:
            read = NO_READ
    stops, hooked = stops_of(tape)
    before_hooks = {}                  # a wanted non-leaf input's gradient, as torch
    on_stop = None                     # returns it: before its own hooks
    if stops is not None:
        wanted_rows = set(wanted)

        def on_stop(row, view):
            if row in wanted_rows:
                before_hooks[row] = view[0].copy() if lanes == 1 else view.copy()
            dtype, hooks = hooked[row]
            for k in range(view.shape[0]):
                view[k] = run_hooks(hooks, view[k], tape.shape(row), dtype)
    sweep = functools.partial(executor_for(tape).sweep, tape, seed_rows, seed_vals, seed_off,
                              lanes, retain, row_addr, read,
                              NO_STOPS if stops is None else stops, on_stop, custom_vjps(tape))
    try:
        adj, adj_off, stride = sweep()
    except RuntimeError as error:     # (raised before the sweep did anything)
        if str(error) != RELEASED_MSG or not versions.unreleased(tape, seed_rows):
            raise
        adj, adj_off, stride = sweep()          # (torch walks nodes that saved nothing)

    def adjoint(row):
        if own and row in own:                 # written in place: the caller's to keep
            return own.pop(row)
        off, size = adj_off[row], tape.size(row)
        if lanes == 1:
            return adj[off:off + size].copy()
        return adj[:lanes * stride].reshape(lanes, stride)[:, off:off + size].copy()
    return adjoint, adj_off, before_hooks


def custom_vjps(tape):
    """The executor's ``on_custom`` for a tape with user ops (None without)."""
    if not tape.customs:
        return None
    return lambda row, view, accumulate: _custom_vjp(tape, row, view, accumulate)


def _custom_vjp(tape, row, view, accumulate):
    """A user's op (custom.py) met by the compiled sweep: its vjp on numpy values, once
    per lane, into its operands' adjoints."""
    op = tape.customs[row]
    operands = tape.row(row).operands
    inputs = [np.asarray(tape.read(r)[2], np.float64).reshape(tape.shape(r))
              for r in operands]
    output = np.asarray(tape.read(row)[2], np.float64).reshape(tape.shape(row))
    per_operand = [[] for _ in operands]
    copied = not getattr(op, "keeps_cotangent", False)     # (a user's vjp may write to g)
    needed = [tape.op(r) != CONST for r in operands]
    for k in range(view.shape[0]):
        g = view[k].reshape(output.shape)
        cots = op.cotangents(inputs, output, g.copy() if copied else g, needed)
        for j, c in enumerate(cots):
            per_operand[j].append(None if c is None else np.asarray(c, np.float64))
    for j, r in enumerate(operands):
        lanes = per_operand[j]
        if tape.op(r) == CONST or all(c is None for c in lanes):
            continue
        if len(lanes) == 1:                    # (one lane: no stacked copy)
            accumulate(r, lanes[0][None])
            continue
        accumulate(r, np.stack([np.zeros(inputs[j].shape) if c is None else c
                                for c in lanes]))


NO_READ = np.array([-1], np.int64)   # a read list that names no row (empty means all)


def leaf_buffers(tape):
    """Fresh gradient arrays for the large array leaves of a tape, and their addresses
    by row: the sweep writes those gradients there, sparing a copy out of the shared
    adjoint buffer."""
    if not tape.leaves:
        return None, NO_ROWS
    rows = np.fromiter(tape.leaves, np.int64, len(tape.leaves))   # one pass, not per leaf
    rows, sizes = tape.large_arrays(rows, OWN_BUFFER_MIN)
    if not rows.size:
        return None, NO_ROWS
    own = {int(row): np.empty(int(size)) for row, size in zip(rows, sizes)}
    row_addr = np.zeros(max(own) + 1, np.int64)
    for row, buf in own.items():
        row_addr[row] = address_of(buf)
    return own, row_addr


def _add_grad(leaf_grads, leaf, g):
    """Sum a leaf's gradient over its rows (g is the caller's own array)."""
    entry = leaf_grads.get(id(leaf))
    if entry is None:
        leaf_grads[id(leaf)] = [leaf, g.astype(F64, copy=False)]
    else:
        entry[1] += g.reshape(entry[1].shape)


def _as_grad(g, t, shape=None):
    """A float64 gradient array the caller owns, as a Tensor of t's dtype and shape (or
    ``shape``)."""
    shape = t.shape if shape is None else shape
    return new_leaf(g.astype(t.dtype, copy=False).reshape(shape), shape, t.dtype)


# Two threads may sweep into the same leaf (a shared parameter): its .grad is read,
# added to and written back under this lock, as torch's AccumulateGrad does.
ACCUMULATE_LOCK = threading.Lock()


def _accumulate(t, g):
    """t.grad += g, in place after the first time (torch's AccumulateGrad)."""
    with ACCUMULATE_LOCK:
        _accumulate_unlocked(t, g)


def _accumulate_unlocked(t, g):
    cur = getattr(t, "_grad", None)
    if cur is None:
        t._grad = _as_grad(g, t)
        return
    v = cur._value
    if type(v) is np.ndarray and v.flags.writeable:
        v += np.asarray(g, v.dtype).reshape(v.shape)
    else:
        cur._value = (np.asarray(v) + np.asarray(g).reshape(cur.shape)).astype(cur.dtype)
        if cur.shape == ():
            cur._value = float(cur._value)
