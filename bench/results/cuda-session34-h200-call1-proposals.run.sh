#!/usr/bin/env bash
# Session 34, call 1: session 33's four proposals (V4.1 indexer 16-value key staging, sampler top-k over
# vocabulary slices, V4.1 grouped wo_a, V4.1 input forms) + the new compressor-fold op test, on the H200.
# Tests, then 4 full-width V4.1 layers A = main 42fabec, B = the proposals (two rounds), then ncu tables of B.
source tools/device/call_lib.sh .devcarry/me/c1.tar.xz
t v41_ops 60 $B/cuda_v41_ops_tests
t ops 90 $B/cuda_ops_tests
t v41_model 200 $B/cuda_v41_model_tests
pack
t model 60 $B/cuda_model_tests
t mtp 30 $B/cuda_mtp_tests
t dspark 80 $B/cuda_dspark_tests
t gemm 30 $B/cuda_gemm_tests --gtest_filter='*GroupedWoA*:*Splitk*:*SplitK*'
pack
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> $S 2>&1 || D=/dev/shm
F="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256 --decode 8"
timeout 70 $B/cuda_engine_bench_main $F --dir $D/v4 --keep 1 > $R/A1.jsonl 2> $R/A1.err; echo "A1 rc=$? t=$(elapsed)" >> $S
timeout 45 $B/cuda_engine_bench $F --model $D/v4 > $R/B1.jsonl 2> $R/B1.err; echo "B1 rc=$? t=$(elapsed)" >> $S
timeout 45 $B/cuda_engine_bench_main $F --model $D/v4 > $R/A2.jsonl 2> $R/A2.err; echo "A2 rc=$? t=$(elapsed)" >> $S
timeout 45 $B/cuda_engine_bench $F --model $D/v4 > $R/B2.jsonl 2> $R/B2.err; echo "B2 rc=$? t=$(elapsed)" >> $S
pack
P="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --model $D/v4"
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 60 $N $B/cuda_engine_bench $P --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf.txt 2>&1; echo "ncu pf rc=$? t=$(elapsed)" >> $S
timeout 50 $N $B/cuda_engine_bench $P --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1; echo "ncu b1 rc=$? t=$(elapsed)" >> $S
pack
cat $S
