#!/usr/bin/python3
"""Where kvshrink's and llama.cpp's greedy tokens part on the preset files, and by how much the
top two logits differed there (issue 28).

    python3 docs/results/issue28-presets/greedy_margins.py /tmp/kvs-preset-models [--n-prompt 64]

Reads the logits `scripts/compare-llamacpp-logits` leaves beside every file (FILE.llama.f32 and
FILE.kvs.f32: float32 [n_prompt + greedy][n_vocab]). Greedy token i is the argmax of row
n_prompt - 1 + i, so the first step whose argmaxes differ is where the two decodes part. Prints,
per file, that step, llama.cpp's top-1 minus top-2 logit there (the margin the engines' difference
had to beat) and the largest |logit difference| over the rows both engines computed from the same
ids (row n_prompt - 1 + i included). A parting at a margin below the engines' logit differences is a
near tie of random weights, not a wrong kernel.
"""
import argparse
import glob
import os

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models")
    p.add_argument("--n-prompt", type=int, default=64)
    a = p.parse_args()
    print("| file | greedy steps equal | margin there (llama.cpp top-1 - top-2) | kvshrink's margin | "
          "max abs dlogit up to there |")
    print("|---|---:|---:|---:|---:|")
    for lf in sorted(glob.glob(os.path.join(a.models, "*.gguf.llama.f32"))):
        kf = lf[: -len(".llama.f32")] + ".kvs.f32"
        if not os.path.exists(kf):
            continue
        la, ka = np.fromfile(lf, dtype=np.float32), np.fromfile(kf, dtype=np.float32)
        if la.size != ka.size:
            continue
        rows = None
        for n_vocab in (151936, 128256, 49152, 32000):
            if la.size % n_vocab == 0:
                rows = la.size // n_vocab
                break
        if rows is None or rows <= a.n_prompt:
            continue
        la, ka = la.reshape(rows, n_vocab), ka.reshape(rows, n_vocab)
        greedy = rows - a.n_prompt
        step = greedy
        for i in range(greedy):
            r = a.n_prompt - 1 + i
            if la[r].argmax() != ka[r].argmax():
                step = i
                break
        name = os.path.basename(lf)[: -len(".gguf.llama.f32")]
        last = a.n_prompt - 1 + min(step, greedy - 1)
        dmax = float(np.abs(la[: last + 1] - ka[: last + 1]).max())
        if step == greedy:
            print(f"| {name} | {greedy}/{greedy} | | | {dmax:.3g} |")
            continue
        r = a.n_prompt - 1 + step
        tl, tk = np.sort(la[r])[-2:], np.sort(ka[r])[-2:]
        print(f"| {name} | {step}/{greedy} | {tl[1] - tl[0]:.3g} | {tk[1] - tk[0]:.3g} | {dmax:.3g} |")


if __name__ == "__main__":
    main()
