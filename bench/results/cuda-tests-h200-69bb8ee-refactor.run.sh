#!/usr/bin/env bash
# Session 26, call 8 (69bb8ee): the refactored sampler and engine tests (noisy_draft, expect_same_run_verified_on_device).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b8.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1; shift; timeout 90 "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $R/$name.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $S; }
t ops_sampler $B/cuda_ops_tests --gtest_filter='*Sampler*'
t mtp_engine $B/cuda_mtp_tests --gtest_filter='*Engine*'
t dspark_engine $B/cuda_dspark_tests --gtest_filter='*Engine*'
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
