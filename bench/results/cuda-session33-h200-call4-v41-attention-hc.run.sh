#!/usr/bin/env bash
# Session 33, call 4: V4.1 on the GPU, the two largest items of call 3's profile: the tensor-core attention
# stages its keys 16 values per read (cache_values16) instead of one, and the fast mode's mHC sites take
# the split-K tensor-core mixing logits + hc_pre (hc_site) instead of one block per row. Tests (V4.1 ops,
# V4.1 model, DSpark, V4 ops: hc_pre gained two options), then 4 full-width V4.1 layers, A = main f94ccf2,
# B = the change, same checkpoint; then ncu tables of B's prefill step and b1 decode step.
source tools/device/call_lib.sh .devcarry/me/c4.tar.xz
t v41_ops 120 $B/cuda_v41_ops_tests
t v41_model 150 $B/cuda_v41_model_tests
pack
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> $S 2>&1 || D=/dev/shm
F="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256 --decode 8"
timeout 90 $B/cuda_engine_bench_main $F --dir $D/v4 --keep 1 > $R/A.jsonl 2> $R/A.err; echo "A rc=$? t=$(elapsed)" >> $S
timeout 70 $B/cuda_engine_bench $F --model $D/v4 > $R/B.jsonl 2> $R/B.err; echo "B rc=$? t=$(elapsed)" >> $S
pack
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
G="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
timeout 60 $N $B/cuda_engine_bench $G --model $D/v4 --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 2 --profile prefill > $R/ncu_pf.txt 2>&1; echo "ncu pf rc=$? t=$(elapsed)" >> $S
timeout 45 $N $B/cuda_engine_bench $G --model $D/v4 --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1; echo "ncu b1 rc=$? t=$(elapsed)" >> $S
pack
t dspark 100 $B/cuda_dspark_tests
t ops 90 $B/cuda_ops_tests
pack
cat $S
