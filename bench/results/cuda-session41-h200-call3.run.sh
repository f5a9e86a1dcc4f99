#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 41 call 3: per-instruction (SASS) execution counts and stall samples of V4.1's prefill attention
# (v41_tc_attention_kernel<512, 1>, the 4th launch of an 8192-token step of 4 layers: 128 window + 512 picked keys)
# and of the FP4 experts' fp4_ws_kernel (1st launch), with main's cuda_engine_bench (build-90, sm_90a):
#   tools/device/make_bundle.sh .devcarry/me/b.tar.xz build-90/bench/cuda_engine_bench
# run through the device tool with carry [".devcarry/me"].
source tools/device/call_lib.sh "$1"
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> "$S" 2>&1 || D=/dev/shm
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
timeout 120 $B/cuda_engine_bench $A --dir $D/ck --keep 1 --prefill-prompt 8192 --prefill-requests 1 --batches 1 --decode 1 > $R/v41.jsonl 2>&1
echo "v41 checkpoint rc=$? t=$(elapsed)" >> $S
for k in "v41_tc_attention_kernel 3" "fp4_ws_kernel 0"; do
  set -- $k
  timeout 200 ncu --profile-from-start off --clock-control none -k regex:$1 --launch-skip $2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section InstructionStats --import-source no -o $R/src_$1 \
    $B/cuda_engine_bench $A --model $D/ck --prefill-prompt 8192 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_src_$1.log 2>&1
  echo "ncu source $1 rc=$? t=$(elapsed)" >> $S
  timeout 60 ncu -i $R/src_$1.ncu-rep --page source --csv --print-source sass > $R/sass_$1.csv 2>&1
  echo "sass csv $1 rc=$? lines=$(wc -l < $R/sass_$1.csv) t=$(elapsed)" >> $S
  xz -T8 $R/sass_$1.csv
done
pack
cat $S
