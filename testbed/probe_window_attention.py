"""Where does SnapKV's observation window look on a NIAH prompt? (diagnostic for docs/results)

  /usr/bin/python3 -m testbed.probe_window_attention --model testbed/models/v7s1

For held-out 1,024-token NIAH prompts (the question at the end, i.e. the query-aware setting) it
computes SnapKV's score per KV head -- attention of the last 64 queries summed over the group's
query heads, average-pooled with kernel 5 -- keeps the top (keep x T - 64) older tokens per head,
and reports how much of the needle's value survives: the share of (layer, KV head) pairs that keep
every value token, and the mean share of value tokens kept per head. A value the window attends to
survives more often than the keep ratio; one it ignores, less often.

It also reports where the window's attention goes (issue 27: does the question itself look at the
needle?): the share of the window's attention mass (over the tokens before the window) that falls on
the needle sentence, per (layer, KV head) -- mean, and the largest head -- beside the needle's share of
those tokens (what uniform attention would give); and how often the needle's key tokens survive.
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F

from .export import load_hf
from .model import apply_rope, rope_cos_sin
from .tasks import Resources, make_eval_niah


def value_positions(ids, ans_ids):
    for p in range(len(ids) - len(ans_ids)):
        if ids[p:p + len(ans_ids)] == ans_ids:
            return list(range(p, p + len(ans_ids)))
    raise ValueError("needle value not found in the prompt")


@torch.no_grad()
def attention_rows(m, ids, qpos):
    """Per layer, the causal attention of the queries at positions qpos: a list of [H, len(qpos), T]
    (every row sums to 1; query head h reads KV head h // (H / G))."""
    cfg = m.cfg
    H, G, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    x = torch.tensor([ids])
    T = x.shape[1]
    cos, sin = rope_cos_sin(cfg, torch.arange(T))
    h = m.model.embed_tokens(x)
    qp = torch.tensor(qpos)
    out = []
    for layer in m.model.layers:
        a = layer.self_attn
        xn = layer.input_layernorm(h)
        q = apply_rope(a.q_proj(xn).view(1, T, H, D).transpose(1, 2), cos, sin)[:, :, qp]
        k = apply_rope(a.k_proj(xn).view(1, T, G, D).transpose(1, 2), cos, sin).repeat_interleave(H // G, dim=1)
        att = (q @ k.transpose(-1, -2)) / D ** 0.5                               # [1, H, Q, T]
        out.append(att.masked_fill(torch.arange(T)[None, :] > qp[:, None], float("-inf")).softmax(-1)[0])
        h = layer(h, cos, sin)
    return out


def window_scores(m, ids, W=64, kernel=5):
    """SnapKV's scores of the tokens before the last W: pooled and raw, [layers * G, T - W] each."""
    G, T = m.cfg.num_key_value_heads, len(ids)
    out, raw = [], []
    for att in attention_rows(m, ids, list(range(T - W, T))):                  # [H, W, T]
        s = att.sum(1).view(G, -1, T).sum(1)                                     # [G, T]
        raw.append(s[:, :T - W])
        s = F.avg_pool1d(s[:, None], kernel, 1, kernel // 2, count_include_pad=False)[:, 0]
        out.append(s[:, :T - W])
    return torch.cat(out), torch.cat(raw)


def query_attention(m, ids, qpos):
    """Attention of the queries at positions qpos, [layers * G, len(qpos), T]: each KV head's query
    group averaged (every row sums to 1)."""
    G, T = m.cfg.num_key_value_heads, len(ids)
    return torch.cat([att.view(G, -1, len(qpos), T).mean(1) for att in attention_rows(m, ids, qpos)])


def needle_span(R, ids, vpos, vkind):
    """(start, key_start, key_end, end) of the needle sentence holding the value at vpos: the last
    occurrence of the template's lead-in before the value (testbed.tasks.niah_templates()[0])."""
    lead = R.cont(" One of the special magic %ss for" % ("number" if vkind.startswith("digits") else "word"))
    for p in range(vpos[0] - len(lead), -1, -1):
        if ids[p:p + len(lead)] == lead:
            key_end = vpos[0] - len(R.cont(" is:"))
            return p, p + len(lead), key_end, vpos[-1] + 2   # + the closing "."
    raise ValueError("needle lead-in not found")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="HF directory")
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--length", type=int, default=1024)
    a = ap.parse_args()
    torch.set_num_threads(1)
    m, R, W = load_hf(a.model), Resources(), 64
    for vkind in ("digits7", "word1"):
        res = {0.5: [], 0.25: [], 0.1: []}
        share = []  # per prompt: (needle share of tokens, mean head share of attention, max head share)
        qshare = []  # the same for the queries at the question's key tokens
        for idx in range(a.n):
            ids, ans, _ = make_eval_niah(R, 12345, idx, a.length, vkind=vkind)
            ids = list(ids)
            pos = value_positions(ids, R.cont(" " + ans))
            n0, k0, k1, n1 = needle_span(R, ids, pos, vkind)
            S, A = window_scores(m, ids, W)
            mass = A[:, n0:n1].sum(1) / A.sum(1)                                   # [layers * G]
            share.append(((n1 - n0) / A.shape[1], float(mass.mean()), float(mass.max())))
            key = ids[k0:k1]
            qk = [p + j for p in range(n1, len(ids) - len(key) + 1) if ids[p:p + len(key)] == key for j in range(len(key))]
            if qk:
                QA = query_attention(m, ids, qk)[:, :, n0:n1].sum(-1).mean(1)          # [layers * G]
                qshare.append(((n1 - n0) / len(ids), float(QA.mean()), float(QA.max())))
            for kf in res:
                top = S.topk(max(1, int(kf * len(ids)) - W), dim=1).indices
                keep = torch.zeros_like(S, dtype=torch.bool).scatter_(1, top, True)
                kept, kkey = keep[:, pos], keep[:, k0:k1]
                res[kf].append((float(kept.all(1).float().mean()), float(kept.float().mean()),
                                float(kkey.float().mean())))
        print("%s needles (%d value tokens, %d key tokens), n=%d:" % (vkind, len(pos), k1 - k0, a.n))
        sh = np.array(share)
        print("  window attention on the needle sentence: %.1f%% of the mass per (layer, KV head) on average, "
              "%.1f%% in the head that looks most (the sentence is %.1f%% of the tokens)" % (
                  100 * sh[:, 1].mean(), 100 * sh[:, 2].mean(), 100 * sh[:, 0].mean()))
        if qshare:
            qs = np.array(qshare)
            print("  attention from the question's key tokens (%d of %d prompts have the key in the question) on "
                  "the needle sentence: %.1f%% per (layer, KV head) on average, %.1f%% in the head that looks most "
                  "(the sentence is %.1f%% of the tokens)" % (len(qs), a.n, 100 * qs[:, 1].mean(), 100 * qs[:, 2].mean(),
                                                            100 * qs[:, 0].mean()))
        for kf, v in res.items():
            v = np.array(v)
            print("  keep %.2f: heads keeping the whole value %.2f, value tokens kept per head %.2f, "
                  "key tokens kept per head %.2f" % (kf, v[:, 0].mean(), v[:, 1].mean(), v[:, 2].mean()))


if __name__ == "__main__":
    main()
