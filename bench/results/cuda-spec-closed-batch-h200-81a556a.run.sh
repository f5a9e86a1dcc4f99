#!/usr/bin/env bash
# Session 26, call 3: the drafters' warp-ordered sums and the DSpark confidence on 8 lanes (bit-identical to the
# CPU: cuda_mtp_tests, cuda_dspark_tests), the draft call's kernels at b64 (ncu), and the scheduler's trace at
# b128 / b256 (published formats, 43 layers, V = 129,280).
set -u
T0=$(date +%s); LIMIT=${LIMIT:-420}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b3.tar.xz -C $B
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
  timeout 60 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel --launch-count 4000 \
    $B/spec_bench --device cuda --family v4-dspark --formats published --vocab 129280 --layers 2 --batches 64 --prompt 32 --decode 12 --k 5 --temperature 0.8 \
    --repeat 1 --warmup 0 --async 1 --gemm fast --arms fixed --dir /tmp/sb_ncu > $R/ncu_dsp64.txt 2>&1
  echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
fi
sb() { local name=$1 cap=$2; shift 2; local L=$(left); [ $L -lt 30 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < cap ? L : cap )) $B/spec_bench --device cuda --formats published --gemm fast --vocab 129280 --prompt 32 --k 5 --repeat 1 --warmup 1 --async 1 "$@" --dir /tmp/sb_$name > $R/$name.jsonl 2> $R/$name.err
  echo "$name rc=$? t=$(( $(date +%s) - T0 ))" >> $S; }
sb dsp128 70 --family v4-dspark --layers 43 --decode 64 --temperature 0.8 --batches 128 --arms none,fixed,scheduler --trace $R/trace128.jsonl
sb dsp256 150 --family v4-dspark --layers 43 --decode 256 --temperature 0.8 --batches 256 --arms none,fixed,scheduler --trace $R/trace256.jsonl
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
