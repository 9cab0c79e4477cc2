#!/usr/bin/env bash
# The include graph (issue 34): no include runs from a lower layer to a higher one (base <
# kernels/probe < io < families < plan < quantize/doctor/lora < checks < job < cli; a public
# header belongs where it is implemented), and the CLI sees the public headers alone
# (tools/layers.py; its own checks are made to fail on a planted back-arrow by hand).
set -u
cd "$(dirname "$0")/../.."
. tests/golden/lib.sh
out=$(python3 tools/layers.py 2>&1); rc=$?
[ "$rc" -eq 0 ] && pass "layers_no_back_arrows" "$(echo "$out" | tail -1)" || fail "layers_no_back_arrows" "$(echo "$out" | head -5 | tr '\n' ' ')"
flags=$(sed -n 's/^CLIFLAGS *[:+]*= *//p' Makefile | tr '\n' ' ')
case " $flags " in
*-Isrc*) fail "layers_cli_public_headers" "CLIFLAGS names src/: $flags";;
*"-Iinclude/fp4forge -Icli"*|*"-Iinclude -Icli"*) pass "layers_cli_public_headers" "CLIFLAGS: $flags";;
*) fail "layers_cli_public_headers" "CLIFLAGS: $flags";;
esac
exit $GOLDEN_RC
