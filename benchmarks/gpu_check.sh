#!/usr/bin/env bash
# The checks that need a GPU, in one run (the device tool lends one for minutes): the
# machine and versions, the GPU benchmarks (the CPU batched row on all cores and on 2),
# the CUDA tests for real, and the generated kernels' registers from this machine's
# ptxas. Logs go to $OUT (default ./gpu-out). From the repository root:
#     bash benchmarks/gpu_check.sh
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/benchmarks:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
# wheels carried in .whl (numba-cuda 0.30 does not import with numpy 2.5: np.row_stack
# is gone) go first on the path
if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nproc
  $PY -c "import sys, numpy, numba, numba_cuda, cupy; print(sys.version.split()[0], 'numpy', numpy.__version__, 'numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'cupy', cupy.__version__)"
} 2>&1 | tee "$OUT/machine.txt"
start=$SECONDS
AUTOTAPE_BENCH_THREADS=all timeout ${BENCH_TIMEOUT:-120} $PY -m pytest -q -p no:cacheprovider \
  benchmarks/test_gpu.py --benchmark-json="$OUT/gpu.json" \
  --benchmark-columns=median,iqr,rounds 2>&1 | tee "$OUT/bench.log"
timeout 120 $PY -m pytest -q -p no:cacheprovider benchmarks/test_gpu_tensors.py \
  --benchmark-json="$OUT/gpu_tensors.json" --benchmark-columns=median,iqr,rounds 2>&1 \
  | tee "$OUT/bench_tensors.log"
echo "benchmarks: $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
start=$SECONDS
AUTOTAPE_BENCH_THREADS=all NUMBA_NUM_THREADS=2 timeout 60 taskset -c 0,1 $PY -m pytest \
  -q -p no:cacheprovider benchmarks/test_gpu.py -k cpu_batched --benchmark-json="$OUT/cpu2.json" \
  --benchmark-columns=median,iqr,rounds 2>&1 | tee "$OUT/cpu2.log"
echo "2-core CPU row: $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
start=$SECONDS
timeout ${TEST_TIMEOUT:-250} $PY -m pytest -q -p no:cacheprovider -m cuda -n 8 \
  tests/test_codegen.py tests/test_gpu.py tests/test_device_tensors.py 2>&1 | tee "$OUT/tests.log"
echo "tests: $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
start=$SECONDS
timeout 60 $PY tests/ptx_report.py > "$OUT/ptx.json" 2> "$OUT/ptx.err"
echo "ptx report: $((SECONDS - start)) s" | tee -a "$OUT/machine.txt"
