#!/usr/bin/env bash
# Runs each libFuzzer target for a bounded time from its seed corpus (copied: the repository's
# corpus is never written). A crash, leak or sanitizer report fails the run; the reproducer is
# left in the working directory printed below, to be turned into a regression test.
#   run-fuzz.sh <fuzz build dir> <seconds> <target>...
set -euo pipefail
build=$1 seconds=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/devmm-fuzz.XXXXXX)
export DEVMM_PLUGIN_PATH="$root/$build/plugins" XDG_CONFIG_HOME=/nonexistent-devmm-fuzz
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for t in "$@"; do
  mkdir -p "$work/$t"
  cp "$root/tests/fuzz/corpus/${t#fuzz_}/"* "$work/$t/"
  echo "=== $t for ${seconds}s"
  (cd "$work" || exit; "$root/$build/tests/fuzz/$t" -max_total_time="$seconds" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=2048 "$work/$t" 2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss|#[0-9]+[[:space:]]+DONE)|ERROR|SUMMARY|crash-|leak-" || true)
  ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* >/dev/null 2>&1 &&
    { echo "FAIL: $t found a problem; reproducers in $work"; exit 1; }
done
echo "fuzz: $# targets, ${seconds}s each, no crash (work dir $work)"
rm -rf "$work"
