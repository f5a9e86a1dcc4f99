#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Throughput against batch size for the V4-Flash GEMMs of cuda_gemm_bench, with the roofline.

Reads the JSONL that `cuda_gemm_bench --out FILE` writes (lines starting with '#' are comments),
draws one panel per op: TFLOP/s of each implementation against m (tokens for the linears,
token-expert pairs for the grouped expert GEMMs), and the roofline of that op, min(FLOP rate,
bytes/FLOP x copy bandwidth), i.e. FLOPs / floor time as the benchmark measured the ceilings in the
same run. Also writes a markdown table of the fast kernels' fraction of the floor.

    python bench/plot_gemm.py bench/results/cuda-gemm-h200-<commit>.jsonl out.png [table.md]
"""
import json
import math
import sys
from collections import defaultdict


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                rows.append(json.loads(line))
    return rows


STYLE = {
    "fast": dict(color="tab:red", marker="o", lw=2),
    "reference": dict(color="tab:gray", marker="x", lw=1),
    "cublaslt_fp8_tensor": dict(color="tab:blue", marker="s", lw=1, ls="--"),
    "cublaslt_fp8_block": dict(color="tab:cyan", marker="^", lw=1, ls="--"),
    "cublaslt_bf16": dict(color="tab:green", marker="s", lw=1, ls="--"),
}


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    rows = load(argv[1])
    ops = [r for r in rows if r["op"] not in ("ceiling_copy", "ceiling_gemm", "act_quant_fp8") and r["ms"] > 0
           and r["flops"] > 0]  # memory-bound ops (no FLOPs) are in the JSONL and the markdown table of the bench
    by_op = defaultdict(list)
    for r in ops:
        by_op[r["op"]].append(r)
    ceil = {r["impl"]: r for r in rows if r["op"].startswith("ceiling")}

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(by_op)
    cols = 3
    nrows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        pts = by_op[name]
        # Roofline of the op from the fast rows (same FLOPs and bytes for every implementation).
        roof = sorted({(r["m"], r["flops"] / (r["floor_ms"] * 1e-3) / 1e12) for r in pts if r["impl"] == "fast"})
        if roof:
            ax.plot([m for m, _ in roof], [t for _, t in roof], color="black", lw=1, ls=":", label="roofline (floor)")
        for impl in STYLE:
            series = sorted((r["m"], r["tflops"]) for r in pts if r["impl"] == impl and r["tflops"] > 0)
            if series:
                ax.plot([m for m, _ in series], [t for _, t in series], label=impl, **STYLE[impl])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        title = f"{name} {pts[0]['shape']}"
        if name.startswith("experts"):
            title += "\n(cuBLASLt: one dense FP8 weight at equal FLOPs)"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("m (tokens; pairs for experts)")
        ax.set_ylabel("TFLOP/s")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    sub = []
    if "cudaMemcpy_d2d" in ceil:
        c = ceil["cudaMemcpy_d2d"]
        sub.append(f"copy {c['bytes'] / (c['ms'] * 1e-3) / 1e9:.0f} GB/s")
    for k in ("cublaslt_bf16", "cublaslt_fp8_tensor"):
        if k in ceil:
            sub.append(f"{k} {ceil[k]['tflops']:.0f} TFLOP/s")
    fig.suptitle("DeepSeek-V4-Flash GEMMs on the H200 — ceilings: " + ", ".join(sub), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(argv[2], dpi=110)

    if len(argv) > 3:
        # Tokens per step: m for the linears, m / 6 (top-6 pairs) for the routed experts.
        def tokens(r):
            return r["m"] // 6 if r["op"].startswith("experts") else r["m"]

        ts = sorted({tokens(r) for r in ops if r["impl"] == "fast"})
        with open(argv[3], "w") as f:
            f.write("fraction of the floor (floor time / measured time) of the fast kernels, by tokens per step\n\n")
            f.write("| op | shape | " + " | ".join(f"{t}" for t in ts) + " |\n")
            f.write("|---" * (len(ts) + 2) + "|\n")
            for name in names:
                cells = []
                for t in ts:
                    r = [x for x in by_op[name] if x["impl"] == "fast" and tokens(x) == t]
                    cells.append(f"{r[0]['floor_ms'] / r[0]['ms']:.2f}" if r else "")
                f.write(f"| {name} | {by_op[name][0]['shape']} | " + " | ".join(cells) + " |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
