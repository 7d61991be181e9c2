"""Grad mode: whether ops record. Context managers that are also decorators.

Grad mode is per thread (thread_state.py), as in torch: ``no_grad`` in one thread
leaves every other thread recording."""
import functools
import inspect
import warnings

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
        return decorated(self.__class__, fn)


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
        return decorated(lambda: set_grad_enabled(mode), fn)


def decorated(context, fn):
    """fn run inside ``context()`` (a grad mode context), as torch decorates: a
    generator function's body runs in it at every resumption (and the caller's mode
    between them), a coroutine function's too; a class is called in it, with torch's
    FutureWarning."""
    if inspect.isclass(fn):
        warnings.warn("Decorating classes is deprecated and will be disabled in future "
                      "versions. You should only decorate functions or methods. To "
                      "preserve the current behavior of class decoration, you can "
                      "directly decorate the `__init__` method and nothing else.",
                      FutureWarning, stacklevel=3)
        cls = fn
        fn = lambda *args, **kwargs: cls(*args, **kwargs)     # noqa: E731
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            inner = fn(*args, **kwargs)
            with context():
                request = None
                step = inner.send
            while True:
                try:
                    with context():
                        reply = step(request)
                except StopIteration as done:
                    return done.value
                try:
                    request, step = (yield reply), inner.send
                except GeneratorExit:
                    with context():
                        inner.close()
                    raise
                except BaseException as e:        # thrown in by the caller
                    request, step = e, inner.throw
        return generator
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def coroutine(*args, **kwargs):
            with context():
                return await fn(*args, **kwargs)
        return coroutine

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with context():
            return fn(*args, **kwargs)
    return wrapper
