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

# CMake: the same example with find_package(devmm) (its CMakeLists.txt), against the same install
# moved elsewhere: devmmConfig.cmake finds the prefix from its own location, so every path it
# gives lies in the moved tree, never in the prefix it was built for or in the DESTDIR
command -v cmake >/dev/null || { echo "FAIL: no cmake (tools/deps.sh test installs it)"; exit 1; }
cfg=$(find "$tmp/root" -name devmmConfig.cmake -print -quit)
[ -n "$cfg" ] || { echo "FAIL: no devmmConfig.cmake installed"; exit 1; }
[ -f "$(dirname "$cfg")/devmmConfigVersion.cmake" ] || { echo "FAIL: no devmmConfigVersion.cmake beside $cfg"; exit 1; }
case $cfg in "$(dirname "$plugindir")"/cmake/devmm/devmmConfig.cmake) ;;
  *) echo "FAIL: devmmConfig.cmake at '$cfg', not in <libdir>/cmake/devmm"; exit 1 ;; esac
prefix=$(pkg-config --variable=prefix devmm)
prefix=${prefix#"$tmp/root"}
version=$(pkg-config --modversion devmm)  # 0.1.0: asked for 0.1 yes, 1.0 and 0.2 no
major=${version%%.*} minor=${version#*.}
minor=${minor%%.*}
same="$major.$minor" newer_major="$((major + 1)).0" newer_minor="$major.$((minor + 1))"
cp -a "$tmp/root" "$tmp/moved"
moved_prefix="$tmp/moved$prefix" moved_plugins="$tmp/moved${plugindir#"$tmp/root"}"
cmake_out() { echo "FAIL: $1:"; cat "$tmp/cmake.log"; exit 1; }
cmake -S "$tmp/example" -B "$tmp/cmake-example" -DCMAKE_PREFIX_PATH="$moved_prefix" >"$tmp/cmake.log" 2>&1 ||
  cmake_out "cmake configure of the example"
grep -q "^-- devmm $version: plugins install into $moved_plugins$" "$tmp/cmake.log" ||
  cmake_out "DEVMM_PLUGIN_DIR is not the moved tree's $moved_plugins"
cmake --build "$tmp/cmake-example" >>"$tmp/cmake.log" 2>&1 || cmake_out "cmake --build of the example"
[ -f "$tmp/cmake-example/devmm-example.so" ] || cmake_out "no devmm-example.so"
readelf -d "$tmp/cmake-example/devmm-example.so" | grep NEEDED | grep -q libdevmm &&
  { echo "FAIL: the CMake-built plugin links libdevmm (devmm::headers is compile flags only)"; exit 1; }
rm -f "$moved_plugins/devmm-example.so"  # the pkg-config part's copy, which cp -a brought along
cmake --install "$tmp/cmake-example" >>"$tmp/cmake.log" 2>&1 || cmake_out "cmake --install"
[ -f "$moved_plugins/devmm-example.so" ] || cmake_out "cmake --install did not put it into DEVMM_PLUGIN_DIR"
chmod -R go-w "$tmp"
printf '[devmm]\nplugins = cpu, example\n\n[device cpu]\nresource = example.arena\n' >"$tmp/cmake.ini"
out=$(DEVMM_PLUGIN_PATH="$moved_plugins" "$build/tools/devmm-info" --check --strict --config "$tmp/cmake.ini")
grep -q "stack: example.arena(67108864)" <<<"$out" || { echo "FAIL: CMake-built plugin: $out"; exit 1; }
grep -Eq "^  example .*  $moved_plugins/devmm-example.so$" <<<"$out" ||
  { echo "FAIL: not the CMake-installed plugin: $out"; exit 1; }
echo "example plugin: built with CMake (find_package), installed into DEVMM_PLUGIN_DIR, loaded: ok"
# a C program linking devmm::devmm runs against the moved libdevmm; 0.1 is compatible with this
# 0.1.0, 1.0 and 0.2 are not (SameMajorVersion: the same major, at least as new), 0.1...<1 is
mkdir "$tmp/app"
cat >"$tmp/app/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(devmm_app C)
find_package(devmm ${WANT} REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE devmm::devmm)
get_target_property(loc devmm::devmm IMPORTED_LOCATION)
get_target_property(inc devmm::devmm INTERFACE_INCLUDE_DIRECTORIES)
message(STATUS "devmm::devmm: ${loc} ${inc}")
CMAKE
printf '#include <devmm/devmm.h>\n#include <stdio.h>\nint main(void) { puts(devmm_version()); return 0; }\n' \
  >"$tmp/app/app.c"
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$moved_prefix" -DWANT="$same" >"$tmp/cmake.log" 2>&1 ||
  cmake_out "find_package(devmm $same REQUIRED)"
grep -q "^-- devmm::devmm: $moved_prefix/[^ ]*/libdevmm.so.$version $moved_prefix/include$" "$tmp/cmake.log" ||
  cmake_out "devmm::devmm's location and include directory are not in the moved tree"
cmake --build "$tmp/app/build" >>"$tmp/cmake.log" 2>&1 || cmake_out "building a program against devmm::devmm"
[ "$("$tmp/app/build/app")" = "$version" ] || { echo "FAIL: the program linked with devmm::devmm"; exit 1; }
# and a range must hold this version within its major: 0.0...<0.1 and 0.1...1.0 are refused
for want in "$newer_major" "$newer_minor" "$major.0...<$same" "$same...$newer_major"; do
  if cmake -S "$tmp/app" -B "$tmp/app/build-$want" -DCMAKE_PREFIX_PATH="$moved_prefix" -DWANT="$want" \
    >"$tmp/cmake.log" 2>&1; then
    cmake_out "find_package(devmm $want REQUIRED) accepted $version"
  fi
  refused="compatible with requested version \(range \)\?\"$want\"\. .*considered but not accepted: "
  refused+="$moved_prefix/[^ ]*/devmmConfig.cmake, version: $version "
  tr -s '\n ' '  ' <"$tmp/cmake.log" | grep -q "$refused" || cmake_out "refusal of $want"
done
cmake -S "$tmp/app" -B "$tmp/app/build-range" -DCMAKE_PREFIX_PATH="$moved_prefix" "-DWANT=$same...<$((major + 1))" \
  >"$tmp/cmake.log" 2>&1 || cmake_out "find_package(devmm $same...<$((major + 1)) REQUIRED)"
# the major version's own check, which 0.x cannot show (no major below 0): the same version file
# saying 2.3.0 takes 2.0 and 2.3, refuses 1.0 (an older major), 2.4 and 3.0
sed -e "s/^set(PACKAGE_VERSION \"$version\")\$/set(PACKAGE_VERSION \"2.3.0\")/" \
  -e "s/^set(_devmm_major \"$major\")\$/set(_devmm_major \"2\")/" \
  "$(dirname "$cfg")/devmmConfigVersion.cmake" >"$tmp/v2.cmake"
[ "$(grep -c '"2.3.0"\|_devmm_major "2"' "$tmp/v2.cmake")" -eq 2 ] || { echo "FAIL: version file: $(cat "$tmp/v2.cmake")"; exit 1; }
# shellcheck disable=SC2016  # CMake's ${...}, not the shell's
printf 'cmake_minimum_required(VERSION 3.16)\ninclude("${VFILE}")\nmessage("${PACKAGE_VERSION_COMPATIBLE}")\n' \
  >"$tmp/ask.cmake"
for want in 2.0:TRUE 2.3:TRUE 1.0:FALSE 2.4:FALSE 3.0:FALSE; do
  got=$(cmake -DVFILE="$tmp/v2.cmake" -DPACKAGE_FIND_VERSION="${want%:*}" \
    -DPACKAGE_FIND_VERSION_MAJOR="${want%%.*}" -P "$tmp/ask.cmake" 2>&1)
  [ "$got" = "${want#*:}" ] || { echo "FAIL: 2.3.0 asked for ${want%:*}: compatible '$got'"; exit 1; }
done
echo "CMake package: devmm::devmm relocatable, DEVMM_PLUGIN_DIR, SameMajorVersion: ok"

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

