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
    """Each argument with at least one axis; a list when given several."""
    out = [_at_least(a, 1) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """Each argument with at least two axes (numpy's placement of new axes)."""
    out = [_at_least(a, 2) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """Each argument with at least three axes (numpy's placement of new axes)."""
    out = [_at_least(a, 3) for a in arys]
    return out[0] if len(out) == 1 else out


def _listed(tup, name):
    if isinstance(tup, np.ndarray) or hasattr(tup, "_shape"):
        return [t for t in as_tensor(tup)]
    if not isinstance(tup, (list, tuple)) or not tup:
        raise ValueError(f"need at least one array to {name}")
    return list(tup)


def vstack(tup):
    """Join along the first axis (1-D arrays become rows)."""
    return concatenate([_at_least(a, 2) for a in _listed(tup, "concatenate")], axis=0)


row_stack = vstack


def hstack(tup):
    """Join along the second axis (the first for 1-D arrays)."""
    parts = [_at_least(a, 1) for a in _listed(tup, "concatenate")]
    return concatenate(parts, axis=0 if parts[0].ndim == 1 else 1)


def dstack(tup):
    """Join along the third axis (arrays made at least 3-D first)."""
    return concatenate([_at_least(a, 3) for a in _listed(tup, "concatenate")], axis=2)


def column_stack(tup):
    """1-D arrays as columns of a 2-D array; 2-D arrays joined as they are."""
    parts = []
    for a in _listed(tup, "concatenate"):
        a = as_tensor(a)
        parts.append(reshape(a, (-1, 1)) if a.ndim < 2 else a)
    return concatenate(parts, axis=1)


def array_split(ary, indices_or_sections, axis=0):
    """numpy.array_split: like split, but sections need not divide the axis evenly."""
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
    """Split along the second axis (the first for 1-D arrays)."""
    a = as_tensor(ary)
    return _split_along(a, indices_or_sections, 1 if a.ndim > 1 else 0, 1, "hsplit")


def vsplit(ary, indices_or_sections):
    """Split along the first axis of an array of 2 or more axes."""
    return _split_along(ary, indices_or_sections, 0, 2, "vsplit")


def dsplit(ary, indices_or_sections):
    """Split along the third axis of an array of 3 or more axes."""
    return _split_along(ary, indices_or_sections, 2, 3, "dsplit")


def diag(v, k=0):
    """A 2-D array's k-th diagonal, or a 2-D array with a 1-D array on its k-th
    diagonal (zeros elsewhere, which carry no gradient)."""
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
    """A 2-D array with the flattened input on its k-th diagonal."""
    return diag(ravel(v), k)


def fliplr(m):
    """Reverse the order of the columns (axis 1)."""
    m = as_tensor(m)
    if m.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(m, 1)


def flipud(m):
    """Reverse the order of the rows (axis 0)."""
    m = as_tensor(m)
    if m.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(m, 0)


def rot90(m, k=1, axes=(0, 1)):
    """Rotate by 90 degrees k times in the plane of ``axes``, as numpy."""
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
    """numpy.append: values after arr (both flattened when axis is None)."""
    arr, values = as_tensor(arr), as_tensor(values)
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


def rollaxis(a, axis, start=0):
    """numpy.rollaxis: move ``axis`` to stand before ``start``."""
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
    (broadcasts, so the gradient of each sums over the grid)."""
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
    """The Kronecker product: blocks a[i, j] * b (one broadcast product and a reshape)."""
    a, b = as_tensor(a), as_tensor(b)
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    interleaved_a = tuple(x for n in sa for x in (n, 1))
    interleaved_b = tuple(x for n in sb for x in (1, n))
    prod = reshape(a, interleaved_a) * reshape(b, interleaved_b)
    return reshape(prod, tuple(p * q for p, q in zip(sa, sb)))

