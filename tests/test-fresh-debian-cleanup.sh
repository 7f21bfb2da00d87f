#!/usr/bin/env bash
# tools/fresh-debian.sh's cleanup never deletes through a mount: with the chroot's /dev still
# mounted (its unmount refused), the files under it survive and the cleanup says why it left
# the directory; once unmounted, the directory goes. The host's /dev is stood in for by a tmpfs
# (nothing of the real /dev is touched). Needs root and mount(8); otherwise it skips (77).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (mount)"; exit 77; }
# shellcheck source=tools/fresh-debian-mounts.sh
. "$src/tools/fresh-debian-mounts.sh"
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
root=$work/root
mkdir -p "$root/dev" "$root/sys" "$root/proc" "$root/etc"
if ! mount -t tmpfs devmm-test-dev "$root/dev" 2>/dev/null; then
  rm -rf "$work"
  echo "SKIP: cannot mount a tmpfs here"
  exit 77
fi
trap 'command umount "$root/dev" 2>/dev/null || true; rm -rf --one-file-system "$work"' EXIT
echo "a device node of the host" >"$root/dev/sentinel"

# 1. the unmount fails (a busy mount): nothing under it may be deleted
umount() { return 32; }
set +e
out=$(fresh_debian_cleanup "$work" "$root" 2>&1)
rc=$?
set -e
unset -f umount
[ -f "$root/dev/sentinel" ] || fail "the cleanup deleted a file under a mounted /dev"
[ $rc -ne 0 ] || fail "the cleanup left $work behind but returned 0"
grep -qF "still mounted under $work" <<<"$out" || fail "no reason given: $out"

# 2. unmounted: the directory goes
fresh_debian_cleanup "$work" "$root" || fail "cleanup after unmounting: exit $?"
[ ! -e "$work" ] || fail "$work is still there"
echo "fresh-debian cleanup: ok"
