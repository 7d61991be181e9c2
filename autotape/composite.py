"""Functions composed of table ops. They have no derivative rules of their own (the chain
rule through the ops they use gives them), and are written so that values are stable:
shifts by a constant maximum, means subtracted before squaring."""
import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from .ops import codes
from .ops.shape import _c_strides
from .creation import full
from .guards import observe
from .record import (_UNARY_FUNCTIONS, broadcast_to, concatenate, gather, matmul, mean,
                     reshape, sum, take_flat, transpose, where)
from .record import max as record_max, min as record_min
from .tensor import Tensor, _array_value, _canonical, _plain, as_tensor

_exp, _log, _sqrt = (_UNARY_FUNCTIONS[c] for c in (codes.EXP, codes.LOG, codes.SQRT))


def _axes(x, axis):
    return tuple(range(x.ndim)) if axis is None else normalize_axis_tuple(axis, x.ndim)


def _shift(x, axes):
    """The maximum over axes (kept), as a constant; 0 where it is not finite."""
    def shift(v):
        m = np.max(v, axis=axes, keepdims=True) if v.size else np.zeros(())
        return np.where(np.isfinite(m), m, 0.0)
    return observe(shift, x)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) over ``axis``, without overflow. Its gradient is softmax(x).

    >>> at.logsumexp(at.tensor([1000.0, 1000.0])).item()
    1000.6931471805599
    """
    x = as_tensor(x)
    axes = _axes(x, axis)
    m = _shift(x, axes)
    out = _log(sum(_exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else reshape(out, tuple(n for d, n in enumerate(out.shape)
                                                   if d not in axes))


def softmax(x, axis=None):
    """exp(x) / sum(exp(x)) over ``axis`` (all axes when None, as scipy), stable."""
    x = as_tensor(x)
    axes = _axes(x, axis)
    e = _exp(x - _shift(x, axes))
    return e / sum(e, axis=axes, keepdims=True)


def log_softmax(x, axis=None):
    """log(softmax(x)) over ``axis``, computed as x - logsumexp(x) (stable)."""
    return as_tensor(x) - logsumexp(x, axis=axis, keepdims=True)


def var(x, axis=None, ddof=0, keepdims=False):
    """Variance over ``axis`` with numpy's default ddof=0 (torch's var is ddof=1)."""
    x = as_tensor(x)
    axes = _axes(x, axis)
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    d = x - mean(x, axis=axes, keepdims=True)
    return sum(d * d, axis=axes, keepdims=keepdims) / max(n - ddof, 0)


def std(x, axis=None, ddof=0, keepdims=False):
    """Standard deviation, sqrt(var); the gradient is nan where it is 0, as in torch."""
    return _sqrt(var(x, axis=axis, ddof=ddof, keepdims=keepdims))


def average(a, axis=None, weights=None, keepdims=False):
    """Weighted mean, numpy's rules (1-D weights along an axis of an n-D array)."""
    a = as_tensor(a)
    if weights is None:
        return mean(a, axis=axis, keepdims=keepdims)
    w = as_tensor(weights)
    if w.ndim == 1 and a.ndim > 1 and axis is not None and not isinstance(axis, tuple):
        shape = [1] * a.ndim
        shape[normalize_axis_tuple(axis, a.ndim)[0]] = w.shape[0]
        w = reshape(w, tuple(shape))
    return sum(a * w, axis=axis, keepdims=keepdims) / sum(w * np.ones(a.shape), axis=axis,
                                                        keepdims=keepdims)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal of the (axis1, axis2) planes, as numpy (a gather: its gradient is a
    scatter back onto the diagonal)."""
    a = as_tensor(a)
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), a.shape,
                                           _c_strides(a.shape, 1), writeable=False)
    view = np.diagonal(base, offset, axis1, axis2)
    start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return gather(a, (view.shape, start, view.strides))


def trace(a, offset=0, axis1=0, axis2=1):
    """Sum of the diagonal."""
    return sum(diagonal(a, offset, axis1, axis2), axis=-1)


def argmax(a, axis=None, keepdims=False):
    """Index of the largest element (an integer tensor: no gradient)."""
    return _plain(*_canonical(observe(lambda v: np.argmax(v, axis=axis, keepdims=keepdims),
                                      as_tensor(a))))


def argmin(a, axis=None, keepdims=False):
    """Index of the smallest element (an integer tensor: no gradient)."""
    return _plain(*_canonical(observe(lambda v: np.argmin(v, axis=axis, keepdims=keepdims),
                                      as_tensor(a))))


__all__ = ["logsumexp", "softmax", "log_softmax", "var", "std", "average", "diagonal",
           "trace", "argmax", "argmin"]


# ---- shape ---------------------------------------------------------------------------------

def expand_dims(a, axis):
    """Insert size-1 axes at ``axis`` (an int or a tuple), as numpy."""
    a = as_tensor(a)
    axes = normalize_axis_tuple(axis, a.ndim + (len(axis) if isinstance(axis, tuple) else 1))
    shape = iter(a.shape)
    return reshape(a, tuple(1 if d in axes else next(shape)
                            for d in range(a.ndim + len(axes))))


unsqueeze = expand_dims


def squeeze(a, axis=None):
    """Remove size-1 axes (all, or those in ``axis``)."""
    a = as_tensor(a)
    axes = tuple(d for d, n in enumerate(a.shape) if n == 1) if axis is None else \
        normalize_axis_tuple(axis, a.ndim)
    if any(a.shape[d] != 1 for d in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal "
                         "to one")
    return reshape(a, tuple(n for d, n in enumerate(a.shape) if d not in axes))


def ravel(a):
    """The elements as a 1-D tensor, C order."""
    return reshape(a, (-1,))


flatten = ravel


def swapaxes(a, axis1, axis2):
    a = as_tensor(a)
    perm = list(range(a.ndim))
    i, j = normalize_axis_tuple((axis1, axis2), a.ndim, allow_duplicate=True)
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, tuple(perm))


def moveaxis(a, source, destination):
    a = as_tensor(a)
    src = normalize_axis_tuple(source, a.ndim)
    dst = normalize_axis_tuple(destination, a.ndim)
    if len(src) != len(dst):
        raise ValueError("`source` and `destination` arguments must have the same number "
                         "of elements")
    order = [d for d in range(a.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, tuple(order))


def flip(a, axis=None):
    """Reverse the order of elements along ``axis`` (all axes when None)."""
    a = as_tensor(a)
    axes = _axes(a, axis)
    return a[tuple(slice(None, None, -1) if d in axes else slice(None)
                   for d in range(a.ndim))]


def split(a, indices_or_sections, axis=0):
    """A list of sub-tensors, as numpy.split."""
    a = as_tensor(a)
    axis = normalize_axis_tuple(axis, a.ndim)[0]
    n = a.shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        if n % indices_or_sections:
            raise ValueError("array split does not result in an equal division")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step)) if step else [0] * (indices_or_sections + 1)
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    lead = (slice(None),) * axis
    return [a[lead + (slice(lo, hi),)] for lo, hi in zip(bounds[:-1], bounds[1:])]


def roll(a, shift, axis=None):
    """Shift elements along ``axis`` cyclically (on the flattened tensor when None)."""
    a = as_tensor(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes = normalize_axis_tuple(axis, a.ndim, allow_duplicate=True)
    for s, d in zip(np.broadcast_to(shifts, len(axes)), axes):
        k = int(s) % a.shape[d] if a.shape[d] else 0
        if k:
            lead = (slice(None),) * d
            a = concatenate([a[lead + (slice(-k, None),)], a[lead + (slice(None, -k),)]],
                            axis=d)
    return a


def tile(a, reps):
    """Repeat the whole tensor ``reps`` times per axis (one broadcast and a reshape)."""
    a = as_tensor(a)
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    nd = max(a.ndim, len(reps))
    shape = (1,) * (nd - a.ndim) + a.shape
    reps = (1,) * (nd - len(reps)) + reps
    interleaved = tuple(x for n in shape for x in (1, n))
    target = tuple(x for r, n in zip(reps, shape) for x in (r, n))
    return reshape(broadcast_to(reshape(a, interleaved), target),
                   tuple(r * n for r, n in zip(reps, shape)))


def repeat(a, repeats, axis=None):
    """Repeat each element ``repeats`` times along ``axis`` (flattened when None)."""
    a = as_tensor(a)
    if not isinstance(repeats, (int, np.integer)):
        raise TypeError("autotape's repeat takes an int number of repeats")
    if axis is None:
        a, axis = ravel(a), 0
    d = normalize_axis_tuple(axis, a.ndim)[0]
    widened = reshape(a, a.shape[:d + 1] + (1,) + a.shape[d + 1:])
    target = a.shape[:d + 1] + (int(repeats),) + a.shape[d + 1:]
    return reshape(broadcast_to(widened, target),
                   a.shape[:d] + (a.shape[d] * int(repeats),) + a.shape[d + 1:])


def pad(a, pad_width, mode="constant", constant_values=0):
    """Pad with a constant (numpy's pad_width forms); index assignment into a filled
    tensor, so the gradient of the padding is zero."""
    if mode != "constant" or np.ndim(constant_values) != 0:
        raise ValueError("autotape's pad supports mode='constant' with one constant value")
    a = as_tensor(a)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2))
    out = full(tuple(int(n + lo + hi) for n, (lo, hi) in zip(a.shape, widths)),
               constant_values, dtype=a.dtype)
    out[tuple(slice(int(lo), int(lo) + n) for n, (lo, _) in zip(a.shape, widths))] = a
    return out


def triu(m, k=0):
    """Upper triangle of the last two axes (below the k-th diagonal set to 0)."""
    m = as_tensor(m)
    return where(np.triu(np.ones(m.shape[-2:], bool), k), m, 0.0)


def tril(m, k=0):
    """Lower triangle of the last two axes (above the k-th diagonal set to 0)."""
    m = as_tensor(m)
    return where(np.tril(np.ones(m.shape[-2:], bool), k), m, 0.0)


# ---- products ------------------------------------------------------------------------------

def dot(a, b):
    """numpy.dot for operands of at most 2 dimensions (a 0-d operand multiplies)."""
    a, b = as_tensor(a), as_tensor(b)
    return a * b if a.ndim == 0 or b.ndim == 0 else matmul(a, b)


def vdot(a, b):
    """Dot product of the flattened operands."""
    return sum(ravel(a) * ravel(b))


def outer(a, b):
    """Outer product of the flattened operands."""
    return reshape(ravel(a), (-1, 1)) * reshape(ravel(b), (1, -1))


def tensordot(a, b, axes=2):
    """Sum over the given axes of a and b, as numpy: transposes, reshapes and one matmul."""
    a, b = as_tensor(a), as_tensor(b)
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    else:
        axes_a, axes_b = ((x,) if isinstance(x, (int, np.integer)) else tuple(x)
                          for x in axes)
    axes_a, axes_b = normalize_axis_tuple(axes_a, a.ndim), normalize_axis_tuple(axes_b, b.ndim)
    if [a.shape[i] for i in axes_a] != [b.shape[i] for i in axes_b]:
        raise ValueError("shape-mismatch for sum")
    free_a = [d for d in range(a.ndim) if d not in axes_a]
    free_b = [d for d in range(b.ndim) if d not in axes_b]
    k = int(np.prod([a.shape[d] for d in axes_a], dtype=np.int64))
    at_ = reshape(transpose(a, tuple(free_a) + axes_a), (-1, k))
    bt_ = reshape(transpose(b, axes_b + tuple(free_b)), (k, -1))
    return reshape(matmul(at_, bt_), tuple(a.shape[d] for d in free_a) +
                   tuple(b.shape[d] for d in free_b))


def inner(a, b):
    """Sum over the last axes of a and b."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, axes=((-1,), (-1,)))


__all__ += ["expand_dims", "unsqueeze", "squeeze", "ravel", "flatten", "swapaxes",
            "moveaxis", "flip", "split", "roll", "tile", "repeat", "pad", "triu", "tril",
            "dot", "vdot", "outer", "tensordot", "inner"]


# ---- indexing by arrays --------------------------------------------------------------------

def _index_array(indices):
    return np.asarray(_array_value(indices) if isinstance(indices, Tensor) else indices)


def take(a, indices, axis=None):
    """Elements at ``indices`` along ``axis`` (of the flattened tensor when None); the
    gradient of a repeated index accumulates."""
    a = as_tensor(a)
    return take_flat(a, np.take(np.arange(a.size).reshape(a.shape), _index_array(indices),
                                axis=axis))


def take_along_axis(arr, indices, axis):
    """numpy.take_along_axis: ``indices`` picks along ``axis`` position by position."""
    arr = as_tensor(arr)
    return take_flat(arr, np.take_along_axis(np.arange(arr.size).reshape(arr.shape),
                                             _index_array(indices), axis))


__all__ += ["take", "take_along_axis"]


# ---- norms ---------------------------------------------------------------------------------

def _safe_sqrt(s):
    """sqrt(s), with gradient 0 (not nan) where s == 0: the norm of a zero vector."""
    positive = observe(lambda v: v > 0, as_tensor(s))
    return where(positive, _sqrt(where(positive, s, 1.0)), 0.0)


def norm(x, ord=None, axis=None, keepdims=False):
    """numpy.linalg.norm: vectors (ord None/2, 1, inf, -inf, 0 < p) and matrices
    ('fro', 1, inf, -1, -inf). The gradient at a zero vector is 0 (torch's rule)."""
    x = as_tensor(x)
    abs_ = _UNARY_FUNCTIONS[codes.ABS]
    if axis is None and ord is None:
        return _safe_sqrt(sum(x * x, keepdims=keepdims))
    axes = _axes(x, axis) if axis is not None else tuple(range(x.ndim))
    if len(axes) == 1:
        if ord is None or ord == 2:
            return _safe_sqrt(sum(x * x, axis=axes, keepdims=keepdims))
        if ord == np.inf:
            return record_max(abs_(x), axis=axes, keepdims=keepdims)
        if ord == -np.inf:
            return record_min(abs_(x), axis=axes, keepdims=keepdims)
        if ord == 1:
            return sum(abs_(x), axis=axes, keepdims=keepdims)
        if isinstance(ord, (int, float)) and ord > 0:
            return sum(abs_(x) ** ord, axis=axes, keepdims=keepdims) ** (1.0 / ord)
        raise ValueError(f"autotape's norm does not support ord={ord!r} for vectors")
    if len(axes) == 2:
        rows, cols = axes
        if ord is None or ord == "fro":
            return _safe_sqrt(sum(x * x, axis=axes, keepdims=keepdims))
        if ord in (1, -1, np.inf, -np.inf):
            summed, other = (rows, cols) if ord in (1, -1) else (cols, rows)
            s = sum(abs_(x), axis=summed, keepdims=True)
            pick = record_max if ord > 0 else record_min
            out = pick(s, axis=other, keepdims=True)
            return out if keepdims else reshape(out, tuple(
                n for d, n in enumerate(out.shape) if d not in axes))
        raise ValueError(f"autotape's norm does not support ord={ord!r} for matrices "
                         "(the spectral and nuclear norms need an SVD)")
    raise ValueError("Improper number of dimensions to norm.")


__all__ += ["norm"]


# ---- einsum: any subscripts, from diagonal, sum, transpose, broadcasting and matmul -------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def einsum(subscripts, *operands):
    """numpy.einsum for any subscripts: explicit or implicit output, ``...``, repeated
    indices (diagonals), any number of operands. Built from diagonal, sum, transpose,
    broadcasting and batched matmul (operands contracted left to right), so its
    gradient, to any order, is theirs.

    >>> a = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.einsum("ij,jk->ik", a, a)
    tensor([[ 7., 10.],
            [15., 22.]], grad_fn=<ViewBackward>)
    >>> at.grad(at.einsum("ii", a), a)
    (tensor([[1., 0.],
            [0., 1.]]),)
    """
    if not isinstance(subscripts, str):                 # einsum(a, [0, 1], b, [1, 2], [0, 2])
        subscripts, operands = _einsum_sublists((subscripts,) + operands)
    ops = [as_tensor(o) for o in operands]
    terms, output = _einsum_parse(subscripts.replace(" ", ""), ops)
    sizes = {}
    for t, term in zip(ops, terms):
        for label, n in zip(term, t.shape):
            if sizes.get(label, 1) != 1 and n != 1 and n != sizes[label]:
                raise ValueError(f"einstein sum subscripts string contains a label that has "
                                 f"size {n} in one operand and {sizes[label]} in another")
            sizes[label] = n if sizes.get(label, 1) == 1 else sizes[label]
    items = []
    for t, term in zip(ops, terms):
        term = list(term)
        while len(set(term)) < len(term):                    # repeated label: a diagonal
            label = next(c for c in term if term.count(c) > 1)
            p = term.index(label)
            q = term.index(label, p + 1)
            t = diagonal(t, 0, p, q)
            term = [c for k, c in enumerate(term) if k not in (p, q)] + [label]
        items.append((t, term))
    t, term = _einsum_sum_out(items[0], items[1:], output)
    for k in range(1, len(items)):
        other = _einsum_sum_out(items[k], [(t, term)] + items[k + 1:], output)
        t, term = _einsum_pair((t, term), other, items[k + 1:], output, sizes)
    t = _einsum_sum_out((t, term), [], output)[0] if set(term) - set(output) else t
    return transpose(t, [term.index(c) for c in output]) if len(output) > 1 else t


def _einsum_sublists(args):
    """numpy's interleaved form (operand, sublist, ..., [output sublist]) as a string."""
    def letters(sub):
        out = ""
        for s in sub:
            if s is Ellipsis:
                out += "..."
            elif isinstance(s, (int, np.integer)) and 0 <= s < len(_LETTERS):
                out += _LETTERS[s]
            else:
                raise ValueError(f"einsum: subscript {s!r} in a sublist is not an integer in "
                                 f"[0, {len(_LETTERS)})")
        return out
    operands, terms = list(args[0::2]), [letters(s) for s in args[1::2]]
    if len(args) % 2:                                    # an output sublist at the end
        operands.pop()
        return ",".join(terms) + "->" + letters(args[-1]), operands
    return ",".join(terms), operands


def _einsum_parse(subscripts, ops):
    """Each operand's labels and the output's, with '...' spelled out as labels."""
    lhs, arrow, out = subscripts.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise ValueError(f"einsum: {len(terms)} operand subscripts for {len(ops)} operands")
    ell = max((t.ndim - len(s.replace("...", "")) for s, t in zip(terms, ops)
               if "..." in s), default=0)
    broadcast = [chr(0x100 + k) for k in range(ell)]         # never a user's label
    labels = []
    for s, t in zip(terms, ops):
        for c in s.replace("...", ""):
            if c not in _LETTERS:
                raise ValueError(f"einsum: invalid subscript '{c}' in '{subscripts}'")
        if "..." in s:
            e = t.ndim - len(s.replace("...", ""))
            head, _, tail = s.partition("...")
            labels.append(list(head) + broadcast[ell - e:] + list(tail))
        else:
            labels.append(list(s))
        if len(labels[-1]) != t.ndim:
            raise ValueError(f"einsum: operand has {t.ndim} dimensions but subscripts "
                             f"'{s}' give {len(labels[-1])}")
    if arrow:
        if ell and "..." not in out:
            raise ValueError("output has more dimensions than subscripts given in einstein "
                             "sum, but no '...' ellipsis provided to broadcast the extra "
                             "dimensions.")
        output = list(out.replace("...", "".join(broadcast)))
        for c in output:
            if not any(c in lab for lab in labels):
                raise ValueError(f"einsum: output subscript '{c}' does not appear in the "
                                 "inputs")
        if len(set(output)) != len(output):
            raise ValueError("einsum: output subscript string includes a label twice")
    else:
        counts = {}
        for lab in labels:
            for c in lab:
                counts[c] = counts.get(c, 0) + 1
        output = broadcast + sorted(c for c, n in counts.items()
                                    if n == 1 and c not in broadcast)
    return labels, output


def _einsum_sum_out(item, others, output):
    """Sum an operand over the labels that no other operand and not the output has."""
    t, term = item
    keep = set(output).union(*(set(lab) for _, lab in others))
    axes = tuple(k for k, c in enumerate(term) if c not in keep)
    if not axes:
        return t, term
    return sum(t, axis=axes), [c for c in term if c in keep]


def _einsum_pair(left, right, later, output, sizes):
    """Contract two operands by one batched matmul: (batch, free left, shared) @
    (batch, shared, free right)."""
    (a, la), (b, lb) = left, right
    needed = set(output).union(*(set(lab) for _, lab in later))
    batch = [c for c in la if c in lb and c in needed]
    shared = [c for c in la if c in lb and c not in needed]
    free_a = [c for c in la if c not in lb]
    free_b = [c for c in lb if c not in la]

    def arrange(t, lab, order):
        t = transpose(t, [lab.index(c) for c in order]) if len(order) > 1 else t
        return broadcast_to(t, tuple(sizes[c] if c in batch or c in shared else
                                     t.shape[k] for k, c in enumerate(order)))
    a = arrange(a, la, batch + free_a + shared)
    b = arrange(b, lb, batch + shared + free_b)
    nb = [sizes[c] for c in batch]
    fa, fb = list(a.shape[len(batch):len(batch) + len(free_a)]), list(b.shape[len(b.shape) -
                                                                               len(free_b):])
    c_size = int(np.prod([sizes[c] for c in shared], dtype=np.int64))
    prod = matmul(a.reshape(nb + [int(np.prod(fa, dtype=np.int64)), c_size]),
                  b.reshape(nb + [c_size, int(np.prod(fb, dtype=np.int64))]))
    return prod.reshape(nb + fa + fb), batch + free_a + free_b


__all__ += ["einsum"]
