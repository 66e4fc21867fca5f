#!/usr/bin/python3
"""Paired comparisons of streamed-perplexity runs (kvshrink eval ppl_* lines).

Every press of a run reads the same text windows, so differences are taken window by window:
for each task and keep, mean NLL over the positions AFTER the budget (where eviction can matter;
the first `budget_tokens` predictions are identical for every press) and the paired difference of
each press against a reference press, with its standard error over windows.

    /usr/bin/python3 docs/results/d2o-gvote/paired.py DIR [--ref h2o] [--presses a,b,...]
DIR holds results.jsonl or results.jsonl.gz.
"""
import argparse
import collections
import gzip
import json
import math
import os


def load(d):
    p = os.path.join(d, "results.jsonl")
    f = open(p) if os.path.exists(p) else gzip.open(p + ".gz", "rt")
    with f:
        return [json.loads(l) for l in f if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--ref", default="h2o")
    ap.add_argument("--presses", default="")
    a = ap.parse_args()
    rows = [r for r in load(a.dir) if r["task"].startswith("ppl_")]
    # tail NLL per (task, keep, press, sample); the full press has keep 1 and serves every keep
    tail = collections.defaultdict(dict)
    full = collections.defaultdict(dict)
    for r in rows:
        nll = r["nll"]
        if r["press"] == "full":
            full[r["task"]][r["sample"]] = nll
            continue
        b = r["budget_tokens"]
        tail[(r["task"], r["keep_label"])][(r["press"], r["sample"])] = (b, nll)
    order = [p for p in a.presses.split(",") if p]
    for (task, keep) in sorted(tail, key=lambda k: (k[0], -float(k[1]))):
        cell = tail[(task, keep)]
        presses = order or sorted({p for p, _ in cell})
        samples = sorted({s for _, s in cell})
        print(f"\n{task}, keep {keep}: mean NLL after the budget (positions > budget), paired vs {a.ref} (n windows)")
        print("| press | NLL after budget | vs full | vs %s (+- s.e.) |" % a.ref)
        print("|---|---:|---:|---:|")
        for p in presses:
            vals, dfull, dref = [], [], []
            for s in samples:
                if (p, s) not in cell:
                    continue
                b, nll = cell[(p, s)]
                t = nll[b:]
                m = sum(t) / len(t)
                vals.append(m)
                if s in full[task]:
                    ft = full[task][s][b:]
                    dfull.append(m - sum(ft) / len(ft))
                if (a.ref, s) in cell:
                    rb, rn = cell[(a.ref, s)]
                    rt = rn[b:]
                    dref.append(m - sum(rt) / len(rt))
            if not vals:
                continue

            def ms(x):
                if not x:
                    return "", ""
                mu = sum(x) / len(x)
                se = math.sqrt(sum((v - mu) ** 2 for v in x) / (len(x) - 1) / len(x)) if len(x) > 1 else float("nan")
                return mu, se

            mu_f, _ = ms(dfull)
            mu_r, se_r = ms(dref)
            ref = "" if p == a.ref else f"{mu_r:+.4f} +- {se_r:.4f}"
            print(f"| {p} | {sum(vals) / len(vals):.4f} (n={len(vals)}) | {mu_f:+.4f} | {ref} |")


if __name__ == "__main__":
    main()
