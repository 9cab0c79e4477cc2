#!/usr/bin/env bash
# Conformance tier: real peers (compressed-tensors, llm-compressor,
# transformers) in a venv made by setup_venv.sh; each check prints PASS/FAIL.
set -u
cd "$(dirname "$0")/../.."
VENV=$(bash tests/conformance/setup_venv.sh) || { echo "FAIL conformance_venv_setup"; exit 1; }
export PY="$VENV/bin/python"
B=${B:-build}   # the build folder (Makefile's B=)
export FF=${FF:-$B/fp4forge}
export WORK=${WORK:-$B/conformance-work}
rm -rf "$WORK"; mkdir -p "$WORK"
# The Python checks go through one fork server that has torch, transformers and
# compressed-tensors imported (pyserver.py says why); without it they run plain. It
# starts with the environment the checks set (conf_lib.sh: offline, unbuffered), which
# huggingface_hub and Python's stdio read once, at import and at start.
. tests/conformance/conf_lib.sh
start_pyserver() {
    # a short absolute socket path: the client may run from another folder, and a
    # socket's path is limited to 108 bytes
    PYSERVER_DIR=$(mktemp -d /tmp/ffpy.XXXXXX) || return 1
    local sock=$PYSERVER_DIR/sock fifo=$PYSERVER_DIR/ready
    mkfifo "$fifo" || return 1
    "$PY" tests/conformance/pyserver.py "$sock" > "$fifo" 2> "$WORK/pyserver.err" &
    PYSERVER_PID=$!
    if [ "$(head -1 "$fifo")" = ready ]; then
        export FP4FORGE_PY_REAL=$PY FP4FORGE_PYSERVER=$sock PY=$PWD/tests/conformance/pyfork
    else
        echo "  info: no Python fork server ($(tail -1 "$WORK/pyserver.err")); checks run plain"
    fi
    rm -f "$fifo"
}
PYSERVER_PID= PYSERVER_DIR=
trap '[ -n "$PYSERVER_PID" ] && kill "$PYSERVER_PID" 2> /dev/null; [ -n "$PYSERVER_DIR" ] && rm -rf "$PYSERVER_DIR"' EXIT
[ "${FP4FORGE_NO_PYSERVER:-0}" = 1 ] || start_pyserver
rc=0
for t in tests/conformance/t_*.sh; do
    [ -f "$t" ] || continue
    t0=$SECONDS
    bash "$t" || rc=1
    echo "# $(basename "$t") took $((SECONDS - t0))s (the whole suite must stay under 40 minutes)"
done
exit $rc
