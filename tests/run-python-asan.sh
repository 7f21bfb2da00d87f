#!/usr/bin/env bash
# The Python lifetime and stress tests over an AddressSanitizer/UBSan build of libdevmm and its
# plugins: Python itself is not instrumented, so the ASan runtime is preloaded. Leak checking is
# off (CPython keeps its own allocations at exit); the tests check the balance of every
# allocation through statistics instead, and ASan catches any use-after-free or double free.
#   run-python-asan.sh <asan build dir>
set -euo pipefail
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
export LD_PRELOAD
LD_PRELOAD=$(gcc -print-file-name=libasan.so)
export DEVMM_LIBRARY="$root/$build/core/libdevmm.so.0" DEVMM_PLUGIN_PATH="$root/$build/plugins"
export PYTHONPATH="$root/python" PYTHONDONTWRITEBYTECODE=1 XDG_CONFIG_HOME=/nonexistent-devmm-test
export PATH="$root/$build/tools:$PATH"  # devmm-replay, for test_observability.py
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
"$root/.venv/bin/python" -m pytest -q -s -p no:cacheprovider \
  "$root/tests/python/test_lifetime.py" "$root/tests/python/test_stress.py" \
  "$root/tests/python/test_untrusted.py" "$root/tests/python/test_sim.py" \
  "$root/tests/python/test_observability.py"
