#!/usr/bin/env bash
# Lead call 5 (session 25): top-p / min-p without top-k on the device (nucleus rows), with the host fallback;
# the tests that cover the sampler and the engine, then top-p sampling at V4's vocabulary, device vs host.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-290}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
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
t cuda_ops_tests $B/cuda_ops_tests
t cuda_model_tests $B/cuda_model_tests
t cuda_mtp_tests $B/cuda_mtp_tests
sb() { local name=$1; shift; local L=$(left); [ $L -lt 25 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < 45 ? L : 45 )) $B/spec_bench --device cuda --vocab 129280 --prompt 32 --decode 64 --repeat 1 --warmup 1 --async 1 --gemm fast --family v4 --temperature 0.8 --batches 1,16,64 --arms none "$@" --dir /tmp/sb_$name > $R/$name.jsonl 2> $R/$name.err
  echo "$name rc=$? t=$(( $(date +%s) - T0 ))" >> $S; }
sb topp1 --top-p 1
sb topp095_dev --top-p 0.95
sb topp095_host --top-p 0.95 --host-sampling 1
CAP=150 t cuda_v41_model_tests $B/cuda_v41_model_tests --gtest_filter='*Runtime*:*Sampl*'
t cuda_dspark_tests $B/cuda_dspark_tests
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
