"""Planted circuits: initialise a testbed model so that it copies from its context at step 0.

`plant_induction_circuit` (train.py --plant induction, the default) plants the whole circuit;
`plant_prev_token_head` (--plant prev, runs v5/v6/rep_warm) only a previous-token head, which was
not enough. `plant_kind` reads the choice back from a run's arguments.

Why: measured on this machine (README, Status), a model of this size trained from a random init on
repeated random tokens of random lengths sits on the induction-head plateau for 500+ steps (4k
tokens/step) -- and an independent minimal GPT written for the check (same data; not kept) plateaus the same way,
so it is the known compute cost of forming induction heads (Olsson et al. 2022; Bietti et al. 2023
needed ~30 M tokens), not a bug. Planting only the previous-token head shortened it a little. This
module plants the whole two-layer induction circuit, so training starts from a model that already
attends from "current token" to "the token after its previous occurrence" and copies it. Everything
stays an ordinary, fully trainable LlamaForCausalLM (the plant is an initialisation).

Residual-stream layout at init (hidden C, head_dim D, tied embeddings; v7: C 256, D 32; v8: C 384, D 64):
  dims   0..C/2-1        token content: embed_tokens[:, :C/2] random N(0, sigma^2)
  dims C/2..C/2+2D-1     previous-token content, written by layer 0 (D dims per planted head)
  dim  C-1               a constant kappa in every token's embedding (positional q/k of the layer-0 heads)
Layer 0, query heads 0 and R (KV heads 0 and 1): previous-token heads. q and k read only the
  constant dimension on the highest-frequency RoPE pairs, k pre-rotated by one position, so
  q_m . k_n ~ sum_j cos((m - n - 1) theta_j) peaks at n = m - 1; V of KV head g is an orthonormal
  projection P_g (32 x 128) of the token dims, O writes it into dims 128 + 32 g ...
Layer 1, query heads 0 and R: induction heads. q = b * P_g(token dims of the current token) and
  k = b * (previous-token dims), both on the low-frequency RoPE pairs only (the rotation by the
  relative position is small there, so the match is content-based at any offset), so the head
  attends to positions whose previous token equals the current token; V of KV head g = P_g(token
  dims), O = delta * P_g^T: the attended token's embedding (projected) is added to the stream and,
  through the tied lm_head, predicted.
Every other residual branch (other heads' o_proj columns, every down_proj) is scaled down by
`branch_scale` so the planted signal is not drowned at init; `model.norm.weight` is set to
`final_gain` so logits can be confident. Requires: tied embeddings, C/2 >= 2 D and C/2 + 2 D < C,
>= 2 KV heads, >= 2 layers.
"""
import math

import torch


def _orthonormal_rows(n_rows, n_cols, gen):
    a = torch.randn(n_cols, n_rows, generator=gen)
    q, _ = torch.linalg.qr(a)          # [n_cols, n_rows] orthonormal columns
    return q.T.contiguous()            # [n_rows, n_cols] orthonormal rows


def rope_freqs(cfg):
    D = cfg.head_dim
    return 1.0 / (cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))


def prev_head_margin(freqs, max_len):
    """min over offsets d != 1 in [0, max_len) of sum_j (1 - cos((d - 1) f_j)) (unit amplitude)."""
    d = torch.arange(0, max_len, dtype=torch.float64)
    s = torch.cos((d[:, None] - 1) * freqs[None, :]).sum(-1)
    s[1] = -1e9
    return float(len(freqs) - s.max())


