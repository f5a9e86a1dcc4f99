// SPDX-License-Identifier: Apache-2.0
// Device sampling, one block per row, reproducing src/engine/sampler.cpp: the probabilities are
// computed in parallel (each element's arithmetic is the CPU's), while every sum whose order decides
// the pick (the normalizer, the top-p cumulative sum, the final walk) runs on one thread in the CPU's
// order. The uniform is the CPU's counter-based splitmix64 stream.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/topk.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

__device__ __forceinline__ uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ double counter_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
    const uint64_t h = splitmix(splitmix(splitmix(seed) ^ stream) ^ counter);
    return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

static __global__ void __launch_bounds__(kTopkThreads) sample_kernel(const __grid_constant__ SampleParams p) {
    __shared__ float mx_sh;
    const int64_t r = blockIdx.x, V = p.vocab;
    const SampleRow& row = p.row[r];
    const float* l = p.logits + (p.logit_row ? static_cast<int64_t>(p.logit_row[r]) : r) * V;
    double* prob = p.scratch + r * V;
    if (row.temperature <= 0) {
        if (threadIdx.x == 0) {
            int32_t chosen = 0;
            for (int64_t v = 1; v < V; ++v)
                if (l[v] > l[chosen]) chosen = static_cast<int32_t>(v);
            p.tokens[r] = chosen;
        }
        return;
    }
    const double inv_t = 1.0 / row.temperature;
    if (row.top_k == 0) {  // untruncated: one pass in id order
        if (threadIdx.x == 0) {
            float mx = l[0];
            for (int64_t v = 1; v < V; ++v) mx = fmaxf(mx, l[v]);
            mx_sh = mx;
        }
        __syncthreads();
        const double mx = mx_sh;
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) prob[v] = exp((static_cast<double>(l[v]) - mx) * inv_t);
        __syncthreads();
        if (threadIdx.x == 0) {
            double total = 0;
            for (int64_t v = 0; v < V; ++v) total += prob[v];
            int64_t n = V;  // up to the last token with a nonzero probability (as the CPU trims)
            while (n > 1 && prob[n - 1] == 0) --n;
            double u = counter_uniform(row.seed, row.stream, row.counter) * total;
            int64_t pick = 0;
            for (; pick + 1 < n; ++pick) {
                if (u < prob[pick]) break;
                u -= prob[pick];
            }
            p.tokens[r] = static_cast<int32_t>(pick);
        }
        return;
    }
    // Top-k candidates (ascending ids), then sorted by (logit desc, id asc) on one thread.
    const int64_t k = row.top_k < V ? row.top_k : V;
    int32_t* cand = p.index_scratch + r * kMaxSampleTopK;
    topk_row(l, V, k, cand);
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int64_t a = 1; a < k; ++a)
        for (int64_t b = a; b > 0; --b) {
            const int32_t x = cand[b], y = cand[b - 1];
            const bool before = l[x] != l[y] ? l[x] > l[y] : x < y;
            if (!before) break;
            cand[b] = y;
            cand[b - 1] = x;
        }
    const double mx = l[cand[0]];
    double den = 0;
    for (int64_t i = 0; i < k; ++i) den += (prob[i] = exp((static_cast<double>(l[cand[i]]) - mx) * inv_t));
    for (int64_t i = 0; i < k; ++i) prob[i] /= den;
    int64_t n = k;
    if (row.top_p < 1.0) {
        double cum = 0;
        int64_t i = 0;
        for (; i < n; ++i) {
            cum += prob[i];
            if (cum >= row.top_p) break;
        }
        n = n < i + 1 ? n : i + 1;
    }
    if (row.min_p > 0.0) {
        const double floor_p = row.min_p * prob[0];
        int64_t i = 1;
        while (i < n && prob[i] >= floor_p) ++i;
        n = i;
    }
    while (n > 1 && prob[n - 1] == 0) --n;  // underflowed tail: never drawn (as on the CPU)
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += prob[i];
    double u = counter_uniform(row.seed, row.stream, row.counter) * total;
    int64_t pick = 0;
    for (; pick + 1 < n; ++pick) {
        if (u < prob[pick]) break;
        u -= prob[pick];
    }
    p.tokens[r] = cand[pick];
}

}  // namespace deepinfer::cuda::kernels
