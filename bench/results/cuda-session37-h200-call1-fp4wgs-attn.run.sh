#!/usr/bin/env bash
# Session 37, call 1: the FP4 decode kernel with 2/4 warpgroups per block (sweep), V4.1 attention proposals
# (block-128 + few-rows batch-4 = new; + 64-head pass-1 batch-4 = new2) against main (prev), and every GPU test.
source tools/device/call_lib.sh "$1"
t sweep 120 $B/cuda_gemm_bench --no-ceilings --only v41_experts_w1,v41_experts_w2 --per-expert 8,16,32,48,64,96 \
  --variants dec64_kt2_72k_b3_pf256,dec64_kt2_54k_b4_pf256,ws128p2_s5_pers,dec64w2_kt2_200k_b1_pf256,dec64w2_kt2_100k_b2_pf256,dec64w4_kt2_200k_b1_pf256 --out $R/sweep.jsonl
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new new2 prev new new2
digest_ab $A -- prev new new2
pack
ncu_tables $A
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 60 $n "$B/cuda_engine_bench_new2" $A --model "$D/ck" --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 \
    --profile prefill > "$R/ncu_pf_new2.txt" 2>&1; echo "ncu pf new2 rc=$? t=$(elapsed)" >> "$S"
ncu_launches $A
pack
left=$(( 575 - $(elapsed) ))
t all $left $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -30 >> $S
grep -E '^\[  SKIPPED \]' $R/all.log | sort -u | head -30 > $R/skipped.txt
pack
cat $S
