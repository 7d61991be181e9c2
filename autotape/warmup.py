"""Compiling autotape's kernels ahead of time, once per machine.

numba compiles a kernel the first time a process needs it and keeps it on disk
(kernels/cache.py); a fresh machine would otherwise compile on first use, family by
family. ``python -m autotape warmup`` compiles every kernel now (for CI images and
containers), printing what it does:

    $ python -m autotape warmup
    autotape warmup: scalar sweep ... 4.1 s
    ...

On a machine with more than one core, the first compile that takes a second on a cold
cache also starts the same warmup in a background process (one per cache, at low
priority), so the kernels a program has not reached yet are ready when it does (on a
2-core VM, a program touching every op family reached its first gradient in 25 s
instead of 34, and its first ``at.compile`` call took 5 s more instead of 15). Set
``AUTOTAPE_BACKGROUND_WARMUP=0`` to keep everything in the foreground. Whatever starts
them, processes share compiles: while one compiles a kernel, another about to compile
the same one waits and loads it (kernels/cache.py).
"""
import atexit
import contextlib
import os
import subprocess
import sys
import time

import numba
import numpy as np

from . import eager_calls, func
from .compile import compile as compile_
from .creation import tensor
from .engine import grad
from .functions.shaping import roll
from .jit import jit as jit_
from .kernels import background, cache, calls
from .kernels.loops import GROUPS as LOOP_GROUPS, compile_around
from .kernels.instruction_format import WIDTH
from .kernels.program import close_slot_gaps, reached_by_any
from .kernels.blas import DGEMM
from .kernels.sweep import (ALL_FAMILIES, ELEMENTWISE, REDUCE, VARIANTS, linalg_row_vjp,
                            sweep_for)
from .linalg import det, inv
from .ops.elementwise import exp, sigmoid, sin, tanh, where
from .parallel import get_num_threads, set_num_threads, usable_cores
from .tape import same_bits
from .tuning import BACKGROUND_MIN_CORES, BYTES_COMPARE_MAX, FUSE_MIN

__all__ = ["warmup"]

BACKGROUND_ENV = "AUTOTAPE_BACKGROUND_WARMUP"


# ---- the programs that reach every kernel (most wanted first: the background runs them
# while a program compiles what it needs in the foreground) --------------------------------

def _scalar():
    x = tensor(0.5, requires_grad=True)
    grad(sin(x) * x + x ** 2, x)


def _linalg():
    # the numpy.linalg VJPs are a kernel of their own: compiled here by a call that finds
    # no gradient to pass (touched all False), so no sweep variant compiles first
    t = det(tensor(np.eye(2), requires_grad=True))
    args, held = t._tape.kernel_args()
    n = t._tape.nrows
    linalg_row_vjp(*args[:7], args[8], np.zeros(1), np.full(n, -1), np.zeros(0, np.int64),
                   np.zeros((1, n), np.bool_), DGEMM, np.int64(t._row), 1, np.int64(0))


def _compiled():
    weights = np.ones(3)                     # (an array read from outside: checked at
    f = compile_(lambda x: (sin(x) * x * weights).sum() + x[0] * x[1], np.ones(3))
    f.grad(np.ones(3))                       # each call, bit for bit)
    f(np.ones(3))
    large = np.ones(BYTES_COMPARE_MAX + 1)     # (a large one's check is a kernel's)
    same_bits(large, large.copy())
    # what a program with a loop finds before writing its body's code, and the slots
    # of the constants its repetitions no longer read left out of its numbering
    # (program.py)
    none = np.zeros(0, np.int64)
    reached_by_any(np.zeros((0, WIDTH), np.int64), none, 1, none)
    close_slot_gaps(np.zeros((0, WIDTH), np.int64), none, none)


def _more_compiled():
    f = compile_(lambda x: (sin(x) * x).sum() + x[0] * x[1], np.ones(3))
    f.jacobian(np.ones(3))
    f.hessian(np.ones(3))
    points = np.ones((8, 3))
    func.vmap(f.grad)(points)
    func.vmap(f)(points)


def _custom_ops():
    # the interpreter's ranges custom-op drivers call between the users' functions
    # (kernels/calls.py; a driver is each program's own, compiled beside its calls)
    calls.compile_ranges()


def _compiled_loops():
    # the interpreter's kernels that run around a compiled loop body, for float64 (the
    # bodies are each program's own, compiled beside its calls: none compiled here
    # would be reused)
    for group in LOOP_GROUPS:
        compile_around(np.dtype(np.float64), group)


def _arrays():
    x = tensor(np.linspace(0.1, 1.0, 12).reshape(3, 4), requires_grad=True)
    a = tensor(np.eye(3) + 0.1, requires_grad=True)
    loss = (exp(x) * x).sum(axis=0).max() + x[1:, ::2].reshape(-1).sum() + (a @ x).sum() \
        + where(x > 0.5, x, 0.0).sum() + roll(x, 1).cumsum(axis=1).prod()
    grad(loss, [x, a])
    jac = func.jacrev(lambda v: tanh(v @ v.T).sum(axis=0))
    jac(tensor(np.ones((3, 2))))


