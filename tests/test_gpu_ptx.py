"""The generated CUDA kernels compile for the GPUs autotape targets (A100: sm_80, H100 /
H200: sm_90) without a GPU: numba-cuda writes PTX, NVIDIA's ptxas (the
``nvidia-cuda-nvcc-cu12`` wheel, in the test extra on Linux x86-64) assembles it and
says how many registers a thread uses and how many bytes spill to local memory. Skips
where those wheels are absent. The report (tests/ptx_report.py) is printed: run with
``-s`` to read it.

The limits, and why:
- no spills in the pendulum ensemble's kernels (the issue's bound): a spill is a trip
  to local memory per value, every step;
- the pendulum's reverse kernel at most 128 registers a thread: 65,536 registers per
  SM then hold at least 4 blocks of 128 threads (16 warps), enough to hide the latency
  of a kernel that is arithmetic between few loads; its forward mode at most 168, the
  4 tangent lanes multiplying the live values (3 blocks, 12 warps);
- other kernels are recorded: their registers grow with the state a thread carries (a
  6-element spring chain's forward mode carries 48 values), up to the 255 a thread
  can have, past which ptxas spills.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _report():
    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("numba-cuda is not installed (pip install numba-cuda[cu12])")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, str(HERE / "ptx_report.py")], env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        tail = done.stderr[-2000:]
        if "NVVM" in tail or "nvvm" in tail or "nvrtc" in tail:
            pytest.skip(f"no NVVM to compile with (the nvidia-cuda-nvcc wheels): {tail}")
        raise AssertionError(tail)
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def report():
    return _report()


def test_every_generated_kernel_compiles_for_sm_80_and_sm_90(report):
    print(json.dumps(report, indent=1))
    kernels = report["kernels"]
    assert len(kernels) == 3 * 3 * 2 + 2 + 2 * 2  # programs x kernels x architectures,
                                                  # the interpreter kernel, and two of
                                                  # device tensors
    assert all(entry["target"] and entry["ptx_lines"] > 50 for entry in kernels.values())


def test_registers_and_spills_within_the_limits(report):
    if report["ptxas"] is None:
        pytest.skip("no ptxas (the nvidia-cuda-nvcc-cu12 wheel)")
    for name, entry in report["kernels"].items():
        print(f"{name}: {entry['registers']} registers, {entry['spill_store_bytes']} "
              f"bytes spilled")
        assert entry["registers"] <= 255, name
        if name.startswith("device_tensors"):    # (a few values a thread: no reason
            assert entry["spill_store_bytes"] == 0, name     # to spill, none to need
            assert entry["registers"] <= 64, name             # more than 64 registers)
        if name.startswith("driven_pendulum"):
            assert entry["spill_store_bytes"] == 0, name
            assert entry["registers"] <= (168 if ".run_tangent." in name else 128), name


def test_device_tensor_launches_pass_what_the_kernels_take(report):
    # device tensors launch numba's PTX through CuPy with numba's argument layout
    # (device_kernels.launch_params): as many 8-byte parameters as the PTX declares
    for name, count in report["launch_params"].items():
        for cc in ("sm_80", "sm_90"):
            entry = report["kernels"][f"device_tensors.{name}.{cc}"]
            assert entry["params"] == count, (name, cc)
            assert set(entry["param_bytes"]) <= {"u64", "f64", "b64"}, entry


def test_the_pendulum_ensemble_fits_in_a_gigabyte(report):
    # 65,536 points of the 200-step driven pendulum, by the kernel's own accounting
    assert report["bytes_per_point"]["driven_pendulum_200"] * 65_536 < 1 << 30
    assert report["carried"]["driven_pendulum_200"] == 2
