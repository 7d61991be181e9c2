"""numpy's functions that stack, split, pad out or rearrange whole arrays, composed of
reshapes, concatenations, strided gathers and index assignment: hstack ... meshgrid,
diag, kron. Each result is a new tensor; gradients flow back through the ops used."""
import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from ..creation import zeros
from ..ops.indexing import as_tensor, broadcast_to, concatenate, reshape, transpose
from .shaping import diagonal, flip, moveaxis, ravel, split

__all__ = ["hstack", "vstack", "row_stack", "column_stack", "dstack", "hsplit", "vsplit",
           "dsplit", "array_split", "atleast_1d", "atleast_2d", "atleast_3d", "diag",
           "diagflat", "fliplr", "flipud", "rot90", "append", "rollaxis", "meshgrid", "kron"]


def _at_least(a, n):
    """numpy's atleast_nd for one array: 1-D (n,) becomes (1, n), then (1, n, 1)."""
    a = as_tensor(a)
    if a.ndim >= n:
        return a
    if n == 1 or a.ndim == 0:
        return reshape(a, (1,) * n)
    if n == 2:
        return reshape(a, (1,) + a.shape)
    return reshape(a, (1,) + a.shape + (1,)) if a.ndim == 1 else reshape(a, a.shape + (1,))


def atleast_1d(*arys):
    """Each argument with at least one axis; a list when given several.

    >>> at.atleast_1d(at.tensor(1.0))
    tensor([1.])
    """
    out = [_at_least(a, 1) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """Each argument with at least two axes (numpy's placement of new axes).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.atleast_2d(x).shape
    (1, 3)
    """
    out = [_at_least(a, 2) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """Each argument with at least three axes (numpy's placement of new axes).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.atleast_3d(x).shape
    (1, 3, 1)
    """
    out = [_at_least(a, 3) for a in arys]
    return out[0] if len(out) == 1 else out


def _listed(tup, name):
    if isinstance(tup, np.ndarray) or hasattr(tup, "_shape"):
        return [t for t in as_tensor(tup)]
    if not isinstance(tup, (list, tuple)) or not tup:
        raise ValueError(f"need at least one array to {name}")
    return list(tup)


def vstack(tup):
    """Join along the first axis (1-D arrays become rows).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.vstack([x, x])
    tensor([[1., 2., 3.],
            [1., 2., 3.]], grad_fn=<CatBackward>)

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.row_stack([x, x]).shape
    (2, 3)
    """
    return concatenate([_at_least(a, 2) for a in _listed(tup, "concatenate")], axis=0)


row_stack = vstack


def hstack(tup):
    """Join along the second axis (the first for 1-D arrays).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.hstack([x, x])
    tensor([1., 2., 3., 1., 2., 3.], grad_fn=<CatBackward>)
    """
    parts = [_at_least(a, 1) for a in _listed(tup, "concatenate")]
    return concatenate(parts, axis=0 if parts[0].ndim == 1 else 1)


def dstack(tup):
    """Join along the third axis (arrays made at least 3-D first).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.dstack([x, x]).shape
    (1, 3, 2)
    """
    return concatenate([_at_least(a, 3) for a in _listed(tup, "concatenate")], axis=2)


def column_stack(tup):
    """1-D arrays as columns of a 2-D array; 2-D arrays joined as they are.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.column_stack([x, x])
    tensor([[1., 1.],
            [2., 2.],
            [3., 3.]], grad_fn=<CatBackward>)
    """
    parts = []
    for a in _listed(tup, "concatenate"):
        a = as_tensor(a)
        parts.append(reshape(a, (-1, 1)) if a.ndim < 2 else a)
    return concatenate(parts, axis=1)


def array_split(ary, indices_or_sections, axis=0):
    """numpy.array_split: like split, but sections need not divide the axis evenly.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.array_split(x, 2)
    [tensor([1., 2.], grad_fn=<ViewBackward>), tensor([3.], grad_fn=<ViewBackward>)]
    """
    a = as_tensor(ary)
    axis = normalize_axis_index(axis, a.ndim)
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        each, extra = divmod(a.shape[axis], sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        indices_or_sections = list(np.cumsum(sizes)[:-1])
    return split(a, indices_or_sections, axis)


def _split_along(ary, indices_or_sections, axis, least, name):
    a = as_tensor(ary)
    if a.ndim < least:
        raise ValueError(f"{name} only works on arrays of {least} or more dimensions")
    return split(a, indices_or_sections, axis)


def hsplit(ary, indices_or_sections):
    """Split along the second axis (the first for 1-D arrays).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.hsplit(x, 3)
    [tensor([1.], grad_fn=<ViewBackward>), tensor([2.], grad_fn=<ViewBackward>),
     tensor([3.], grad_fn=<ViewBackward>)]
    """
    a = as_tensor(ary)
    return _split_along(a, indices_or_sections, 1 if a.ndim > 1 else 0, 1, "hsplit")


def vsplit(ary, indices_or_sections):
    """Split along the first axis of an array of 2 or more axes.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.vsplit(m, 2)
    [tensor([[1., 2.]], grad_fn=<ViewBackward>), tensor([[3., 4.]], grad_fn=<ViewBackward>)]
    """
    return _split_along(ary, indices_or_sections, 0, 2, "vsplit")


def dsplit(ary, indices_or_sections):
    """Split along the third axis of an array of 3 or more axes.

    >>> [p.shape for p in at.dsplit(at.zeros(1, 1, 4), 2)]
    [(1, 1, 2), (1, 1, 2)]
    """
    return _split_along(ary, indices_or_sections, 2, 3, "dsplit")


def diag(v, k=0):
    """A 2-D array's k-th diagonal, or a 2-D array with a 1-D array on its k-th
    diagonal (zeros elsewhere, which carry no gradient).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.diag(x)
    tensor([[1., 0., 0.],
            [0., 2., 0.],
            [0., 0., 3.]], grad_fn=<AddBackward>)
    """
    v = as_tensor(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = v.shape[0] + abs(k)
    out = zeros((n, n), dtype=v.dtype if v.dtype.kind == "f" else None)
    i = np.arange(v.shape[0])
    out[(i, i + k) if k >= 0 else (i - k, i)] = v
    return out


def diagflat(v, k=0):
    """A 2-D array with the flattened input on its k-th diagonal.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.diagflat(m).shape
    (4, 4)
    """
    return diag(ravel(v), k)


def fliplr(m):
    """Reverse the order of the columns (axis 1).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.fliplr(m)
    tensor([[2., 1.],
            [4., 3.]], grad_fn=<ViewBackward>)
    """
    m = as_tensor(m)
    if m.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(m, 1)


def flipud(m):
    """Reverse the order of the rows (axis 0).

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.flipud(m)
    tensor([[3., 4.],
            [1., 2.]], grad_fn=<ViewBackward>)
    """
    m = as_tensor(m)
    if m.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(m, 0)


def rot90(m, k=1, axes=(0, 1)):
    """Rotate by 90 degrees k times in the plane of ``axes``, as numpy.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.rot90(m)
    tensor([[2., 4.],
            [1., 3.]], grad_fn=<ViewBackward>)
    """
    m = as_tensor(m)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = normalize_axis_tuple(axes, m.ndim)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return m.copy()
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return transpose(flip(m, a1), perm)
    return flip(transpose(m, perm), a1)


def append(arr, values, axis=None):
    """numpy.append: values after arr (both flattened when axis is None).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.append(x, 4.0)
    tensor([1., 2., 3., 4.], grad_fn=<CatBackward>)
    """
    arr, values = as_tensor(arr), as_tensor(values)
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


def rollaxis(a, axis, start=0):
    """numpy.rollaxis: move ``axis`` to stand before ``start``.

    >>> at.rollaxis(at.zeros(2, 3, 4), 2).shape
    (4, 2, 3)
    """
    a = as_tensor(a)
    n = a.ndim
    axis = normalize_axis_index(axis, n)
    if start < 0:
        start += n
    if not 0 <= start < n + 1:
        raise np.exceptions.AxisError(f"'start' arg requires {-n} <= start < {n + 1}")
    if axis < start:
        start -= 1
    return moveaxis(a, axis, start) if axis != start else a.copy()


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from 1-D coordinate vectors, numpy's 'xy' and 'ij' orders
    (broadcasts, so the gradient of each sums over the grid).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> [g.shape for g in at.meshgrid(x, x[:2])]
    [(2, 3), (2, 3)]
    """
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    vectors = [ravel(x) for x in xi]
    n = len(vectors)
    shapes = [[1] * n for _ in vectors]
    for k, v in enumerate(vectors):
        shapes[k][k] = v.shape[0]
    if indexing == "xy" and n > 1:
        for s in shapes:
            s[0], s[1] = s[1], s[0]
    grids = [reshape(v, tuple(s)) for v, s in zip(vectors, shapes)]
    if sparse:
        return grids
    full = np.broadcast_shapes(*(g.shape for g in grids))
    return [broadcast_to(g, full) for g in grids]


def kron(a, b):
    """The Kronecker product: blocks a[i, j] * b (one broadcast product and a reshape).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.kron(x[:2], at.tensor([1.0, 10.0]))
    tensor([ 1., 10.,  2., 20.], grad_fn=<ReshapeBackward>)
    """
    a, b = as_tensor(a), as_tensor(b)
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    interleaved_a = tuple(x for n in sa for x in (n, 1))
    interleaved_b = tuple(x for n in sb for x in (1, n))
    prod = reshape(a, interleaved_a) * reshape(b, interleaved_b)
    return reshape(prod, tuple(p * q for p, q in zip(sa, sb)))

