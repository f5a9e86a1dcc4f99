#!/usr/bin/env bash
# Session 45 call 1: bf4eaf3's new CPU-reference assertions, the V4.1 fast tests, and ncu per-kernel tables of b1 and b32 decode (4 V4.1 layers), for planning.
source tools/device/call_lib.sh "$1"
t fp8b32 120 $B/cuda_all_tests --gtest_filter='CudaGemmFp8B32.*'
t v41fast 200 $B/cuda_all_tests --gtest_filter='CudaV41Fast.*'
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
D=/dev/shm
timeout 100 $B/cuda_engine_bench $A --dir $D/ck --keep 1 --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 > $R/mk.jsonl 2> $R/mk.err
echo "ckpt rc=$? t=$(elapsed)" >> $S
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum"
timeout 80 $N --print-summary per-kernel $B/cuda_engine_bench $A --model $D/ck --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1
echo "ncu b1 rc=$? t=$(elapsed)" >> $S
timeout 80 $N $B/cuda_engine_bench $A --model $D/ck --prefill-requests 0 --batches 1 --decode 1 --profile decode > $R/ncu_b1_launches.txt 2>&1
echo "ncu b1 launches rc=$? t=$(elapsed)" >> $S
timeout 80 $N --print-summary per-kernel $B/cuda_engine_bench $A --model $D/ck --prefill-requests 0 --batches 32 --decode 2 --profile decode > $R/ncu_b32.txt 2>&1
echo "ncu b32 rc=$? t=$(elapsed)" >> $S
timeout 60 $B/cuda_engine_bench $A --model $D/ck --prefill-prompt 8192 --prefill-requests 2 --batches 1,4,16,32 --decode 8 > $R/eng.jsonl 2> $R/eng.err
echo "eng rc=$? t=$(elapsed)" >> $S
pack
cat $S
