"""Compile autotape's generated CUDA kernels for a few programs to PTX and assemble them
with ptxas -v: registers per thread and spill bytes, as JSON on stdout. Needs numba-cuda
with NVVM (the ``nvidia-cuda-nvcc-cu12`` wheel, which also holds ptxas), no GPU or
driver. Run it without NUMBA_ENABLE_CUDASIM (the simulator compiles nothing):

    python tests/ptx_report.py            # tests/test_gpu_ptx.py runs it so
"""
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))

import autotape as at  # noqa: E402
import workloads as W  # noqa: E402
from autotape import codegen  # noqa: E402

ARCHES = ((8, 0), (9, 0))


def programs():
    """name -> (f, x): the pendulum ensemble of the benchmarks and smaller shapes."""
    return {
        "driven_pendulum_200": (lambda t: W.driven_pendulum_at(t, 200), W.thetas(1)[0]),
        "spring_chain": (_chain, np.array([1.0, 2.0, 0.5])),
        "no_loop": (lambda t: at.stack([at.sin(t[0]) * t[1], at.exp(t).sum()]), np.ones(3)),
    }


def _chain(k):
    """Arrays in the loop: slices and a concatenation (gathers), a sum (a scatter)."""
    x = at.tensor(np.linspace(0.0, 1.0, 6)) * k[0]
    v = x * 0.0
    for _ in range(50):
        v = v + 0.01 * (at.concatenate([x[1:] - x[:-1], x[:1] * 0.0]) * k[1] - x * k[2])
        x = x + 0.01 * v
    return (x * x).sum() + v.mean()


def ptxas():
    """The ptxas of NVIDIA's nvcc wheel, or one on PATH, or None."""
    spec = importlib.util.find_spec("nvidia.cuda_nvcc")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            path = Path(folder) / "bin" / "ptxas"
            if path.exists():
                return str(path)
    return shutil.which("ptxas")


def _types():
    from numba import types
    f64 = types.float64

    def array(n):
        return types.Array(f64, n, "C")
    return {"run_values": (array(2), array(2), array(2)),
            "run_reverse": (array(2), array(2), array(2), array(3), array(1), array(1)),
            "run_tangent": (array(2), array(2), array(2), array(2), array(3))}


def _assemble(tool, ptx, cc):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        done = subprocess.run([tool, f"-arch=sm_{cc[0]}{cc[1]}", "-v", path, "-o",
                               os.path.join(folder, "kernel.cubin")],
                              capture_output=True, text=True, check=True)
    text = done.stderr + done.stdout
    registers = [int(w.split()[0]) for w in text.split("Used ")[1:]]
    spills = [int(part.split()[0]) for part in
              text.replace("bytes spill stores", "SPILL").split(", ")
              if part.endswith("SPILL")]
    return {"registers": max(registers), "spill_store_bytes": max(spills or [0]),
            "ptxas": text.strip().splitlines()[-1]}


def _device_functions_for(cuda, cc):
    """numba-cuda compiles device functions for the current device's capability; with
    no driver there is none, so name the target's."""
    dispatcher = importlib.import_module(cuda.jit.__module__.rsplit(".", 1)[0] + ".dispatcher")
    if not cuda.is_available() and hasattr(dispatcher, "get_current_device"):
        class Target:
            compute_capability = cc
        dispatcher.get_current_device = Target