@torch.no_grad()
def plant_prev_token_head(model, layer=0, head=0, dim=0, kappa=1.0, amp=0.65, pairs=8, ov_gain=3.0):
    """Initialise one attention head as a previous-token head (content-independent, attends to
    position t-1), so training does not have to discover it.

    Why: content-based induction heads (what needle retrieval and copying need) form here only
    after a long plateau (measured: repeated random sequences of varying length, 0-2% copy
    accuracy after 400 steps), because the induction head's QK circuit gets no gradient until a
    previous-token head exists and vice versa. Breaking that tie with a planted previous-token
    head is standard (e.g. Bietti et al. 2023, "Birth of a Transformer: a memory viewpoint").
    Construction: embedding dimension `dim` gets the constant `kappa` for every token, so after
    RMSNorm it is ~constant; the head's q and k read only that dimension, on the `pairs`
    highest-frequency RoPE pairs, with k pre-rotated by +theta_j so that
    q_m . k_n ~ sum_j cos((n - m + 1) theta_j) peaks at n = m - 1. `amp` sets the margin
    (about 12 logits over every other offset up to 2,048 with the defaults). The value/output
    weights stay random (a random projection of the previous token), scaled by `ov_gain`.
    Everything stays trainable; the model is an ordinary Llama.
    """
    cfg = model.cfg
    D, R = cfg.head_dim, cfg.num_attention_heads // cfg.num_key_value_heads
    g = head // R
    emb = model.model.embed_tokens.weight
    emb[:, dim] = kappa
    att = model.model.layers[layer].self_attn
    theta = 1.0 / (cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    qrows = slice(head * D, (head + 1) * D)
    krows = slice(g * D, (g + 1) * D)
    att.q_proj.weight[qrows] = 0
    att.k_proj.weight[krows] = 0
    for j in range(pairs):
        att.q_proj.weight[head * D + j, dim] = amp
        att.k_proj.weight[g * D + j, dim] = amp * math.cos(theta[j])
        att.k_proj.weight[g * D + j + D // 2, dim] = amp * math.sin(theta[j])
    att.v_proj.weight[krows] *= ov_gain
    att.o_proj.weight[:, qrows] *= ov_gain


def plant_kind(args):
    """The --plant choice of a run's args (a dict or Namespace); runs before session 7 stored a boolean."""
    v = args.get("plant", "none") if isinstance(args, dict) else getattr(args, "plant", "none")
    return {True: "prev", False: "none"}.get(v, v)


@torch.no_grad()
def plant_induction_circuit(model, seed, sigma=0.02, n_pos_pairs=None, prev_margin_logits=10.0,
                            match_logit=24.0, copy_gain=8.0, final_gain=8.0, branch_scale=0.1, max_len=2048):
    cfg = model.cfg
    C, D, H, G = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    assert cfg.tie_word_embeddings, "the planted circuit predicts through the tied lm_head"
    # Layout (any hidden size C and head_dim D): token content in the first half of the stream,
    # the two planted heads' previous-token copies (2 D dims) right after it, the constant last.
    # v7 (C 256, D 32): 0..127 / 128..191 / 255; v8 (C 384, D 64): 0..191 / 192..319 / 383.
    T0, T1 = 0, C // 2
    P0, CONST = T1, C - 1
    assert G >= 2 and cfg.num_hidden_layers >= 2, "the circuit needs >= 2 KV heads and >= 2 layers"
    assert P0 + 2 * D <= CONST and 2 * D <= T1 - T0, \
        "hidden %d too small for head_dim %d: needs C/2 >= 2 D and C/2 + 2 D < C" % (C, D)
    R = H // G
    half = D // 2
    gen = torch.Generator().manual_seed(seed + 7919)
    freqs = rope_freqs(cfg)
    # low-frequency pairs: rotation < ~1 rad over 1,024 positions; the rest carry positions
    low = [j for j in range(half) if freqs[j] * 1024 <= 1.0]
    if n_pos_pairs is None:
        n_pos_pairs = half - len(low)
    pos_pairs = list(range(n_pos_pairs))
    slots = [j for j in low] + [j + half for j in low]          # q/k rows used for content matching
    assert len(slots) <= D

    emb = model.model.embed_tokens.weight
    emb.zero_()
    emb[:, T0:T1] = torch.randn(emb.shape[0], T1 - T0, generator=gen) * sigma
    kappa = math.sqrt(T1 - T0) * sigma                         # the constant holds half the energy
    emb[:, CONST] = kappa
    rms0 = math.sqrt(((T1 - T0) * sigma ** 2 + kappa ** 2) / C)  # RMS of a bare embedding
    const_n = kappa / rms0                                       # the constant after RMSNorm
    P = _orthonormal_rows(2 * D, T1 - T0, gen)                  # P_0 = rows 0..D-1, P_1 = rows D..2D-1

    for layer in model.model.layers:
        layer.mlp.down_proj.weight.mul_(branch_scale)
        layer.self_attn.o_proj.weight.mul_(branch_scale)

    # ---- layer 0: previous-token heads on query heads 0 and R (KV heads 0 and 1)
    att = model.model.layers[0].self_attn
    m = prev_head_margin(freqs[:n_pos_pairs], max_len)
    amp = math.sqrt(prev_margin_logits * math.sqrt(D) / m) / const_n
    for g in (0, 1):
        h = g * R
        att.q_proj.weight[h * D:(h + 1) * D] = 0
        att.k_proj.weight[g * D:(g + 1) * D] = 0
        for j in pos_pairs:
            att.q_proj.weight[h * D + j, CONST] = amp
            att.k_proj.weight[g * D + j, CONST] = amp * math.cos(freqs[j])
            att.k_proj.weight[g * D + j + half, CONST] = amp * math.sin(freqs[j])
        att.v_proj.weight[g * D:(g + 1) * D] = 0
        att.v_proj.weight[g * D:(g + 1) * D, T0:T1] = P[g * D:(g + 1) * D]
        att.o_proj.weight[:, h * D:(h + 1) * D] = 0
        for i in range(D):
            att.o_proj.weight[P0 + g * D + i, h * D + i] = sigma   # same scale as the token dims

    # ---- layer 1: induction heads on query heads 0 and R
    att = model.model.layers[1].self_attn
    rms1 = math.sqrt(((T1 - T0) * sigma ** 2 + kappa ** 2 + 2 * D * sigma ** 2) / C)
    # match score = b^2 * |slots| / rms-normalised ... : token dims and prev dims are ~N(0, (sigma/rms1)^2)
    unit = (sigma / rms1) ** 2 * len(slots) / math.sqrt(D)
    b = math.sqrt(match_logit / unit)
    for g in (0, 1):
        h = g * R
        att.q_proj.weight[h * D:(h + 1) * D] = 0
        att.k_proj.weight[g * D:(g + 1) * D] = 0
        for s, row in enumerate(slots):
            att.q_proj.weight[h * D + row, T0:T1] = b * P[g * D + s]
            att.k_proj.weight[g * D + row, P0 + g * D + s] = b
        att.v_proj.weight[g * D:(g + 1) * D] = 0
        att.v_proj.weight[g * D:(g + 1) * D, T0:T1] = P[g * D:(g + 1) * D]
        att.o_proj.weight[:, h * D:(h + 1) * D] = 0
        att.o_proj.weight[T0:T1, h * D:(h + 1) * D] = copy_gain * sigma * P[g * D:(g + 1) * D].T
    model.model.norm.weight.fill_(final_gain)
    return dict(kappa=kappa, prev_amp=amp, prev_margin_unit=m, match_b=b, low_pairs=low, pos_pairs=pos_pairs)
