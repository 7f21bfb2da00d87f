#!/usr/bin/env bash
# devmm-info end to end: the default config passes --check; --json parses; an invalid config
# exits 1 with file:line; a failed plugin exits 2 under --strict.
#   test-devmm-info.sh <devmm-info> <default devmm.ini> <fault plugin dir> <build's plugin dir>
set -euo pipefail
info=$(realpath "$1") ini=$(realpath "$2") faults=$(realpath "$3") plugins=$(realpath "$4")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$info" --check --strict --config "$ini" >"$tmp/default.out" || fail "default config: exit $?"
grep -Eq "check: [1-9][0-9]* passed, 0 failed" "$tmp/default.out" || fail "default config: $(cat "$tmp/default.out")"
# each kind with its device type and description, then its options with their help
grep -Eq "^  cpu.aligned +cpu +posix_memalign with a minimum alignment$" "$tmp/default.out" ||
  fail "kind description: $(cat "$tmp/default.out")"
grep -Eq "^ +alignment: the minimum alignment, a power of two" "$tmp/default.out" ||
  fail "kind option help: $(cat "$tmp/default.out")"

"$info" --json --check --config "$ini" >"$tmp/json"
/usr/bin/python3 - "$tmp/json" <<'PY' || fail "JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["config"].endswith("devmm.ini"), d["config"]
cpu = [p for p in d["plugins"] if p["name"] == "cpu"][0]
assert cpu["status"] == "loaded" and cpu["abi"] == "1.1" and "cpu.mmap" in cpu["kinds"], cpu
# kind_info: the same kinds, in order, with description, device type and options
assert [k["name"] for k in cpu["kind_info"]] == cpu["kinds"], cpu
mmap = [k for k in cpu["kind_info"] if k["name"] == "cpu.mmap"][0]
assert mmap["device_type"] == "cpu" and mmap["description"].startswith("anonymous mmap"), mmap
assert [o["key"] for o in mmap["options"]] == ["huge_pages", "populate"], mmap
assert all(o["help"] for o in mmap["options"]), mmap
dev = [x for x in d["devices"] if x["device"] == "cpu"][0]
assert dev["total_bytes"] > 0 and dev["stack"], dev
assert all(c["ok"] for c in d["check"]), d["check"]
PY

printf '[device cpu]\nresource = cpu.malloc\nbogus = 1\n' >"$tmp/bad.ini"
set +e
"$info" --config "$tmp/bad.ini" >"$tmp/out" 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "invalid config: exit $rc, expected 1"
grep -q "bad.ini:3: unknown key 'bogus'" "$tmp/err" || fail "invalid config message: $(cat "$tmp/err")"

printf '[devmm]\nplugins = cpu, initfail\nplugin_path = %s\n' "$faults" >"$tmp/plug.ini"
set +e
DEVMM_LOG_LEVEL=error "$info" --strict --config "$tmp/plug.ini" >"$tmp/out" 2>&1; rc=$?
set -e
[ $rc -eq 2 ] || fail "failed plugin with --strict: exit $rc, expected 2"
grep -q "initfail FAILED: its initialisation failed: simulated init failure" "$tmp/out" ||
  fail "failed plugin report: $(cat "$tmp/out")"
DEVMM_LOG_LEVEL=error "$info" --config "$tmp/plug.ini" >/dev/null || fail "without --strict a failed plugin is only reported"

# a section for a device no plugin has: a warning (stderr, "warnings:"), and exit 2 under --strict
printf '[device cpu]\nadaptors = statistics\n[device cpu:1]\nadaptors = statistics\n' >"$tmp/dev1.ini"
set +e
DEVMM_LOG_LEVEL=warn "$info" --strict --config "$tmp/dev1.ini" >"$tmp/out" 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "[device cpu:1] with --strict: exit $rc, expected 2"
grep -q "dev1.ini:3: \[device cpu:1\]: no loaded plugin has device cpu:1" "$tmp/err" ||
  fail "[device cpu:1] warning: $(cat "$tmp/err")"
grep -q "^  .*dev1.ini:3: \[device cpu:1\]: no loaded plugin" "$tmp/out" || fail "warnings: $(cat "$tmp/out")"
grep -q "strict: the configuration has 1 warning: FAILED" "$tmp/out" || fail "strict warning: $(cat "$tmp/out")"
"$info" --config "$tmp/dev1.ini" >/dev/null 2>&1 || fail "without --strict a warning is only reported"
# the GPU plugins the default config lists: loaded, with devices or with "0 devices: <reason>"
for gpu in cuda rocm; do
  grep -q "^  $gpu " "$tmp/default.out" || continue
  line=$(grep -A1 "^  $gpu " "$tmp/default.out" | tail -1)
  grep -q "FAILED" <<<"$(grep "^  $gpu " "$tmp/default.out")" && fail "$gpu plugin failed to load"
  if grep -q "loaded: 0 devices" <<<"$line"; then
    grep -Eq "0 devices: .{8,}" <<<"$line" || fail "$gpu: 0 devices without a reason: $line"
  fi