def _elementwise():
    x = tensor(np.linspace(0.1, 1.0, 12), requires_grad=True)
    grad((tanh(x) * x + x ** 2 + sigmoid(x)).sum(), x)
    x = tensor(np.linspace(0.1, 1.0, FUSE_MIN + 1), requires_grad=True)   # a segment
    grad((tanh(x) * x + x ** 2 + sigmoid(x)).sum(), x)


def _replayed():
    f = compile_(lambda x: x.max() + x.prod() + det(x.reshape(2, 2)) + inv(
        x.reshape(2, 2)).sum(), np.array([2.0, 1.0, 1.0, 3.0]))
    f.grad(np.arange(1.0, 5.0))
    g = compile_(lambda x: x.max() * x.cumsum().sum(), np.ones(4))
    g.grad(np.arange(1.0, 5.0))
    g.jacobian(np.arange(1.0, 5.0))


def _on_two_threads(step):
    """Run ``step`` with numba on two threads (nothing on one core: no threaded kernels
    to compile)."""
    saved = get_num_threads()
    try:
        set_num_threads(2)
    except ValueError:
        return
    try:
        step()
    finally:
        set_num_threads(saved)


def _threaded_arrays():
    n = (1 << 19) + 1
    x = tensor(np.linspace(0.0, 1.0, n), requires_grad=True)
    grad((sin(x) * x + tanh(x) * exp(-x) + x ** 2).sum(), x)


def _threaded_points():
    small = compile_(lambda v: (v * v).sum(), np.ones(2))
    func.vmap(small.grad)(np.ones((1 << 16, 2)))
    func.vmap(small.jacfwd)(np.ones((1 << 12, 2)))


def _numba_code():
    # at.jit's sweep (its recorders are compiled per function, per process)
    jit_(numba.njit(lambda x: x * x)).grad(1.0)


# (label, step, group, seconds it compiled for on a cold cache: the 2-core VM, one
# process), most wanted first. A group's kernels share the helpers numba compiles into
# each of them (the sweep variants' VJP families, the lean program's op math), which a
# process compiles once for all of them: ``shares`` keeps a group in one process.
STEPS = [("numpy.linalg sweep", _linalg, "linalg", 16),
         ("compiled programs", _compiled, "programs", 25),
         ("array sweep", _arrays, "sweeps", 31),      # (first: the scalar variant then
         ("scalar sweep", _scalar, "sweeps", 2),      # finds its helpers compiled, 2 s
                                                      # instead of 8)
         ("compiled Jacobians, points", _more_compiled, "programs", 9),
         ("compiled loops", _compiled_loops, "programs", 10),
         ("custom ops' ranges", _custom_ops, "programs", 3),
         ("elementwise sweep", _elementwise, "sweeps", 12),
         ("replayed programs", _replayed, "sweeps", 15),
         ("threaded array kernels", lambda: _on_two_threads(_threaded_arrays), "sweeps", 14),
         ("threaded compiled functions", lambda: _on_two_threads(_threaded_points),
          "programs", 18),
         ("numba code (at.jit)", _numba_code, "sweeps", 2)]


def shares(processes):
    """STEPS split into ``processes`` lists of about equal compile time, longest first:
    whole groups while there are no more processes than groups, else single steps
    (each list in STEPS's order: a step after the ones whose kernels it uses)."""
    groups = {}
    for k, (_, _, group, _) in enumerate(STEPS):
        groups.setdefault(group, []).append(k)
    units = list(groups.values()) if processes <= len(groups) else \
        [[k] for k in range(len(STEPS))]
    loads = [[0, []] for _ in range(processes)]
    for unit in sorted(units, key=lambda ks: -sum(STEPS[k][3] for k in ks)):
        least = min(loads, key=lambda load: load[0])
        least[0] += sum(STEPS[k][3] for k in unit)
        least[1] += unit
    return [sorted(ks) for _, ks in loads if ks]


# the program that compiles each reverse-sweep variant (kernels/sweep.py's VARIANTS): a
# helper process runs it while the first sweeps that need it run on the Python tier
SWEEP_PROGRAMS = {0: _scalar, ELEMENTWISE | REDUCE: _elementwise, ALL_FAMILIES: _arrays}


def sweep_variant(variant):
    """Compile (or load) the reverse sweep for ``variant`` (what the helper started by
    engine.py's Python tier runs)."""
    SWEEP_PROGRAMS[variant]()


def compiled_function_kernels():
    """Compile (or load) what compiled functions' calls need (what the helper started by
    eager_calls.py runs), then leave its mark in the cache."""
    for step in (_compiled, _custom_ops, _more_compiled, _replayed):
        step()
    _on_two_threads(_threaded_points)
    _mark(eager_calls.mark_path())


