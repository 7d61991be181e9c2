"""torch.autograd.functional on autotape: vjp, jvp, jacobian, hessian, hvp, vhp with
torch's signatures, argument rules, result structures and strict-mode errors. They are
built on autotape.func's transforms (one batched sweep per Jacobian).

``inputs`` is a Tensor or a tuple of Tensors (numpy arrays and numbers are taken too);
a result is a Tensor where torch gives one and a tuple where torch gives a tuple.
Without ``create_graph`` results are detached, as torch's are.

>>> at.autograd.functional.jacobian(lambda x: x ** 2, at.tensor([1.0, 2.0]))
tensor([[2., 0.],
        [0., 4.]])
"""
import numpy as np

from .. import func as F
from ..engine import grad as _grad
from ..grad_mode import enable_grad
from ..ops.indexing import as_tensor
from ..tensor import Tensor

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


def _as_tuple(value, name, arg):
    """(was a tuple, the tuple of Tensors)."""
    is_tuple = isinstance(value, (tuple, list))
    items = tuple(value) if is_tuple else (value,)
    out = []
    for v in items:
        if not isinstance(v, (Tensor, np.ndarray, float, int, np.floating)) or \
                isinstance(v, bool):
            raise TypeError(f"The {arg} given to {name} must be either a Tensor or a tuple "
                            f"of Tensors but the value at index {len(out)} has type "
                            f"{type(v).__name__}.")
        out.append(as_tensor(v))
    return is_tuple, tuple(out)


def _inputs(inputs, create_graph, name):
    """Fresh leaves that require grad; with create_graph, the inputs themselves where
    they already require grad (so results stay differentiable with respect to them)."""
    is_tuple, xs = _as_tuple(inputs, name, "inputs")
    leaves = []
    for x in xs:
        if create_graph and x.requires_grad:
            leaves.append(x)
        else:
            if x.dtype.kind != "f":
                raise RuntimeError("only Tensors of floating point dtype can require "
                                   "gradients")
            leaves.append(x.detach().astype(x.dtype).requires_grad_())
    return is_tuple, tuple(leaves)


def _call(func, xs, name):
    with enable_grad():
        out = func(*xs)
    return _as_tuple(out, name, "outputs of the user-provided function")


def _finish(values, create_graph, is_tuple):
    values = tuple(v if create_graph else v.detach() for v in values)
    return values if is_tuple else values[0]


def _vector(v, like, name, what):
    """The user's v as a tuple matching ``like``; None only for one 1-element tensor."""
    if v is None:
        if len(like) != 1 or like[0].size != 1:
            raise RuntimeError(f"The vector v can only be None if the {what} contains a "
                               "single Tensor with a single element." if what == "input"
                               else "The vector v can only be None if the user-provided "
                               "function returns a single Tensor with a single element.")
        return (as_tensor(np.ones(like[0].shape)),)
    _, vs = _as_tuple(v, name, "v")
    if len(vs) != len(like):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(like)} but got "
                           f"{len(vs)}.")
    for k, (a, b) in enumerate(zip(vs, like)):
        if a.shape != b.shape:
            raise RuntimeError(f"Entry {k} in v has invalid size: should be "
                               f"{tuple(b.shape)} but got {tuple(a.shape)}.")
    return vs


