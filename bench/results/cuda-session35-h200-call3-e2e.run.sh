#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 35, call 3: end to end on the offline engine, one H200, even routing, after session 34's five proposals
# landed (new = main 312c8eb, prev = main ff91da5): ceilings; V4-Flash 24 layers prev then new (the RMS norms'
# tree sum is V4's change); DeepSeek-V4.1-Flash 12 layers new; then ncu detail of the b1 step's largest kernels
# (4 V4.1 layers): the attention's per-instruction stall samples, the FP4 decode experts and wq_b's linear.
source tools/device/call_lib.sh "$1"
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=200G tmpfs $D >> $S 2>&1 || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
pack
EB="--gpus 1 --batch-tokens 4096 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 160 $B/cuda_engine_bench_prev --layers flash:24 $EB --dir $D/big --keep 1 > $R/engine_A.jsonl 2> $R/engine_A.err; echo "engine A rc=$? t=$(elapsed)" >> $S
timeout 90 $B/cuda_engine_bench --layers flash:24 $EB --model $D/big > $R/engine_B.jsonl 2> $R/engine_B.err; echo "engine B rc=$? t=$(elapsed)" >> $S
pack
rm -rf $D/big
timeout 170 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --dir $D/v41 --keep 1 > $R/engine_v41_B.jsonl 2> $R/engine_v41_B.err; echo "engine v41 B rc=$? t=$(elapsed)" >> $S
pack
rm -rf $D/v41
P="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even"
timeout 60 $B/cuda_engine_bench $P --dir $D/v4 --keep 1 --prefill-requests 0 --batches 1 --decode 1 > /dev/null 2>&1
P="$P --model $D/v4 --prefill-requests 0 --batches 1 --decode 2 --profile decode"
NC="ncu --profile-from-start off --import-source no"
timeout 70 $NC --section WarpStateStats --section SourceCounters --page source --print-source sass --csv -k regex:v41_tc_attention --launch-count 1 \
  $B/cuda_engine_bench $P > $R/ncu_attn_sass.csv 2> $R/ncu_attn_sass.err; echo "ncu attn sass rc=$? t=$(elapsed)" >> $S
timeout 70 $NC --set full -k regex:fp4_dec_kernel --launch-count 2 $B/cuda_engine_bench $P > $R/ncu_fp4dec_b1.txt 2>&1; echo "ncu fp4dec rc=$? t=$(elapsed)" >> $S
timeout 70 $NC --set full -k regex:wgmma_gemm_kernel --launch-count 6 $B/cuda_engine_bench $P > $R/ncu_wgmma_b1.txt 2>&1; echo "ncu wgmma rc=$? t=$(elapsed)" >> $S
timeout 70 $NC --set full -k regex:v41_tc_attention --launch-count 1 $B/cuda_engine_bench $P > $R/ncu_attn_full.txt 2>&1; echo "ncu attn full rc=$? t=$(elapsed)" >> $S
pack
cat $S; tail -2 $R/*.err
