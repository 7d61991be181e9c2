"""Products composed of matmul and the shape ops: dot, vdot, outer, tensordot, inner,
and einsum for any subscripts."""
import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from ..ops.indexing import as_tensor, broadcast_to, reshape, transpose
from ..ops.linalg import matmul
from ..ops.reduce import sum
from .shaping import diagonal, ravel

__all__ = ["dot", "vdot", "outer", "tensordot", "inner", "einsum"]


def dot(a, b):
    """numpy.dot for operands of at most 2 dimensions (a 0-d operand multiplies).

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.grad(at.dot(x, x), x)
    (tensor([2., 4., 6.]),)
    """
    a, b = as_tensor(a), as_tensor(b)
    return a * b if a.ndim == 0 or b.ndim == 0 else matmul(a, b)


def vdot(a, b):
    """Dot product of the flattened operands.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.vdot(x, x)
    tensor(14., grad_fn=<SumBackward>)
    """
    return sum(ravel(a) * ravel(b))


def outer(a, b):
    """Outer product of the flattened operands.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.outer(x, x[:2])
    tensor([[1., 2.],
            [2., 4.],
            [3., 6.]], grad_fn=<MultiplyBackward>)
    """
    return reshape(ravel(a), (-1, 1)) * reshape(ravel(b), (1, -1))


def tensordot(a, b, axes=2):
    """Sum over the given axes of a and b, as numpy: transposes, reshapes and one matmul.

    >>> m = at.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> at.tensordot(m, m, axes=2)
    tensor(30., grad_fn=<ReshapeBackward>)
    """
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
    """Sum over the last axes of a and b.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.inner(x, x)
    tensor(14., grad_fn=<ReshapeBackward>)
    """
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, axes=((-1,), (-1,)))


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
