"""Tensor's operators, methods, numpy protocols and ``backward``, attached here, above the
op families and the engine that implement them (as HIPS autograd's numpy_boxes does):
tensor.py is the data and imports nothing above it.

Importing this module attaches them; the package's ``__init__`` does.
"""
import weakref

import numpy as np

from . import creation
from .complex_numbers import ops as complex_ops
from .engine import backward
from .errstate import ignore_fp_errors
from .functions import calculus, products, shaping, statistics
from .grad_mode import is_grad_enabled
from .guards import observe
from .hooks import register_hook, register_post_accumulate_grad_hook
from .numpy_dispatch import array_function, array_ufunc
from .opcodes import ADD, CONST, DIV, IMPORT, LEAF, MUL, SUB
from .ops import elementwise, indexing, reduce
from .ops.versions import node_name, version
from .ops.views import check_inplace, contiguous, one_of_several, view_of, written
from .ops.linalg import matmul
from .ops.recording import cast_result
from .ops.subscript import getitem, setitem
from .tensor import (LEAF_INPLACE_MSG, NONLEAF_NO_GRAD_INPLACE_MSG, Tensor, array_of,
                     complex_aware, device_call, new_leaf)


class GradFn:
    """A node of the graph, as torch's ``grad_fn``: ``name()``, and ``next_functions``,
    the nodes its inputs came from (``(node, 0)`` pairs: None for a constant, an
    ``AccumulateGrad`` node, whose ``variable`` is the leaf, for a leaf that requires
    grad). One object per recorded row while it is referenced, so ``is`` compares nodes.

    >>> x = at.tensor([1.0], requires_grad=True)
    >>> y = x * 2
    >>> (y + 1).grad_fn.next_functions[0][0] is y.grad_fn
    True
    >>> y.grad_fn.next_functions
    ((<AccumulateGrad>, 0), (None, 0))
    """
    __slots__ = ("_name", "_tape", "_row", "variable", "__weakref__")

    def __init__(self, name, tape=None, row=-1, variable=None):
        self._name, self._tape, self._row, self.variable = name, tape, row, variable

    def name(self):
        return self._name

    @property
    def next_functions(self):
        if self._tape is None:
            return ()
        return tuple((_node(self._tape, r), 0) for r in self._tape.row(self._row).operands)

    def __repr__(self):
        return f"<{self._name}>"


_NODES = weakref.WeakValueDictionary()        # (tape id, row) -> its GradFn


def _node(tape, row):
    """The graph node of a recorded row (None for a constant)."""
    op = tape.opcode(row)
    if op == IMPORT:
        parent, prow = tape.imports[row]
        return _node(parent, prow)
    if op == CONST:
        return None
    key = (tape.id, row)
    node = _NODES.get(key)
    if node is None:
        node = GradFn("AccumulateGrad", variable=tape.leaves[row]) if op == LEAF else \
            GradFn(node_name(tape, row), tape, row)
        _NODES[key] = node
    return node


def grad_fn(self):
    """None for a leaf; for a result, the node of the op that made it (its ``name()``,
    ``next_functions``).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> (x * 2).grad_fn
    <MultiplyBackward>
    >>> x.grad_fn is None
    True
    """
    if self._tape is None:
        return None
    return _node(self._tape, self._row)


def tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(self)/d(leaf) into ``.grad`` of the leaves (see at.backward).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> (x ** 2).sum().backward()
    >>> x.grad
    tensor([2., 4., 6.])
    """
    backward(self, gradient, retain_graph, create_graph, inputs)


def inplace(self, op, other):
    """``self op= other`` (``+=`` and its peers): in place on a plain array; otherwise
    self takes the recorded result's value and place in the graph."""
    if self._tape is None and self._requires_grad and is_grad_enabled():
        raise RuntimeError(LEAF_INPLACE_MSG)
    replaced = check_inplace(self)
    other_requires = type(other) is Tensor and other.requires_grad
    if not self.requires_grad and not (other_requires and is_grad_enabled()) \
            and type(self._value) is np.ndarray and self._value.flags.writeable:
        other_value = array_of(other) if type(other) is Tensor else other
        with ignore_fp_errors():
            op.array(self._value, other_value, out=self._value)
        written(self, replaced)
        return self
    if self._tape is not None and not is_grad_enabled():
        raise RuntimeError(NONLEAF_NO_GRAD_INPLACE_MSG)
    result = elementwise.binary(op, self, other)
    if result._shape != self._shape:
        raise ValueError(f"non-broadcastable output operand with shape {self._shape} "
                         f"doesn't match the broadcast shape {result._shape}")
    if result._dtype != self._dtype:
        if not np.can_cast(result._dtype, self._dtype, "same_kind"):
            raise TypeError(f"Cannot cast ufunc '{op.name}' output from dtype "
                            f"'{result._dtype}' to dtype('{self._dtype}') with "
                            "casting rule 'same_kind'")
        result = cast_result(result, self._dtype)
    self._become(result)
    written(self, replaced)
    return self


