#!/usr/bin/env bash
# Installs what devmm needs, only what is missing. Idempotent.
#   tools/deps.sh build   what building and running need (make run): compiler, Meson, ninja,
#                         libltdl, inih — nothing else
#   tools/deps.sh test    (default; make deps, make test, make verify) the build's, plus every
#                         test tool: Check, HIP headers, CMake, linters, sanitizers, valgrind,
#                         Debian's numpy/torch, and the PyPI test venv .venv (numpy >= 2.3, JAX,
#                         RMM wheels)
#   tools/deps.sh wheel   (make wheel) the build's, plus HIP headers (the ROCm plugin goes into
#                         the wheel), python3-venv, the wheel tools venv .venv-wheel (with Zig's
#                         C compiler) and what rebuilding libltdl from source takes
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-test}

BUILD_PACKAGES=(
  build-essential meson ninja-build pkg-config         # build
  libltdl-dev libinih-dev                              # libltdl, inih
)
APT_PACKAGES=(                                         # make test / make verify
  "${BUILD_PACKAGES[@]}"
  check                                                # the C suites
  libamdhip64-dev                                      # ROCm plugin (compiles without a GPU)
  cppcheck clang-format python3-pyflakes shellcheck    # make lint
  python3 python3-venv python3-numpy python3-torch     # legacy-DLPack consumers (numpy 1.24, torch 1.13)
  python3-pytest
  acl                                                  # setfacl: the trust_acl suite
  cmake                                                # the example plugin's CMake build
  clang libclang-rt-14-dev valgrind                    # sanitizers, fuzzing, valgrind
  chromium                                             # the timeline's browser test (headless)
)
WHEEL_PACKAGES=("${BUILD_PACKAGES[@]}" libamdhip64-dev python3 python3-venv
                dpkg-dev xz-utils autoconf automake)   # libltdl from source (wheel-build.sh)

case $mode in
  build) wanted=("${BUILD_PACKAGES[@]}") ;;
  test) wanted=("${APT_PACKAGES[@]}") ;;
  wheel) wanted=("${WHEEL_PACKAGES[@]}") ;;
  *) echo "usage: tools/deps.sh [build|test|wheel]" >&2; exit 2 ;;
esac

missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps ($mode): installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A PyPI venv made with Debian's python3 (the same interpreter everywhere), rebuilt when its
# requirements file changes.
venv() {
  local dir=$1 req=$2 stamp
  stamp="$dir/.devmm-$(sha256sum "$req" | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo "deps ($mode): creating the venv $dir from $req"
    rm -rf "$dir"
    /usr/bin/python3 -m venv "$dir"
    "$dir/bin/pip" install -q --upgrade pip
    "$dir/bin/pip" install -q -r "$req"
    touch "$stamp"
  fi
}
case $mode in
  test) venv .venv tools/requirements-test.txt ;;
  wheel) venv .venv-wheel tools/requirements-wheel.txt ;;
esac
