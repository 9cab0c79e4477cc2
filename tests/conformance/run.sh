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
rc=0
for t in tests/conformance/t_*.sh; do
    [ -f "$t" ] || continue
    bash "$t" || rc=1
done
exit $rc