def zero_(self):
    """Fill with zeros in place; returns self.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad.zero_()
    tensor([0., 0., 0.])
    >>> x.grad
    tensor([0., 0., 0.])
    """
    if self._tape is None and self._requires_grad and is_grad_enabled():
        raise RuntimeError(LEAF_INPLACE_MSG)
    self[...] = 0
    return self


def copy(self):
    """A copy; recorded (its gradient passes through) when self requires grad.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> x.copy()
    tensor([1., 2., 3.], grad_fn=<ReshapeBackward>)
    """
    if self.requires_grad:
        return indexing.astype(self, self._dtype)
    v = self._value
    return new_leaf(v if type(v) is float else v.copy(), self._shape, self._dtype)


def clone(self):
    """torch's clone: a copy whose gradient flows back to self when self requires grad.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> x.clone()
    tensor([1., 2., 3.], grad_fn=<ReshapeBackward>)
    """
    return copy(self)


def numel(self):
    """The number of elements (torch's spelling of ``size``).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> m.numel()
    4
    """
    return self.size


def dim(self):
    """The number of axes (torch's spelling of ``ndim``).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> m.dim()
    2
    """
    return len(self._shape)


def unsqueeze(self, dim):
    """A size-1 axis inserted at ``dim`` (torch's spelling of expand_dims).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> x.unsqueeze(0).shape
    (1, 3)
    """
    return shaping.expand_dims(self, dim)


def sort(self, axis=-1, kind=None, order=None):
    """Sort in place along ``axis``, as ndarray.sort (returns None; recorded as an index
    assignment when self requires grad). ``at.sort(x)`` returns a sorted copy.

    >>> y = at.tensor([3.0, 1.0, 2.0])
    >>> y.sort()
    >>> y
    tensor([1., 2., 3.])
    """
    self[...] = calculus.sort(self, axis, kind)


def partition(self, kth, axis=-1, kind="introselect", order=None):
    """Partition in place, as ndarray.partition (returns None).

    >>> y = at.tensor([3.0, 1.0, 2.0])
    >>> y.partition(1)
    >>> y
    tensor([1., 2., 3.])
    """
    self[...] = calculus.partition(self, kth, axis)


def all_(self, axis=None, keepdims=False):
    """Whether every element is true, as numpy (a plain numpy bool: a decision).

    >>> at.tensor([1.0, 0.0]).all()
    np.False_
    """
    return observe(lambda v: np.all(v, axis=axis, keepdims=keepdims), self)


def any_(self, axis=None, keepdims=False):
    """Whether any element is true, as numpy (a plain numpy bool: a decision).

    >>> at.tensor([1.0, 0.0]).any()
    np.True_
    """
    return observe(lambda v: np.any(v, axis=axis, keepdims=keepdims), self)


def reshape(self, *shape):
    """``reshape(3, 4)`` or ``reshape((3, 4))``; -1 infers one dimension.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> m.reshape(4)
    tensor([1., 2., 3., 4.], grad_fn=<ReshapeBackward>)
    """
    out = indexing.reshape(self, shape[0] if len(shape) == 1 else shape)
    if contiguous(self):                        # a view, as numpy's (else a copy)
        view_of(out, self, ("reshape", out.shape))
    return out


