"""Peak memory of an eager gradient on 10^7 elements, autotape beside torch: each in a
fresh process, kernels loaded on a small array first, then the peak resident size
(ru_maxrss) above the resident size just before the large run. The input array itself
is made before, so it is not counted.

    python -m pytest benchmarks/test_memory.py -s --benchmark-json=m.json
"""
import subprocess
import sys

import pytest

CODE = """
import resource, sys, gc, numpy as np
lib, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rss():
    with open("/proc/self/statm") as f:
        import os
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
if lib == "torch":
    import torch as L
    L.set_num_threads(threads)
    make = lambda a: L.tensor(a, requires_grad=True)
else:
    import autotape as L
    L.set_num_threads(threads)
    make = lambda a: L.tensor(a, requires_grad=True)
def run(a):
    x = make(a)
    y = (L.sin(x) * x + x ** 2 / (1 + L.exp(-x))).sum()
    y.backward()
    return x.grad
run(np.random.default_rng(0).normal(size=300_000))
a = np.random.default_rng(0).normal(size=n)
gc.collect()
before = rss()
g = run(a)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before)
"""

N = 10_000_000


def peak_bytes(lib, threads):
    out = subprocess.run([sys.executable, "-c", CODE, lib, str(threads), str(N)],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.parametrize("threads", [1, 2])
def test_peak_memory_of_a_large_gradient(benchmark, threads):
    pytest.importorskip("torch")
    ours = peak_bytes("autotape", threads)
    torch_peak = peak_bytes("torch", threads)
    benchmark.extra_info.update(autotape_mib=ours / 2 ** 20, torch_mib=torch_peak / 2 ** 20,
                                ratio=ours / torch_peak)
    print(f"\n{threads} thread(s): autotape {ours / 2 ** 20:.0f} MiB, torch "
          f"{torch_peak / 2 ** 20:.0f} MiB, ratio {ours / torch_peak:.2f}")
    benchmark.pedantic(lambda: None, rounds=1)
