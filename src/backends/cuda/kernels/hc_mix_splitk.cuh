// SPDX-License-Identifier: Apache-2.0
// Device code of the fast mode's mHC mixing logits split over K (HcMixSplitKParams, launch/rows.cu's
// hc_mix_splitk): per fixed 512-wide chunk of the flattened streams, each (row, output) a partial dot
// product, written as partial planes [chunks, rows, outputs + 1] that hc_mix_reduce_kernel (or hc_pre /
// hc_head themselves) sum in chunk order: deterministic, independent of the batch. Here the shapes the
// tensor-core kernel (hc_mix_mma.cuh) does not take: a lane-strided f32 FMA sum and a butterfly.
#pragma once

#include <type_traits>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// The fast mode's split-K mixing logits (HcMixSplitKParams). Block: 8 warps over kRows rows and one
// chunk of K; warp w of output group z takes outputs 8z + w, 8z + w + 8·groups, ... (output `outputs`
// is dot(x, x)). An element's partial sum is lane-strided FMAs (lane l: k = l, l + 32, ... in order)
// then a butterfly: the same for any kRows and grid (grid (ceil(rows / kRows), chunks, output groups)).
constexpr int kHcChunk = 512;
constexpr int kHcSplitThreads = 256;
constexpr int kHcOutsPerPass = 3;  // outputs per warp and pass (hc = 4: 24 logits over 8 warps, 3 each)
constexpr int kHcPer = kHcChunk / 32;  // a chunk's elements per lane
// A warp's partial sums of rows [0, nr) of x_s (kRows rows of one chunk, zero past nr; len elements): outputs
// o0 + j·stride for j < outs with weights w (lane l holds k = l + 32 i), and dot(x, x) as output O when xx;
// written at out (the chunk's plane at the block's first row). Every (row, output) sum: lane l FMAs k = l,
// l + 32, ... (k < len) from 0, then the butterfly; kGroup rows are interleaved (the extra rows past nr are
// computed on zeros, not stored) with kHcOutsPerPass outputs (+ dot(x, x)), so their chains and shuffles
// overlap. kFull: len == kHcChunk.
template <int kRows, bool kFull>
__device__ __forceinline__ void hc_mix_rows(const float* x_s, int nr, int len, const float (&w)[kHcOutsPerPass][kHcPer],
                                            int64_t o0, int64_t stride, int outs, bool xx, int64_t O, float* out) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    constexpr int kGroup = kRows >= 4 ? 4 : kRows;
    for (int row0 = 0; row0 < nr; row0 += kGroup) {
        float acc[kGroup][kHcOutsPerPass + 1];
#pragma unroll
        for (int g = 0; g < kGroup; ++g)
#pragma unroll
            for (int j = 0; j <= kHcOutsPerPass; ++j) acc[g][j] = 0.0f;
#pragma unroll
        for (int i = 0; i < kHcPer; ++i) {
            if (kFull || lane + 32 * i < len) {
#pragma unroll
                for (int g = 0; g < kGroup; ++g) {
                    const float xv = x_s[(row0 + g) * kHcChunk + lane + 32 * i];
#pragma unroll
                    for (int j = 0; j < kHcOutsPerPass; ++j) acc[g][j] = fmaf(xv, w[j][i], acc[g][j]);
                    if (xx) acc[g][kHcOutsPerPass] = fmaf(xv, xv, acc[g][kHcOutsPerPass]);
                }
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2)
#pragma unroll
            for (int g = 0; g < kGroup; ++g)
#pragma unroll
                for (int j = 0; j <= kHcOutsPerPass; ++j)
                    if (j < kHcOutsPerPass || xx) acc[g][j] += __shfl_xor_sync(0xFFFFFFFFu, acc[g][j], off);
        if (lane == 0)
#pragma unroll
            for (int g = 0; g < kGroup; ++g) {
                if (row0 + g >= nr) break;
#pragma unroll
                for (int j = 0; j < kHcOutsPerPass; ++j)
                    if (j < outs) out[(row0 + g) * (O + 1) + o0 + j * stride] = acc[g][j];
                if (xx) out[(row0 + g) * (O + 1) + O] = acc[g][kHcOutsPerPass];
            }
    }
}

// The weights of the warp's outputs o0 + j·stride (j < kHcOutsPerPass, those < O; zero else) in chunk c0 of len
// elements, lane l holding k = l + 32 i; returns how many are < O.
__device__ __forceinline__ int hc_mix_weights(const HcMixSplitKParams& p, int64_t o0, int64_t stride, int64_t c0, int len,
                                              float (&w)[kHcOutsPerPass][kHcPer]) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    int outs = 0;
