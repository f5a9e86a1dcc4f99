#!/usr/bin/env bash
# Session 28, call 7: two 4-blocks-per-SM decode-kernel configurations (128 registers) against the default
# (dec64_kt2_72k_b3_pf256) in cuda_gemm_bench's expert sweep; cuda_gemm_tests (every configuration's bits).
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b25.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
timeout 150 $B/cuda_gemm_tests > $R/gemm.log 2>&1; echo "gemm rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/gemm.log | tr '\n' ' ')" >> $S
V=dec64_kt2_72k_b3_pf256,dec64_kt2_54k_b4_pf256,dec64_kt1_56k_b4_pf256
timeout 200 $B/cuda_gemm_bench --out $R/sweep.jsonl --only experts_w1,experts_w2,none --ms 1,32,128 --per-expert 1,2,3,8,16 --variants $V > $R/sweep.txt 2> $R/sweep.err
echo "sweep rc=$? t=$(( $(date +%s) - T0 ))" >> $S
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; grep -hE "FAILED|Failure" $R/*.log | head; grep -E "experts|ceiling|copy|fp8" $R/sweep.txt | head -80
