#!/usr/bin/env bash
# Runs each libFuzzer target for a bounded time from its seed corpus (copied: the repository's
# corpus is never written). Any non-zero exit of a fuzzer (a crash, leak, timeout, out-of-memory
# or sanitizer report) fails the run; its log and reproducers are left in the working directory
# printed below, to be turned into a regression test.
#   run-fuzz.sh <fuzz build dir> <seconds> <target>...
set -euo pipefail
build=$1 seconds=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d -t devmm-fuzz.XXXXXX)
export DEVMM_PLUGIN_PATH="$root/$build/plugins" XDG_CONFIG_HOME=/nonexistent-devmm-fuzz
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=0
for t in "$@"; do
  mkdir -p "$work/$t"
  cp "$root/tests/fuzz/corpus/${t#fuzz_}/"* "$work/$t/"
  echo "=== $t for ${seconds}s"
  rc=0
  (cd "$work" && TMPDIR="$work" "$root/$build/tests/fuzz/$t" -max_total_time="$seconds" \
    -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/$t-" \
    "$work/$t" >"$work/$t.log" 2>&1) || rc=$?
  # the summary (display only: the verdict is the fuzzer's exit status)
  grep -E "^(stat::number_of_executed_units|stat::peak_rss|#[0-9]+[[:space:]]+DONE)|ERROR|SUMMARY" \
    "$work/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: $t exited with status $rc; its log ($work/$t.log) ends:"
    tail -n 30 "$work/$t.log"
    ls "$work/$t"-* 2>/dev/null || true
    failed=$((failed + 1))
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: $failed of $# targets failed; logs and reproducers in $work"
  exit 1
fi
echo "fuzz: $# targets, ${seconds}s each, no crash, leak, timeout or out-of-memory"
rm -rf "$work"
