#!/usr/bin/env bash
# Run HERE (no GPU needed): builds build-gpu/ for the GPU machine — libdevmm, the cpu and cuda
# plugins, devmm-info, bench-gpu — and copies the runtime libraries the GPU machine lacks
# (libltdl, inih: nothing can be installed there) into build-gpu/runtime/. Then:
#   run(command="bash tests/gpu/run.sh", carry=["build-gpu"], timeout_s=480)
set -euo pipefail
cd "$(dirname "$0")/../.."
./tools/deps.sh
[ -f build-gpu/build.ninja ] || meson setup build-gpu -Dbuildtype=release -Dtests=false \
  -Dpython_tests=disabled -Drocm=disabled -Dcuda=enabled >/dev/null
ninja -C build-gpu >/dev/null
mkdir -p build-gpu/runtime
for lib in $(ldd build-gpu/core/libdevmm.so.0 build-gpu/plugins/devmm-rmm.so 2>/dev/null |
             awk '/ltdl|inih|librmm|rapids_logger/ {print $3}' | sort -u); do
  cp -L "$lib" build-gpu/runtime/
done
ls build-gpu/runtime
du -sh build-gpu | cut -f1