def _mark(path):
    with contextlib.suppress(OSError), open(path, "w") as f:
        f.write("ok\n")


def _missing():
    """The kernels that are neither in this process nor in the disk cache."""
    for variant in VARIANTS:
        sweep_for(variant)
    return [k.py_func.__qualname__ for k in cache.KERNELS
            if not k.signatures and not cache.on_disk(k)]


def _lock_path():
    return os.path.join(cache.cache_dir(), "warmup.pid")


def _done_path():
    return os.path.join(cache.cache_dir(), "warmed")


@contextlib.contextmanager
def _lock():
    """The cache's warmup lock: yields False when a live process holds it."""
    path = _lock_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                with open(path) as f:
                    pid = int(f.read() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and cache.process_alive(pid):
                yield False
                return
            with contextlib.suppress(OSError):   # a warmup that died: take over
                os.remove(path)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        try:
            yield True
        finally:
            with contextlib.suppress(OSError):
                os.remove(path)
        return
    yield False


def warmup(quiet=False, processes=None):
    """Compile (or load) every kernel autotape has now, so that no later process
    compiles, in ``processes`` processes at once (default: one per usable core).
    Returns the names of kernels left uncompiled (none, normally).

    >>> import autotape.warmup
    >>> autotape.warmup.warmup(quiet=True)
    []
    """
    def say(text):
        if not quiet:
            print(text, file=sys.stderr, flush=True)

    with _lock() as mine:
        if not mine:
            say("autotape warmup: another process is warming this cache; waiting for it")
            while os.path.exists(_lock_path()):
                time.sleep(0.2)
        parts = shares(processes or max(1, min(usable_cores(), len(STEPS))))
        commands = [_warmup_process(["--steps", ",".join(map(str, part))] +
                                    (["--quiet"] if quiet else [])) for part in parts[1:]]
        others = [subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
                  for argv, env in commands]
        try:
            run_steps(parts[0], say)
        finally:
            for process in others:
                process.wait()
        missing = _missing()
        if not missing:
            _mark(eager_calls.mark_path())
            _mark(_done_path())
        say(f"autotape warmup: done; kernels cached in {cache.cache_dir()}")
        return missing


def run_steps(numbers, say):
    """The warmup's steps ``numbers`` (indices into STEPS), in this process."""
    for k in numbers:
        label, step = STEPS[k][:2]
        start = time.perf_counter()
        with background.here():
            step()
        say(f"autotape warmup: {label} ... {time.perf_counter() - start:.1f} s")


def _warmup_process(args):
    """(argv, env) of ``python -m autotape warmup`` + args, importing this autotape
    (background.python_here), not starting a warmup of its own."""
    argv, env = background.python_here("from autotape.warmup import main\n"
                                       "sys.exit(main(sys.argv[1:]))\n", ["warmup", *args])
    env[BACKGROUND_ENV] = "0"
    return argv, env


def _start_background():
    """Start ``python -m autotape warmup --background`` once per cold cache (see the
    module's docstring)."""
    wanted = os.environ.get(BACKGROUND_ENV, "")
    if wanted == "0" or (wanted != "1" and usable_cores() < BACKGROUND_MIN_CORES) or \
            not sys.executable or os.path.exists(_done_path()) or \
            os.path.exists(_lock_path()):
        return
    argv, env = _warmup_process(["--background"])
    with contextlib.suppress(OSError):
        _background.append(subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True))
        print("autotape: compiling the other kernels in a background process while this "
              "program runs (what it compiles is kept for later runs)",
              file=sys.stderr, flush=True)


_background = []                 # the warmup started by this process


@atexit.register
def _stop_background():
    """Nothing of autotape's outlives the program: the warmup stops with it (the kernels
    it compiled so far are on disk; a later program's warmup goes on from there)."""
    for process in _background:
        if process.poll() is None:
            with contextlib.suppress(OSError):
                process.terminate()


cache.first_compile_hooks.append(_start_background)


def main(argv):
    """``python -m autotape warmup [--background]`` (and ``--steps i,j [--quiet]``:
    one process's share of a warmup)."""
    if argv[:2] == ["warmup", "--steps"] and len(argv) in (3, 4) and argv[4:] in (
            [], ["--quiet"]):
        quiet = argv[3:] == ["--quiet"]
        run_steps([int(k) for k in argv[2].split(",")],
                  lambda text: quiet or print(text, file=sys.stderr, flush=True))
        return 0
    if argv[:1] != ["warmup"] or len(argv) > 2 or argv[1:] not in ([], ["--background"]):
        print("usage: python -m autotape warmup", file=sys.stderr)
        return 2
    background_ = argv[1:] == ["--background"]
    if background_:
        with contextlib.suppress(OSError):
            os.nice(19)                      # the user's own work comes first, then
                                             # the helpers compiling what it waits for
    missing = warmup(quiet=background_, processes=1 if background_ else None)
    if missing:
        print(f"autotape warmup: not compiled: {', '.join(missing)}", file=sys.stderr)
    return 0
