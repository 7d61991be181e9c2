"""Transforms on functions, as in torch.func and jax: grad, value_and_grad, vjp, jvp,
jacrev, jacfwd, jacobian, hessian, hvp, vhp.

Each transform calls ``f`` once on fresh leaves (so ``f`` is recorded on the tape),
then asks the engine for derivatives. Whole Jacobians and Hessians take one compiled
sweep whose lanes carry every cotangent at once (``grad(..., is_grads_batched=True)``);
a Hessian is the Jacobian of the gradient's own tape. Arguments and results may be
Tensors, numpy arrays, Python numbers, or tuples / lists / dicts of them.

Transforms nest: an argument that already requires grad (a leaf of an outer transform,
or a user's tensor) is differentiated in place with ``create_graph=True``, so the
result stays differentiable, as torch.func does. So is a function that closes over
such a tensor: ``grad(lambda x: x * grad(lambda y: x * y)(2.0))(1.0)`` is 2, because
the inner derivative is recorded once its sweep finds that it reached x.

>>> at.func.grad(lambda x: (x ** 3).sum())(at.tensor([1.0, 2.0]))
tensor([ 3., 12.])
"""
import numpy as np

from .engine import grad as _grad, transform_grad
from .grad_mode import enable_grad
from .guards import current_trace
from .functions import shaping
from .ops.indexing import astype, stack
from .program import LeanProgram
from .pytree import flatten
from .tape import close_open_tape
from .complex_numbers import ComplexTensor, conj
from .tensor import Tensor, is_complex_data, new_leaf

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "jacrev", "jacfwd", "jacobian",
           "hessian", "hvp", "vhp", "vmap"]


def _tracked(value, where):
    """A tensor to differentiate with respect to, this transform's own variable.

    For a value that already requires grad (an outer transform's variable, or a
    user's tensor) that is a recorded copy of it: the transform differentiates with
    respect to the copy, so it sees only the dependence that flows through its own
    argument (the perturbation tag of jax's tracers), while an outer derivative
    still flows through the copy to the value. Else a new float leaf holding it."""
    if isinstance(value, Tensor):
        if value.requires_grad:
            with enable_grad():
                return astype(value, value.dtype)
        data = value.numpy()
    elif isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.number, np.ndarray)):
        raise TypeError(f"{where}: expected a Tensor, a numpy array or a Python number, "
                        f"but got {type(value).__name__}")
    else:
        data = np.asarray(value)
        if data.dtype.kind in "iu":                 # 2 or [1, 2] mean 2.0 or [1.0, 2.0],
            data = data.astype(np.float64)          # as at.compile takes them
    if data.dtype.kind != "f":
        raise TypeError(f"{where}: only floating point inputs can be differentiated, but "
                        f"got dtype {data.dtype}")
    leaf = new_leaf(data.copy() if data.ndim else float(data), data.shape, data.dtype)
    return leaf.requires_grad_()


def _as_tensor(value):
    if isinstance(value, Tensor):
        return value
    data = np.asarray(value, np.float64)
    return new_leaf(data if data.ndim else float(data), data.shape, data.dtype)


def _argnums_tuple(argnums, nargs, name):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise RuntimeError(f"{name}: argnums must be non-empty")
    for a in nums:
        if not isinstance(a, int) or not -nargs <= a < nargs:
            raise RuntimeError(f"{name}: Got argnums={argnums}, but only {nargs} "
                               "positional inputs")
    return tuple(a % nargs for a in nums)


