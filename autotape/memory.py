"""Keep freed memory for reuse, as torch's allocator does.

Eager array code allocates a result per op and frees it soon after; with glibc's
defaults a large freed block goes back to the system and the next one of the same size
is faulted in again page by page, which costs more than the arithmetic (a 1M-element
multiply: 1.1 ms instead of 0.35 ms here). At import autotape asks glibc to keep up to
KEEP_BYTES of freed heap and to serve blocks up to MMAP_BYTES from the heap. The cost:
the process's resident memory does not shrink after a peak (up to KEEP_BYTES). Set
AUTOTAPE_KEEP_FREED_MEMORY=0 before importing autotape to keep glibc's defaults.
Other platforms and C libraries are left alone.
"""
import ctypes
import ctypes.util
import os
import sys

KEEP_BYTES = 512 << 20
MMAP_BYTES = 32 << 20          # glibc's largest mmap threshold on 64-bit systems
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory():
    """Apply the policy above once; returns whether glibc accepted it."""
    if os.environ.get("AUTOTAPE_KEEP_FREED_MEMORY", "1") == "0" or \
            not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):          # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES))


KEPT = keep_freed_memory()
