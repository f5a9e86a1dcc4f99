#!/usr/bin/env bash
# Session 30, call 5 (short: the last device minutes): the compressor's softmax with 8 slots' loads and
# exponentials in flight and a thread per channel. Model tests (reference mode: the CPU's bits), then prev
# (3f25a49) vs new: prefill 8K, decode b1 and b512; ncu of the new 8K prefill. Results copied to $OUT as they come.
set -u
T0=$(date +%s)
R=$OUT/r; mkdir -p $R
B=/tmp/mb; mkdir -p $B && tar -xJf .devcarry/me/c5.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t model 60 $B/cuda_model_tests
t fast_model 30 $B/cuda_fast_model_tests
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench_prev $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in prev new; do X=$B/cuda_forward_bench_prev; [ $v = new ] && X=$B/cuda_forward_bench
  timeout 30 $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
  timeout 30 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; echo "round $round t=$(( $(date +%s) - T0 ))" >> $S; done
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-pf8192.txt 2>&1
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S
cat $S; grep -hE "FAILED|Failure" $R/*.log | head
grep -E "compressor" $R/ncu-pf8192.txt | grep -v PROF | head -4
for v in prev new; do echo "$v pf8: $(grep -o '"tok_s":[0-9.]*' $R/pf8_$v.jsonl | grep -v ':0$' | tr '\n' ' ')"; echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
