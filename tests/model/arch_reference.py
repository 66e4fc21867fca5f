#!/usr/bin/env python3
"""kvshrink's Qwen3, Gemma 2 and Gemma 3 forwards against independent references (issue 26).

The references below are written from transformers' published definitions in PyTorch (Debian's
python3-torch, float64), one function per model family (Gemma 3 as Gemma 2 plus its additions, as
transformers' modular_gemma3.py derives it), and share no code with the engine:
  - qwen3 (modeling_qwen3.py): Qwen3RMSNorm, Qwen3Attention with q_norm/k_norm over head_dim
    before rotate-half RoPE, Qwen3MLP, Qwen3DecoderLayer, tied or separate lm_head;
  - gemma2 (modeling_gemma2.py): embeddings times sqrt(hidden_size), Gemma2RMSNorm (x * (1 + w)),
    attention scaled by query_pre_attn_scalar^-1/2 and soft-capped (tanh(s / c) * c), a sliding
    window on the even layers (a query sees keys less than sliding_window positions back),
    post-attention and pre/post-feed-forward norms, GeGLU with tanh GELU, final logit soft-capping;
  - gemma3_text (modeling_gemma3.py, Gemma3ForCausalLM): Gemma 2's block with q_norm / k_norm
    (Gemma3RMSNorm, 1 + w, over head_dim) before RoPE, soft-capping only where the config sets it,
    a sliding window on every layer but each sliding_window_pattern-th, and two rotary tables:
    rotary_emb (rope_theta, with rope_scaling: linear divides the frequencies by its factor) on the
    global layers, rotary_emb_local (rope_local_base_freq, unscaled) on the local ones.
Each reads the Hugging Face directory itself (config.json + model.safetensors, parsed here).

    arch_reference.py --bin build/tools/kvshrink [--shape tiny-qwen3|tiny-gemma2|tiny-gemma3] [--n-prompt N]
                      [--stored FILE] [--write-stored]

Steps: `kvshrink make-model --shape S --type f32 --seed 26` writes a random-weight GGUF (llama.cpp's
key and tensor names); `kvshrink convert` writes it as a HF directory; `kvshrink logits` (F32 KV
cache, one prefill batch, then greedy steps) runs both the GGUF and the HF directory on the same
random ids. The reference runs the HF directory on the same ids and takes its own greedy steps.
Checked: per position KL(reference || kvshrink), the largest |logit difference| relative to the
logits' spread, top-1 agreement, and the greedy tokens identical. On tiny-gemma2 and tiny-gemma3
(window 48) the 96 prompt ids run past the window, so the local layers' masks are exercised, in
prefill and decode.

Without torch (CI installs it only with `scripts/setup --train`) the comparison uses the reference's
logits stored in tests/model/data/<shape>_reference.npz (written by --write-stored on a machine
with torch): the weights are a pure function of the shape and seed, so the stored logits are the
reference's for exactly the file make-model writes. With torch, the fresh reference is also compared
with the stored one. Exit 0 on success, 1 on a failed check, 77 when neither torch nor a stored
reference is there.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
N_GREEDY, SEED = 8, 26
N_PROMPT = {"tiny-gemma2": 96, "tiny-gemma3": 96}  # past their 48-token window; 48 elsewhere
STORED = {"tiny-qwen3": "qwen3_tiny_reference.npz", "tiny-gemma2": "gemma2_tiny_reference.npz",
          "tiny-gemma3": "gemma3_tiny_reference.npz"}
# Bounds met by the llama / qwen2 shapes against llama.cpp on F32 files are far looser (KL 1e-5 to
# 1e-4 with F16 attention rounding); with F32 weights, activations and KV on both sides the two
# implementations differ only by float summation order.
MAX_KL, MAX_REL_DIFF = 1e-6, 1e-3


# ---------------------------------------------------------------------------------------------
# The references (torch), from transformers' modeling_qwen3.py, modeling_gemma2.py and modeling_gemma3.py.

def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] != "F32":
                sys.exit(f"{path}: tensor {name} is {info['dtype']}; the reference reads F32 files")
            b, e = info["data_offsets"]
            f.seek(base + b)
            out[name] = np.frombuffer(f.read(e - b), dtype="<f4").reshape(info["shape"]).copy()
    return out


def qwen3_forward(torch, cfg, W):
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, theta, L = cfg["rms_norm_eps"], cfg["rope_theta"], cfg["num_hidden_layers"]
    lm_head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]

    def rms_norm(x, w):  # Qwen3RMSNorm: w * x / sqrt(mean(x^2) + eps), over the last dimension
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def forward(tokens):
        T = len(tokens)
        x = W["model.embed_tokens.weight"][torch.tensor(tokens)]  # [T, E]
        inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
        freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, D]
        cos, sin = emb.cos()[None], emb.sin()[None]  # [1, T, D]
        mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
        for i in range(L):
            p = f"model.layers.{i}."
            h = rms_norm(x, W[p + "input_layernorm.weight"])
            q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, H, D)
            k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, Hkv, D)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, Hkv, D)
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"]).transpose(0, 1)  # [H, T, D]
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"]).transpose(0, 1)  # [Hkv, T, D]
            v = v.transpose(0, 1)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(H // Hkv, dim=0)  # repeat_kv
            v = v.repeat_interleave(H // Hkv, dim=0)
            att = torch.softmax(q @ k.transpose(1, 2) * D ** -0.5 + mask, dim=-1) @ v  # [H, T, D]
            x = x + att.transpose(0, 1).reshape(T, H * D) @ W[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"])
            g = h @ W[p + "mlp.gate_proj.weight"].T
            u = h @ W[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
        return rms_norm(x, W["model.norm.weight"]) @ lm_head.T  # [T, V]

    return forward


def gemma_forward(torch, cfg, W):
    """Gemma 2 (modeling_gemma2.py) and Gemma 3 text (modeling_gemma3.py, whose modular source
    derives it from Gemma 2): the same layer; Gemma 3 adds q_norm / k_norm before RoPE, a local
    rotary table and its own local/global pattern."""
    gemma3 = cfg["model_type"] == "gemma3_text"
    H, Hkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, eps, L = cfg["hidden_size"], cfg["rms_norm_eps"], cfg["num_hidden_layers"]
    window, scaling = cfg["sliding_window"], cfg["query_pre_attn_scalar"] ** -0.5
    # Gemma2DecoderLayer.is_sliding = not layer_idx % 2; Gemma3DecoderLayer: (layer_idx + 1) % pattern.
    pattern = cfg.get("sliding_window_pattern", 6) if gemma3 else 2
    attn_cap, final_cap = cfg.get("attn_logit_softcapping"), cfg.get("final_logit_softcapping")
    emb_w = W["model.embed_tokens.weight"]
    gelu = lambda t: torch.nn.functional.gelu(t, approximate="tanh")  # hidden_activation gelu_pytorch_tanh

    def rms_norm(x, w):  # Gemma2RMSNorm / Gemma3RMSNorm: x / sqrt(mean(x^2) + eps) * (1 + w), last dimension
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * (1.0 + w)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def rope_tables(T, base, factor):  # default rotary embedding, or linear (inv_freq / factor)
        inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D)) / factor
        freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[None], emb.sin()[None]

    rs = cfg.get("rope_scaling") or {}
    rs_type = rs.get("rope_type", rs.get("type", "default"))
    if rs_type not in ("default", "linear"):
        sys.exit(f"reference: rope_scaling {rs_type} not written here")
    global_factor = rs.get("factor", 1.0) if rs_type == "linear" else 1.0

    def forward(tokens):
        T = len(tokens)
        x = emb_w[torch.tensor(tokens)] * torch.tensor(E ** 0.5, dtype=torch.float64)  # the embedding normalizer
        cos_g, sin_g = rope_tables(T, cfg["rope_theta"], global_factor)  # rotary_emb
        # Gemma 3's rotary_emb_local (rope_local_base_freq, unscaled); Gemma 2 has one table.
        cos_l, sin_l = rope_tables(T, cfg.get("rope_local_base_freq", 10000.0), 1.0) if gemma3 else (cos_g, sin_g)
        qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
        causal = torch.where(ki > qi, float("-inf"), 0.0).double()
        sliding = torch.where((ki > qi) | (qi - ki >= window), float("-inf"), 0.0).double()
        for i in range(L):
            p = f"model.layers.{i}."
            is_sliding = bool((i + 1) % pattern)
            cos, sin = (cos_l, sin_l) if is_sliding else (cos_g, sin_g)
            h = rms_norm(x, W[p + "input_layernorm.weight"])
            q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, H, D)
            k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, Hkv, D)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, Hkv, D).transpose(0, 1)
            if gemma3:  # Gemma3Attention: q_norm / k_norm over head_dim, before RoPE
                q = rms_norm(q, W[p + "self_attn.q_norm.weight"])
                k = rms_norm(k, W[p + "self_attn.k_norm.weight"])
            q, k = q.transpose(0, 1), k.transpose(0, 1)  # [H, T, D], [Hkv, T, D]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(H // Hkv, dim=0)
            v = v.repeat_interleave(H // Hkv, dim=0)
            s = q @ k.transpose(1, 2) * scaling
            if attn_cap:
                s = torch.tanh(s / attn_cap) * attn_cap
            s = s + (sliding if is_sliding else causal)
            att = torch.softmax(s, dim=-1) @ v
            a = att.transpose(0, 1).reshape(T, H * D) @ W[p + "self_attn.o_proj.weight"].T
            x = x + rms_norm(a, W[p + "post_attention_layernorm.weight"])
            h = rms_norm(x, W[p + "pre_feedforward_layernorm.weight"])
            f = (gelu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
            x = x + rms_norm(f, W[p + "post_feedforward_layernorm.weight"])
        lg = rms_norm(x, W["model.norm.weight"]) @ emb_w.T
        if final_cap:
            lg = torch.tanh(lg / final_cap) * final_cap
        return lg

    return forward


def reference_logits(hf_dir, ids, n_greedy):
    import torch

    torch.set_num_threads(2)
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    W = {k: torch.from_numpy(v).double() for k, v in load_safetensors(os.path.join(hf_dir, "model.safetensors")).items()}
    forwards = {"qwen3": qwen3_forward, "gemma2": gemma_forward, "gemma3_text": gemma_forward}
    if cfg["model_type"] not in forwards:
        sys.exit(f"no reference forward for model_type {cfg['model_type']}")
    forward = forwards[cfg["model_type"]](torch, cfg, W)

    with torch.no_grad():
        out = forward(list(ids))
        rows = [out]
        greedy = []
        seq = list(ids)
        for _ in range(n_greedy):  # no KV cache: the whole sequence again (tiny shapes)
            nxt = int(rows[-1][-1].argmax())
            greedy.append(nxt)
            seq.append(nxt)
            rows.append(forward(seq)[-1:])
        return torch.cat(rows).numpy().astype(np.float64), greedy


# ---------------------------------------------------------------------------------------------

def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return r.stdout


def kvs_logits(kvs, model, ids_file, out, n_vocab):
    meta = None
    for line in run([kvs, "logits", "-m", model, "--ids-file", ids_file, "-o", out, "--greedy", str(N_GREEDY),
                     "--kv-type", "f32", "-b", "4096", "-t", "2"]).splitlines():
        if line.startswith("{"):
            meta = json.loads(line)
    lg = np.fromfile(out, dtype="<f4").astype(np.float64).reshape(-1, n_vocab)
    return lg, meta["greedy"]


def log_softmax(x):
    y = x - x.max(1, keepdims=True)
    return y - np.log(np.exp(y).sum(1, keepdims=True))


def compare(name, ref, ref_greedy, got, got_greedy, n_prompt):
    """Prints the comparison of got against ref; returns True when within the bounds."""
    n = min(len(ref), len(got))
    # Positions where both saw the same ids: the prompt, then greedy steps up to the first difference.
    same = n_prompt
    for a, b in zip(ref_greedy, got_greedy):
        if a != b:
            break
        same += 1
    same = min(same, n)
    lp, lq = log_softmax(ref[:same]), log_softmax(got[:same])
    kl = (np.exp(lp) * (lp - lq)).sum(1)
    spread = float(ref[:same].max() - ref[:same].min())
    rel = float(np.abs(ref[:same] - got[:same]).max()) / spread
    top1 = float((ref[:same].argmax(1) == got[:same].argmax(1)).mean())
    ok = kl.max() <= MAX_KL and rel <= MAX_REL_DIFF and ref_greedy == got_greedy
    print(f"{name}: {same} positions, KL mean {kl.mean():.2e} max {kl.max():.2e} (bound {MAX_KL:.0e}), "
          f"max |diff| / spread {rel:.2e} (bound {MAX_REL_DIFF:.0e}), top-1 {top1:.3f}, "
          f"greedy {got_greedy} vs reference {ref_greedy} -> {'ok' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the kvshrink binary")
    ap.add_argument("--shape", default="tiny-qwen3")
    ap.add_argument("--n-prompt", type=int, help="prompt ids (default: 96 for tiny-gemma2/3, else 48)")
    ap.add_argument("--stored", help="the reference's stored logits (default: tests/model/data/<shape>'s, when kept)")
    ap.add_argument("--write-stored", action="store_true", help="write --stored from a fresh torch reference")
    ap.add_argument("--keep", help="keep the models in this directory")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    n_prompt = a.n_prompt or N_PROMPT.get(a.shape, 48)
    if a.stored is None and a.shape in STORED:
        a.stored = os.path.join(HERE, "data", STORED[a.shape])
    use_stored = a.stored is not None and os.path.exists(a.stored)
    if not have_torch and not use_stored:
        print("SKIP: no torch (scripts/setup --train) and no stored reference for this shape")
        return 77
    if a.write_stored and (not have_torch or a.stored is None):
        sys.exit("--write-stored needs torch and a --stored path")

    work = a.keep or tempfile.mkdtemp(prefix="archref_")
    os.makedirs(work, exist_ok=True)
    gguf, hf = os.path.join(work, f"{a.shape}.gguf"), os.path.join(work, f"{a.shape}-hf")
    run([a.bin, "make-model", "--shape", a.shape, "--type", "f32", "--seed", str(SEED), "-o", gguf])
    run([a.bin, "convert", "-m", gguf, "-o", hf, "--type", "f32"])
    cfg = json.load(open(os.path.join(hf, "config.json")))
    V = cfg["vocab_size"]
    rng = random.Random(SEED)
    ids = [rng.randrange(3, min(V, 32000)) for _ in range(n_prompt)]
    ids_file = os.path.join(work, "ids.txt")
    with open(ids_file, "w") as f:
        f.write(" ".join(map(str, ids)))

    refs = []
    if have_torch:
        lg, gr = reference_logits(hf, ids, N_GREEDY)
        refs.append(("torch reference", lg, gr))
        if a.write_stored:
            np.savez_compressed(a.stored, logits=lg.astype("<f4"), greedy=np.array(gr), ids=np.array(ids))
            print(f"wrote {a.stored}")
    if use_stored and not a.write_stored:
        st = np.load(a.stored)
        if list(st["ids"]) != ids:
            sys.exit(f"{a.stored}: stored for other ids; rewrite it with --write-stored")
        refs.append(("stored torch reference", st["logits"].astype(np.float64), [int(x) for x in st["greedy"]]))

    ok = True
    got = {name: kvs_logits(a.bin, model, ids_file, os.path.join(work, f"{name}.f32"), V)
           for name, model in (("gguf", gguf), ("hf", hf))}
    for rname, ref, rgreedy in refs:
        for name, (lg, gr) in got.items():
            ok &= compare(f"kvshrink {name} vs {rname}", ref, rgreedy, lg, gr, n_prompt)
    if len(refs) == 2:  # the fresh reference against the stored one (same code, other machine/version)
        ok &= compare("torch reference vs stored", refs[1][1], refs[1][2], refs[0][1], refs[0][2], n_prompt)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
