#!/usr/bin/env bash
# The vendor's path: install devmm into a temporary root, build examples/plugin-template against
# the *installed* SDK only (pkg-config devmm), load it through a devmm.ini, use it.
#   test-example-plugin.sh <source root> <build root> <python>
# (python: the interpreter Meson found at configure time, an absolute path, not whatever
# python3 comes first on PATH)
set -euo pipefail
src=$1 build=$2 python=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DESTDIR="$tmp/root" meson install -C "$build" --quiet --no-rebuild >/dev/null
pc=$(find "$tmp/root" -name devmm.pc -print -quit)
[ -n "$pc" ] || { echo "FAIL: no devmm.pc installed"; exit 1; }
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR="$tmp/root"
PKG_CONFIG_PATH=$(dirname "$pc")
echo "pkg-config devmm --cflags: $(pkg-config devmm --cflags)"
# nothing from the source tree: the example sees only what was installed
cp -r "$src/examples/plugin-template" "$tmp/example"
meson setup "$tmp/example/build" "$tmp/example" >/dev/null
ninja -C "$tmp/example/build" >/dev/null
so="$tmp/example/build/devmm-example.so"
[ -f "$so" ] || { echo "FAIL: the example plugin was not built"; exit 1; }
chmod -R go-w "$tmp"
cat >"$tmp/devmm.ini" <<INI
[devmm]
plugins = cpu, example
plugin_path = $tmp/example/build

[device cpu]
resource = example.arena
size = 8MiB
adaptors = statistics
INI
out=$("$build/tools/devmm-info" --check --strict --config "$tmp/devmm.ini")
echo "$out"
grep -q "stack: statistics(example.arena)" <<<"$out" || { echo "FAIL: example.arena not used"; exit 1; }
grep -q "check: allocate/write/read/free 1 MiB through statistics(example.arena): ok" <<<"$out" ||
  { echo "FAIL: round trip through the example plugin"; exit 1; }
echo "example plugin: built against the installed SDK, loaded and used: ok"

# the installed Python package: its _build_config names the installed libdir, and with the
# installed library on the loader's path (as ldconfig would put it) it works with no DEVMM_LIBRARY
cfg=$(find "$tmp/root" -path '*devmm/_build_config.py' -print -quit)
[ -n "$cfg" ] || { echo "FAIL: devmm/_build_config.py not installed"; exit 1; }
libdir=$("$python" -c 'import sys, runpy; print(runpy.run_path(sys.argv[1])["LIBDIR"])' "$cfg")
[ -f "$tmp/root$libdir/libdevmm.so.0" ] || { echo "FAIL: LIBDIR '$libdir' has no libdevmm.so.0"; exit 1; }
site=$(dirname "$(dirname "$cfg")")
env -u DEVMM_LIBRARY PYTHONPATH="$site" LD_LIBRARY_PATH="$tmp/root$libdir" \
  DEVMM_PLUGIN_PATH="$tmp/root$libdir/devmm" "$python" -c '
import devmm, sys
t = devmm.empty((2, 3), "float32")
assert t.strides == (3, 1), t.strides
assert devmm._lib.LIBRARY_PATH.endswith("libdevmm.so.0"), devmm._lib.LIBRARY_PATH
print("installed python package: ok,", devmm.devices()[0]["stack"])
'

