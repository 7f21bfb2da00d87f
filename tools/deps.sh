#!/usr/bin/env bash
# Installs what devmm's build and tests need, only what is missing: Debian packages, then the
# PyPI test venv (.venv: numpy >= 2.3 and JAX, the versioned-DLPack consumers). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential meson ninja-build pkg-config         # build
  libltdl-dev libinih-dev check                        # libltdl, inih, Check
  libamdhip64-dev                                      # ROCm plugin (compiles without a GPU)
  cppcheck clang-format python3-pyflakes shellcheck    # make lint
  python3 python3-venv python3-numpy python3-torch     # legacy-DLPack consumers (numpy 1.24, torch 1.13)
  python3-pytest
  clang libclang-rt-14-dev valgrind                    # sanitizers, fuzzing, valgrind
  chromium                                             # the timeline's browser test (headless)
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  [[ $p == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The PyPI venv, created with Debian's python3 so it is the same interpreter everywhere.
VENV=.venv
REQ=tools/requirements-test.txt
if [ -f "$REQ" ]; then
  stamp="$VENV/.devmm-$(sha256sum "$REQ" | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo "deps: creating the test venv $VENV from $REQ"
    rm -rf "$VENV"
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -r "$REQ"
    touch "$stamp"
  fi
fi
