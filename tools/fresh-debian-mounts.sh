#!/usr/bin/env bash
# fresh-debian-mounts.sh — sourced by tools/fresh-debian.sh (and its test): the kernel file
# systems a chroot needs, and the cleanup that removes the chroot afterwards.
#   fresh_debian_mount ROOT          /proc, /dev, /sys inside ROOT
#   fresh_debian_cleanup WORK ROOT   unmounts them and removes WORK (ROOT lies inside WORK)

fresh_debian_mount() {
  local root=$1
  mount -t proc proc "$root/proc"
  # rbind brings the host's submounts (/dev/pts, /sys/fs/cgroup...); rslave keeps our unmounts
  # of them from propagating back to the host where the mounts are shared
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  mount --rbind /sys "$root/sys"
  mount --make-rslave "$root/sys"
}

# The mount points under a directory, from the kernel's table (octal escapes as it writes them).
_fresh_debian_mounts_under() {
  local dir=${1// /\\040}
  awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo
}

# Unmounts /proc, /dev and /sys under ROOT, then removes WORK, never crossing into another file
# system (--one-file-system), and only once nothing is mounted under WORK any more: if an unmount
# fails, WORK stays, and the message says what is still mounted (exit status 1).
fresh_debian_cleanup() {
  local work=$1 root=$2 m left
  for m in proc sys dev; do
    umount -R "$root/$m" 2>/dev/null || umount -lR "$root/$m" 2>/dev/null || true
  done
  left=$(_fresh_debian_mounts_under "$work")
  if [ -n "$left" ]; then
    echo "fresh-debian: not removing $work: still mounted under $work: $(tr '\n' ' ' <<<"$left")" >&2
    return 1
  fi
  rm -rf --one-file-system "$work"
}
