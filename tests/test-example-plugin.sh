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
grep -q "stack: statistics(example.arena(8388608))" <<<"$out" || { echo "FAIL: example.arena not used"; exit 1; }
# the check copies and fills through the host's memmove/memset: the example has neither op
grep -q "check: allocate/write/read/free 1 MiB through statistics(example.arena(8388608)): ok" <<<"$out" ||
  { echo "FAIL: round trip through the example plugin"; exit 1; }
grep -Eq "^  example.arena +cpu +a bump allocator over one block$" <<<"$out" ||
  { echo "FAIL: the kind's description is not shown"; exit 1; }
grep -Eq "^ +size: the block's size" <<<"$out" || { echo "FAIL: the kind's option is not shown"; exit 1; }
grep -A1 "^  example " <<<"$out" | grep -Eq "^ +loaded: 0 devices, 1 resource kind$" ||
  { echo "FAIL: a kinds-only plugin should load with 0 devices and no complaint"; exit 1; }
echo "example plugin: built against the installed SDK, loaded and used: ok"

# installed where pkg-config's plugindir says, it is found by its short name with no plugin_path
plugindir=$(pkg-config --variable=plugindir devmm)
case $plugindir in "$tmp/root"/*) ;; *) plugindir="$tmp/root$plugindir" ;; esac
[ -f "$plugindir/devmm-cpu.so" ] || { echo "FAIL: plugindir '$plugindir' has no devmm-cpu.so"; exit 1; }
# the example's meson.build (as plugins.md shows it) installs into plugindir itself
DESTDIR="$tmp/vendor" meson install -C "$tmp/example/build" --quiet >/dev/null
installed=$(find "$tmp/vendor" -name devmm-example.so -print -quit)
case $installed in
  */"$(basename "$(dirname "$plugindir")")"/devmm/devmm-example.so) ;;
  *) echo "FAIL: meson install put the example at '$installed', not under plugindir '$plugindir'"; exit 1 ;;
esac
install -m 644 "$so" "$plugindir/"
chmod -R go-w "$tmp"
printf '[devmm]\nplugins = cpu, example\n\n[device cpu]\nresource = example.arena\n' >"$tmp/installed.ini"
out=$(DEVMM_PLUGIN_PATH="$plugindir" "$build/tools/devmm-info" --check --strict --config "$tmp/installed.ini")
grep -q "stack: example.arena(67108864)" <<<"$out" || { echo "FAIL: installed plugin: $out"; exit 1; }
echo "example plugin: installed into pkg-config's plugindir and found there: ok"
# a percentage of cpu:0, the cpu plugin's device, through host->device_total (review, 14)
sed 's/^resource = example.arena$/resource = example.arena\nsize = 1%/' "$tmp/installed.ini" >"$tmp/percent.ini"
out=$(DEVMM_PLUGIN_PATH="$plugindir" "$build/tools/devmm-info" --check --strict --config "$tmp/percent.ini")
grep -Eq "stack: example.arena\([1-9][0-9]{5,}\)" <<<"$out" || { echo "FAIL: size = 1%: $out"; exit 1; }
echo "example plugin: size = 1% of the cpu plugin's device: ok"
# a bad option value: the plugin's message (through devmm_option_size), with the file and line
printf 'size = 64 MeB\n' >>"$tmp/installed.ini"
set +e
err=$(DEVMM_PLUGIN_PATH="$plugindir" "$build/tools/devmm-info" --check --config "$tmp/installed.ini" 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] || { echo "FAIL: a bad size passed: $err"; exit 1; }
grep -q "installed.ini:.*size: bad size '64 MeB'" <<<"$err" || { echo "FAIL: bad size message: $err"; exit 1; }
grep -q "size = 64 MeB" <<<"$err" && { echo "FAIL: the value is printed twice: $err"; exit 1; }
grep -q "example.arena: example.arena" <<<"$err" && { echo "FAIL: doubled prefix: $err"; exit 1; }
echo "example plugin: a bad option value is refused with its file and line: ok"

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

