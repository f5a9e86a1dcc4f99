#!/usr/bin/env bash
# Session 47: the seven proposals (docs/proposals, applied on main f412db5) on one H200.
#   call1: 4-layer engine A/B at decode batches, digests of every variant, then every GPU test
#   call2: prefill A/B of v41-bf16-keys, ncu tables, ceilings + 12-layer headline run
source tools/device/call_lib.sh "$1"
for v in 0 64; do
    printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" --attn-split-rows %s\n' $B $v > $B/cuda_engine_bench_s$v
    chmod +x $B/cuda_engine_bench_s$v
done
mk() { printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" %s\n' $B "$2" > $B/cuda_engine_bench_$1; chmod +x $B/cuda_engine_bench_$1; }
mk ns "--shared-stream 0"; mk bk0 "--bf16-keys 0"; mk as0 "--attn-stream 0"; mk hs0 "--hc-stream 0"
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
if [ "$2" = call1 ]; then
    engine_ab $A --prefill-prompt 8192 --prefill-requests 1 --batches 1,4,16,32 --decode 8 -- prev new s0 ns as0 hs0 s64 new prev
    pack
    digest_ab $A -- prev new s0 ns as0 hs0 bk0
    pack
    t all 360 $B/cuda_all_tests
    grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -30 >> $S
else
    engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1 --decode 2 -- bk0 new bk0 new prev
    pack
    ncu_pf_ab 8192 $A -- bk0 new
    pack
    for v in new s0 as0; do
        x=$B/cuda_engine_bench; [ $v = new ] || x=$B/cuda_engine_bench_$v
        timeout 60 $N $x $A --model $D/ck --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1_$v.txt 2>&1
        echo "ncu b1 $v rc=$? t=$(elapsed)" >> $S
    done
    pack
    rm -rf $D/ck
    timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
    EB="--gpus 1 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
    timeout 300 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --batch-tokens 8192 --dir $D/v41 --keep 1 \
        > $R/engine_v41_12.jsonl 2> $R/engine_v41_12.err
    echo "engine v41 12 layers rc=$? t=$(elapsed)" >> $S
fi
pack
cat $S