class _Call:
    """One call of f with the arguments at ``argnums`` replaced by tracked tensors."""

    def __init__(self, f, args, argnums, has_aux, name):
        self.single = isinstance(argnums, int)
        self.nums = _argnums_tuple(argnums, len(args), name)
        args = list(args)
        self.rebuilds, self.inputs, self.counts, self.fresh = [], [], [], []
        # Derivatives stay differentiable when an input came in requiring grad, and
        # inside at.compile's recording (f may read its traced values as constants).
        self.create_graph = current_trace() is not None
        for a in self.nums:
            leaves, rebuild = flatten(args[a])
            tracked = [_tracked(v, name) for v in leaves]
            self.create_graph |= any(t._tape is not None for t in tracked)
            self.fresh.extend(t for t in tracked if t._tape is None)
            args[a] = rebuild(tracked)
            self.rebuilds.append(rebuild)
            self.inputs.extend(tracked)
            self.counts.append(len(tracked))
        with enable_grad():         # like torch.func: an outer no_grad does not apply
            result = f(*args)
        self.aux = None
        if has_aux:
            if not (isinstance(result, tuple) and len(result) == 2):
                raise RuntimeError(f"{name}(f, ...)(*args): output of function f should be "
                                   "a tuple: (output, aux) if has_aux is True")
            result, self.aux = result
        self.out = result

    def retire(self, *more):
        """The transform is done: its own leaves stop requiring grad, so that a sweep of
        an enclosing transform that passes through them does not take them for
        variables of its own (see transform_grad)."""
        for t in self.fresh + list(more):
            t._requires_grad = False           # (no copy: the transform made the value,
            t._cache = None                    # and nothing else writes it)

    def per_argnum(self, per_input):
        """Regroup one value per tracked input into the arguments' structures."""
        grouped, start = [], 0
        for rebuild, n in zip(self.rebuilds, self.counts):
            grouped.append(rebuild(per_input[start:start + n]))
            start += n
        return grouped[0] if self.single else tuple(grouped)

    def derivatives(self, outputs, cotangents, batched=False):
        """One gradient per tracked input of sum <outputs, cotangents> (zeros where an
        input is unused), through one sweep."""
        usable = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
        if not usable:
            lead = cotangents[0].shape[:1] if batched else ()
            return [_zeros(lead + t.shape, t) for t in self.inputs]
        outs, cots = zip(*usable)
        with enable_grad():
            if self.create_graph:
                return list(_grad(outs, self.inputs, cots, create_graph=True,
                                  retain_graph=True, allow_unused=True,
                                  materialize_grads=True, is_grads_batched=batched))
            found, self.create_graph = transform_grad(outs, self.inputs, cots, batched)
            return list(found)


def _zeros(shape, like):
    return new_leaf(np.zeros(shape, like.dtype), shape, like.dtype)


def _outputs(out, name):
    """f's outputs as tensors: a float or float array that does not depend on the
    inputs is a constant (its derivatives are zeros, as in jax)."""
    leaves, rebuild = flatten(out)
    tensors = []
    for v in leaves:
        if not isinstance(v, Tensor):
            if isinstance(v, (bool, np.bool_)) or not isinstance(
                    v, (int, float, np.number, np.ndarray)) or np.asarray(v).dtype.kind != "f":
                raise RuntimeError(f"{name}: Expected f to return Tensors or float arrays "
                                   f"(or tuples, lists and dicts of them), but got "
                                   f"{type(v).__name__}")
            v = _as_tensor(v)
        tensors.append(v)
    return tensors, rebuild


# ---- gradients -----------------------------------------------------------------------------

def value_and_grad(f, argnums=0, has_aux=False, holomorphic=False):
    """A function returning ``(f(*args), gradient)``; with ``has_aux``, f returns
    ``(value, aux)`` and the result is ``((value, aux), gradient)``, as in jax.

    For a complex argument z = x + iy of a real f the gradient is ``df/dx + i df/dy``
    (torch's convention); ``holomorphic=True`` takes the complex derivative f'(z) of a
    complex f (jax's flag).

    >>> at.func.value_and_grad(lambda x: x ** 2)(3.0)
    (tensor(9.), tensor(6.))
    >>> at.func.grad(lambda z: z ** 2, holomorphic=True)(1j)
    tensor(0.+2.j)
    """
    if holomorphic:
        return _holomorphic_value_and_grad(f, argnums, has_aux)

    def value_and_grad_f(*args):
        call = _Call(f, args, argnums, has_aux, "value_and_grad")
        out = call.out
        if isinstance(out, ComplexTensor) or is_complex_data(out):
            raise TypeError("grad requires real-valued outputs (output dtype that is a "
                            f"sub-dtype of np.floating), but got {out.dtype}. For "
                            "holomorphic differentiation, pass holomorphic=True.")
        if isinstance(out, (float, np.floating)) or (isinstance(out, np.ndarray) and
                                                     out.dtype.kind == "f"):
            out = _as_tensor(out)              # does not depend on the inputs
        if not isinstance(out, Tensor) or out.size != 1:
            dims = out.ndim if isinstance(out, Tensor) else type(out).__name__
            raise RuntimeError(
                f"grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, "
                f"got tensor with {dims} dims. Maybe you wanted to use the vjp or jacrev "
                "APIs instead?")
        g = call.per_argnum(call.derivatives([out], [new_leaf(np.ones(out.shape), out.shape,
                                                            np.dtype(np.float64))]))
        value = out if call.create_graph else out.detach()
        call.retire()
        return ((value, call.aux) if has_aux else value), g
    return value_and_grad_f


