// SPDX-License-Identifier: Apache-2.0
// Device top-k (lightning indexer, router): one block of kTopkThreads (= 256, one per histogram bin)
// per row; radix select of the k-th largest
// score on order-preserving 32-bit keys (4 passes of 8-bit histograms), then a stable compaction in
// index order: every score above the threshold, and the lowest-index ties at the threshold. The
// result is the CPU's topk_lowest_index (ascending indices), independent of the thread count.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kTopkThreads = 256;

__device__ __forceinline__ uint32_t order_key(float f) {
    if (f == 0.0f) f = 0.0f;  // -0 ties with +0, as in the CPU's comparisons
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum of v over the block (kTopkThreads threads); `total` gets the sum.
__device__ __forceinline__ int block_exclusive_scan(int v, int* total) {
    __shared__ int warp_sums[kTopkThreads / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xFFFFFFFFu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    int offset = 0, sum = 0;
    for (int w = 0; w < kTopkThreads / 32; ++w) {
        if (w < warp) offset += warp_sums[w];
        sum += warp_sums[w];
    }
    __syncthreads();
    *total = sum;
    return offset + x - v;
}

static __device__ void topk_row(const float* scores, int64_t len, int64_t k, int32_t* out) {
    __shared__ int hist[256];
    __shared__ uint32_t prefix_sh;
    __shared__ int need_sh;
    const int64_t take = k < len ? k : len;
    if (take == len) {  // every entry is selected
        for (int64_t j = threadIdx.x; j < k; j += blockDim.x) out[j] = j < len ? static_cast<int32_t>(j) : -1;
        return;
    }
    if (take <= 0) return;  // nothing to select (the passes below need need >= 1)
    uint32_t prefix = 0, mask = 0;
    int need = static_cast<int>(take);  // how many still to select at or below the current prefix
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
            const uint32_t key = order_key(scores[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFF], 1);
        }
        __syncthreads();
        {
            // The bin of the need-th largest key, as a scan from bin 255 down would find it: the largest
            // b >= 1 whose count of keys in bins b..255 reaches `need`, else 0; `cum` = the keys in the bins
            // above it. Thread i holds bin 255 - i: its exclusive prefix sum is that bin's `cum` (integers:
            // the same values as the scan); exactly one thread matches.
            const int b = kTopkThreads - 1 - static_cast<int>(threadIdx.x);
            const int h = hist[b];
            int total = 0;
            const int cum = block_exclusive_scan(h, &total);
            if (cum < need && (b == 0 || cum + h >= need)) {
                prefix_sh = prefix | (static_cast<uint32_t>(b) << shift);
                need_sh = need - cum;
            }
        }
        __syncthreads();
        prefix = prefix_sh;
        need = need_sh;
        mask |= 0xFFu << shift;
        __syncthreads();
    }
    // prefix = threshold key; `need` entries equal to it are taken, lowest index first.
    int written = 0, eq_seen = 0;
    for (int64_t base = 0; base < len; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        uint32_t key = 0;
        if (i < len) key = order_key(scores[i]);
        const int is_eq = i < len && key == prefix;
        int eq_total = 0;
        const int eq_rank = eq_seen + block_exclusive_scan(is_eq, &eq_total);
        const int sel = i < len && (key > prefix || (is_eq && eq_rank < need));
        int sel_total = 0;
        const int pos = written + block_exclusive_scan(sel, &sel_total);
        if (sel) out[pos] = static_cast<int32_t>(i);
        written += sel_total;
        eq_seen += eq_total;
    }
    for (int64_t j = take + threadIdx.x; j < k; j += blockDim.x) out[j] = -1;
}

static __global__ void __launch_bounds__(kTopkThreads) topk_kernel(const __grid_constant__ TopkParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t r = blockIdx.x;
    const int64_t len = p.lengths ? p.lengths[r] : p.n;
    topk_row(p.scores + r * p.ld, len, p.k, p.out + r * p.k);
}

}  // namespace deepinfer::cuda::kernels
