"""Where numba caches autotape's compiled kernels.

numba keys a cached function on its own source file only: editing a helper in another
module (an op's derivative in ``autotape/ops``) would leave a stale kernel on disk. So
the kernels are cached in a directory named after a digest of every source file that
is compiled into them, plus the numba version; any edit gives a fresh directory.
"""
import contextlib
import hashlib
import os
import pathlib

import numba

_PACKAGE = pathlib.Path(__file__).resolve().parent.parent
_KERNEL_SOURCES = ("ops", "kernels")


def source_digest():
    h = hashlib.sha256(numba.__version__.encode())
    for folder in _KERNEL_SOURCES:
        for path in sorted((_PACKAGE / folder).glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_dir():
    base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "autotape")
    return os.path.join(base, "kernels-" + source_digest())


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
