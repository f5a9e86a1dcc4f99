#!/usr/bin/env bash
# Session 26, final call (HEAD after the nucverify merge): the nucleus fallback through the pinned staging buffer
# (spec_bench top-p 0.95, T = 0.8: every row given up, device vs host verification), then every CUDA test binary.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-520}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b5.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1; shift; local L=$(left); [ $L -lt 15 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < ${CAP:-120} ? L : ${CAP:-120} )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $R/$name.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $S; }
sb() { local name=$1 cap=$2; shift 2; local L=$(left); [ $L -lt 30 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < cap ? L : cap )) $B/spec_bench --device cuda --family v4 --vocab 129280 --prompt 32 --decode 64 --k 5 --repeat 1 --warmup 1 --async 1 --gemm fast --top-p 0.95 --batches 1,16 --arms fixed,fixed-host "$@" --dir /tmp/sb_$name > $R/$name.jsonl 2> $R/$name.err
  echo "$name rc=$? t=$(( $(date +%s) - T0 ))" >> $S; }
sb nuc_t08 60 --temperature 0.8
for b in cuda_ops_tests cuda_mtp_tests cuda_model_tests cuda_gemm_tests cuda_fast_model_tests cuda_v41_ops_tests cuda_state_tests cuda_dspark_tests; do t $b $B/$b; done
CAP=300 t cuda_v41_model_tests $B/cuda_v41_model_tests
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
