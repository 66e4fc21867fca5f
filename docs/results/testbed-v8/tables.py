#!/usr/bin/env python3
"""Tables of docs/results/testbed-v8/README.md from the result lines of this folder's runs.

  python3 docs/results/testbed-v8/tables.py [--only=P1,P2] DIR [DIR ...]   (each DIR holds a results.jsonl or results.jsonl.gz;
  DIR@SUFFIX appends SUFFIX to that run's press names and drops its full-cache lines)

Per task (score x 100, mean over samples; n per cell), press x keep; then one summary table: NIAH and
the mean of the RULER tasks the model answers at full cache per keep, with the measured keep and the KV bytes held after compression
(mean over the lines). Lines of several DIRs are pooled (e.g. v8s1 and its extra presses).
"""
import collections
import gzip
import json
import os
import sys

KEEPS = ["1", "0.5", "0.25", "0.1"]


def load(dirs):
    rows = []
    for d in dirs:
        d, _, suffix = d.partition("@")  # DIR@SUFFIX: that run's presses get SUFFIX (the same press, another setting)
        p = os.path.join(d, "results.jsonl")
        f = open(p) if os.path.exists(p) else gzip.open(p + ".gz", "rt")  # the committed runs are gzipped
        for line in f:
            r = json.loads(line)
            if suffix and r["press"] != "full":
                r["press"] += suffix
            elif suffix:
                continue
            if r.get("keep_label") in (None, "auto"):
                r["keep_label"] = "auto"
            rows.append(r)
    return rows


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def main():
    args = sys.argv[1:]
    only = None
    if args and args[0].startswith("--only="):  # --only=press1,press2: these presses (and full) alone
        only = set(args[0][7:].split(",")) | {"full"}
        args = args[1:]
    rows = [r for r in load(args) if only is None or r["press"] in only]
    presses = list(dict.fromkeys(r["press"] for r in rows))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    keeps = [k for k in KEEPS + ["auto"] if any(r["keep_label"] == k for r in rows)]
    cell = collections.defaultdict(list)
    for r in rows:
        cell[(r["task"], r["press"], r["keep_label"])].append(r)
    scale = {t: (1 if rows and next(r for r in rows if r["task"] == t)["metric"] == "nll" else 100) for t in tasks}
    for t in tasks:
        print("\n### %s (%s)\n" % (t, "NLL, nats/token" if scale[t] == 1 else "score x 100"))
        print("| press | " + " | ".join("keep " + k for k in keeps) + " |")
        print("|---|" + "---|" * len(keeps))
        for p in presses:
            vals = []
            for k in keeps:
                c = cell.get((t, p, k))
                vals.append("" if not c else ("%.1f (n=%d)" % (scale[t] * mean([x["score"] for x in c]), len(c))
                                              if scale[t] != 1 else "%.3f (n=%d)" % (mean([x["score"] for x in c]), len(c))))
            if any(vals):
                print("| %s | %s |" % (p, " | ".join(vals)))
    # RULER tasks the model answers at full cache (>= 50): a task it fails uncompressed says nothing
    # about compression (ruler_vt: 5 on v8s1)
    ruler = [t for t in tasks if t.startswith("ruler_") and cell.get((t, "full", "1"))
             and mean([x["score"] for x in cell[(t, "full", "1")]]) >= 0.5]
    if "niah" in tasks:
        print("\n### Summary: NIAH / mean of the %d RULER tasks answered at full cache (%s) (score x 100); "
              "measured keep, KV held (MiB)\n" % (len(ruler), ", ".join(t[6:] for t in ruler)))
        print("| press | " + " | ".join("keep " + k for k in keeps) + " |")
        print("|---|" + "---|" * len(keeps))
        for p in presses:
            vals = []
            for k in keeps:
                n = cell.get(("niah", p, k))
                rr = [mean([x["score"] for x in cell[(t, p, k)]]) for t in ruler if cell.get((t, p, k))]
                allc = [x for t in tasks for x in cell.get((t, p, k), [])]
                if not n and not rr:
                    vals.append("")
                    continue
                vals.append("%s / %s (%.2f, %.2f)" % (
                    "%.0f" % (100 * mean([x["score"] for x in n])) if n else "-",
                    "%.0f" % (100 * mean(rr)) if rr else "-",
                    mean([x["measured_keep"] for x in allc]), mean([x["kept_bytes"] for x in allc]) / 2 ** 20))
            print("| %s | %s |" % (p, " | ".join(vals)))


if __name__ == "__main__":
    main()
