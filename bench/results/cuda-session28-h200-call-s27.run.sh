#!/usr/bin/env bash
# Session 28, call 9: hc_mix_partial with interleaved rows (G = 4: b27a, G = 2: b27b) and dot(x, x) in the first pass,
# against 1df9ec2 (b19f): the split-K order's bits (CudaOps.HyperConnectionsMatchCpu), ncu kernel times, proxy prefill.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/b19f.tar.xz -C $O
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b27a.tar.xz -C $B
G2=/tmp/g2; mkdir -p $G2 && tar -xJf .devcarry/me/b27b.tar.xz -C $G2
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
timeout 100 $B/cuda_ops_tests > $R/ops.log 2>&1; echo "ops(G4) rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/ops.log | tr '\n' ' ')" >> $S
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 90 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in old g4 g2; do X=$O; [ $v = g4 ] && X=$B; [ $v = g2 ] && X=$G2
  timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf_$v.jsonl 2>> $R/pf.err
  timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; done
echo "ab t=$(( $(date +%s) - T0 ))" >> $S
for v in old g4 g2; do X=$O; [ $v = g4 ] && X=$B; [ $v = g2 ] && X=$G2
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none -k regex:'hc_mix_partial' --metrics gpu__time_duration.sum --print-summary per-kernel \
  $X/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 > $R/ncu-pf-$v.txt 2>&1
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none -k regex:'hc_mix_partial' --metrics gpu__time_duration.sum --print-summary per-kernel \
  $X/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches 1 --decode-warmup 2 --decode 2 > $R/ncu-b1-$v.txt 2>&1
done
echo "ncu t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
python3 - <<'PY'
import json
for v in ("old","g4","g2"):
    rows=[json.loads(l) for l in open(f"/tmp/r/pf_{v}.jsonl") if l.startswith("{")]
    d=[json.loads(l) for l in open(f"/tmp/r/dec_{v}.jsonl") if l.startswith("{")]
    print(v, [round(r["tok_s"]) for r in rows], [(r["batch"], round(r["ms_per_step"],4)) for r in d])
PY
for f in $R/ncu-*.txt; do echo "$f: $(grep -A3 'hc_mix_partial' $f | grep -E 'gpu__time' | tr -s ' ')"; done
