#!/usr/bin/env bash
# Session 44 call 12: the per-kernel b1 table (ncu) of 4 V4.1 layers at 7791893 (FP8 twins on), for planning.
source tools/device/call_lib.sh "$1"
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
D=/dev/shm
timeout 100 $B/cuda_engine_bench $A --dir $D/ck --keep 1 --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 > $R/mk.jsonl 2> $R/mk.err
echo "ckpt rc=$? t=$(elapsed)" >> $S
timeout 80 ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum \
  --print-summary per-kernel $B/cuda_engine_bench $A --model $D/ck --prefill-requests 0 --batches 1 --decode 2 \
  --profile decode > $R/ncu_b1.txt 2>&1
echo "ncu b1 rc=$? t=$(elapsed)" >> $S
pack
cat $S
