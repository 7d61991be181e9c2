"""Users' numba-compiled ops inside a lean program (CALL instructions).

A program whose recording holds ``at.custom_op`` rows made of ``numba.njit`` functions
runs through the one driver (driver.py) over hooks generated per program (the calls'
shapes and functions are constants in their source): the interpreter's ranges between
the calls (``forward_range`` / ``reverse_range``) and, at each call, the user's forward
or VJP on the operands' slots, for every point, with no Python per call.

Compiling it takes seconds, so a helper process compiles it beside the calls
(background.py) into numba's disk cache, and until it is ready the calls run
``run_in_python``: the same ranges and the same user functions, called from Python, so
the same numbers bit for bit. The cached driver is a generated module named after a
digest of its source and of everything numba compiles into it from the user's
functions (``_digest``: their code, options and the values they read), so that a change
to them is a new driver, never a stale one. Where a function reads a value with no such
name (an object, a module of the user's own), the driver is compiled in each process
that runs it, in the foreground.

The user's functions see arrays of their operands' shapes (0-d operands as floats),
the forward returns an array (or a float), the VJP gets ``(inputs tuple, output, g)``
and returns a tuple with one cotangent per input.
"""
import contextlib
import dis
import hashlib
import itertools
import os
import pickle
import sys
import threading
import types as pytypes

import numba
import numpy as np
from numba.core import types
from numba.core.bytecode import FunctionIdentity
from numba.core.caching import NullCache
from numba.core.dispatcher import Dispatcher
from numba.extending import overload

from . import background
from .cache import (LIBRARIES, cache_dir, generated_file, import_generated, named_value,
                    on_disk)
from .driver import compile_steps, points_driver, zero_nothing
from .instruction_format import CALL, I_A, I_N, I_OP, I_OUT, I_P, WIDTH
from .program import forward_range, reverse_range

__all__ = ["driver", "flat"]

WRONG_OUTPUT = ("custom op {name}: forward returned the wrong number of elements (it "
                "must return the output's shape at every call)")
WRONG_COTANGENT = ("custom op {name}: vjp's cotangent for input {j} has the wrong number "
                   "of elements (it must have the input's shape)")


def flat(x):
    """x as a flat float64 array, a copy (a scalar as one element); compiled code only."""
    return np.asarray(x, np.float64).reshape(-1).copy()


# (no reshape and no slice assignment in the driver: numba compiles their error
# messages, string formatting included, ~2 s in every process, into the first function
# that uses them)

@overload(flat)
def _flat(x):
    if isinstance(x, types.Array):
        def copied(x):
            out = np.empty(x.size)
            k = 0
            for v in x.flat:                   # (C order, as reshape(-1))
                out[k] = v
                k += 1
            return out
        return copied
    if isinstance(x, (types.Float, types.Integer)):
        return lambda x: np.full(1, x, np.float64)
    return None


# the driver's hooks (kernels/driver.py): the interpreter's ranges, the users' ops between
_RUN = '''
@numba.njit(inline="always", error_model="numpy", nogil=True)
def program_forward(code, V, C, lane):
    instr, pool, divisor, live = code
    count = np.int64(instr.shape[0])
{forward}
    return 0


@numba.njit(inline="always", error_model="numpy", nogil=True)
def program_reverse(code, V, G, C, j0, j1, o, ran):
    instr, pool, divisor, live = code
    count = np.int64(instr.shape[0])
{reverse}
    return ran


_, drive_chunks = points_driver(program_forward, zero_nothing, program_reverse, __name__,
                               inline=True)


def run(instr, pool, divisor, live, const_slots, const_vals, in_slots, out_slots, X,
        values, jac, want_jac, V, G):
    one = np.int64(1)
    drive_chunks((instr, pool, divisor, live), const_slots, const_vals, in_slots, out_slots,
                 X, values, jac, want_jac, np.int64(0), np.int64(X.shape[0]), one, one, V, G)
'''

