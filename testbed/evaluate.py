"""Held-out retrieval accuracy: RULER-worded needle in a haystack, greedy, exact match.

  /usr/bin/python3 -m testbed.evaluate --ckpt testbed/runs/main/ckpt_last.pt [--lengths 256,512,1024,2048]
  /usr/bin/python3 -m testbed.evaluate --hf testbed/runs/main/hf      (an exported HF directory)

Keys are RULER adj-noun keys from the held-out word pool; values are 7-digit numbers (exact
7-digit match) or held-out single-token nouns; haystack = the 49 NIAH essays (default), or held-out
PG-19 / WikiText-2 text. The needle depth cycles through 10 buckets.
"""
import argparse
import json
import re
import time

import numpy as np
import torch

from .results_table import acc_rows
from .tasks import make_eval_niah

# (name, value kind, key kind, n needles, min length, max length)
EVAL_SETS = [
    ("num", "digits7", "adjnoun", 1, 256, 1 << 30),
    ("word", "word1", "adjnoun", 1, 256, 1 << 30),
    ("num_mk4", "digits7", "adjnoun", 4, 256, 1 << 30),   # 3 distractor needles with other keys
    ("word_w1key", "word1", "word1", 1, 128, 512),         # the phase-1 format (single-token key)
]


def parse_answer(text, vkind):
    if vkind == "digits7":
        m = re.search(r"\d+", text)
        return m.group(0) if m else ""
    m = re.search(r"[A-Za-z]+", text)
    return m.group(0) if m else ""


@torch.no_grad()
def eval_retrieval(model, R, lengths, n=20, seed=12345, sets=None, hay="essays", batch_tokens=16384,
                   chunk=256, examples=False):
    model.eval()
    sets = sets or [s[0] for s in EVAL_SETS]
    res = {}
    for name, vkind, kkind, nn_, minlen, maxlen in EVAL_SETS:
        if name not in sets:
            continue
        for L in lengths:
            if not minlen <= L <= maxlen:
                continue
            items = [make_eval_niah(R, seed, i, L, vkind=vkind, hay=hay, n_needles=nn_, kkind=kkind) for i in range(n)]
            B = max(1, batch_tokens // L)
            correct, shown = 0, []
            for b0 in range(0, n, B):
                chunk_items = items[b0:b0 + B]
                ids = torch.from_numpy(np.stack([it[0] for it in chunk_items])).to(model.lm_head.weight.device)
                out = model.generate(ids, 10 if vkind == "digits7" else 4, chunk=chunk)
                for it, o in zip(chunk_items, out.tolist()):
                    txt = R.tok.decode(o)
                    ok = parse_answer(txt, vkind) == it[1]
                    correct += ok
                    if examples and len(shown) < 3:
                        shown.append((it[1], txt))
            res["%s@%d" % (name, L)] = correct / n
            if examples:
                res["%s@%d_examples" % (name, L)] = shown
    model.train()
    return res


def main():
    from .model import load_checkpoint
    from .tasks import Resources
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt")
    ap.add_argument("--hf")
    ap.add_argument("--lengths", default="128,256,512,1024,2048")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--hay", default="essays", choices=["essays", "pg19", "wikitext"])
    ap.add_argument("--sets", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--md", default=None, help="append the results as a markdown table to this file (a model card)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.hf:
        from .export import load_hf
        model = load_hf(a.hf)
    else:
        model = load_checkpoint(a.ckpt)
    model.to(torch.device(a.device))
    R = Resources()
    t = time.time()
    res = eval_retrieval(model, R, [int(x) for x in a.lengths.split(",")], n=a.n, seed=a.seed,
                         sets=a.sets.split(",") if a.sets else None, hay=a.hay, examples=True)
    res["eval_seconds"] = round(time.time() - t, 1)
    print(json.dumps(res, indent=1))
    if a.md:
        with open(a.md, "a") as f:
            f.write(markdown_table(res, a.n, a.hay, a.seed))


def markdown_table(res, n, hay, seed):
    names = [s[0] for s in EVAL_SETS if any(k.startswith(s[0] + "@") and not k.endswith("_examples") for k in res)]
    hay_txt = {"essays": "NIAH Paul Graham essays (text seen in training; needles never)",
               "pg19": "PG-19 book 10146 (held out)", "wikitext": "WikiText-2 test (held out)"}[hay]
    rows = ["", "### testbed.evaluate: haystack %s, n = %d per cell, seed %d" % (hay_txt, n, seed), ""]
    return "\n".join(rows + acc_rows(res, names)) + "\n"


if __name__ == "__main__":
    main()
