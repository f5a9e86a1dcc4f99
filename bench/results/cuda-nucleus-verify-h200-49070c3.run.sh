#!/usr/bin/env bash
# nucverify call 1: device verification of top-p / min-p verify rows (nucleus kernel). Sampler tests, the MTP / DSpark
# engine tests, then spec_bench at V4's vocabulary: device vs host verification for top-p 0.95 rows.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-142}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/nucverify/b1.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work/wt && ln -sfn $PWD /work/wt/nucverify
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
echo "unpacked t=$(( $(date +%s) - T0 ))" >> $S
t() { local name=$1 cap=$2; shift 2; local L=$(left); [ $L -lt 8 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < cap ? L : cap )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $R/$name.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $S; }
t cuda_ops_sampler 25 $B/cuda_ops_tests --gtest_filter='CudaOps.*Sampl*:CudaOps.Topk*'
t cuda_mtp_tests 20 $B/cuda_mtp_tests
t cuda_dspark_engine 50 $B/cuda_dspark_tests --gtest_filter='*Engine*'
sb() { local name=$1 cap=$2; shift 2; local L=$(left); [ $L -lt 12 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < cap ? L : cap )) $B/spec_bench --device cuda --family v4 --vocab 129280 --prompt 32 --decode 64 --k 5 --repeat 1 --warmup 1 --async 1 --gemm fast --top-p 0.95 --batches 1,16 --arms fixed,fixed-host "$@" --dir /tmp/sb_$name > $R/$name.jsonl 2> $R/$name.err
  echo "$name rc=$? t=$(( $(date +%s) - T0 ))" >> $S; }
sb t08 35 --temperature 0.8
sb t015 30 --temperature 0.15
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
