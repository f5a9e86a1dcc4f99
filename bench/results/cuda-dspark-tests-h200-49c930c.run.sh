#!/usr/bin/env bash
# Session 26, call 7: the DSpark confidence head's two loops (cuda_dspark_tests, bit-identical) and the draft kernels (ncu).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b7.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
timeout 90 $B/cuda_dspark_tests > $R/cuda_dspark_tests.log 2>&1
echo "cuda_dspark_tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $R/cuda_dspark_tests.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $S
timeout 50 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel --launch-count 4000 \
  $B/spec_bench --device cuda --family v4-dspark --formats published --vocab 129280 --layers 2 --batches 64 --prompt 32 --decode 12 --k 5 --temperature 0.8 \
  --repeat 1 --warmup 0 --async 1 --gemm fast --arms fixed --dir /tmp/sb_ncu > $R/ncu_dsp64.txt 2>&1
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
