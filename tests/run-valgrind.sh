#!/usr/bin/env bash
# The Check suites (tests/c/suites.txt) under valgrind memcheck, without fork (CK_FORK=no) so
# that valgrind follows each test; $VALGRIND holds the valgrind command line.
#   run-valgrind.sh <build dir> [SUITE...]   (default: every suite below)
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 <build dir> [SUITE...]" >&2
  exit 2
fi
build=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
export DEVMM_PLUGIN_PATH="$root/$build/plugins" DEVMM_TEST_PLUGINS="$root/$build/tests/plugins"
export DEVMM_TEST_CONFIGS="$root/tests/config" XDG_CONFIG_HOME=/nonexistent-devmm-test
export DEVMM_LOG_LEVEL=error CK_FORK=no CK_VERBOSITY=silent
# ipc_tensor's Python side (as tests/meson.build sets them)
export DEVMM_TEST_PYTHON=${DEVMM_TEST_PYTHON:-$(command -v python3)} DEVMM_TEST_PYTHONPATH="$root/python"
export DEVMM_TEST_LIBRARY="$root/$build/core/libdevmm.so"
# Each line of tests/c/suites.txt but those flagged `novalgrind` (the reason is beside each
# there): "NAME EXECUTABLE", where a suite flagged `alone` has an executable of its own.
suites=$(sed -e 's/#.*//' "$root/tests/c/suites.txt" | awk 'NF && !/[[:space:]]novalgrind([[:space:]]|$)/ {
  exe = "test-core"; if ($0 ~ /[[:space:]]alone([[:space:]]|$)/) { exe = "test-" $1; gsub(/_/, "-", exe) }
  print $1, exe }')
if [ $# -gt 0 ]; then # only the suites named, each of which must be in the list
  wanted=""
  for w in "$@"; do
    line=$(awk -v w="$w" '$1 == w' <<<"$suites")
    [ -n "$line" ] || { echo "run-valgrind.sh: no suite '$w' to run under valgrind" >&2; exit 2; }
    wanted+="$line"$'\n'
  done
  suites=${wanted%$'\n'}
fi
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
while read -r s exe; do
  run_suite "$exe" "$s"
done <<<"$suites"
echo "valgrind: $n suites, $failed failed"
rm -rf "$log"
[ $failed -eq 0 ]
