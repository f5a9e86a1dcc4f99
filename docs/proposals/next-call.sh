#!/usr/bin/env bash
# The next GPU calls for session 45's three proposals and session 46's four, applied together on a branch from main
# (`git am docs/proposals/v41-attn-split-untested.patch docs/proposals/wo-a-grouped-split-untested.patch
# docs/proposals/v41-shared-expert-stream-untested.patch docs/proposals/v41-bf16-keys-untested.patch
# docs/proposals/v41-attention-side-stream-untested.patch docs/proposals/v41-hc-side-stream-untested.patch
# docs/proposals/v41-replay-ep-untested.patch`):
# build main's cuda_engine_bench (copied as cuda_engine_bench_prev) and the patched tree's cuda_engine_bench and
# cuda_all_tests in build-90 (sm_90a), bundle them with tools/device/make_bundle.sh, then run
#   bash docs/proposals/next-call.sh BUNDLE tests    # ~5 min: the proposals' tests, then every GPU test
#   bash docs/proposals/next-call.sh BUNDLE ab       # ~5 min: the 4-layer engine A/B at decode batches
#   bash docs/proposals/next-call.sh BUNDLE abd      # ~6 min: their digests, ncu b1 tables (needs ab's checkpoint)
#   bash docs/proposals/next-call.sh BUNDLE ab2      # ~5 min: v41-bf16-keys at prefill (bk0 = --bf16-keys 0), ncu
#   bash docs/proposals/next-call.sh BUNDLE headline # ~5 min, after landing (a bundle of main's build with
#       cuda_gemm_bench): ceilings and 12 full-width V4.1 layers through the engine for the README's headline; then
#       here `python3 bench/report_engine.py engine_v41_12.jsonl ceilings.jsonl --out-md ... --out-png ...`
# (each call on the same warm machine: ab writes the tmpfs checkpoint that abd and ab2 read; a fresh machine
# rebuilds it in the first engine_ab run.)
# Land a patch only if every test passes, the digests equal main's, and the A/B says it pays:
#  - v41-attn-split: `new` vs `s0` (--attn-split-rows 0) at b1 / b4 / b16; then pick the default row limit
#    (CudaModelOptions::v41_attention_split_rows) from `s0` / `new` / `s64` at b16 and b32; ncu b1: the two split
#    kernels against the few-rows kernel's 78 / 23 us per launch (session 45 call 1).
#  - wo-a-grouped-split: ncu b1 of `s0`: the grouped wo_a launch (8x16x8 blocks + split_reduce) against main's
#    8x16x1 at ~30 us (call 1); `s0` runs main's attention but the new streams, so its end-to-end time against
#    `prev` mixes this patch and the next.
#  - v41-shared-expert-stream: `ns` (--shared-stream 0) vs `new` at b1-b32 and prefill.
#  - v41-attention-side-stream: `as0` (--attn-stream 0) vs `new` at b1-b32 (and prefill), digests equal.
#  - v41-hc-side-stream: `hs0` (--hc-stream 0) vs `new` at b1-b32, digests equal.
#  - v41-replay-ep: its tests only (the one-rank test on any GPU; the two-GPU one needs nvidia-h200-x2).
#  - v41-bf16-keys: `new` vs `bk0` prefill tok/s (two 8192-token prompts, so the second step's rows read the first's
#    entries and ring rows), digests of both equal to prev's, ncu of the prefill step: v41_tc_attention_kernel<512, 1,
#    true> + key_rows_bf16 + the extra to_bf16 against <512, 1, false> (21.6 ms per 4-layer step in session 44).
source tools/device/call_lib.sh "$1"
for v in 0 64; do
    printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" --attn-split-rows %s\n' $B $v > $B/cuda_engine_bench_s$v
    chmod +x $B/cuda_engine_bench_s$v
done
printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" --shared-stream 0\n' $B > $B/cuda_engine_bench_ns; chmod +x $B/cuda_engine_bench_ns
printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" --bf16-keys 0\n' $B > $B/cuda_engine_bench_bk0; chmod +x $B/cuda_engine_bench_bk0
printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" --attn-stream 0\n' $B > $B/cuda_engine_bench_as0; chmod +x $B/cuda_engine_bench_as0
printf '#!/bin/sh\nexec %s/cuda_engine_bench "$@" --hc-stream 0\n' $B > $B/cuda_engine_bench_hs0; chmod +x $B/cuda_engine_bench_hs0
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
if [ "$2" = tests ]; then
    t props 240 $B/cuda_all_tests --gtest_filter='CudaV41Ops.*:CudaGemmFast.GroupedWoA*:CudaV41Fast.*:*CudaV41Runtime*:CudaV41Bf16Keys.*:*CudaEpV41*:CudaV41ReplayRule.*:*CudaV41Replay*'
    grep -E '^\[  FAILED  \]' $R/props.log | sort -u | head -20 >> $S
    pack
    t all 330 $B/cuda_all_tests
    grep -E '^\[  FAILED  \]' $R/all.log | sort -u | head -20 >> $S
elif [ "$2" = ab2 ]; then
    engine_ab $A --prefill-prompt 8192 --prefill-requests 2 --batches 1 --decode 2 -- bk0 new bk0 new prev
    pack
    digest_ab $A -- bk0 new prev
    pack
    ncu_pf_ab 8192 $A -- bk0 new
elif [ "$2" = headline ]; then
    umount /mnt/ck 2>/dev/null; D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=110G tmpfs $D >> $S 2>&1 || D=/dev/shm
    timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
    EB="--gpus 1 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
    timeout 300 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --batch-tokens 8192 --dir $D/v41 --keep 1 \
        > $R/engine_v41_12.jsonl 2> $R/engine_v41_12.err
    echo "engine v41 12 layers rc=$? t=$(elapsed)" >> $S
    rm -rf $D/v41
elif [ "$2" = ab ]; then
    engine_ab $A --prefill-prompt 8192 --prefill-requests 1 --batches 1,4,16,32 --decode 8 -- prev new s0 ns as0 hs0 s64 new prev
else
    if [ -d /mnt/ck/ck ]; then D=/mnt/ck; elif [ -d /dev/shm/ck ]; then D=/dev/shm
    else engine_ab $A --prefill-prompt 1024 --prefill-requests 1 --batches 1 --decode 1 -- new; fi
    digest_ab $A -- prev new s0 ns as0 hs0
    pack
    for v in new s0 as0; do
        x=$B/cuda_engine_bench; [ $v = new ] || x=$B/cuda_engine_bench_$v
        timeout 80 $N $x $A --model $D/ck --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1_$v.txt 2>&1
        echo "ncu b1 $v rc=$? t=$(elapsed)" >> $S
    done
fi
pack
cat $S