def transpose(self, *axes):
    """Permute the axes; no argument reverses them (numpy's rule). Two axes of a tensor
    are swapped, as torch's ``transpose(dim0, dim1)`` (for a matrix numpy's ``(1, 0)``
    does the same; its identity ``(0, 1)`` is not written on purpose).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> m.transpose()
    tensor([[1., 3.],
            [2., 4.]], grad_fn=<ViewBackward>)
    >>> at.zeros((2, 3, 4)).transpose(0, 2).shape
    (4, 3, 2)
    """
    if len(axes) == 2 and all(isinstance(a, (int, np.integer)) for a in axes):
        order = list(range(self.ndim))
        d0, d1 = (int(a) % max(self.ndim, 1) for a in axes)
        order[d0], order[d1] = order[d1], order[d0]
        axes = (tuple(order),)
    axes = axes[0] if len(axes) == 1 else (axes or None)
    order = tuple(range(self.ndim))[::-1] if axes is None else \
        tuple(int(a) % max(self.ndim, 1) for a in axes)
    return view_of(indexing.transpose(self, axes), self, ("transpose", order))


def clip(self, a_min=None, a_max=None):
    """Limit to [a_min, a_max]; see at.clip.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> x.clip(1.5, 2.5)
    tensor([1.5, 2. , 2.5], grad_fn=<WhereBackward>)
    """
    return elementwise.clip(self, a_min, a_max)


def conj(self):
    """Real tensors are their own conjugate.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> x.conj() is x
    True
    """
    return self


def _real(self):
    """The real parts: a real tensor itself (numpy's ``.real``).

    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> x.real is x
    True
    """
    return self


def _imag(self):
    """The imaginary parts: zeros for a real tensor, as numpy's ``.imag``.

    >>> at.tensor([1.0, 2.0]).imag
    tensor([0., 0.])
    """
    return complex_ops.imag(self)


def _angle(self, deg=False):
    """The argument of each number: 0 for non-negative reals, pi for negative ones.

    >>> at.tensor([1.0, -2.0]).angle()
    tensor([0.        , 3.14159265])
    """
    return complex_ops.angle(self, deg)


# ---- torch's spellings of ops the table has (aliases: one op table) ------------------------

def _add(self, other, *, alpha=1):
    """torch's ``add``: self + alpha * other.

    >>> at.tensor([1.0, 2.0]).add(at.tensor([1.0, 1.0]), alpha=2)
    tensor([3., 4.])
    """
    return elementwise.add(self, other if alpha == 1 else elementwise.multiply(other, alpha))


def _sub(self, other, *, alpha=1):
    """torch's ``sub``: self - alpha * other.

    >>> at.tensor([1.0, 2.0]).sub(1.0)
    tensor([0., 1.])
    """
    return elementwise.subtract(self, other if alpha == 1 else
                                elementwise.multiply(other, alpha))


def _clamp(self, min=None, max=None):
    """torch's ``clamp(min, max)``: clip.

    >>> at.tensor([1.0, 2.0, 3.0]).clamp(min=1.5, max=2.5)
    tensor([1.5, 2. , 2.5])
    """
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    return clip(self, min, max)


def _permute(self, *dims):
    """torch's ``permute(*dims)``: the axes in that order.

    >>> at.tensor([[1.0, 2.0, 3.0]]).permute(1, 0).shape
    (3, 1)
    """
    return transpose(self, *dims)


def _t(self):
    """torch's ``t()``: the transpose of a matrix (a vector or number as it is).

    >>> at.tensor([[1.0, 2.0]]).t().shape
    (2, 1)
    """
    if self.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{self.ndim}D")
    return transpose(self) if self.ndim == 2 else self


def _to(self, *args, dtype=None, device=None, copy=False, non_blocking=False):
    """torch's ``to``: ``to(dtype)``, ``to("cpu")``, ``to("cuda")`` (a device tensor:
    docs/guide/gpu.md), ``to(other)`` (its dtype), ``to(device=..., dtype=...)``.

    >>> at.tensor([1.0, 2.0]).to(at.float32).dtype
    dtype('float32')
    """
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, str) or a is None:
            device = a if device is None else device
        else:
            dtype = a
    if device is not None and str(device) != "cpu":
        return device_call("to", self, device, dtype)
    if dtype is None or np.dtype(dtype) == self.dtype:
        return clone(self) if copy else self
    return indexing.astype(self, dtype)


def _contiguous(self):
    """torch's ``contiguous()``: the tensor itself (autotape's values are C-ordered).

    >>> t = at.tensor([1.0, 2.0])
    >>> t.contiguous() is t
    True
    """
    return self


