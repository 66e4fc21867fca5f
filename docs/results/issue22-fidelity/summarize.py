#!/usr/bin/env python3
"""Score x 100 per (press, keep) and task from a results.jsonl[.gz], as a markdown table.
Usage: summarize.py DIR [--keeps 0.5,0.25,0.1]"""
import gzip, json, statistics, sys
from collections import defaultdict

def lines(d):
    for name in ("results.jsonl", "results.jsonl.gz"):
        try:
            op = gzip.open if name.endswith(".gz") else open
            with op(f"{d}/{name}", "rt") as f:
                return [json.loads(l) for l in f if l.strip()]
        except FileNotFoundError:
            pass
    sys.exit(f"no results in {d}")

d = sys.argv[1]
keeps = sys.argv[sys.argv.index("--keeps") + 1].split(",") if "--keeps" in sys.argv else None
rows = lines(d)
tasks = list(dict.fromkeys(r["task"] for r in rows))
presses = list(dict.fromkeys(r["press"] for r in rows))
cell = defaultdict(list)
meas = defaultdict(list)
for r in rows:
    cell[(r["press"], r["keep_label"], r["task"])].append(r["score"])
    meas[(r["press"], r["keep_label"])].append(r["measured_keep"])
ks = keeps or list(dict.fromkeys(r["keep_label"] for r in rows))
print("| press | " + " | ".join(f"{t} {k}" for t in tasks for k in ks) + " |")
print("|---|" + "---:|" * (len(tasks) * len(ks)))
for p in presses:
    out = []
    for t in tasks:
        for k in ks:
            v = cell.get((p, k, t))
            if not v and (p, "1", t) in cell and p == "full":
                v = cell[(p, "1", t)]
            out.append(f"{100 * statistics.mean(v):.1f}" if v else "")
    print(f"| {p} | " + " | ".join(out) + " |")
print()
print("measured keep (mean): " + "; ".join(f"{p} @{k}: {statistics.mean(v):.3f}" for (p, k), v in meas.items() if k != "1"))