def _grads(outs, xs, vs, create_graph, strict, what="The output"):
    """Gradients of sum <outs, vs> with respect to xs (zeros where unused); in strict
    mode, torch's error for an input the outputs do not depend on."""
    live = [(o, v) for o, v in zip(outs, vs) if o.requires_grad]
    found = [None] * len(xs)
    if live:
        lo, lv = zip(*live)
        with enable_grad():
            found = list(_grad(lo, xs, lv, retain_graph=True, create_graph=create_graph,
                               allow_unused=True))
    for k, g in enumerate(found):
        if g is None:
            if strict:
                raise RuntimeError(f"{what} of the user-provided function is independent "
                                   f"of input {k}. This is not allowed in strict mode.")
            found[k] = as_tensor(np.zeros(xs[k].shape))
    return found


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``, as torch.autograd.functional.vjp.

    >>> at.autograd.functional.vjp(lambda x: (x ** 2).sum(), at.tensor([1.0, 2.0]))
    (tensor(5.), tensor([2., 4.]))
    """
    is_tuple, xs = _inputs(inputs, create_graph, "vjp")
    out_tuple, outs = _call(func, xs, "vjp")
    vs = _vector(v, outs, "vjp", "output")
    g = _grads(outs, xs, vs, create_graph, strict)
    return _finish(outs, create_graph, out_tuple), _finish(g, create_graph, is_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``, as torch.autograd.functional.jvp (exact: the gradient
    of a vjp with respect to its cotangent, as torch computes it too).

    >>> at.autograd.functional.jvp(lambda x: x ** 2, at.tensor([1.0, 2.0]), at.ones(2))
    (tensor([1., 4.]), tensor([2., 4.]))
    """
    is_tuple, xs = _inputs(inputs, create_graph, "jvp")
    vs = _vector(v, xs, "jvp", "input")
    if strict:
        _, outs = _call(func, xs, "jvp")
        _grads(outs, xs, [as_tensor(np.ones(o.shape)) for o in outs], False, True)
    out, jt = F.jvp(func, xs, vs)
    out_tuple, outs = _as_tuple(out, "jvp", "outputs of the user-provided function")
    jt = tuple(jt) if out_tuple else (jt,)
    return _finish(outs, create_graph, out_tuple), _finish(
        [as_tensor(j) for j in jt], create_graph, out_tuple)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian, as torch.autograd.functional.jacobian: for one input and one output
    a Tensor of shape ``output.shape + input.shape``, else tuples (outputs, then
    inputs). One compiled sweep carries every row (``vectorize`` and ``strategy`` give
    the same numbers and are accepted for compatibility).

    >>> at.autograd.functional.jacobian(lambda x, y: x * y, (at.ones(2), at.ones(2)))[0]
    tensor([[1., 0.],
            [0., 1.]])
    """
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode". '
                         f'Hint: strategy={strategy!r}')
    if strategy == "forward-mode" and not vectorize:
        raise ValueError("torch.autograd.functional.jacobian: `strategy=\"forward-mode\"` "
                         "is only supported together with `vectorize=True`.")
    is_tuple, xs = _inputs(inputs, create_graph, "jacobian")
    if strict:
        out_tuple, outs = _call(func, xs, "jacobian")
        for i, o in enumerate(outs):
            _grads([o], xs, [as_tensor(np.ones(o.shape))], False, True, f"Output {i}")
    jac = F.jacrev(func, argnums=tuple(range(len(xs))))(*xs)
    return _shaped(jac, create_graph, is_tuple)


def _shaped(jac, create_graph, is_tuple):
    """F.jacrev's nesting (outputs, then a tuple over inputs) in torch's: the inner
    tuple unwrapped for a single Tensor input."""
    def per_output(row):
        row = tuple(r if create_graph else r.detach() for r in row)
        return row if is_tuple else row[0]
    if isinstance(jac, tuple) and jac and isinstance(jac[0], tuple):
        return tuple(per_output(r) for r in jac)
    return per_output(jac)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar function, as torch.autograd.functional.hessian: a Tensor
    of shape ``input.shape * 2`` for one input, else a tuple of tuples.

    >>> at.autograd.functional.hessian(lambda x: (x ** 3).sum(), at.tensor([1.0, 2.0]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    is_tuple, xs = _inputs(inputs, create_graph, "hessian")
    out_tuple, outs = _call(func, xs, "hessian")
    if len(outs) != 1 or outs[0].size != 1:
        raise RuntimeError("The function given to hessian should return a single Tensor")
    if strict:
        _grads(outs, xs, [as_tensor(np.ones(outs[0].shape))], False, True)
    h = F.hessian(lambda *a: func(*a).reshape(()), argnums=tuple(range(len(xs))))(*xs)
    rows = tuple(tuple(e if create_graph else e.detach() for e in row) for row in h)
    return rows if is_tuple else rows[0][0]


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` for a scalar function, as
    torch.autograd.functional.hvp.

    >>> at.autograd.functional.hvp(lambda x: (x ** 3).sum(), at.tensor([1.0, 2.0]),
    ...                            at.ones(2))
    (tensor(9.), tensor([ 6., 12.]))
    """
    is_tuple, xs = _inputs(inputs, True, "hvp")
    vs = _vector(v, xs, "hvp", "input")
    out_tuple, outs = _call(func, xs, "hvp")
    if len(outs) != 1 or outs[0].size != 1:
        raise RuntimeError("The function given to hvp should return a single Tensor")
    with enable_grad():
        gs = _grads(outs, xs, [as_tensor(np.ones(outs[0].shape))], True, strict)
        live = [(g, v_) for g, v_ in zip(gs, vs) if g.requires_grad]
        hv = [as_tensor(np.zeros(x.shape)) for x in xs]
        if live:
            lg, lv = zip(*live)
            hv = _grads(lg, xs, lv, create_graph, strict, "The jacobian")
    return _finish(outs, create_graph, False), _finish(hv, create_graph, is_tuple)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)``, as torch.autograd.functional.vhp: equal to hvp, the
    Hessian being symmetric.

    >>> at.autograd.functional.vhp(lambda x: (x ** 3).sum(), at.tensor([1.0, 2.0]),
    ...                            at.tensor([1.0, 0.0]))
    (tensor(9.), tensor([6., 0.]))
    """
    return hvp(func, inputs, v, create_graph, strict)
