#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 9's op tables: every kernel of the V4-Flash-width proxy (cuda_forward_bench --experts 256
--layers csa,hca: full hidden 4096, 64 heads x 512, 256 FP4 experts top-6, index top-512, window 128)
at each decode batch and prefill chunk, from Nsight Compute's per-kernel summary of the timed loop:
time, DRAM bytes (read + written, measured by ncu with cold caches) and the achieved fraction of
the copy bandwidth measured in the same call; kernels grouped into the model's ops (V4-Flash's and V4.1's;
a profile of time alone, e.g. cuda_engine_bench --profile, gives the time columns).
   ncu --profile-from-start off --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
       --print-summary per-kernel cuda_forward_bench ... --profile 1 > b1.txt
   python3 bench/op_table.py --ceilings ceilings.jsonl "decode b1=b1.txt" "prefill 4096=p4096.txt" [--out F.md]
Fraction of copy bandwidth = (DRAM bytes / time) / copy bandwidth: for memory-bound ops (attention at
decode, the elementwise and hyper-connection kernels) the issue's goal is >= 70%. GEMMs are
compute-bound at prefill: their rates against cuBLASLt are in cuda_gemm_bench's table.
"""
import argparse
import json
import lzma
import re

UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
         "ns": 1e-3, "us": 1, "ms": 1e3, "s": 1e6, "usecond": 1, "msecond": 1e3, "nsecond": 1e-3}

# Kernel name (regular expression on the demangled name) -> op.
OPS = [
    (r"even_routing|expert_load", "benchmark routing (cuda_engine_bench --routing even; not the model's)"),
    (r"tc_attention|mqa_attention|sparse_attention|sink_attention", "sparse attention (window + compressed, sink)"),
    (r"indexer|index_scores|candidate|visible_counts", "lightning indexer scores + top-k"),
    (r"fp4_rs|fp4_.*kernel|grouped", "routed experts (FP4 grouped GEMM)"),
    (r"wgmma_gemm|staged_linear|gemm|dense_ws|split_reduce|fp8bf16_dec|fp8b32", "FP8/BF16 linears (wgmma) + LM head"),
    (r"hc_|sinkhorn", "hyper-connections (mix, pre, post)"),
    (r"rms_norm", "RMSNorm"),
    (r"rope", "RoPE / head norm / QAT"),
    (r"act_quant|to_bf16", "activation quantization / bf16"),
    (r"qat_rows|decode_rows", "V4.1 cache QAT / compact codes"),
    (r"swiglu", "SwiGLU"),
    (r"moe_combine|combine", "MoE weighted combine"),
    (r"route|topk", "router / top-k"),
    (r"engram", "Engram (gather, fusion)"),
    (r"permute|scatter|gather|group_row|row_|expert_tiles", "token permutation / row tables"),
    (r"compress|add_ape", "KV compressors"),
    (r"ring_write|copy_rows|page", "state writes"),
    (r"sample|draw|argmax", "sampling"),
    (r"embed", "embedding"),
]


def op_of(name):
    for pat, op in OPS:
        if re.search(pat, name):
            return op
    return "other"


def parse(fn):
    """Per kernel: name, invocations, {metric: average in base units (us, bytes)}."""
    out, cur = [], None
    for line in lzma.open(fn, "rt") if str(fn).endswith(".xz") else open(fn):  # (recorded profiles: .txt.xz)
        m = re.match(r"\s{2}(\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\).*Invocations (\d+)", line)
        if m:
            cur = {"name": m.group(1), "grid": f"{m.group(2)}x{m.group(3)}x{m.group(4)}/{m.group(5)}",
                   "calls": int(m.group(8)), "m": {}}
            out.append(cur)
            continue
        m = re.match(r"\s+(gpu__time_duration\.sum|dram__bytes_read\.sum|dram__bytes_write\.sum)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", line)
        if m and cur is not None:
            cur["m"][m.group(1)] = float(m.group(5).replace(",", "")) * UNITS.get(m.group(2), float("nan"))
    return out


def table(label, kernels, copy_gbps):
    rows, total_us = {}, 0.0
    for k in kernels:
        t = k["m"].get("gpu__time_duration.sum", 0.0) * k["calls"]
        b = (k["m"].get("dram__bytes_read.sum", 0.0) + k["m"].get("dram__bytes_write.sum", 0.0)) * k["calls"]
        op = op_of(k["name"])
        r = rows.setdefault(op, {"us": 0.0, "bytes": 0.0, "calls": 0, "kernels": set()})
        r["us"] += t
        r["bytes"] += b
        r["calls"] += k["calls"]
        r["kernels"].add(re.sub(r"\(.*", "", k["name"]).replace("void ", ""))
        total_us += t
    lines = [f"### {label}: {total_us / 1e3:.2f} ms of kernel time in the profiled loop", "",
             "| op | kernels | launches | time | share | DRAM bytes | achieved GB/s | of copy bandwidth |",
             "|---|---|---|---|---|---|---|---|"]
    for op, r in sorted(rows.items(), key=lambda kv: -kv[1]["us"]):
        gbps = r["bytes"] / (r["us"] * 1e-6) / 1e9 if r["us"] > 0 else 0.0
        frac = f"{gbps / copy_gbps:.0%}" if copy_gbps and r["bytes"] > 0 else "n/a"
        lines.append(f"| {op} | {', '.join(sorted(r['kernels']))} | {r['calls']} | {r['us'] / 1e3:.3f} ms | "
                     f"{r['us'] / total_us:.1%} | {r['bytes'] / 1e6:,.1f} MB | {gbps:,.0f} | {frac} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profiles", nargs="+", help="LABEL=ncu_summary.txt")
    ap.add_argument("--ceilings", help="cuda_gemm_bench --only none output (copy bandwidth)")
    ap.add_argument("--out")
    a = ap.parse_args()
    copy_gbps = 0.0
    if a.ceilings:
        for l in open(a.ceilings):
            if l.startswith("{"):
                r = json.loads(l)
                if r.get("impl") == "cudaMemcpy_d2d":
                    copy_gbps = r["gbps"]
    parts = [f"Copy bandwidth (same call): {copy_gbps:,.0f} GB/s." if copy_gbps else "No copy bandwidth given."]
    for p in a.profiles:
        label, fn = p.split("=", 1)
        parts.append(table(label, parse(fn), copy_gbps))
    text = "\n\n".join(parts) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
