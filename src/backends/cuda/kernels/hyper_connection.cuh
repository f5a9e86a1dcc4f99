// SPDX-License-Identifier: Apache-2.0
// Device code of mHC (spec §2.4): HC pre (mixing logits, sigmoid, Sinkhorn, collapse), HC post and the
// HC head. One block per token; mixing logits are cpu::dot products by 8-thread groups (here, or
// before by the staged GEMM across many blocks, which is much faster and bit-identical); the comb's
// softmax and Sinkhorn on one warp, an element per lane, each through the CPU's sequence of operations.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/hc_comb_warp.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kHcMaxOutputs = 64;  // (2+hc)*hc <= 64: hc <= 6
constexpr int kHcMax = 6;
static_assert(kHcMax <= kHcCombMax, "the comb warp covers every hc");

// mix[j] = dot(x, fn[j]) for j < outputs and xx = dot(x, x); written to shared memory.
__device__ __forceinline__ void hc_mix_dots(const float* x, const float* fn, int64_t outputs, int64_t flat, float* mix,
                                            float* xx) {
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8, groups = blockDim.x / 8;
    // Uniform trip count per warp: every lane of a warp takes part in each dot_group8's shuffles.
    for (int64_t base = 0; base <= outputs; base += groups) {
        const int64_t j = base + group;
        const float d = dev::dot_group8(x, j < outputs ? fn + j * flat : x, flat, lane);
        if (lane == 0 && j <= outputs) {
            if (j < outputs) mix[j] = d;
            else *xx = d;
        }
    }
    __syncthreads();
}

// The mixing logits of token t: from `staged` ([rows, outputs + 1], the staged GEMM's, bit-identical)
// when given, else computed by hc_mix_dots.
// With `partial` (hc_mix_splitk's planes [splits, rows, outputs + 1], hc_mix_splitk.cuh): their sums in plane
// order, the additions of hc_mix_reduce_kernel.
__device__ __forceinline__ void hc_mix(const float* x, const float* fn, const float* staged, int64_t t, int64_t outputs,
                                       int64_t flat, float* mix, float* xx, const float* partial = nullptr,
                                       int64_t splits = 0, int64_t rows = 0) {
    if (partial != nullptr) {
        const int64_t n = rows * (outputs + 1);
        for (int64_t j = threadIdx.x; j <= outputs; j += blockDim.x) {
            const float* src = partial + t * (outputs + 1) + j;
            float sum = 0.0f;
            int64_t c = 0;
            for (; c + 8 <= splits; c += 8) {  // 8 loads in flight, summed in plane order
                float v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) v[u] = src[(c + u) * n];
#pragma unroll
                for (int u = 0; u < 8; ++u) sum += v[u];
            }
            for (; c < splits; ++c) sum += src[c * n];
            if (j < outputs) mix[j] = sum;
            else *xx = sum;
        }
        __syncthreads();
        return;
    }
    if (staged == nullptr) return hc_mix_dots(x, fn, outputs, flat, mix, xx);
    for (int64_t j = threadIdx.x; j <= outputs; j += blockDim.x) {
        const float v = staged[t * (outputs + 1) + j];
        if (j < outputs) mix[j] = v;
        else *xx = v;
    }
    __syncthreads();
}

