#!/usr/bin/env python3
# Per-kernel totals from Nsight Compute's `--print-summary per-kernel` output (one metric:
# gpu__time_duration.sum), largest first: name, grid/block, invocations, average/min/max, total, share.
#   ncu --profile-from-start off --metrics gpu__time_duration.sum --print-summary per-kernel \
#       cuda_forward_bench ... --profile 1 > d1.txt;  python3 bench/ncu_summary.py d1.txt
import re,sys
def parse(fn):
    res=[]; cur=None
    for l in open(fn):
        m=re.match(r"\s{2}(\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\).*Invocations (\d+)",l)
        if m: cur=(m.group(1),f"{m.group(2)}x{m.group(3)}x{m.group(4)}/{m.group(5)}",int(m.group(8))); continue
        if 'gpu__time_duration.sum' in l and cur:
            p=l.replace(',','').split(); unit=p[1]; avg=float(p[-1]); mn=float(p[-3]); mx=float(p[-2])
            f={'us':1,'ms':1000,'ns':1e-3,'s':1e6}[unit]
            res.append((cur[0],cur[1],cur[2],avg*f,mn*f,mx*f,cur[2]*avg*f)); cur=None
    return res
for fn in sys.argv[1:]:
    r=parse(fn); tot=sum(x[6] for x in r)
    print(f"== {fn}: total {tot/1000:.1f} ms")
    for x in sorted(r,key=lambda x:-x[6])[:22]:
        print(f"{x[0]:32s} {x[1]:>18s} n={x[2]:4d} avg={x[3]:9.1f}us min={x[4]:8.1f} max={x[5]:9.1f} tot={x[6]/1000:8.2f}ms {100*x[6]/tot:5.1f}%")
