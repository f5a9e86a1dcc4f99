#!/usr/bin/env bash
# Session 34, call 2: end to end on the offline engine, one H200, even routing, after the four proposals landed.
# Ceilings; V4.1's FP4 experts (384 x 5120 x 2304) at 16-128 rows per expert: the decode kernel (the default up
# to 64 rows) vs the warp-specialized prefill kernel (above 64); V4-Flash 24 layers A = main 42fabec, B = 3460c89
# (the sampler's sliced top-k is V4's change); DeepSeek-V4.1-Flash 12 layers B, then A on the same checkpoint.
source tools/device/call_lib.sh .devcarry/me/c2.tar.xz
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=200G tmpfs $D >> $S 2>&1 || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
timeout 90 $B/cuda_gemm_bench --no-ceilings --only v41_experts_w1,v41_experts_w2 --per-expert 16,32,48,64,80,96,128 \
  --variants dec64_kt2_72k_b3_pf256,ws128p2_s5_pers,ws128p2_s4_pers,dec64_kt2_72k_b3 --out $R/v41_experts.jsonl > $R/v41_experts.txt 2>&1; echo "experts rc=$? t=$(elapsed)" >> $S
pack
EB="--gpus 1 --batch-tokens 4096 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 160 $B/cuda_engine_bench_main --layers flash:24 $EB --dir $D/big --keep 1 > $R/engine_A.jsonl 2> $R/engine_A.err; echo "engine A rc=$? t=$(elapsed)" >> $S
timeout 90 $B/cuda_engine_bench --layers flash:24 $EB --model $D/big > $R/engine_B.jsonl 2> $R/engine_B.err; echo "engine B rc=$? t=$(elapsed)" >> $S
pack
rm -rf $D/big
timeout 170 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --dir $D/v41 --keep 1 > $R/engine_v41_B.jsonl 2> $R/engine_v41_B.err; echo "engine v41 B rc=$? t=$(elapsed)" >> $S
pack
timeout 100 $B/cuda_engine_bench_main --family v41 --layers v41:12 $EB --model $D/v41 > $R/engine_v41_A.jsonl 2> $R/engine_v41_A.err; echo "engine v41 A rc=$? t=$(elapsed)" >> $S
pack
cat $S; tail -2 $R/*.err
