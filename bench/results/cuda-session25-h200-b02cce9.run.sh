#!/usr/bin/env bash
# Lead call 4 (session 25): every CUDA test binary on main b02cce9 (device verification incl. top-k rows, the
# drafters' device distributions, idxtopk's top-k), DSpark/MTP speculation at 43 layers and V4's vocabulary
# (fast GEMMs), the 2-layer proxy.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-390}; left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
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
for b in cuda_ops_tests cuda_mtp_tests cuda_model_tests cuda_gemm_tests cuda_fast_model_tests cuda_v41_ops_tests cuda_state_tests cuda_dspark_tests; do t $b $B/$b; done
sb() { local name=$1; shift; local L=$(left); [ $L -lt 25 ] && { echo "$name skipped" >> $S; return; }
  timeout $(( L < 75 ? L : 75 )) $B/spec_bench --device cuda --vocab 129280 --prompt 32 --decode 64 --k 5 --repeat 1 --warmup 1 --async 1 --gemm fast "$@" --dir /tmp/sb_$name > $R/$name.jsonl 2> $R/$name.err
  echo "$name rc=$? t=$(( $(date +%s) - T0 ))" >> $S; }
sb dspark43_t08 --family v4-dspark --layers 43 --temperature 0.8 --batches 1,16,64 --arms none,fixed,scheduler
sb mtp43_t08 --family v4 --layers 43 --temperature 0.8 --batches 1,16,64 --arms none,fixed,scheduler
L=$(left)
if [ $L -gt 50 ]; then
  timeout 60 $B/cuda_forward_bench --experts 256 --layers csa,hca --gemm fast --dir /tmp/pb --prefill 4096 \
    --batches 1,32,128,512 --context 4096 --decode 8 --decode-warmup 2 --max-len 8192 --routing even > $R/proxy.jsonl 2> $R/proxy.err
  echo "proxy rc=$? t=$(( $(date +%s) - T0 ))" >> $S
fi
CAP=300 t cuda_v41_model_tests $B/cuda_v41_model_tests
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S
