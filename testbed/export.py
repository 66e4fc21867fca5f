"""Export a checkpoint as a Hugging Face LlamaForCausalLM directory.

  /usr/bin/python3 -m testbed.export --ckpt testbed/runs/main/ckpt_last.pt --out testbed/runs/main/hf [--dtype f16]

Writes config.json, generation_config.json, model.safetensors (written by hand: 8-byte
little-endian header length, JSON header {name: {dtype, shape, data_offsets}} padded with spaces
to a multiple of 8, then the raw little-endian tensor bytes in header order), tokenizer.model,
tokenizer_config.json, special_tokens_map.json and a README.md model card (from the run's metrics
when available). With tie_word_embeddings the file holds no lm_head.weight (as HF writes it).
"""
import argparse
import json
import os
import shutil

import numpy as np
import torch

from .model import Config, LlamaForCausalLM
from .results_table import acc_rows
from .plant import plant_kind

HERE = os.path.dirname(os.path.abspath(__file__))
DT = {"f32": ("F32", np.float32, "float32"), "f16": ("F16", np.float16, "float16")}
NP_FROM_ST = {"F32": np.float32, "F16": np.float16, "BF16": None}


def write_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (float32/float16). Deterministic (sorted names)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}[a.dtype]
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(hj).to_bytes(8, "little"))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    """-> dict name -> numpy array (native dtype), metadata."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        s, e = h["data_offsets"]
        dt = NP_FROM_ST[h["dtype"]]
        out[name] = np.frombuffer(data[s:e], dtype=np.dtype(dt).newbyteorder("<")).reshape(h["shape"])
    return out, meta


def hf_config(cfg, torch_dtype):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "max_position_embeddings": cfg.max_position_embeddings,
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "pad_token_id": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
        "torch_dtype": torch_dtype,
    }


def tokenizer_config(max_len):
    return {
        "tokenizer_class": "LlamaTokenizer",
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "legacy": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "sp_model_kwargs": {},
        "added_tokens_decoder": {
            "0": {"content": "<unk>", "special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False},
            "1": {"content": "<s>", "special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False},
            "2": {"content": "</s>", "special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False},
        },
    }


MODEL_CARD = """# kvshrink testbed model `{name}`

Small Llama-architecture model trained from scratch on this project's machines (testbed/, see
testbed/README.md) to retrieve from its context, so that KV-cache compression methods can be
compared on a model that genuinely depends on specific context tokens. Not a general LM.

| field | value |
|---|---|
| architecture | LlamaForCausalLM: {layers} layers, hidden {hidden}, {heads} query heads, {kv_heads} KV heads (head_dim {head_dim}), SwiGLU {ffn}, RMSNorm eps {eps}, RoPE theta {theta} (HF rotate-half), context {ctx}, tied embeddings: {tie} |
| parameters | {params} |
| weights | model.safetensors, {dtype} |
| tokenizer | SentencePiece BPE {vocab} (byte fallback, split digits), testbed/tokenizer.model; BOS=1 always prepended |
| initialisation | {init} |
| training | curriculum `{curriculum}`, seed {seed}, {steps} steps, {tokens} tokens, {minutes} min wall on {where} |
| data | RULER Paul Graham essays, PG-19 books 22424/10985/10321, GSM8K train, SQuAD train (11 articles) + synthetic retrieval tasks (needles, key-value lists, variable tracking, "Repeat the previous context" copying) |
| held out | WikiText-2 test, PG-19 book 10146, SQuAD dev contexts, GSM8K test, HotpotQA, LongBench; 1/8 of the RULER noun/adjective lists (eval keys/values) |

## Held-out retrieval (greedy, exact match, full cache, RULER wording, NIAH-essay haystack)

{acc_table}

`num` = one needle with a 7-digit value; `word` = a single-token noun value; `num_mk4` = 7-digit
value with 3 distractor needles (other keys). Keys are RULER adj-noun keys from the held-out word
pool. Evaluate again with `/usr/bin/python3 -m testbed.evaluate --hf <this dir>`.

## Prompt formats it was trained on

