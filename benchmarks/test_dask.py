"""The pendulum ensemble (200 RK4 steps, loss + 4-gradient) at 10^5 parameter sets, and
the driven pendulum's at 20,000: one single-threaded process, against the same compiled
function through autotape.dask on a 1- and a 2-worker distributed.LocalCluster (one
thread each) on this machine, and on 2 workers that are threads of this process.

    python -m pytest benchmarks/test_dask.py --benchmark-json=d.json
    python benchmarks/report.py d.json

The cluster is started, the program scattered and the loop bodies compiled in the
workers before timing (warm-up rounds); what is timed is what a user waits for per
ensemble: building the graph (the results' layout is kept from the first ensemble),
scheduling the chunk tasks (16, 4: two a worker, or 2: one a worker), the chunks, and bringing the
results back. The workers' statistical profiler is off (``distributed.worker.profile
.enabled``): sampling every task's stack each 10 ms cost the chunks 10-30% here, where
the cluster's processes share two cores.
"""
import numba
import numpy as np
import pytest

import autotape as at
import workloads as W

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
import autotape.dask as atd  # noqa: E402

PROFILER_OFF = {"distributed.worker.profile.enabled": False}
# model -> (points, group): the unforced pendulum, and the driven one (forcing from the
# loop index: a per-repetition constant table in its loop body; issue #27's 20,000 points)
MODELS = {"pendulum": (100_000, "dask: 10^5 pendulums (200 steps), loss + gradient each"),
          "driven": (20_000, "dask: 20,000 driven pendulums (200 steps), loss + gradient each")}


def pendulum_200(theta):
    return W.pendulum_at(theta, 200)


def driven_200(theta):
    return W.driven_pendulum_at(theta, 200)


@pytest.fixture(scope="module", params=sorted(MODELS))
def ensemble(request):
    points, group = MODELS[request.param]
    thetas = W.thetas(points)
    c = at.compile(pendulum_200 if request.param == "pendulum" else driven_200, thetas[0])
    c.value_and_grad(thetas[0])
    c.wait_compiled()
    return c, thetas, group


def test_one_process_one_thread(benchmark, ensemble):
    c, thetas, group = ensemble
    saved = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        benchmark.group = group
        benchmark.pedantic(c.map_points, args=("value_and_grad", (thetas,)), rounds=5,
                           warmup_rounds=4)
    finally:
        numba.set_num_threads(saved)


@pytest.mark.parametrize("chunks", [16, 4, 2])
@pytest.mark.parametrize("workers", [1, 2])
def test_local_cluster(benchmark, ensemble, workers, chunks):
    _ensemble_on_cluster(benchmark, ensemble, workers, chunks, processes=True)


def test_local_cluster_of_threads(benchmark, ensemble):
    """Two workers as threads of this process (``processes=False``): no chunk or result
    is serialized or sent between processes; the compiled code releases the GIL."""
    _ensemble_on_cluster(benchmark, ensemble, 2, 2, processes=False)


def _ensemble_on_cluster(benchmark, ensemble, workers, chunks, processes):
    c, thetas, group = ensemble
    want = c.map_points("value_and_grad", (thetas,))
    with dask.config.set(PROFILER_OFF), \
            distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                     processes=processes, dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        points = da.from_array(thetas, chunks=(thetas.shape[0] // chunks, 4))

        def run():
            return dask.compute(*atd.map_points(c.value_and_grad, points))
        got = run()
        np.testing.assert_array_equal(got[0], want[0].numpy())
        np.testing.assert_array_equal(got[1], want[1].numpy())
        benchmark.group = group
        benchmark.name = f"local_cluster_{workers}_{'workers' if processes else 'threads'}" \
            f"_{chunks}_chunks"
        benchmark.pedantic(run, rounds=5, warmup_rounds=2)


def _times_one(block):
    return block * 1.0


@pytest.mark.benchmark(group="dask: 16 chunks doing nothing (the cluster's own floor)")
@pytest.mark.parametrize("workers", [1, 2])
def test_local_cluster_floor(benchmark, workers):
    """The same 20,000 x 4 points in 16 chunks, each chunk's task only copying its block:
    what scheduling, transfers and the cluster's own processes cost per ensemble."""
    thetas = W.thetas(MODELS["driven"][0])
    with dask.config.set(PROFILER_OFF), \
            distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                     processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        points = da.from_array(thetas, chunks=(thetas.shape[0] // 16, 4))
        benchmark.name = f"floor_{workers}_workers"
        benchmark.pedantic(lambda: dask.compute(points.map_blocks(_times_one)), rounds=5,
                           warmup_rounds=2)
