// SPDX-License-Identifier: Apache-2.0
// Device code of the MTP drafter's ops (ops.h "MTP drafting"): row gathers and scatters through
// per-row device pointers (the tap rings), the block's stream input, and draft sampling with
// src/model/draft_sampling.h's arithmetic (every element's exp is the CPU's double exp; every sum runs
// in its blocked order: a lane per block of ids, one lane over the blocks).
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/blocked_sums.cuh"
#include "backends/cuda/kernels/sampling.cuh"
#include "backends/cuda/ops.h"
#include "model/draft_sampling.h"

namespace deepinfer::cuda::kernels {

static __global__ void gather_row_sources_kernel(const __grid_constant__ RowSourcesParams p) {
    const int64_t r = blockIdx.x;
    const float* src = p.src_ptr[r] ? p.src_ptr[r] : p.base + static_cast<int64_t>(p.base_row[r]) * p.width;
    for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) p.dst[r * p.width + i] = src[i];
}

static __global__ void scatter_row_ptrs_kernel(const __grid_constant__ ScatterRowPtrsParams p) {
    const int64_t r = blockIdx.x;
    float* dst = p.dst_ptr[r];
    if (!dst) return;
    for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) dst[i] = p.src[r * p.width + i];
}

static __global__ void add_streams_kernel(const __grid_constant__ AddStreamsParams p) {
    const int64_t t = blockIdx.x, j = blockIdx.y, D = p.hidden;
    const float* e = p.e + t * D;
    const float* h = p.h + (t * p.hc + j) * D;
    float* x = p.x + (t * p.hc + j) * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) x[d] = dev::maybe_bf16(dev::add(e[d], h[d]), p.round_bf16);
}

// Draft sampling (draft_sample, ops.h) in four kernels over the row's blocks of kDraftSumBlock ids
// (model/draft_sampling.h): one warp per block and kDraftWarps blocks per thread block, so a row of V4's
// 129,280 ids spreads over the whole GPU; every sum runs in draft_blocked_sum's order (a block's terms
// in id order on one lane, from shared memory; the blocks' sums in block order on one lane).
//   1. each block's argmax (the first of the largest, block_argmax's rule);
//   2. the row's argmax from the blocks'; per block the sums of exp(l - max) (the MTP confidence proxy)
//      and, for sampled rows, of q = exp((l - max) / T);
//   3. sampled rows: probs = q / (sum of the blocks' sums), q recomputed (not stored: a [rows, V] f64
//      round trip through memory cost more than the exps), and per block the sum of the stored probs;
//   4. per row the draft: the argmax, or the inverse CDF (the block's probs staged in shared memory),
//      and the confidence proxy.
// (The sampler's untruncated draws run the same way: sampling.cuh.)
// Parts per row, each [blocks] f64: argmax value, argmax id, sum for the proxy, sum of q, sum of probs.
constexpr int64_t kDraftParts = 5;

struct DraftRowParts {
    double *am_val, *am_idx, *conf, *q, *probs;
};
__device__ inline DraftRowParts draft_row_parts(const DraftSampleParams& p, int64_t r) {
    const int64_t nb = draft_sum_blocks(p.vocab);
    double* base = p.parts + r * kDraftParts * nb;
    return {base, base + nb, base + 2 * nb, base + 3 * nb, base + 4 * nb};
}

// The row's argmax from its blocks' (every lane of the calling warp gets it): the id (0 for a row
// without a largest finite-or-infinite value, as block_argmax) and its logit.
__device__ inline int64_t draft_row_argmax(const DraftSampleParams& p, const DraftRowParts& rp, int64_t r, double& mx) {
    const int64_t nb = draft_sum_blocks(p.vocab), lane = threadIdx.x % 32;
    float best = -INFINITY;
    int64_t at = p.vocab;
    for (int64_t b = lane; b < nb; b += 32)
        argmax_visit(best, at, static_cast<float>(rp.am_val[b]), static_cast<int64_t>(rp.am_idx[b]));
    argmax_warp(best, at);
    const int64_t pick = at < p.vocab ? at : 0;
    mx = static_cast<double>(p.logits[r * p.vocab + pick]);
    return pick;
}
// grid (ceil(blocks / kDraftWarps), rows), block 32 * kDraftWarps.
static __global__ void __launch_bounds__(32 * kDraftWarps) draft_argmax_blocks_kernel(const __grid_constant__ DraftSampleParams p) {
    const int64_t r = blockIdx.y;
    const int64_t b = static_cast<int64_t>(blockIdx.x) * kDraftWarps + threadIdx.x / 32;
    if (b >= draft_sum_blocks(p.vocab)) return;
    float best;
    int64_t at;
    warp_block_argmax(p.logits + r * p.vocab, p.vocab, b, best, at);
    if (threadIdx.x % 32 == 0) {
        const DraftRowParts rp = draft_row_parts(p, r);
        rp.am_val[b] = best;
        rp.am_idx[b] = static_cast<double>(at);
    }
}