// grid (rows, column blocks), block 256. Block y collapses columns [y·span, (y+1)·span) of the token
// (span = ceil(D / column blocks), a multiple of 4); block 0 also writes post and runs the Sinkhorn
// for comb on warp 0 (hc_comb_warp) while its other warps collapse (the collapse needs only pre). Column blocks only
// with staged mixing logits. No value depends on the grid or on which thread computes it.
static __global__ void hc_pre_kernel(const __grid_constant__ HcPreParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    __shared__ float mix[kHcMaxOutputs], pre[kHcMax], xx;
    const int64_t hc = p.hc, D = p.hidden, flat = hc * D, outputs = (2 + hc) * hc, t = blockIdx.x;
    const float* x = p.x + t * flat;
    hc_mix(x, p.fn, p.mix, t, outputs, flat, mix, &xx, p.mix_partial, p.mix_splits, p.rows);
    const bool head_block = blockIdx.y == 0;
    // Warp 0: the same operations as the CPU's one loop, spread over lanes wherever the elements are
    // independent (every element sees the same sequence of operations).
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        const float r = 1.0f / sqrtf(dev::add(xx / static_cast<float>(flat), p.norm_eps));
        for (int64_t j = lane; j < outputs; j += 32) mix[j] = dev::mul(mix[j], r);
        __syncwarp();
        if (lane < hc) {
            const int64_t j = lane;
            pre[j] = dev::add(dev::sigmoid(dev::add(dev::mul(mix[j], p.scale[0]), p.base[j])), p.hc_eps);
            if (head_block) p.post[t * hc + j] = 2.0f * dev::sigmoid(dev::add(dev::mul(mix[hc + j], p.scale[1]), p.base[hc + j]));
            if (head_block && p.pre_out) p.pre_out[t * hc + j] = pre[j];
            if (p.collapse_pre) pre[j] = p.collapse_pre[t * hc + j];  // (V4.1: the collapse takes the previous site's)
        }
    }
    __syncthreads();  // pre is ready
    if (head_block && threadIdx.x < 32) {
        // The comb on the warp's lanes (hc_comb_warp.cuh: the CPU's operations per element).
        hc_comb_warp(mix + 2 * hc, p.scale[2], p.base + 2 * hc, static_cast<int>(hc), p.sinkhorn_iters, p.hc_eps,
                     p.comb + t * hc * hc);
        return;
    }
    if (!p.collapsed) return;  // (the previous site's hc_post collapsed these streams)
    // Collapse: a = Σ_j pre_j · x_j in stream order, by the block's other threads (all of them in blocks
    // without the Sinkhorn), 4 columns per thread with the hc streams' loads in flight together.
    const int worker = static_cast<int>(threadIdx.x) - (head_block ? 32 : 0);
    const int workers = static_cast<int>(blockDim.x) - (head_block ? 32 : 0);
    const int64_t span = ((D + gridDim.y - 1) / gridDim.y + 3) / 4 * 4;
    const int64_t d_begin = static_cast<int64_t>(blockIdx.y) * span, d_end = d_begin + span < D ? d_begin + span : D;
    float* a = p.collapsed + t * D;
    float pr[kHcMax];
#pragma unroll
    for (int j = 0; j < kHcMax; ++j) pr[j] = j < hc ? pre[j] : 0.f;
    const bool vec = D % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.collapsed) % 16 == 0;
    if (vec) {
        for (int64_t d = d_begin + 4 * static_cast<int64_t>(worker); d < d_end; d += 4 * static_cast<int64_t>(workers)) {
            float4 v[kHcMax];
#pragma unroll
            for (int j = 0; j < kHcMax; ++j)
                if (j < hc) v[j] = *reinterpret_cast<const float4*>(x + j * D + d);
            float s4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int j = 0; j < kHcMax; ++j)
                if (j < hc) {
                    s4[0] = dev::add(s4[0], dev::mul(pr[j], v[j].x));
                    s4[1] = dev::add(s4[1], dev::mul(pr[j], v[j].y));
                    s4[2] = dev::add(s4[2], dev::mul(pr[j], v[j].z));
                    s4[3] = dev::add(s4[3], dev::mul(pr[j], v[j].w));
                }
            *reinterpret_cast<float4*>(a + d) = make_float4(dev::maybe_bf16(s4[0], p.round_bf16), dev::maybe_bf16(s4[1], p.round_bf16),
                                                            dev::maybe_bf16(s4[2], p.round_bf16), dev::maybe_bf16(s4[3], p.round_bf16));
        }
    } else {
        for (int64_t d = d_begin + worker; d < d_end; d += workers) {
            float s = 0;
            for (int64_t j = 0; j < hc; ++j) s = dev::add(s, dev::mul(pr[j], x[j * D + d]));
            a[d] = dev::maybe_bf16(s, p.round_bf16);
        }
    }
}

