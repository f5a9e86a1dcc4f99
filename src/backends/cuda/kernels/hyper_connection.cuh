// SPDX-License-Identifier: Apache-2.0
// Device code of mHC (spec §2.4): HC pre (mixing logits, sigmoid, Sinkhorn, collapse), HC post and the
// HC head. One block per token; mixing logits are cpu::dot products by 8-thread groups (here, or
// before by the staged GEMM across many blocks, which is much faster and bit-identical); the comb's
// softmax and Sinkhorn on one warp, an element per lane, each through the CPU's sequence of operations.
#pragma once

#include <type_traits>

#include "backends/cuda/common/cp_async.cuh"
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
// With `partial` (hc_mix_splitk's planes [splits, rows, outputs + 1]): their sums in plane order, the
// additions of hc_mix_reduce_kernel.
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

// The same partial sums for many rows (the launcher's choice at >= kHcTiledMinRows rows, whole chunks, each warp
// one pass of outputs): a block takes kSubs tiles of 16 rows of one chunk, the warp's weights loaded once, the
// next tile's rows copied (cp.async, two buffers) while the warp computes the current one. The same sums.
// grid (ceil(rows / (16 kSubs)), chunks, 1), block 256, dynamic shared memory hc_tiled_smem_bytes.
constexpr int kHcTileRows = 16;
constexpr int64_t hc_tiled_smem_bytes() { return 2 * kHcTileRows * kHcChunk * 4; }
template <int kSubs>
static __global__ void __launch_bounds__(kHcSplitThreads) hc_mix_partial_tiled_kernel(const __grid_constant__ HcMixSplitKParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    extern __shared__ __align__(16) float hc_tiles[];  // [2][kHcTileRows * kHcChunk]
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * (kHcTileRows * kSubs), c0 = static_cast<int64_t>(blockIdx.y) * kHcChunk;
    auto issue = [&](int sub) {  // tile `sub`'s rows (zeros past the last row) into buffer sub % 2, one commit group
        float* dst = hc_tiles + (sub % 2) * (kHcTileRows * kHcChunk);
        constexpr int kQ = kHcChunk / 4, kPer4 = kHcTileRows * kQ / kHcSplitThreads;
        static_assert(kHcTileRows * kQ % kHcSplitThreads == 0, "whole float4s per thread");
#pragma unroll
        for (int u = 0; u < kPer4; ++u) {
            const int i = static_cast<int>(threadIdx.x) + u * kHcSplitThreads, row = i / kQ, q = i % kQ;
            const int64_t gr = r0 + int64_t(sub) * kHcTileRows + row;
            const bool ok = gr < p.rows;
            dev::cp_async16(dst + row * kHcChunk + q * 4, ok ? p.x + gr * p.flat + c0 + q * 4 : p.x, ok ? 16 : 0);
        }
        dev::cp_async_commit();
    };
    issue(0);
    const int warp = threadIdx.x / 32;
    const int64_t O = p.outputs, first = warp, stride = kHcSplitThreads / 32;
    float w[kHcOutsPerPass][kHcPer];  // (the loads overlap the first tile's copies)
    const int outs = hc_mix_weights(p, first, stride, c0, kHcChunk, w);
    const bool xx = O >= first && (O - first) % stride == 0;
    for (int sub = 0; sub < kSubs; ++sub) {
        const int64_t rb = r0 + int64_t(sub) * kHcTileRows;
        if (rb >= p.rows) break;  // (uniform over the block)
        if (sub + 1 < kSubs && rb + kHcTileRows < p.rows) issue(sub + 1);
        else dev::cp_async_commit();  // an empty group: the wait below counts the same groups
        dev::cp_async_wait<1>();
        __syncthreads();  // tile `sub` landed for every thread
        const int nr = static_cast<int>(p.rows - rb < kHcTileRows ? p.rows - rb : kHcTileRows);
        float* out = p.partial + (static_cast<int64_t>(blockIdx.y) * p.rows + rb) * (O + 1);
        if (outs > 0 || xx)
            hc_mix_rows<kHcTileRows, true>(hc_tiles + (sub % 2) * (kHcTileRows * kHcChunk), nr, kHcChunk, w, first, stride, outs, xx, O, out);
        __syncthreads();  // every warp is done with buffer sub % 2 before tile sub + 2 refills it
    }
    dev::cp_async_wait<0>();
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
        }
    }
    __syncthreads();  // pre is ready
    if (head_block && threadIdx.x < 32) {
        // The comb on the warp's lanes (hc_comb_warp.cuh: the CPU's operations per element).
        hc_comb_warp(mix + 2 * hc, p.scale[2], p.base + 2 * hc, static_cast<int>(hc), p.sinkhorn_iters, p.hc_eps,
                     p.comb + t * hc * hc);
        return;
    }
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
    }
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
