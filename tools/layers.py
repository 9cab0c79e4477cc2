"""The include graph's layers (issue 34): every #include in src/ and cli/ must
run from a folder to itself or to a lower layer, and cli/ must see the public
headers (include/fp4forge/) and its own alone. A public header belongs to the
folder whose .c file includes it first (its implementation's own header).
Prints one line per back-arrow and exits 1; with --graph, the folder graph.
usage: python3 tools/layers.py [--graph]   (stdlib only; run from the repo root)"""
import os
import re
import sys

# Lowest first; folders on one line are peers (neither may include the other).
ORDER = [["base"], ["kernels", "probe"], ["io"], ["families"], ["plan"], ["quantize", "doctor", "lora"],
         ["checks"], ["job"], ["cli"]]
RANK = {d: i for i, row in enumerate(ORDER) for d in row}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root):
    for base, _, files in os.walk(root):
        for f in files:
            if f.endswith((".c", ".h")):
                yield os.path.join(base, f)


def folder_of(path):
    parts = path.split(os.sep)
    return "cli" if parts[0] == "cli" else parts[1]


def includes(path):
    return INC.findall(open(path, encoding="utf-8").read())


def header_homes():
    """header file name -> its folder: a src/ header where it lies; a public one
    where it is implemented, the lowest folder whose .c includes it first (or
    first through its private header: quantize.c's quantize_int.h), since
    quantize.h declares both the engine (quantize/) and the job's entry (job/)"""
    home, private = {}, {}
    for p in sources("src"):
        if p.endswith(".h"):
            home[os.path.basename(p)] = folder_of(p)
            private[os.path.basename(p)] = p
    public = set(os.listdir("include/fp4forge"))
    found = {}
    for p in sources("src"):
        inc = includes(p) if p.endswith(".c") else []
        first = inc[0] if inc else None
        if first in private and first not in public:
            sub = includes(private[first])
            first = sub[0] if sub else None
        if first in public:
            found.setdefault(first, set()).add(folder_of(p))
    for h in public:
        # declarations only (dtype.h-like): anyone may include them
        home.setdefault(h, min(found.get(h, {"base"}), key=lambda d: RANK.get(d, 99)))
    return home, public


def main():
    home, public = header_homes()
    bad, graph = [], {}
    for p in sorted(list(sources("src")) + list(sources("cli"))):
        me = folder_of(p)
        for h in includes(p):
            name = os.path.basename(h)
            if me == "cli" and name not in public and not os.path.exists(os.path.join("cli", name)):
                bad.append(f"{p}: includes {h}, which is not a public header (cli/ sees include/fp4forge/ alone)")
                continue
            to = home.get(name)
            if to is None or to == me:
                continue
            graph.setdefault(me, set()).add(to)
            if RANK.get(to, 99) >= RANK.get(me, -1):
                bad.append(f"{p}: includes {h} ({to}/), not below {me}/")
    if "--graph" in sys.argv:
        for k in sorted(graph, key=lambda d: RANK.get(d, 99)):
            print(f"{k} -> {' '.join(sorted(graph[k], key=lambda d: RANK.get(d, 99)))}")
    for b in bad:
        print(b)
    print(f"{len(bad)} back-arrows; layers " + " < ".join("/".join(r) for r in ORDER))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
