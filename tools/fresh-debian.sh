#!/usr/bin/env bash
# fresh-debian.sh — runs a command as root in a brand-new Debian (debootstrap minbase: no
# compiler, no Python, nothing of devmm's), with the files of COPY_DIR under /extra.
#
#   tools/fresh-debian.sh COPY_DIR "apt-get install -y python3 && ..."
#   FRESH_DEBIAN_SUITE=bullseye tools/fresh-debian.sh COPY_DIR "..."
#
# FRESH_DEBIAN_SUITE: bookworm (the default: Debian 12, glibc 2.36, Python 3.11) or bullseye
# (Debian 11, glibc 2.31, Python 3.9: the oldest system the wheel claims).
# Needs root (debootstrap, chroot, mounts) and the network to the Debian mirror this machine's
# apt uses (and PyPI, for commands that pip install). The base system is made once per suite and
# cached in $FRESH_DEBIAN_CACHE/<suite> (default: ~/.cache/devmm-fresh-debian/<suite>); each run
# starts from a pristine copy in a temporary directory that is removed afterwards
# (tools/fresh-debian-mounts.sh: never through a mount). Prints the command's output; exits with
# its status (3 if the run directory could not be removed).
set -euo pipefail
copy=${1:?usage: fresh-debian.sh COPY_DIR COMMAND}
cmd=${2:?usage: fresh-debian.sh COPY_DIR COMMAND}
[ "$(id -u)" = 0 ] || { echo "fresh-debian: needs root (debootstrap, chroot)" >&2; exit 2; }
suite=${FRESH_DEBIAN_SUITE:-bookworm}
case $suite in
  bookworm) release="Debian 12" ;;
  bullseye) release="Debian 11" ;;
  *) echo "fresh-debian: FRESH_DEBIAN_SUITE is bookworm or bullseye, not '$suite'" >&2; exit 2 ;;
esac
cache=${FRESH_DEBIAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/devmm-fresh-debian}/$suite
mkdir -p "$cache"
if [ ! -x "$cache/rootfs/bin/bash" ]; then
  command -v debootstrap >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  # the Debian mirror this machine's apt already uses (first URIs:/deb entry of its sources)
  mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' \
    /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  echo "fresh-debian: making a $release ($suite) base system with debootstrap (once)" >&2
  rm -rf "$cache/rootfs.new"
  debootstrap --variant=minbase "$suite" "$cache/rootfs.new" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { echo "fresh-debian: debootstrap failed, see $cache/debootstrap.log" >&2; exit 2; }
  mv "$cache/rootfs.new" "$cache/rootfs"
fi
# shellcheck source=tools/fresh-debian-mounts.sh
. "$(dirname "$0")/fresh-debian-mounts.sh"
work=$(mktemp -d "$cache/run.XXXXXX")
root=$work/root
trap 'fresh_debian_cleanup "$work" "$root" || exit 3' EXIT  # 3: the run directory stayed
cp -a "$cache/rootfs" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# this network's pip settings and extra certificate authorities (a user's machine needs none)
if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$root/etc/pip.conf"; fi
mkdir -p "$root/usr/local/share/ca-certificates" "$root/extra"
find /usr/local/share/ca-certificates -maxdepth 1 -name '*.crt' -exec cp {} "$root/usr/local/share/ca-certificates/" \; 2>/dev/null || true
cp -a "$copy"/. "$root/extra/"
fresh_debian_mount "$root"
set +e
chroot "$root" /usr/bin/env -i HOME=/root DEBIAN_FRONTEND=noninteractive \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$cmd"
rc=$?
set -e
exit $rc
