"""Where does SnapKV's observation window look on a NIAH prompt? (diagnostic for docs/results)

  /usr/bin/python3 -m testbed.probe_window_attention --model testbed/models/v7s1

For held-out 1,024-token NIAH prompts (the question at the end, i.e. the query-aware setting) it
computes SnapKV's score per KV head -- attention of the last 64 queries summed over the group's
query heads, average-pooled with kernel 5 -- keeps the top (keep x T - 64) older tokens per head,
and reports how much of the needle's value survives: the share of (layer, KV head) pairs that keep
every value token, and the mean share of value tokens kept per head. A value the window attends to
survives more often than the keep ratio; one it ignores, less often.
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
def window_scores(m, ids, W=64, kernel=5):
    cfg = m.cfg
    H, G, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    x = torch.tensor([ids])
    T = x.shape[1]
    cos, sin = rope_cos_sin(cfg, torch.arange(T))
    h = m.model.embed_tokens(x)
    out = []
    for layer in m.model.layers:
        a = layer.self_attn
        xn = layer.input_layernorm(h)
        q = apply_rope(a.q_proj(xn).view(1, T, H, D).transpose(1, 2), cos, sin)
        k = apply_rope(a.k_proj(xn).view(1, T, G, D).transpose(1, 2), cos, sin).repeat_interleave(H // G, dim=1)
        att = (q[:, :, -W:] @ k.transpose(-1, -2)) / D ** 0.5
        mask = torch.arange(T)[None, :] > torch.arange(T - W, T)[:, None]
        att = att.masked_fill(mask, float("-inf")).softmax(-1)[0]             # [H, W, T]
        s = att.sum(1).view(G, H // G, T).sum(1)                                 # [G, T]
        s = F.avg_pool1d(s[:, None], kernel, 1, kernel // 2, count_include_pad=False)[:, 0]
        out.append(s[:, :T - W])
        h = layer(h, cos, sin)
    return torch.cat(out)                                                        # [layers * G, T - W]


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
        for idx in range(a.n):
            ids, ans, _ = make_eval_niah(R, 12345, idx, a.length, vkind=vkind)
            ids = list(ids)
            pos = value_positions(ids, R.cont(" " + ans))
            S = window_scores(m, ids, W)
            for kf in res:
                top = S.topk(max(1, int(kf * len(ids)) - W), dim=1).indices
                kept = torch.zeros_like(S, dtype=torch.bool).scatter_(1, top, True)[:, pos]
                res[kf].append((float(kept.all(1).float().mean()), float(kept.float().mean())))
        print("%s needles (%d value tokens), n=%d:" % (vkind, len(pos), a.n))
        for kf, v in res.items():
            v = np.array(v)
            print("  keep %.2f: heads keeping the whole value %.2f, value tokens kept per head %.2f" % (kf, v[:, 0].mean(), v[:, 1].mean()))


if __name__ == "__main__":
    main()
