#!/usr/bin/env bash
# Session 32, call 6 (the session's last): the compressors' wkv and wgate as one GEMM (uncommitted on 1e47561):
# tests; then the offline engine end to end, 24 full-width layers, even routing: A = main 1e47561 (the
# session's landed tree), B = A + the joined compressor GEMM (only if its tests pass).
source .devcarry/me/call_lib.sh .devcarry/me/c6.tar.xz
t gemm 90 $B/cuda_gemm_tests --gtest_filter='*Joined*:*SharedExpert*:*RmsNormForms*:*DenseWs*:*SplitK*'
t fast_model 60 $B/cuda_fast_model_tests
t model 90 $B/cuda_model_tests
pack
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=200G tmpfs $D >> $S 2>&1 || D=/dev/shm
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
EB="--layers flash:24 --gpus 1 --batch-tokens 4096 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 220 $B/cuda_engine_bench_main $EB --dir $D/big --keep 1 > $R/engine_A.jsonl 2> $R/engine_A.err; echo "engine A rc=$? t=$(elapsed)" >> $S
pack
if grep -q "fast_model rc=0" $S && grep -q "model rc=0" $S && grep -q "gemm rc=0" $S; then
  timeout 150 $B/cuda_engine_bench $EB --model $D/big > $R/engine_B.jsonl 2> $R/engine_B.err; echo "engine B rc=$? t=$(elapsed)" >> $S
fi
pack
cat $S; grep -hE "Failure" -A3 $R/*.log | head -20
