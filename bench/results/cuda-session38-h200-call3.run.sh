#!/usr/bin/env bash
# Session 38, call 3: main d14278c (the fixed decode harness, the pass-1 attention, the parallel sampler sort): every
# GPU test, then V4.1 end to end on 12 full-width layers at 8192 prompt tokens per step with ceilings in the same call.
source tools/device/call_lib.sh "$1"
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=110G tmpfs $D >> "$S" 2>&1 || D=/dev/shm
EB="--gpus 1 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 260 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --batch-tokens 8192 --dir $D/v41 --keep 1 > $R/engine_v41_bt8192.jsonl 2> $R/engine_v41_bt8192.err
echo "engine v41 12 layers rc=$? t=$(elapsed)" >> $S
pack
rm -rf $D/v41
t all $((595 - $(elapsed))) $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
pack
cat $S
