"""Train a testbed model (resumable).

  cd /work/main && nohup setsid /usr/bin/python3 -m testbed.train --run main --seed 1 --threads 1 \
      > testbed/runs/main/log.txt 2>&1 &

Re-running the same command resumes from testbed/runs/<run>/ckpt_last.pt (model, optimiser, step);
the data of step s is a pure function of (seed, s), so a resumed run sees exactly the batches an
uninterrupted run would have. Flags given on resume override only --threads, --device, --data-workers, --max-minutes,
--eval-every, --eval-n, --ckpt-minutes, --stop-at-step (the rest comes from the run's args.json).
A checkpoint is written every --ckpt-minutes of wall time, at every phase end, and on SIGTERM/SIGINT.
Progress: log.txt (human) and metrics.jsonl (one JSON object per log line / eval).
"""
import argparse
import json
import math
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from . import curriculum as C
from .model import Config, LlamaForCausalLM
from .plant import plant_induction_circuit, plant_kind, plant_prev_token_head
from .tasks import Resources, make_batch, KIND_NAMES, K_ANS, K_COPY

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = {"tokens": 0}  # cumulative trained tokens (saved in checkpoints)
RESUME_OVERRIDES = ["threads", "max_minutes", "eval_every", "eval_n", "ckpt_minutes", "stop_at_step", "eval_lengths",
                    "device", "data_workers"]
DATA = {}  # what the data workers need (set before the pool forks, inherited by the workers)


def step_batch(step):
    """Everything the training step `step` consumes, a pure function of (seed, step): the phase,
    the sequence length drawn for the step, and make_batch's arrays. Runs in a data worker."""
    R, cur, seed = DATA["R"], DATA["cur"], DATA["seed"]
    pi, ph = C.phase_at(cur, step)
    rng = np.random.default_rng([seed, step, 99])
    lens = list(ph["lens"])
    p = np.array([ph["lens"][l] for l in lens], dtype=np.float64)
    L = int(lens[rng.choice(len(lens), p=p / p.sum())])
    B = max(1, ph.get("tokens_per_step", cur["tokens_per_step"]) // L)
    return (pi, L, B) + make_batch(R, seed, step, L, B, ph["mix"], ph["params"])


def batches(first, total, workers):
    """Iterator over step_batch(first .. total-1): in this process, or computed ahead by `workers`
    forked processes (in order; the GPU run needs ~0.1 s of CPU per batch, more than a step takes).
    Fork before CUDA is initialised."""
    if workers <= 0:
        return (step_batch(s) for s in range(first, total)), None
    import multiprocessing as mp
    pool = mp.get_context("fork").Pool(workers)
    return pool.imap(step_batch, range(first, total), chunksize=4), pool


def limit_blas_threads(n):
    """torch.set_num_threads does not reach Debian's pthread OpenBLAS (the `libblas.so.3` alternative
    here is openblas-pthread): it keeps its own pool of nproc threads, so a `--threads 1` run used
    both cores when the second was idle (seen: v8s1's first 15 minutes, 2 threads of ~9 CPU-minutes
    each). Sets the pool of the OpenBLAS that this process has loaded (found in /proc/self/maps, so
    no second copy is loaded) to n threads; returns its path, or None if none is loaded."""
    import ctypes
    try:
        paths = sorted({l.split()[-1] for l in open("/proc/self/maps") if "openblas" in l and ".so" in l})
    except OSError:
        return None
    for path in paths:
        try:
            ctypes.CDLL(path).openblas_set_num_threads(int(n))
            return path
        except (OSError, AttributeError):
            continue
    return None


def lr_at(cur, step, total):
    base, wu, mn = cur["lr"], cur["warmup"], cur["min_lr_frac"]
    if step < wu:
        return base * (step + 1) / wu
    t = min(1.0, (step - wu) / max(1, total - wu))
    return base * (mn + (1 - mn) * 0.5 * (1 + math.cos(math.pi * t)))


def make_optimizer(model, lr, wd):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def save_ckpt(path, model, opt, step, args, cfg, extra=None):
    extra = dict(extra or {}, tokens=STATE["tokens"])
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "args": vars(args),
                "config": cfg.to_dict(), "extra": extra}, tmp)
    os.replace(tmp, path)


