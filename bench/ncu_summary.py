#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Per-kernel totals from Nsight Compute's `--print-summary per-kernel` output (one metric:
# gpu__time_duration.sum), largest first: name, grid/block, invocations, average/min/max, total, share.
#   ncu --profile-from-start off --metrics gpu__time_duration.sum --print-summary per-kernel \
#       cuda_forward_bench ... --profile 1 > d1.txt;  python3 bench/ncu_summary.py d1.txt
# --top N: the N largest kernels (default 22). Totals per op of the model (attention, experts, linears, ...):
# bench/op_table.py.
# --launches: the launches one by one, in order (ncu without --print-summary: a header line per launch, then its
# gpu__time_duration.sum or the Duration row of --set full), to tell apart launches of one kernel and grid (the
# dense linears of a prefill step all run as dense_ws_kernel on 132 blocks): index, time, name, grid/block.
# --diff PREV NEW: an A/B of two summaries (e.g. call_lib.sh's ncu_pf_ab files): per kernel (its grids summed)
# the total time in each, the difference and the launches, largest differences first; then the totals.
import argparse
import lzma
import re
import signal
import sys


def parse(fn):
    """[(name, grid/block, invocations, avg us, min us, max us, total us)] of one ncu summary file."""
    res = []
    cur = None
    for line in lzma.open(fn, "rt") if str(fn).endswith(".xz") else open(fn):  # (recorded profiles: .txt.xz)
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


def launches(fn):
    """[(name, grid/block, us)] of per-launch ncu output, in launch order."""
    res = []
    cur = None
    for line in lzma.open(fn, "rt") if str(fn).endswith(".xz") else open(fn):
        m = re.match(r"\s{2}(\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), Context", line)
        if m:
            cur = (m.group(1), f"{m.group(2)}x{m.group(3)}x{m.group(4)}/{m.group(5)}")
            continue
        p = line.replace(",", "").split()
        if cur and len(p) >= 3 and p[0] in ("gpu__time_duration.sum", "Duration"):
            f = {"us": 1, "ms": 1000, "ns": 1e-3, "s": 1e6, "usecond": 1, "msecond": 1000, "nsecond": 1e-3}[p[-2]]
            res.append((cur[0], cur[1], float(p[-1]) * f))
            cur = None
    return res


def diff(prev_fn, new_fn):
    """[(kernel, prev us, new us, prev launches, new launches)] with each kernel's grids summed, largest |new - prev|
    first; a kernel absent from one file has 0 there."""
    tot = {}
    for i, fn in enumerate((prev_fn, new_fn)):
        for r in parse(fn):
            t = tot.setdefault(r[0], [0.0, 0.0, 0, 0])
            t[i] += r[6]
            t[2 + i] += r[2]
    rows = [(k, v[0], v[1], v[2], v[3]) for k, v in tot.items()]
    return sorted(rows, key=lambda x: (-abs(x[2] - x[1]), x[0]))


def main(argv):
    ap = argparse.ArgumentParser(description="per-kernel totals of ncu --print-summary per-kernel output")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", type=int, default=22)
    ap.add_argument("--launches", action="store_true", help="per-launch output: every launch in order")
    ap.add_argument("--diff", action="store_true", help="two files, PREV NEW: per-kernel differences")
    a = ap.parse_args(argv)
    if a.diff:
        if len(a.files) != 2:
            ap.error("--diff takes two files: PREV NEW")
        rows = diff(*a.files)
        tp, tn = sum(x[1] for x in rows), sum(x[2] for x in rows)
        print(f"== {a.files[0]} -> {a.files[1]}: total {tp / 1000:.2f} -> {tn / 1000:.2f} ms ({(tn - tp) / 1000:+.2f} ms)")
        for k, p, n, lp, ln in rows[: a.top]:
            print(f"{k[:60]:60s} {p / 1000:8.3f} -> {n / 1000:8.3f} ms ({(n - p) / 1000:+7.3f})  launches {lp} -> {ln}")
        return
    for fn in a.files:
        if a.launches:
            r = launches(fn)
            print(f"== {fn}: {len(r)} launches, total {sum(x[2] for x in r) / 1000:.2f} ms")
            for i, x in enumerate(r):
                print(f"{i:5d} {x[2]:10.1f}us  {x[0][:60]:60s} {x[1]}")
            continue
        r = parse(fn)
        tot = sum(x[6] for x in r)
        print(f"== {fn}: total {tot / 1000:.1f} ms")
        for x in sorted(r, key=lambda x: -x[6])[: a.top]:
            print(f"{x[0]:32s} {x[1]:>18s} n={x[2]:4d} avg={x[3]:9.1f}us min={x[4]:8.1f} max={x[5]:9.1f} "
                  f"tot={x[6] / 1000:8.2f}ms {100 * x[6] / tot:5.1f}%")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (piped into head: stop quietly)
    main(sys.argv[1:])