def _holomorphic_value_and_grad(f, argnums, has_aux):
    """f'(z) of a holomorphic f: for f = u + iv, the gradient of u is u_x + i u_y, and
    f' = u_x + i v_x = u_x - i u_y (Cauchy-Riemann), its conjugate."""
    def real_part(*args):
        result = f(*args)
        value, aux = result if has_aux else (result, None)
        _complex_output(value, "grad")
        return value.real, (value, aux)

    inner = value_and_grad(real_part, argnums, has_aux=True)

    def value_and_grad_f(*args):
        (_, (value, aux)), g = inner(*args)
        g = _map_complex(g, conj)
        return ((value, aux) if has_aux else value), g
    return value_and_grad_f


def _complex_output(value, name):
    if not (isinstance(value, ComplexTensor) or is_complex_data(value)):
        raise TypeError(f"{name} with holomorphic=True requires outputs with complex "
                        f"dtype, but got {getattr(value, 'dtype', type(value).__name__)}.")


def _map_complex(tree, fn):
    """fn applied to the complex leaves of a result tree."""
    if isinstance(tree, (tuple, list)):
        return type(tree)(_map_complex(t, fn) for t in tree)
    if isinstance(tree, dict):
        return {k: _map_complex(v, fn) for k, v in tree.items()}
    return fn(tree) if isinstance(tree, ComplexTensor) else tree


def grad(f, argnums=0, has_aux=False, holomorphic=False):
    """The gradient of a scalar function: ``grad(f)(*args)`` has the structure of the
    argument(s) at ``argnums``; with ``has_aux``, f returns ``(value, aux)`` and the
    result is ``(gradient, aux)``.

    >>> at.func.grad(lambda x, y: (x * y).sum(), argnums=(0, 1))(at.tensor([2.0]), 3.0)
    (tensor([3.]), tensor(2.))
    """
    vg = value_and_grad(f, argnums, has_aux, holomorphic)

    def grad_f(*args):
        value, g = vg(*args)
        return (g, value[1]) if has_aux else g
    return grad_f


def vjp(f, *primals, has_aux=False):
    """``(f(*primals), vjp_fn)``: ``vjp_fn(cotangents)`` returns the tuple of
    cotangent-weighted gradients, one per primal, and can be called many times.

    >>> out, vjp_fn = at.func.vjp(lambda x: x ** 2, at.tensor([1.0, 2.0]))
    >>> vjp_fn(at.tensor([1.0, 10.0]))
    (tensor([ 2., 40.]),)
    """
    call = _Call(f, primals, tuple(range(len(primals))), has_aux, "vjp")
    outs, _ = _outputs(call.out, "vjp")

    def vjp_fn(cotangents):
        cots, _ = flatten(cotangents)
        if len(cots) != len(outs):
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as "
                               f"pytree structure of outputs to the function: got "
                               f"{len(cots)} cotangents for {len(outs)} outputs")
        cots = [_as_tensor(c) for c in cots]
        for c, o in zip(cots, outs):
            if c.shape != o.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of "
                                   f"{c.shape} and output[0] has a shape of {o.shape}.")
        return call.per_argnum(call.derivatives(outs, cots))
    out = call.out if call.create_graph else _detached(call.out)
    return (out, vjp_fn, call.aux) if has_aux else (out, vjp_fn)


def _detached(out):
    leaves, rebuild = flatten(out)
    return rebuild([v.detach() if isinstance(v, Tensor) else v for v in leaves])


# ---- Jacobians: every cotangent in one batched sweep ---------------------------------------

