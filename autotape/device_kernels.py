"""The kernels of device tensors (device_tensors.py): where their values live, and the
elementwise code generated for them.

Values are CuPy arrays on a GPU: an eager op is an allocation and a launch, and CuPy's
memory pool allocates in ~5 us where numba takes ~90 us, and launches its own kernels in
~10-15 us where numba takes 20-50 us (measured on an H100; docs/guide/gpu.md). numpy's
functions of CuPy's names do the eager forwards. What the op table has and numpy has
not, and the reverse sweep's runs of elementwise rows, are numba.cuda kernels written
here from the table's own per-element math (kernels/elementwise.py: the derivatives the
CPU sweep uses), one launch per run whatever its length. Under
``NUMBA_ENABLE_CUDASIM=1`` the values are numpy arrays that only device tensors hold and
the same kernels run in numba's simulator: CI checks everything but the speed.

A run's kernel reads each operand as a full array (``v[i]``), as one broadcast element
(``v[0]``) or as a number passed to the launch; the key of the compiled kernel is that
shape of the run, never its numbers, so a loop whose constants change compiles once.
"""
import hashlib
import importlib
import os
import re
import sys
import threading

import numpy as np

from . import codegen
from .gpu import cuda_module
from .kernels.elementwise import passes_nothing
from .kernels.loops import binary_adjoints
from .opcodes import ADD, BINARY_LAST, DIV, MUL, SUB, UNARY_LAST, WHERE, opcode_name
from .tuning import DEVICE_THREADS

__all__ = ["SIMULATED", "array_module", "to_device", "to_host", "reverse_code", "reverse_run",
           "forward_kernel", "launch", "launch_params", "FULL", "ONE", "NUMBER", "DEVICE_THREADS"]

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

# how a kernel reads an operand
FULL, ONE, NUMBER = "full", "one", "number"

_found = []


def array_module():
    """The array library of device values: CuPy on a GPU, numpy in the simulator (values
    that stand for device memory), or a RuntimeError that says what to install."""
    if _found:
        return _found[0]
    cuda_module()                           # (numba.cuda usable here, or its error)
    if SIMULATED:
        xp = np
    else:
        try:
            xp = importlib.import_module("cupy")   # (optional: imported on demand)
        except ImportError as e:
            raise RuntimeError(
                "autotape: device tensors keep their values in CuPy arrays: pip install "
                f"cupy-cuda12x (or the CuPy of your CUDA) ({e})") from None
    _found.append(xp)
    return xp


def to_device(a):
    """A device copy of host array a (C order)."""
    xp = array_module()
    return np.array(a, order="C", copy=True) if xp is np else xp.asarray(
        np.ascontiguousarray(a))


def to_host(v):
    """A new host (numpy) array of device value v."""
    xp = array_module()
    return np.array(v, copy=True) if xp is np else xp.asnumpy(v)


def launch(kernel, n, args):
    """kernel over n elements, a thread each: ``args`` are 1-D arrays and numbers."""
    blocks = (n + DEVICE_THREADS - 1) // DEVICE_THREADS
    if array_module() is np or not RAW_LAUNCH[0]:
        kernel[blocks, DEVICE_THREADS](n, *args)
        return
    # numba's launcher reads each CuPy argument's __cuda_array_interface__ and asks the
    # driver about its pointer: 20-30 us an array on an H100, more than the kernel. Here
    # numba's own code for the kernel (its PTX) is loaded into CuPy and launched with
    # numba's argument layout: an array is (meminfo, parent, size, itemsize, data,
    # shape, strides), a number is itself. CuPy launches on its current stream, the one
    # its ops and its memory pool use: an argument Python drops after the launch goes
    # back to the pool in stream order, so no later op reuses it before the kernel ran.
    dtypes = tuple(a.dtype if hasattr(a, "dtype") else float for a in args)
    function = _raw.get((kernel, dtypes))
    if function is None:
        function = _raw_function(kernel, dtypes)
    function((blocks,), (DEVICE_THREADS,), launch_params(n, args))


def launch_params(n, args):
    """A kernel's parameters as numba lays them out (dispatcher._prepare_args): the
    element count, then per 1-D array (meminfo, parent, size, itemsize, data, shape,
    strides), per number the number; every one 8 bytes."""
    params = [np.int64(n)]
    for a in args:
        if hasattr(a, "dtype"):
            params += (_NULL, _NULL, np.int64(a.size), np.int64(a.itemsize), a,
                       np.int64(a.shape[0]), np.int64(a.strides[0]))
        else:
            params.append(np.float64(a))
    return tuple(params)


RAW_LAUNCH = [os.environ.get("AUTOTAPE_DEVICE_LAUNCH", "cupy") != "numba"]
_NULL = np.uint64(0)
_raw = {}                       # (kernel, argument dtypes) -> a CuPy function


def _raw_function(kernel, dtypes):
    """kernel's PTX for this device and these argument types, loaded by CuPy (written
    beside the generated module: compiled once per machine)."""
    from_dtype = importlib.import_module("numba.np.numpy_support").from_dtype
    types = importlib.import_module("numba").types
    xp, cuda = _found[0], cuda_module()
    cc = xp.cuda.Device().compute_capability       # ("90")
    major, minor = int(cc[:-1]), int(cc[-1])
    signature = (types.int64,) + tuple(
        types.float64 if d is float else types.Array(from_dtype(np.dtype(d)), 1, "C")
        for d in dtypes)
    tag = hashlib.sha256(repr((signature, major, minor)).encode()).hexdigest()[:12]
    path = f"{sys.modules[kernel.py_func.__module__].__file__[:-3]}.{tag}.ptx"
    if not os.path.exists(path):
        ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(major, minor))
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(ptx)
        os.replace(tmp, path)
    with open(path) as f:
        entry = re.search(r"\.entry\s+([^\s(]+)", f.read()).group(1)
    function = xp.RawModule(path=path).get_function(entry)
    with _lock:
        _raw[(kernel, dtypes)] = function
    return function


