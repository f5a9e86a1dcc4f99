#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 35, call 1: session 34's five proposals (docs/proposals/*-untested.patch, applied in order on main ff91da5 as
# branch s35/proposals) on the H200: their tests, main's grouped-wo_a refactor's GPU tests (model, v41_model, dspark),
# the 4-layer V4.1 A/B (prev = main ff91da5, new = the five), ncu tables, V4.1 b1 attention source profile, V4 proxy A/B.
# The carry limit (64 MiB with the tree) takes 4 binaries a call: ops, model, v41_model, dspark tests in call 2.
# Bundle: build-90 (sm_90a) binaries of s35/proposals + main's cuda_engine_bench / cuda_forward_bench as *_prev.
source tools/device/call_lib.sh "$1"
# The bundle leaves out libcudart (the carry limit): the machine's CUDA 13 runtime (now in call_lib.sh).
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$(find / -name 'libcudart.so.13*' 2>/dev/null | head -1)")
ldd $B/cuda_engine_bench | grep -i 'not found' >> $S
t v41_ops 60 $B/cuda_v41_ops_tests
t gemm 60 $B/cuda_gemm_tests --gtest_filter='*Swiglu*:*RmsNormForms*:*GroupedWoA*:*SplitK*'
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
timeout 60 ncu --profile-from-start off --section WarpStateStats --section SourceCounters --import-source no -k regex:v41_tc_attention --launch-count 2 \
  $B/cuda_engine_bench $P --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_attn_b1.txt 2>&1; echo "ncu attn rc=$? t=$(elapsed)" >> $S
pack
# (the V4 proxy A/B for rms-norm-tree: call 2; the carry limit)

pack
cat $S
