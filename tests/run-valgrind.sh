#!/usr/bin/env bash
# Every Check suite of test-core under valgrind memcheck, without fork (CK_FORK=no) so that
# valgrind follows each test; $VALGRIND holds the valgrind command line.
#   run-valgrind.sh <build dir>
set -euo pipefail
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
export DEVMM_PLUGIN_PATH="$root/$build/plugins" DEVMM_TEST_PLUGINS="$root/$build/tests/plugins"
export DEVMM_TEST_CONFIGS="$root/tests/config" XDG_CONFIG_HOME=/nonexistent-devmm-test
export DEVMM_LOG_LEVEL=error CK_FORK=no CK_VERBOSITY=silent
# not "config": it changes uid and directory, which without fork would leak into later tests,
# nor "setuid", whose probe runs in processes of its own (both run under ASan/UBSan in make asan)
# (the "host_oom" suite, test-host-oom, replaces malloc itself: it runs in make test)
suites="error dtype layout resource adaptors statistics limiting tracking logging aligned failure
thread_safe registry buffer stress plugins faults untrusted interchange log oom tracking_history"
failed=0
n=0
log=$(mktemp -d -t devmm-valgrind.XXXXXX)
run_suite() { # binary suite
  n=$((n + 1))
  if $VALGRIND "$root/$build/tests/$1" "$2" >"$log/$2.log" 2>&1; then
    echo "valgrind $2: clean"
  else
    echo "valgrind $2: FAILED"; cat "$log/$2.log"; failed=$((failed + 1))
  fi
}
for s in $suites; do
  run_suite test-core "$s"
done
# the simulated accelerator's suites (threads, memfd mappings, gpu.c over them)
for s in sim_runtime sim_gpu sim_core; do
  run_suite test-core "$s"
done
echo "valgrind: $n suites, $failed failed"
rm -rf "$log"
[ $failed -eq 0 ]
