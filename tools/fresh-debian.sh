#!/usr/bin/env bash
# fresh-debian.sh — runs a command as root in a brand-new Debian 12 (debootstrap minbase: no
# compiler, no Python, nothing of devmm's), with the files of COPY_DIR under /extra.
#
#   tools/fresh-debian.sh COPY_DIR "apt-get install -y python3 && ..."
#
# Needs root (debootstrap, chroot, mounts) and the network to the Debian mirror this machine's
# apt uses (and PyPI, for commands that pip install). The base system is made once and cached in
# $FRESH_DEBIAN_CACHE (default: ~/.cache/devmm-fresh-debian); each run starts from a pristine copy
# in a temporary directory that is removed afterwards. Prints the command's output; exits with
# its status.
set -euo pipefail
copy=${1:?usage: fresh-debian.sh COPY_DIR COMMAND}
cmd=${2:?usage: fresh-debian.sh COPY_DIR COMMAND}
[ "$(id -u)" = 0 ] || { echo "fresh-debian: needs root (debootstrap, chroot)" >&2; exit 2; }
cache=${FRESH_DEBIAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/devmm-fresh-debian}
mkdir -p "$cache"
if [ ! -x "$cache/rootfs/bin/bash" ]; then
  command -v debootstrap >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  # the Debian mirror this machine's apt already uses (first URIs:/deb entry of its sources)
  mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' \
    /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  echo "fresh-debian: making a Debian 12 base system with debootstrap (once)" >&2
  rm -rf "$cache/rootfs.new"
  debootstrap --variant=minbase bookworm "$cache/rootfs.new" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { echo "fresh-debian: debootstrap failed, see $cache/debootstrap.log" >&2; exit 2; }
  mv "$cache/rootfs.new" "$cache/rootfs"
fi
work=$(mktemp -d "$cache/run.XXXXXX")
root=$work/root
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  for m in sys dev proc; do umount -R "$root/$m" 2>/dev/null || umount -lR "$root/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cp -a "$cache/rootfs" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# this network's pip settings and extra certificate authorities (a user's machine needs none)
if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$root/etc/pip.conf"; fi
mkdir -p "$root/usr/local/share/ca-certificates" "$root/extra"
find /usr/local/share/ca-certificates -maxdepth 1 -name '*.crt' -exec cp {} "$root/usr/local/share/ca-certificates/" \; 2>/dev/null || true
cp -a "$copy"/. "$root/extra/"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
set +e
chroot "$root" /usr/bin/env -i HOME=/root DEBIAN_FRONTEND=noninteractive \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$cmd"
rc=$?
set -e
exit $rc
