"""Compiling beside the calls.

Generated code (a loop body: kernels/loops.py) takes seconds to compile. Rather than
make a call wait, the caller submits a job: a helper process imports the generated
module and compiles it into numba's disk cache, while the calls go on running the
interpreter. A later call polls (one ``waitpid``), and once the helper has
exited the caller loads the code from disk (tens of ms) and switches to it.

One helper runs at a time (the others queue): a machine's other core does the
compiling, not all of them. It runs at the calls' own priority: the calls are what wait
for it, 2-4x slower on the interpreter. Where the calls fill every core (a dask worker
per core, vmap's threads), a helper at low priority (nice 10) had a tenth of a core: a
2-worker ensemble's whole-program code took 27 s to compile and 35 rounds ran on the
interpreter; at their priority, 9 s and 8 rounds (1.5x slower while it compiled), and
40 rounds took 19 s instead of 29. Helpers are stopped when the program exits, so nothing of
autotape's outlives it. ``AUTOTAPE_BACKGROUND_COMPILE=0`` compiles in the calling
process instead, as numba does.

One helper per job on the machine, too: processes that want the same thing compiled at
once (dask's workers, a pool, a script and its warmup) would otherwise each start a
helper for it, on the cores their calls need. A helper holds a lock on a claim file
named after its job (under the cache's ``helpers/``) for as long as it lives, and
writes ``done`` in it when it has compiled all; another process finding the claim held
waits for it (ELSEWHERE: its calls go on meanwhile), then takes ``done`` as done and
anything else (that helper failed, or was stopped with its program) as its own to
compile. The kernel frees a lock when its holder exits, however it exits.
"""
import atexit
import collections
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading

try:
    import fcntl
except ImportError:                  # (not POSIX: no claims; each process compiles its own)
    fcntl = None

from .cache import cache_dir

ENABLED_ENV = "AUTOTAPE_BACKGROUND_COMPILE"

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
ELSEWHERE = "elsewhere"                # another process's helper compiles it (see above)
CLAIM_ENV = "AUTOTAPE_HELPER_CLAIM"    # a helper's claim file descriptor


def enabled():
    """Whether code is compiled beside the calls (the default) or in the calling process
    (``AUTOTAPE_BACKGROUND_COMPILE=0``, or inside ``here()``)."""
    return os.environ.get(ENABLED_ENV, "1") != "0" and bool(sys.executable) and not _here


_here = []


@contextlib.contextmanager
def here():
    """Compile in this process meanwhile (``python -m autotape warmup`` does: it is
    the compiling)."""
    _here.append(True)
    try:
        yield
    finally:
        _here.pop()


class Job:
    """One compile in a helper process: ``code`` is Python source run there with
    ``args`` as ``sys.argv[1:]``; ``key`` names it (and its claim, see above)."""
    __slots__ = ("key", "code", "args", "what", "state", "process", "log", "error")

    def __init__(self, key, code, args, what):
        self.key, self.code, self.args, self.what = key, code, list(args), what
        self.state, self.process, self.log, self.error = QUEUED, None, None, None


_jobs = {}                        # key -> Job, for the life of the process
_queue = collections.deque()      # keys of queued jobs, oldest first
_lock = threading.Lock()


def _in_forked_child():
    """A forked child has its own queue: the parent's helpers are not its children (it
    could neither wait for one nor should its exit stop one), and a lock some other
    thread of the parent held at the fork would stay held here forever."""
    global _lock
    _lock = threading.Lock()
    _jobs.clear()
    _queue.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)


def submit(key, code, args, what):
    """Start compiling ``key`` beside the calls (queued behind a running helper) unless
    it already is; returns its state."""
    with _lock:
        job = _jobs.get(key)
        if job is None:
            job = _jobs[key] = Job(key, code, args, what)
            _queue.append(key)
        _pump()
        return job.state


