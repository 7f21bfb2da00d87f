#!/usr/bin/env bash
# make wheel's build step: the sdist and a wheel built from it for the wheel's floor, glibc 2.28
# (manylinux_2_28, ADR 43), on a Debian 12 build machine whose own glibc is 2.36.
#   tools/wheel-build.sh OUTDIR     (make wheel: OUTDIR is dist/raw; .venv-wheel must exist)
# The C code is compiled by Zig's C compiler (PyPI `ziglang`, in .venv-wheel) against glibc
# 2.28's symbol versions: the wrapper build-wheel/bin/zcc. libdevmm-torch stays C++ from the
# system g++ on the shared libstdc++, the one torch loads (ADR 11, ADR 43); it references
# nothing newer than GLIBC_2.14 (tools/wheel_checks.py --wheel checks every ELF).
# libltdl is rebuilt from Debian 12's own source package (`apt-get source libtool`, with a
# deb-src list of its own in build-wheel/, never the machine's apt configuration) with the same
# compiler, because Debian's libltdl.so.7 needs GLIBC_2.34; auditwheel vendors that build.
# libinih.so.1 is Debian's (it needs GLIBC_2.4 only). Headers that zig's libc lacks (ini.h, HIP)
# come from /usr/include, searched after zig's own libc headers (-idirafter).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/wheel-build.sh OUTDIR}
venv=$PWD/.venv-wheel
scratch=$PWD/build-wheel
glibc=2.28
ltdl_version=2.4.7-7~deb12u1  # Debian 12's libltdl7 (LICENSES/THIRD-PARTY.md names it)

# the wheel carries the cuda plugin (wheel_checks.py --wheel refuses one without it), which links
# the CUDA 13 toolkit's static runtime: say so now, not after the build
cudart=/usr/local/cuda/lib64/libcudart_static.a  # meson_options.txt toolkit_dir's default
if [ ! -f "$cudart" ]; then
  echo "wheel-build: no $cudart: the wheel's cuda plugin needs the CUDA 13 toolkit in" \
    "/usr/local/cuda at build time (NVIDIA's CUDA 13 toolkit for Debian 12; the user's machine" \
    "needs none)" >&2
  exit 2
fi
mkdir -p "$scratch/bin" "$scratch/lib"
cat >"$scratch/bin/zcc" <<EOF
#!/bin/sh
exec "$venv/bin/python" -m ziglang cc -target x86_64-linux-gnu.$glibc "\$@"
EOF
chmod +x "$scratch/bin/zcc"

# libltdl, once per version (build-wheel/ltdl/.done-<version>)
ltdl=$scratch/ltdl
if [ ! -f "$ltdl/.done-$ltdl_version" ]; then
  echo "wheel-build: libltdl $ltdl_version from Debian's source package, for glibc $glibc"
  rm -rf "$ltdl"
  mkdir -p "$ltdl/apt/lists/partial" "$ltdl/src"
  # the Debian mirror this machine's apt already uses (as tools/fresh-debian.sh finds it)
  mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' \
    /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  printf 'deb-src %s bookworm main\n' "${mirror:-http://deb.debian.org/debian}" \
    >"$ltdl/apt/sources.list"
  apt=(-o "Dir::Etc::SourceList=$ltdl/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
       -o "Dir::State::Lists=$ltdl/apt/lists" -o Debug::NoDropPrivs=true)
  apt-get "${apt[@]}" update -qq
  (cd "$ltdl/src" && apt-get "${apt[@]}" source -qq --download-only "libtool=$ltdl_version" &&
     dpkg-source -x "libtool_$ltdl_version.dsc" libtool >/dev/null)
  (cd "$ltdl/src/libtool/libltdl" &&
     CC="$scratch/bin/zcc" CFLAGS="-O2 -g0" ./configure -q --prefix="$ltdl/prefix" \
       --disable-static --enable-ltdl-install >/dev/null &&
     make -s -j2 >/dev/null && make -s install >/dev/null)
  touch "$ltdl/.done-$ltdl_version"
fi
# the link directory holds only the two libraries the build takes from outside zig's libc
ln -sf "$ltdl/prefix/lib/libltdl.so" "$scratch/lib/libltdl.so"
ln -sf /usr/lib/x86_64-linux-gnu/libinih.so "$scratch/lib/libinih.so"

# -g0: zig cc writes debug info unless told not to (gcc's release build has none; ADR 43)
# meson-python builds the sdist's wheel in build isolation; CC, CFLAGS, LDFLAGS pass through
CC="$scratch/bin/zcc" CXX=c++ \
  CFLAGS="-g0 -I$ltdl/prefix/include -idirafter /usr/include" \
  LDFLAGS="-L$scratch/lib" \
  LD_LIBRARY_PATH="$ltdl/prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$venv/bin/python" -m build --outdir "$out" .
