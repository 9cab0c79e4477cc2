#!/usr/bin/env bash
# What a 2-thread job runs on one core while the other waits: `perf record -a`
# at 20 kHz over CPUs 0 and 1, the job held to them, then per 50 us slot the
# symbol on the busy CPU when the other was idle, summed. A serial section
# (one thread working between pool runs) shows up here; a kernel that keeps
# both cores busy does not. Needs perf and root (or perf_event_paranoid <= 0).
# usage: bench/serial.sh [--top N] FP4FORGE_COMMAND...   e.g.
#   bench/serial.sh build/fp4forge quantize MODEL OUT --threads 2 --no-doctor
set -u -o pipefail
top=15
[ "${1:-}" = --top ] && { top=$2; shift 2; }
[ $# -ge 1 ] || { sed -n 2,9p "$0"; exit 2; }
data=$(mktemp) && trap 'rm -f "$data" "$data.txt"' EXIT
perf record -q -a -C 0,1 -F 20000 -e cpu-clock -o "$data" taskset -c 0,1 "$@" > /dev/null 2>&1 || exit 1
perf script -i "$data" -F cpu,time,tid,ip,sym > "$data.txt" 2> /dev/null || exit 1
python3 - "$data.txt" "$top" <<'PY'
import collections, re, sys
slots = collections.defaultdict(dict)
t0 = t1 = None
for line in open(sys.argv[1]):
    m = re.match(r'\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+\S+\s+(\S+)', line)
    if not m:
        continue
    tid, cpu, t, sym = int(m.group(1)), int(m.group(2)), float(m.group(3)), m.group(4)
    t0 = t if t0 is None else min(t0, t)
    t1 = t if t1 is None else max(t1, t)
    slots[int(t * 20000)][cpu] = (tid, sym)
alone = collections.Counter()
for v in slots.values():
    if len(v) == 2:
        (a, b) = v.values()
        for x, y in ((a, b), (b, a)):
            if x[0] == 0 and y[0] != 0:   # tid 0: the idle task
                alone[y[1]] += 1
print("span %.3f s; one CPU idle while the other ran: %.1f ms" % (t1 - t0, sum(alone.values()) * 0.05))
for sym, n in alone.most_common(int(sys.argv[2])):
    print("%8.1f ms  %s" % (n * 0.05, sym))
PY
