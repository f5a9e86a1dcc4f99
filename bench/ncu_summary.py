#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Per-kernel totals from Nsight Compute's `--print-summary per-kernel` output (one metric:
# gpu__time_duration.sum), largest first: name, grid/block, invocations, average/min/max, total, share.
#   ncu --profile-from-start off --metrics gpu__time_duration.sum --print-summary per-kernel \
#       cuda_forward_bench ... --profile 1 > d1.txt;  python3 bench/ncu_summary.py d1.txt
# --top N: the N largest kernels (default 22). --categories: also the totals per kind of kernel (attention,
# indexer and top-k, routed experts, dense GEMMs, norms and RoPE, mHC, quantization and conversions, MoE
# routing and combine, caches, Engram, sampling, the benchmark's even routing, other) and the launches.
import argparse
import re
import signal
import sys

# (category, pattern on the kernel's name), first match wins.
CATEGORIES = [
    ("benchmark routing", r"even_routing|expert_load"),  # cuda_engine_bench --routing even only, not the model's
    ("attention", r"attention"),
    ("indexer / top-k", r"indexer|index_scores|topk|candidate|visible_counts"),
    ("routed experts (FP4)", r"fp4|wgdec::|wgws::|expert_tiles"),
    ("dense GEMMs", r"wgmma_gemm|dense_ws|split_reduce|gemm|group_row_tables"),
    ("norms / RoPE", r"rms_norm|rope_rows|head_norm"),
    ("mHC", r"\bhc_|hc_mix|hc_pre|hc_post|hc_head"),
    ("quantization / conversion", r"act_quant|to_bf16|qat_rows|swiglu|decode_rows"),
    ("MoE routing / combine", r"route|permute|moe_combine|scatter_rows|gather_rows"),
    ("caches", r"ring_write|compressor|copy_rows|compress_pool|add_ape"),
    ("Engram", r"engram"),
    ("sampling", r"sample|argmax"),
]


def parse(fn):
    """[(name, grid/block, invocations, avg us, min us, max us, total us)] of one ncu summary file."""
    res = []
    cur = None
    for line in open(fn):
        m = re.match(r"\s{2}(\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\).*Invocations (\d+)", line)
        if m:
            cur = (m.group(1), f"{m.group(2)}x{m.group(3)}x{m.group(4)}/{m.group(5)}", int(m.group(8)))
            continue
        if "gpu__time_duration.sum" in line and cur:
            p = line.replace(",", "").split()
            unit, avg, mn, mx = p[1], float(p[-1]), float(p[-3]), float(p[-2])
            f = {"us": 1, "ms": 1000, "ns": 1e-3, "s": 1e6}[unit]
            res.append((cur[0], cur[1], cur[2], avg * f, mn * f, mx * f, cur[2] * avg * f))
            cur = None
    return res


def category(name):
    for cat, pattern in CATEGORIES:
        if re.search(pattern, name):
            return cat
    return "other"


def categories(rows):
    """{category: (total us, launches)} over the parsed rows."""
    out = {}
    for r in rows:
        t, n = out.get(category(r[0]), (0.0, 0))
        out[category(r[0])] = (t + r[6], n + r[2])
    return out


def main(argv):
    ap = argparse.ArgumentParser(description="per-kernel totals of ncu --print-summary per-kernel output")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", type=int, default=22)
    ap.add_argument("--categories", action="store_true")
    a = ap.parse_args(argv)
    for fn in a.files:
        r = parse(fn)
        tot = sum(x[6] for x in r)
        print(f"== {fn}: total {tot / 1000:.1f} ms")
        for x in sorted(r, key=lambda x: -x[6])[: a.top]:
            print(f"{x[0]:32s} {x[1]:>18s} n={x[2]:4d} avg={x[3]:9.1f}us min={x[4]:8.1f} max={x[5]:9.1f} "
                  f"tot={x[6] / 1000:8.2f}ms {100 * x[6] / tot:5.1f}%")
        if a.categories:
            print(f"-- by kind ({sum(x[2] for x in r)} launches)")
            for cat, (t, n) in sorted(categories(r).items(), key=lambda kv: -kv[1][0]):
                print(f"{cat:28s} {t / 1000:8.2f} ms {100 * t / tot:5.1f}%  {n:5d} launches")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (piped into head: stop quietly)
    main(sys.argv[1:])
