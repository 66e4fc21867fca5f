"""Step-0 check of the planted induction circuit at any shape: plant, then teacher-forced accuracy on
the repeated half of `rep` batches (random lengths: needs content-based induction, README).

  /usr/bin/python3 -m testbed.plant_check                                   # v7 shape
  /usr/bin/python3 -m testbed.plant_check --hidden 384 --ffn 1024 --layers 8 --heads 6 --kv-heads 3   # v8
"""
import argparse

import torch

from .model import Config, LlamaForCausalLM
from .plant import plant_induction_circuit
from .tasks import Resources, make_batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lengths", default="64,256,1024")
    a = ap.parse_args()
    torch.set_num_threads(1)
    R = Resources()
    cfg = Config(vocab_size=R.tok.vocab_size, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                 num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, rope_theta=1e6, tie_word_embeddings=True)
    m = LlamaForCausalLM(cfg)
    m.init_weights(a.seed)
    plant_induction_circuit(m, a.seed)
    m.eval()
    for L in (int(x) for x in a.lengths.split(",")):
        x, w, _, _ = make_batch(R, a.seed, 7, L, max(1, 2048 // L), {"rep": 1.0}, {"rep": {"words": 0.0}})
        x, w = torch.from_numpy(x), torch.from_numpy(w)
        with torch.no_grad():
            lg = m(x[:, :-1])
        sel = w[:, 1:] == 1.0
        acc = float((lg.argmax(-1) == x[:, 1:])[sel].float().mean())
        print("length %d: copy accuracy %.3f at step 0" % (L, acc), flush=True)


if __name__ == "__main__":
    main()
