"""A compiled function as bytes: f itself (by pickle, else cloudpickle) and the
recordings that run as lean programs, which need no tape on the other side.

>>> pickled(len)[1] is None
True
"""
import pickle

try:
    import cloudpickle                         # (pickles lambdas and closures)
except ImportError:
    cloudpickle = None

from .recording import Recording


def pickled(f):
    """(f as bytes, None), or (None, why not): by pickle, else by cloudpickle where it
    is installed (a lambda or a closure; what it writes loads with pickle.loads)."""
    try:
        return pickle.dumps(f), None
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
    if cloudpickle is None:
        return None, why
    try:
        return cloudpickle.dumps(f), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


LEAN_FIELDS = ("lean", "outputs", "grads", "shapes", "sizes", "total_in", "rebuild")


def lean_state(p):
    """What a recording that runs as a lean program needs on the other side."""
    return {name: getattr(p, name) for name in LEAN_FIELDS}


def unpickled_program(fields):
    """A program that runs only as its lean form (unpickled: no tape, no guards)."""
    p = Recording()
    p.tape, p.twins, p.executor, p.guards, p.plans, p.fused = None, [], None, [], {}, False
    p.wide = p.pending = p.tape_path = p.calls = False   # (it has only its lean form)
    p.captured = ()                            # (what f read stayed on the other side)
    p.inputs = p.input_rows = None
    for name, value in fields.items():
        setattr(p, name, value)
    return p
