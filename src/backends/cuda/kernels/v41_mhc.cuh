// SPDX-License-Identifier: Apache-2.0
// Device code of V4.1's single-pass mHC (model/v41/mhc.cpp): the mixes of a site from the RMS-normalized
// flattened streams (each normalized value x·r, then cpu::dot with the mixing rows), the Sinkhorn comb on
// one warp in the CPU's order per element (hc_comb_warp.cuh), and the collapse with a given pre. One block per token.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/hc_comb_warp.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kV41HcMaxOutputs = 64;  // (2+hc)*hc <= 64: hc <= 6
constexpr int kV41HcMax = 6;
static_assert(kV41HcMax <= kHcCombMax, "the comb warp covers every hc");

// cpu::dot(x·r, w, n) by an 8-thread group (every lane of the group calls it).
__device__ __forceinline__ float scaled_dot_group8(const float* x, float r, const float* w, int64_t n, int lane) {
    float v = 0.0f;
    const int64_t n8 = n - n % 8;
    for (int64_t k = lane; k < n8; k += 8) v = dev::add(v, dev::mul(dev::mul(x[k], r), w[k]));
    v = dev::hsum8(v);
    float t = __shfl_sync(0xFFFFFFFFu, v, 0, 8);
    for (int64_t k = n8; k < n; ++k) t = dev::add(t, dev::mul(dev::mul(x[k], r), w[k]));
    return t;
}

// grid (rows), block 256.
static __global__ void hc_mixes_kernel(const __grid_constant__ HcMixesParams p) {
    __shared__ float mix[kV41HcMaxOutputs], r_sh;
    const int64_t hc = p.hc, D = p.hidden, flat = hc * D, outputs = (2 + hc) * hc, t = blockIdx.x;
    const float* x = p.x + t * flat;
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8, groups = blockDim.x / 8;
    if (threadIdx.x < 32) {
        const float d = dev::dot_group8(x, x, flat, lane);
        if (threadIdx.x == 0) r_sh = 1.0f / sqrtf(dev::add(d / static_cast<float>(flat), p.norm_eps));
    }
    __syncthreads();
    const float r = r_sh;
    for (int64_t base = 0; base < outputs; base += groups) {  // uniform trip count per warp
        const int64_t j = base + group;
        const float d = scaled_dot_group8(x, r, p.fn + (j < outputs ? j : 0) * flat, flat, lane);
        if (lane == 0 && j < outputs) mix[j] = d;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        if (lane < hc) {
            const int64_t j = lane;
            p.pre[t * hc + j] = dev::add(dev::sigmoid(dev::add(dev::mul(mix[j], p.scale[0]), p.base[j])), p.hc_eps);
            p.post[t * hc + j] = 2.0f * dev::sigmoid(dev::add(dev::mul(mix[hc + j], p.scale[1]), p.base[hc + j]));
        }
        // The comb on the warp's lanes (hc_comb_warp.cuh: the CPU's operations per element).
        hc_comb_warp(mix + 2 * hc, p.scale[2], p.base + 2 * hc, static_cast<int>(hc), p.sinkhorn_iters, p.hc_eps,
                     p.comb + t * hc * hc);
    }
    if (!p.collapsed) return;
    const float* cp = p.collapse_pre + t * hc;
    float* out = p.collapsed + t * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < hc; ++j) acc = dev::add(acc, dev::mul(cp[j], x[j * D + d]));
        out[d] = dev::maybe_bf16(acc, p.round_bf16);
    }
}

// grid (rows), block 256.
static __global__ void hc_collapse_kernel(const __grid_constant__ HcCollapseParams p) {
    const int64_t t = blockIdx.x, hc = p.hc, D = p.hidden;
    const float* x = p.x + t * hc * D;
    const float* pre = p.pre + t * hc;
    float* out = p.out + t * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < hc; ++j) acc = dev::add(acc, dev::mul(pre[j], x[j * D + d]));
        out[d] = dev::maybe_bf16(acc, p.round_bf16);
    }
}

}  // namespace deepinfer::cuda::kernels
