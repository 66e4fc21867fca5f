#!/usr/bin/python3
"""Plots the context-calibration fits stored by `kvshrink calibrate --press quality` (Compactor
Sec. 3.5): for each model's fit, the mean NLL ratio y per keep ratio r and task (points; y > 1 is
drawn at its value, the fit used min(y, 1)) and the fitted f(r, c) at the lowest, median and
highest context NLL of the calibration samples (lines).

    /usr/bin/python3 docs/results/kvzip-compactor/plot_calibration.py docs/results/kvzip-compactor
"""
import collections
import glob
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def f(r, b):
    if abs(b) < 1e-12:
        return r
    return math.expm1(b * r) / math.expm1(b)


def main(root):
    files = sorted(glob.glob(os.path.join(root, "calib", "quality-*.json")))
    os.makedirs(os.path.join(root, "plots"), exist_ok=True)
    for path in files:
        j = json.load(open(path))
        model = j.get("model_name", "?")
        for key, fit in j["data"]["fits"].items():
            by = collections.defaultdict(list)
            nlls = sorted({t["nll_context"] for t in fit["triples"]})
            for t in fit["triples"]:
                by[(t["task"], t["r"])].append(t["y"])
            fig, ax = plt.subplots(figsize=(6, 4.2))
            tasks = sorted({k[0] for k in by})
            for task in tasks:
                rs = sorted(r for (tk, r) in by if tk == task)
                ax.plot(rs, [sum(by[(task, r)]) / len(by[(task, r)]) for r in rs], "o", label=f"{task} (mean y)")
            grid = [i / 100 for i in range(101)]
            for nll, style in ((nlls[0], ":"), (nlls[len(nlls) // 2], "-"), (nlls[-1], "--")):
                b = fit["alpha"] * nll + fit["beta"]
                ax.plot(grid, [f(r, b) for r in grid], "k" + style, label=f"f(r, c), NLL(c) = {nll:.2f}")
            ax.plot([0, 1], [0, 1], color="0.8", lw=0.8)
            ax.set_xlabel("keep ratio r")
            ax.set_ylabel("NLL(answer | full) / NLL(answer | compressed)")
            ax.set_ylim(0, 2.1)
            ax.set_title(f"{model}: {key}, alpha {fit['alpha']:.3f}, beta {fit['beta']:.3f}")
            ax.legend(fontsize=7)
            fig.tight_layout()
            out = os.path.join(root, "plots", f"calibration_{model}_{key.replace(':', '_')}.png")
            fig.savefig(out, dpi=110)
            plt.close(fig)
            print(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
