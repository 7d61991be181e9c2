"""Keep freed memory for reuse while the program is busy, as torch's allocator does, and
give it back once it is idle.

Eager array code allocates a result per op and frees it soon after; with glibc's
defaults a large freed block goes back to the system and the next one of the same size
is faulted in again page by page, which costs more than the arithmetic (a 1M-element
multiply: 1.1 ms instead of 0.35 ms here). At import autotape asks glibc to keep up to
KEEP_BYTES of freed heap and to serve blocks up to MMAP_BYTES from the heap, and a
daemon thread gives the kept memory back (``malloc_trim``, after dropping the large
sweep scratch that threads keep, ``on_idle``) once no sweep has run for IDLE_SECONDS,
so the resident size returns to its baseline after a large backward is dropped. Blocks
over MMAP_BYTES always come fresh from the system: the sweep's scratch is kept by the
executor for that reason. Set AUTOTAPE_KEEP_FREED_MEMORY=0 before importing autotape to keep glibc's
defaults. Other platforms and C libraries are left alone.
"""
import ctypes
import ctypes.util
import os
import sys
import threading
import time
from .tuning import IDLE_SECONDS, KEEP_BYTES, MMAP_BYTES

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_last_busy = [0.0, True]       # [time of the last sweep, trimmed since]
_when_idle = []                # what drops kept buffers (executor.py's large scratch)
_LIBC = [None]


def on_idle(release):
    """Call ``release()`` when the program goes idle, before memory is given back."""
    _when_idle.append(release)


def _libc():
    if os.environ.get("AUTOTAPE_KEEP_FREED_MEMORY", "1") == "0" or \
            not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], \
            ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], \
            ctypes.c_int
    except (OSError, AttributeError):          # not glibc (musl has no mallopt)
        return None
    return libc


def busy():
    """Note that memory is in use (each sweep calls this): the trim waits."""
    _last_busy[0] = time.monotonic()
    _last_busy[1] = False


def give_back():
    """Drop kept buffers and return freed memory to the system now (what the idle
    thread does after IDLE_SECONDS without a sweep)."""
    for release in _when_idle:
        release()
    if _LIBC[0] is not None:
        _LIBC[0].malloc_trim(0)


def _give_back_when_idle():
    while True:
        time.sleep(IDLE_SECONDS / 2)
        if not _last_busy[1] and time.monotonic() - _last_busy[0] >= IDLE_SECONDS:
            _last_busy[1] = True
            give_back()


def keep_freed_memory():
    """Apply the policy above once; returns whether it is in force."""
    libc = _libc()
    if libc is None or not (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES) and
                            libc.mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES)):
        return False
    _LIBC[0] = libc
    threading.Thread(target=_give_back_when_idle, name="autotape-trim", daemon=True).start()
    return True


KEPT = keep_freed_memory()