def _jacobian_rows(call, outs):
    """d out_i / d input_j for every output i and tracked input j, each of shape
    ``out_i.shape + input_j.shape``, from one sweep with one lane per output element."""
    sizes = [o.size for o in outs]
    total = sum(sizes)
    eye = np.eye(total)
    cots, start = [], 0
    for o, n in zip(outs, sizes):
        block = np.ascontiguousarray(eye[:, start:start + n]).reshape((total,) + o.shape)
        cots.append(new_leaf(block, block.shape, np.dtype(np.float64)))
        start += n
    rows = call.derivatives(outs, cots, batched=True)    # each (total, *input.shape)
    jac, start = [], 0
    for o, n in zip(outs, sizes):
        jac.append([r[start:start + n].reshape(o.shape + t.shape)
                    for r, t in zip(rows, call.inputs)])
        start += n
    return jac


def _holds_complex(tree):
    return any(isinstance(v, ComplexTensor) or is_complex_data(v) for v in _tree_leaves(tree))


def _tree_leaves(tree):
    if isinstance(tree, (tuple, list)):
        return [leaf for t in tree for leaf in _tree_leaves(t)]
    if isinstance(tree, dict):
        return [leaf for t in tree.values() for leaf in _tree_leaves(t)]
    return [tree]


def _refuse_complex_outputs(out, name):
    if _holds_complex(out):
        raise TypeError(f"{name} requires real-valued outputs (output dtype that is a "
                        "sub-dtype of np.floating), but got complex128. For holomorphic "
                        "differentiation, pass holomorphic=True. For differentiation of "
                        "non-holomorphic functions involving complex outputs, use vjp "
                        "directly.")


def _holomorphic_jacobian(jac, f, argnums, has_aux, name):
    """jac(f) with holomorphic=True: the Jacobian of the outputs' parts (pytree nodes:
    shape + (2,)) with respect to the arguments' parts; the derivatives along the real
    axis, u_x and v_x, make f'(z) = u_x + i v_x."""
    found = []

    def parts_of_outputs(*args):
        result = f(*args)
        value, aux = result if has_aux else (result, None)
        for v in _tree_leaves(value):
            _complex_output(v, name)
        leaves, rebuild = flatten(value)
        found[:] = [rebuild, [leaf.ndim - 1 for leaf in leaves]]
        return (leaves, aux) if has_aux else leaves

    def jac_f(*args):
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        for a in nums:
            if not all(isinstance(v, ComplexTensor) or is_complex_data(v)
                       for v in _tree_leaves(args[a])):
                raise TypeError(f"{name} with holomorphic=True requires inputs with "
                                "complex dtype")
        result = jac(parts_of_outputs, argnums, has_aux)(*args)
        per_output, aux = result if has_aux else (result, None)
        rebuild, ndims = found
        out = rebuild([_map_complex(j, lambda c, n=n: ComplexTensor(
            shaping.moveaxis(c.parts[..., 0], n, -1))) for j, n in zip(per_output, ndims)])
        return (out, aux) if has_aux else out
    return jac_f


def jacrev(f, argnums=0, has_aux=False, holomorphic=False):
    """The Jacobian of f: for an output of shape S and an input of shape T, a Tensor of
    shape ``S + T``. Nested as (outputs, then argnums) when either is a tuple.

    >>> J = at.func.jacrev(lambda x: at.sin(x) * x)(at.tensor([0.0, 1.0]))
    >>> J.shape
    (2, 2)
    """
    if holomorphic:
        return _holomorphic_jacobian(jacrev, f, argnums, has_aux, "jacrev")

    def jacrev_f(*args):
        call = _Call(f, args, argnums, has_aux, "jacrev")
        _refuse_complex_outputs(call.out, "jacrev")
        outs, rebuild = _outputs(call.out, "jacrev")
        jac = _jacobian_rows(call, outs)
        call.retire()
        result = rebuild([call.per_argnum(per_input) for per_input in jac])
        return (result, call.aux) if has_aux else result
    return jacrev_f


jacobian = jacrev


