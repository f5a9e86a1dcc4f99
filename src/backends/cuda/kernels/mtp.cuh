// SPDX-License-Identifier: Apache-2.0
// Device code of the MTP drafter's ops (ops.h "MTP drafting"): row gathers and scatters through
// per-row device pointers (the tap rings), the block's stream input, and draft sampling with
// src/model/draft_sampling.h's arithmetic (every element's exp is the CPU's double exp; every sum runs
// in its blocked order: a thread per block of ids, one thread over the blocks).
#pragma once

#include "backends/cuda/common/device_math.cuh"
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

// Blocks of kDraftSumBlock ids per sum (model/draft_sampling.h): at most this many (vocabularies up to
// kDraftMaxBlocks * kDraftSumBlock ids; the launcher checks).
constexpr int64_t kDraftMaxBlocks = 1024;

// sum_v term(v) over [0, V) in draft_blocked_sum's order: each thread sums whole blocks in id order into
// parts[], thread 0 the blocks in block order. Every thread returns the total; parts[] keeps the blocks'
// sums until the next call.
template <class Term>
__device__ double draft_block_sum(int64_t V, double* parts, double* total_sh, Term term) {
    const int64_t nb = draft_sum_blocks(V);
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
        const int64_t end = V < (b + 1) * kDraftSumBlock ? V : (b + 1) * kDraftSumBlock;
        double s = 0;
        for (int64_t v = b * kDraftSumBlock; v < end; ++v) s += term(v);
        parts[b] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0;
        for (int64_t b = 0; b < nb; ++b) t += parts[b];
        *total_sh = t;
    }
    __syncthreads();
    const double t = *total_sh;
    __syncthreads();  // (parts and the total are reused by the next sum)
    return t;
}

static __global__ void __launch_bounds__(kTopkThreads) draft_sample_kernel(const __grid_constant__ DraftSampleParams p) {
    __shared__ double parts[kDraftMaxBlocks];
    __shared__ double total_sh;
    const int64_t r = blockIdx.x, V = p.vocab;
    const float* l = p.logits + r * V;
    double* q = p.scratch + r * V;
    // std::max_element: the first of the largest (an all -inf row: id 0).
    const BlockArgmax a = block_argmax(l, V);
    int32_t pick = a.index < V ? a.index : 0;
    const double mx = static_cast<double>(l[pick]);
    // The confidence proxy's normalizer (draft_confidence_proxy), when a proxy is wanted.
    double den1 = 1;
    if (p.confidence != nullptr)
        den1 = draft_block_sum(V, parts, &total_sh, [&](int64_t v) { return exp(static_cast<double>(l[v]) - mx); });
    const double t = p.temperature[r];
    if (p.sampled[r] != 0 && t > 0) {
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) q[v] = exp((static_cast<double>(l[v]) - mx) / t);
        __syncthreads();
        const double den = draft_block_sum(V, parts, &total_sh, [&](int64_t v) { return q[v]; });
        float* probs = p.probs + r * V;
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) probs[v] = static_cast<float>(q[v] / den);
        __syncthreads();
        const double total = draft_block_sum(V, parts, &total_sh, [&](int64_t v) { return static_cast<double>(probs[v]); });
        if (threadIdx.x == 0)
            pick = static_cast<int32_t>(draft_inverse_cdf(probs, V, parts, p.uniform[r * p.uniform_stride] * total));
    }
    if (threadIdx.x == 0) {
        p.tokens[r] = pick;
        if (p.confidence != nullptr) p.confidence[r] = static_cast<float>(exp(static_cast<double>(l[pick]) - mx) / den1);
    }
}

}  // namespace deepinfer::cuda::kernels