done
# exit status: 0 fine, 1 the configuration (or the command line) is invalid, 2 it loads but
# something it names does not work; --help says so
"$info" --help | grep -q "exit status: 0 fine; 1 " || fail "--help does not give the exit codes"
expect() { # expect <rc> <grep pattern> <args...>: the exit status and a line of the output
  local want=$1 pat=$2 rc=0
  shift 2
  DEVMM_LOG_LEVEL=error "$info" "$@" >"$tmp/out" 2>&1 || rc=$?
  [ "$rc" -eq "$want" ] || fail "devmm-info $*: exit $rc, expected $want: $(cat "$tmp/out")"
  grep -q -- "$pat" "$tmp/out" || fail "devmm-info $*: no '$pat' in: $(cat "$tmp/out")"
}
# a relative --config keeps its relative plugin_path (relative to the file's directory)
mkdir -p "$tmp/conf/plug"
cp "$faults/devmm-faulty.so" "$tmp/conf/plug/"
chmod -R go-w "$tmp"
printf '[devmm]\nplugins = cpu, faulty\nplugin_path = plug\n' >"$tmp/conf/rel.ini"
(cd "$tmp" && expect 0 "faulty .*ABI" --strict --config conf/rel.ini) || exit 1
(cd "$tmp/conf" && expect 0 "faulty .*ABI" --strict --config rel.ini) || exit 1
# a factory's option error is an invalid configuration, found without --check, at its line
printf '[devmm]\nplugins = cpu, faulty\nplugin_path = plug\n[device cpu]\nresource = faulty.heap\nsize = 64 MeB\n' \
  >"$tmp/conf/size.ini"
expect 1 "size.ini:6: \[device cpu\] faulty.heap: size: bad size '64 MeB'" --config "$tmp/conf/size.ini"
expect 1 "size.ini:6: " --check --config "$tmp/conf/size.ini"
# ... and so is one refused for a GPU device, whose stack is built when its plugin counts its
# devices (ADR 38): the device says it, and devmm-info exits 1 as for any file:line error
printf '[devmm]\nplugins = cpu, sim\n[device sim:*]\nresource = sim.async\npool = big\n' \
  >"$tmp/lazy.ini"
expect 1 "^devmm-info: invalid configuration: $tmp/lazy.ini:5: \[device sim:\*\] sim.async: pool = big" \
  --config "$tmp/lazy.ini"
expect 1 "stack: NONE: $tmp/lazy.ini:5: " --config "$tmp/lazy.ini"
# a device left without a resource: --check fails it, and so does --strict
printf '[devmm]\nplugins = cpu, factoryfail\nplugin_path = %s\n[device cpu]\nresource = factoryfail.heap\n' \
  "$faults" >"$tmp/noresource.ini"
expect 0 "stack: NONE: factoryfail.heap: simulated factory failure" --config "$tmp/noresource.ini"
expect 2 "check: 0 passed, 1 failed" --check --config "$tmp/noresource.ini"
expect 2 "strict: device cpu has no resource" --strict --config "$tmp/noresource.ini"
# nothing to check is no pass
printf '[devmm]\nplugins = nodevices\nplugin_path = %s\n' "$faults" >"$tmp/nodevice.ini"
expect 0 "(none)" --config "$tmp/nodevice.ini"
expect 2 "check: no device to check" --check --config "$tmp/nodevice.ini"
expect 2 "strict: no device" --strict --config "$tmp/nodevice.ini"
expect 1 "unknown argument" --bogus
# an option without its value says so
expect 1 "devmm-info: --config needs a FILE" --config
# --json with an invalid configuration: a JSON error object on stdout, the text on stderr, exit 1
set +e
"$info" --json --config "$tmp/bad.ini" >"$tmp/out" 2>"$tmp/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "--json, invalid config: exit $rc, expected 1"
/usr/bin/python3 - "$tmp/out" <<'PY' || fail "--json, invalid config: $(cat "$tmp/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["error"]["status"] == "DEVMM_ECONFIG", d
assert "bad.ini:3: unknown key 'bogus'" in d["error"]["message"], d
PY
grep -q "bad.ini:3: unknown key 'bogus'" "$tmp/err" || fail "--json, invalid config, stderr: $(cat "$tmp/err")"
# a device enumerated twice belongs to the first plugin: the second owns none; one kind, singular;
# a plugin named by its absolute path shows its short name
printf '[devmm]\nplugins = cpu, faulty, %s/devmm-helpers.so\nplugin_path = %s\n' "$faults" "$faults" \
  >"$tmp/dup.ini"
