// SPDX-License-Identifier: Apache-2.0
// V4.1's lightning-indexer scores on tensor cores (fast GEMM mode, official numerics): index_scores_kernel's
// function (v41_attention.cuh) with the dot products of a 64-key tile on bf16 MMAs (indexer_tc.cuh's
// block routine). The compact MXFP4 keys are decoded once per tile into bf16 (FP4 values times a
// power-of-two scale: exact); keys j in [visible, n) score -inf as in the reference.
#pragma once

#include "backends/cuda/kernels/indexer_tc.cuh"
#include "backends/cuda/kernels/v41_cache.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// grid (num_rows, key spans), block kItcThreads, dynamic shared memory itc_smem_bytes(kD).
template <int kD>
static __global__ void __launch_bounds__(kItcThreads) v41_indexer_tc_kernel(const __grid_constant__ IndexScoresParams p, int64_t span) {
    const IndexRow& ir = p.rows[blockIdx.x];
    const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * span;
    const int64_t k_end = k_begin + span < ir.num_entries ? k_begin + span : ir.num_entries;
    if (k_begin >= k_end) return;  // uniform over the block
    float* scores = p.scores + static_cast<int64_t>(blockIdx.x) * p.max_entries;
    const int64_t scored_end = k_end < ir.visible ? k_end : (ir.visible > k_begin ? ir.visible : k_begin);
    for (int64_t j = scored_end + threadIdx.x; j < k_end; j += kItcThreads) scores[j] = -__int_as_float(0x7F800000);
    if (scored_end <= k_begin) return;  // uniform
    const int64_t key_bytes = row_bytes_of(p.key_format, kD, p.key_block);
    indexer_tc_block<kD>(
        p.q + static_cast<int64_t>(ir.row) * p.heads * kD, p.weights + static_cast<int64_t>(ir.row) * p.heads, p.heads,
        k_begin, scored_end,
        [&](int64_t j, int d) {
            return cache_value(cache_row(ir.keys, p.paged_keys, ir.segment, j, key_bytes), p.key_format, kD, p.key_block, d);
        },
        [&](int64_t j, float score) { scores[j] = score; },
        [&](int64_t j, int d0, float (&v)[16]) {
            cache_values16(cache_row(ir.keys, p.paged_keys, ir.segment, j, key_bytes), p.key_format, kD, p.key_block, d0, v);
        });
}

}  // namespace deepinfer::cuda::kernels
