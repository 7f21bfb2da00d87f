#!/usr/bin/env bash
# wheel-smoke.sh — the proof that the wheel stands alone: on a brand-new Debian 12 with only
# python3 and python3-venv (no compiler, no libltdl, no inih, nothing of devmm), install the
# repaired wheel and numpy >= 2.3 from PyPI, then run devmm-info --check and README's Python
# example (as a doctest).
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
cp "$wheel" "$copy/"
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
/venv/bin/devmm-info --check | tee /tmp/info.txt
grep -q "check: .*: ok" /tmp/info.txt
if grep -q "devmm-cuda.so" /tmp/info.txt; then grep -q "0 devices" /tmp/info.txt; fi
/venv/bin/python - <<'PY'
import importlib.metadata, os
import devmm
assert devmm.__version__ == importlib.metadata.version("devmm"), devmm.__version__
lib = devmm._lib.LIBRARY_PATH
assert lib.startswith(os.path.dirname(devmm.__file__)), lib
plugins = {p["name"]: p for p in devmm.plugins()}
print("== python: devmm", devmm.__version__, "library", lib)
for name, p in plugins.items():
    print(f"   plugin {name}: {p['status']}, {p['devices']} device(s) {p['error']}")
assert all(p["status"] == "loaded" for p in plugins.values()), plugins
if "rocm" in plugins:
    assert "no HIP runtime found" in plugins["rocm"]["error"], plugins["rocm"]
PY
echo "== README's Python example"
/venv/bin/python -m doctest -v /extra/readme-example.txt | tail -3
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
