// SPDX-License-Identifier: Apache-2.0
// Device code of the MTP drafter's ops (ops.h "MTP drafting"): row gathers and scatters through
// per-row device pointers (the tap rings), the block's stream input, and draft sampling with
// src/model/draft_sampling.h's arithmetic (every element's exp is the CPU's double exp; each sum whose
// order decides a result runs on one thread in id order).
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/sampling.cuh"
#include "backends/cuda/ops.h"

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

static __global__ void __launch_bounds__(kTopkThreads) draft_sample_kernel(const __grid_constant__ DraftSampleParams p) {
    __shared__ double den_sh;
    const int64_t r = blockIdx.x, V = p.vocab;
    const float* l = p.logits + r * V;
    double* q = p.scratch + r * V;
    // std::max_element: the first of the largest (an all -inf row: id 0).
    const BlockArgmax a = block_argmax(l, V);
    int32_t pick = a.index < V ? a.index : 0;
    const double mx = static_cast<double>(l[pick]);
    // The confidence proxy's normalizer: sum of exp(l - max) in id order.
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) q[v] = exp(static_cast<double>(l[v]) - mx);
    __syncthreads();
    if (threadIdx.x == 0) {
        double den = 0;
        for (int64_t v = 0; v < V; ++v) den += q[v];
        den_sh = den;
    }
    __syncthreads();
    const double den1 = den_sh;
    const double t = p.temperature[r];
    if (p.sampled[r] != 0 && t > 0) {
        __syncthreads();
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) q[v] = exp((static_cast<double>(l[v]) - mx) / t);
        __syncthreads();
        if (threadIdx.x == 0) {
            double den = 0;
            for (int64_t v = 0; v < V; ++v) den += q[v];
            den_sh = den;
        }
        __syncthreads();
        const double den = den_sh;
        float* probs = p.probs + r * V;
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) probs[v] = static_cast<float>(q[v] / den);
        __syncthreads();
        if (threadIdx.x == 0) {
            double total = 0;
            for (int64_t v = 0; v < V; ++v) total += static_cast<double>(probs[v]);
            double u = p.uniform[r * p.uniform_stride] * total;
            int64_t v = 0;
            for (; v + 1 < V; ++v) {
                if (u < static_cast<double>(probs[v])) break;
                u -= static_cast<double>(probs[v]);
            }
            while (v > 0 && probs[v] == 0) --v;
            pick = static_cast<int32_t>(v);
        }
    }
    if (threadIdx.x == 0) {
        p.tokens[r] = pick;
        p.confidence[r] = static_cast<float>(exp(static_cast<double>(l[pick]) - mx) / den1);
    }
}

}  // namespace deepinfer::cuda::kernels
