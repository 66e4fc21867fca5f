"""Training speed of a model shape: tokens/s of forward + backward + AdamW at 4,096 tokens per step,
as train.py runs it (query-chunked attention above 256 tokens), for each sequence length.

  /usr/bin/python3 -m testbed.speed --layers 8 --hidden 384 --ffn 1024 --heads 6 --kv-heads 3 \\
      --lengths 256,512,1024 --threads 1          # v8
  /usr/bin/python3 -m testbed.speed               # v7's shape (the defaults)

Prints one line per length (median of --steps timed steps after one untimed) and, with
--curriculum, the estimated wall time of that curriculum from the measured lengths (lengths not
measured are interpolated in log-length).
"""
import argparse
import math
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from . import curriculum as C
from .model import Config, LlamaForCausalLM
from .train import limit_blas_threads, make_optimizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lengths", default="256,512,1024")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tokens-per-step", type=int, default=4096)
    ap.add_argument("--attn-chunk", type=int, default=256)
    ap.add_argument("--curriculum", default=None, help="also estimate this curriculum's total time")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (with cuda: the fused attention is checked first)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    blas = limit_blas_threads(args.threads)
    cfg = Config(hidden_size=args.hidden, intermediate_size=args.ffn, num_hidden_layers=args.layers,
                 num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, rope_theta=1e6,
                 tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.init_weights(0)
    dev = torch.device(args.device)
    model.to(dev)
    if dev.type == "cuda":
        check_sdpa(model, cfg, dev)
    model.train()
    opt = make_optimizer(model, 1e-4, 0.1)
    print("shape: %d layers, hidden %d, %d/%d heads (head_dim %d), ffn %d: %d parameters; %d thread(s); BLAS %s" % (
        args.layers, args.hidden, args.heads, args.kv_heads, cfg.head_dim, args.ffn, model.num_params(), args.threads,
        blas), flush=True)
    rate = {}
    g = torch.Generator().manual_seed(0)
    for L in [int(x) for x in args.lengths.split(",")]:
        B = max(1, args.tokens_per_step // L)
        times, cpu = [], []
        for i in range(args.steps + 1):
            x = torch.randint(3, cfg.vocab_size, (B, L), generator=g).to(dev)
            sync(dev)
            t = time.time()
            c = time.process_time()
            logits = model(x[:, :-1], chunk=args.attn_chunk if L > args.attn_chunk else 0)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sync(dev)
            if i:
                times.append(time.time() - t)
                cpu.append(time.process_time() - c)
        dt = statistics.median(times)
        rate[L] = B * L / dt
        print("L=%5d batch %2d: %.2f s/step, %.0f tokens/s, CPU/wall %.2f (steps: %s)" % (
            L, B, dt, rate[L], sum(cpu) / sum(times), " ".join("%.2f" % t for t in times)), flush=True)
    if args.curriculum:
        cur = C.CURRICULA[args.curriculum]
        ls = sorted(rate)

        def r(L):
            if L in rate:
                return rate[L]
            lo = max([l for l in ls if l <= L], default=ls[0])
            hi = min([l for l in ls if l >= L], default=ls[-1])
            if lo == hi:
                return rate[lo]
            f = (math.log(L) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return rate[lo] * (rate[hi] / rate[lo]) ** f
        secs = toks = 0.0
        for ph in cur["phases"]:
            tps = ph.get("tokens_per_step", cur["tokens_per_step"])
            share = sum(ph["lens"].values())
            for L, p in ph["lens"].items():
                n = ph["steps"] * p / share * (tps // L) * L
                toks += n
                secs += n / r(L)
            print("  phase %-8s %4d steps, lengths %s" % (ph["name"], ph["steps"], ph["lens"]))
        print("curriculum %s: %.1f M tokens, %.1f hours of training at these rates (evals and checkpoints "
              "add ~5-10%%; lengths not measured: extrapolated)" % (args.curriculum, toks / 1e6, secs / 3600))
        print("estimate_seconds %.1f" % secs)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def check_sdpa(model, cfg, dev):
    """On a GPU, train.py runs causal attention through F.scaled_dot_product_attention (model.Attention.use_sdpa).
    Checks it against the explicit attention on the same weights (logits at 2 x 1,024 tokens, float32
    without TF32) and leaves it on only if they agree; prints the verdict ("sdpa ok" / "sdpa off")."""
    from .model import Attention
    if not hasattr(F, "scaled_dot_product_attention"):
        print("sdpa off: torch %s has no scaled_dot_product_attention" % torch.__version__, flush=True)
        return
    g = torch.Generator().manual_seed(1)
    x = torch.randint(3, cfg.vocab_size, (2, 1024), generator=g).to(dev)
    with torch.no_grad():
        Attention.use_sdpa = False
        ref = model(x).float()
        Attention.use_sdpa = True
        got = model(x).float()
    err = float((got - ref).abs().max())
    scale = float(ref.abs().max())
    ok = err <= 1e-3 * max(1.0, scale)
    Attention.use_sdpa = ok
    print("sdpa %s: max |logit difference| %.2e (largest logit %.2f)" % ("ok" if ok else "off", err, scale), flush=True)


if __name__ == "__main__":
    main()