_CALL = '''
@numba.njit(error_model="numpy", nogil=True)
def forward_{k}(instr, pool, V, q):
    p, out, n = instr[q, {I_P}], instr[q, {I_OUT}], instr[q, {I_N}]
{load}
    y = flat(user_forward_{k}({args}))
    if y.size != n:
        raise ValueError("{wrong_output}")
    for e in range(n):
        V[out + e] = y[e]


@numba.njit(error_model="numpy", nogil=True)
def vjp_{k}(instr, pool, V, G, q):
    p, out, n = instr[q, {I_P}], instr[q, {I_OUT}], instr[q, {I_N}]
{load}
{output}
{cotangent}
    cots = user_vjp_{k}(({args},), y, g)
{scatter}
'''

# the driver as a module: kept in the kernel cache, named after its digest (``_digest``)
_MODULE = '''"""A custom-op driver (generated: autotape/kernels/calls.py)."""
import numba
import numpy as np

from autotape.kernels.calls import flat
from autotape.kernels.driver import points_driver, zero_nothing
from autotape.kernels.program import forward_range, reverse_range

{users} = None   # (the user's functions: set on import)
'''


def _shaped(name, array, start, shape):
    """Lines binding ``name`` to a copy of ``array[start:]`` of ``shape`` (a float when
    0-d), element by element beyond one axis."""
    if shape == ():
        return [f"    {name} = {array}[{start}]"]
    if len(shape) == 1:
        return [f"    {name} = {array}[{start}:{start} + {shape[0]}].copy()"]
    lines = [f"    {name} = np.empty({tuple(shape)!r})", f"    at = {start}"]
    for axis, size in enumerate(shape):
        lines.append("    " * (axis + 1) + f"for i{axis} in range({size}):")
    index = ", ".join(f"i{axis}" for axis in range(len(shape)))
    lines += ["    " * (len(shape) + 1) + f"{name}[{index}] = {array}[at]",
              "    " * (len(shape) + 1) + "at += 1"]
    return lines


def _operand(j, shape, array="V"):
    """Lines binding x{j} to call operand j (a float when 0-d)."""
    return _shaped(f"x{j}", array, f"pool[p + {1 + 2 * j}]", tuple(shape))


def _source(k, name, in_shapes, out_shape):
    load = "\n".join(line for j, shape in enumerate(in_shapes) for line in _operand(j, shape))
    args = ", ".join(f"x{j}" for j in range(len(in_shapes)))
    output = "\n".join(_shaped("y", "V", "out", tuple(out_shape)))
    cotangent = "\n".join(_shaped("g", "G", "out", tuple(out_shape)))
    name = _quoted(name)
    scatter = []
    for j, shape in enumerate(in_shapes):
        size = int(np.prod(shape, dtype=np.int64))
        scatter += [f"    c{j} = flat(cots[{j}])",
                    f"    if c{j}.size != {size}:",
                    f"        raise ValueError(\"{WRONG_COTANGENT.format(name=name, j=j)}\")",
                    f"    s{j} = pool[p + {1 + 2 * j}]",
                    f"    for e in range({size}):",
                    f"        G[s{j} + e] += c{j}[e]"]
    return _CALL.format(k=k, wrong_output=WRONG_OUTPUT.format(name=name), load=load,
                        args=args, output=output, cotangent=cotangent,
                        scatter="\n".join(scatter), I_P=I_P, I_OUT=I_OUT, I_N=I_N)


def _quoted(name):
    """An op's name as the driver's messages say it (inside a double-quoted literal)."""
    return repr(name)[1:-1].replace('"', "'")


