// SPDX-License-Identifier: Apache-2.0
// Kernels of the routed expert-parallel dispatch (ep/ep_dispatch_ops.h).
#pragma once

#include <cstdint>

#include "backends/cuda/ep/ep_dispatch_ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kEpPlanThreads = 1024;

// Exclusive prefix sum of v over the block (blockDim.x == kEpPlanThreads); `total` gets the sum.
// `scratch` holds 32 values; every thread must call it.
__device__ inline uint32_t ep_block_exclusive_scan(uint32_t v, uint32_t* scratch, uint32_t& total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = kEpPlanThreads / 32;
    uint32_t x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) scratch[warp] = x;
    __syncthreads();
    if (warp == 0) {
        uint32_t w = lane < warps ? scratch[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        scratch[lane] = w;  // inclusive sums of the warps
    }
    __syncthreads();
    const uint32_t before = warp > 0 ? scratch[warp - 1] : 0;
    total = scratch[warps - 1];
    __syncthreads();  // scratch free for the next call
    return before + x - v;
}

// Rows in chunks of the block; per destination rank one scan of (row needs r) + (pairs on r) << 16
// (a chunk holds <= 1024 rows and <= 32768 pairs, so the halves never overflow).
static __global__ void __launch_bounds__(kEpPlanThreads) ep_route_plan_kernel(const __grid_constant__ EpRoutePlanParams p) {
    __shared__ uint32_t scratch[32];
    const int G = p.ranks, K = static_cast<int>(p.top_k);
    const int32_t El = p.experts_per_rank;
    uint32_t rows_to[kMaxEpRanks], pairs_on[kMaxEpRanks];
    for (int r = 0; r < kMaxEpRanks; ++r) rows_to[r] = pairs_on[r] = 0;
    for (int64_t base = 0; base < p.rows; base += kEpPlanThreads) {
        const int64_t i = base + threadIdx.x;
        const bool valid = i < p.rows;
        const int32_t* row = p.ids + i * K;
        for (int r = 0; r < G; ++r) {
            uint32_t n = 0;
            if (valid)
                for (int k = 0; k < K; ++k) n += row[k] / El == r ? 1u : 0u;
            uint32_t total = 0;
            const uint32_t before = ep_block_exclusive_scan((n > 0 ? 1u : 0u) | (n << 16), scratch, total);
            if (n > 0) {
                p.send_rows[int64_t(r) * p.rows + rows_to[r] + (before & 0xffffu)] = static_cast<int32_t>(i);
                uint32_t at = pairs_on[r] + (before >> 16);
                for (int k = 0; k < K; ++k)
                    if (row[k] / El == r) p.pair_slot[i * K + k] = static_cast<int32_t>(at++);
            }
            rows_to[r] += total & 0xffffu;
            pairs_on[r] += total >> 16;
        }
    }
    // The return buffer holds the blocks of the ranks in order: add each pair's block start (pairs
    // written above by other threads).
    __syncthreads();
    uint32_t start[kMaxEpRanks];
    uint32_t at = 0;
    for (int r = 0; r < G; ++r) {
        start[r] = at;
        at += pairs_on[r];
    }
    for (int64_t j = threadIdx.x; j < p.rows * K; j += kEpPlanThreads) p.pair_slot[j] += static_cast<int32_t>(start[p.ids[j] / El]);
    if (threadIdx.x == 0)
        for (int r = 0; r < G; ++r) {
            p.counts[r] = static_cast<int32_t>(rows_to[r]);
            p.counts[G + r] = static_cast<int32_t>(pairs_on[r]);
        }
}

static __global__ void __launch_bounds__(kEpPlanThreads) ep_local_slots_kernel(const __grid_constant__ EpLocalSlotsParams p) {
    __shared__ uint32_t scratch[32];
    uint32_t carry = 0;
    for (int64_t base = 0; base < p.n; base += kEpPlanThreads) {
        const int64_t j = base + threadIdx.x;
        const int32_t local = j < p.n ? p.ids[j] - p.first_expert : -1;
        const bool mine = local >= 0 && local < p.experts_per_rank;
        uint32_t total = 0;
        const uint32_t before = ep_block_exclusive_scan(mine ? 1u : 0u, scratch, total);
        if (j < p.n) p.compact[j] = mine ? static_cast<int32_t>(carry + before) : -1;
        carry += total;
    }
}

static __global__ void ep_compose_kernel(const __grid_constant__ EpComposeParams p) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < p.n) p.out[i] = p.map[p.index[i]];
}

static __global__ void ep_gather_bf16_kernel(const __grid_constant__ EpGatherBf16Params p) {
    const int64_t i = blockIdx.x;
    const uint16_t* src = p.src + static_cast<int64_t>(p.index[i]) * p.width;
    float* dst = p.dst + i * p.width;
    for (int64_t c = threadIdx.x; c < p.width; c += blockDim.x) dst[c] = __uint_as_float(uint32_t(src[c]) << 16);
}

// Block (j, r): row j of destination r, all planes, 4-byte words.
static __global__ void ep_pack_kernel(const __grid_constant__ EpPackParams p) {
    const int r = static_cast<int>(blockIdx.y);
    const int64_t j = blockIdx.x;
    if (j >= p.count[r]) return;
    const int64_t src_row = p.send_rows[int64_t(r) * p.rows + j];
    for (int k = 0; k < p.num_planes; ++k) {
        const EpPackPlane& pl = p.planes[k];
        const int64_t words = pl.width / 4;
        const auto* src = static_cast<const uint32_t*>(pl.src) + src_row * words;
        auto* dst = static_cast<uint32_t*>(pl.dst[r]) + j * words;
        for (int64_t w = threadIdx.x; w < words; w += blockDim.x) dst[w] = src[w];
    }
}

}  // namespace deepinfer::cuda::kernels
