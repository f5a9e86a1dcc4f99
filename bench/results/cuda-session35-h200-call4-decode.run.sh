#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 35, call 4: V4.1's compact-row decoders by way of f16 (e4m3: the hardware's e4m3x2 -> f16x2; e2m1: byte
# permutes) instead of ~20 instructions a value. prev = main 312c8eb; a = the attention's key staging (cache_decode16)
# only; new = also cache_values16 (the indexer's key staging). Tests (decoders bit for bit against the CPU, the
# attention and indexer ops), then the 4-layer V4.1 A/B (prev, a, new, prev, a, new) and ncu tables of new.
source tools/device/call_lib.sh "$1"
t v41_ops 60 $B/cuda_v41_ops_tests
pack
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> $S 2>&1 || D=/dev/shm
F="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8"
timeout 70 $B/cuda_engine_bench_prev $F --dir $D/v4 --keep 1 > $R/prev1.jsonl 2> $R/prev1.err; echo "prev1 rc=$? t=$(elapsed)" >> $S
for v in a new prev a new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev; [ $v = a ] && x=$B/cuda_engine_bench_a
  n=1; [ -e $R/${v}1.jsonl ] && n=2
  timeout 45 $x $F --model $D/v4 > $R/$v$n.jsonl 2> $R/$v$n.err; echo "$v$n rc=$? t=$(elapsed)" >> $S
done
pack
P="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --model $D/v4"
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 50 $N $B/cuda_engine_bench $P --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf.txt 2>&1; echo "ncu pf rc=$? t=$(elapsed)" >> $S
timeout 40 $N $B/cuda_engine_bench $P --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1; echo "ncu b1 rc=$? t=$(elapsed)" >> $S
pack
cat $S
