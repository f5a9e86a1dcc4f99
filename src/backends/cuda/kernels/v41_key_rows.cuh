// SPDX-License-Identifier: Apache-2.0
// V4.1 sink attention's keys pre-decoded to bf16 rows (key_rows_bf16, ops.h SinkBf16Keys): a segment's window
// ring positions below its first row and its KV source's entries, each decoded once per launch instead of once
// per query row and pass inside the attention kernels. A row's values are cache_values16's (the attention's
// staging gives the same values: v41_attention_keys.cuh), rounded to bf16 as the staging rounds them
// (store_bf16x16; exact for the compact formats, whose values bf16 holds).
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/kernels/v41_cache.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kKeyRowsPerBlock = 8;  // key rows per block, a warp-sized group of threads each (head_dim <= 512)
constexpr int kKeyRowsThreads = 256;

// grid (ceil(max_rows / 8), num_segments), block 256: thread t of a block decodes values 16·(t % 32) .. + 15 of
// its row kKeyRowsPerBlock·blockIdx.x + t / 32 (and 16·(t % 32) + 512 .. for wider rows).
static __global__ void __launch_bounds__(kKeyRowsThreads) key_rows_bf16_kernel(const __grid_constant__ KeyRowsBf16Params p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t s = blockIdx.y;
    const SinkBf16Keys k = p.keys[s];
    if (k.ring_row < 0) return;
    const int64_t j = static_cast<int64_t>(blockIdx.x) * kKeyRowsPerBlock + threadIdx.x / 32;
    if (j >= k.ring_n + k.entries) return;
    const SinkSegment& seg = p.segments[s];
    const uint8_t* row;
    CacheFormat f;
    int64_t block, out_row;
    if (j < k.ring_n) {
        const int64_t q = k.ring_lo + j;
        row = seg.window + (q % p.window_rows) * row_bytes_of(p.window_format, p.head_dim, p.window_block);
        f = p.window_format, block = p.window_block, out_row = k.ring_row + j;
    } else {
        const int64_t e = j - k.ring_n;
        row = cache_row(seg.entries, p.paged_entries, s, e, row_bytes_of(p.entry_format, p.head_dim, p.entry_block));
        f = p.entry_format, block = p.entry_block, out_row = k.entry_row + e;
    }
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(p.out) + out_row * p.head_dim;
    for (int64_t d0 = (threadIdx.x % 32) * 16; d0 < p.head_dim; d0 += 32 * 16) {
        float v[16];
        cache_values16(row, f, p.head_dim, block, d0, v);
        store_bf16x16(out + d0, v);
    }
}

}  // namespace deepinfer::cuda::kernels
