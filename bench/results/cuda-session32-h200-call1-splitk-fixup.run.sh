#!/usr/bin/env bash
# Session 32, call 1: the split-K in-kernel fix-up proposal (branch s31/splitk-fixup, 94614ff): GPU tests, proxy
# decode/prefill prev (main 40d66ab) vs new, ncu of one b1 and one b32 decode step (new).
source .devcarry/me/call_lib.sh .devcarry/me/c1.tar.xz
t gemm 120 $B/cuda_gemm_tests
t fast_model 60 $B/cuda_fast_model_tests
t model 90 $B/cuda_model_tests
t mtp 60 $B/cuda_mtp_tests
pack
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
  timeout 40 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; done
for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
  timeout 30 $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
done; echo "proxy t=$(elapsed)" >> $S
pack
for bt in 1 32; do
timeout 120 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches $bt --decode-warmup 2 --decode 1 --profile 1 > $R/ncu_b$bt.txt 2>&1
done; echo "ncu t=$(elapsed)" >> $S
pack
t dspark 60 $B/cuda_dspark_tests
pack
cat $S; grep -hE "Failure" -A3 $R/*.log | head -20
for v in prev new; do echo "$v pf8: $(grep -o '"tok_s":[0-9.]*' $R/pf8_$v.jsonl | grep -v ':0$' | tr '\n' ' ')"; echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
