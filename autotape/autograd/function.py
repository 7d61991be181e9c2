"""torch.autograd.Function's spelling of a custom op: a class with static ``forward(ctx,
*args)`` and ``backward(ctx, *grad_outputs)``, applied with ``Cls.apply(*args)``.

It is a custom op (custom.py) underneath: one CUSTOM row whose operands are the tensor
arguments and whose value holds every differentiable output, one after another. The
forward runs once, under no_grad, as torch's; the backward runs when a sweep reaches the
row, given the gradients of all outputs (None for those that are not differentiable
tensors, or zeros with ``ctx.set_materialize_grads(True)``, the default, for tensors
marked non-differentiable) and returning one gradient per argument (None for none: as
for any custom op, a leaf reached only through it then gets zeros where torch leaves
``.grad`` None). With
``create_graph=True`` it runs with grad mode on and ``ctx.saved_tensors`` are the
recorded values, so a backward written with autotape ops is differentiated again;
``@once_differentiable`` runs it under no_grad, and differentiating its result again
raises torch's error rather than treating it as a constant.

>>> class Cube(at.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x ** 3
...     @staticmethod
...     def backward(ctx, g):
...         x, = ctx.saved_tensors
...         return 3 * x ** 2 * g
>>> x = at.tensor([1.0, 2.0], requires_grad=True)
>>> Cube.apply(x).sum().backward()
>>> x.grad
tensor([ 3., 12.])
"""
import functools

import numpy as np

