"""Grad mode: whether ops record. Context managers that are also decorators.

Grad mode is per thread (thread_state.py), as in torch: ``no_grad`` in one thread
leaves every other thread recording."""
import functools

from .thread_state import here


def is_grad_enabled():
    """True when ops on tensors that require grad are recorded (in this thread).

    >>> with at.no_grad():
    ...     print(at.is_grad_enabled())
    False
    """
    return here().grad_enabled


class _GradModeContext:
    _mode = None

    def __new__(cls, *args):
        if cls is not set_grad_enabled and len(args) == 1 and callable(args[0]):
            return cls()(args[0])            # used as @no_grad, without parentheses
        return super().__new__(cls)

    def __enter__(self):
        state = here()
        self._saved = state.grad_enabled
        state.grad_enabled = self._mode

    def __exit__(self, *exc):
        here().grad_enabled = self._saved

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradModeContext):
    """Context manager and decorator: ops inside record nothing.

    >>> x = at.tensor([1.0], requires_grad=True)
    >>> with at.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """
    _mode = False


class enable_grad(_GradModeContext):
    """Context manager and decorator: re-enables recording inside ``no_grad``.

    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> with at.no_grad():
    ...     with at.enable_grad():
    ...         y = x * 2
    >>> y.requires_grad
    True
    """
    _mode = True


class set_grad_enabled(_GradModeContext):
    """``set_grad_enabled(False)``: sets grad mode now; as a context manager, restores it
    on exit.

    >>> x = at.tensor([1.0, 2.0], requires_grad=True)
    >>> with at.set_grad_enabled(False):
    ...     y = x * 2
    >>> y.requires_grad, at.is_grad_enabled()
    (False, True)
    """

    def __init__(self, mode):
        state = here()
        self._saved = state.grad_enabled
        self._mode = bool(mode)
        state.grad_enabled = self._mode

    def __enter__(self):
        pass

    def __call__(self, fn):
        mode = self._mode
        here().grad_enabled = self._saved

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper
