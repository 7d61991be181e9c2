"""Views, as numpy's and torch's: a basic index, a reshape or a transpose of a tensor is
a view of it, and an in-place change of either shows in the other.

A view remembers its root (the tensor it was taken from, through any number of views)
and the chain of view steps that leads there; the root keeps weak references to its
views. Values on a tape never change, so a write does not go through shared memory:
after an in-place op on a view (``v *= 2``, ``v[0] = 1``, ``v.zero_()``) the root takes
a new value with the view's elements put in place, recorded when gradients are on
(elements kept from the root, the view's scattered in: torch's CopySlices), and every
other view of the root is read again from it. After an in-place op on the root its
views are read again. Without gradients the root's own buffer is written when nothing
else may read it, as numpy writes.

>>> x = at.tensor([[1.0, 2.0], [3.0, 4.0]])
>>> column = x[:, 1]
>>> column *= 10
>>> x
tensor([[ 1., 20.],
        [ 3., 40.]])
"""
import math
import threading
import weakref

import numpy as np

from ..grad_mode import enable_grad, is_grad_enabled
from ..tensor import (LEAF_VIEW_INPLACE_MSG, NONLEAF_NO_GRAD_INPLACE_MSG, array_of,
                      written_through)
from ..thread_state import per_thread
from .elementwise import add, where
from .indexing import astype, put_add, reshape, take_flat
from .versions import after_inplace, before_inplace


def view_of(view, base, step):
    """Mark ``view`` (a new tensor) as ``base`` seen through ``step``: ("index", a
    normalised basic index), ("reshape", shape), ("transpose", axes) or ("expand",
    shape: a broadcast, which in-place ops refuse as torch's). Returns view."""
    link = base._view_of
    steps = (step,) if per_thread.state.grad_enabled or not base.requires_grad else \
        (step, ("no_grad", None))           # (torch refuses its in-place ops with grads)
    if link is None:
        root = base
        view._view_of = (base, steps)
    else:
        root = link[0]
        view._view_of = (root, _composed(link[1], steps))
    views = root._views
    if views is None:
        with _LOCK:                              # (one list per root, whatever thread)
            views = root._views
            if views is None:
                views = root._views = [0]        # [room before pruning, weakrefs...]
    views.append(weakref.ref(view))              # (atomic: threads may take views)
    if len(views) > views[0] + 16 and _LOCK.acquire(blocking=False):
        try:                                     # drop dead views: the entries appended
            n = len(views)                       # meanwhile stay (past n)
            alive = [r for r in views[1:n] if r() is not None]
            views[1:n] = alive
            views[0] = 2 * len(alive)
        finally:
            _LOCK.release()
    return view


_LOCK = threading.Lock()
NO_GRAD_VIEW_MSG = (
    "A view was created in no_grad mode and is being modified inplace with grad mode "
    "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You "
    "can clarify your code by moving both the view and the inplace either both inside the "
    "no_grad block (if you don't want the inplace to be tracked) or both outside (if you "
    "want the inplace to be tracked).")


def _composed(chain, steps):
    """chain + steps, with a reshape of a reshape and a transpose of a transpose made
    one step: a view of a view of ... (``y = y.reshape(-1)`` in a loop) keeps a chain
    of constant length, so the steps that walk it stay O(1)."""
    last, (kind, arg) = (chain[-1] if chain else (None, None)), steps[0]
    if last is not None and last[0] == kind == "reshape":
        return chain[:-1] + steps
    if last is not None and last[0] == kind == "transpose":
        return chain[:-1] + (("transpose", tuple(last[1][a] for a in arg)),) + steps[1:]
    return chain + steps


def positions(shape, chain):
    """The flat positions in a C-ordered array of ``shape`` of the elements that the
    view ``chain`` selects, in the view's shape (numpy's own indexing computes them)."""
    a = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    for kind, arg in chain:
        a = _step(a, kind, arg)
    return a


def one_of_several(views, name):
    """Mark the views a function returns together (unbind, split, chunk): as torch's,
    they refuse in-place ops that gradients would have to follow. Returns them."""
    for k, v in enumerate(views):
        root, chain = v._view_of
        v._view_of = (root, chain + (("several", (name, k)),))
    return views


def _step(a, kind, arg):
    """One view step on a numpy array (a view of it)."""
    if kind == "several" or kind == "no_grad":
        return a
    if kind == "index":
        return a[arg]
    if kind == "reshape":
        return a.reshape(arg)
    if kind == "transpose":
        return a.transpose(arg)
    return np.broadcast_to(a, arg)                 # "expand"


_KEEP_ORDER = ("reshape", "several", "no_grad")     # steps that keep a C-ordered run


