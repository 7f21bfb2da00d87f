#!/usr/bin/env bash
# The GPU checks, for the lent GPU machine, in one go (well under 6 minutes): devmm-info
# --check on every device, the Python GPU checks (CUDA kinds, DLPack/CAI hand-off to torch,
# CuPy and JAX, streams, adaptor stacks), and the GPU benchmarks. Needs build-gpu/ from
# tests/gpu/prepare.sh (carried along). Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
export LD_LIBRARY_PATH="$root/build-gpu/core:$root/build-gpu/runtime${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVMM_PLUGIN_PATH="$root/build-gpu/plugins"
export DEVMM_LIBRARY="$root/build-gpu/core/libdevmm.so.0"
export DEVMM_CONFIG="$root/tests/gpu/devmm-gpu.ini"
export PYTHONPATH="$root/python"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX would otherwise take 75% of the GPU at first use
passed=0 failed=0
step() { # name, command...
  local name=$1; shift
  echo "=== $name"
  if "$@"; then passed=$((passed + 1)); echo "--- $name: PASS"
  else failed=$((failed + 1)); echo "--- $name: FAIL"; fi
}
[ -x build-gpu/tools/devmm-info ] || { echo "no build-gpu/: run tests/gpu/prepare.sh here first"; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step "devmm-info --check" build-gpu/tools/devmm-info --check --strict
if ! build-gpu/tools/devmm-info --json | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if any(x["device"].startswith("cuda") for x in d["devices"]) else 1)'; then
  echo "no CUDA device is visible: the GPU checks need one (everything up to here works)"
  echo "$passed passed, $((failed + 1)) failed"
  exit 1
fi
# RMM's Python package from the carried wheels, for the rmm.current sharing check
python3 -m pip install -q --no-index --no-deps --find-links build-gpu/wheels \
  --target build-gpu/pylib rmm-cu13 librmm-cu13 rapids-logger cuda-bindings cuda-pathfinder \
  >/dev/null 2>&1 || echo "(could not install rmm-cu13 from build-gpu/wheels)"
export PYTHONPATH="$PYTHONPATH:$root/build-gpu/pylib"
step "python GPU checks" timeout 240 python3 tests/gpu/test_gpu.py
step "torch routed through devmm" timeout 60 python3 tests/gpu/test_gpu.py torch-routing
step "C GPU benchmark" timeout 120 build-gpu/bench/bench-gpu
step "Python GPU benchmark" timeout 120 python3 tests/gpu/test_gpu.py bench
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
