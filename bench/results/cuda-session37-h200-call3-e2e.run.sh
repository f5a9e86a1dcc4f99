#!/usr/bin/env bash
# Session 37, call 3: act_quant's fixed test (an empty launch), then prefill chunk size 4096 vs 8192 tokens
# (--batch-tokens) on 4 V4.1 layers, and the 12-layer V4.1 end-to-end run at both, all with the build of
# main + the few-rows attention's 4 loads in flight + act_quant's float4 form.
source tools/device/call_lib.sh "$1"
t aq 150 $B/cuda_all_tests --gtest_filter='CudaOps.ActQuant*:CudaV41Ops.ActQuant*:CudaGemmFast.*:CudaOps.*Swiglu*'
timeout 60 $B/cuda_gemm_bench --only none --out $R/ceilings.jsonl 2>&1 | tail -1 >> $S
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=200G tmpfs $D >> "$S" 2>&1 || D=/dev/shm
A="--family v41 --layers v41:4 --gpus 1 --context 4096 --routing even --prefill-prompt 8192 --prefill-requests 2 --batches 1,32 --decode 8"
timeout 120 $B/cuda_engine_bench $A --batch-tokens 4096 --dir $D/ck --keep 1 > $R/bt4096_1.jsonl 2> $R/bt4096_1.err; echo "bt4096 rc=$? t=$(elapsed)" >> $S
for i in 1 2; do
  for bt in 8192 4096; do
    [ $i = 1 ] && [ $bt = 4096 ] && continue
    timeout 60 $B/cuda_engine_bench $A --batch-tokens $bt --model $D/ck > $R/bt${bt}_$i.jsonl 2> $R/bt${bt}_$i.err
    echo "bt$bt $i rc=$? t=$(elapsed) $(grep -o '"tok_s":[0-9.]*' $R/bt${bt}_$i.jsonl | head -1)" >> $S
  done
done
timeout 60 $B/cuda_engine_bench $A --batch-tokens 4096 --model $D/ck > $R/bt4096_2.jsonl 2> $R/bt4096_2.err
echo "bt4096 2 rc=$? t=$(elapsed) $(grep -o '"tok_s":[0-9.]*' $R/bt4096_2.jsonl | head -1)" >> $S
pack
rm -rf $D/ck
EB="--gpus 1 --prefill-prompt 8192 --prefill-requests 3 --context 4096 --batches 1,32,128,256,512 --decode 16 --routing even"
timeout 170 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --batch-tokens 4096 --dir $D/v41 --keep 1 > $R/engine_v41_bt4096.jsonl 2> $R/engine_v41_bt4096.err
echo "engine v41 bt4096 rc=$? t=$(elapsed)" >> $S
pack
timeout 120 $B/cuda_engine_bench --family v41 --layers v41:12 $EB --batch-tokens 8192 --model $D/v41 > $R/engine_v41_bt8192.jsonl 2> $R/engine_v41_bt8192.err
echo "engine v41 bt8192 rc=$? t=$(elapsed)" >> $S
pack
cat $S
