#!/usr/bin/env bash
# The C runner removes what its tests left in the temporary directory (tests/c/runner.c): the
# config suite, whose tests end as nobody and fail before their unlink when they fail, is run
# with TMPDIR set to an empty directory, which must be empty again afterwards.
#   test-runner-leaves-nothing.sh TEST_CORE
set -euo pipefail
core=${1:?usage: test-runner-leaves-nothing.sh TEST_CORE}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 1777 "$dir"
TMPDIR=$dir "$core" config
left=$(ls -A "$dir")
if [ -n "$left" ]; then
  echo "FAIL: the config suite left in TMPDIR: $left"
  exit 1
fi
echo "the config suite left nothing in TMPDIR"
