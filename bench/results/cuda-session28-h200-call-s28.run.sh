#!/usr/bin/env bash
# Session 28, call 10: hc_mix's tiled kernel (64 rows per block, weights once, cp.async double buffer) at >= 1024 rows:
# bits (CudaOps.HyperConnectionsMatchCpu with 1191 rows), model tests, prefill A/B: 1df9ec2 (b19f), G4 (b27g4), tiled (b28).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/b19f.tar.xz -C $O
G4=/tmp/g4; mkdir -p $G4 && tar -xJf .devcarry/me/b27g4.tar.xz -C $G4
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b28.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 100 $B/cuda_ops_tests
t fast_model 90 $B/cuda_fast_model_tests
t model 100 $B/cuda_model_tests
t v41 100 $B/cuda_v41_model_tests --gtest_filter='*Fast*:*fast*:*LogitsAndGreedy*:*Replay*'
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 90 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in old g4 new; do X=$O; [ $v = g4 ] && X=$G4; [ $v = new ] && X=$B
  timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf_$v.jsonl 2>> $R/pf.err
  timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 2048 --batches 1 --context 16 --decode 0 >> $R/pf2k_$v.jsonl 2>> $R/pf.err
done; done
echo "ab t=$(( $(date +%s) - T0 ))" >> $S
for v in old new; do X=$O; [ $v = new ] && X=$B
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none -k regex:'hc_mix_partial' --metrics gpu__time_duration.sum --print-summary per-kernel \
  $X/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 > $R/ncu-pf-$v.txt 2>&1
done
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 > $R/ncu-pf-all.txt 2>&1
python3 bench/ncu_summary.py $R/ncu-pf-all.txt > $R/ncu-pf-all.sum.txt 2>&1
echo "ncu t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
python3 - <<'PY'
import json
for v in ("old","g4","new"):
    a=[round(json.loads(l)["tok_s"]) for l in open(f"/tmp/r/pf_{v}.jsonl") if l.startswith("{") and json.loads(l).get("tok_s")]
    b=[round(json.loads(l)["tok_s"]) for l in open(f"/tmp/r/pf2k_{v}.jsonl") if l.startswith("{") and json.loads(l).get("tok_s")]
    print(v, "8192:", a, "2048:", b)
PY
for f in $R/ncu-pf-old.txt $R/ncu-pf-new.txt; do echo "== $f"; grep -v PROF $f | grep -A4 hc_mix_partial | grep -E "hc_mix|gpu__time"; done; head -14 $R/ncu-pf-all.sum.txt
