"""Compiling beside the calls (kernels/background.py): a loop body compiles in a helper
process while calls run on the interpreter, with the interpreter's answers; the calls
switch once it is ready; a second process loads it from disk and compiles nothing; a
helper that fails leaves the compile to the calling process; no helper outlives its
program.

Each test compiles a body of its own, drawn at random (so that it is not on disk yet:
the suite otherwise runs with AUTOTAPE_BACKGROUND_COMPILE=0, see conftest.py)."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import autotape as at
import autotape.func as F
import autotape.program as program
from autotape.kernels import background, loops

BODY_OPS = ("sin", "tanh", "cos")


def _model(seed):
    """A forced oscillator whose step applies a random sequence of 12 of BODY_OPS: a
    loop body no earlier run compiled."""
    picks = np.random.default_rng(seed).integers(0, len(BODY_OPS), 12)
    ops = [getattr(at, BODY_OPS[k]) for k in picks]

    def model(theta):
        x, v = theta[0], theta[1]
        for i in range(120):
            a = -theta[2] * x - 0.1 * v + 0.3 * np.cos(0.7 * i * 0.05)
            for op in ops:
                a = op(a) * 0.9
            x, v = x + 0.05 * v, v + 0.05 * a
        return x * x + v * v
    return model


def _seed():
    return int.from_bytes(os.urandom(6), "little")


THETA = np.array([0.4, -0.2, 1.3, 0.0])


@pytest.fixture(autouse=True)
def _bodies(loop_bodies, compiled_function_kernels):
    """These tests are of loop bodies; the generated whole program's helper is
    test_codegen_cpu.py's."""


def _lean(c):
    return c._programs[next(iter(c._programs))].lean


def _source_written(lean):
    """Wait for the thread writing the body's source, which then starts its helper."""
    code = lean.loop_code
    if code is not None and not isinstance(code, tuple):
        code.result(timeout=60)


def _interpreted(model):
    plain = at.compile(model, THETA)
    _lean(plain).loop = None
    return plain


