#!/usr/bin/env bash
# The GPU checks, for the lent GPU machine, in one go: devmm-info --check on every device, each
# Python GPU check in a process of its own (a crash or a poisoned CUDA context never hides the
# others), the GPU benchmarks with one PASS/FAIL line per target. Needs build-gpu/ from
# tests/gpu/prepare.sh (carried along). Ends with a summary that repeats every FAIL line, then
# "N passed, N failed, N skipped".
# Time: each check gets CHECK_S (60 s) at most, and all of them together BUDGET_S (300 s): a
# check that would start past the budget is a FAIL saying so, so the whole script ends within
# NEED_S, which its first line prints (the device call's timeout_s; twice that, plus two
# machine start-ups, fits in 15 minutes of device time: one rerun).
set -uo pipefail
CHECK_S=60 BUDGET_S=300
NEED_S=$((BUDGET_S + CHECK_S / 2))
echo "tests/gpu/run.sh needs timeout_s=$NEED_S (checks: ${CHECK_S} s each at most, ${BUDGET_S} s in all)"
deadline=$((SECONDS + BUDGET_S))
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
export LD_LIBRARY_PATH="$root/build-gpu/core:$root/build-gpu/runtime${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVMM_PLUGIN_PATH="$root/build-gpu/plugins"
export DEVMM_LIBRARY="$root/build-gpu/core/libdevmm.so.0"
export DEVMM_CONFIG="$root/tests/gpu/devmm-gpu.ini"
export PYTHONPATH="$root/python"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX would otherwise take 75% of the GPU at first use
passed=0 failed=0 skipped=0
failures=()
result() { # name, status (0 pass, 77 skip, else fail)
  case $2 in
    0) passed=$((passed + 1)); echo "--- PASS $1" ;;
    77) skipped=$((skipped + 1)); echo "--- SKIP $1" ;;
    *) failed=$((failed + 1)); failures+=("FAIL $1"); echo "--- FAIL $1" ;;
  esac
}
# The seconds the next check may take (0: the budget is spent).
allowance() {
  local left=$((deadline - SECONDS))
  [ $left -lt 5 ] && { echo 0; return; }
  echo $((left < CHECK_S ? left : CHECK_S))
}
# Runs a check under its allowance; 124: it timed out (said so), 125: not run (budget spent).
timed() { # command...
  local s
  s=$(allowance)
  if [ "$s" -eq 0 ]; then
    echo "not run: the ${BUDGET_S} s budget of the checks is spent"
    return 125
  fi
  timeout -k 5 "$s" "$@"
  local rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "timed out after $s s"
  return $rc
}
step() { # name, command...
  local name=$1; shift
  echo "=== $name"
  timed "$@"
  result "$name" $?
}
# A benchmark: its output, then one result per "target ...: MET|MISSED" line it printed (a
# missed target is a FAIL even though the benchmark exits 0); no target line at all is a FAIL.
bench() { # name, command...
  local name=$1 out; shift
  echo "=== $name"
  out=$(timed "$@" 2>&1)
  local rc=$?
  echo "$out"
  [ $rc -eq 0 ] || { result "$name (exit $rc)" 1; return; }
  local targets
  targets=$(grep -E '^target .*: (MET|MISSED)$' <<<"$out")
  [ -n "$targets" ] || { result "$name: printed no target line" 1; return; }
  while IFS= read -r line; do
    if [[ $line == *": MET" ]]; then result "$name: ${line%: MET}" 0
    else result "$name: ${line%: MISSED}" 1; fi
  done <<<"$targets"
}
[ -x build-gpu/tools/devmm-info ] || { echo "no build-gpu/: run tests/gpu/prepare.sh here first"; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step "devmm-info --check" build-gpu/tools/devmm-info --check --strict
if ! build-gpu/tools/devmm-info --json | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if any(x["device"].startswith("cuda") for x in d["devices"]) else 1)'; then
  echo "no CUDA device is visible: the GPU checks need one (everything up to here works)"
  echo "$passed passed, $((failed + 1)) failed, $skipped skipped"
  exit 1
fi
# RMM's Python package from the carried wheels, pinned to the librmm the bridge was built with
if timeout 60 python3 -m pip install -q --no-index --no-deps --find-links build-gpu/wheels \
     --target build-gpu/pylib -r build-gpu/wheels/pins.txt >/dev/null 2>&1; then
  export PYTHONPATH="$PYTHONPATH:$root/build-gpu/pylib"
  step "rmm wheels match the bridge's build" python3 -c "
import importlib.metadata as m, sys
want = dict(l.strip().split('==') for l in open('build-gpu/wheels/pins.txt') if '==' in l)
got = {p: m.version(p) for p in want}
print(got); sys.exit(0 if got == want else 1)"
else
  result "install the pinned rmm wheels (build-gpu/wheels/pins.txt)" 1
fi
for c in $(python3 tests/gpu/test_gpu.py --list); do
  step "python: $c" python3 tests/gpu/test_gpu.py "$c"
done
bench "C GPU benchmark" build-gpu/bench/bench-gpu
bench "Python GPU benchmark" python3 tests/gpu/test_gpu.py bench
echo "=== summary ($SECONDS s)"
for f in "${failures[@]+"${failures[@]}"}"; do echo "$f"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
