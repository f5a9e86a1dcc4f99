#!/usr/bin/env bash
# Session 31, call 1: HEAD (8a4efa7) tests; the one-tile hc_mix proposal (suffix _1t) tests and proxy decode vs
# HEAD; ncu of HEAD's 8K prefill (Hadamard index change, compressor 256-thread cap) and of b1 decode (HEAD, _1t);
# cuda_gemm_bench elementwise (hc_mix row); an ncu detail of one swiglu_quant launch.
set -u
T0=$(date +%s)
R=$OUT/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/c1.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 90 $B/cuda_ops_tests
t ops_1t 60 $B/cuda_ops_tests_1t --gtest_filter='*HcMix*'
t fast_model_1t 40 $B/cuda_fast_model_tests_1t
t model 60 $B/cuda_model_tests
t fast_model 40 $B/cuda_fast_model_tests
t mtp 60 $B/cuda_mtp_tests
t dspark 60 $B/cuda_dspark_tests
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in head 1t; do X=$B/cuda_forward_bench; [ $v = 1t ] && X=$B/cuda_forward_bench_1t
  timeout 40 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; timeout 30 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_head.jsonl 2>> $R/pf.err
echo "round $round t=$(( $(date +%s) - T0 ))" >> $S; done
cat $S
NCU="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 60 $NCU $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-pf8192.txt 2>&1
echo "ncu pf rc=$? t=$(( $(date +%s) - T0 ))" >> $S
for v in head 1t; do X=$B/cuda_forward_bench; [ $v = 1t ] && X=$B/cuda_forward_bench_1t
timeout 60 $NCU $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1 --decode-warmup 2 --decode 1 --profile 1 > $R/ncu-b1-$v.txt 2>&1
echo "ncu b1 $v rc=$? t=$(( $(date +%s) - T0 ))" >> $S; done
timeout 120 $B/cuda_gemm_bench --only elementwise --out $R/gemm-elementwise.jsonl > $R/gemm-elementwise.log 2>&1
echo "gemm elementwise rc=$? t=$(( $(date +%s) - T0 ))" >> $S
timeout 90 ncu --profile-from-start off --clock-control none --cache-control none --kernel-name regex:swiglu --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-swiglu-detail.txt 2>&1
echo "ncu swiglu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
cat $S; grep -hE "FAILED|Failure" $R/*.log | head
for v in head 1t; do echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
echo "pf8: $(grep -o '"tok_s":[0-9.]*' $R/pf8_head.jsonl | grep -v ':0$' | tr '\n' ' ')"
