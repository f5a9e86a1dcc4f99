#!/usr/bin/env bash
# Session 27, call 4: hc_mix_partial with the weights in registers, wo_a per group on the dense kernel at prefill.
# Tests, then old (b12 = bc13ca0) vs new forward bench on the 2-layer proxy, alternating, then ncu of the new prefill.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/b12.tar.xz -C $O
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b13.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
timeout 60 $B/cuda_ops_tests > $R/ops.log 2>&1; echo "ops rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/ops.log | tr '\n' ' ')" >> $S
timeout 60 $B/cuda_gemm_tests --gtest_filter='*GroupedWoA*:*DenseWs*:*BatchInvariantAcross*:*SplitK*' > $R/gemm.log 2>&1; echo "gemm rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/gemm.log | tr '\n' ' ')" >> $S
timeout 60 $B/cuda_fast_model_tests > $R/fast_model.log 2>&1; echo "fast_model rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/fast_model.log | tr '\n' ' ')" >> $S
timeout 90 $B/cuda_model_tests > $R/model.log 2>&1; echo "model rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/model.log | tr '\n' ' ')" >> $S
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do
  for v in old new; do
    X=$O; [ $v = new ] && X=$B
    timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/ab_$v.jsonl 2>> $R/ab.err
    timeout 40 $X/cuda_forward_bench $FB --model /tmp/pb --prefill 2048 --batches 1,32,128 --context 4096 --decode 8 --decode-warmup 2 >> $R/ab_$v.jsonl 2>> $R/ab.err
  done
done
echo "ab t=$(( $(date +%s) - T0 ))" >> $S
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --profile 1 --prefill 8192 --batches 1 --context 16 --decode 0 > $R/ncu8192.txt 2> $R/ncu8192.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
python3 bench/ncu_summary.py $R/ncu8192.txt > $R/ncu8192.sum.txt 2>&1
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; head -16 $R/ncu8192.sum.txt; grep -h prefill $R/ab_*.jsonl | cut -c1-200; grep -E "FAILED|Failure" $R/*.log | head -20
