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

# Two lanes at once: much of a check runs on one core (imports, pip, vLLM's engine start),
# and CI has two; one lane took 25 of the suite's 44 minutes on a 2-core Zen 3 VM, two lanes
# 994 and 860 s of 35 minutes before t_gptoss.sh moved to lane B. Lane B holds vLLM-heavy
# scripts and the wheel (whose own `make` writes build-wheel/ only); lane A the rest in
# order (t_llama.sh before t_observers.sh: both use $WORK/llama). No check here passes on a
# measured speed; the timed ones are in the golden tier, never beside.
LANE_B=${FP4FORGE_CONFORMANCE_LANE_B-t_gptoss.sh t_mixed.sh t_vllm.sh t_wheel.sh}
run_script() {
    local t0=$SECONDS rc=0
    bash "$1" || rc=1
    echo "# $(basename "$1") took $((SECONDS - t0))s (the whole suite must stay under 40 minutes)"
    return $rc
}
in_lane_b() { case " $LANE_B " in *" $(basename "$1") "*) return 0 ;; esac; return 1; }
run_lane() {   # run_lane a|b: the lane's scripts in order; 1 when any failed
    local t rc=0
    for t in tests/conformance/t_*.sh; do
        [ -f "$t" ] || continue
        if in_lane_b "$t"; then [ "$1" = b ] || continue; else [ "$1" = a ] || continue; fi
        run_script "$t" || rc=1
    done
    return $rc
}
# What both lanes use is made here first, one at a time (each maker also holds a lock, and
# a failure is reported by the checks that need it): the vLLM venv with fp4forge's test
# plugin, and the real model. So a script's vLLM steps run or SKIP the same whichever lane
# reaches the venv first.
prepare_shared() {
    local venv
    [ "${FP4FORGE_VLLM_SKIP:-0}" = 1 ] \
        || { venv=$(timeout 1200 bash tests/probe/setup_vllm.sh 2> "$WORK/prepare-vllm.log" | tail -1) \
             && bash tests/vllm/install_plugin.sh "$venv" >> "$WORK/prepare-vllm.log" 2>&1; }
    timeout 900 bash tests/conformance/real_model.sh "${FP4FORGE_PY_REAL:-$PY}" > "$WORK/prepare-real.log" 2>&1
    return 0
}
rc=0
if [ "${FP4FORGE_CONFORMANCE_LANES:-2}" = 1 ]; then
    run_lane a || rc=1
    run_lane b || rc=1
    exit $rc
fi
prepare_shared
# lane B's lines are printed whole after lane A's, not interleaved with them
run_lane b > "$WORK/lane-b.log" 2>&1 &
lane_b=$!
run_lane a || rc=1
wait $lane_b || rc=1
echo "# lane B, run beside the scripts above:"
cat "$WORK/lane-b.log"
exit $rc
