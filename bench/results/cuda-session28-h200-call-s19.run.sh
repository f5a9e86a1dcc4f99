#!/usr/bin/env bash
# Session 28, call 1 (1df9ec2): the CudaV41Replay segfault's call stack (crash_backtrace), and where a batch-1 /
# batch-32 decode step of the 2-layer proxy goes (ncu kernel times).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b19.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
for m in v41_tiny_a_exact v41_tiny_b_official embedded_official; do
  for tname in PromptsOfAtMostTheWindowEqualTheExactPath MixedBatchLeavesTheOtherSequencesUnchanged; do
    timeout 60 $B/cuda_v41_model_tests --gtest_also_run_disabled_tests --gtest_filter="Models/CudaV41Replay.DISABLED_$tname/$m" > $R/seg-$tname-$m.log 2>&1
    echo "seg $tname $m rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/seg-$tname-$m.log | tr '\n' ' ')" >> $S
  done
done
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 8192"
timeout 90 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
echo "pb rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 60 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,1,32,128 --decode-warmup 3 --decode 32 > $R/dec.jsonl 2> $R/dec.err
echo "dec rc=$? t=$(( $(date +%s) - T0 ))" >> $S
for b in 1 32; do
timeout 90 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 0 --context 4096 --batches $b --decode-warmup 2 --decode 2 > $R/ncu-b$b.txt 2> $R/ncu-b$b.err
echo "ncu b$b rc=$? t=$(( $(date +%s) - T0 ))" >> $S
python3 bench/ncu_summary.py $R/ncu-b$b.txt > $R/ncu-b$b.sum.txt 2>&1
done
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -h -A25 "call stack\|backtrace\|Fatal\|signal" $R/seg-*.log | head -60; cut -c1-220 $R/dec.jsonl; head -40 $R/ncu-b1.sum.txt
