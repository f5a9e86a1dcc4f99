#!/usr/bin/env bash
# Session 33, call 3: where DeepSeek-V4.1-Flash's GPU time goes. 4 full-width layers (--layers v41:4:
# window-only, window-only + Engram, ratio 2 (KV/index source), ratio 1 (KV/index/candidate source)),
# even routing: a short engine run (the checkpoint kept), then ncu per-kernel tables of one prefill step
# (4096 tokens) and of one decode step at batch 1 and at batch 128 (4K contexts).
source tools/device/call_lib.sh .devcarry/me/c3.tar.xz
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> $S 2>&1 || D=/dev/shm
E=$B/cuda_engine_bench
F="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
timeout 120 $E $F --dir $D/v4 --keep 1 --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128 --decode 8 > $R/v41_4.jsonl 2> $R/v41_4.err; echo "engine v41:4 rc=$? t=$(elapsed)" >> $S
pack
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 150 $N $E $F --model $D/v4 --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 2 --profile prefill > $R/ncu_pf.txt 2>&1; echo "ncu prefill rc=$? t=$(elapsed)" >> $S
pack
timeout 100 $N $E $F --model $D/v4 --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1; echo "ncu b1 rc=$? t=$(elapsed)" >> $S
pack
timeout 120 $N $E $F --model $D/v4 --prefill-requests 0 --batches 128 --decode 2 --profile decode > $R/ncu_b128.txt 2>&1; echo "ncu b128 rc=$? t=$(elapsed)" >> $S
pack
cat $S; tail -2 $R/v41_4.err