def driver(instr, calls):
    """The driver of a program with CALL instructions. ``calls``: for each CALL (in
    instruction order) ``(forward, vjp, name, operand shapes, output shape)``."""
    at = [int(q) for q in np.nonzero(instr[:, I_OP] == CALL)[0]]
    assert len(at) == len(calls)
    source = [_MODULE.format(users=" = ".join(f"user_{kind}_{k}" for k in range(len(calls))
                                              for kind in ("forward", "vjp")))]
    for k, (forward, vjp, name, in_shapes, out_shape) in enumerate(calls):
        source.append(_source(k, name, in_shapes, out_shape))
    bounds = [-1] + at + [None]
    fwd, rev = [], []
    # (the ranges' bounds as np.int64, not literals: numba would compile the interpreter's
    # forward_range / reverse_range again for every literal, seconds each per program,
    # where these take the int64 ones in the disk cache)
    for k in range(len(at) + 1):
        q0 = f"np.int64({bounds[k] + 1})"
        q1 = "count" if bounds[k + 1] is None else f"np.int64({bounds[k + 1]})"
        fwd.append(f"    forward_range(instr, pool, divisor, V, {q0}, {q1})")
        if k < len(at):
            fwd.append(f"    forward_{k}(instr, pool, V, {at[k]})")
    for k in range(len(at), -1, -1):
        q0 = f"np.int64({bounds[k] + 1})"
        q1 = "count" if bounds[k + 1] is None else f"np.int64({bounds[k + 1]})"
        rev.append(f"    reverse_range(instr, pool, divisor, live[o], V, G, {q0}, {q1})")
        if k:
            rev.append(f"    if live[o, {at[k - 1]}]:")
            rev.append(f"        vjp_{k - 1}(instr, pool, V, G, {at[k - 1]})")
    source.append(_RUN.format(forward="\n".join(fwd), reverse="\n".join(rev)))
    code = "\n".join(source)
    key = (code,) + tuple(id(f) for call in calls for f in call[:2])
    with _lock:
        known = _drivers.get(key)
        if known is None:
            known = _drivers[key] = Driver(code, calls, at)
    return known


_drivers = {}          # (source, the functions' ids) -> Driver, this process only
_lock = threading.Lock()
OPTIONS = dict(error_model="numpy", nogil=True)


