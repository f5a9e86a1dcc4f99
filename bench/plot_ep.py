#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots cuda_forward_bench --gpus runs (expert parallelism): decode tokens/s per GPU against the
batch for each GPU count and context, and the 2-GPU speed-up over one GPU.
   python3 bench/plot_ep.py bench/results/cuda-ep-h200x2-<commit>.jsonl [--out file.png]"""
import argparse
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(args.jsonl) if l.startswith("{")]
    dec = [r for r in rows if r["mode"] == "decode"]
    series = defaultdict(dict)  # (gpus, context) -> batch -> tok/s per gpu
    for r in dec:
        series[(r["gpus"], r.get("context", 64))][r["batch"]] = r["tok_s_per_gpu"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (g, ctx), pts in sorted(series.items()):
        xs = sorted(pts)
        a.plot(xs, [pts[x] for x in xs], marker="o", ls="-" if g == 1 else "--", label=f"{g} GPU{'s' if g > 1 else ''}, context {ctx}")
    a.set_xscale("log", base=2)
    a.set_xlabel("decode batch (sequences)")
    a.set_ylabel("decode tokens/s per GPU")
    a.set_title("2 full-width V4-Flash layers (CSA+HCA), H200")
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    for ctx in sorted({c for (_, c) in series}):
        one, two = series.get((1, ctx), {}), series.get((2, ctx), {})
        xs = sorted(set(one) & set(two))
        if xs:
            b.plot(xs, [2 * two[x] / one[x] for x in xs], marker="o", label=f"context {ctx}")
    b.axhline(2.0, color="gray", ls=":", label="ideal (2x)")
    b.set_xscale("log", base=2)
    b.set_xlabel("decode batch (sequences)")
    b.set_ylabel("2-GPU total tokens/s / 1-GPU tokens/s")
    b.set_title("expert-parallel speed-up")
    b.grid(alpha=0.3)
    b.legend(fontsize=8)
    fig.tight_layout()
    out = args.out or args.jsonl.replace(".jsonl", ".png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
