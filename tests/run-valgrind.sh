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
# nor "setuid", whose probe runs in processes of its own (both run under ASan/UBSan in make asan),
# (the "oom" suite, test-oom, replaces malloc itself: it runs in make test)
suites="error dtype layout resource adaptors statistics limiting tracking logging aligned failure
thread_safe registry buffer stress plugins faults untrusted interchange"
logs=$(mktemp -d -t devmm-valgrind.XXXXXX)
failed=0
n=0
for s in $suites; do
  n=$((n + 1))
  if $VALGRIND "$root/$build/tests/test-core" "$s" >"$logs/$s.log" 2>&1; then
    echo "valgrind $s: clean"
  else
    echo "valgrind $s: FAILED"; cat "$logs/$s.log"; failed=$((failed + 1))
  fi
done
echo "valgrind: $n suites, $failed failed"
rm -rf "$logs"
[ $failed -eq 0 ]
