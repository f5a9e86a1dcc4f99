// SPDX-License-Identifier: Apache-2.0
// Sums over a row of ids in blocks of kDraftSumBlock (model/draft_sampling.h's order) across the GPU:
// one warp per block of ids, a block's terms summed in id order on one lane (from shared memory), the
// blocks' results combined in block order. Shared by the sampler's untruncated draws (sampling.cuh)
// and the drafters' draft sampling (mtp.cuh).
#pragma once

#include <cmath>
#include <cstdint>

#include "model/draft_sampling.h"

namespace deepinfer::cuda::kernels {

// Warps per thread block of the blocked kernels (one warp per block of ids).
constexpr int kDraftWarps = 4;
// Blocks of ids per row at most (vocabularies up to kDraftMaxBlocks * kDraftSumBlock ids; launchers check).
constexpr int64_t kDraftMaxBlocks = 1024;

// block_argmax's rule: larger value, then lower id (a NaN never wins; none yet: id V).
__device__ inline void argmax_visit(float& best, int64_t& at, float x, int64_t v) {
    if (x > best || (x == best && v < at)) {
        best = x;
        at = v;
    }
}
// Across a warp (the rule is a total order on (value, id) pairs without NaN: any grouping gives the same).
__device__ inline void argmax_warp(float& best, int64_t& at) {
    for (int off = 16; off > 0; off /= 2) {
        const float o = __shfl_xor_sync(0xffffffffu, best, off);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, at, off);
        argmax_visit(best, at, o, oi);
    }
}
// Lane 0: the sum of buf[0, n) in order (the other lanes: 0).
__device__ inline double lane0_sum(const double* buf, int64_t n) {
    double s = 0;
    if (threadIdx.x % 32 == 0)
        for (int64_t i = 0; i < n; ++i) s += buf[i];
    return s;
}


// Warp: the first maximum of block b of l[0, V) (block_argmax's rule; every lane gets it).
__device__ inline void warp_block_argmax(const float* l, int64_t V, int64_t b, float& best, int64_t& at) {
    const int64_t lane = threadIdx.x % 32, v0 = b * kDraftSumBlock;
    const int64_t end = V < v0 + kDraftSumBlock ? V : v0 + kDraftSumBlock;
    float x[kDraftSumBlock / 32];
#pragma unroll
    for (int i = 0; i < kDraftSumBlock / 32; ++i) {  // the loads first
        const int64_t v = v0 + i * 32 + lane;
        x[i] = v < end ? l[v] : -INFINITY;
    }
    best = -INFINITY;
    at = V;
#pragma unroll
    for (int i = 0; i < kDraftSumBlock / 32; ++i)
        if (v0 + i * 32 + lane < end) argmax_visit(best, at, x[i], v0 + i * 32 + lane);
    argmax_warp(best, at);
}
// Warp (every lane calls it, every lane gets it): the sum of buf[0, n) in order, as lane0_sum, from global
// memory: the lanes load 32 terms at once and every lane adds them in order from shuffles (one lane's
// dependent loads of each term took ~40 us over 253 blocks of V4's vocabulary).
__device__ inline double warp_ordered_sum(const double* buf, int64_t n) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    double s = 0;
    for (int64_t i0 = 0; i0 < n; i0 += 32) {
        const double x = i0 + lane < n ? buf[i0 + lane] : 0.0;
        const int m = n - i0 < 32 ? static_cast<int>(n - i0) : 32;
        for (int l = 0; l < m; ++l) s += __shfl_sync(0xffffffffu, x, l);
    }
    return s;
}

// Warp: the sum of term(v) over block b of [0, V) in id order (lane 0 gets it, the others 0). `buf`:
// kDraftSumBlock doubles of the warp's shared memory; every term is computed once, by some lane.
template <class Term>
__device__ inline double warp_block_sum(int64_t V, int64_t b, double* buf, const Term& term) {
    const int64_t lane = threadIdx.x % 32, v0 = b * kDraftSumBlock;
    const int64_t n = (V < v0 + kDraftSumBlock ? V : v0 + kDraftSumBlock) - v0;
    for (int64_t i = lane; i < n; i += 32) buf[i] = term(v0 + i);
    __syncwarp();
    const double s = lane0_sum(buf, n);
    __syncwarp();  // (buf is reused by the warp's next sum)
    return s;
}

}  // namespace deepinfer::cuda::kernels