from ..custom import CustomOp
from ..grad_mode import enable_grad, is_grad_enabled, no_grad
from ..pytree import flatten
from ..tensor import Tensor, array_of, canonical, new_leaf

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` a Function's forward and backward share: ``save_for_backward``,
    ``saved_tensors``, ``needs_input_grad``, ``mark_non_differentiable``,
    ``set_materialize_grads``, ``mark_dirty``, and any attribute set on it.

    >>> ctx = at.autograd.function.FunctionCtx((at.zeros(1, requires_grad=True), 2.0))
    >>> ctx.needs_input_grad
    (True, False)
    """

    def __init__(self, args):
        self.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad
                                      for a in args)
        self.materialize_grads = True
        self._saved = ()
        self._non_differentiable = set()
        self._saved_as = None            # (set while backward runs: what each saved
                                         # tensor is then)

    def save_for_backward(self, *tensors):
        """Keep tensors (or None) for backward, read there as ``ctx.saved_tensors``."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self._saved = tensors

    @property
    def saved_tensors(self):
        """What ``save_for_backward`` kept: an argument or output as the sweep sees it
        (recorded, under create_graph), any other tensor as it was."""
        if self._saved_as is None:
            return self._saved
        return tuple(None if t is None else self._saved_as(t) for t in self._saved)

    def mark_non_differentiable(self, *tensors):
        """Outputs that get no gradient (their backward gradient is zeros, or None
        without materialized gradients)."""
        self._non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        """False: backward gets None, not zeros, for outputs that have no gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        """Accepted for torch's code: autotape records an in-place change of an
        argument in forward as any other, so nothing needs marking."""


class Function:
    """torch.autograd.Function: subclass it with static ``forward(ctx, *args)`` and
    ``backward(ctx, *grad_outputs)``, call ``apply`` (see the module's docstring).

    >>> class Double(at.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return 2 * x
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         return 2 * g
    >>> Double.apply(at.tensor([1.0], requires_grad=True))
    tensor([2.], grad_fn=<DoubleBackward>)
    """

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: https://pytorch.org/docs/stable/"
                           "autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method "
                                  "for your custom autograd.Function to use it with "
                                  "backward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        """forward(ctx, *args, **kwargs) run, its differentiable outputs recorded as one
        op whose gradient is ``backward``."""
        if kwargs:
            raise TypeError(f"{cls.__name__}.apply takes positional arguments only (as "
                            "torch's)")
        ctx = FunctionCtx(args)
        with no_grad():
            out = cls.forward(ctx, *args)
        leaves, rebuild = flatten(out)
        sources = [a for a in args if isinstance(a, Tensor)]
        unique = {}                      # id -> the position of a differentiable output
        for k, v in enumerate(leaves):
            if isinstance(v, Tensor) and v.dtype.kind == "f" and \
                    id(v) not in ctx._non_differentiable and id(v) not in unique:
                unique[id(v)] = k
        if not (is_grad_enabled() and unique and any(a.requires_grad for a in sources)):
            return rebuild([v.detach() if isinstance(v, Tensor) and v.requires_grad else v
                            for v in leaves])
        made = sorted(unique.values())
        shapes = [leaves[k].shape for k in made]
        splits = np.cumsum([0] + [int(np.prod(s, dtype=np.int64)) for s in shapes])
        op = _function_op(cls, ctx, args, leaves, made, shapes, splits)
        packed = op.record(sources, _packed([np.asarray(array_of(leaves[k]), np.float64)
                                             for k in made], shapes))
        parts = {}
        for k, a, b, shape in zip(made, splits, splits[1:], shapes):
            part = packed if len(made) == 1 else packed[a:b].reshape(shape)
            parts[id(leaves[k])] = part if leaves[k].dtype == np.float64 else \
                part.astype(leaves[k].dtype)
        return rebuild([parts.get(id(v), v.detach() if isinstance(v, Tensor) else v)
                        for v in leaves])


def _function_op(cls, ctx, args, leaves, made, shapes, splits):
    """The custom op of one ``apply``: its forward runs cls.forward again (a compiled
    replay), its vjp runs cls.backward."""
    positions = [k for k, a in enumerate(args) if isinstance(a, Tensor)]

    def forward(*values):
        again = list(args)
        for k, v in zip(positions, values):
            again[k] = new_leaf(*canonical(np.asarray(v, args[k].dtype)))
        with no_grad():
            outs = flatten(cls.forward(FunctionCtx(again), *again))[0]
        return _packed([np.asarray(array_of(outs[k]), np.float64) for k in made], shapes)

    def vjp(inputs, output, g):
        recorded = isinstance(g, Tensor)
        as_tensor = (lambda v: v) if recorded else \
            (lambda v: new_leaf(*canonical(np.array(v, np.float64))))
        flat = g.reshape(-1) if recorded else np.reshape(g, -1)
        outs = output.reshape(-1) if recorded else np.reshape(output, -1)
        grad_of, value_of = {}, {}
        for k, a, b, shape in zip(made, splits, splits[1:], shapes):
            one = len(made) == 1
            grad_of[id(leaves[k])] = as_tensor(g if one else flat[a:b].reshape(shape))
            value_of[id(leaves[k])] = as_tensor(output if one else outs[a:b].reshape(shape))
        for j, t in zip(positions, inputs):
            value_of[id(args[j])] = as_tensor(t)
        grads = []
        for v in leaves:                 # (an output returned twice gets its gradient at
            if not isinstance(v, Tensor):            # its first place, as torch's)
                grads.append(None)
            elif id(v) in grad_of:
                grads.append(grad_of.pop(id(v)))
            else:
                grads.append(new_leaf(*canonical(np.zeros(v.shape)))
                             if ctx.materialize_grads else None)
        ctx._saved_as = lambda t: value_of.get(id(t), t)
        try:
            with (enable_grad() if recorded and not _once(cls) else no_grad()):
                result = cls.backward(ctx, *grads)
        finally:
            ctx._saved_as = None
        result = result if isinstance(result, tuple) else (result,)
        if len(result) < len(args) or any(r is not None for r in result[len(args):]):
            raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect "
                               f"number of gradients (expected {len(args)}, got "
                               f"{len(result)})")
        cotangents = []
        for j in positions:
            c = result[j]
            if c is not None and not isinstance(c, Tensor):
                c = new_leaf(*canonical(np.asarray(c, np.float64)))
            if c is not None and c.shape != args[j].shape:
                c = _summed_to(c, args[j].shape, cls, j)
            if c is not None and recorded and _once(cls):
                c = _NOT_TWICE(c, *inputs)
            cotangents.append(c if c is None or recorded else array_of(c))
        return cotangents

    return CustomOp(forward, vjp, name=cls.__name__)


def _summed_to(c, shape, cls, j):
    """A gradient of another shape: summed over broadcast axes where that gives the
    argument's shape (torch does the same), else torch's error."""
    lead = c.ndim - len(shape)
    if lead >= 0 and all(n in (1, m) for n, m in zip(shape, c.shape[lead:])):
        axes = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(shape)
                                          if n == 1 and c.shape[lead + d] != 1)
        return c.sum(axis=axes, keepdims=True).reshape(shape) if axes else c.reshape(shape)
    raise RuntimeError(f"Function {cls.__name__}Backward returned an invalid gradient at "
                       f"index {j} - got {list(c.shape)} but expected shape compatible "
                       f"with {list(shape)}")


def _packed(values, shapes):
    if len(values) == 1:
        return np.array(values[0], np.float64).reshape(shapes[0])
    return np.concatenate([np.reshape(v, -1) for v in values])


def once_differentiable(backward):
    """Mark a Function's backward as not differentiable itself: it runs under no_grad,
    and a second derivative through it raises torch's error.

    >>> class Square(at.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x * x
    ...     @staticmethod
    ...     @at.autograd.function.once_differentiable
    ...     def backward(ctx, g):
    ...         x, = ctx.saved_tensors
    ...         return 2 * x * g
    >>> x = at.tensor(3.0, requires_grad=True)
    >>> at.grad(Square.apply(x), x)
    (tensor(6.),)
    """
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            return backward(ctx, *grads)
    wrapper._once_differentiable = True
    return wrapper


def _once(cls):
    return getattr(cls.backward, "_once_differentiable", False)


def _not_twice_vjp(inputs, output, g):
    raise RuntimeError("trying to differentiate twice a function that was marked with "
                       "@once_differentiable")


# a gradient returned by a once_differentiable backward under create_graph: its value,
# connected to the function's inputs by an op whose own gradient raises
_NOT_TWICE = CustomOp(lambda value, *inputs: value, _not_twice_vjp,
                      name="once_differentiable")
