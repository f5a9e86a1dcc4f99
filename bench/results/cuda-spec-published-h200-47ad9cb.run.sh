#!/usr/bin/env bash
# Session 26, call 2 (47ad9cb): cuda_dspark_tests (FastMarkovDraftFollowsTheExactDraft), the DSpark draft call's
# kernels at b64 after the fast Markov bias (ncu), and speculation with the published formats (FP8 linears, FP4
# experts, fast GEMMs) at 43 layers and V4's vocabulary.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-520}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b2.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1; shift; local L=$(left); [ $L -lt 15 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < ${CAP:-120} ? L : ${CAP:-120} )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $R/$name.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $S; }
t fastmarkov $B/cuda_dspark_tests --gtest_filter='CudaDSparkOps.*'
if command -v ncu > /dev/null; then
  timeout 80 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel --launch-count 4000 \
    $B/spec_bench --device cuda --family v4-dspark --formats published --vocab 129280 --layers 2 --batches 64 --prompt 32 --decode 12 --k 5 --temperature 0.8 \
    --repeat 1 --warmup 0 --async 1 --gemm fast --arms fixed --dir /tmp/sb_ncu > $R/ncu_dsp64.txt 2>&1
  echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
fi
sb() { local name=$1 cap=$2; shift 2; local L=$(left); [ $L -lt 30 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < cap ? L : cap )) $B/spec_bench --device cuda --formats published --gemm fast --vocab 129280 --prompt 32 --k 5 --repeat 1 --warmup 1 --async 1 "$@" --dir /tmp/sb_$name > $R/$name.jsonl 2> $R/$name.err
  echo "$name rc=$? t=$(( $(date +%s) - T0 ))" >> $S; }
sb dsp43_t08 110 --family v4-dspark --layers 43 --decode 64 --temperature 0.8 --batches 1,16,64,128 --arms none,fixed,scheduler
sb mtp43_t08 100 --family v4 --layers 43 --decode 64 --temperature 0.8 --batches 1,16,64,128 --arms none,fixed,scheduler
sb dsp43_t0 80 --family v4-dspark --layers 43 --decode 64 --temperature 0 --batches 1,16,64,128 --arms none,fixed
sb dsp43_long 90 --family v4-dspark --layers 43 --decode 256 --temperature 0.8 --batches 64,256 --arms none,scheduler
t cuda_dspark_tests $B/cuda_dspark_tests
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
