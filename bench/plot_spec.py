#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Speculative-decoding speedup against batch size from spec_bench's JSONL (its summary lines).

One panel per file (a model family): speedup over no speculation of each arm (fixed draft length,
confidence scheduler), median of the runs, on a log-2 batch axis; the line at 1.0 is no speculation.
Also prints a markdown table (batch, tok/s of each arm, speedups, plain steps of the scheduler).

    python bench/plot_spec.py out.png FILE.jsonl [FILE.jsonl ...]
"""
import json
import sys


def summaries(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                j = json.loads(line)
                if j.get("summary"):
                    rows.append(j)
    return rows


def table(rows):
    by_batch = {}
    for r in rows:
        by_batch.setdefault(r["batch"], {})[r["arm"]] = r
    print("| batch | none tok/s | fixed tok/s (speedup) | scheduler tok/s (speedup) | scheduler plain steps / steps |")
    print("|---|---|---|---|---|")
    for b in sorted(by_batch):
        a = by_batch[b]
        cell = lambda k: (f"{a[k]['median_generated_tok_s']:.0f} ({a[k]['speedup_vs_none']:.2f}x)" if k in a else "")
        s = a.get("scheduler", {})
        plain = f"{s.get('median_plain_steps', 0):.0f} / {s.get('median_steps', 0):.0f}" if s else ""
        print(f"| {b} | {a['none']['median_generated_tok_s']:.0f} | {cell('fixed')} | {cell('scheduler')} | {plain} |")


def main():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, files = sys.argv[1], sys.argv[2:]
    fig, axes = plt.subplots(1, len(files), figsize=(5.5 * len(files), 4.2), squeeze=False)
    for ax, path in zip(axes[0], files):
        rows = summaries(path)
        family = rows[0]["family"] if rows else path
        print(f"\n{path}\n")
        table(rows)
        for arm, style in (("fixed", dict(color="tab:blue", marker="s")), ("scheduler", dict(color="tab:red", marker="o"))):
            pts = sorted((r["batch"], r["speedup_vs_none"]) for r in rows if r["arm"] == arm)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=arm, lw=2, **style)
        ax.axhline(1.0, color="gray", ls="--", lw=1, label="no speculation")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (concurrent requests)")
        ax.set_ylabel("speedup over no speculation")
        ax.set_title(f"{family}: greedy, k = 5")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
