"""What is per thread, as in torch: grad mode, the tape being recorded, the compile
trace being recorded, and the scratch space of compiled sweeps and programs.

Every op reads grad mode and its tape, so the four live together on one plain object
per thread: an op pays for one ``threading.local`` read (``here()``), then slot reads.
A tape records the ThreadState that owns it (tape.py); only that thread appends to it,
so no row is ever written by two threads.
"""
import threading


class ThreadState:
    """One thread's recording state (see the module's docstring)."""
    __slots__ = ("grad_enabled", "tape", "trace", "scratch", "program_scratch",
                 "jit_tape", "jit_sweep", "redirect", "eager_call", "accumulating",
                 "__weakref__")

    def __init__(self):
        self.grad_enabled = True
        self.tape = None          # the open tape this thread records on (tape.py)
        self.trace = None         # the compile Trace being recorded (guards.py)
        self.scratch = None       # the adjoint scratch of this thread's sweeps (executor.py)
        self.program_scratch = None   # values and adjoints of lean programs (program.py)
        self.jit_tape = None      # the tape buffers of at.jit recordings (jit.py)
        self.jit_sweep = None     # and their sweeps' adjoints
        self.redirect = None      # checkpoint's map from a tensor read from outside the
                                  # tape to the one recorded instead (custom.py)
        self.eager_call = False   # a compiled function's call runs f eagerly: its
                                  # recording warned of what f reads (eager_calls.py)
        self.accumulating = False  # a backward() is sweeping (not a grad()): ops whose
                                   # gradient goes elsewhere accumulate it (device tensors
                                   # moved to the CPU: device_tensors.py)


class _PerThread(threading.local):
    def __init__(self):
        self.state = ThreadState()


per_thread = _PerThread()          # the 0-d op recorders read per_thread.state inline


def here():
    """The calling thread's ThreadState."""
    return per_thread.state
