"""Where numba caches autotape's compiled kernels.

numba keys a cached function on its own source file only: editing a helper in another
module (an op's derivative in kernels/elementwise.py) would leave a stale kernel on
disk. So the kernels are cached in a directory named after a digest of the numba tier,
every source that is compiled into them (``KERNEL_SOURCES``: this folder, the opcodes,
the tape format and the tuning constants), plus the numba version. The digest is of the code, not the text:
comments and docstrings do not count, so editing them, or anything in the Python tier
(ops/, the engine), compiles nothing again. tests/test_architecture.py checks that
the kernels import nothing outside ``KERNEL_SOURCES``.

numba's own locator would also stamp each entry point with its file's bytes, line
number and path, recompiling after a comment edit and in every new checkout.
``KernelCacheLocator`` replaces it for the kernels: the digest is the stamp, so a
cache is shared by every checkout and environment with the same kernel code and numba
version. It hooks into numba's list of locators (an internal of numba.core.caching);
where that list is not found, numba's locator is used, which is correct but
recompiles more often.
"""
import ast
import contextlib
import functools
import hashlib
import importlib.util
import os
import pathlib
import sys
import threading
import time
import types

import numba
import numpy as np
from numba.core import caching
from numba.core.dispatcher import Dispatcher
from ..tuning import NOTICE_AFTER, WAIT_FOR_OTHERS

_PACKAGE = pathlib.Path(__file__).resolve().parent.parent
KERNEL_SOURCES = ("kernels/*.py", "opcodes.py", "tape_format.py", "tuning.py")


@functools.cache
def kernel_source_paths():
    return tuple(sorted(path for pattern in KERNEL_SOURCES for path in _PACKAGE.glob(pattern)))


def code_of(source):
    """The code in a module's source, without comments, docstrings or layout."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


@functools.cache
def source_digest():
    """The digest of the numba tier's code. Parsing it costs ~60 ms, so the result is
    kept beside the cache, under a key made of the files' sizes and times."""
    paths = kernel_source_paths()
    stamp = hashlib.sha256(numba.__version__.encode())
    for path in paths:
        st = path.stat()
        stamp.update(f"{path}:{st.st_size}:{st.st_mtime_ns};".encode())
    memo = os.path.join(_cache_base(), "digests", stamp.hexdigest()[:24])
    try:
        with open(memo) as f:
            return f.read().strip()
    except OSError:
        pass
    h = hashlib.sha256(numba.__version__.encode())
    for path in paths:
        h.update(str(path.relative_to(_PACKAGE)).encode())
        h.update(code_of(path.read_text()).encode())
    digest = h.hexdigest()[:16]
    try:
        os.makedirs(os.path.dirname(memo), exist_ok=True)
        with open(memo + f".{os.getpid()}", "w") as f:
            f.write(digest)
        os.replace(memo + f".{os.getpid()}", memo)
    except OSError:                            # a read-only cache: computed each time
        pass
    return digest


def _cache_base():
    return os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "autotape")


def cache_dir():
    return os.path.join(_cache_base(), "kernels-" + source_digest())


@contextlib.contextmanager
def kernel_cache_dir():
    """Point numba's cache at the digest directory while kernels are being decorated."""
    saved = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = cache_dir()
    try:
        yield
    finally:
        numba.config.CACHE_DIR = saved


KERNELS = []            # every cached_njit entry point, for ``python -m autotape warmup``


def cached_njit(what=None, **options):
    """``numba.njit(cache=True, error_model="numpy", ...)`` cached under ``cache_dir()``,
    its compiles announced as ``what`` and shared between processes
    (``announce_compiles``)."""
    def decorate(fn):
        with kernel_cache_dir():
            kernel = numba.njit(cache=True, error_model="numpy", nogil=True, **options)(fn)
        KERNELS.append(kernel)
        return announce_compiles(kernel, what)
    return decorate


