#!/usr/bin/env bash
# wheel-smoke.sh — the proof that the wheel stands alone, on two brand-new machines with only
# python3 and python3-venv (no compiler, no libltdl, no inih, nothing of devmm):
#   bookworm: Debian 12 (glibc 2.36, Python 3.11) with numpy >= 2.3 from PyPI;
#   bullseye: Debian 11 (glibc 2.31, Python 3.9, the oldest the wheel claims) with the newest
#             numpy that supports Python 3.9 (pip's choice: 2.0.2).
# On each: install the repaired wheel and that numpy, `devmm-info --check`, compile the installed
# package with that machine's Python (python -m compileall -f: any syntax newer than 3.9 fails on
# bullseye), check what it reports (tools/wheel_checks.py: cpu works, cuda finds no driver, rocm
# finds no HIP, `python -m devmm info` is devmm-info) and run README's Python example,
# docs/api.md and docs/from-rmm.md as doctests through tools/doctest_gate.py, which skips, saying why, exactly the
# examples marked `# needs numpy>=X` where that numpy is older (on bullseye: seven of api.md,
# two of README's; none on bookworm).
#
#   make wheel && tools/wheel-smoke.sh [DIST_DIR]     (or: make wheel-smoke)
#   WHEEL_SMOKE_SUITES=bullseye tools/wheel-smoke.sh  (one machine; default "bookworm bullseye")
#
# DIST_DIR (default dist/) holds the manylinux wheel `make wheel` made. Each new machine is
# tools/fresh-debian.sh's, or the command named by $FRESH_MACHINE, which must take
# FRESH_MACHINE_COPY=<dir> (copied to /extra), FRESH_DEBIAN_SUITE and the command as its one
# argument. Prints "wheel-smoke: <suite> passed in N s" per machine.
set -euo pipefail
cd "$(dirname "$0")/.."
dist=${1:-dist}
suites=${WHEEL_SMOKE_SUITES:-bookworm bullseye}
wheel=$(find "$dist" -maxdepth 1 -name 'devmm-*manylinux*.whl' 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "wheel-smoke: no manylinux wheel in $dist (run make wheel)" >&2; exit 2; }
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
mkdir "$copy/docs"
cp "$wheel" tools/wheel_checks.py tools/doctest_gate.py "$copy/"
cp docs/api.md docs/from-rmm.md "$copy/docs/"
# README's Python example: the first ```python block after "## Python", the lines before it left
# blank so that the doctests' line numbers are README.md's
awk '/^## Python/ {on = 1} on && /^```python/ {inblock = 1; print ""; next} inblock && /^```/ {exit}
     inblock {print; next} {print ""}' README.md >"$copy/README.md"
grep -q '>>> import devmm' "$copy/README.md" ||
  { echo "wheel-smoke: no Python example found in README.md" >&2; exit 2; }
cat >"$copy/smoke.sh" <<'EOF'
set -euo pipefail
want_python=$1 numpy=$2
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
update-ca-certificates >/dev/null 2>&1 || true
echo "== the new machine: $(. /etc/os-release; echo "$PRETTY_NAME"), $(python3 --version)," \
  "$(ldd --version | head -1)"
case $(python3 --version) in
  "Python $want_python".*) ;;
  *) echo "unexpected: not Python $want_python"; exit 1 ;;
esac
for what in cc gcc meson; do
  if command -v "$what" >/dev/null; then echo "unexpected: $what is installed"; exit 1; fi
done
if ldconfig -p | grep -E 'libltdl|libinih|libdevmm'; then
  echo "unexpected: libraries above"; exit 1
fi
echo "== no compiler, no libltdl, no libinih on the system"
python3 -m venv /venv
/venv/bin/pip install -q --disable-pip-version-check /extra/devmm-*.whl "$numpy"
/venv/bin/pip list --disable-pip-version-check 2>/dev/null | grep -iE '^(devmm|numpy) '
cd /tmp  # nothing of the source tree in sight
echo "== devmm-info --check (the console script)"
/venv/bin/devmm-info --check
echo "== the installed package compiles with this Python (compileall -f: pip's .pyc aside)"
pkg=$(/venv/bin/python -c 'import devmm, os; print(os.path.dirname(devmm.__file__))')
/venv/bin/python -m compileall -q -f "$pkg"
echo "   $pkg: compiled with $(/venv/bin/python --version)"
echo "== what the installed wheel reports (tools/wheel_checks.py)"
/venv/bin/python /extra/wheel_checks.py
echo "== README's Python example, docs/api.md, docs/from-rmm.md (in the venv, as after . /venv/bin/activate)"
export PATH="/venv/bin:$PATH"  # docs/api.md runs the devmm-replay console script by name
/venv/bin/python /extra/doctest_gate.py -o ELLIPSIS /extra/README.md /extra/docs/api.md \
  /extra/docs/from-rmm.md
echo "wheel-smoke: ok"
EOF
total=$SECONDS
for suite in $suites; do
  case $suite in
    bookworm) release="Debian 12" python=3.11 numpy="numpy>=2.3" ;;
    bullseye) release="Debian 11" python=3.9 numpy="numpy" ;;  # pip: the newest for 3.9
    *) echo "wheel-smoke: WHEEL_SMOKE_SUITES holds bookworm and/or bullseye, not '$suite'" >&2
       exit 2 ;;
  esac
  echo "wheel-smoke: $(basename "$wheel") on a fresh $release ($suite), $numpy"
  start=$SECONDS
  if [ -n "${FRESH_MACHINE:-}" ]; then
    FRESH_MACHINE_COPY=$copy FRESH_DEBIAN_SUITE=$suite "$FRESH_MACHINE" \
      "bash /extra/smoke.sh $python '$numpy'"
  else
    FRESH_DEBIAN_SUITE=$suite ./tools/fresh-debian.sh "$copy" \
      "bash /extra/smoke.sh $python '$numpy'"
  fi
  echo "wheel-smoke: $suite passed in $((SECONDS - start)) s"
done
echo "wheel-smoke: passed ($suites) in $((SECONDS - total)) s"
