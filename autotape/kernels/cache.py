"""Where numba caches autotape's compiled kernels.

numba keys a cached function on its own source file only: editing a helper in another
module (an op's derivative in kernels/elementwise.py) would leave a stale kernel on
disk. So the kernels are cached in a directory named after a digest of the numba tier,
every source that is compiled into them (``KERNEL_SOURCES``: this folder, the opcodes
and the tape format), plus the numba version. The digest is of the code, not the text:
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
import os
import pathlib

import numba
from numba.core import caching

_PACKAGE = pathlib.Path(__file__).resolve().parent.parent
KERNEL_SOURCES = ("kernels/*.py", "opcodes.py", "tape_format.py")


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


def cached_njit(**options):
    """``numba.njit(cache=True, error_model="numpy", ...)`` cached under ``cache_dir()``."""
    def decorate(fn):
        with kernel_cache_dir():
            return numba.njit(cache=True, error_model="numpy", nogil=True, **options)(fn)
    return decorate


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
