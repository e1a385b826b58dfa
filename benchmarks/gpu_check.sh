#!/usr/bin/env bash
# The checks of the numba.cuda back end that need an NVIDIA GPU, as one run for a machine that
# has one (CI never does; there the CUDA tests run under the simulator, and tests/test_cuda_ptx.py
# compiles every kernel to PTX):
#   - the CUDA test modules on the real device (NUMBA_ENABLE_CUDASIM=0: in this process);
#   - the Lennard-Jones benchmark (1024 and 8192 particles, float32 and float64) against a
#     hand-written numba.cuda kernel, with the achieved GB/s against the device's bandwidth;
#   - the first call of a fresh process, cold, then warm from the kernel cache;
#   - run.py's LJ and MLP PINN problems with Quabla on "cuda".
# Prints versions first. A failing step does not stop the others; the exit status is the
# number of failing steps.
#
#     bash benchmarks/gpu_check.sh 2>&1 | tee gpu.log
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1 NUMBA_ENABLE_CUDASIM=0
export QUABLA_CACHE_DIR="${QUABLA_CACHE_DIR:-$(mktemp -d)}"
PYTHON="${PYTHON:-python3}"
failed=0
step() {  # step SECONDS COMMAND...: runs COMMAND for at most SECONDS
    local limit="$1"
    shift
    echo "== $*"
    timeout "$limit" "$@" || { echo "== FAILED ($?): $*"; failed=$((failed + 1)); }
}
step 60 "$PYTHON" -c "import sys, numba, numba_cuda, numpy; from numba import cuda
print(sys.version.split()[0], 'numba', numba.__version__, 'numba-cuda', numba_cuda.__version__,
      'numpy', numpy.__version__); cuda.detect()"
# (tests/test_cuda_ptx.py needs no GPU: CI runs it)
step 300 "$PYTHON" -m pytest -q -x -m cuda -p no:cacheprovider tests/test_device_cuda.py \
    tests/test_cuda_fused_loops.py tests/test_trainer_devices.py
step 60 "$PYTHON" benchmarks/cuda_lj.py
step 60 "$PYTHON" benchmarks/cuda_lj.py --float64
step 60 "$PYTHON" benchmarks/cuda_lj.py --first-call   # cold: compiles and stores the kernels
step 60 "$PYTHON" benchmarks/cuda_lj.py --first-call   # warm: loads them from the cache
step 150 "$PYTHON" benchmarks/run.py lj mlp_pinn --device cuda --impls quabla,jax
echo "== $failed step(s) failed"
exit "$failed"
