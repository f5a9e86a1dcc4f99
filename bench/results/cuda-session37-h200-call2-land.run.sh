#!/usr/bin/env bash
# Session 37, call 2: main + the few-rows attention's 4 loads in flight + act_quant's float4 form (new) against
# main 882063a (prev): every GPU test, the digests, the 4-layer V4.1 A/B, ncu DRAM-byte op tables of a
# 4096-token prefill step (prev, new) with the copy ceiling of this call, and ncu full sets of the FP4 expert
# kernels at 64 rows per expert (dec64) and 128 (ws128p2) for the next session.
source tools/device/call_lib.sh "$1"
t ceil 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8 -- prev new prev new
digest_ab $A -- prev new
pack
m="ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --print-summary per-kernel"
for v in prev new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  timeout 90 $m $x $A --model "$D/ck" --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_bytes_pf_$v.txt 2>&1
  echo "ncu bytes $v rc=$? t=$(elapsed)" >> $S
done
pack
for k in "dec64_kt2_72k_b3_pf256 64" "ws128p2_s5_pers 128"; do
  set -- $k
  timeout 90 ncu --set full -k regex:fp4_ --launch-count 1 $B/cuda_gemm_bench --no-ceilings --only v41_experts_w1 --per-expert $2 \
    --variants $1 > $R/ncu_full_$1.txt 2>&1
  echo "ncu full $1 rc=$? t=$(elapsed)" >> $S
done
pack
left=$(( 570 - $(elapsed) ))
t all $left $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -30 >> $S
pack
cat $S
