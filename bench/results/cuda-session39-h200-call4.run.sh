#!/usr/bin/env bash
# Session 39, call 4: V4.1 end to end on 12 layers at what lands (call 2's build = 4934e82's code) with ceilings, and
# a longer b1 A/B of the split-K tile counters (new) against it.
source tools/device/call_lib.sh "$1"
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=110G tmpfs $D >> "$S" 2>&1 || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
EB="--gpus 1 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 200 $B/cuda_engine_bench_call2 --family v41 --layers v41:12 $EB --batch-tokens 8192 --dir $D/v41 --keep 1 > $R/engine_v41_bt8192.jsonl 2> $R/engine_v41_bt8192.err
echo "engine v41 12 layers (call2 build) rc=$? t=$(elapsed)" >> $S
pack
rm -rf $D/v41
umount $D 2>/dev/null
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-requests 0 --batches 1,4,8 --decode 32 -- call2 new call2 new call2 new
pack
cat $S
