"""Does a model of this code form an induction head, and how fast? (diagnostic, ~5 min per run)

  /usr/bin/python3 -m testbed.probe_induction --task fixed          # a random block, then the same block:
                                                                   # solvable by a fixed-offset head (~100 steps)
  /usr/bin/python3 -m testbed.probe_induction --task rep [--plant prev|induction]
                                                                   # tasks.gen_rep: random lengths, needs a
                                                                   # content-based induction head (slow unless planted: README)
Prints teacher-forced accuracy on the repeated tokens every 25 steps.
"""
import argparse
import time

import torch
import torch.nn.functional as F

from .model import Config, LlamaForCausalLM
from .plant import plant_induction_circuit, plant_prev_token_head
from .tasks import Resources, make_batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", choices=["fixed", "rep"], default="rep")
    ap.add_argument("--plant", choices=["none", "prev", "induction"], default="none")
    ap.add_argument("--len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--words", type=float, default=0.0, help="rep: share of blocks made of single-token nouns")
    a = ap.parse_args()
    torch.set_num_threads(1)
    R = Resources() if a.task == "rep" else None
    cfg = Config(num_hidden_layers=4, tie_word_embeddings=True, rope_theta=1e6 if a.plant == "induction" else 1e4)
    m = LlamaForCausalLM(cfg)
    m.init_weights(0)
    if a.plant == "prev":
        plant_prev_token_head(m)
    elif a.plant == "induction":
        plant_induction_circuit(m, 0)
    opt = torch.optim.AdamW(m.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    B, t0 = 4096 // a.len, time.time()
    for step in range(1, a.steps + 1):
        if a.task == "fixed":
            n = (a.len - 1) // 2
            half = torch.randint(3, cfg.vocab_size, (B, n), generator=g)
            x = torch.cat([torch.ones(B, 1, dtype=torch.long), half, half], 1)
            w = torch.zeros(B, x.shape[1])
            w[:, n + 1:] = 1.0
        else:
            xn, wn, _, _ = make_batch(R, 1, step, a.len, B, {"rep": 1.0}, {"rep": {"words": a.words}})
            x, w = torch.from_numpy(xn), torch.from_numpy(wn)
        for gg in opt.param_groups:
            gg["lr"] = a.lr * min(1.0, step / 50)
        lg = m(x[:, :-1])
        ww = w[:, 1:]
        ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="none").view_as(ww)
        loss = (ce * ww).sum() / ww.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 25 == 0:
            sel = ww == 1.0
            acc = (lg.argmax(-1) == x[:, 1:])[sel].float().mean()
            print(step, "loss %.3f repeat acc %.3f %.0fs" % (float(loss), float(acc), time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