#pragma unroll
    for (int j = 0; j < kHcOutsPerPass; ++j) {
        const int64_t o = o0 + j * stride;
        outs += o < p.outputs ? 1 : 0;
#pragma unroll
        for (int i = 0; i < kHcPer; ++i)
            w[j][i] = o < p.outputs && lane + 32 * i < len ? p.fn[o * p.flat + c0 + lane + 32 * i] : 0.0f;
    }
    return outs;
}

template <int kRows>
static __global__ void __launch_bounds__(kHcSplitThreads) hc_mix_partial_kernel(const __grid_constant__ HcMixSplitKParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    __shared__ __align__(16) float x_s[kRows * kHcChunk];
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows, c0 = static_cast<int64_t>(blockIdx.y) * kHcChunk;
    const int len = static_cast<int>(p.flat - c0 < kHcChunk ? p.flat - c0 : kHcChunk);
    const int nr = static_cast<int>(p.rows - r0 < kRows ? p.rows - r0 : kRows);
    if (len == kHcChunk && p.flat % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0) {
        // Whole chunk: every thread's float4 loads issued before any store (a block is bound by load
        // latency; one float at a time left x's bytes mostly idle).
        constexpr int kQ = kHcChunk / 4, kPer = (kRows * kQ + kHcSplitThreads - 1) / kHcSplitThreads;
        float4 v[kPer];
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
            const int i = static_cast<int>(threadIdx.x) + u * kHcSplitThreads, row = i / kQ;
            v[u] = i < kRows * kQ && row < nr ? *reinterpret_cast<const float4*>(p.x + (r0 + row) * p.flat + c0 + (i % kQ) * 4)
                                              : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
            const int i = static_cast<int>(threadIdx.x) + u * kHcSplitThreads;
            if (i < kRows * kQ) *reinterpret_cast<float4*>(x_s + (i / kQ) * kHcChunk + (i % kQ) * 4) = v[u];
        }
    } else {
        for (int i = threadIdx.x; i < kRows * len; i += kHcSplitThreads) {
            const int row = i / len, k = i % len;
            x_s[row * kHcChunk + k] = row < nr ? p.x[(r0 + row) * p.flat + c0 + k] : 0.0f;
        }
    }
    __syncthreads();
    const int warp = threadIdx.x / 32;
    const int64_t O = p.outputs;
    constexpr int kWarps = kHcSplitThreads / 32;
    const int64_t first = static_cast<int64_t>(blockIdx.z) * kWarps + warp, stride = static_cast<int64_t>(gridDim.z) * kWarps;
    float* out = p.partial + (static_cast<int64_t>(blockIdx.y) * p.rows + r0) * (O + 1);
    // dot(x, x), output O: by the warp whose stride reaches it (in its first pass when it has weighted outputs).
    const bool xx_here = O >= first && (O - first) % stride == 0;
    auto pass = [&](const float (&w)[kHcOutsPerPass][kHcPer], int64_t o0, int outs, bool xx) {
        if (len == kHcChunk) hc_mix_rows<kRows, true>(x_s, nr, len, w, o0, stride, outs, xx, O, out);
        else hc_mix_rows<kRows, false>(x_s, nr, len, w, o0, stride, outs, xx, O, out);
    };
    // The warp's weighted outputs (o < O), kHcOutsPerPass at a time: their weights of this chunk in registers,
    // so each x element read from shared memory feeds kHcOutsPerPass FMAs.
    for (int64_t o0 = first; o0 < O; o0 += kHcOutsPerPass * stride) {
        float w[kHcOutsPerPass][kHcPer];
        const int outs = hc_mix_weights(p, o0, stride, c0, len, w);
        pass(w, o0, outs, xx_here && o0 == first);
    }
    if (xx_here && first >= O) {  // a warp without weighted outputs: dot(x, x) alone
        float w[kHcOutsPerPass][kHcPer];
        hc_mix_weights(p, O, stride, c0, 0, w);  // (all zero)
        pass(w, O, 0, true);
    }
}

// grid ceil(rows * (outputs + 1) / 256), block 256: the chunks' partial sums in chunk order.
static __global__ void hc_mix_reduce_kernel(const __grid_constant__ HcMixSplitKParams p, int64_t splits) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t n = p.rows * (p.outputs + 1), e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= n) return;
    float sum = 0.0f;
    int64_t c = 0;
    for (; c + 8 <= splits; c += 8) {  // 8 loads in flight, summed in chunk order
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = p.partial[(c + u) * n + e];
#pragma unroll
        for (int u = 0; u < 8; ++u) sum += v[u];
    }
    for (; c < splits; ++c) sum += p.partial[c * n + e];
    p.mix[e] = sum;
}

}  // namespace deepinfer::cuda::kernels