Needle: ` One of the special magic numbers for {{key}} is: {{value}}.` inside the text; question at the end:
`\\nWhat is the special magic number for {{key}} mentioned in the provided text? The special magic number for {{key}} mentioned in the provided text is`
(and the RULER header line `Some special magic numbers are hidden within the following text. ...`).
KVzip reconstruction: `<context>` + `\\n\\nRepeat the previous context exactly.` + `<context>` (token-level
concatenation, as KVzip does) and `\\n\\nRepeat the part of the previous context exactly, starting with ` + 8 tokens.
"""


INIT_TEXT = {
    "none": "random normal (std 0.02)",
    "prev": "random normal, layer 0 head 0 planted as a previous-token head (plant.plant_prev_token_head)",
    "induction": "random normal with a planted two-layer induction circuit (testbed/plant.py: layer-0 "
                 "previous-token heads and layer-1 induction heads on query heads 0 and 2, which copy repeated "
                 "tokens before training); every weight trained afterwards",
}


def acc_table(evals):
    if not evals:
        return "(no evaluation recorded yet)"
    last = evals[-1]["acc"]
    names = sorted({k.split("@")[0] for k in last})
    return "(step %d, n=%s per cell)\n\n" % (evals[-1]["step"], evals[-1].get("n", "?")) + "\n".join(acc_rows(last, names))


def export(ckpt_path, out, dtype="f16", tok_path=None, name=None):
    ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    cfg = Config(**ck["config"])
    sd = ck["model"]
    st_dtype, np_dtype, torch_dtype = DT[dtype]
    tensors = {}
    for k, v in sd.items():
        if cfg.tie_word_embeddings and k == "lm_head.weight":
            continue
        tensors[k] = v.detach().float().numpy().astype(np_dtype)
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(cfg, torch_dtype), f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "do_sample": False}, f, indent=2)
    shutil.copyfile(tok_path or os.path.join(HERE, "tokenizer.model"), os.path.join(out, "tokenizer.model"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(cfg.max_position_embeddings), f, indent=2)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f, indent=2)
    # model card from the run's metrics
    run_dir = os.path.dirname(os.path.abspath(ckpt_path))
    evals, minutes, where = [], "?", "1-2 CPU threads"
    mp = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(mp):
        recs = [json.loads(l) for l in open(mp) if l.strip()]
        evals = [r for r in recs if r.get("type") == "eval" and r["step"] <= ck["step"]]
        sessions = []  # wall minutes per (re)start of the run, up to the checkpoint's step
        for r in recs:
            if r.get("type") == "start":
                sessions.append(0.0)
                if r.get("gpu"):  # train.py --device cuda
                    where = "one %s GPU (testbed/gpu_train.sh)" % r["gpu"]
            elif r.get("type") == "train" and r["step"] <= ck["step"] and sessions:
                sessions[-1] = r["elapsed_min"]
        minutes = "%.0f" % sum(sessions)
    args = ck.get("args", {})
    for e in evals:
        e.setdefault("n", args.get("eval_n"))
    nparams = sum(v.numel() for k, v in sd.items() if not (cfg.tie_word_embeddings and k == "lm_head.weight"))
    card = MODEL_CARD.format(
        name=name or os.path.basename(run_dir), layers=cfg.num_hidden_layers, hidden=cfg.hidden_size,
        heads=cfg.num_attention_heads, kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
        ffn=cfg.intermediate_size, eps=cfg.rms_norm_eps, theta=cfg.rope_theta, ctx=cfg.max_position_embeddings,
        tie=cfg.tie_word_embeddings, params="{:,}".format(nparams), dtype=st_dtype, vocab=cfg.vocab_size,
        where=where, curriculum=args.get("curriculum", "?") + (
            " with every phase's steps x%g (--steps-scale)" % args["steps_scale"] if args.get("steps_scale", 1) != 1 else ""),
        seed=args.get("seed", "?"), steps=ck["step"],
        tokens="{:,}".format(ck.get("extra", {}).get("tokens", 0)), minutes=minutes, acc_table=acc_table(evals),
        init=("continued from the exported model `%s` (its card says how it was trained)" % args["init_from"]
              if args.get("init_from") else
              INIT_TEXT.get(plant_kind(args), "random")))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(card)
    return out


def load_hf(d):
    """HF dir -> testbed LlamaForCausalLM (float32)."""
    c = json.load(open(os.path.join(d, "config.json")))
    cfg = Config(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                 num_hidden_layers=c["num_hidden_layers"], num_attention_heads=c["num_attention_heads"],
                 num_key_value_heads=c["num_key_value_heads"], rms_norm_eps=c["rms_norm_eps"],
                 rope_theta=c["rope_theta"], max_position_embeddings=c["max_position_embeddings"],
                 tie_word_embeddings=c["tie_word_embeddings"], bos_token_id=c["bos_token_id"],
                 eos_token_id=c["eos_token_id"])
    t, _ = read_safetensors(os.path.join(d, "model.safetensors"))
    m = LlamaForCausalLM(cfg)
    sd = {k: torch.from_numpy(v.astype(np.float32)) for k, v in t.items()}
    if cfg.tie_word_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    m.load_state_dict(sd)
    m.eval()
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="f16", choices=sorted(DT))
    ap.add_argument("--name", default=None)
    a = ap.parse_args()
    export(a.ckpt, a.out, a.dtype, name=a.name)
    print("exported", a.out, sorted(os.listdir(a.out)))


if __name__ == "__main__":
    main()
