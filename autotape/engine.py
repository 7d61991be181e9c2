"""grad() and backward(): argument checks, seeding, one compiled sweep per tape, results.

Both compute, for each requested tensor, the gradient of sum_i <outputs[i],
grad_outputs[i]>. ``grad`` returns it; ``backward`` accumulates it into ``.grad``.
Checks and messages follow torch.autograd so that code and searches carry over.
"""
import heapq
import warnings

import numpy as np

from . import recorded
from .kernels.blas import DGEMM
from .kernels.cpu import OK, RELEASED, UNKNOWN_OP, reverse_sweep
from .record import astype
from .tensor import F64, Tensor, _plain

_RELEASED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs``, as a tuple (or a dict when
    ``inputs`` is a dict). Never touches ``.grad``, except of ``retain_grad()`` tensors.

    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> at.grad((x ** 2).sum(), x)
    (tensor([2., 4.]),)
    """
    outputs = _tensor_tuple(outputs)
    keys = None
    if isinstance(inputs, dict):
        keys, inputs = list(inputs.keys()), tuple(inputs.values())
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    _unsupported(is_grads_batched)
    given = _grads_tuple(grad_outputs, len(outputs))
    grads = _make_grads(outputs, given)
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    for t in inputs:
        if not isinstance(t, Tensor):
            raise RuntimeError("all inputs have to be Tensors or GradientEdges, but got "
                               f"{type(t).__name__}")
    _check_outputs(outputs, grads)
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    retain = create_graph if retain_graph is None else retain_graph
    if create_graph:
        found = _run_recorded(outputs, given, inputs, retain)
    else:
        found = _run(outputs, grads, inputs, retain)
    result = []
    for k, t in enumerate(inputs):
        g = found[k]
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {k} appears to not have been used "
                    "in the graph. Set allow_unused=True if this is the desired behavior.")
            if materialize_grads:
                g = recorded.connect(_plain(np.zeros(t.shape), t.shape, F64), t) \
                    if create_graph else np.zeros(t.shape)
        if g is None or isinstance(g, Tensor):
            result.append(g)
        else:
            result.append(_as_grad(g, t))
    return dict(zip(keys, result)) if keys is not None else tuple(result)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             inputs=None):
    """Accumulate gradients of ``tensors`` (weighted by ``grad_tensors``) into ``.grad``
    of every leaf that requires grad, or only of ``inputs``.

    >>> x = at.ones(1, requires_grad=True)
    >>> at.backward(x ** 2); at.backward(x ** 3); x.grad
    tensor([5.])
    """
    tensors = _tensor_tuple(tensors)
    if inputs is not None:
        if isinstance(inputs, dict):
            inputs = tuple(inputs.values())
        inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
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
    if inputs is None:
        _run(tensors, grads, None, retain, accumulate=True)
        return
    unique = list({id(t): t for t in inputs}.values())
    found = _run(tensors, grads, unique, retain)
    for t, g in zip(unique, found):
        if g is not None:
            if t._tape is not None:
                t._retains_grad = True
            _accumulate(t, g)


# ---- argument checks ----------------------------------------------------------------------

def _unsupported(is_grads_batched):
    if is_grads_batched:
        raise NotImplementedError("is_grads_batched=True is not supported by this autotape "
                                  "version yet")


def _tensor_tuple(outputs):
    return (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)


def _grads_tuple(grads, n):
    if grads is None:
        return (None,) * n
    if isinstance(grads, Tensor):
        return (grads,)
    return tuple(grads)


def _shape_text(shape):
    return str(tuple(shape))


def _make_grads(outputs, grads):
    """Check each (output, gradient) pair and return the gradients as float64 arrays."""
    out = []
    for i, (t, g) in enumerate(zip(outputs, grads)):
        if isinstance(g, Tensor):
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
    for i, t in enumerate(outputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"outputs must be Tensors, but element {i} is "
                            f"{type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               "have a grad_fn")


# ---- create_graph=True: the backward pass recorded (recorded.py) ---------------------------

_CREATE_GRAPH_WARNING = (
    "Using backward() with create_graph=True will create a reference cycle between the "
    "parameter and its gradient which can cause a memory leak. We recommend using "
    "autograd.grad when creating the graph to avoid this. If you have to use this "
    "function, make sure to reset the .grad fields of your parameters to None after use "
    "to break the cycle and avoid the leak.")


def _run_recorded(outputs, given, inputs, retain, accumulate=False):
    """As _run, with gradients that are themselves recorded tensors."""
    seeds = [recorded.as_tensor_seed(g, t) for t, g in zip(outputs, given)]
    leaf_grads, adj, tapes = recorded.run(outputs, seeds, retain, _RELEASED_MSG)
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
                leaf._grad = g if getattr(leaf, "_grad", None) is None else leaf._grad + g
    return None if inputs is None else _input_grads(inputs, leaf_grads, adj, _recorded_grad)


def _recorded_grad(g, t):
    """A recorded gradient for t: connected to t, in t's dtype."""
    g = recorded.connect(g, t)
    return g if g.dtype == t.dtype else astype(g, t.dtype)


