"""Compiling less and once: sweep variants per kernel family, the compile notice, compiles
shared between processes, and ``python -m autotape warmup``."""
import os
import subprocess
import sys
import threading
import time

import numba
import numpy as np
import pytest

import autotape as at
from autotape import warmup
from autotape.kernels import cache, sweep
from autotape.kernels.sweep import (ALL_FAMILIES, ELEMENTWISE, INDEX, LINALG, MATMUL_FAMILY,
                                    REDUCE, families_of, sweep_for)


def _families(t):
    return families_of(t._tape.columns().rows, 0)


def test_scalar_code_needs_no_kernel_family():
    x = at.tensor(0.5, requires_grad=True)
    assert _families(at.sin(x) * x + x ** 2) == 0
    assert sweep_for(0) is not sweep.reverse_sweep


@pytest.mark.parametrize("program, bits", [
    (lambda x: at.sin(x) * x, ELEMENTWISE),
    (lambda x: (x * 2.0).sum(), ELEMENTWISE | REDUCE),
    (lambda x: x.sum(), REDUCE),
    (lambda x: x[1:], INDEX),
    (lambda x: x @ x, MATMUL_FAMILY),
    (lambda x: at.linalg.det(x.reshape(2, 2)), INDEX | LINALG),
])
def test_families_of_a_tape(program, bits):
    x = at.tensor([1.0, 2.0, 3.0, 5.0], requires_grad=True)
    assert _families(program(x)) == bits


def test_a_scalar_broadcast_into_an_array_is_not_scalar_code():
    s = at.tensor(2.0, requires_grad=True)
    v = at.tensor(np.ones(1), requires_grad=True)
    assert _families(s * v) == ELEMENTWISE
    assert _families(s * v.sum()) == REDUCE


def test_variants_round_up_and_are_few():
    seen = {sweep_for(bits) for bits in range(2 * ALL_FAMILIES + 2)}
    assert len(seen) == len(sweep.VARIANTS)
    assert sweep_for(ELEMENTWISE) is sweep_for(REDUCE) is sweep_for(ELEMENTWISE | REDUCE)
    assert sweep_for(INDEX) is sweep.reverse_sweep
    assert sweep_for(LINALG) is sweep_for(0)       # linalg rows have a kernel of their own


def test_linalg_rows_between_other_rows_and_in_lanes():
    a = np.array([[2.0, 0.5, 0.1], [0.3, 3.0, 0.2], [0.1, 0.4, 1.5]])
    f = at.compile(lambda m: at.sin(at.linalg.inv(m @ m).sum(axis=0)) * at.linalg.det(m), a)
    jac = f.jacobian(a)
    eps = 1e-6
    for k in range(9):
        d = np.zeros(9)
        d[k] = eps
        fd = (f(a + d.reshape(3, 3)).numpy() - f(a - d.reshape(3, 3)).numpy()) / (2 * eps)
        np.testing.assert_allclose(np.asarray(jac).reshape(3, 9)[:, k], fd, rtol=1e-6,
                                   atol=1e-8)
    x = at.tensor(a, requires_grad=True)
    y = at.linalg.det(x) * at.linalg.inv(x).sum()
    g, = at.grad(y, x, create_graph=True)
    h, = at.grad(g.sum(), x)
    assert np.isfinite(h.numpy()).all()