// grid (ceil(blocks / kDraftWarps), rows), block 32 * kDraftWarps.
static __global__ void __launch_bounds__(32 * kDraftWarps) draft_block_sums_kernel(const __grid_constant__ DraftSampleParams p) {
    __shared__ double buf_sh[kDraftWarps][kDraftSumBlock];
    const int64_t r = blockIdx.y, lane = threadIdx.x % 32, V = p.vocab;
    const int64_t b = static_cast<int64_t>(blockIdx.x) * kDraftWarps + threadIdx.x / 32;
    const double t = p.temperature[r];
    const bool sampled = p.sampled[r] != 0 && t > 0, proxy = p.confidence != nullptr;
    if (b >= draft_sum_blocks(V) || (!sampled && !proxy)) return;
    const DraftRowParts rp = draft_row_parts(p, r);
    double mx = 0;
    draft_row_argmax(p, rp, r, mx);
    const float* l = p.logits + r * V;
    double* buf = buf_sh[threadIdx.x / 32];
    if (proxy) {  // draft_confidence_proxy's normalizer
        const double s = warp_block_sum(V, b, buf, [&](int64_t v) { return exp(static_cast<double>(l[v]) - mx); });
        if (lane == 0) rp.conf[b] = s;
    }
    if (sampled) {
        const double s = warp_block_sum(V, b, buf, [&](int64_t v) { return exp((static_cast<double>(l[v]) - mx) / t); });
        if (lane == 0) rp.q[b] = s;
    }
}

// grid (ceil(blocks / kDraftWarps), rows), block 32 * kDraftWarps: sampled rows only.
static __global__ void __launch_bounds__(32 * kDraftWarps) draft_probs_kernel(const __grid_constant__ DraftSampleParams p) {
    __shared__ double buf_sh[kDraftWarps][kDraftSumBlock];
    const int64_t r = blockIdx.y, lane = threadIdx.x % 32, V = p.vocab, nb = draft_sum_blocks(V);
    const int64_t b = static_cast<int64_t>(blockIdx.x) * kDraftWarps + threadIdx.x / 32;
    if (b >= nb || !(p.sampled[r] != 0 && p.temperature[r] > 0)) return;
    const DraftRowParts rp = draft_row_parts(p, r);
    const double den = warp_ordered_sum(rp.q, nb), t = p.temperature[r];
    double mx = 0;
    draft_row_argmax(p, rp, r, mx);
    const float* l = p.logits + r * V;
    float* probs = p.probs + r * V;
    const double s = warp_block_sum(V, b, buf_sh[threadIdx.x / 32], [&](int64_t v) {
        // q(v) recomputed as the block sums computed it (the same double operations: the same bits)
        const float pr = static_cast<float>(exp((static_cast<double>(l[v]) - mx) / t) / den);
        probs[v] = pr;
        return static_cast<double>(pr);
    });
    if (lane == 0) rp.probs[b] = s;
}

// grid (rows), block 32: the draft and its confidence proxy.
static __global__ void __launch_bounds__(32) draft_pick_kernel(const __grid_constant__ DraftSampleParams p) {
    __shared__ double parts_sh[kDraftMaxBlocks];
    __shared__ float block_sh[kDraftSumBlock];
    const int64_t r = blockIdx.x, lane = threadIdx.x, V = p.vocab, nb = draft_sum_blocks(V);
    const DraftRowParts rp = draft_row_parts(p, r);
    double mx = 0;
    int64_t pick = draft_row_argmax(p, rp, r, mx);
    const double t = p.temperature[r];
    if (p.sampled[r] != 0 && t > 0) {
        for (int64_t b = lane; b < nb; b += 32) parts_sh[b] = rp.probs[b];
        __syncwarp();
        double u = 0;
        int64_t b = 0;
        if (lane == 0) {
            const double total = lane0_sum(parts_sh, nb);
            u = p.uniform[r * p.uniform_stride] * total;
            b = draft_cdf_block(parts_sh, nb, u);
        }
        b = __shfl_sync(0xffffffffu, b, 0);
        const float* probs = p.probs + r * V;
        const int64_t v0 = b * kDraftSumBlock, end = V < v0 + kDraftSumBlock ? V : v0 + kDraftSumBlock;
        for (int64_t v = v0 + lane; v < end; v += 32) block_sh[v - v0] = probs[v];
        __syncwarp();
        if (lane == 0)
            pick = draft_cdf_in_block([&](int64_t v) { return v >= v0 && v < end ? block_sh[v - v0] : probs[v]; }, V, b, u);
    }
    const double den1 = p.confidence != nullptr ? warp_ordered_sum(rp.conf, nb) : 0.0;
    if (lane != 0) return;
    p.tokens[r] = static_cast<int32_t>(pick);
    if (p.confidence != nullptr) {
        p.confidence[r] = static_cast<float>(exp(static_cast<double>(p.logits[r * V + pick]) - mx) / den1);
    }
}

}  // namespace deepinfer::cuda::kernels