def _forward_mode(call, outs, seeds):
    """Forward mode over f's recording: for each output, its tangents in the K
    directions ``seeds`` (total input size, K), shape ``(K,) + output.shape``, from one
    pass of the lean program (program.py) carrying K lanes. None where that cannot
    run (derivatives that must stay differentiable, a recording spread over tapes or
    with ops the lean program does not lower): the caller takes the reverse sweep."""
    if call.create_graph or any(x.dtype != np.float64 for x in call.inputs):
        return None
    K = seeds.shape[1]
    starts = np.cumsum([0] + [x.size for x in call.inputs])
    recorded = [o for o in outs if o._tape is not None]
    tapes = {id(o._tape): o._tape for o in recorded}
    if len(tapes) > 1:
        return None
    found = {}
    if tapes:
        tape = next(iter(tapes.values()))
        in_rows, used = [], []
        for k, x in enumerate(call.inputs):
            cache = x._cache
            if x._tape is None and cache is not None and cache[0]() is tape:
                in_rows.append(cache[1])
                used.append(k)
        if tape.imports or len(tape.leaves) != len(in_rows):
            return None       # (f read variables besides its inputs: an outer
                              # transform's, whose derivatives must flow through)
        lean = LeanProgram.lower(tape, in_rows, [o._row for o in recorded], loops=False)
        if lean is None or lean.user_calls is not None:
            return None
        X = np.concatenate([np.reshape(call.inputs[k]._value, -1) for k in used] or
                           [np.zeros(0)])
        S = np.concatenate([seeds[starts[k]:starts[k + 1]] for k in used] or
                           [np.zeros((0, K))])
        _, tangents = lean.tangents(X[None], np.ascontiguousarray(S)[None])
        at = 0
        for o in recorded:
            found[id(o)] = tangents[0, at:at + o.size].T.reshape((K,) + o.shape)
            at += o.size
    lanes = []
    for o in outs:
        if id(o) in found:
            lanes.append(found[id(o)])
            continue
        k = next((k for k, x in enumerate(call.inputs) if x is o), None)
        lanes.append(np.zeros((K,) + o.shape) if k is None else
                     seeds[starts[k]:starts[k + 1]].T.reshape((K,) + o.shape))
    return lanes


def _own_tape():
    """f's recording goes on a tape of its own, so that the forward-mode pass reads f
    alone; inside at.compile's recording it stays on that tape (the whole program is
    one recording: the derivatives are recorded, by the reverse sweep)."""
    if current_trace() is None:
        close_open_tape()


def jacfwd(f, argnums=0, has_aux=False, holomorphic=False):
    """The Jacobian of f, as jacrev returns it, by forward mode: one pass over f's
    recording carrying a tangent lane per input element (the cheap way when inputs are
    few and outputs many). Where the recording has ops that pass does not run (matmul,
    linear algebra, max / min / prod) or the result must stay differentiable, the
    reverse sweep gives the same numbers.

    >>> at.func.jacfwd(lambda x: x ** 2)(at.tensor([1.0, 2.0]))
    tensor([[2., 0.],
            [0., 4.]])
    """
    if holomorphic:
        return _holomorphic_jacobian(jacfwd, f, argnums, has_aux, "jacfwd")

    def jacfwd_f(*args):
        _own_tape()
        call = _Call(f, args, argnums, has_aux, "jacfwd")
        _refuse_complex_outputs(call.out, "jacfwd")
        outs, rebuild = _outputs(call.out, "jacfwd")
        total = sum(x.size for x in call.inputs)
        lanes = _forward_mode(call, outs, np.eye(total))
        if lanes is None:
            jac = _jacobian_rows(call, outs)
        else:
            starts = np.cumsum([0] + [x.size for x in call.inputs])
            jac = [[_leaf(np.moveaxis(lane[a:b].reshape(x.shape + o.shape),
                                      list(range(x.ndim)), list(range(o.ndim, o.ndim + x.ndim))),
                          o.dtype)
                    for a, b, x in zip(starts, starts[1:], call.inputs)]
                   for lane, o in zip(lanes, outs)]
        call.retire()
        result = rebuild([call.per_argnum(per_input) for per_input in jac])
        return (result, call.aux) if has_aux else result
    return jacfwd_f


def _leaf(array, dtype):
    a = np.array(array, dtype, order="C")      # (ascontiguousarray makes 0-d arrays 1-d)
    return new_leaf(a if a.ndim else float(a), a.shape, a.dtype)


def hessian(f, argnums=0):
    """The Hessian of a scalar function: one recording of f and of its gradient (with
    create_graph), then forward over reverse (jacfwd of the gradient: one pass with a
    tangent lane per input element; a reverse sweep with a lane per row where that pass
    cannot run). Shape ``T + T`` for an input of shape T.

    >>> at.func.hessian(lambda x: x[0] ** 2 * x[1] + x[1] ** 3)(at.tensor([1.0, 2.0]))
    tensor([[ 4.,  2.],
            [ 2., 12.]])
    """
    inner = jacfwd(grad(f, argnums), argnums)

    def hessian_f(*args):
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        if any(_holds_complex(args[a]) for a in nums if -len(args) <= a < len(args)):
            raise TypeError("hessian of a function of complex inputs: its gradient "
                            "dL/dx + i dL/dy is not holomorphic, so its Jacobian is no "
                            "complex matrix; take the Hessian with respect to the parts, "
                            "hessian(lambda p: f(at.view_as_complex(p)))(at.view_as_real(z))")
        return inner(*args)
    return hessian_f