# ---- the run: sweep tapes newest first ----------------------------------------------------

def _run(outputs, grads, inputs, retain, accumulate=False):
    """Sweep every tape the outputs reach. With ``inputs``, return their gradients as
    float64 arrays (None where unused); with ``accumulate``, add the gradient of every
    reached leaf that requires grad into its ``.grad``."""
    seeds = {}                  # tape -> [(row, gradient)]
    leaf_grads = {}             # id(leaf) -> [leaf, summed float64 gradient]
    for t, g in zip(outputs, grads):
        if t._tape is None:
            _add_grad(leaf_grads, t, g)
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
    while queue:
        _, tape = heapq.heappop(queue)
        adj, adj_off = _sweep(tape, seeds.pop(tape), retain)
        for row, (parent, prow) in tape.imports.items():
            if adj_off[row] >= 0:
                if parent not in seeds:
                    heapq.heappush(queue, (-parent.id, parent))
                    seeds[parent] = []
                seeds[parent].append((prow, _row_slice(adj, adj_off, tape, row).copy()))
        for row, leaf in tape.leaves.items():
            if adj_off[row] >= 0:
                _add_grad(leaf_grads, leaf, _row_slice(adj, adj_off, tape, row))
        for row, ref in list(tape.retained.items()):
            t = ref()
            if t is None:
                del tape.retained[row]
            elif adj_off[row] >= 0 and t._tape is tape and t._row == row:
                _accumulate(t, _row_slice(adj, adj_off, tape, row).reshape(t.shape).copy())
        for (tid, row), ks in wanted.items():
            if tid == tape.id and adj_off[row] >= 0:
                found[(tid, row)] = _row_slice(adj, adj_off, tape, row).copy()
        if not retain:
            tape.open = False
    if accumulate:
        for leaf, g in leaf_grads.values():
            if leaf._requires_grad:
                _accumulate(leaf, g.reshape(leaf.shape))
    if inputs is None:
        return None
    return _input_grads(inputs, leaf_grads, found, lambda g, t: g.reshape(t.shape))


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


def _sweep(tape, seeds, retain):
    seed_rows = np.array([r for r, _ in seeds], np.int64)
    seed_off = np.zeros(len(seeds) + 1, np.int64)
    np.cumsum([g.size for _, g in seeds], out=seed_off[1:])
    seed_vals = np.concatenate([g for _, g in seeds]) if seeds else np.zeros(0)
    c = tape.columns()
    adj = _scratch(c.total_size)
    status, adj_off = reverse_sweep(
        c.rows, c.ipool, c.shape_ndim, c.shape_start, c.shape_dims, c.shape_size,
        tape.arena.buffer_info()[0], len(tape.arena), c.big_addr, tape.released, retain,
        seed_rows, seed_vals, seed_off, adj, _Blas.dgemm)
    if status == RELEASED:
        raise RuntimeError(_RELEASED_MSG)
    if status == UNKNOWN_OP:
        raise RuntimeError("autotape internal error: the sweep met an opcode it does not "
                           "know; please report this")
    assert status == OK
    return adj, adj_off


class _Blas:
    dgemm = DGEMM          # set to 0 to use the sweep's own loops


class _Scratch:
    buffer = np.zeros(0)


def _scratch(size):
    """Adjoint space for a sweep, reused from call to call: fresh pages cost more to
    touch than the arithmetic done in them (a 70 MB buffer: ~0.1 s of page faults)."""
    if _Scratch.buffer.size < size:
        _Scratch.buffer = np.empty(max(size, int(_Scratch.buffer.size * 1.5)))
    return _Scratch.buffer


def _row_slice(adj, adj_off, tape, row):
    off = adj_off[row]
    return adj[off:off + tape.row_size(row)]


def _add_grad(leaf_grads, leaf, g):
    """Sum a leaf's gradient over its rows (copied out: the adjoint space is reused)."""
    entry = leaf_grads.get(id(leaf))
    if entry is None:
        leaf_grads[id(leaf)] = [leaf, g.astype(F64)]          # a copy
    else:
        entry[1] += g.reshape(entry[1].shape)


def _as_grad(g, t):
    """A float64 gradient array the caller owns, as a Tensor of t's shape and dtype."""
    return _plain(g.astype(t.dtype, copy=False).reshape(t.shape), t.shape, t.dtype)


def _accumulate(t, g):
    """t.grad += g, in place after the first time (torch's AccumulateGrad)."""
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
