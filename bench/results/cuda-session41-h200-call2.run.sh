#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A measurement call (written in session 40 as next-call-2.sh, whose device time was spent): measurements that the next
# kernel work and the README need, on main's build.
#   1. V4-Flash end to end on 24 layers at the engine's CUDA default of 8192 tokens per step, with ceilings: the V4
#      table in the README still carries the old harness's b256/b512 rows (prefill work inside the timed steps).
#   2. Where the two biggest prefill kernels stall (V4.1, 4 layers, one 8192-token step; ~21% and ~27% of it):
#      v41_tc_attention_kernel (all 4 launches: 2 window-only, 2 with picks) and the FP4 experts' fp4_ws_kernel (2 launches), each with
#      the per-reason stall ratios (smsp__average_warps_issue_stalled_*_per_issue_active) and the instruction mix.
# Here: ninja -C build-90 cuda_engine_bench cuda_gemm_bench; tools/device/make_bundle.sh .devcarry/me/b.tar.xz
# build-90/bench/cuda_engine_bench build-90/bench/cuda_gemm_bench; run this through the device tool with carry
# [".devcarry/me"] (move tests/data/models/v4_tiny_b_sharded aside if the carry limit is hit). ~450 s.
source tools/device/call_lib.sh "$1"
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=110G tmpfs $D >> "$S" 2>&1 || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
EB="--gpus 1 --batch-tokens 8192 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 260 $B/cuda_engine_bench --layers flash:24 $EB --dir $D/v4 --keep 1 > $R/engine_v4_bt8192.jsonl 2> $R/engine_v4_bt8192.err
echo "engine v4 24 layers rc=$? t=$(elapsed)" >> $S
rm -rf $D/v4
pack
A="--family v41 --layers v41:4 --gpus 1 --batch-tokens 8192 --context 4096 --routing even"
timeout 120 $B/cuda_engine_bench $A --dir $D/ck --keep 1 --prefill-prompt 8192 --prefill-requests 1 --batches 1 --decode 1 > $R/v41.jsonl 2>&1
echo "v41 checkpoint rc=$? t=$(elapsed)" >> $S
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_local_ld.sum,smsp__inst_executed_op_local_st.sum,smsp__inst_executed_pipe_tensor.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
for k in "v41_tc_attention_kernel 4" "fp4_ws_kernel 2"; do
  set -- $k
  timeout 150 ncu --profile-from-start off --clock-control none -k regex:$1 --launch-count $2 --metrics "$M" \
    --section WarpStateStats --section SchedulerStats $B/cuda_engine_bench $A --model $D/ck --prefill-prompt 8192 \
    --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_stalls_$1.txt 2>&1
  echo "ncu stalls $1 rc=$? t=$(elapsed)" >> $S
done
pack
cat $S
