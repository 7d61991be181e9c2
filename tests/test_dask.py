"""autotape.dask: a compiled function over dask arrays of points equals one machine's
results exactly on the threaded, process and distributed schedulers, sends the program
once per worker, and survives a worker that dies mid-run."""
import os
import pickle
import signal
import time

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import autotape as at  # noqa: E402
import autotape.dask as atd  # noqa: E402
from autotape.dask import _Shipped  # noqa: E402

STEPS = 60


def pendulum(theta):
    """A damped pendulum, RK4: the squared distance from rest at the end."""
    def accel(x, v):
        return -theta[2] * at.sin(x) - theta[3] * v
    x, v, dt = theta[0], theta[1], 0.02
    for _ in range(STEPS):
        k1x, k1v = v, accel(x, v)
        k2x, k2v = v + 0.5 * dt * k1v, accel(x + 0.5 * dt * k1x, v + 0.5 * dt * k1v)
        k3x, k3v = v + 0.5 * dt * k2v, accel(x + 0.5 * dt * k2x, v + 0.5 * dt * k2v)
        k4x, k4v = v + dt * k3v, accel(x + dt * k3x, v + dt * k3v)
        x = x + dt / 6 * (k1x + 2 * k2x + 2 * k3x + k4x)
        v = v + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
    return x * x + v * v


def thetas(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([1.0, 0.0, 9.8, 0.1]) * rng.uniform(0.5, 1.5, (n, 4))


@pytest.fixture(scope="module")
def compiled():
    return at.compile(pendulum, thetas(1)[0])


def _local(c, method, points):
    result = c.map_points(method, (points,))
    return [r.numpy() for r in result] if isinstance(result, tuple) else [result.numpy()]


def _equal(got, want):
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("method", ["__call__", "grad", "value_and_grad", "jacobian",
                                    "hessian"])
def test_threaded_scheduler_equals_one_machine(compiled, method):
    points = thetas(90)
    fn = compiled if method == "__call__" else getattr(compiled, method)
    result = atd.map_points(fn, da.from_array(points, chunks=(25, 4)))
    with dask.config.set(scheduler="threads"):
        got = dask.compute(*result) if isinstance(result, tuple) else result.compute()
    _equal(got, _local(compiled, method, points))


def test_vector_valued_and_multi_axis_points():
    c = at.compile(lambda m: at.tanh(m @ m.T).sum(axis=0) * m[0, 0], np.ones((2, 3)))
    points = np.random.default_rng(1).normal(size=(17, 2, 3))
    values = atd.map_points(c, da.from_array(points, chunks=(5, 2, 3)))
    jac = atd.map_points(c.jacobian, da.from_array(points, chunks=(5, 1, 3)))
    assert values.shape == (17, 2) and jac.shape == (17, 2, 2, 3)
    _equal([values.compute(scheduler="sync"), jac.compute(scheduler="sync")],
           _local(c, "__call__", points) + _local(c, "jacobian", points))


def test_process_scheduler_equals_one_machine_and_ships_the_program_once(compiled):
    points = thetas(120)
    value, grad = atd.map_points(compiled.value_and_grad,
                                 da.from_array(points, chunks=(30, 4)))
    with dask.config.set(scheduler="processes", num_workers=2):
        got = dask.compute(value, grad)
    _equal(got, _local(compiled, "value_and_grad", points))
    # what each chunk task carries: a token and a file name, not the program
    shipped = _Shipped(compiled)
    assert len(pickle.dumps(shipped)) < 500 < len(pickle.dumps(compiled))
    again = pickle.loads(pickle.dumps(shipped))
    assert again.compiled is pickle.loads(pickle.dumps(shipped)).compiled   # read once


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(2)               # (both up before the program travels)
        yield client


def test_local_cluster_equals_one_machine_and_broadcasts_the_program(cluster, compiled):
    points = thetas(200)
    value, grad = atd.map_points(compiled.value_and_grad,
                                 da.from_array(points, chunks=(40, 4)))
    got = dask.compute(value, grad)
    _equal(got, _local(compiled, "value_and_grad", points))
    # the program is one task's result, which every chunk task reads (not a copy per
    # chunk). (It is also replicated to every worker, but distributed's active memory
    # manager drops copies no task waits for, so how many remain is not asserted.)
    programs = [key for key in cluster.who_has() if str(key).startswith("loads-")]
    assert len(programs) == 1, cluster.who_has()
    again = atd.map_points(compiled.value_and_grad, da.from_array(points, chunks=(40, 4)))
    dask.compute(*again)
    assert [key for key in cluster.who_has() if str(key).startswith("loads-")] == programs


def test_a_worker_killed_mid_run_is_recovered_with_the_same_results(cluster, compiled):
    # ~3 s of chunks, so the kill lands mid-run; the points made by dask on the workers
    lazy = da.random.default_rng(3).uniform(0.5, 1.5, (400_000, 4), chunks=(10_000, 4)) \
        * np.array([1.0, 0.0, 9.8, 0.1])
    value, grad = atd.map_points(compiled.value_and_grad, lazy)
    want = _local(compiled, "value_and_grad", lazy.compute())
    futures = cluster.compute([value, grad])
    deadline = time.time() + 60
    busy = {}
    while not busy and time.time() < deadline:       # a worker running a chunk
        busy = {w: tasks for w, tasks in cluster.processing().items() if tasks}
        time.sleep(0.005)
    victim = next(iter(busy))
    pid = cluster.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)
    assert not all(f.done() for f in futures), "killed too late to test anything"
    got = cluster.gather(futures)
    _equal(got, want)
    assert victim not in cluster.scheduler_info()["workers"]     # it really died


def test_bad_input_is_named(compiled):
    with pytest.raises(TypeError, match="expected a Compiled"):
        atd.map_points(pendulum, da.ones((4, 4)))
    with pytest.raises(ValueError, match="leading axis of points"):
        atd.map_points(compiled, da.ones(()))
    with pytest.raises(TypeError, match="numeric"):
        atd.map_points(compiled, da.from_array(np.array([["a"] * 4])))
    with pytest.raises(ValueError, match="threads_per_chunk"):
        atd.map_points(compiled, da.ones((4, 4)), threads_per_chunk=0)


def test_results_whose_shape_depends_on_the_point_raise_not_miscut():
    """The graph is laid out from one point's results (kept for later ensembles); a
    chunk whose results have other shapes would be cut at the wrong columns."""
    def f(x):
        if x[0] > 0:                     # (a guard: other points record f again)
            return x * 2.0
        return x[:1] * 3.0
    c = at.compile(f, np.ones(3))
    points = np.ones((4, 3))
    with dask.config.set(scheduler="sync"):
        assert atd.map_points(c, da.from_array(points, chunks=2)).compute().shape == (4, 3)
        points[2:, 0] = -1.0             # (the second chunk's results have shape (1,))
        with pytest.raises(RuntimeError, match="must not depend on the point"):
            atd.map_points(c, da.from_array(points, chunks=2)).compute()


def test_later_ensembles_reuse_the_layout_without_computing_a_point(compiled):
    points = da.from_array(thetas(8), chunks=4)
    with dask.config.set(scheduler="sync"):
        atd.map_points(compiled.value_and_grad, points)
    computed = []
    with dask.config.set(scheduler=lambda dsk, keys, **kw: computed.append(keys)):
        values, grads = atd.map_points(compiled.value_and_grad, points)
    assert computed == [] and values.shape == (8,) and grads.shape == (8, 4)
