#!/usr/bin/env bash
# Session 32, call 5: the FP8 GEMMs' weight scales loaded without stalling (dense_ws: one tile ahead; the
# classic kernel: after the early weight copies), uncommitted on 45b36cb: tests, proxy prev vs new, ncu prefill.
source .devcarry/me/call_lib.sh .devcarry/me/c5.tar.xz
t gemm 120 $B/cuda_gemm_tests
t fast_model 60 $B/cuda_fast_model_tests
t model 90 $B/cuda_model_tests
pack
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
  timeout 50 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,128,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
  timeout 30 $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
done; done; echo "proxy t=$(elapsed)" >> $S
pack
for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
timeout 100 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu_pf8_$v.txt 2>&1
done; echo "ncu t=$(elapsed)" >> $S
pack
cat $S; grep -hE "Failure" -A3 $R/*.log | head -20
for v in prev new; do echo "$v pf8: $(grep -o '"tok_s":[0-9.]*' $R/pf8_$v.jsonl | grep -v ':0$' | tr '\n' ' ')"; echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
