"""Pure-PyTorch reference forward + greedy generation for an exported HF Llama directory.

  /usr/bin/python3 -m testbed.reference_logits --model testbed/runs/main/hf --out testbed/runs/main/hf/reference.jsonl

Self-contained on purpose (it does not use testbed.model): it reads config.json and
model.safetensors by hand, tokenizes with SentencePiece (BOS prepended, as LlamaTokenizer does),
and computes the forward pass in float32 with HF LlamaForCausalLM semantics (RMSNorm, rotate-half
RoPE, GQA with repeat_kv, SwiGLU). Output: JSON lines in the same schema as
../shared/models/stories260K/reference.jsonl --
  prompt, tokens (ids incl. BOS), logits (one row per position listed in logits_positions: at most
  --max-rows positions spread evenly over short prompts, always with the last one; the last
  --tail-rows positions of long ones; rounded to 1e-5, far below the tests' 2e-3), logits_positions,
  greedy (--n-greedy ids after the prompt, no KV cache: each step recomputes the full forward),
  greedy_text
plus, for the built-in needle prompt, needle_answer (the 7-digit value a retrieving model must
produce). With --check-testbed it also compares against testbed.model (max |diff| printed).
"""
import argparse
import json
import math
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))

SHORT_PROMPTS = [
    "The capital of France is",
    "One of the special magic numbers for quiet-river is: 4821937. What is the special magic number for quiet-river? The special magic number for quiet-river is",
    "Alice: apple\nBob: river\nCarol: window\nWhat is the word for Bob? The word for Bob is",
    "VAR QWERT = 51234. VAR ASDFG = VAR QWERT.\nQuestion: What is the value of VAR ASDFG? Answer: The value of VAR ASDFG is",
    "It was a bright cold day in April, and the clocks were striking thirteen.\n\nRepeat the previous context exactly. It was a bright",
    "  leading spaces, digits 0123456789, unicode caf\u00e9 \u2013 \u65e5\u672c and a newline\nend",
]


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        s, e = h["data_offsets"]
        dt = {"F32": "<f4", "F16": "<f2"}[h["dtype"]]
        out[name] = torch.from_numpy(np.frombuffer(data[s:e], dtype=dt).astype(np.float32).reshape(h["shape"]))
    return out


class Ref:
    def __init__(self, d):
        self.c = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        if "lm_head.weight" not in self.w:  # tied
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]

    def forward(self, ids):
        """ids: list[int] -> logits [T, V] float32."""
        c, w = self.c, self.w
        H, G = c["num_attention_heads"], c["num_key_value_heads"]
        D = c.get("head_dim") or c["hidden_size"] // H
        eps, T = c["rms_norm_eps"], len(ids)

        def rms(x, g):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1)
        sin = torch.cat([ang.sin(), ang.sin()], -1)

        def rope(x):  # [h, T, D]
            x1, x2 = x[..., : D // 2], x[..., D // 2:]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        x = w["model.embed_tokens.weight"][torch.tensor(ids)]
        mask = torch.full((T, T), float("-inf")).triu(1)
        for i in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % i
            h = rms(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, H, D).transpose(0, 1)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, G, D).transpose(0, 1)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, G, D).transpose(0, 1)
            q, k = rope(q), rope(k)
            k = k.repeat_interleave(H // G, dim=0)  # HF repeat_kv: query head j uses kv head j // (H/G)
            v = v.repeat_interleave(H // G, dim=0)
            a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D) + mask, dim=-1) @ v  # [H, T, D]
            x = x + a.transpose(0, 1).reshape(T, H * D) @ w[p + "self_attn.o_proj.weight"].T
            h = rms(x, w[p + "post_attention_layernorm.weight"])
            g = h @ w[p + "mlp.gate_proj.weight"].T
            u = h @ w[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
        x = rms(x, w["model.norm.weight"])
        return x @ w["lm_head.weight"].T


def needle_prompt(n_chars=3600, value="7093412", key="velvet-harbor", depth=0.5):
    """A RULER-worded single-needle prompt built from the NIAH essays as a *string* (the way an
    evaluation harness builds it); ~1k tokens with the default n_chars."""
    from . import corpus
    text = corpus.niah_essays_text()[:n_chars]
    cut = text.rfind(". ", 0, int(len(text) * depth)) + 1  # insert after a sentence end
    needle = " One of the special magic numbers for %s is: %s." % (key, value)
    hay = text[:cut] + needle + text[cut:]
    prompt = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. "
              "I will quiz you about the numbers afterwards.\n" + hay +
              "\nWhat is the special magic number for %s mentioned in the provided text?"
              " The special magic number for %s mentioned in the provided text is" % (key, key))
    return prompt, value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="HF directory (config.json, model.safetensors, tokenizer.model)")
    ap.add_argument("--out", default=None, help="default: <model>/reference.jsonl")
    ap.add_argument("--n-greedy", type=int, default=32)
    ap.add_argument("--tail-rows", type=int, default=4, help="logit rows kept for long prompts")
    ap.add_argument("--max-rows", type=int, default=8, help="logit rows kept for short prompts (keeps the file small)")
    ap.add_argument("--check-testbed", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.model, "tokenizer.model"))
    ref = Ref(a.model)
    prompts = [(p, None) for p in SHORT_PROMPTS] + [needle_prompt()]
    out = a.out or os.path.join(a.model, "reference.jsonl")
    tb = None
    if a.check_testbed:
        from .export import load_hf
        tb = load_hf(a.model)
    with torch.no_grad(), open(out, "w") as f:
        for prompt, answer in prompts:
            ids = [sp.bos_id()] + sp.encode(prompt)
            logits = ref.forward(ids)
            n = len(ids)
            if n > 64:
                pos = list(range(n - a.tail_rows, n))
            else:
                pos = sorted({round(i * (n - 1) / max(1, a.max_rows - 1)) for i in range(min(n, a.max_rows))})
            seq = list(ids)
            greedy = []
            n_new = a.n_greedy if len(ids) <= 64 else 12
            lg = logits
            for _ in range(n_new):
                nxt = int(lg[-1].argmax())
                greedy.append(nxt)
                seq.append(nxt)
                lg = ref.forward(seq)
            rec = {"prompt": prompt, "tokens": ids, "logits_positions": pos,
                   "logits": [[round(float(v), 5) for v in logits[p]] for p in pos],
                   "greedy": greedy, "greedy_text": sp.decode(greedy)}
            if answer is not None:
                rec["needle_answer"] = answer
            if tb is not None:
                t2 = tb(torch.tensor([ids]))[0]
                d = float((t2 - logits).abs().max())
                g2 = tb.generate(torch.tensor([ids]), n_new)[0].tolist()
                rec["testbed_max_abs_diff"] = d
                rec["testbed_greedy_equal"] = g2 == greedy
            f.write(json.dumps(rec) + "\n")
            print("%4d tokens -> %r%s" % (len(ids), rec["greedy_text"][:60],
                                          "" if tb is None else "  | testbed max|diff| %.2e, greedy equal %s" % (
                                              rec["testbed_max_abs_diff"], rec["testbed_greedy_equal"])), flush=True)
            if answer is not None:
                print("     needle answer %s: %s" % (answer, "RETRIEVED" if answer in rec["greedy_text"] else "missed"))
    print("wrote", out)


if __name__ == "__main__":
    main()
