#!/usr/bin/env bash
# Session 31, call 3: the Hadamard/FP4 simulation in registers (dims 32-256). Tests, proxy prev (1cd718e) vs new,
# ncu of the new 8K prefill; ncu detail (full set) of one FP8 dense_ws launch (wq_b) and one fp4_ws launch.
set -u
T0=$(date +%s)
R=/tmp/r; rm -rf $R; mkdir -p $R
pack() { tar -czf $OUT/r.tgz -C /tmp r; }
B=/tmp/mb3; mkdir -p $B && tar -xJf .devcarry/me/c3.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > $S
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 120 $B/cuda_ops_tests
t model 60 $B/cuda_model_tests
t fast_model 40 $B/cuda_fast_model_tests
pack
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
  timeout 30 $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
  timeout 40 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; echo "round $round t=$(( $(date +%s) - T0 ))" >> $S; done
pack
NCU="ncu --profile-from-start off --clock-control none --cache-control none"
timeout 60 $NCU --metrics gpu__time_duration.sum --print-summary per-kernel $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-pf8192.txt 2>&1
echo "ncu pf rc=$? t=$(( $(date +%s) - T0 ))" >> $S
pack
timeout 120 $NCU --set full --kernel-name-base function --kernel-name regex:dense_ws --launch-skip 1 --launch-count 1 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-dense-wqb-full.txt 2>&1
echo "ncu dense rc=$? t=$(( $(date +%s) - T0 ))" >> $S
pack
timeout 150 $NCU --set full --kernel-name-base function --kernel-name regex:fp4_ws --launch-count 1 $B/cuda_forward_bench $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-fp4ws-full.txt 2>&1
echo "ncu fp4ws rc=$? t=$(( $(date +%s) - T0 ))" >> $S
pack
cat $S; grep -hE "FAILED|Failure" $R/*.log | head
for v in prev new; do echo "$v pf8: $(grep -o '"tok_s":[0-9.]*' $R/pf8_$v.jsonl | grep -v ':0$' | tr '\n' ' ')"; echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
