#!/usr/bin/env bash
# Session 29, call 1: the GPU tests of ba4fbde (the review's mend, compiled but not run last session); ncu step
# tables at decode batch 128 and 512 (even routing) and at an 8K prefill; SASS-level counters of the FP4 decode kernel
# at b128; the proxy baseline (decode b1/32/128/512, prefill 8K, 2K).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b30.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 40 $B/cuda_ops_tests
t gemm 40 $B/cuda_gemm_tests
t v41_ops 20 $B/cuda_v41_ops_tests
t model 40 $B/cuda_model_tests
t fast_model 20 $B/cuda_fast_model_tests
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for r in 1 2; do
timeout 25 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf.jsonl 2>> $R/pf.err
timeout 25 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 2048 --batches 1 --context 16 --decode 0 >> $R/pf.jsonl 2>> $R/pf.err
timeout 40 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 16 >> $R/dec.jsonl 2>> $R/pf.err
done
echo "proxy t=$(( $(date +%s) - T0 ))" >> $S
for b in 128 512; do
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches $b --decode-warmup 2 --decode 2 > $R/ncu-b$b.txt 2>&1
echo "ncu b$b rc=$? t=$(( $(date +%s) - T0 ))" >> $S
done
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 > $R/ncu-pf8192.txt 2>&1
echo "ncu pf rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 120 ncu --profile-from-start off --clock-control none --cache-control all -k regex:'fp4_dec' --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis -o $R/src-b128 \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches 128 --decode-warmup 2 --decode 1 > $R/src-b128.log 2>&1
echo "ncu src rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 60 ncu -i $R/src-b128.ncu-rep --page source --print-source sass --csv > $R/src-b128-sass.csv 2> $R/src-b128-sass.err
timeout 60 ncu -i $R/src-b128.ncu-rep --print-details all > $R/src-b128-details.txt 2>&1
echo "sass rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head
python3 - <<'PY'
import json
a=[round(json.loads(l)["tok_s"]) for l in open("/tmp/r/pf.jsonl") if l.startswith("{")]
d=[(json.loads(l)["batch"], round(json.loads(l)["ms_per_step"],4)) for l in open("/tmp/r/dec.jsonl") if l.startswith("{")]
print(a); print(d)
PY