def _device(self):
    """Where the value lives, as torch's ``device``: ``"cpu"`` (device tensors:
    ``"cuda:0"``).

    >>> at.tensor([1.0]).device
    'cpu'
    """
    return "cpu"


def _masked_fill(self, mask, value):
    """torch's ``masked_fill``: value where mask is true.

    >>> at.tensor([1.0, 2.0, 3.0]).masked_fill(at.tensor([True, False, True]), 0.0)
    tensor([0., 2., 0.])
    """
    return elementwise.where(mask, value, self)


def _index_select(self, dim, index):
    """torch's ``index_select(dim, index)``: take along an axis.

    >>> at.tensor([[1.0, 2.0], [3.0, 4.0]]).index_select(0, at.tensor([1]))
    tensor([[3., 4.]])
    """
    return shaping.take(self, index, axis=dim)


def _view(self, *shape):
    """torch's ``view``: the same elements in a new shape, a view (see ops/views.py);
    of a tensor whose elements are not contiguous, torch's error.

    >>> x = at.tensor([1.0, 2.0, 3.0, 4.0])
    >>> v = x.view(2, 2)
    >>> v[0, 0] = 9.0
    >>> x
    tensor([9., 2., 3., 4.])
    """
    if not contiguous(self):
        raise RuntimeError("view size is not compatible with input tensor's size and "
                           "stride (at least one dimension spans across two contiguous "
                           "subspaces). Use .reshape(...) instead.")
    return reshape(self, *shape)


def _view_as(self, other):
    """torch's ``view_as``: a view in ``other``'s shape.

    >>> at.tensor([1.0, 2.0]).view_as(at.zeros((2, 1))).shape
    (2, 1)
    """
    return _view(self, other.shape)


def _axis_index(ndim, dim, what):
    if not -ndim <= dim < max(ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-ndim}, {ndim - 1}], but got {dim})")
    return (slice(None),) * (dim % ndim) + (what,)


def _narrow(self, dim, start, length):
    """torch's ``narrow(dim, start, length)``: a view of ``length`` entries from
    ``start`` along ``dim``.

    >>> at.tensor([[1.0, 2.0, 3.0]]).narrow(1, 1, 2)
    tensor([[2., 3.]])
    """
    n = self.shape[dim]
    start = start + n if start < 0 else start
    if not (0 <= start <= n and 0 <= length and start + length <= n):
        raise IndexError(f"start ({start}) + length ({length}) exceeds dimension size "
                         f"({n}).")
    return self[_axis_index(self.ndim, dim, slice(start, start + length))]


def _select(self, dim, index):
    """torch's ``select(dim, index)``: a view with ``dim`` removed at ``index``.

    >>> at.tensor([[1.0, 2.0], [3.0, 4.0]]).select(1, 0)
    tensor([1., 3.])
    """
    return self[_axis_index(self.ndim, dim, int(index))]


def _unbind(self, dim=0):
    """torch's ``unbind(dim)``: the views along ``dim``, as a tuple.

    >>> at.tensor([[1.0, 2.0], [3.0, 4.0]]).unbind(1)
    (tensor([1., 3.]), tensor([2., 4.]))
    """
    return one_of_several(tuple(_select(self, dim, k) for k in range(self.shape[dim])),
                          "UnbindBackward")


def _split(self, split_size_or_sections, dim=0):
    """torch's ``split``: views of ``split_size`` entries along ``dim`` (the last one
    shorter), or of the sizes in a list.

    >>> [t.tolist() for t in at.tensor([1.0, 2.0, 3.0]).split(2)]
    [[1.0, 2.0], [3.0]]
    """
    n = self.shape[dim]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {dim}), but got "
                               f"split_sizes={sizes}")
    else:
        step = int(split_size_or_sections)
        sizes = [min(step, n - k) for k in range(0, n, step)] if n else [0]
    out, start = [], 0
    for size in sizes:
        out.append(_narrow(self, dim, start, size))
        start += size
    return one_of_several(tuple(out), "SplitBackward")