def test_calls_run_the_interpreter_until_the_body_compiled_beside_them_is_ready(
        monkeypatch, capfd):
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    model = _model(_seed())
    c, plain = at.compile(model, THETA), _interpreted(model)
    lean = _lean(c)
    assert lean.loop is not None
    want = [plain.value_and_grad(THETA * s) for s in (1.0, 1.1, 0.9)]
    got = []
    for s in (1.0, 1.1, 0.9):
        start = time.perf_counter()
        got.append(c.value_and_grad(THETA * s))
        assert time.perf_counter() - start < 1.0            # no call waits on numba
    assert lean.loop_kernels is None                         # (the helper takes seconds)
    for (v, g), (wv, wg) in zip(got, want):                  # the interpreter's: bit for bit
        assert v.item() == wv.item() and g.numpy().tolist() == wg.numpy().tolist()
    _source_written(lean)
    err = capfd.readouterr().err
    assert err.count("compiling the loop in model (test_background.py, line") == 1
    assert "beside the calls" in err
    assert c.wait_compiled() is c               # (what the calls so far asked for)
    assert lean.loop_ready == {(np.dtype(np.float64), "reverse")}
    points = THETA * np.linspace(0.8, 1.2, 5)[:, None]
    for call in (lambda f: f.jacfwd(THETA), lambda f: F.vmap(f.grad)(points),
                 lambda f: F.vmap(f.jacfwd)(points)):
        start = time.perf_counter()                          # the others beside, again
        np.testing.assert_allclose(call(c).numpy(), call(plain).numpy(), rtol=1e-12)
        assert time.perf_counter() - start < 1.0
    capfd.readouterr()
    c.wait_compiled()
    assert lean.loop_ready == {(np.dtype(np.float64), g) for g in loops.GROUPS}
    for s in (1.0, 1.1, 0.9):
        v, g = c.value_and_grad(THETA * s)
        wv, wg = plain.value_and_grad(THETA * s)
        np.testing.assert_allclose(g.numpy(), wg.numpy(), rtol=1e-13)
        np.testing.assert_allclose(v.item(), wv.item(), rtol=1e-13)
    np.testing.assert_allclose(c.jacfwd(THETA).numpy(), plain.jacfwd(THETA).numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(F.vmap(c.grad)(points).numpy(),
                               F.vmap(plain.grad)(points).numpy(), rtol=1e-12)
    assert "compiling the loop" not in capfd.readouterr().err   # loaded, never said again


def test_the_bodys_source_is_written_beside_the_calls(monkeypatch):
    """Writing a body's source is Python (Gray-Scott's 24 x 24 step: ~0.2 s): a thread
    writes it while the calls go on interpreting, the call that asked included."""
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    started, release, writers = threading.Event(), threading.Event(), []

    def slow_source(*args):
        writers.append(threading.current_thread().name)
        started.set()
        assert release.wait(60)
        return loops.loop_source(*args)
    monkeypatch.setattr(program, "loop_source", slow_source)
    model = _model(_seed())
    c, plain = at.compile(model, THETA), _interpreted(model)
    lean = _lean(c)
    for s in (1.0, 1.1, 0.9, 1.2):                  # (the 2nd asks for it: held back)
        v, g = c.value_and_grad(THETA * s)
        wv, wg = plain.value_and_grad(THETA * s)
        assert v.item() == wv.item() and g.numpy().tolist() == wg.numpy().tolist()
    assert started.wait(60) and writers[0].startswith("autotape-source")
    assert lean.loop_kernels is None and not isinstance(lean.loop_code, tuple)
    pid = os.fork()                 # a child forked meanwhile has no writing thread:
    if pid == 0:                    # it writes the source itself, never waits forever
        try:
            signal.alarm(60)
            release.set()
            code = lean._loop_code(np.dtype(np.float64), "reverse", True)
            os._exit(0 if isinstance(code, tuple) and len(writers) == 2 else 1)
        finally:
            os._exit(2)
    assert os.waitpid(pid, 0)[1] == 0
    release.set()
    c.wait_compiled()
    assert isinstance(lean.loop_code, tuple) and len(writers) == 1
    assert lean.loop_ready == {(np.dtype(np.float64), "reverse")}
    v, g = c.value_and_grad(THETA)
    np.testing.assert_allclose(g.numpy(), plain.value_and_grad(THETA)[1].numpy(),
                               rtol=1e-13)


def test_a_forked_child_has_its_own_helpers_and_free_locks():
    """A child forked while another thread holds autotape's compile locks gets free
    ones (the holder does not exist there), and the parent's helpers are not its own:
    it neither waits for one nor stops one at its exit."""
    key = f"test: a helper of the parent {os.getpid()} {time.time()}"
    job = background.Job(key, "import time\ntime.sleep(120)\n", [], "a sleeping helper")
    assert background._start(job)
    background._jobs[key] = job
    held, release = threading.Event(), threading.Event()

    def hold():
        with background._lock, loops._lock, program._SOURCE_LOCK:
            held.set()
            release.wait(60)
    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(60)
        pid = os.fork()
        if pid == 0:
            try:
                signal.alarm(60)
                with background._lock, loops._lock, program._SOURCE_LOCK:
                    pass
                mine = background.state(key) is None
                background._stop_helpers()              # (what its exit runs)
                os._exit(0 if mine else 1)
            finally:
                os._exit(2)
        assert os.waitpid(pid, 0)[1] == 0
        assert job.process.poll() is None and background.state(key) == background.RUNNING
    finally:
        release.set()
        holder.join()
        background.settled(key)


_SECOND_PROCESS = textwrap.dedent("""
    import sys
    import numpy as np
    import autotape as at, autotape.func as F
    from autotape.kernels import cache
    sys.path.insert(0, {tests!r})
    from test_background import _model, _lean, THETA
    c = at.compile(_model({seed}), THETA)
    points = THETA * np.linspace(0.8, 1.2, 5)[:, None]
    calls = [lambda: c.value_and_grad(THETA), lambda: c.jacfwd(THETA),
             lambda: F.vmap(c.grad)(points), lambda: F.vmap(c.jacfwd)(points)]
    for call in calls:                     # the interpreter's kernels load (or compile)
        call()
    c.wait_compiled()                      # (the body's source is written on a thread,
    before = len(cache.COMPILED)           #  looked for every LOOK_EVERY: the calls can
                                           #  end first; loading it compiles nothing)
    for call in calls * 2:
        call()
    lean = _lean(c)
    missed = [k.py_func.__name__ for group in lean.loop_kernels for k in group
              if sum(k.stats.cache_misses.values())]
    print(len(lean.loop_ready), cache.COMPILED[before:], missed)
""")


def test_a_second_process_loads_the_body_and_what_runs_around_it_from_disk(monkeypatch):
    """Also checks that the helper compiled the interpreter's kernels around the body
    with the argument types program.py's calls have (loops.compile_around)."""
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    seed = _seed()
    c = at.compile(_model(seed), THETA)
    points = THETA * np.linspace(0.8, 1.2, 5)[:, None]
    c.value_and_grad(THETA), c.jacfwd(THETA), F.vmap(c.grad)(points)    # (every kind of
    F.vmap(c.jacfwd)(points)                                              # call: compiled)
    c.wait_compiled()
    env = dict(os.environ, **{background.ENABLED_ENV: "1"})
    code = _SECOND_PROCESS.format(tests=os.path.dirname(__file__), seed=seed)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "[]", "[]"], out.stdout
    assert "compiling the loop" not in out.stderr


