#!/usr/bin/env bash
# Session 39, call 3: split-K launches that add their own chunks (tile counters) on top of call 2's tree (the tiled V4.1
# indexer, CTA pairs for rows with picks; its indexer test's f32 layout fixed): the GEMM and indexer tests first, the
# 4-layer A/B against call 2's build, ncu b1 of both, V4.1 end to end on 12 layers with ceilings, then every GPU test.
source tools/device/call_lib.sh "$1"
t gemm 200 $B/cuda_all_tests --gtest_filter='CudaGemmFast.*:CudaV41IndexerPrefill.*'
grep -E '^\[  FAILED  \]' $R/gemm.log | sort -u | head -20 >> $S
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1,32 --decode 8 -- call2 new call2 new
digest_ab $A -- call2 new
n="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
for v in call2 new; do
  x=$B/cuda_engine_bench; [ $v = call2 ] && x=$B/cuda_engine_bench_call2
  timeout 50 $n $x $A --model "$D/ck" --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1_$v.txt 2>&1
  echo "ncu b1 $v rc=$? t=$(elapsed)" >> $S
done
rm -rf $D/ck
pack
umount /mnt/ck 2>/dev/null; D=/mnt/ck; mount -t tmpfs -o size=110G tmpfs $D >> $S 2>&1 || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
EB="--gpus 1 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 200 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --batch-tokens 8192 --dir $D/v41 --keep 1 > $R/engine_v41_bt8192.jsonl 2> $R/engine_v41_bt8192.err
echo "engine v41 12 layers rc=$? t=$(elapsed)" >> $S
rm -rf $D/v41
pack
t all $((590 - $(elapsed))) $B/cuda_all_tests
grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
pack
cat $S