def _chunk(self, chunks, dim=0):
    """torch's ``chunk``: at most ``chunks`` views of equal size along ``dim``.

    >>> [t.tolist() for t in at.tensor([1.0, 2.0, 3.0]).chunk(2)]
    [[1.0, 2.0], [3.0]]
    """
    n = self.shape[dim]
    return _split(self, max(-(-n // chunks), 1), dim)


def _named(method, name, doc):
    """``method`` under ``name`` with ``doc``: the methods made by the factories here."""
    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    return method


_IN_PLACE_EXAMPLES = {ADD: ("add_", "[3.0, 4.0]"), SUB: ("sub_", "[-1.0, 0.0]"),
                      MUL: ("mul_", "[2.0, 4.0]"), DIV: ("div_", "[0.5, 1.0]")}


def _in_place(op):
    """torch's in-place method ``op_`` (``add_``, ``mul_``, ...): ``self op= other``,
    through views too; returns self."""
    def method(self, other, *, alpha=1):
        if alpha != 1:
            other = elementwise.multiply(other, alpha)
        return inplace(self, elementwise.binary_ops[op], other)
    name, result = _IN_PLACE_EXAMPLES[op]
    return _named(method, name, f"torch's ``{name}``: self changed in place (and its base "
                  f"and views), returned.\n\n>>> at.tensor([1.0, 2.0]).{name}(2.0)"
                  f".tolist()\n{result}")


def _computed_in_place(fn, name, example="()"):
    """torch's in-place variant of a function (``exp_``, ``clamp_``, ``pow_``): self
    takes ``fn(self, ...)``'s values, through views too; returns self."""
    def method(self, *args, **kwargs):
        if self._tape is None and self._requires_grad and is_grad_enabled():
            raise RuntimeError(LEAF_INPLACE_MSG)
        result = fn(self, *args, **kwargs)
        if not np.can_cast(result.dtype, self._dtype, "same_kind"):
            raise RuntimeError(f"result type {result.dtype} can't be cast to the desired "
                               f"output type {self._dtype}")
        self[...] = result
        return self
    value = 1.5 if name in ("arccosh_", "acosh_") else 0.5
    return _named(method, name, f"torch's ``{name}``: self changed in place (and its base "
                  f"and views) to ``{name[:-1]}``'s values, returned.\n\n"
                  f">>> x = at.tensor([{value}])\n>>> x.{name}{example} is x\nTrue")


# torch's in-place variants of the table's unary ops, under numpy's names and torch's
_UNARY_IN_PLACE = {f"{name}_": elementwise.unary_functions[code]
                   for code, op in elementwise.unary_ops.items()
                   for name in (op.name, op.name.replace("arc", "a", 1))
                   if op.name != "softplus"}


def _compare(np_fn, name=None):
    def method(self, other):
        return elementwise.compare(np_fn, self, other)
    if name is None:                           # (an operator: __lt__, ...)
        return method
    return _named(method, name, f"torch's ``{name}``: ``numpy.{np_fn.__name__}`` "
                  f"elementwise, a bool tensor.\n\n>>> at.tensor([1.0, 2.0]).{name}(1.5)"
                  f".tolist()\n{np_fn([1.0, 2.0], 1.5).tolist()}")


def _as_dtype(dtype, name):
    def method(self):
        return indexing.astype(self, dtype)
    kind = np.dtype(dtype).name
    return _named(method, name, f"torch's ``{name}()``: the tensor as {kind} (itself when "
                  f"it is one already); the gradient flows back through the cast.\n\n"
                  f">>> at.tensor([1.5]).{name}().dtype\ndtype('{kind}')")


def _type_as(self, other):
    """torch's ``type_as``: the tensor in other's dtype.

    >>> at.tensor([1.5]).type_as(at.zeros(1, dtype=at.float32)).dtype
    dtype('float32')
    """
    return indexing.astype(self, other.dtype)


def _new_filled(fill, name):
    """torch's ``new_zeros`` / ``new_ones``: ``fill`` in a shape, this tensor's dtype."""
    def method(self, size, *more, dtype=None, requires_grad=False):
        shape = (size, *more) if isinstance(size, (int, np.integer)) else tuple(size)
        value = np.full(shape, fill, dtype=dtype or self.dtype)
        return creation.tensor(value, requires_grad=requires_grad)
    return _named(method, name, f"torch's ``{name}``: {fill}s of ``size``, in this "
                  f"tensor's dtype (or ``dtype``).\n\n>>> at.tensor([1.0]).{name}((2, 2))"
                  f".tolist()\n{np.full((2, 2), float(fill)).tolist()}")


def _new_full(self, size, fill_value, dtype=None, requires_grad=False):
    """torch's ``new_full``: ``fill_value`` of ``size``, in this tensor's dtype.

    >>> at.tensor([1.0]).new_full((2,), 7.0)
    tensor([7., 7.])
    """
    return _new_filled(fill_value, "new_full")(self, size, dtype=dtype,
                                               requires_grad=requires_grad)


def _new_tensor(self, data, dtype=None, requires_grad=False):
    """torch's ``new_tensor``: a new leaf holding a copy of ``data``, in this tensor's
    dtype.

    >>> at.tensor([1.0]).new_tensor([2, 3])
    tensor([2., 3.])
    """
    value = data.detach().numpy() if isinstance(data, Tensor) else data
    return creation.tensor(np.array(value, dtype=dtype or self.dtype),
                           requires_grad=requires_grad)


def _flatten(self, *args, start_dim=None, end_dim=-1, order=None):
    """torch's ``flatten(start_dim=0, end_dim=-1)``: axes start_dim..end_dim merged;
    numpy's ``flatten(order)`` (a str) as numpy's.

    >>> at.zeros((2, 3, 4)).flatten(1).shape
    (2, 12)
    """
    if order is not None or (args and isinstance(args[0], str)):
        order = order or args[0]            # (numpy's; C, A and K agree on C-ordered data)
        return shaping.ravel(transpose(self) if order == "F" else self)
    start = args[0] if args else (start_dim or 0)
    end = args[1] if len(args) > 1 else end_dim
    nd = max(self.ndim, 1)
    start, end = start % nd, end % nd
    if self.ndim == 0:
        return reshape(self, (1,))
    shape = self.shape[:start] + (int(np.prod(self.shape[start:end + 1])),) + \
        self.shape[end + 1:]
    return reshape(self, shape)


def _mT(self):
    """torch's ``mT``: the last two axes swapped.

    >>> at.zeros((2, 3, 4)).mT.shape
    (2, 4, 3)
    """
    return transpose(self, -1, -2)


def _base(self):
    """torch's ``_base``: the tensor this one is a view of (None when it is none).

    >>> x = at.zeros(3)
    >>> x[1:]._base is x, x._base
    (True, None)
    """
    link = self._view_of
    return None if link is None else link[0]


def _cpu(self):
    """torch's ``cpu()``: the tensor itself (it is on the CPU).

    >>> t = at.zeros(2)
    >>> t.cpu() is t
    True
    """
    return self


def _cuda(self, device="cuda", non_blocking=False):
    """torch's ``cuda()``: a copy on the GPU, ``to("cuda")`` (docs/guide/gpu.md);
    differentiable: gradients flow back to this tensor's graph.

    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> x.cuda().device                                   # doctest: +SKIP
    'cuda:0'
    """
    return _to(self, device=device)


def _is_contiguous(self, memory_format=None):
    """torch's ``is_contiguous()``: True (autotape's values are C-ordered).

    >>> at.zeros((2, 2)).T.is_contiguous()
    True
    """
    return True


def _clamp_min(self, min):
    """torch's ``clamp_min``: ``clamp(min=min)``.

    >>> at.tensor([1.0, 3.0]).clamp_min(2.0)
    tensor([2., 3.])
    """
    return clip(self, min, None)


def _clamp_max(self, max):
    """torch's ``clamp_max``: ``clamp(max=max)``.

    >>> at.tensor([1.0, 3.0]).clamp_max(2.0)
    tensor([1., 2.])
    """
    return clip(self, None, max)


def _copy_(self, src):
    """torch's ``copy_``: src's values (broadcast) into self, in place; the gradient
    flows to src.

    >>> x = at.zeros(3)
    >>> x[1:].copy_(at.tensor([5.0, 6.0]))
    tensor([5., 6.])
    >>> x
    tensor([0., 5., 6.])
    """
    self[...] = src
    return self


def _fill_(self, value):
    """torch's ``fill_``: every element set to value, in place.

    >>> at.zeros(2).fill_(3.0)
    tensor([3., 3.])
    """
    self[...] = value
    return self


def _median(self, dim=None, keepdim=False):
    """torch's ``median``: the lower of the two middle elements (of all, or torch's
    ``(values, indices)`` along ``dim``); ``at.median`` is numpy's (their mean).

    >>> at.tensor([3.0, 1.0, 4.0, 2.0]).median()
    tensor(2.)
    """
    if dim is None:
        return statistics.median(indexing.reshape(self, (-1,)), dim=0).values
    return statistics.median(self, dim=dim, keepdim=keepdim)


def _nanmedian(self, dim=None, keepdim=False):
    """torch's ``nanmedian``: median ignoring NaNs, the lower middle element.

    >>> at.tensor([3.0, np.nan, 1.0, 2.0]).nanmedian()
    tensor(2.)
    """
    if dim is None:
        return statistics.nanmedian(indexing.reshape(self, (-1,)), dim=0).values
    return statistics.nanmedian(self, dim=dim, keepdim=keepdim)


def _expand(self, *sizes):
    """torch's ``expand``: self broadcast to ``sizes`` (-1 keeps a size), a view that
    in-place ops refuse, as torch's.

    >>> at.tensor([[1.0], [2.0]]).expand(2, 3)
    tensor([[1., 1., 1.],
            [2., 2., 2.]])
    """
    sizes = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], int) else sizes
    lead = len(sizes) - self.ndim
    shape = tuple(self.shape[d - lead] if s == -1 and d >= lead else int(s)
                  for d, s in enumerate(sizes))
    return view_of(indexing.broadcast_to(self, shape), self, ("expand", shape))


def _expand_as(self, other):
    """torch's ``expand_as``: ``expand(other.shape)``.

    >>> at.tensor([1.0, 2.0]).expand_as(at.zeros((2, 2))).shape
    (2, 2)
    """
    return _expand(self, *other.shape)


TORCH_SPELLINGS = {
    "add": _add, "sub": _sub, "mul": elementwise.multiply, "div": elementwise.divide,
    "pow": elementwise.power, "neg": elementwise.negative, "clamp": _clamp,
    "permute": _permute, "t": _t, "contiguous": _contiguous, "to": _to,
    "device": property(_device), "_version": property(version),
    "masked_fill": _masked_fill,
    "index_select": _index_select,
    "view": _view, "view_as": _view_as, "narrow": _narrow, "select": _select,
    "unbind": _unbind, "split": _split, "chunk": _chunk,
    "add_": _in_place(ADD), "sub_": _in_place(SUB), "mul_": _in_place(MUL),
    "div_": _in_place(DIV), "copy_": _copy_, "fill_": _fill_,
    "median": _median, "nanmedian": _nanmedian, "var_mean": statistics.var_mean,
    "expand": _expand, "expand_as": _expand_as,
    **{name: _computed_in_place(fn, name) for name, fn in _UNARY_IN_PLACE.items()},
    "pow_": _computed_in_place(elementwise.power, "pow_", "(2)"),
    "neg_": _computed_in_place(elementwise.negative, "neg_"),
    "clamp_": _computed_in_place(_clamp, "clamp_", "(0.0, 1.0)"),
    "clip_": _computed_in_place(clip, "clip_", "(0.0, 1.0)"),
    "masked_fill_": _computed_in_place(_masked_fill, "masked_fill_",
                                       "(at.tensor([True]), 0.0)"),
    "float": _as_dtype(np.float32, "float"), "double": _as_dtype(np.float64, "double"),
    "long": _as_dtype(np.int64, "long"), "int": _as_dtype(np.int32, "int"),
    "bool": _as_dtype(np.bool_, "bool"), "type_as": _type_as,
    "new_zeros": _new_filled(0, "new_zeros"), "new_empty": _new_filled(0, "new_empty"),
    "new_ones": _new_filled(1, "new_ones"),
    "new_full": _new_full, "new_tensor": _new_tensor,
    "flatten": _flatten, "mT": property(_mT), "_base": property(_base), "cpu": _cpu,
    "cuda": _cuda, "is_contiguous": _is_contiguous, "nelement": numel, "ndimension": dim,
    "tile": shaping.tile, "matmul": complex_aware(matmul), "mm": complex_aware(matmul),
    "bmm": complex_aware(matmul), "mv": complex_aware(matmul),
    "eq": _compare(np.equal, "eq"), "ne": _compare(np.not_equal, "ne"), "lt": _compare(np.less, "lt"),
    "le": _compare(np.less_equal, "le"), "gt": _compare(np.greater, "gt"),
    "ge": _compare(np.greater_equal, "ge"), "clamp_min": _clamp_min, "clamp_max": _clamp_max,
}


_binary_ops = elementwise.binary_ops
METHODS = {
    # numpy's protocols: np.sin(t), ndarray * t, np.sum(t) record (numpy_dispatch.py)
    "__array_ufunc__": lambda self, ufunc, method, *inputs, **kwargs: array_ufunc(
        ufunc, method, inputs, kwargs),
    "__array_function__": lambda self, func, types, args, kwargs: array_function(
        func, args, kwargs),
    "grad_fn": property(grad_fn),
    "backward": tensor_backward,
    # operators
    "__add__": elementwise.add, "__sub__": elementwise.subtract,
    "__mul__": elementwise.multiply, "__truediv__": elementwise.divide,
    "__pow__": elementwise.power, "__mod__": elementwise.mod,
    "__radd__": lambda self, other: elementwise.add(other, self),
    "__rsub__": lambda self, other: elementwise.subtract(other, self),
    "__rmul__": lambda self, other: elementwise.multiply(other, self),
    "__rtruediv__": lambda self, other: elementwise.divide(other, self),
    "__rpow__": lambda self, other: elementwise.power(other, self),
    "__rmod__": lambda self, other: elementwise.mod(other, self),
    "__matmul__": complex_aware(matmul), "__rmatmul__": complex_aware(
        lambda self, other: matmul(other, self), "rmatmul"),
    "__neg__": elementwise.negative, "__abs__": elementwise.abs,
    "__pos__": lambda self: self,
    "__iadd__": lambda self, other: inplace(self, _binary_ops[ADD], other),
    "__isub__": lambda self, other: inplace(self, _binary_ops[SUB], other),
    "__imul__": lambda self, other: inplace(self, _binary_ops[MUL], other),
    "__itruediv__": lambda self, other: inplace(self, _binary_ops[DIV], other),
    "__lt__": _compare(np.less), "__le__": _compare(np.less_equal),
    "__gt__": _compare(np.greater), "__ge__": _compare(np.greater_equal),
    "__eq__": _compare(np.equal), "__ne__": _compare(np.not_equal),
    "__getitem__": getitem, "__setitem__": complex_aware(setitem),
    # complex numbers' attributes, on real tensors
    "real": property(_real), "imag": property(_imag), "angle": _angle,
    # methods
    "sum": reduce.sum, "mean": reduce.mean, "max": reduce.max, "min": reduce.min,
    "prod": reduce.prod, "cumsum": reduce.cumsum, "cumprod": reduce.cumprod,
    "var": statistics.var, "std": statistics.std, "argmax": statistics.argmax,
    "argmin": statistics.argmin, "diagonal": shaping.diagonal, "trace": shaping.trace,
    "clip": clip,
    "ravel": shaping.ravel, "squeeze": shaping.squeeze,
    "swapaxes": shaping.swapaxes, "dot": complex_aware(products.dot), "take": shaping.take,
    "repeat": shaping.repeat, "copy": copy, "conj": conj, "conjugate": conj, "zero_": zero_,
    "reshape": reshape, "astype": indexing.astype, "transpose": transpose,
    "clone": clone, "numel": numel, "dim": dim, "unsqueeze": unsqueeze,
    "sort": sort, "argsort": calculus.argsort, "partition": partition,
    "argpartition": calculus.argpartition, "all": all_, "any": any_,
    "logsumexp": statistics.logsumexp, "softmax": statistics.softmax,
    "log_softmax": statistics.log_softmax, "norm": statistics.norm,
    "register_hook": register_hook,
    "register_post_accumulate_grad_hook": register_post_accumulate_grad_hook,
    # every elementwise op of the table: x.log1p(), x.arctan2(y), ...
    **{op.name: elementwise.unary_functions[code]
       for code, op in elementwise.unary_ops.items()},
}
METHODS.update(TORCH_SPELLINGS)
METHODS["__hash__"] = object.__hash__          # (defining __eq__ would unset it)
for _name, _method in METHODS.items():
    setattr(Tensor, _name, _method)
