#!/usr/bin/env bash
# Session 27, call 8 (3a41752): where CudaV41Replay.PromptsOfAtMostTheWindowEqualTheExactPath segfaults (gdb
# backtrace when gdb exists), and the replay / image-span tests each in its own process.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b16.tar.xz -C $B && tar -xJf .devcarry/me/dbg.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
echo "gdb: $(which gdb) python3: $(which python3)" >> $S
F='Models/CudaV41Replay.PromptsOfAtMostTheWindowEqualTheExactPath/v41_tiny_a_exact'
if which gdb > /dev/null; then
  timeout 60 gdb -batch -ex run -ex bt -ex 'info threads' --args $B/cuda_v41_model_tests_sym --gtest_filter=$F > $R/gdb.log 2>&1
  echo "gdb rc=$? t=$(( $(date +%s) - T0 ))" >> $S
else
  timeout 30 $B/cuda_v41_model_tests_sym --gtest_filter=$F > $R/alone.log 2>&1; echo "alone rc=$?" >> $S
  timeout 60 compute-sanitizer --tool memcheck --show-backtrace host $B/cuda_v41_model_tests_sym --gtest_filter=$F > $R/sanitizer.log 2>&1
  echo "sanitizer rc=$? t=$(( $(date +%s) - T0 ))" >> $S
fi
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t long 40 $B/cuda_v41_model_tests --gtest_filter='*LongPromptsDiffer*'
t mixed 40 $B/cuda_v41_model_tests --gtest_filter='*MixedBatch*'
t spans 60 $B/cuda_v41_model_tests --gtest_filter='*ImageSpan*'
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; tail -40 $R/gdb.log 2>/dev/null; tail -30 $R/sanitizer.log 2>/dev/null; grep -hE "FAILED|Failure" $R/long.log $R/mixed.log $R/spans.log | head