class Logger:
    def __init__(self, run_dir):
        self.f = open(os.path.join(run_dir, "metrics.jsonl"), "a")

    def log(self, rec, text=None):
        rec = dict(rec, time=round(time.time(), 1))
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()
        print(text if text is not None else json.dumps(rec), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="run name: testbed/runs/<run>/")
    ap.add_argument("--curriculum", default="v7", choices=sorted(C.CURRICULA))
    ap.add_argument("--seed", type=int, default=1, help="data + init seed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (a lent GPU: testbed/gpu_train.sh)")
    ap.add_argument("--data-workers", type=int, default=0,
                    help="processes that build the batches ahead (0: in the training process, as before)")
    ap.add_argument("--steps-scale", type=float, default=1.0,
                    help="multiply every phase's step count (the lr schedule stretches with it); 1 = the curriculum")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--rope-theta", type=float, default=1e6,
                    help="RoPE base (1e6 as Qwen2: head_dim 32 needs low-frequency pairs for content matching)")
    ap.add_argument("--tie", action=argparse.BooleanOptionalAction, default=True,
                    help="tie lm_head to embed_tokens (default; --no-tie for an untied lm_head)")
    ap.add_argument("--plant", default="induction", choices=["induction", "prev", "none"],
                    help="initialisation: induction = the two-layer induction circuit (plant.py, default); "
                         "prev = a previous-token head only (plant.plant_prev_token_head); none = random")
    ap.add_argument("--init-from", default=None,
                    help="start from an exported HF directory (e.g. testbed/models/v7s1) instead of a fresh init: "
                         "continues a committed model with another curriculum (fresh AdamW state)")
    ap.add_argument("--lr", type=float, default=None, help="override the curriculum's peak lr")
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--attn-chunk", type=int, default=256, help="query-chunked causal attention for T > chunk")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=400)
    ap.add_argument("--eval-n", type=int, default=16)
    ap.add_argument("--eval-lengths", default="128,256,512,1024,2048")
    ap.add_argument("--ckpt-minutes", type=float, default=10.0)
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (with a checkpoint) after this long")
    ap.add_argument("--stop-at-step", type=int, default=0, help="stop (with a checkpoint) at this step")
    args = ap.parse_args()

    run_dir = os.path.join(HERE, "runs", args.run)
    os.makedirs(run_dir, exist_ok=True)
    ck_path = os.path.join(run_dir, "ckpt_last.pt")
    ck = None
    if os.path.exists(ck_path):
        ck = torch.load(ck_path, map_location="cpu", weights_only=False)
        saved = ck["args"]
        for k in RESUME_OVERRIDES:
            saved[k] = getattr(args, k)
        args = argparse.Namespace(**saved)
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump(vars(args), f, indent=1)

    torch.set_num_threads(args.threads)
    limit_blas_threads(args.threads)
    cur = C.scaled(C.CURRICULA[args.curriculum], getattr(args, "steps_scale", 1.0))
    if args.lr:
        cur = dict(cur, lr=args.lr)
    total = C.total_steps(cur)
    R = Resources()
    cfg = Config(vocab_size=R.tok.vocab_size, hidden_size=args.hidden, intermediate_size=args.ffn,
                 num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                 rope_theta=args.rope_theta, max_position_embeddings=args.ctx, tie_word_embeddings=args.tie,
                 bos_token_id=R.tok.bos, eos_token_id=R.tok.eos)
    model = LlamaForCausalLM(cfg)
    model.init_weights(args.seed)
    plant = plant_kind(args)
    if getattr(args, "init_from", None):
        from .export import load_hf
        src = load_hf(args.init_from)
        if src.cfg.to_dict() != cfg.to_dict():
            sys.exit("--init-from %s: its config differs from this run's flags: %s vs %s" % (
                args.init_from, src.cfg.to_dict(), cfg.to_dict()))
        model.load_state_dict(src.state_dict())
        print("initialised from", args.init_from, flush=True)
    elif plant == "prev":
        plant_prev_token_head(model)
    elif plant == "induction":
        info = plant_induction_circuit(model, args.seed)
        print("planted induction circuit:", info, flush=True)
    step = ck["step"] if ck is not None else 0
    DATA.update(R=R, cur=cur, seed=args.seed)
    data, pool = batches(step, total, args.data_workers)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 matmuls
        from .model import Attention
        Attention.use_sdpa = hasattr(F, "scaled_dot_product_attention") and not os.environ.get("TESTBED_NO_SDPA")
    model.to(dev)
    opt = make_optimizer(model, cur["lr"], args.wd)
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        STATE["tokens"] = ck.get("extra", {}).get("tokens", 0)
        del ck
    logger = Logger(run_dir)
    logger.log({"type": "start", "step": step, "total_steps": total, "params": model.num_params(),
                "config": cfg.to_dict(), "args": vars(args), "pid": os.getpid(), "device": str(dev),
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None})

    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    eval_lengths = [int(x) for x in str(args.eval_lengths).split(",") if x]
    phase_ends = set(C.phase_end_steps(cur))
    t_start = time.time()
    t_ckpt = time.time()
    acc = {"loss": 0.0, "n": 0, "tokens": 0, "t": time.time()}
    by_w = {}  # weight class -> [sum loss, count, correct]
    by_task = {}  # task -> [correct, count] on content answer tokens
    is_content = torch.tensor([any(ch.isalnum() for ch in R.tok.piece(i)) and not R.tok.piece(i).startswith("<0x")
                               for i in range(R.tok.vocab_size)])
    model.train()

    def do_eval(step, full):
        # periodic evals skip lengths > 2x the longest trained so far (they cost minutes and say
        # little); phase-end evals cover every length
        maxL = max(max(p["lens"]) for p in cur["phases"][:C.phase_at(cur, step - 1)[0] + 1])
        lens = eval_lengths if full else [l for l in eval_lengths if l <= 2 * maxL]
        t = time.time()
        res = eval_retrieval(model, R, lens, n=args.eval_n, seed=12345, chunk=args.attn_chunk)
        txt = "EVAL step %d (%.0fs): " % (step, time.time() - t) + " ".join("%s=%.2f" % kv for kv in res.items())
        logger.log({"type": "eval", "step": step, "acc": res, "eval_seconds": round(time.time() - t, 1)}, txt)

    from .evaluate import eval_retrieval
    while step < total and not stop["flag"]:
        pi, L, B, x, w, k, tasks = next(data)
        ph = cur["phases"][pi]
        x = torch.from_numpy(x).to(dev)
        w = torch.from_numpy(w).to(dev)
        lr = lr_at(cur, step, total)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(x[:, :-1], chunk=args.attn_chunk if L > args.attn_chunk else 0)
        tgt = x[:, 1:]
        ww = w[:, 1:]
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none").view_as(ww)
        loss = (ce * ww).sum() / ww.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        with torch.no_grad():
            # the bookkeeping below runs on the CPU (one copy per step instead of a sync per task)
            pred_ok = (logits.argmax(-1) == tgt).cpu()
            tgt = tgt.cpu()
            ce = ce.detach().cpu()
            kk = torch.from_numpy(k[:, 1:])
            # per-task accuracy on answer (copy: copied) tokens that carry content (not "." "," '"')
            content = is_content[tgt]
            for bi, tname in enumerate(tasks):
                if tname == "text":
                    continue
                m = (kk[bi] == (K_COPY if tname == "copy" else K_ANS)) & content[bi]
                if m.any():
                    e = by_task.setdefault(tname, [0, 0])
                    e[0] += int(pred_ok[bi][m].sum()); e[1] += int(m.sum())
            for kid, nm in KIND_NAMES.items():
                m = kk == kid
                if m.any():
                    e = by_w.setdefault(nm, [0.0, 0, 0])
                    e[0] += float(ce[m].sum()); e[1] += int(m.sum()); e[2] += int(pred_ok[m].sum())
        acc["loss"] += float(loss)
        acc["n"] += 1
        acc["tokens"] += B * L
        STATE["tokens"] += B * L
        if step % args.log_every == 0 or step == total:
            dt = time.time() - acc["t"]
            rec = {"type": "train", "step": step, "phase": ph["name"], "L": L, "loss": acc["loss"] / acc["n"],
                   "lr": lr, "grad_norm": float(gn), "tok_s": acc["tokens"] / dt,
                   "tokens": None, "elapsed_min": round((time.time() - t_start) / 60, 2)}
            for k, (s, c, ok) in by_w.items():
                rec["loss_" + k] = s / max(1, c)
                rec["acc_" + k] = ok / max(1, c)
            tok_total = STATE["tokens"]
            rec["tokens"] = tok_total
            rec["task_acc"] = {t: round(c / n, 3) for t, (c, n) in sorted(by_task.items())}
            logger.log(rec, "step %5d %-8s L=%4d loss %.3f | text %.3f ans %.3f (acc %.2f) copy %.3f (acc %.2f) | lr %.2e gn %.2f | %4.0f tok/s | %d tok | %.1f min" % (
                step, ph["name"], L, rec["loss"], rec.get("loss_text", float("nan")), rec.get("loss_ans", float("nan")),
                rec.get("acc_ans", float("nan")), rec.get("loss_copy", float("nan")), rec.get("acc_copy", float("nan")),
                lr, float(gn), rec["tok_s"], tok_total, rec["elapsed_min"]) +
                (" | qkey %.3f (acc %.2f)" % (rec["loss_qkey"], rec["acc_qkey"]) if "loss_qkey" in rec else "") +
                " | value acc " + " ".join("%s %.2f" % kv for kv in rec["task_acc"].items()))
            acc = {"loss": 0.0, "n": 0, "tokens": 0, "t": time.time()}
            by_w = {}
            by_task = {}
        boundary = step in phase_ends
        if boundary:
            save_ckpt(ck_path, model, opt, step, args, cfg)
            save_ckpt(os.path.join(run_dir, "ckpt_%s_step%d.pt" % (ph["name"], step)), model, opt, step, args, cfg)
            t_ckpt = time.time()
        if (args.eval_every and step % args.eval_every == 0) or boundary:
            do_eval(step, boundary)
            acc["t"] = time.time()
        if time.time() - t_ckpt > args.ckpt_minutes * 60:
            save_ckpt(ck_path, model, opt, step, args, cfg)
            t_ckpt = time.time()
            logger.log({"type": "ckpt", "step": step}, "checkpoint step %d" % step)
        if args.max_minutes and time.time() - t_start > args.max_minutes * 60:
            break
        if args.stop_at_step and step >= args.stop_at_step:
            break
    if pool is not None:
        pool.terminate()
    save_ckpt(ck_path, model, opt, step, args, cfg)
    logger.log({"type": "stop", "step": step, "done": step >= total, "signal": stop["flag"]},
               "stopped at step %d (%s); checkpoint written" % (step, "done" if step >= total else "resumable"))


if __name__ == "__main__":
    main()
