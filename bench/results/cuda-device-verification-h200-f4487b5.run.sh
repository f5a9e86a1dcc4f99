#!/usr/bin/env bash
# Lead call 2 (session 25): device verification after the V4 pick fix. Tests, spec_bench A/B at V4's vocabulary, V4.1 tests with what is left.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-400}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b1.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1; shift; local L=$(left); [ $L -lt 20 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < ${CAP:-150} ? L : ${CAP:-150} )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $R/$name.log | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $S; }
t cuda_mtp_tests $B/cuda_mtp_tests
t cuda_dspark_tests $B/cuda_dspark_tests
sb() { local name=$1; shift; local L=$(left); [ $L -lt 25 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < 80 ? L : 80 )) $B/spec_bench --device cuda --vocab 129280 --prompt 32 --decode 64 --k 5 --repeat 1 --warmup 1 --async 1 "$@" --dir /tmp/sb_$name > $R/$name.jsonl 2> $R/$name.err
  echo "$name rc=$? t=$(( $(date +%s) - T0 ))" >> $S; }
sb dspark_t08 --family v4-dspark --temperature 0.8 --batches 1,16,64 --arms none,fixed,fixed-host
sb dspark_t0 --family v4-dspark --temperature 0 --batches 1,16,64 --arms none,fixed,fixed-host
sb mtp_t08 --family v4 --temperature 0.8 --batches 1,16 --arms none,fixed,fixed-host
t cuda_model_tests $B/cuda_model_tests
CAP=400 t cuda_v41_model_tests $B/cuda_v41_model_tests
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