class Driver:
    """One program's driver: ``runner`` says what runs its calls now.

    run(instr, pool, divisor, live, const_slots, const_vals, in_slots, out_slots, X,
    values, jac, want_jac, V, G) evaluates the points X one after another (V and G: one
    point's slots): compiled, or ``run_in_python`` until then."""

    def __init__(self, code, calls, at):
        self.code, self.calls, self.at = code, calls, at
        self.names = ", ".join(sorted({call[2] for call in calls}))
        self.digest = _digest(code, calls)
        self._ready = {}            # X's dtype -> the compiled run
        self._lock = threading.Lock()

    def runner(self, args):
        """(run, whether its first call compiles or loads it) for these arguments, or
        None while a helper process compiles it (the calls then take
        ``run_in_python``)."""
        dtype = args[8].dtype                  # (X's: all else has one type)
        run = self._ready.get(dtype)
        if run is not None:
            return run, False
        with self._lock:
            run = self._ready.get(dtype)
            if run is None:
                run = self._compiled(tuple(numba.typeof(a) for a in args))
                if run is None:
                    return None
                self._ready[dtype] = run
            return run, True

    def _compiled(self, signature):
        """The run for this signature: loaded from disk, or compiled in this process;
        None while a helper compiles it."""
        if self.digest is None:
            return _in_memory(self.code, self.calls)
        key = hashlib.sha256(f"{self.digest} {signature}".encode()).hexdigest()[:24]
        try:
            run, job = _cached(key, self.code, self.calls), f"custom-op driver {key}"
        except OSError:                # (a read-only cache)
            return _in_memory(self.code, self.calls)
        if not on_disk(run) and background.enabled():
            was = background.state(job)
            path = os.path.join(cache_dir(), "calls", f"recipe_{key}.pkl")
            if was is None and not self._recipe(path, key, signature):
                return _in_memory(self.code, self.calls)
            if not background.beside(job, was, _HELPER, [path],
                                     f"the driver of custom op(s) {self.names}", False, job,
                                     cache_dir(), meanwhile="its calls run your functions "
                                     "from Python until it is ready"):
                return None
        if not on_disk(run):           # (no helper, or it failed: said on stderr)
            return _in_memory(self.code, self.calls)
        background.settled(job)        # (on disk before its helper has exited)
        return run

    def _recipe(self, path, key, signature):
        """Write what the helper compiles from (``compile_driver``) at ``path``; False
        where the user's functions cannot be pickled."""
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as f:
                pickle.dump(list(sys.path), f)
                pickle.dump({"key": key, "digest": self.digest, "code": self.code,
                             "calls": [call[:2] for call in self.calls],
                             "signature": signature}, f)
            os.replace(tmp, path)
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            with contextlib.suppress(OSError):
                os.remove(tmp)
            return False
        return True

    def run_in_python(self, instr, pool, divisor, live, const_slots, const_vals, in_slots,
                      out_slots, X, values, jac, want_jac, V, G):
        """``run`` by Python: the one driver over the same ranges and user functions
        (``_forward_in_python``, ``_reverse_in_python``), so the same numbers."""
        _DRIVE_IN_PYTHON((self, instr, pool, divisor, live), const_slots, const_vals,
                         in_slots, out_slots, X, values, jac, want_jac, 0, X.shape[0], 1, 1,
                         V, G)

    def _forward(self, k, instr, pool, V, q):
        forward, _, name, in_shapes, out_shape = self.calls[k]
        p, out, n = instr[q, I_P], instr[q, I_OUT], instr[q, I_N]
        y = _flattened(forward(*_operands(instr, pool, V, p, in_shapes)))
        if y.size != n:
            raise ValueError(WRONG_OUTPUT.format(name=_quoted(name)))
        V[out:out + n] = y

    def _vjp(self, k, instr, pool, V, G, q):
        _, vjp, name, in_shapes, out_shape = self.calls[k]
        p, out = instr[q, I_P], instr[q, I_OUT]
        cots = vjp(tuple(_operands(instr, pool, V, p, in_shapes)),
                   _as_shaped(V, out, out_shape), _as_shaped(G, out, out_shape))
        for j, shape in enumerate(in_shapes):
            c, size = _flattened(cots[j]), int(np.prod(shape, dtype=np.int64))
            if c.size != size:
                raise ValueError(WRONG_COTANGENT.format(name=_quoted(name), j=j))
            s = pool[p + 1 + 2 * j]
            G[s:s + size] += c


def _forward_in_python(code, V, C, lane):
    """The compiled ``program_forward`` hook's ranges and calls, from Python."""
    driver, instr, pool, divisor, live = code
    bounds = [-1] + driver.at + [instr.shape[0]]
    for k in range(len(driver.at) + 1):
        forward_range(instr, pool, divisor, V, bounds[k] + 1, bounds[k + 1])
        if k < len(driver.at):
            driver._forward(k, instr, pool, V, driver.at[k])
    return 0


def _reverse_in_python(code, V, G, C, j0, j1, o, ran):
    """The compiled ``program_reverse`` hook's ranges and VJPs, from Python."""
    driver, instr, pool, divisor, live = code
    bounds = [-1] + driver.at + [instr.shape[0]]
    for k in range(len(driver.at), -1, -1):
        reverse_range(instr, pool, divisor, live[o], V, G, bounds[k] + 1, bounds[k + 1])
        if k and live[o, driver.at[k - 1]]:
            driver._vjp(k - 1, instr, pool, V, G, driver.at[k - 1])
    return ran


_DRIVE_IN_PYTHON = points_driver(_forward_in_python, zero_nothing, _reverse_in_python,
                                 in_python=True)[1]


def _operands(instr, pool, V, p, shapes):
    return [_as_shaped(V, pool[p + 1 + 2 * j], shape) for j, shape in enumerate(shapes)]


