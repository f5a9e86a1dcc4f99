#!/usr/bin/env bash
# Session 31, call 7: why the dense kernel's cluster form runs at half speed. cuda_gemm_bench at wq_b / wo_b / shared_w1
# (8192 rows): main's launcher vs one whose cluster form launches sm_count / 2 clusters regardless of
# cudaOccupancyMaxActiveClusters (_c66); ncu launch statistics of the cluster launches.
set -u
T0=$(date +%s)
R=/tmp/r; rm -rf $R; mkdir -p $R
pack() { tar -czf $OUT/r.tgz -C /tmp r; }
B=/tmp/mb7; mkdir -p $B && tar -xJf .devcarry/me/c7.tar.xz -C $B
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$B:$CUBLAS_DIR
S=$R/summary.txt
for v in cuda_gemm_bench cuda_gemm_bench_c66; do
timeout 120 $B/$v --only wq_b,wo_b,shared_w1 --ms 8192 --no-ceilings --out $R/$v.jsonl > $R/$v.log 2>&1
echo "$v rc=$? t=$(( $(date +%s) - T0 ))" >> $S; pack; done
timeout 120 ncu --metrics launch__grid_size,launch__cluster_dim_x,launch__occupancy_cluster_pct,gpu__time_duration.sum --kernel-name regex:dense_ws_kernel --print-summary per-kernel $B/cuda_gemm_bench --only wq_b --ms 8192 --no-ceilings > $R/ncu-launch.txt 2>&1
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))" >> $S; pack
cat $S
for v in cuda_gemm_bench cuda_gemm_bench_c66; do grep -o '"op":"[a-z_0-9]*","impl":"[a-z_0-9]*"\|"ms":[0-9.]*' $R/$v.jsonl | paste - - | grep -v ceiling; done
