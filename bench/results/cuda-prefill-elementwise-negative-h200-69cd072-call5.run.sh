#!/usr/bin/env bash
# Session 27, call 5: the pipelined split-K mHC mixing kernel; narrow-format rounding and FP8/FP4 simulations
# without divisions (multiplications by exact powers of two, same bits). Tests, then 69cd072 (old) vs new
# forward bench alternating, then ncu of the new 8192-token prefill.
set -u
T0=$(date +%s)
R=/tmp/r; mkdir -p $R
O=/tmp/old; mkdir -p $O && tar -xJf .devcarry/me/old14.tar.xz -C $O
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/b14.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 60 $B/cuda_ops_tests
t gemm 60 $B/cuda_gemm_tests --gtest_filter='*ActQuant*:*GroupedWoA*:*MatchesCpu*:*GroupedExpertsMatchCpu*'
t v41ops 60 $B/cuda_v41_ops_tests
t fast_model 60 $B/cuda_fast_model_tests
t model 90 $B/cuda_model_tests
t v41model 100 $B/cuda_v41_model_tests --gtest_filter='*Tiny*:*FlashWidth*:*Fast*'
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
tar -czf $OUT/r.tar.gz -C /tmp r; cp $S $OUT/summary.txt; cat $S; head -24 $R/ncu8192.sum.txt; grep -E "FAILED|Failure" $R/*.log | head -20