def _as_shaped(array, start, shape):
    """What the compiled driver passes (``_shaped``): a scalar of array's dtype when
    0-d, a copy of array's dtype of one axis, a float64 array beyond."""
    if shape == ():
        return array[start]
    size = int(np.prod(shape, dtype=np.int64))
    if len(shape) == 1:
        return array[start:start + size].copy()
    return array[start:start + size].astype(np.float64).reshape(shape)


def _flattened(x):
    """``flat`` in Python."""
    return np.array(x, np.float64).reshape(-1)


def _cached(key, code, calls):
    """The driver as a module in the kernel cache, its run kept on disk by numba."""
    name = f"autotape_driver_{key}"
    run = _loaded.get(name)
    if run is None:
        module = import_generated(name, generated_file("calls", f"driver_{key}.py", code))
        _bind(vars(module), calls)
        run = _loaded[name] = numba.njit(cache=True, **OPTIONS)(module.run)
    return run


_loaded = {}              # module name -> its run (one dispatcher per module and process)


def _in_memory(code, calls):
    """The driver compiled in this process only (at its first call)."""
    namespace = {"__name__": "autotape_driver"}
    exec(compile(code, "<autotape custom-op driver>", "exec"), namespace)
    _bind(namespace, calls)
    return numba.njit(**OPTIONS)(namespace["run"])


def _bind(names, calls):
    for k, call in enumerate(calls):
        names[f"user_forward_{k}"], names[f"user_vjp_{k}"] = call[0], call[1]


# ---- naming the user's functions -------------------------------------------------------------

def _digest(code, calls):
    """A digest of the driver's source and of the user's functions as numba compiles
    them; None where one reads a value with no name (``named_value``), or numba's count
    of compiled functions is not where compile_driver expects it."""
    if not isinstance(getattr(FunctionIdentity, "_unique_ids", None), itertools.count):
        return None
    h = hashlib.sha256(code.encode())
    seen = {}
    for call in calls:
        for fn in call[:2]:
            text = _function_text(fn, seen)
            if text is None:
                return None
            h.update(b"\0" + text.encode())
    return h.hexdigest()[:24]


def _function_text(fn, seen):
    """A numba function as text: its code (not its lines), options, and the names and
    values of what it reads (numba functions it calls by their own text)."""
    if not isinstance(fn, Dispatcher) or not isinstance(getattr(fn, "py_func", None),
                                                         pytypes.FunctionType):
        return None
    py = fn.py_func
    own = f"function:{py.__module__}.{py.__qualname__}"
    if id(fn) in seen:                         # (recursion, or a second caller)
        return own
    seen[id(fn)] = fn
    parts = [own, repr(sorted(fn.targetoptions.items())),
             repr(sorted(getattr(fn, "locals", {}).items()))]
    codes = _codes(py.__code__)
    for code in codes:
        parts += [code.co_code.hex(), _constants(code.co_consts), repr(code.co_names),
                  repr(code.co_varnames), repr(code.co_freevars), repr(code.co_cellvars)]
    read = sorted({name for code in codes for name in code.co_names} &
                  py.__globals__.keys())
    values = [(name, py.__globals__[name]) for name in read]
    values += list(zip(py.__code__.co_freevars, [c.cell_contents for c in
                                                  py.__closure__ or ()]))
    values += [("defaults", py.__defaults__), ("kwdefaults", py.__kwdefaults__ and
                                                tuple(sorted(py.__kwdefaults__.items())))]
    scope, dotted = dict(values), {}
    for code in codes:                         # (what it reads from modules of the user's)
        for chain in _attribute_chains(code):
            value = scope.get(chain[0])
            for k, attribute in enumerate(chain[1:], 1):
                if not isinstance(value, pytypes.ModuleType) or \
                        value.__name__.split(".")[0] in LIBRARIES:
                    break
                value = dotted[".".join(chain[:k + 1])] = getattr(value, attribute, None)
    values += sorted(dotted.items(), key=lambda item: item[0])

    def follow(v):
        if isinstance(v, pytypes.ModuleType):
            return f"module:{v.__name__}"      # (its attributes read: named above)
        return _function_text(v, seen)
    for name, value in values:
        text = named_value(value, follow)
        if text is None:
            return None
        parts.append(f"{name}={text}")
    return "\n".join(parts)


