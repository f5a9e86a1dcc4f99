#!/usr/bin/env bash
# Session 31, call 11 (call 9 again after the fix: a stray comment had dropped .sink and .window from the model's
# sparse_attention call; the gemm test's sentinel made bf16-exact): wq_b writes q in bf16 (FastLinearParams::y_bf16),
# the RoPE kernel reads it in place (RopeRowsParams::x_bf16). Tests; proxy prev (99d217f) vs new.
set -u
T0=$(date +%s)
R=/tmp/r; rm -rf $R; mkdir -p $R
pack() { tar -czf $OUT/r.tgz -C /tmp r; }
B=/tmp/mb11; mkdir -p $B && tar -xJf .devcarry/me/c11.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR DI_TEST_DATA_DIR=$PWD/tests/data
mkdir -p /work && ln -sfn $PWD /work/main
S=$R/summary.txt
t() { local name=$1 cap=$2; shift 2; timeout $cap "$@" > $R/$name.log 2>&1; echo "$name rc=$? t=$(( $(date +%s) - T0 )) $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.log | tr '\n' ' ' | cut -c1-300)" >> $S; }
t model 60 $B/cuda_model_tests
t fast_model 40 $B/cuda_fast_model_tests
t gemm 90 $B/cuda_gemm_tests
t ops 90 $B/cuda_ops_tests
t mtp 60 $B/cuda_mtp_tests
pack
FB="--experts 256 --layers csa,hca --gemm fast --routing even --max-len 16384"
timeout 60 $B/cuda_forward_bench $FB --dir /tmp/pb --keep 1 --prefill 64 --batches 1 --context 16 --decode 1 > /dev/null 2>&1
for round in 1 2; do for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
  timeout 30 $X $FB --model /tmp/pb --prefill 8192 --batches 1 --context 16 --decode 0 >> $R/pf8_$v.jsonl 2>> $R/pf.err
done; done
for v in prev new; do X=$B/cuda_forward_bench; [ $v = prev ] && X=$B/cuda_forward_bench_prev
  timeout 40 $X $FB --model /tmp/pb --prefill 0 --context 4096 --batches 1,32,512 --decode-warmup 3 --decode 16 >> $R/dec_$v.jsonl 2>> $R/pf.err
done; echo "proxy t=$(( $(date +%s) - T0 ))" >> $S
pack
t dspark 60 $B/cuda_dspark_tests
pack
cat $S; grep -hE "Failure" -A3 $R/*.log | head -20
for v in prev new; do echo "$v pf8: $(grep -o '"tok_s":[0-9.]*' $R/pf8_$v.jsonl | grep -v ':0$' | tr '\n' ' ')"; echo "$v dec: $(grep -o '"batch":[0-9]*\|"ms_per_step":[0-9.]*' $R/dec_$v.jsonl | tr '\n' ' ')"; done
