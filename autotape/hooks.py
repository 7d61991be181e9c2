"""Tensor hooks, as torch has them: ``t.register_hook(fn)`` and, on leaves,
``t.register_post_accumulate_grad_hook(fn)``.

A hook on a non-leaf belongs to its tape row (it fires though the Tensor object is gone,
as torch's belongs to the grad_fn node): the compiled sweep stops at that row once its
gradient is complete, before passing it on, and the engine calls the hooks there
(executor.py, ``stops``). A leaf's hooks run when its gradient summed over every tape
is known, before ``.grad`` accumulates it or ``grad`` returns it. Torch's rules:

- hooks run in registration order, each given the previous one's result (None keeps
  the gradient); a result of another shape raises torch's "hook ... has changed the
  size of value";
- a non-leaf's ``.grad`` (``retain_grad``) gets the gradient after its hooks, while
  ``grad(outputs, inputs)`` returns a non-leaf input's gradient before them (a leaf
  input's after);
- a hook fires only where a gradient reaches; with ``create_graph=True`` it receives
  and may return recorded tensors;
- post-accumulate hooks run after ``.grad`` was updated by ``backward`` (not by
  ``grad``), given the leaf itself.

Where torch raises (a hook under ``is_grads_batched``), autotape calls the hook once per
cotangent lane, as vmap would.
"""
import itertools
import threading

import numpy as np

from .grad_mode import enable_grad, is_grad_enabled, no_grad
from .guards import current_trace
from .tensor import Tensor, canonical, new_leaf

_handle_ids = itertools.count()
# Whether any leaf ever had a hook or a post-accumulate hook: until then the engine does
# not look for them (a getattr per leaf per sweep is a small tape's measurable cost).
LEAF_HOOKS = [False]


class RemovableHandle:
    """What ``register_hook`` returns: ``handle.remove()`` unregisters the hook.

    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> handle = x.register_hook(lambda g: g * 10)
    >>> handle.remove()
    >>> at.grad((x * 3).sum(), x)
    (tensor([3., 3.]),)
    """

    def __init__(self, hooks):
        self.id = next(_handle_ids)
        self._hooks = hooks

    def remove(self):
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _not_in_compile(name):
    if current_trace() is not None:
        raise RuntimeError(f"{name} inside a function being compiled (at.compile): a "
                           "compiled replay runs no Python, so the hook would never "
                           "run. Register it on the compiled function's inputs or "
                           "results outside, or differentiate eagerly")


def register_hook(t, fn):
    """Call ``fn(grad)`` with this tensor's gradient whenever one is computed; a Tensor
    it returns replaces the gradient (see autotape/hooks.py for the rules).

    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> y = x * 2
    >>> _ = y.register_hook(lambda g: g * 10)
    >>> y.sum().backward()
    >>> x.grad
    tensor([20., 20.])
    """
    if not callable(fn):
        raise TypeError(f"register_hook expects a callable, not {type(fn).__name__}")
    _not_in_compile("register_hook")
    if not t.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if t._tape is None:
        LEAF_HOOKS[0] = True
        hooks = getattr(t, "_hooks", None)
        if hooks is None:
            hooks = t._hooks = {}
    else:
        hooks = t._tape.hooks.setdefault(t._row, (t.dtype, {}))[1]
    handle = RemovableHandle(hooks)
    hooks[handle.id] = fn
    return handle


def register_post_accumulate_grad_hook(t, fn):
    """Call ``fn(t)`` after ``backward`` has accumulated into the leaf ``t.grad``.

    >>> w = at.tensor([1.0, 2.0], requires_grad=True)
    >>> _ = w.register_post_accumulate_grad_hook(lambda p: print(p.grad))
    >>> (w * 3).sum().backward()
    tensor([3., 3.])
    """
    if not callable(fn):
        raise TypeError(f"register_post_accumulate_grad_hook expects a callable, not "
                        f"{type(fn).__name__}")
    _not_in_compile("register_post_accumulate_grad_hook")
    if not t.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if t._tape is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                           "tensors")
    LEAF_HOOKS[0] = True
    hooks = getattr(t, "_post_hooks", None)
    if hooks is None:
        hooks = t._post_hooks = {}
    handle = RemovableHandle(hooks)
    hooks[handle.id] = fn
    return handle


