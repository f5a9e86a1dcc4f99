#!/usr/bin/env bash
# Session 34, call 4: V4.1's tensor-core sink attention, second form: each row's keys located once (row
# table in shared memory) and two items' code loads in flight per staging thread (call 3), plus pass 2 reads
# a head's scores once into registers (was three L2 round trips per 32 scores, serialized); the indexer's
# cache_values16 as before (call 3 built it from the two-step helpers: 38% slower). prev = main 3460c89.
# 4 full-width V4.1 layers A/B, ncu, the V4.1 test binaries; then 12 layers end to end with the change.
source tools/device/call_lib.sh .devcarry/me/c4.tar.xz
t v41_ops 60 $B/cuda_v41_ops_tests
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=200G tmpfs $D >> $S 2>&1 || D=/dev/shm
F="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8"
timeout 70 $B/cuda_engine_bench_prev $F --dir $D/v4 --keep 1 > $R/prev1.jsonl 2> $R/prev1.err; echo "prev1 rc=$? t=$(elapsed)" >> $S
timeout 40 $B/cuda_engine_bench_new $F --model $D/v4 > $R/new1.jsonl 2> $R/new1.err; echo "new1 rc=$? t=$(elapsed)" >> $S
timeout 40 $B/cuda_engine_bench_prev $F --model $D/v4 > $R/prev2.jsonl 2> $R/prev2.err; echo "prev2 rc=$? t=$(elapsed)" >> $S
timeout 40 $B/cuda_engine_bench_new $F --model $D/v4 > $R/new2.jsonl 2> $R/new2.err; echo "new2 rc=$? t=$(elapsed)" >> $S
pack
P="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --model $D/v4"
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 40 $N $B/cuda_engine_bench_new $P --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf.txt 2>&1; echo "ncu pf rc=$? t=$(elapsed)" >> $S
timeout 30 $N $B/cuda_engine_bench_new $P --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1; echo "ncu b1 rc=$? t=$(elapsed)" >> $S
pack
t v41_model 170 $B/cuda_v41_model_tests
t dspark 60 $B/cuda_dspark_tests
pack
rm -rf $D/v4
EB="--gpus 1 --batch-tokens 4096 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
left=$((470 - $(elapsed)))
[ $left -gt 100 ] && { timeout $left $B/cuda_engine_bench_new --family v41 --layers v41:12 $EB --dir $D/v41 > $R/engine_v41.jsonl 2> $R/engine_v41.err; echo "engine v41 rc=$? t=$(elapsed)" >> $S; }
pack
cat $S
