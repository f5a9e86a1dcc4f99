#!/usr/bin/env bash
# Session 27, call 7 (main 3a41752: v41replay and v41span merged): the V4.1 bounded-replay and image-span GPU tests
# that the helpers' calls did not reach, the loader test, the V4.1 op tests, DSpark with replay, the replay bench.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b16.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t v41_replay_spans 110 $B/cuda_v41_model_tests --gtest_filter='*Replay*:*ImageSpan*:*CudaV41Load*'
t v41_ops 30 $B/cuda_v41_ops_tests
t dspark_replay 60 $B/cuda_dspark_tests --gtest_filter='*BoundedReplay*'
timeout 60 $B/cuda_v41_replay_bench --lengths 1024,4096 --reps 2 --gemm fast > $R/bench.jsonl 2> $R/bench.err
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; cat $R/bench.jsonl | cut -c1-300; grep -hE "FAILED|Failure|Segmentation" $R/*.log | head -20
