#!/usr/bin/env bash
# Session 33, call 5 (the session's last device time): three more V4.1 items of call 4's profile: the
# act_quant kernel one warp per block (was one block of `block` threads per block), engram_fuse's serial
# gate sums reading shared memory (staged by the whole block), topk_publish compacting 32 picks per warp
# step (was one thread). Tests: V4.1 ops, V4 ops' act_quant test, the V4.1 tiny models bit-identical to the
# CPU + the fast mode; then 4 full-width V4.1 layers, A = main 117da97, B = the change.
source tools/device/call_lib.sh .devcarry/me/c5.tar.xz
t v41_ops 60 $B/cuda_v41_ops_tests
t ops_aq 30 $B/cuda_ops_tests --gtest_filter='*ActQuant*'
t v41_model 70 $B/cuda_v41_model_tests --gtest_filter='*LogitsBitIdenticalToCpuAtEveryPosition*:CudaV41Fast.*'
pack
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> $S 2>&1 || D=/dev/shm
F="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128 --decode 8"
timeout 60 $B/cuda_engine_bench_main $F --dir $D/v4 --keep 1 > $R/A.jsonl 2> $R/A.err; echo "A rc=$? t=$(elapsed)" >> $S
timeout 40 $B/cuda_engine_bench $F --model $D/v4 > $R/B.jsonl 2> $R/B.err; echo "B rc=$? t=$(elapsed)" >> $S
pack
cat $S
