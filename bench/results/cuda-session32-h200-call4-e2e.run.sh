#!/usr/bin/env bash
# Session 32, call 4: the mixing planes summed with all 32 loads in flight (hc_pre / hc_head, uncommitted on
# 17c28d8): ops/model tests, proxy prev (17c28d8) vs new; then the offline engine end to end, 24 full-width
# layers, even routing: A = this tree, B = A + the shared expert's w1/w3 as one GEMM (branch s32/shared-w13).
source .devcarry/me/call_lib.sh .devcarry/me/c4.tar.xz
t ops 120 $B/cuda_ops_tests
t fast_model 60 $B/cuda_fast_model_tests
t model 90 $B/cuda_model_tests
pack
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
  timeout 50 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; done; echo "proxy t=$(elapsed)" >> $S
rm -rf /tmp/pb; pack
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=200G tmpfs $D >> $S 2>&1 || D=/dev/shm
free -g | head -2 >> $S
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
EB="--layers flash:24 --gpus 1 --batch-tokens 4096 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 240 $B/cuda_engine_bench $EB --dir $D/big --keep 1 > $R/engine_A.jsonl 2> $R/engine_A.err; echo "engine A rc=$? t=$(elapsed)" >> $S
pack
timeout 200 $B/cuda_engine_bench_w13 $EB --model $D/big > $R/engine_B.jsonl 2> $R/engine_B.err; echo "engine B rc=$? t=$(elapsed)" >> $S
pack
cat $S; grep -hE "Failure" -A3 $R/*.log | head -20
for v in prev new; do echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
tail -3 $R/engine_A.err $R/engine_B.err