// grid (rows, hc), block 256.
// HC post: y_k = post_k·o + Σ_j comb[j][k]·x_j (V4.1's mix_first: post_k·o + (Σ_j ...)) per element,
// each thread 4 consecutive elements of every output stream, so the hc input streams and the
// sub-block output are read once per element. grid (rows, ceil(hidden / (4 * blockDim))), block 256;
// hidden % 4 == 0, 16-byte aligned rows.
static __global__ void hc_post_vec4_kernel(const __grid_constant__ HcPostParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t t = blockIdx.x, hc = p.hc, D = p.hidden;
    const int64_t d0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 4;
    if (d0 >= D) return;
    const float* C = p.comb + t * hc * hc;
    const float4 o4 = *reinterpret_cast<const float4*>(p.out + t * D + d0);
    const float o[4] = {o4.x, o4.y, o4.z, o4.w};
    float xv[kHcMax][4];
#pragma unroll
    for (int j = 0; j < kHcMax; ++j) {
        if (j >= hc) break;
        const float4 v = *reinterpret_cast<const float4*>(p.x + (t * hc + j) * D + d0);
        xv[j][0] = v.x, xv[j][1] = v.y, xv[j][2] = v.z, xv[j][3] = v.w;
    }
    // The next site's collapse of the rows written below (hc_pre_kernel's arithmetic: from 0, stream order).
    float cp[kHcMax], c4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < kHcMax; ++j) cp[j] = p.collapse_pre && j < hc ? p.collapse_pre[t * hc + j] : 0.f;
    for (int64_t k = 0; k < hc; ++k) {
        const float pk = p.post[t * hc + k];
        float r[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float s;
            if (p.mix_first) {
                float mixed = 0;
#pragma unroll
                for (int j = 0; j < kHcMax; ++j)
                    if (j < hc) mixed = dev::add(mixed, dev::mul(C[j * hc + k], xv[j][e]));
                s = dev::add(dev::mul(pk, o[e]), mixed);
            } else {
                s = dev::mul(pk, o[e]);
#pragma unroll
                for (int j = 0; j < kHcMax; ++j)
                    if (j < hc) s = dev::add(s, dev::mul(C[j * hc + k], xv[j][e]));
            }
            r[e] = dev::maybe_bf16(s, p.round_bf16);
        }
        *reinterpret_cast<float4*>(p.y + (t * hc + k) * D + d0) = make_float4(r[0], r[1], r[2], r[3]);
        if (p.collapse_pre) {
#pragma unroll
            for (int j = 0; j < kHcMax; ++j)  // (cp[k] from a register: k is a loop variable; keeping every stream's
                if (j == k)                   // rows for one sum after the loop ran ~20% slower: session 43 call 5,
                                              // 523-621 us per 8192-token launch against 440-510)
#pragma unroll
                    for (int e = 0; e < 4; ++e) c4[e] = dev::add(c4[e], dev::mul(cp[j], r[e]));
        }
    }
    if (p.collapse_pre)
        *reinterpret_cast<float4*>(p.collapsed + t * D + d0) = make_float4(dev::maybe_bf16(c4[0], p.round_bf16), dev::maybe_bf16(c4[1], p.round_bf16),
                                                                          dev::maybe_bf16(c4[2], p.round_bf16), dev::maybe_bf16(c4[3], p.round_bf16));
}

static __global__ void hc_head_kernel(const __grid_constant__ HcHeadParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    __shared__ float mix[kHcMaxOutputs], xx;
    const int64_t hc = p.hc, D = p.hidden, flat = hc * D, t = blockIdx.x;
    const float* x = p.x + t * flat;
    hc_mix(x, p.fn, p.mix, t, hc, flat, mix, &xx, p.mix_partial, p.mix_splits, p.rows);
    if (threadIdx.x < hc) {
        const int64_t j = threadIdx.x;
        const float r = 1.0f / sqrtf(dev::add(xx / static_cast<float>(flat), p.norm_eps));
        mix[j] = dev::add(dev::sigmoid(dev::add(dev::mul(dev::mul(mix[j], r), p.scale[0]), p.base[j])), p.hc_eps);
    }
    __syncthreads();
    // grid (rows, column blocks): block y the columns y·256 + i, in steps of gridDim.y·256 (column blocks only
    // with staged or given mixing logits; each block derives the same mix).
    float* y = p.y + t * D;
    for (int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; d < D; d += static_cast<int64_t>(gridDim.y) * blockDim.x) {
        float s = 0;
        for (int64_t j = 0; j < hc; ++j) s = dev::add(s, dev::mul(mix[j], x[j * D + d]));
        y[d] = dev::maybe_bf16(s, p.round_bf16);
    }
}

}  // namespace deepinfer::cuda::kernels