# ---- generated code ----------------------------------------------------------------------

def _read(name, how, k):
    return {FULL: f"{name}{k}[i]", ONE: f"{name}{k}[0]", NUMBER: f"{name}{k}"}[how]


def _step_lines(op, z, operands, adjoint):
    """One row's VJP as lines: ``adjoint(k)`` names value k's adjoint (None: not
    wanted), ``x{k}`` its value."""
    gz = adjoint(z)
    if gz is None or passes_nothing(op):
        return []
    x = operands[0]
    if op == WHERE:
        c, x, y = operands
        gx, gy = adjoint(x), adjoint(y)
        return ([f"if x{c} != 0:", f"    {gx} += {gz}" if gx else "    pass",
                 "else:", f"    {gy} += {gz}" if gy else "    pass"] if gx or gy else [])
    if op <= UNARY_LAST:
        gx = adjoint(x)
        return [f"{gx} += times({op}, {gz}, unary_partial({op}, x{x}, x{z}))"] if gx else []
    y = operands[1]
    gx, gy = adjoint(x), adjoint(y)
    dx, dy = binary_adjoints(op, gz, f"x{x}", f"x{y}", f"x{z}")
    return ([f"{gx} += {dx}"] if gx else []) + ([f"{gy} += {dy}"] if gy else [])


def reverse_code(steps, values, seeds, outs):
    """(source, read): a kernel ``run(n, v.., s0.., o0..)`` sweeping one run of
    elementwise rows back at each element i, and the values its derivatives read (a
    launch passes only those, as ``v``: each argument costs host time). ``steps``:
    (opcode, z, operands) newest first, z and the operands indices of ``values``, each
    read as FULL, ONE or NUMBER; ``seeds``: (value, how) whose adjoint comes in as s_j;
    ``outs``: values whose adjoint goes out as o_j[i]. Adjoints are float64 locals: the
    run's own rows' never touch memory."""
    tracked = {z for _, z, _ in steps} | {k for k, _ in seeds} | set(outs)

    def adjoint(k):
        return f"g{k}" if k in tracked else None
    sweep = []
    for op, z, operands in steps:
        sweep += [f"# {opcode_name(op)}"] + _step_lines(op, z, operands, adjoint)
    read = tuple(sorted({int(k) for k in re.findall(r"\bx(\d+)\b", "\n".join(sweep))}))
    args = (["n"] + [f"v{k}" for k in read] + [f"s{j}" for j in range(len(seeds))]
            + [f"o{j}" for j in range(len(outs))])
    body = ["i = cuda.grid(1)", "if i >= n:", "    return"]
    body += [f"x{k} = {_read('v', values[k], k)}" for k in read]
    body += [f"g{k} = 0.0" for k in sorted(tracked)]
    body += [f"g{k} = {_read('s', how, j)}" for j, (k, how) in enumerate(seeds)]
    body += sweep + [f"o{j}[i] = g{k}" for j, k in enumerate(outs)]
    return _module("run", args, body), read


def forward_source(op, reads):
    """The source of ``run(n, v0[, v1], z)``: op's value at each element (the ops numpy
    has no function for: sigmoid, relu, softplus, erf, ...)."""
    args = ["n"] + [f"v{k}" for k in range(len(reads))] + ["z"]
    xs = [_read("v", how, k) for k, how in enumerate(reads)]
    if op <= UNARY_LAST:
        value = f"unary_value({op}, {xs[0]})"
    else:
        symbol = {ADD: "+", SUB: "-", MUL: "*", DIV: "/"}.get(op)
        value = (f"{xs[0]} {symbol} {xs[1]}" if symbol else
                 f"binary_value({op}, {xs[0]}, {xs[1]})")
    assert op <= BINARY_LAST
    return _module("run", args, ["i = cuda.grid(1)", "if i < n:",
                                 f"    z[i] = {value}  # {opcode_name(op)}"])


def _module(name, args, body):
    return (codegen.HEADERS["cuda"] + f"\n\n@cuda.jit(cache=True)\ndef {name}("
            + ", ".join(args) + "):\n" + "".join(f"    {line}\n" for line in body))


_kernels = {}                   # a run's shape -> its compiled kernel
_lock = threading.Lock()


def _kernel(key, make_source):
    found = _kernels.get(key)
    if found is None:
        source, read = make_source()
        name, _ = codegen.keyed(source)
        found = codegen.module(f"device_{name}", source).run, read
        with _lock:
            _kernels[key] = found
    return found


def reverse_run(steps, values, seeds, outs):
    """(kernel, read): reverse_code's run compiled (once per shape of run), and the
    values a launch passes it, by index."""
    return _kernel(("reverse", steps, values, seeds, outs),
                   lambda: reverse_code(steps, values, seeds, outs))


def forward_kernel(op, reads):
    """The compiled kernel of forward_source."""
    return _kernel(("forward", op, reads), lambda: (forward_source(op, reads), ()))[0]