def run_hooks(hooks, g, shape, dtype):
    """The gradient after ``hooks`` (a dict of functions, in order): ``g`` a float64
    array of ``shape``'s size (one lane) or a recorded Tensor; returns the same kind."""
    tensors = isinstance(g, Tensor)          # (recorded under create_graph; numbers on
    recorded = tensors and is_grad_enabled()  # the Python tier, whose walk runs no_grad)
    grad = g if tensors else new_leaf(*canonical(np.asarray(g, dtype).reshape(shape)))
    for fn in list(hooks.values()):
        with _grad_mode(recorded):             # (torch: off unless create_graph)
            out = fn(grad)
        if out is None:
            continue
        if not isinstance(out, Tensor):
            raise TypeError(f"expected Tensor, but hook returned "
                            f"'{type(out).__module__}.{type(out).__name__}'")
        if out.shape != tuple(shape):
            name = getattr(fn, "__name__", repr(fn))
            raise RuntimeError(f"hook '{name}' has changed the size of value")
        grad = out
    return grad if tensors else np.asarray(grad.numpy(), np.float64).reshape(g.shape)


def stops_of(tape):
    """The tape's rows with hooks: (stops, {row: (dtype, hooks)}) for the sweep."""
    if not tape.hooks:
        return None, None
    hooked = {row: entry for row, entry in list(tape.hooks.items()) if entry[1]}
    if not hooked:
        return None, hooked
    stops = np.zeros(max(hooked) + 1, np.uint8)
    stops[list(hooked)] = 1
    return stops, hooked


def run_leaf_hooks(leaf, g, lanes):
    """A leaf's summed gradient (float64, lanes on a leading axis when ``lanes``) after
    its hooks, one lane at a time."""
    hooks = getattr(leaf, "_hooks", None)
    if not hooks:
        return g
    if isinstance(g, Tensor):
        return run_hooks(hooks, g, leaf.shape, leaf.dtype)
    per_lane = np.asarray(g, np.float64).reshape(max(lanes, 1), -1)
    out = np.stack([run_hooks(hooks, lane, leaf.shape, leaf.dtype) for lane in per_lane])
    return out.reshape(np.shape(g))


def run_post_accumulate_hooks(leaf):
    """The leaf's post-accumulate hooks, under no_grad unless its ``.grad`` is
    recorded (create_graph), as torch runs them: an optimizer step in one
    (``p -= lr * p.grad``) updates the leaf in place."""
    grad = getattr(leaf, "_grad", None)
    for fn in list((getattr(leaf, "_post_hooks", None) or {}).values()):
        with _grad_mode(grad is not None and grad._tape is not None):
            out = fn(leaf)
        if out is not None:
            raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def _grad_mode(recorded):
    return enable_grad() if recorded else no_grad()



# ---- hooks on several tensors ---------------------------------------------------------------

MULTI_HOOKS = [False]          # whether one was ever registered (until then a backward
_passes = threading.local()    # opens no pass); per thread: the open backward passes


class _MultiHandle:
    """What ``register_multi_grad_hook`` returns: ``remove()`` unregisters it."""

    def __init__(self, handles):
        self._handles = handles

    def remove(self):
        for h in self._handles:
            h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """torch.autograd.graph's hook on several tensors. ``mode="all"``: after a backward
    pass computed the gradients of any of ``tensors``, ``fn(grads)`` gets them all as a
    tuple (None for each tensor the pass did not reach). ``mode="any"``: ``fn(grad)``
    gets the first gradient a pass computes among them, once per pass.

    >>> a = at.tensor([1.0], requires_grad=True)
    >>> b = at.tensor([2.0], requires_grad=True)
    >>> seen = []
    >>> _ = at.autograd.graph.register_multi_grad_hook((a, b), seen.append)
    >>> (a * 3).sum().backward()
    >>> seen
    [(tensor([3.]), None)]
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    if not callable(fn):
        raise TypeError(f"register_multi_grad_hook expects a callable, not "
                        f"{type(fn).__name__}")
    tensors = tuple(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"register_multi_grad_hook expects Tensors, not "
                            f"{type(t).__name__}")
    MULTI_HOOKS[0] = True
    key = object()                     # this hook's entry in each pass

    def on_grad(k):
        def hook(grad):
            stack = getattr(_passes, "stack", None)
            if not stack:              # (a sweep outside backward / grad: none here)
                return None
            current = stack[-1]
            if mode == "any":
                if key not in current:
                    current[key] = None
                    fn(grad)
            else:
                grads = current.get(key)
                if grads is None:
                    grads = current[key] = (fn, [None] * len(tensors))
                grads[1][k] = grad
            return None
        return hook

    return _MultiHandle([register_hook(t, on_grad(k)) for k, t in enumerate(tensors)])


class multi_grad_pass:
    """One backward pass for the multi-grad hooks (the engine's grad and backward open
    one when any was registered): on leaving it, each "all" hook that saw a gradient
    is called with its tensors' gradients."""

    def __enter__(self):
        stack = getattr(_passes, "stack", None)
        if stack is None:
            stack = _passes.stack = []
        stack.append({})

    def __exit__(self, kind, *exc):
        done = _passes.stack.pop()
        if kind is None:
            for entry in done.values():
                if entry is not None:
                    fn, grads = entry
                    fn(tuple(grads))