expect 0 "^  faulty .*ABI" --config "$tmp/dup.ini"
grep -A1 "^  faulty " "$tmp/out" | grep -q "loaded: 0 devices, 1 resource kind;" ||
  fail "duplicate device: $(cat "$tmp/out")"
grep -Eq "^  helpers +0.0.1 +ABI 1\.[0-9]+  $faults/devmm-helpers.so$" "$tmp/out" ||
  fail "absolute plugin name: $(cat "$tmp/out")"
# free memory 0 means unknown (plugin.h): faulty's cpu:0, without the cpu plugin, says neither
printf '[devmm]\nplugins = faulty\nplugin_path = %s\n' "$faults" >"$tmp/unknown.ini"
expect 0 "memory: total unknown, free unknown; plugin faulty" --config "$tmp/unknown.ini"
# search paths as written, tidied: no "/./", no "//", no trailing "/"
printf '[devmm]\nplugins = cpu, absent\nplugin_path = ./plug/./, .//plug2/\n' >"$tmp/conf/tidy.ini"
expect 0 "absent  *FAILED" --config "$tmp/conf/tidy.ini"
grep -q "$tmp/conf/plug:$tmp/conf/plug2:" "$tmp/out" || fail "search path not tidy: $(cat "$tmp/out")"
# --version prints the version and exits 0; --config=FILE is --config FILE; the help names both
expect 0 "^devmm-info [0-9][0-9.]* (plugin ABI [0-9]*\.[0-9]*)$" --version
expect 0 "^  faulty .*ABI" --config="$tmp/dup.ini"
expect 1 "devmm-info: --config= needs a FILE" --config=
expect 0 "--version" --help
# a cuda/rocm kind option has its help text (cuda.async's ipc had none)
if ! grep -Eq "^ +ipc: " "$tmp/default.out" || grep -Eq "^ +ipc: *$" "$tmp/default.out"; then
  fail "async ipc option help: $(grep -E '^ +ipc' "$tmp/default.out")"
fi
# a GPU runtime's reason says the error once, not "hipErrorNoDevice (hipErrorNoDevice)"
if grep -Eq "0 devices: ([A-Za-z]+) \(\1\)" "$tmp/default.out"; then
  fail "reason repeats itself: $(grep -E '0 devices' "$tmp/default.out")"
fi
# what the build carries (pip hides Meson's summary): each optional part, built or left out with
# the reason, in the text and the JSON alike; a plugin said to be built is in the build's plugins
"$info" --config "$ini" >"$tmp/out"
sed -n '/^build (/,/^$/p' "$tmp/out" >"$tmp/build"
[ "$(head -1 "$tmp/build")" = "build (what meson setup built or left out, and why):" ] ||
  fail "no build section: $(cat "$tmp/out")"
for p in cpu sim cuda rocm rmm; do
  line=$(grep -E "^  plugin $p +(built|left out: .{8,})$" "$tmp/build") || fail "plugin $p: $(cat "$tmp/build")"
  case $line in *built) [ -f "$plugins/devmm-$p.so" ] || fail "'$line' but no $plugins/devmm-$p.so" ;; esac
done
grep -Eq "^  plugin (cpu|sim) +built$" "$tmp/build" || fail "cpu and sim are always built: $(cat "$tmp/build")"
grep -Eq "^  libdevmm-torch +(built|left out: .{8,})$" "$tmp/build" || fail "libdevmm-torch: $(cat "$tmp/build")"
[ "$(grep -c . "$tmp/build")" -eq 7 ] || fail "build section: $(cat "$tmp/build")"
"$info" --json --config "$ini" >"$tmp/json"
/usr/bin/python3 - "$tmp/json" "$tmp/build" <<'PY' || fail "JSON build: $(cat "$tmp/json")"
import json, sys
b = json.load(open(sys.argv[1]))["build"]
assert [(p["kind"], p["name"]) for p in b] == [("plugin", n) for n in
       ("cpu", "sim", "cuda", "rocm", "rmm")] + [("library", "libdevmm-torch")], b
text = open(sys.argv[2]).read().splitlines()[1:]
for p, line in zip(b, text):
    assert isinstance(p["built"], bool) and (p["reason"] == "") == p["built"], p
    assert line.endswith(" built" if p["built"] else " left out: " + p["reason"]), (p, line)
PY
echo "devmm-info: ok"