# ---- compiling once, visibly -------------------------------------------------------------
# A kernel compiles the first time a process calls it with a new signature, unless numba
# finds it in the disk cache. While that takes more than NOTICE_AFTER seconds, one line
# on stderr says so. A process compiling a kernel leaves a marker naming itself under
# ``compiling/``; another process about to compile the same kernel waits for it and
# then loads the result, so concurrent processes (a fresh pool of workers, the
# background warmup) compile each kernel once between them. ``first_compile_hooks`` run
# once, at the first compile that takes a second (warmup.py starts the background
# warmup there: a cold cache).

COMPILED = []                   # (name, seconds) of each compile in this process (not
                                # counting kernels loaded from the disk cache)
first_compile_hooks = []


@contextlib.contextmanager
def compile_notice(what, once=None):
    """While the block runs for more than NOTICE_AFTER seconds, one line on stderr says
    what is being compiled and that it happens once (``once``: how often, where it is
    not once per machine): a first gradient that compiles for half a minute in silence
    looks like a hang."""
    def say():
        print(f"autotape: compiling {what} (" + (once or f"once: later runs load it from "
                                                 f"{cache_dir()}") + ")",
              file=sys.stderr, flush=True)
        while True:
            try:
                hook = first_compile_hooks.pop()   # (two compiles' timers may race here)
            except IndexError:
                break
            hook()
    timer = threading.Timer(NOTICE_AFTER, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _marker(name):
    return os.path.join(cache_dir(), "compiling", name)


def process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                     # (alive, another user's)
        return True
    return True


def _compiling_elsewhere(name):
    """Whether another live process is compiling the kernel ``name`` now."""
    try:
        with open(_marker(name)) as f:
            pid = int(f.read() or 0)
    except (OSError, ValueError):
        return False
    return pid != os.getpid() and process_alive(pid)


@contextlib.contextmanager
def _compiling(name):
    path = _marker(name)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    except OSError:                     # a read-only cache: nobody to tell
        path = None
    try:
        yield
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                os.remove(path)


def on_disk(dispatcher):
    """Whether numba's disk cache holds some compiled version of ``dispatcher``."""
    index = getattr(getattr(getattr(dispatcher, "_cache", None), "_cache_file", None),
                    "_index_path", None)
    return index is not None and os.path.exists(index)


# What each kernel module's compiles are for, in a user's terms (a notice names them)
PURPOSES = {"staging": "reading tapes", "sweep": "gradients", "context": "gradients",
            "scalar": "gradients", "elementwise": "array ops", "vmath": "array ops",
            "reduce": "sums and reductions", "indexing": "indexing",
            "linalg": "numpy.linalg gradients", "blas": "matrix products",
            "program": "compiled functions (at.compile, vmap)",
            "replay": "replays of recorded functions", "loops": "compiled loops",
            "calls": "calls into your numba functions", "active": "at.jit",
            "gpu": "the GPU", "libm": "math functions"}


def _in_user_terms(fn):
    """``name, for what it is used`` (``run_points, for compiled functions ...``)."""
    purpose = PURPOSES.get(fn.__module__.rsplit(".", 1)[-1])
    return f"{fn.__name__}, for {purpose}" if purpose else \
        f"{fn.__module__}.{fn.__qualname__}"


def announce_compiles(dispatcher, what=None):
    """Run the compiles of a numba dispatcher as the section above says. numba reaches
    ``_compile_for_args`` only for a signature it has not loaded yet (from memory or its
    disk cache), so calls that run compiled code pay nothing."""
    compile_for_args = getattr(dispatcher, "_compile_for_args", None)
    if compile_for_args is None:                # (a numba without that hook: no notice)
        return dispatcher
    fn = dispatcher.py_func
    name = f"{fn.__module__}.{fn.__qualname__}"
    what = what or _in_user_terms(fn)

    def compile_and_say(*args, **kws):
        start = time.perf_counter()
        misses = sum(getattr(dispatcher, "_cache_misses", {}).values())
        with compile_notice(what):
            while _compiling_elsewhere(name) and \
                    time.perf_counter() - start < WAIT_FOR_OTHERS:
                time.sleep(0.05)                # then numba loads it from the disk cache
            with _compiling(name):
                result = compile_for_args(*args, **kws)
        if sum(getattr(dispatcher, "_cache_misses", {}).values()) > misses:
            COMPILED.append((name, time.perf_counter() - start))
        return result
    dispatcher._compile_for_args = compile_and_say
    return dispatcher


class KernelCacheLocator(getattr(caching, "_CacheLocator", object)):
    """numba's cache locator for autotape's kernels (see the module's docstring)."""

    def __init__(self, py_file):
        self._py_file = py_file
        self._cache_path = cache_dir()

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return source_digest()

    def get_disambiguator(self):
        return "kernel"                    # (qualnames are unique among the kernels)

    @classmethod
    def from_function(cls, py_func, py_file):
        if pathlib.Path(py_file).resolve() not in kernel_source_paths():
            return None
        locator = cls(py_file)
        try:
            locator.ensure_cache_path()
        except OSError:                    # not writable: numba's own locators decide
            return None
        return locator


def _install_locator():
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if isinstance(classes, list) and hasattr(caching, "_CacheLocator") and \
            KernelCacheLocator not in classes:
        classes.insert(0, KernelCacheLocator)


_install_locator()


# ---- closures in kernels --------------------------------------------------------------------
# numba names a compiled function by its qualified name and a number it counts per
# process. The closures one factory makes share a qualified name (``f.<locals>.loops``),
# so two kernels cached by two processes can hold two different closures under one
# symbol, and a process that loads both links one of them for both: a tanh row's VJP
# computed with exp's partial, silently (seen: Hessian-vector products wrong after the
# sweep's family variants were compiled by different processes). Every closure a kernel
# calls is therefore named after what makes it differ.

def distinct(fn, *parts):
    """``fn`` (a closure a kernel calls) under a qualified name of its own, made of its
    factory's and ``parts`` (what its code depends on besides its argument types)."""
    base = fn.__qualname__.replace(".<locals>.", "_").replace("<lambda>", "lambda")
    fn.__qualname__ = fn.__name__ = "_".join([base] + [str(p).replace("-", "m")
                                                     for p in parts])
    return fn


# ---- naming what numba compiles in ---------------------------------------------------------
# numba compiles the globals and closure values a function reads into its code, as
# constants. A generated module kept on disk is named after a digest of them (jit.py's
# recorders, calls.py's drivers), so that a changed value is a new module, never a
# stale one.

LIBRARIES = ("numba", "numpy", "math", "cmath", "operator", "builtins", "autotape")


def named_value(value, follow=None, depth=0):
    """A value as numba compiles it in, as text; None where it has no such name (an
    object of the user's own, whose state a digest of names cannot follow). numba
    functions and modules outside LIBRARIES are named by ``follow(value)`` where given
    (else a module by its name, and a numba function not at all)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes,
                                           np.number, np.bool_)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return None
        return f"array:{value.dtype.str}:{value.shape}:" + hashlib.sha256(
            np.ascontiguousarray(value).tobytes()).hexdigest()
    if isinstance(value, types.ModuleType):
        if follow is not None and value.__name__.split(".")[0] not in LIBRARIES:
            return follow(value)
        return f"module:{value.__name__}"
    if isinstance(value, numba.core.types.Type):
        return f"numba type:{value!r}"
    if isinstance(value, (tuple, list)):
        items = [named_value(v, follow, depth + 1) for v in value] if depth < 4 else [None]
        return None if None in items else f"{type(value).__name__}:({','.join(items)})"
    if isinstance(value, Dispatcher):
        return None if follow is None else follow(value)
    module = getattr(value, "__module__", None) or ""
    if callable(value) and module.split(".")[0] in LIBRARIES:
        return f"{type(value).__name__}:{module}.{getattr(value, '__qualname__', value)}"
    return None


# ---- generated modules (kernels/loops.py, codegen.py) -----------------------------------------

def generated_file(folder, filename, source):
    """The path of a generated module's file in the kernel cache (``folder`` under it),
    written once (atomically: processes race)."""
    folder = os.path.join(cache_dir(), folder)
    path = os.path.join(folder, filename)
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return path


def import_generated(name, path):
    """The module at ``path`` imported as ``name``, once per process (registered in
    sys.modules: numba's cache finds a function's globals by its module's name)."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module
