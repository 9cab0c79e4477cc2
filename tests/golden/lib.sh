# Shared by the golden tests: pass/fail lines and small assertions.
pass() { echo "PASS $1${2:+ ($2)}"; }
fail() { echo "FAIL $1${2:+ ($2)}"; GOLDEN_RC=1; }
GOLDEN_RC=0
# expect NAME WANT_RC CMD...: runs CMD, checks its exit code; output in $WORK/NAME.out
expect_rc() {
    local name=$1 want=$2; shift 2
    "$@" > "$WORK/$name.out" 2>&1
    local rc=$?
    if [ "$rc" -eq "$want" ]; then pass "$name" "rc=$rc"; else fail "$name" "rc=$rc, wanted $want: $(tail -3 "$WORK/$name.out" | tr '\n' ' ')"; fi
}