def state(key):
    """QUEUED, RUNNING, DONE or FAILED; None for a key never submitted. Polling is what
    moves the queue on."""
    with _lock:
        _pump()
        job = _jobs.get(key)
        return None if job is None else job.state


def wait(key):
    """Block until ``key``'s helper has finished; returns DONE or FAILED."""
    while True:
        with _lock:
            _pump()
            job = _jobs[key]
            if job.state in (DONE, FAILED):
                return job.state
            process, elsewhere = job.process, job.state == ELSEWHERE
        if elsewhere:
            _wait_for_claim(key)
        elif process is not None:
            process.wait()
        else:                             # (queued: another job's helper runs first)
            with _lock:
                running = [j.process for j in _jobs.values() if j.state == RUNNING]
            for p in running:
                p.wait()


def beside(key, was, code, args, what, wait_for, told, cache,
           meanwhile="which run on the interpreter until it is ready"):
    """A caller's compile of ``key`` beside its calls: submitted unless it already was
    (``was``: its state before, from ``state``), announced once per ``told`` on stderr
    (``meanwhile``: what the calls do until then). False while it is not ready and the
    caller goes on without it (``wait_for`` false); True once the caller may load it:
    done, or failed (said on stderr: the caller then compiles it itself).

    The line does not say "once": a program that ends before the helper is done stops
    it, and the next one starts it again."""
    if was is None:
        submit(key, code, args, what)
        if told not in _told:
            _told.add(told)
            print(f"autotape: compiling {what} beside the calls, {meanwhile} (kept in "
                  f"{cache} for later runs once compiled)", file=sys.stderr, flush=True)
    if not wait_for and was not in (DONE, FAILED):
        return False
    if wait(key) == FAILED and key not in _failed:
        _failed.add(key)
        print(f"autotape: compiling {what} beside the calls failed, so this process "
              f"compiles it. The helper said:\n{error(key)}", file=sys.stderr, flush=True)
    return True


def settled(key):
    """Stop ``key``'s helper quietly: what it compiles is on disk already (its own result,
    found before the helper exited, or another process's)."""
    with _lock:
        job = _jobs.get(key)
        if job is None or job.state in (DONE, FAILED):
            return
        if job.state == QUEUED:
            _queue.remove(key)
        elif job.state == RUNNING:
            with contextlib.suppress(OSError):
                job.process.kill()
                job.process.wait()
            with contextlib.suppress(OSError):
                job.log.close()
            job.process = job.log = None
        job.state = DONE
        _pump()


_told = set()            # announcements made (one per compiled thing)
_failed = set()          # failures told


def error(key):
    """The last lines a failed helper printed."""
    job = _jobs.get(key)
    return None if job is None else job.error


def _pump():
    """Reap a finished helper, look again at jobs compiled elsewhere, and start the next
    queued one (with _lock held)."""
    for job in _jobs.values():
        if job.state == RUNNING and job.process.poll() is not None:
            _finish(job)
        elif job.state == ELSEWHERE:
            claim = _claim(job.key)
            if claim is not None:            # (that helper has exited)
                done = claim >= 0 and os.pread(claim, 4, 0) == b"done"
                if claim >= 0:
                    os.close(claim)
                if done:
                    job.state = DONE
                else:                        # (it failed or was stopped: compile here)
                    job.state = QUEUED
                    _queue.appendleft(job.key)
    if any(job.state == RUNNING for job in _jobs.values()):
        return
    while _queue:
        job = _jobs[_queue.popleft()]
        if _start(job):
            return


# A helper imports modules by this process's search path, not its own: ``python -c`` puts
# its working directory first, where another checkout of autotape would shadow the one
# this process runs, and the helper would compile this process's generated code against
# that one's kernels into the cache this process then loads (the warmup's processes
# too: they would warm the other one's cache).
_SAME_PATH = ("import json, os, sys\nsys.path[:] = json.loads(os.environ.pop(%r))\n"
              % "AUTOTAPE_HELPER_SYS_PATH")