# ---- directional derivatives ---------------------------------------------------------------

def _tangent_tensors(call, tangents, name):
    tans = [_as_tensor(v) for v in flatten(tangents)[0]]
    if len(tans) != len(call.inputs):
        raise RuntimeError(f"{name}: Expected primals and tangents to have the same "
                           f"structure, got {len(call.inputs)} primals and {len(tans)} "
                           "tangents")
    for t, x in zip(tans, call.inputs):
        if t.shape != x.shape:
            raise RuntimeError(f"{name}: Expected primals and tangents to have the same "
                               f"shape, got {x.shape} and {t.shape}")
    return tans


def jvp(f, primals, tangents, has_aux=False):
    """``(f(*primals), J @ tangents)``, by forward mode: one pass over f's recording
    carrying the tangents. Where that pass cannot run (see jacfwd) or the result must
    stay differentiable: the reverse sweep is linear in its cotangent u, so J t is the
    gradient of <J^T u, t> with respect to u, taken through the recorded backward (two
    sweeps, no finite differences).

    >>> at.func.jvp(lambda x: x ** 3, (at.tensor([2.0]),), (at.tensor([1.0]),))
    (tensor([8.]), tensor([12.]))
    """
    primals, tangents = tuple(primals), tuple(tangents)
    _own_tape()
    call = _Call(f, primals, tuple(range(len(primals))), has_aux, "jvp")
    outs, rebuild = _outputs(call.out, "jvp")
    tans = _tangent_tensors(call, tangents, "jvp")
    lanes = _forward_mode(call, outs, np.concatenate(
        [t.numpy().reshape(-1) for t in tans] or [np.zeros(0)])[:, None])
    if lanes is not None:
        call.retire()
        jt = rebuild([_leaf(lane[0], o.dtype) for lane, o in zip(lanes, outs)])
        out = _detached(call.out)
        return (out, jt, call.aux) if has_aux else (out, jt)
    us = [new_leaf(np.zeros(o.shape), o.shape, np.dtype(np.float64)).requires_grad_()
          for o in outs]
    # recorded, the cotangents are results, not leaves: the sweep to them then stops
    # below their rows (graph_backward's pruning), where to leaves it would walk all of
    # the graph behind f's inputs (a solver's whole history, at every step)
    seeds = [u * 1.0 for u in us] if call.create_graph else us
    live = [(o, u) for o, u in zip(outs, seeds) if o.requires_grad]
    pairs = []
    with enable_grad():
        if live:
            lo, lu = zip(*live)
            gs = _grad(lo, call.inputs, lu, create_graph=True, retain_graph=True,
                       allow_unused=True)
            pairs = [(g, t) for g, t in zip(gs, tans) if g is not None]
        if pairs:
            gs, ts = zip(*pairs)
            if call.create_graph:
                jt = _grad(gs, seeds, ts, allow_unused=True, materialize_grads=True,
                           create_graph=True, retain_graph=True)
            else:
                jt, call.create_graph = transform_grad(gs, us, ts, own=call.inputs)
        else:
            jt = [_zeros(o.shape, o) for o in outs]
    out = call.out if call.create_graph else _detached(call.out)
    call.retire(*us)
    jt = rebuild([j.astype(o.dtype) if j.dtype != o.dtype else j for j, o in zip(jt, outs)])
    return (out, jt, call.aux) if has_aux else (out, jt)


