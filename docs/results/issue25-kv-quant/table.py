#!/usr/bin/env python3
"""Joins the three runs (f16, q8_0, q4_0) of this folder into one table: NIAH score and PG-19 NLL per
press x keep x KV type, with the KV bytes held. Usage: table.py [DIR] (default: this folder)."""
import collections
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
types = ["f16", "q8_0", "q4_0"]
cells = collections.defaultdict(list)  # (task, press, keep, type) -> [(score, kept_bytes)]
for t in types:
    for line in open(os.path.join(d, t, "results.jsonl")):
        r = json.loads(line)
        cells[(r["task"], r["press"], r["keep_label"], t)].append((r["score"], r["kept_bytes"]))
presses = ["full", "snapkv", "kvzip", "d2o"]
keeps = ["1", "0.25", "0.1"]
for task, label, scale in (("niah", "NIAH score x 100 (n = 22 per cell: 11 depths x 2, 1,024 tokens)", 100),
                           ("ppl_pg19", "PG-19 streamed NLL, nats/token (2 windows of 2,048 tokens), lower is better", 1)):
    print(f"\n{label}; KV bytes held after compression in brackets (mean)\n")
    print("| press | keep | " + " | ".join(types) + " |")
    print("|---|---|" + "---|" * len(types))
    for p in presses:
        for k in keeps:
            row = []
            for t in types:
                v = cells.get((task, p, k, t))
                if not v:
                    row.append("")
                    continue
                s = sum(x[0] for x in v) / len(v) * scale
                b = sum(x[1] for x in v) / len(v)
                row.append(f"{s:.1f} ({b / 1024:.0f} KiB)" if scale == 100 else f"{s:.3f} ({b / 1024:.0f} KiB)")
            if any(row):
                print(f"| {p} | {k} | " + " | ".join(row) + " |")
