#!/usr/bin/python3
"""How far each engine is from the exact computation on a preset file (issue 28).

    /usr/bin/python3 docs/results/issue28-presets/float_reference.py /tmp/kvs-preset-models FILE.gguf ...

For each quantised FILE (made by llama-quantize; `scripts/compare-llamacpp-logits` has run on it, so
FILE.llama.f32 holds llama.cpp's logits), `kvshrink convert --type f32` writes its weights
dequantised to F32, and `kvshrink logits --llamacpp-numerics` runs that file: the same weights with
float activations everywhere, the reference. kvshrink then runs FILE itself. Prints, over the
prompt positions, KL(reference || kvshrink), KL(reference || llama.cpp) and KL(llama.cpp ||
kvshrink): when the last is no larger than the other two, the engines differ by the activation
quantisation (Q8_0 / Q8_K) one or both apply, not by a kernel. Needs numpy (Debian's python3-numpy).
"""
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KVS = os.path.join(ROOT, "build", "tools", "kvshrink")
N_PROMPT = 64


def log_softmax(x):
    x = x.astype(np.float64)
    y = x - x.max(1, keepdims=True)
    return y - np.log(np.exp(y).sum(1, keepdims=True))


def kl(p, q):
    return float((np.exp(p) * (p - q)).sum(1).mean())


def logits(model, ids, out):
    subprocess.run([KVS, "logits", "-m", model, "--ids-file", ids, "-o", out, "-t", "2", "--llamacpp-numerics"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    models, files = sys.argv[1], sys.argv[2:]
    ids = os.path.join(models, "ids.txt")
    print("| file | KL(reference -> kvshrink) | KL(reference -> llama.cpp) | KL(llama.cpp -> kvshrink) |")
    print("|---|---:|---:|---:|")
    for name in files:
        q = os.path.join(models, name)
        deq = q + ".deq-f32.gguf"
        subprocess.run([KVS, "convert", "-m", q, "-o", deq, "--type", "f32"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        logits(deq, ids, deq + ".f32")
        os.remove(deq)
        logits(q, ids, q + ".kvsref.f32")
        ref = np.fromfile(deq + ".f32", dtype=np.float32)
        n_vocab = ref.size // N_PROMPT
        ref = log_softmax(ref.reshape(N_PROMPT, n_vocab))
        kv = log_softmax(np.fromfile(q + ".kvsref.f32", dtype=np.float32).reshape(N_PROMPT, n_vocab))
        ll = log_softmax(np.fromfile(q + ".llama.f32", dtype=np.float32).reshape(-1, n_vocab)[:N_PROMPT])
        print(f"| {name} | {kl(ref, kv):.2e} | {kl(ref, ll):.2e} | {kl(ll, kv):.2e} |", flush=True)


if __name__ == "__main__":
    main()