# the last line of a helper that has compiled all: ``done`` in its claim
_DONE = ("_claim = int(os.environ.get(%r, '-1'))\nif _claim >= 0:\n"
         "    os.pwrite(_claim, b'done', 0)\n" % CLAIM_ENV)


def python_here(code, args=()):
    """(argv, env) of a Python process running ``code`` with ``args`` as its
    ``sys.argv[1:]``, importing by this process's search path (see above).

    >>> argv, env = python_here("print(sys.argv[1])", ["hello"])
    >>> argv[1:2] == ["-c"] and argv[-1] == "hello"
    True
    """
    env = dict(os.environ, AUTOTAPE_HELPER_SYS_PATH=json.dumps(sys.path))
    return [sys.executable, "-c", _SAME_PATH + code, *args], env


def _start(job):
    """Start job's helper; False where it does not run here (failed to start, or
    another process's helper has it: ELSEWHERE)."""
    claim = _claim(job.key)
    if claim is None:
        job.state = ELSEWHERE
        return False
    argv, env = python_here(job.code + "\n" + _DONE, job.args)
    env.update({"AUTOTAPE_BACKGROUND_WARMUP": "0", ENABLED_ENV: "0", CLAIM_ENV: str(claim)})
    try:
        if claim >= 0:
            os.ftruncate(claim, 0)
        job.log = tempfile.TemporaryFile()
        job.process = subprocess.Popen(argv, env=env,
                                       stdin=subprocess.DEVNULL, stdout=job.log,
                                       stderr=subprocess.STDOUT,
                                       pass_fds=(claim,) if claim >= 0 else ())
    except OSError as e:
        job.state, job.error = FAILED, f"could not start a helper process: {e}"
        return False
    finally:
        if claim >= 0:               # (the helper holds the lock now, for its life)
            os.close(claim)
    job.state = RUNNING
    return True


def _claim_path(key):
    return os.path.join(cache_dir(), "helpers",
                        hashlib.sha256(key.encode()).hexdigest()[:32])


def _claim(key):
    """The claim file of ``key``, opened and locked: its descriptor; None where another
    process's helper holds it; -1 where claims cannot be made here (no fcntl, a cache
    that is not writable or does not lock): this process compiles as if alone."""
    if fcntl is None:
        return -1
    try:
        path = _claim_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        return -1
    return fd


def _wait_for_claim(key):
    """Block until the helper that holds key's claim (another process's) exits."""
    with contextlib.suppress(OSError):
        fd = os.open(_claim_path(key), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        finally:
            os.close(fd)


def _finish(job):
    job.state = DONE if job.process.returncode == 0 else FAILED
    if job.state == FAILED:
        with contextlib.suppress(OSError, ValueError):
            job.log.seek(0)
            lines = job.log.read().decode(errors="replace").strip().splitlines()
            job.error = "\n".join(lines[-12:]) or f"exit status {job.process.returncode}"
    with contextlib.suppress(OSError):
        job.log.close()
    job.process = job.log = None


@atexit.register
def _stop_helpers():
    """Nothing of autotape's runs after the program: a helper still compiling is
    stopped, and one line says so. What it compiled so far is on disk, kernel by
    kernel; the next process's helper goes on from there."""
    with _lock:
        stopped = [job.what for job in _jobs.values() if job.state in (QUEUED, RUNNING)]
        # (a job ELSEWHERE goes on in its own process: nothing of this one is stopped)
        _queue.clear()
        for job in _jobs.values():
            if job.state == RUNNING:
                with contextlib.suppress(OSError):
                    job.process.kill()
                    job.process.wait()
            if job.state in (QUEUED, RUNNING):
                job.state = FAILED
    if stopped:
        with contextlib.suppress(Exception):       # (stderr may be closed by now)
            print(f"autotape: the program ended before compiling {' and '.join(stopped)} "
                  "was done; the next run goes on from there (`python -m autotape "
                  "warmup` compiles everything now)", file=sys.stderr, flush=True)
