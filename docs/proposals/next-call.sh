#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The next GPU session's first call for the five proposals in this folder (written in session 34; not yet run).
# Here (the build machine), from the repository root:
#   git checkout -b sNN/proposals main && for p in v41-swiglu-fine v41-candidate-parallel v41-qat-rows-quad rms-norm-tree \
#     v41-norm-qat-form; do
#     git am docs/proposals/$p-untested.patch; done
#   ninja -C build-90 cuda_ops_tests cuda_gemm_tests cuda_v41_ops_tests cuda_v41_model_tests cuda_fast_model_tests \
#     cuda_model_tests cuda_engine_bench cuda_forward_bench
#   (and main's cuda_engine_bench / cuda_forward_bench copied as *_prev: git stash or a checkout of main, ninja, cp)
#   tools/device/make_bundle.sh .devcarry/me/next.tar.xz build-90/tests/{cuda_ops_tests,cuda_gemm_tests,cuda_v41_ops_tests} \
#     build-90/tests/{cuda_v41_model_tests,cuda_fast_model_tests,cuda_model_tests} build-90/bench/cuda_engine_bench \
#     PREV/cuda_engine_bench_prev        # ~9 binaries fit the carry limit; cuda_mtp/dspark tests in a second call
# Then `run` with carry [".devcarry/me"]: bash docs/proposals/next-call.sh .devcarry/me/next.tar.xz
source tools/device/call_lib.sh "$1"
t v41_ops 60 $B/cuda_v41_ops_tests     # CacheQatValuesAndCompactCodesEqualCpu, IndexerCandidateBlocksAndTopkEqualCpu
t ops 90 $B/cuda_ops_tests             # RmsNormTreeSumInItsOrderAndNearTheReference, RmsNormBitIdentical
t gemm 60 $B/cuda_gemm_tests --gtest_filter='*Swiglu*:*RmsNormForms*'
t fast_model 60 $B/cuda_fast_model_tests
t model 60 $B/cuda_model_tests
pack
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> $S 2>&1 || D=/dev/shm
F="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8"
timeout 70 $B/cuda_engine_bench_prev $F --dir $D/v4 --keep 1 > $R/prev1.jsonl 2> $R/prev1.err; echo "prev1 rc=$? t=$(elapsed)" >> $S
for v in new prev new; do
  x=$B/cuda_engine_bench; [ $v = prev ] && x=$B/cuda_engine_bench_prev
  n=1; [ -e $R/${v}1.jsonl ] && n=2
  timeout 45 $x $F --model $D/v4 > $R/$v$n.jsonl 2> $R/$v$n.err; echo "$v$n rc=$? t=$(elapsed)" >> $S
done
pack
P="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --model $D/v4"
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 50 $N $B/cuda_engine_bench $P --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf.txt 2>&1; echo "ncu pf rc=$? t=$(elapsed)" >> $S
timeout 40 $N $B/cuda_engine_bench $P --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1; echo "ncu b1 rc=$? t=$(elapsed)" >> $S
# What bounds V4.1's batch-1 attention launch (79-216 us in one CTA, session 34): stall reasons by source line.
timeout 60 ncu --profile-from-start off --section WarpStateStats --section SourceCounters -k regex:v41_tc_attention --launch-count 2 \
  $B/cuda_engine_bench $P --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_attn_b1.txt 2>&1; echo "ncu attn rc=$? t=$(elapsed)" >> $S
pack
t v41_model 170 $B/cuda_v41_model_tests
pack
cat $S
