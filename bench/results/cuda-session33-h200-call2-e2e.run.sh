#!/usr/bin/env bash
# Session 33, call 2: end to end on the offline engine, one H200, even routing.
# V4-Flash, 24 full-width layers: A = main 8506a71, B = the compressor fold (s33/compressor-fold);
# then DeepSeek-V4.1-Flash (the default model), 12 full-width layers (--family v41), its first run.
source tools/device/call_lib.sh .devcarry/me/c2.tar.xz
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=200G tmpfs $D >> $S 2>&1 || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
EB="--gpus 1 --batch-tokens 4096 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 200 $B/cuda_engine_bench_main --layers flash:24 $EB --dir $D/big --keep 1 > $R/engine_A.jsonl 2> $R/engine_A.err; echo "engine A rc=$? t=$(elapsed)" >> $S
pack
timeout 130 $B/cuda_engine_bench --layers flash:24 $EB --model $D/big > $R/engine_B.jsonl 2> $R/engine_B.err; echo "engine B rc=$? t=$(elapsed)" >> $S
pack
rm -rf $D/big
timeout 240 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --dir $D/v41 --keep 1 > $R/engine_v41.jsonl 2> $R/engine_v41.err; echo "engine v41 rc=$? t=$(elapsed)" >> $S
du -sh $D/v41 >> $S
pack
cat $S; tail -3 $R/*.err
