"""Compactor's sketched leverage against the exact leverage, on a trained model's real keys (issue 27).

  /usr/bin/python3 -m testbed.probe_leverage --model testbed/models/v8s1 [--n 4 --length 2048]

For held-out NIAH prompts it takes every layer's pre-RoPE keys per KV head (K, N tokens x d, what
Compactor scores) and compares, per (layer, KV head):
  * exact leverage  l_i = ||U_i||^2 with K = U S V^T (numpy SVD; rank from S > 1e-6 S_max),
  * the sketch of Compactor's Algorithm 1 (docs/methods/compactor.md): Phi in R^{d x k} with entries
    N(0, 1/k), K^ = K Phi, K^T K^ = V L V^T, U~ = K^ V L^{-1/2}, l~_i = ||U~_i||^2 (k = 48),
written here from the paper with numpy (no engine code), over the whole sequence (the paper preset)
(the paper preset, what `compactor` runs by default).
Reported: Spearman rho between l and l~ (mean, min over heads and prompts), and the overlap of
their top quarters. With d <= k the sketch is exact (v7: d = 32); v8 has d = 64 > k = 48.
"""
import argparse

import numpy as np
import torch

from .export import load_hf
from .tasks import Resources, make_eval_niah


def spearman(a, b):
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    ra -= ra.mean()
    rb -= rb.mean()
    return float((ra * rb).sum() / np.sqrt((ra * ra).sum() * (rb * rb).sum()))


def exact_leverage(K):
    U, S, _ = np.linalg.svd(K, full_matrices=False)
    r = int((S > 1e-6 * S[0]).sum())
    return (U[:, :r] ** 2).sum(1)


def sketch_leverage(K, k, rng):
    d = K.shape[1]
    Phi = rng.standard_normal((d, k)) / np.sqrt(k)
    Kh = K @ Phi                                       # [N, k]
    lam, V = np.linalg.eigh(Kh.T @ Kh)                 # ascending
    keep = lam > 1e-12 * lam.max()                 # eigenvalues are squared singular values: the same 1e-6 cut
    Ut = Kh @ V[:, keep] / np.sqrt(lam[keep])          # [N, r]
    return (Ut ** 2).sum(1)


@torch.no_grad()
def pre_rope_keys(m, ids):
    """[layers][G] arrays of [N, D] pre-RoPE keys."""
    from .model import rope_cos_sin
    cfg = m.cfg
    G, D = cfg.num_key_value_heads, cfg.head_dim
    x = torch.tensor([ids])
    T = x.shape[1]
    cos, sin = rope_cos_sin(cfg, torch.arange(T))
    h = m.model.embed_tokens(x)
    out = []
    for layer in m.model.layers:
        k = layer.self_attn.k_proj(layer.input_layernorm(h)).view(T, G, D).double().numpy()
        out.append([k[:, g] for g in range(G)])
        h = layer(h, cos, sin)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="HF directory")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--k", type=int, default=48)
    ap.add_argument("--draws", type=int, default=3, help="sketches per head (different Phi)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    m, R = load_hf(a.model), Resources()
    rng = np.random.default_rng(0)
    rho, top = [], []
    per_layer = {}
    for idx in range(a.n):
        ids, _, _ = make_eval_niah(R, 12345, idx, a.length)
        for li, heads in enumerate(pre_rope_keys(m, list(ids))):
            for K in heads:
                ex = exact_leverage(K)
                q = len(ex) // 4
                tex = set(np.argsort(-ex)[:q])
                for _ in range(a.draws):
                    sk = sketch_leverage(K, a.k, rng)
                    r = spearman(ex, sk)
                    rho.append(r)
                    top.append(len(tex & set(np.argsort(-sk)[:q])) / q)
                    per_layer.setdefault(li, []).append(r)
    d = m.cfg.head_dim
    print("%s: head_dim %d, sketch k = %d%s; %d prompts of %d tokens x %d layers x %d KV heads x %d sketches" % (
        a.model, d, a.k, " (k >= d: exact)" if a.k >= d else "", a.n, a.length, m.cfg.num_hidden_layers,
        m.cfg.num_key_value_heads, a.draws))
    print("  Spearman rho (sketch vs exact leverage): mean %.3f, min %.3f; top-quarter overlap mean %.3f, min %.3f" % (
        np.mean(rho), np.min(rho), np.mean(top), np.min(top)))
    print("  per layer, mean rho: " + " ".join("L%d %.3f" % (li, np.mean(v)) for li, v in sorted(per_layer.items())))


if __name__ == "__main__":
    main()
