"""Compiled programs on a CUDA GPU (gpu.py, kernels/gpu.py): one thread per point,
forward and reverse in one launch. Without a GPU these run in numba's CUDA simulator
(CI sets NUMBA_ENABLE_CUDASIM=1; the simulator runs blocks one after another, which
these kernels allow: no thread reads another's slots). On a GPU: ``pytest -m cuda``.
tests/test_gpu_ptx.py compiles the kernels to PTX and assembles them, without a GPU."""
import importlib
import os

import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape import gpu, opcodes
from test_op_table import SAMPLES
from test_program import NOT_LOWERED, pendulum
from test_op_table import _recorded_ops

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _cuda_or_skip():
    try:
        return gpu.cuda_module()
    except RuntimeError as e:
        pytest.skip(str(e))


pytestmark = pytest.mark.cuda
LOWERED = sorted(code for code, (f, x) in SAMPLES.items()
                 if not _recorded_ops(f, x) & NOT_LOWERED)


@pytest.mark.parametrize("code", LOWERED, ids=opcodes.opcode_name)
def test_every_lowered_op_on_the_gpu_equals_the_cpu(code):
    _cuda_or_skip()
    f, x = SAMPLES[code]
    c = at.compile(f, x)
    points = np.stack([x, x * 0.7 + 0.05, x * 1.1])
    for method in ("value_and_grad", "__call__"):
        want = at.func.flatten(F.vmap(getattr(c, method))(points))[0]
        got = at.func.flatten(F.vmap(getattr(c, method), device="cuda")(points))[0]
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-14,
                                       equal_nan=True)


def test_a_loop_program_and_its_jacobian():
    _cuda_or_skip()
    c = at.compile(lambda t: at.stack([pendulum(t), pendulum(t * 1.01) * t[0]]),
                   np.array([1.0, 0.0, 9.8, 0.1]))
    thetas = np.array([1.0, 0.0, 9.8, 0.1]) * np.random.default_rng(0).uniform(
        0.5, 1.5, (5, 4))
    np.testing.assert_allclose(F.vmap(c.jacobian, device="cuda")(thetas).numpy(),
                               F.vmap(c.jacobian)(thetas).numpy(), rtol=1e-12, atol=1e-14)


def test_values_first_then_gradients():
    # the program's device arrays are kept: a first call without derivatives must not
    # leave the later gradient call without its reach marks
    _cuda_or_skip()
    c = at.compile(lambda t: (t * t).sum() * t[0], np.ones(3))
    points = np.arange(6.0).reshape(2, 3) + 1.0
    F.vmap(c, device="cuda")(points)
    np.testing.assert_allclose(F.vmap(c.grad, device="cuda")(points).numpy(),
                               F.vmap(c.grad)(points).numpy(), rtol=1e-14)


def test_points_beyond_the_scratch_go_in_several_launches(monkeypatch):
    _cuda_or_skip()
    c = at.compile(pendulum, np.array([1.0, 0.0, 9.8, 0.1]))
    monkeypatch.setattr(gpu, "SCRATCH_BYTES", 3 * 16 * c._lean(
        "value", [np.ones(4)]).lean.nslots)   # three points' slots per launch
    thetas = np.array([1.0, 0.0, 9.8, 0.1]) * np.linspace(0.8, 1.2, 8)[:, None]
    np.testing.assert_allclose(F.vmap(c.grad, device="cuda")(thetas).numpy(),
                               F.vmap(c.grad)(thetas).numpy(), rtol=1e-12)


def test_device_points_stay_on_the_device():
    cuda = _cuda_or_skip()
    c = at.compile(pendulum, np.array([1.0, 0.0, 9.8, 0.1]))
    thetas = np.array([1.0, 0.0, 9.8, 0.1]) * np.linspace(0.8, 1.2, 6)[:, None]
    values, grads = F.vmap(c.value_and_grad, device="cuda")(cuda.to_device(thetas))
    assert gpu.is_device_array(values) and gpu.is_device_array(grads)
    assert grads.shape == (6, 4) and values.shape == (6,)
    want_v, want_g = F.vmap(c.value_and_grad)(thetas)
    np.testing.assert_allclose(grads.copy_to_host(), want_g.numpy(), rtol=1e-12)
    np.testing.assert_allclose(values.copy_to_host(), want_v.numpy(), rtol=1e-12)


def test_what_the_gpu_does_not_run_is_named():
    _cuda_or_skip()
    taped = at.compile(lambda t: t.max() * t[0], np.ones(3))
    with pytest.raises(ValueError, match="does not run as a lean program"):
        F.vmap(taped.grad, device="cuda")(np.ones((2, 3)))
    c = at.compile(lambda t: (t * t).sum(), np.ones(3))
    with pytest.raises(ValueError, match="device must be None or 'cuda'"):
        F.vmap(c.grad, device="tpu")(np.ones((2, 3)))
    with pytest.raises(ValueError, match="device= applies to a compiled function"):
        F.vmap(lambda t: t, device="cuda")
    with pytest.raises(ValueError, match="GPU maps __call__, grad"):
        F.vmap(c.jvp, device="cuda")(np.ones((2, 3)), np.ones((2, 3)))


def test_without_numba_cuda_the_error_says_what_to_install(monkeypatch):
    real = importlib.import_module

    def missing(name, *args):
        if name == "numba.cuda":
            raise ImportError("No module named 'numba.cuda'")
        return real(name, *args)
    monkeypatch.setattr(gpu.importlib, "import_module", missing)
    monkeypatch.setattr(gpu, "_CUDA", [])      # (found usable once, it is kept)
    with pytest.raises(RuntimeError, match=r"pip install 'autotape\[cuda\]'"):
        gpu.cuda_module()