def test_a_fresh_cache_compiles_only_what_a_scalar_program_uses(tmp_path):
    code = ("import autotape as at\n"
            "from autotape.kernels import cache\n"
            "x = at.tensor(0.5, requires_grad=True)\n"
            "at.grad(at.sin(x) * x + x ** 2, x)\n"
            "print(sorted(name for name, _ in cache.COMPILED))\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), AUTOTAPE_BACKGROUND_WARMUP="0")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    compiled = eval(run.stdout.strip().splitlines()[-1])
    assert compiled and all(name.rsplit(".", 1)[-1] in
                            {"decode_rows", "address_of", "families_of", "reverse_sweep_0"}
                            for name in compiled), compiled
    # a second process loads them all
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stdout
    assert "compiling" not in run.stderr


def test_the_notice_says_what_compiles_after_a_second(monkeypatch, capsys):
    monkeypatch.setattr(cache, "NOTICE_AFTER", 0.05)
    with cache.compile_notice("the test kernel"):
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert "autotape: compiling the test kernel (once" in err
    with cache.compile_notice("a quick one"):
        pass
    time.sleep(0.1)
    assert "quick" not in capsys.readouterr().err


def test_a_compile_waits_for_another_process_compiling_the_same_kernel(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setattr(cache, "cache_dir", lambda: str(tmp_path))

    def plus_one(x):
        return x + 1
    kernel = cache.announce_compiles(numba.njit(plus_one))
    name = f"{plus_one.__module__}.{plus_one.__qualname__}"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        marker = tmp_path / "compiling" / name
        marker.parent.mkdir()
        marker.write_text(str(other.pid))
        assert cache._compiling_elsewhere(name)
        threading.Timer(0.5, marker.unlink).start()
        start = time.perf_counter()
        assert kernel(1) == 2
        assert time.perf_counter() - start >= 0.45
        assert not marker.exists()                   # our own marker is gone too
    finally:
        other.kill()
        other.wait()
    marker.write_text(str(other.pid))                # a dead process: not waited for
    assert not cache._compiling_elsewhere(name)
    marker.write_text(str(os.getpid()))              # nor this one
    assert not cache._compiling_elsewhere(name)


def test_background_warmup_starts_once_per_cold_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "cache_dir", lambda: str(tmp_path))
    started = []
    monkeypatch.setattr(warmup.subprocess, "Popen", lambda *a, **k: started.append(a[0]))
    monkeypatch.setattr(warmup, "_background", [])   # (the fakes are no processes to stop)
    monkeypatch.setenv(warmup.BACKGROUND_ENV, "0")
    warmup._start_background()
    assert started == []
    monkeypatch.setenv(warmup.BACKGROUND_ENV, "1")
    warmup._start_background()
    assert started == [warmup._warmup_process(["--background"])[0]]
    (tmp_path / "warmed").write_text("ok\n")
    warmup._start_background()
    assert len(started) == 1
    monkeypatch.delenv(warmup.BACKGROUND_ENV)        # unset: only with another core
    (tmp_path / "warmed").unlink()
    monkeypatch.setattr(warmup, "usable_cores", lambda: 1)
    warmup._start_background()
    assert len(started) == 1
    monkeypatch.setattr(warmup, "usable_cores", lambda: 8)
    warmup._start_background()
    assert len(started) == 2


def test_warmup_lock_is_taken_over_from_a_dead_process(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "cache_dir", lambda: str(tmp_path))
    (tmp_path / "warmup.pid").write_text("999999999")
    with warmup._lock() as mine:
        assert mine
        assert (tmp_path / "warmup.pid").read_text() == str(os.getpid())
        with warmup._lock() as again:
            assert not again                          # held by a live process: us
    assert not (tmp_path / "warmup.pid").exists()


def test_warmup_leaves_no_kernel_uncompiled():
    assert warmup.warmup(quiet=True) == []
    assert os.path.exists(os.path.join(cache.cache_dir(), "warmed"))


def test_the_warmup_s_processes_import_this_autotape(tmp_path):
    """Not one a working directory holds (``python -m`` would put it first)."""
    shadow = tmp_path / "autotape"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadowing checkout')\n")
    argv, env = warmup._warmup_process(["nonsense"])
    run = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "usage: python -m autotape warmup" in run.stderr


def test_warmup_command_line():
    run = subprocess.run([sys.executable, "-m", "autotape", "nonsense"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "usage: python -m autotape warmup" in run.stderr