def contiguous(t):
    """Whether t's elements are a contiguous run of its root's, in order (a reshape of
    it is then a view, as numpy's and torch's; otherwise a copy). Decided from strides
    alone: the chain applied to a stand-in of the root's shape whose data is never read
    (no array of the root's size is made)."""
    link = t._view_of
    if link is None or all(kind in _KEEP_ORDER for kind, _ in link[1]):
        return True
    shape = link[0]._shape
    strides = tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))
    a = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape, strides)
    for kind, arg in link[1]:
        a = _step(a, kind, arg)
    return a.size == 0 or a.flags.c_contiguous


def check_inplace(t):
    """Before an in-place op on ``t``: torch's errors where its root cannot change.
    Returns what ``written`` needs to mark the values the op replaces (versions.py)."""
    link = getattr(t, "_view_of", None)
    if link is None:
        return before_inplace(t)
    root, chain = link
    if any(kind == "expand" for kind, _ in chain):
        raise RuntimeError("unsupported operation: more than one element of the written-to "
                           "tensor refers to a single memory location. Please clone() the "
                           "tensor before performing the operation.")
    if is_grad_enabled():
        if any(kind == "no_grad" for kind, _ in chain):
            raise RuntimeError(NO_GRAD_VIEW_MSG)
        if root._tape is None and root._requires_grad:
            raise RuntimeError(LEAF_VIEW_INPLACE_MSG)
        several = [arg for kind, arg in chain if kind == "several"]
        if several and (root.requires_grad or t.requires_grad):
            name, k = several[0]
            raise RuntimeError(
                f"Output {k} of {name} is a view and is being modified inplace. This view "
                "is the output of a function that returns multiple views. Such functions "
                "do not allow the output views to be modified inplace. You should replace "
                "the inplace operation by an out-of-place one.")
    elif root._tape is not None:
        raise RuntimeError(NONLEAF_NO_GRAD_INPLACE_MSG)
    elif t._tape is not None:        # (recorded before: from now on a plain value)
        t._tape, t._row, t._cache = None, -1, None
    return before_inplace(t)


def written(t, replaced):
    """After an in-place op changed ``t``: its root, and every view of the root, show
    the change (see the module's docstring); its version goes up, and the recorded
    rows that read a value it replaced (``replaced``: check_inplace's) are marked."""
    after_inplace(t, replaced)
    written_through(t)
    link = getattr(t, "_view_of", None)
    if link is not None:
        root, chain = link
        flat = positions(root._shape, chain).reshape(-1)   # (distinct positions: views
        # are basic indices, reshapes and transposes)
        if is_grad_enabled() and (t.requires_grad or root.requires_grad):
            mask = np.zeros(root.size, bool)
            mask[flat] = True
            kept = where(mask.reshape(root._shape), 0.0, root)
            new = add(kept, put_add(reshape(t, (-1,)), flat, root._shape))
            root._become(new if new._dtype == root._dtype else astype(new, root._dtype))
        else:
            _write_value(root, flat, array_of(t))
        written_through(root)
        _refresh(root, skip=t)
    elif getattr(t, "_views", None):
        _refresh(t, skip=None)


def _write_value(root, flat, values):
    """Without gradients: the root's buffer written, or a copy of it where a tape (or
    a requires-grad read-only view) may read the old one."""
    v = root._value
    if type(v) is float:
        root._value = float(np.reshape(values, -1)[0])
        root._cache = None
        return
    if not v.flags.writeable or not v.flags.c_contiguous:
        v = np.array(v, order="C")
    v.reshape(-1)[flat] = np.reshape(values, -1)
    root._value = v
    root._cache = None


def _refresh(root, skip):
    """Every live view of ``root`` but ``skip`` read again from it."""
    with _LOCK:
        refs = list((getattr(root, "_views", None) or [0])[1:])
    for ref in refs:
        w = ref()
        if w is None or w is skip:
            continue
        chain = w._view_of[1]
        if root.requires_grad:
            # a view of a tensor requiring grad stays on its graph, also after a change
            # under no_grad (an optimizer's step on a leaf), as torch's views do
            with enable_grad():
                w._become(take_flat(root, positions(root._shape, chain)))
        else:
            value = array_of(root)
            for kind, arg in chain:
                value = _step(value, kind, arg)
            if w._shape == () and w._dtype.kind == "f":
                w._value = float(value)
            else:                           # (a view of the root's buffer, where it can)
                value = np.asarray(value)
                w._value = value if value.flags.c_contiguous else np.ascontiguousarray(value)
            w._tape, w._row, w._cache = None, -1, None
