// SPDX-License-Identifier: Apache-2.0
// Top-k of a row held in shared memory (the lightning indexer at prefill): the row is read from global
// memory once, as order-preserving 32-bit keys (topk.cuh's order_key); the k-th largest key is found by
// 3 radix passes over shared memory (11, 11 and 10 bits; one shared atomic per distinct bin and warp,
// the lanes of a bin merged by match.any), the bin holding it found by a block scan over the bins
// from the top; then the picks are compacted in index order with warp ballots: every key above the
// threshold and the lowest-index ties at it. The result is topk.cuh's (and the CPU's
// topk_lowest_index): the picked set and its ascending order are fixed by the scores alone.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/topk.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kTsThreads = 512;
constexpr int kTsWarps = kTsThreads / 32;
constexpr int kTsBins = 2048;  // the widest pass (11 bits)

// Dynamic shared memory of a row of up to n entries: the keys and the histogram.
__host__ __device__ constexpr int64_t ts_smem_bytes(int64_t n) { return 4 * n + 4 * kTsBins; }

// Exclusive prefix sum of v over the block (kTsThreads threads); `total` gets the sum.
__device__ __forceinline__ int ts_block_scan(int v, int* total, int* warp_sums) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xFFFFFFFFu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    int offset = 0, sum = 0;
#pragma unroll
    for (int w = 0; w < kTsWarps; ++w) {
        offset += w < warp ? warp_sums[w] : 0;
        sum += warp_sums[w];
    }
    __syncthreads();
    *total = sum;
    return offset + x - v;
}

// grid rows, block kTsThreads, dynamic shared memory ts_smem_bytes(p.n).
static __global__ void __launch_bounds__(kTsThreads) topk_smem_kernel(const __grid_constant__ TopkParams p) {
    extern __shared__ __align__(16) unsigned char ts_sm[];
    __shared__ int warp_sums[kTsWarps];
    __shared__ int warp_gt[kTsWarps], warp_eq[kTsWarps];
    __shared__ uint32_t prefix_sh;
    __shared__ int need_sh;
    auto* keys = reinterpret_cast<uint32_t*>(ts_sm);  // [p.n]
    int* hist = reinterpret_cast<int*>(keys + p.n);    // [kTsBins]
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t r = blockIdx.x;
    const int64_t len = p.lengths ? p.lengths[r] : p.n;
    int32_t* out = p.out + r * p.k;
    const int64_t take = p.k < len ? p.k : len;
    if (take == len) {  // every entry is selected
        for (int64_t j = tid; j < p.k; j += kTsThreads) out[j] = j < len ? static_cast<int32_t>(j) : -1;
        return;
    }
    const float* scores = p.scores + r * p.ld;
    for (int64_t i0 = tid; i0 < len; i0 += 8 * kTsThreads) {  // 8 loads in flight per thread
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = i0 + u * kTsThreads < len ? scores[i0 + u * kTsThreads] : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; ++u)
            if (i0 + u * kTsThreads < len) keys[i0 + u * kTsThreads] = order_key(v[u]);
    }

    uint32_t prefix = 0, mask = 0;
    int need = static_cast<int>(take);  // how many still to select at or below the current prefix
#pragma unroll 1
    for (int pass = 0; pass < 3; ++pass) {
        const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
        const int nb = pass == 2 ? 1024 : 2048;
        for (int b = tid; b < nb; b += kTsThreads) hist[b] = 0;
        __syncthreads();  // the keys (first pass) and the cleared bins
        for (int64_t base = 0; base < len; base += kTsThreads) {  // uniform trip count: match.any over full warps
            const int64_t i = base + tid;
            const uint32_t key = i < len ? keys[i] : 0u;
            const bool in = i < len && (key & mask) == prefix;
            const uint32_t bin = in ? (key >> shift) & static_cast<uint32_t>(nb - 1) : 0xFFFFFFFFu;
            const uint32_t peers = __match_any_sync(0xFFFFFFFFu, bin);
            if (in && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        // Bins from the top: thread t holds descending positions [t * per, (t + 1) * per).
        const int per = nb / kTsThreads;
        int c[4] = {0, 0, 0, 0};
        int sum = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            c[j] = j < per ? hist[nb - 1 - (tid * per + j)] : 0;
            sum += c[j];
        }
        int total = 0;
        int cum = ts_block_scan(sum, &total, warp_sums);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j < per && cum < need && cum + c[j] >= need) {
                prefix_sh = prefix | (static_cast<uint32_t>(nb - 1 - (tid * per + j)) << shift);
                need_sh = need - cum;
            }
            cum += c[j];
        }
        __syncthreads();
        prefix = prefix_sh;
        need = need_sh;
        mask |= static_cast<uint32_t>(nb - 1) << shift;
    }
    // prefix = the threshold key; `need` keys equal to it are taken, lowest index first. Warp w holds the
    // index range [w * span, (w + 1) * span).
    const int64_t span = ((len + kTsWarps - 1) / kTsWarps + 31) / 32 * 32;
    const int64_t lo = warp * span, hi = lo + span < len ? lo + span : len;
    int gt = 0, eq = 0;
    for (int64_t base = lo; base < hi; base += 32) {
        const int64_t i = base + lane;
        const uint32_t key = i < hi ? keys[i] : 0u;
        gt += __popc(__ballot_sync(0xFFFFFFFFu, i < hi && key > prefix));
        eq += __popc(__ballot_sync(0xFFFFFFFFu, i < hi && key == prefix));
    }
    if (lane == 0) {
        warp_gt[warp] = gt;
        warp_eq[warp] = eq;
    }
    __syncthreads();
    int gt_before = 0, eq_before = 0;
    for (int w = 0; w < warp; ++w) {
        gt_before += warp_gt[w];
        eq_before += warp_eq[w];
    }
    int written = gt_before + (eq_before < need ? eq_before : need), eq_seen = eq_before;
    const uint32_t below = (1u << lane) - 1u;
    for (int64_t base = lo; base < hi; base += 32) {
        const int64_t i = base + lane;
        const uint32_t key = i < hi ? keys[i] : 0u;
        const uint32_t eq_mask = __ballot_sync(0xFFFFFFFFu, i < hi && key == prefix);
        const bool is_eq = (eq_mask >> lane) & 1u;
        const bool sel = (i < hi && key > prefix) || (is_eq && eq_seen + __popc(eq_mask & below) < need);
        const uint32_t sel_mask = __ballot_sync(0xFFFFFFFFu, sel);
        if (sel) out[written + __popc(sel_mask & below)] = static_cast<int32_t>(i);
        written += __popc(sel_mask);
        eq_seen += __popc(eq_mask);
    }
    for (int64_t j = take + tid; j < p.k; j += kTsThreads) out[j] = -1;
}

}  // namespace deepinfer::cuda::kernels