def hvp(f, primals, tangents):
    """``(f(*primals), H @ tangents)`` for a scalar f: the gradient recorded once, then
    one sweep of it with the tangents as cotangent (H is symmetric).

    >>> at.func.hvp(lambda x: (x ** 3).sum(), (at.tensor([1.0, 2.0]),), (at.tensor([1.0, 1.0]),))
    (tensor(9.), tensor([ 6., 12.]))
    """
    primals, tangents = tuple(primals), tuple(tangents)
    g_f = value_and_grad(f, tuple(range(len(primals))))
    call = _Call(lambda *xs: _pack(g_f(*xs)), primals, tuple(range(len(primals))), False,
                 "hvp")
    value, grads = call.out[0], flatten(list(call.out[1:]))[0]   # leaves, inputs' order
    tans = _tangent_tensors(call, tangents, "hvp")
    hv = call.per_argnum(call.derivatives(grads, tans))
    call.retire()
    hv = tuple(hv) if len(primals) > 1 else hv[0]
    return (value if call.create_graph else value.detach()), hv


def vhp(f, primals, tangents):
    """``(f(*primals), tangents @ H)``: equal to hvp for the symmetric Hessian of a twice
    differentiable f (torch.autograd.functional.vhp).

    >>> at.func.vhp(lambda x: (x ** 3).sum(), (at.tensor([1.0, 2.0]),), (at.tensor([1.0, 0.0]),))
    (tensor(9.), tensor([6., 0.]))
    """
    return hvp(f, primals, tangents)


def _pack(value_and_grads):
    value, grads = value_and_grads
    return (value,) + tuple(grads)


def vmap(f, in_axes=0, device=None):
    """f mapped over a leading axis of every argument, as ``jax.vmap(f)``: each result
    gains that axis too.

    For a compiled function or one of its methods (``c``, ``c.grad``,
    ``c.value_and_grad``, ``c.jacobian``, ``c.jacfwd``, ``c.jacrev``, ``c.hessian`` of
    ``c = at.compile(...)``) the B points run as one compiled program, B points per
    instruction, on every core; with ``device="cuda"`` as one kernel launch on the GPU,
    one thread per point, in a kernel written for the program (codegen.py; points
    given as a device array stay on the device, results too). Any other f is called
    once per point and its results stacked.

    >>> c = at.compile(lambda t: (t ** 3).sum(), np.ones(2))
    >>> at.func.vmap(c.grad)(np.array([[1.0, 2.0], [3.0, 4.0]]))
    tensor([[ 3., 12.],
            [27., 48.]])
    """
    if device is not None and not hasattr(getattr(f, "__self__", f), "map_points"):
        raise ValueError("vmap: device= applies to a compiled function or its methods "
                         "(at.compile)")
    if in_axes != 0:
        raise ValueError("vmap: only in_axes=0 (a leading axis on every argument) is "
                         "supported")
    owner = getattr(f, "__self__", None)
    mapper = getattr(owner, "map_points", None) if owner is not None else \
        getattr(f, "map_points", None)
    method = getattr(f, "__name__", None) if owner is not None else "__call__"

    def mapped(*args):
        if args and all(np.ndim(a) and np.shape(a)[0] == 0 for a in args):
            return _no_points(args)
        if mapper is not None:
            return mapper(method, args) if device is None else \
                mapper(method, args, device=device)
        if not args:
            raise ValueError("vmap: f needs at least one argument with a leading axis")
        results = [f(*(a[k] for a in args)) for k in range(len(args[0]))]
        leaves, rebuild = flatten(results[0])
        per_point = [flatten(r)[0] for r in results]
        return rebuild([stack([pt[k] for pt in per_point]) for k in range(len(leaves))])

    def _no_points(args):
        """Results with a leading axis of 0, as jax's: their shapes from f at one
        point of zeros."""
        zeros = [np.zeros(np.shape(a)[1:], np.asarray(a).dtype) for a in args]
        try:
            if mapper is not None:
                one = mapper(method, [z[None] for z in zeros]) if device is None else \
                    mapper(method, [z[None] for z in zeros], device=device)
                leaves, rebuild = flatten(one)
                shapes = [np.shape(v)[1:] for v in leaves]
            else:
                leaves, rebuild = flatten(f(*zeros))
                shapes = [np.shape(v) for v in leaves]
            dtypes = [np.dtype(getattr(v, "dtype", np.float64)) for v in leaves]
        except Exception as e:
            raise ValueError(f"vmap over 0 points: the results' shapes come from f at one "
                             f"point of zeros, where f raised {type(e).__name__}: {e}") from e
        return rebuild([_leaf(np.zeros((0,) + tuple(shape)), dtype)
                        for shape, dtype in zip(shapes, dtypes)])
    return mapped
