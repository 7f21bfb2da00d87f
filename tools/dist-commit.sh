#!/usr/bin/env bash
# meson dist script (python/meson.build): writes the checkout's commit into the source archive as
# .git-commit, so that a wheel built from the sdist (python -m build, make wheel) still knows
# devmm.__git_commit__; an archive has no .git to ask.
set -euo pipefail
git -C "$MESON_SOURCE_ROOT" rev-parse HEAD >"$MESON_DIST_ROOT/.git-commit"
