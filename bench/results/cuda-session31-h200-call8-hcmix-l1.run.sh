#!/usr/bin/env bash
# Session 31, call 8: hc_mix_mma's x loads not allocated in L1 (fn slices stay there). Tests; proxy prev (99d217f)
# vs new; cuda_gemm_bench hc_mix row; ncu of the hc_mix launches (time, L1 hit rate, L2 throughput) prev and new.
set -u
T0=$(date +%s)
R=/tmp/r; rm -rf $R; mkdir -p $R
pack() { tar -czf $OUT/r.tgz -C /tmp r; }
B=/tmp/mb8; mkdir -p $B && tar -xJf .devcarry/me/c8.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ')" >> $S; }
t ops 60 $B/cuda_ops_tests --gtest_filter='*HcMix*:*HyperConnection*'
t fast_model 40 $B/cuda_fast_model_tests
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
  timeout 30 $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
  timeout 40 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; echo "round $round t=$(( $(date +%s) - T0 ))" >> $S; done
pack
timeout 60 $B/cuda_gemm_bench --only elementwise --no-ceilings --out $R/elementwise.jsonl > $R/elementwise.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $S
for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
timeout 60 ncu --profile-from-start off --clock-control none --cache-control none --kernel-name-base function --kernel-name regex:hc_mix --metrics gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed --print-summary per-kernel $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 --profile 1 > $R/ncu-hcmix-$v.txt 2>&1
echo "ncu $v rc=$? t=$(( $(date +%s) - T0 ))" >> $S; done
pack
cat $S; grep -hE "FAILED|Failure" $R/*.log | head
for v in prev new; do echo "$v pf8: $(grep -o '"tok_s":[0-9.]*' $R/pf8_$v.jsonl | grep -v ':0$' | tr '\n' ' ')"; echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
grep hc_mix $R/elementwise.log | head; for v in prev new; do grep -A12 "hc_mix_mma_kernel<3, 2>" $R/ncu-hcmix-$v.txt | grep -E "duration|hit_rate|lts__|dram" ; done
