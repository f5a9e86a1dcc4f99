#!/usr/bin/env bash
# Session 32, call 2: the norm kernel writes the fast GEMMs' FP8 / bf16 inputs (rms_norm_forms) and the shared
# expert's SwiGLU quantizes in place (uncommitted tree on 40d66ab): GPU tests, proxy prev (40d66ab) vs new, ncu b1.
source .devcarry/me/call_lib.sh .devcarry/me/c2.tar.xz
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
timeout 120 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $B/cuda_forward_bench $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1 --decode-warmup 2 --decode 1 --profile 1 > $R/ncu_b1.txt 2>&1
echo "ncu t=$(elapsed)" >> $S
pack
t ops 120 $B/cuda_ops_tests
t mtp 60 $B/cuda_mtp_tests
t dspark 60 $B/cuda_dspark_tests
pack
cat $S; grep -hE "Failure" -A3 $R/*.log | head -20
for v in prev new; do echo "$v pf8: $(grep -o '"tok_s":[0-9.]*' $R/pf8_$v.jsonl | grep -v ':0$' | tr '\n' ' ')"; echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
