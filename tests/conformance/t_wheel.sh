#!/usr/bin/env bash
# The wheel (issue 19): tools/wheel/build.sh (pip wheel through the in-tree PEP 517
# backend, then auditwheel repair), installed into a fresh venv with no index: the
# installed `fp4forge` and `python -m fp4forge` report the C version string, run on
# the libraries bundled in the wheel, and carry the README's demo.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
D=$WORK/wheel; rm -rf "$D"; mkdir -p "$D"
want=$(sed -n 's/.*FP4FORGE_VERSION "\(.*\)".*/\1/p' include/fp4forge/version.h)
if ! whl=$(bash tools/wheel/build.sh "$D/dist" 2> "$D/build.err" | tail -1) || [ ! -f "$whl" ]; then
    echo "FAIL wheel_build ($(tail -1 "$D/build.err"))"; exit 1
fi
tag=$(basename "$whl"); size=$(du -k "$whl" | cut -f1)
echo "PASS wheel_build ($tag, ${size} KB)"
python3 -m venv "$D/venv" && "$D/venv/bin/python" -m pip install -q --no-index "$whl" > "$D/install.log" 2>&1 \
    || { echo "FAIL wheel_install ($(tail -1 "$D/install.log"))"; exit 1; }
v1=$("$D/venv/bin/fp4forge" --version 2>&1); v2=$("$D/venv/bin/python" -m fp4forge --version 2>&1)
[ "$v1" = "fp4forge $want" ] && [ "$v2" = "$v1" ] && echo "PASS wheel_version ($v1, python -m too)" \
    || { echo "FAIL wheel_version ('$v1' / '$v2', want fp4forge $want)"; rc=1; }
bin=$("$D/venv/bin/python" -c 'import fp4forge; print(fp4forge.binary())')
if ldd "$bin" | grep -E 'libjansson|libcurl' | grep -q 'fp4forge.libs/'; then
    echo "PASS wheel_bundled_libs (libjansson and libcurl from fp4forge.libs/)"
else
    echo "FAIL wheel_bundled_libs ($(ldd "$bin" | grep -E 'jansson|curl' | tr '\n' ' '))"; rc=1
fi
if FP4FORGE_BIN="$D/venv/bin/fp4forge" DEMO_DIR="$D/demo" bash tools/demo.sh > "$D/demo.log" 2>&1 \
    && grep -q "verdict: PASS" "$D/demo.log"; then
    echo "PASS wheel_demo (tools/demo.sh with the installed command)"
else
    echo "FAIL wheel_demo ($(tail -1 "$D/demo.log"))"; rc=1
fi
exit $rc
