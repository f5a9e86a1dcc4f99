#!/usr/bin/env bash
# Session 40, call 2: what lands (main + the shared indexer tile routines + the Engram tree sums; without the attention
# prefetch, which call 1 measured slower): the 4-layer A/B against main, digests, V4.1 end to end on 12 layers with
# ceilings, the prefill attention's warp states (ncu sections, two launches), then every GPU test.
source tools/device/call_lib.sh "$1"
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,256 --decode 8 -- prev new prev new
digest_ab $A -- new
timeout 120 ncu --profile-from-start off --clock-control none -k regex:v41_tc_attention_kernel --launch-count 2 \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section LaunchStats \
  $B/cuda_engine_bench $A --model "$D/ck" --prefill-prompt 8192 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_attn_sections.txt 2>&1
echo "ncu attn sections rc=$? t=$(elapsed)" >> $S
rm -rf $D/ck
pack
umount /mnt/ck 2>/dev/null; D=/mnt/ck; mount -t tmpfs -o size=110G tmpfs $D >> $S 2>&1 || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
EB="--gpus 1 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 200 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --batch-tokens 8192 --dir $D/v41 --keep 1 > $R/engine_v41_bt8192.jsonl 2> $R/engine_v41_bt8192.err
echo "engine v41 12 layers rc=$? t=$(elapsed)" >> $S
rm -rf $D/v41
pack
t all $((592 - $(elapsed))) $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
pack
cat $S
