#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Per-kernel totals from Nsight Compute's `--print-summary per-kernel` output (one metric:
# gpu__time_duration.sum), largest first: name, grid/block, invocations, average/min/max, total, share.
#   ncu --profile-from-start off --metrics gpu__time_duration.sum --print-summary per-kernel \
#       cuda_forward_bench ... --profile 1 > d1.txt;  python3 bench/ncu_summary.py d1.txt
# --top N: the N largest kernels (default 22). Totals per op of the model (attention, experts, linears, ...):
# bench/op_table.py.
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


def main(argv):
    ap = argparse.ArgumentParser(description="per-kernel totals of ncu --print-summary per-kernel output")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", type=int, default=22)
    a = ap.parse_args(argv)
    for fn in a.files:
        r = parse(fn)
        tot = sum(x[6] for x in r)
        print(f"== {fn}: total {tot / 1000:.1f} ms")
        for x in sorted(r, key=lambda x: -x[6])[: a.top]:
            print(f"{x[0]:32s} {x[1]:>18s} n={x[2]:4d} avg={x[3]:9.1f}us min={x[4]:8.1f} max={x[5]:9.1f} "
                  f"tot={x[6] / 1000:8.2f}ms {100 * x[6] / tot:5.1f}%")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (piped into head: stop quietly)
    main(sys.argv[1:])