def test_a_helper_that_fails_leaves_the_compile_to_this_process(monkeypatch, capfd):
    monkeypatch.setenv(background.ENABLED_ENV, "1")
    monkeypatch.setattr(loops, "_HELPER", "sys.exit('the helper broke')\n")
    model = _model(_seed())
    c, plain = at.compile(model, THETA), _interpreted(model)
    c.value_and_grad(THETA)
    c.value_and_grad(THETA)                       # the helper starts (and fails)
    deadline = time.perf_counter() + 120
    while _lean(c).loop_kernels is None and time.perf_counter() < deadline:
        time.sleep(0.05)
        v, g = c.value_and_grad(THETA)            # (the call that finds it failed waits)
    assert _lean(c).loop_kernels is not None
    err = capfd.readouterr().err
    assert "failed, so this process compiles it" in err and "the helper broke" in err
    np.testing.assert_allclose(g.numpy(), plain.grad(THETA).numpy(), rtol=1e-13)


_EXITING = textwrap.dedent("""
    import sys
    import autotape as at
    from autotape.kernels import background
    sys.path.insert(0, {tests!r})
    from test_background import _model, _lean, _source_written, THETA
    c = at.compile(_model({seed}), THETA)
    c.grad(THETA)
    c.grad(THETA)
    _source_written(_lean(c))
    print(*[j.process.pid for j in background._jobs.values() if j.process is not None])
""")


def test_no_helper_outlives_the_program():
    env = dict(os.environ, **{background.ENABLED_ENV: "1"})
    code = _EXITING.format(tests=os.path.dirname(__file__), seed=_seed())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 1                          # it was compiling when f's program ended
    assert "the program ended before compiling the loop in model" in out.stderr
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


def test_compile_notices_name_what_a_kernel_is_for():
    from autotape.kernels import cache, program, staging
    assert cache._in_user_terms(program.run_points.py_func) == \
        "run_points, for compiled functions (at.compile, vmap)"
    assert cache._in_user_terms(staging.decode_rows.py_func).endswith("for reading tapes")


def test_a_helper_imports_by_this_process_s_search_path(tmp_path, monkeypatch):
    """``python -c`` puts its working directory first: a checkout of autotape there
    would shadow this one, and the helper compile this process's generated code against
    the other's kernels. The helper takes this process's sys.path instead."""
    shadow = tmp_path / "autotape"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadowing checkout')\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "seen.txt"
    key = f"search path test {os.getpid()} {time.time()}"
    code = ("import autotape.kernels.background as b\n"
            "open(sys.argv[1], 'w').write(b.__file__)\n")
    background.submit(key, code, [str(out)], "a test helper")
    assert background.wait(key) == background.DONE
    assert out.read_text() == background.__file__


_OTHER_PROCESS = textwrap.dedent("""
    import sys
    from autotape.kernels import background
    key, out = sys.argv[1], sys.argv[2]
    background.submit(key, "open(sys.argv[1], 'w').write('compiled here')\\n", [out],
                      "the same job")
    print(background.state(key), flush=True)
    print(background.wait(key), flush=True)
""")


@pytest.mark.parametrize("first_fails", [False, True])
def test_a_job_another_process_s_helper_has_is_waited_for_not_compiled_twice(tmp_path,
                                                                             first_fails):
    """Processes wanting the same thing compiled at once (dask's workers) start one
    helper between them: the second waits for the first's (ELSEWHERE), takes its
    ``done`` as done, and compiles the job itself where that helper failed."""
    key = f"claim test {os.getpid()} {time.time()} {first_fails}"
    go, out = tmp_path / "go", tmp_path / "out"
    code = ("import os, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.02)\n"
            + ("sys.exit('the first helper broke')\n" if first_fails else ""))
    assert background.submit(key, code, [str(go)], "a waiting helper") == background.RUNNING
    other = subprocess.Popen([sys.executable, "-c", _OTHER_PROCESS, key, str(out)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().split() == [background.ELSEWHERE]
        go.touch()
        assert other.stdout.readline().split() == [background.DONE]
        assert other.wait(60) == 0
    finally:
        go.touch()
        other.kill()
    assert background.wait(key) == (background.FAILED if first_fails else background.DONE)
    assert out.exists() == first_fails
