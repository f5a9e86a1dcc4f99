// SPDX-License-Identifier: Apache-2.0
// The score and softmax stages shared by the sink-attention kernels that run one block per (row, head) in
// the CPU's arithmetic (DSpark attention, dspark.cuh; V4.1's reference sparse attention, v41_attention.cuh).
#pragma once

#include <cstdint>

#include "backends/cuda/common/device_math.cuh"

namespace deepinfer::cuda::kernels {

// sc[j] = scale · (q · key(j, ·)) for the nc candidates: 8 lanes per candidate (lane l sums elements
// l, l + 8, ..., then hsum8, the tail past a multiple of 8 added in order), a uniform trip count per warp.
// Ends with the block synchronized.
template <class Key>
__device__ __forceinline__ void sink_scores(const float* q, const Key& key, int64_t nc, int64_t Dh, float scale,
                                            float* sc) {
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8;
    for (int64_t base = 0; base < nc; base += blockDim.x / 8) {  // uniform trip count per warp
        const int64_t j = base + group < nc ? base + group : 0;
        float v = 0.0f;
        const int64_t n8 = Dh - Dh % 8;
        for (int64_t k = lane; k < n8; k += 8) v = dev::add(v, dev::mul(q[k], key(j, k)));
        v = dev::hsum8(v);
        float t = __shfl_sync(0xFFFFFFFFu, v, 0, 8);
        for (int64_t k = n8; k < Dh; ++k) t = dev::add(t, dev::mul(q[k], key(j, k)));
        if (lane == 0 && base + group < nc) sc[base + group] = dev::mul(t, scale);
    }
    __syncthreads();
}

// In place sc[j] = exp(sc[j] - m) with m = max(sink, scores) (thread 0, in j order); returns the
// denominator exp(sink - m) + the sum of sc in j order (thread 0), the same on every thread. mx_sh and
// den_sh: the caller's shared floats. Ends with the block synchronized.
__device__ __forceinline__ float sink_softmax_exp(float* sc, int64_t nc, float sink, float* mx_sh, float* den_sh) {
    if (threadIdx.x == 0) {
        float mx = sink;
        for (int64_t j = 0; j < nc; ++j) mx = fmaxf(mx, sc[j]);
        *mx_sh = mx;
    }
    __syncthreads();
    const float mx = *mx_sh;
    for (int64_t j = threadIdx.x; j < nc; j += blockDim.x) sc[j] = dev::exp_f32(dev::add(sc[j], -mx));
    __syncthreads();
    if (threadIdx.x == 0) {
        float den = dev::exp_f32(dev::add(sink, -mx));
        for (int64_t j = 0; j < nc; ++j) den = dev::add(den, sc[j]);
        *den_sh = den;
    }
    __syncthreads();
    return *den_sh;
}

}  // namespace deepinfer::cuda::kernels
