#!/usr/bin/env bash
# Session 26, call 6 (b5358b7): draft sampling without the f64 q scratch (bit-identical: cuda_mtp_tests,
# cuda_dspark_tests), the draft call's kernels at b64 (ncu), DSpark b64/b256 with continuous batching.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-300}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b6.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1; shift; local L=$(left); [ $L -lt 15 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < ${CAP:-120} ? L : ${CAP:-120} )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $R/$name.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $S; }
t cuda_mtp_tests $B/cuda_mtp_tests
t cuda_dspark_tests $B/cuda_dspark_tests
if command -v ncu > /dev/null; then
  timeout 50 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel --launch-count 4000 \
    $B/spec_bench --device cuda --family v4-dspark --formats published --vocab 129280 --layers 2 --batches 64 --prompt 32 --decode 12 --k 5 --temperature 0.8 \
    --repeat 1 --warmup 0 --async 1 --gemm fast --arms fixed --dir /tmp/sb_ncu > $R/ncu_dsp64.txt 2>&1
  echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
fi
L=$(left)
[ $L -gt 40 ] && timeout $(( L - 5 )) $B/spec_bench --device cuda --formats published --gemm fast --vocab 129280 --prompt 32 --k 5 --repeat 1 --warmup 1 --async 1 --layers 43 --decode 64 --requests-per-slot 4 \
  --family v4-dspark --temperature 0.8 --batches 64,256 --arms none,fixed --dir /tmp/sb_d > $R/dsp.jsonl 2> $R/dsp.err
echo "dsp rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
