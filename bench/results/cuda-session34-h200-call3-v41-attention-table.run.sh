#!/usr/bin/env bash
# Session 34, call 3: V4.1's tensor-core sink attention locates each row's keys once (a table of row
# addresses in shared memory: the pick, its page, its ring slot) and stages two items' code loads in flight
# per thread (cache_codes16 / cache_decode16). prev = main 3460c89, new = the change, split4 = the change
# with kTcaSplit = 4 (a cluster of 4 CTAs per row; an experiment, not committed). 4 full-width V4.1 layers.
source tools/device/call_lib.sh .devcarry/me/c3.tar.xz
t v41_ops 60 $B/cuda_v41_ops_tests
D=/mnt/ck; mkdir -p $D; mount -t tmpfs -o size=100G tmpfs $D >> $S 2>&1 || D=/dev/shm
F="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --prefill-prompt 8192 --prefill-requests 2 --batches 1,32,128,256,512 --decode 8"
timeout 70 $B/cuda_engine_bench_prev $F --dir $D/v4 --keep 1 > $R/prev1.jsonl 2> $R/prev1.err; echo "prev1 rc=$? t=$(elapsed)" >> $S
for v in new split4 prev new; do
  n=1; [ -e $R/${v}1.jsonl ] && n=2
  timeout 45 $B/cuda_engine_bench_$v $F --model $D/v4 > $R/$v$n.jsonl 2> $R/$v$n.err; echo "$v$n rc=$? t=$(elapsed)" >> $S
done
pack
P="--family v41 --layers v41:4 --gpus 1 --batch-tokens 4096 --context 4096 --routing even --model $D/v4"
N="ncu --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
timeout 60 $N $B/cuda_engine_bench_new $P --prefill-prompt 4096 --prefill-requests 1 --batches 1 --decode 1 --profile prefill > $R/ncu_pf.txt 2>&1; echo "ncu pf rc=$? t=$(elapsed)" >> $S
timeout 50 $N $B/cuda_engine_bench_new $P --prefill-requests 0 --batches 1 --decode 2 --profile decode > $R/ncu_b1.txt 2>&1; echo "ncu b1 rc=$? t=$(elapsed)" >> $S
pack
t v41_model 200 $B/cuda_v41_model_tests
t dspark 80 $B/cuda_dspark_tests
pack
cat $S