def report():
    from numba import cuda
    tool = ptxas()
    sigs = _types()
    out = {"ptxas": tool, "kernels": {}}
    for name, (f, x) in programs().items():
        c = at.compile(f, x)
        plan = codegen.plan(c._lean("value", [x]).lean)
        lanes = x.size
        for source in (codegen.reverse_source(plan),
                       codegen.tangent_source(plan, lanes)):
            module = codegen.module(*source)
            for kernel in ("run_values", "run_reverse", "run_tangent"):
                if not hasattr(module, kernel):
                    continue
                for cc in ARCHES:
                    _device_functions_for(cuda, cc)
                    ptx, _ = cuda.compile_ptx(getattr(module, kernel).py_func, sigs[kernel],
                                              cc=cc)
                    entry = {"ptx_lines": ptx.count("\n"),
                             "target": f"sm_{cc[0]}{cc[1]}" in ptx}
                    if tool is not None:
                        entry.update(_assemble(tool, ptx, cc))
                    out["kernels"][f"{name}.{kernel}.sm_{cc[0]}{cc[1]}"] = entry
        out.setdefault("bytes_per_point", {})[name] = plan.bytes_per_point()
        out.setdefault("carried", {})[name] = len(plan.carried)
        out.setdefault("stride", {})[name] = plan.stride_for("cuda") if plan.loop else None
    for cc in ARCHES:                 # the interpreter kernel (kernels/gpu.py)
        _device_functions_for(cuda, cc)
        kernels = importlib.import_module("autotape.kernels.gpu")
        ptx, _ = cuda.compile_ptx(kernels.run_points_cuda.py_func, _interpreter_types(), cc=cc)
        entry = {"ptx_lines": ptx.count("\n"), "target": f"sm_{cc[0]}{cc[1]}" in ptx}
        if tool is not None:
            entry.update(_assemble(tool, ptx, cc))
        out["kernels"][f"interpreter.run_points_cuda.sm_{cc[0]}{cc[1]}"] = entry
    from numba import types
    from autotape import device_kernels as dk
    for name, (source, sig) in device_tensor_kernels().items():
        module = codegen.module(f"device_{codegen.keyed(source)[0]}", source)
        for cc in ARCHES:
            _device_functions_for(cuda, cc)
            ptx, _ = cuda.compile_ptx(module.run.py_func, sig, cc=cc)
            entry = {"ptx_lines": ptx.count("\n"), "target": f"sm_{cc[0]}{cc[1]}" in ptx}
            head = ptx[ptx.index(".entry"):ptx.index(")", ptx.index(".entry"))]
            entry["params"] = head.count(".param .")
            entry["param_bytes"] = sorted({p.split()[0] for p in head.split(".param .")[1:]})
            if tool is not None:
                entry.update(_assemble(tool, ptx, cc))
            out["kernels"][f"device_tensors.{name}.sm_{cc[0]}{cc[1]}"] = entry
        out.setdefault("launch_params", {})[name] = len(dk.launch_params(
            1, [np.zeros(1) if t != types.float64 else 0.5 for t in sig[1:]]))
    return out


def device_tensor_kernels():
    """name -> (source, argument types): the kernels device tensors generate for the
    eager benchmark's function, sin(x) * x + x ** 2 / (1 + exp(-x)), swept back from its
    sum (one kernel for the whole run), and a forward numpy has no function for."""
    from numba import types
    from autotape import device_kernels as dk
    from autotape.opcodes import ADD, DIV, EXP, MUL, NEG, POW, SIGMOID, SIN
    F, O, N = dk.FULL, dk.ONE, dk.NUMBER
    # values: 0 x, 1 sin, 2 sin*x, 3 x**2, 4 the 2, 5 -x, 6 exp, 7 the 1, 8 1+exp,
    # 9 x**2/(1+exp), 10 the sum's operand
    steps = ((ADD, 10, (2, 9)), (DIV, 9, (3, 8)), (ADD, 8, (7, 6)), (EXP, 6, (5,)),
             (NEG, 5, (0,)), (POW, 3, (0, 4)), (MUL, 2, (1, 0)), (SIN, 1, (0,)))
    values = (F, F, F, F, N, F, F, N, F, F, F)
    arr, f64, i64 = types.Array(types.float64, 1, "C"), types.float64, types.int64
    source, read = dk.reverse_code(steps, values, ((10, O),), (0,))
    return {
        "reverse_run": (source, (i64,) + tuple(f64 if values[k] == N else arr for k in read)
                        + (arr, arr)),
        "forward_sigmoid": (dk.forward_source(SIGMOID, (F,)), (i64, arr, arr)),
    }


def _interpreter_types():
    from numba import types
    i64, f64, u8 = types.int64, types.float64, types.uint8

    def array(t, n):
        return types.Array(t, n, "C")
    return (array(i64, 2), array(i64, 1), array(f64, 1), array(u8, 2), array(i64, 1),
            array(f64, 1), array(i64, 1), array(i64, 1), array(f64, 2), array(f64, 2),
            array(f64, 3), types.boolean, array(f64, 1), array(f64, 1))


if __name__ == "__main__":
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        sys.exit("ptx_report: unset NUMBA_ENABLE_CUDASIM (the simulator compiles nothing)")
    print(json.dumps(report(), indent=1, default=lambda v: None if isinstance(v, float)
                     and math.isnan(v) else v))