def _attribute_chains(code):
    """The dotted names a code object reads from its globals and closure cells
    (``W.step``: ``("W", "step")``), as its bytecode spells them."""
    chains, chain = [], None
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CLASSDEREF"):
            chain = [instruction.argval]
            chains.append(chain)
        elif instruction.opname in ("LOAD_ATTR", "LOAD_METHOD") and chain is not None:
            chain.append(instruction.argval)
        else:
            chain = None
    return [tuple(c) for c in chains if len(c) > 1]


def _codes(code):
    """A code object and those nested in it (comprehensions, closures)."""
    found = [code]
    for c in code.co_consts:
        if isinstance(c, pytypes.CodeType):
            found += _codes(c)
    return found


def _constants(consts):
    """Constants as text that is the same in every process (a frozenset's order is
    not); nested code objects are ``_codes``'s."""
    def text(c):
        if isinstance(c, pytypes.CodeType):
            return f"code:{c.co_name}"
        if isinstance(c, (tuple, frozenset)):
            items = [text(v) for v in c]
            return f"{type(c).__name__}({','.join(sorted(items) if isinstance(c, frozenset) else items)})"
        return f"{type(c).__name__}:{c!r}"
    return text(tuple(consts))


# ---- compiling a driver in a helper process ----------------------------------------------------

_HELPER = "from autotape.kernels.calls import compile_driver\ncompile_driver(sys.argv[1])\n"


def compile_driver(path):
    """A helper process's job: the driver whose recipe (``Driver._recipe``) is at
    ``path``, compiled for its signature into numba's disk cache.

    Everything it compiles gets a name of its own: numba names a compiled function by
    its qualified name and a number it counts from 1 in each process, and a process
    that loads this driver beside its own compile of another function of that name and
    number would link one for both (cache.py's ``distinct``). So the count starts at a
    random number here, and the user's functions are compiled afresh (not loaded from
    their own cache, another process's count)."""
    with open(path, "rb") as f:
        sys.path[:] = pickle.load(f)           # (the user's modules, as the caller finds them)
        recipe = pickle.load(f)
    calls = [tuple(call) for call in recipe["calls"]]
    if _digest(recipe["code"], calls) != recipe["digest"]:
        raise RuntimeError("the custom op's functions here differ from the calling "
                           "process's (a module edited since it was imported?)")
    seen = {}
    for call in calls:
        for fn in call:
            _function_text(fn, seen)
    for fn in seen.values():
        fn._cache = NullCache()
    FunctionIdentity._unique_ids = itertools.count(int.from_bytes(os.urandom(6), "little") << 20)
    _cached(recipe["key"], recipe["code"], calls).compile(recipe["signature"])


def compile_ranges():
    """Compile (or load) the interpreter's ranges that drivers and ``run_in_python``
    call, and the steps of the driver in Python, for float64 programs (the warmup and
    eager_calls.py's helper do)."""
    compile_steps(np.float64)
    instr, pool, V = np.zeros((0, WIDTH), np.int64), np.zeros(0, np.int64), np.zeros(1)
    forward_range(instr, pool, np.zeros(0), V, 0, 0)
    reverse_range(instr, pool, np.zeros(0), np.zeros((1, 0), np.uint8)[0], V, V.copy(), 0, 0)


def call_rows(instr):
    """The tape rows of a program's CALL instructions, in instruction order."""
    return [int(instr[q, I_A]) for q in np.nonzero(instr[:, I_OP] == CALL)[0]]
