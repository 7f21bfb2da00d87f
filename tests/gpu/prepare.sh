#!/usr/bin/env bash
# Run HERE (no GPU needed): builds build-gpu/ for the GPU machine — libdevmm, libdevmm-torch,
# the cpu, cuda and rmm plugins, devmm-info, bench-gpu — and copies the runtime libraries the
# GPU machine lacks (libltdl, inih: nothing can be installed there) into build-gpu/runtime/.
# Then:
#   run(command="bash tests/gpu/run.sh", carry=["build-gpu"], timeout_s=480)
set -euo pipefail
cd "$(dirname "$0")/../.."
./tools/deps.sh
[ -f build-gpu/build.ninja ] || meson setup build-gpu -Dbuildtype=release -Dtests=disabled \
  -Dpython_tests=disabled -Drocm=disabled -Dcuda=enabled >/dev/null
ninja -C build-gpu >/dev/null
mkdir -p build-gpu/runtime
for lib in $(ldd build-gpu/core/libdevmm.so.0 build-gpu/plugins/devmm-rmm.so 2>/dev/null |
             awk '/ltdl|inih|librmm|rapids_logger/ {print $3}' | sort -u); do
  cp -L "$lib" build-gpu/runtime/
done
ls build-gpu/runtime
# RMM's Python package for the rmm checks (nothing can be installed from the network there):
# its wheels, pinned to the versions in .venv, which the bridge was built against
# (build-gpu/wheels/pins.txt; run.sh installs exactly those and checks it), cuda-bindings for
# each CPython the GPU machine may have
mkdir -p build-gpu/wheels
py=.venv/bin/python
$py - >build-gpu/wheels/pins.txt <<'PY'
import importlib.metadata as m
for p in ("rmm-cu13", "librmm-cu13", "rapids-logger", "cuda-pathfinder", "cuda-bindings"):
    print(f"{p}=={m.version(p)}")
PY
cat build-gpu/wheels/pins.txt
grep -v '^cuda-bindings==' build-gpu/wheels/pins.txt |
  xargs $py -m pip download -q --no-deps -d build-gpu/wheels
for v in 3.11 3.12 3.13; do
  $py -m pip download -q --no-deps --only-binary=:all: --python-version "$v" \
    -d build-gpu/wheels "$(grep '^cuda-bindings==' build-gpu/wheels/pins.txt)"
done
ls build-gpu/wheels
du -sh build-gpu | cut -f1
