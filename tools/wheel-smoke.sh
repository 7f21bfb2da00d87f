#!/usr/bin/env bash
# wheel-smoke.sh — the proof that the wheel stands alone: on a brand-new Debian 12 with only
# python3 and python3-venv (no compiler, no libltdl, no inih, nothing of devmm), install the
# repaired wheel and numpy >= 2.3 from PyPI, then check what it reports (tools/wheel_checks.py:
# cpu works, cuda finds no driver, rocm finds no HIP, `python -m devmm info` is devmm-info) and
# run README's Python example and docs/api.md as doctests.
#
#   make wheel && tools/wheel-smoke.sh [DIST_DIR]     (or: make wheel-smoke)
#
# DIST_DIR (default dist/) holds the manylinux wheel `make wheel` made. The new machine is
# tools/fresh-debian.sh's, or the command named by $FRESH_MACHINE, which must take
# FRESH_MACHINE_COPY=<dir> (copied to /extra) and the command as its one argument.
set -euo pipefail
cd "$(dirname "$0")/.."
dist=${1:-dist}
wheel=$(find "$dist" -maxdepth 1 -name 'devmm-*manylinux*.whl' 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "wheel-smoke: no manylinux wheel in $dist (run make wheel)" >&2; exit 2; }
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp "$wheel" tools/wheel_checks.py docs/api.md "$copy/"
# README's Python example: the first ```python block after "## Python"
awk '/^## Python/ {on = 1} on && /^```python/ {inblock = 1; next} inblock && /^```/ {exit}
     inblock {print}' README.md >"$copy/readme-example.txt"
grep -q '>>> import devmm' "$copy/readme-example.txt" ||
  { echo "wheel-smoke: no Python example found in README.md" >&2; exit 2; }
cat >"$copy/smoke.sh" <<'EOF'
set -euo pipefail
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
update-ca-certificates >/dev/null 2>&1 || true
echo "== the new machine: $(. /etc/os-release; echo "$PRETTY_NAME"), $(python3 --version)"
for what in cc gcc meson; do
  if command -v "$what" >/dev/null; then echo "unexpected: $what is installed"; exit 1; fi
done
if ldconfig -p | grep -E 'libltdl|libinih|libdevmm'; then echo "unexpected: libraries above"; exit 1; fi
echo "== no compiler, no libltdl, no libinih on the system"
python3 -m venv /venv
/venv/bin/pip install -q --disable-pip-version-check /extra/devmm-*.whl "numpy>=2.3"
/venv/bin/pip list --disable-pip-version-check 2>/dev/null | grep -iE '^(devmm|numpy) '
cd /tmp  # nothing of the source tree in sight
echo "== devmm-info --check (the console script)"
/venv/bin/devmm-info --check
echo "== what the installed wheel reports (tools/wheel_checks.py)"
/venv/bin/python /extra/wheel_checks.py
echo "== README's Python example, docs/api.md (in the venv, as after . /venv/bin/activate)"
export PATH="/venv/bin:$PATH"  # docs/api.md runs the devmm-replay console script by name
# (one command per line: under set -e a failure on the left of && would not stop the script)
/venv/bin/python -m doctest /extra/readme-example.txt
echo "   README.md: passed"
/venv/bin/python -m doctest -o ELLIPSIS /extra/api.md
echo "   docs/api.md: passed"
echo "wheel-smoke: ok"
EOF
echo "wheel-smoke: $(basename "$wheel") on a fresh Debian 12"
start=$SECONDS
if [ -n "${FRESH_MACHINE:-}" ]; then
  FRESH_MACHINE_COPY=$copy "$FRESH_MACHINE" "bash /extra/smoke.sh"
else
  ./tools/fresh-debian.sh "$copy" "bash /extra/smoke.sh"
fi
echo "wheel-smoke: passed in $((SECONDS - start)) s"
