// SPDX-License-Identifier: Apache-2.0
// Device code of the per-row ops: weighted RMS norm, the per-head transform (head RMS norm, RoPE or
// inverse RoPE, bf16 rounding, FP8 / Hadamard+FP4 QAT simulations) and the embedding lookup.
// Arithmetic mirrors src/backends/cpu/primitives.cpp and src/model/compressor.cpp operation by operation.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/act_quant_warp.cuh"
#include "backends/cuda/kernels/linear.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// cpu::rms_norm on one row held by a block; warp 0 computes the dot product (tree_sum: the whole block, in
// RmsNormParams::tree_sum's order).
// One block per row. With `staged` (dynamic shared memory of n floats), every thread first copies its
// part of the row into shared memory, so warp 0's ordered dot reads shared memory instead of waiting on
// global loads one step at a time; the arithmetic is the same.
template <bool kStaged>
static __global__ void rms_norm_kernel(const __grid_constant__ RmsNormParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    extern __shared__ float row_sh[];
    __shared__ float r_sh;
    const float* x = p.x + static_cast<int64_t>(blockIdx.x) * p.n;
    float* out = p.out + static_cast<int64_t>(blockIdx.x) * p.n;
    // Rows of 16-byte multiples move as float4, 8 loads in flight per thread (not one load latency per
    // element); the arithmetic of every element is the same either way.
    const bool vec = p.n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                     (p.weight == nullptr || reinterpret_cast<uintptr_t>(p.weight) % 16 == 0);
    const int64_t B = blockDim.x;
    if constexpr (kStaged) {
        if (vec) {
            const int64_t n4 = p.n / 4;
            for (int64_t i0 = threadIdx.x; i0 < n4; i0 += 8 * B) {
                float4 v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u)
                    if (i0 + u * B < n4) v[u] = reinterpret_cast<const float4*>(x)[i0 + u * B];
#pragma unroll
                for (int u = 0; u < 8; ++u)
                    if (i0 + u * B < n4) reinterpret_cast<float4*>(row_sh)[i0 + u * B] = v[u];
            }
        } else {
            for (int64_t i = threadIdx.x; i < p.n; i += B) row_sh[i] = x[i];
        }
        __syncthreads();
        x = row_sh;
    }
    if (p.tree_sum) {  // (uniform)
        __shared__ float warp_sh[1][32];
        float v[1] = {0.0f};
        for (int64_t i = threadIdx.x; i < p.n; i += B) v[0] = dev::add(v[0], dev::mul(x[i], x[i]));
        dev::block_tree_sums(v, warp_sh, B / 32);
        if (threadIdx.x == 0) r_sh = 1.0f / sqrtf(dev::add(v[0] / static_cast<float>(p.n), p.eps));
    } else if (threadIdx.x < 32) {
        const float d = dev::dot_group8(x, x, p.n, threadIdx.x % 8);
        if (threadIdx.x == 0) r_sh = 1.0f / sqrtf(dev::add(d / static_cast<float>(p.n), p.eps));
    }
    __syncthreads();
    const float r = r_sh;
    auto one = [&](float xi, float wi) {
        return dev::maybe_bf16(p.weight ? dev::mul(wi, dev::mul(xi, r)) : dev::mul(xi, r), p.round_bf16);
    };
    if (kStaged && vec) {
        const int64_t n4 = p.n / 4;
        // The optional forms (n % 128 == 0, blockDim a multiple of 32: the launcher checks): float4 i of the
        // row is lane i % 32 of a warp whose 32 float4s are one 128-column block, and the u loop's bounds
        // are warp-uniform, so act_quant_quad's shuffles see whole warps.
        const int64_t row = blockIdx.x;
        const int lanes = static_cast<int>(p.q_block / 4);
        for (int64_t i0 = threadIdx.x; i0 < n4; i0 += 4 * B) {
            float4 w[4];
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (i0 + u * B < n4) w[u] = p.weight ? reinterpret_cast<const float4*>(p.weight)[i0 + u * B] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (i0 + u * B < n4) {
                    const int64_t i = i0 + u * B;
                    const float4 xv = reinterpret_cast<const float4*>(x)[i];
                    const float4 y = make_float4(one(xv.x, w[u].x), one(xv.y, w[u].y), one(xv.z, w[u].z), one(xv.w, w[u].w));
                    reinterpret_cast<float4*>(out)[i] = y;
                    if (p.q) {  // act_quant_fp8_kernel's codes and scales of the block
                        const dev::Fp8Quad o = dev::act_quant_quad(y, lanes);
                        reinterpret_cast<uint32_t*>(p.q + row * p.n)[i] = o.packed;
                        if (static_cast<int>(i % 32) % lanes == 0) p.q_scale[row * (p.n / p.q_block) + 4 * i / p.q_block] = o.scale;
                    }
                    auto b = [](float v) { return __float_as_uint(dev::round_bf16(v)) >> 16; };  // to_bf16_kernel's bits
                    if (p.out_bf16)
                        reinterpret_cast<uint2*>(p.out_bf16 + row * p.n)[i] = make_uint2(b(y.x) | (b(y.y) << 16), b(y.z) | (b(y.w) << 16));
                    if (p.out_bf16_qat) {  // act_quant_dequant's values per 32 columns (8 lanes), then those bits
                        const float4 z = dev::act_dequant_quad(y, 8);
                        reinterpret_cast<uint2*>(p.out_bf16_qat + row * p.n)[i] =
                            make_uint2(b(z.x) | (b(z.y) << 16), b(z.z) | (b(z.w) << 16));
                    }
                }
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < p.n; i += B) out[i] = one(x[i], p.weight ? p.weight[i] : 0.0f);
}

// The largest |x| (or 0) of element i = b + lane and b + 32 + lane (when below e) over the warp: fmaxf from 0
// is order-free (NaN never wins, -0 counts as 0), so the butterfly equals a sequential scan from 0.
__device__ __forceinline__ float warp_abs_max(const float* x, int64_t b, int64_t e, int per_lane) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    float m = 0;
    for (int u = 0; u < per_lane; ++u)
        if (b + u * 32 + lane < e) m = fmaxf(m, fabsf(x[b + u * 32 + lane]));
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    return m;
}

// FP8 simulation of x[0, nope) in blocks of 64, on shared memory, by a whole warp: per block the amax over
// the warp (two elements per lane), then every element by its lane: each element's operations are those of
// a sequential scan.
__device__ __forceinline__ void fp8_simulate_nope_warp(float* x, int64_t nope) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    for (int64_t b = 0; b < nope; b += 64) {
        const int64_t e = b + 64 < nope ? b + 64 : nope;
        const float amax = warp_abs_max(x, b, e, 2);
        const dev::Pow2Scale s = dev::pow2_scale_ceil(dev::mul(fmaxf(amax, 1e-4f), 1.0f / 448.0f));
        for (int64_t i = b + lane; i < e; i += 32)
            x[i] = dev::round_bf16(dev::mul(dev::round_e4m3(fminf(fmaxf(dev::mul(x[i], s.inverse), -448.0f), 448.0f)), s.scale));
    }
    __syncwarp();
}

// hadamard_fp4_warp for dim = 32·kPer in registers: lane l holds elements l + 32k (k < kPer), so the stages
// h < 32 pair lanes l and l ^ h (a shuffle) and the stages h >= 32 pair registers k and k ^ (h / 32); each
// pair's two results are the same expressions (a + b, a + -b) in the same stage order, and block k of 32 is
// register k across the warp (its amax a butterfly of fmaxf, exact in any order): the same bits as the
// shared-memory form, without its 2·dim loads and stores per stage.
template <int kPer>
__device__ __forceinline__ void hadamard_fp4_regs(float* x) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    __syncwarp();
    float r[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) r[k] = x[32 * k + lane];
#pragma unroll
    for (int h = 1; h < 32; h *= 2) {
        const bool upper = (lane & h) != 0;  // this lane holds the pair's second element
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const float other = __shfl_xor_sync(0xFFFFFFFFu, r[k], h);
            r[k] = upper ? dev::add(other, -r[k]) : dev::add(r[k], other);
        }
    }
#pragma unroll
    for (int kk = 1; kk < kPer; kk *= 2)
#pragma unroll
        for (int k = 0; k < kPer; ++k)
            if ((k & kk) == 0) {
                const float a = r[k], b = r[k + kk];
                r[k] = dev::add(a, b);
                r[k + kk] = dev::add(a, -b);
            }
    const float scale = 1.0f / sqrtf(static_cast<float>(32 * kPer));
#pragma unroll
    for (int k = 0; k < kPer; ++k) r[k] = dev::round_bf16(dev::mul(r[k], scale));
    float amax[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) amax[k] = fabsf(r[k]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
#pragma unroll
        for (int k = 0; k < kPer; ++k) amax[k] = fmaxf(amax[k], __shfl_xor_sync(0xFFFFFFFFu, amax[k], o));
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const dev::Pow2Scale s = dev::pow2_scale_ceil(dev::mul(fmaxf(amax[k], 6.0f * dev::exp2i(-126)), 1.0f / 6.0f));
        x[32 * k + lane] = dev::round_bf16(dev::mul(dev::round_e2m1(fminf(fmaxf(dev::mul(r[k], s.inverse), -6.0f), 6.0f)), s.scale));
    }
    __syncwarp();
}

// Walsh-Hadamard (natural order, / sqrt(dim)), bf16, then FP4 per 32: compressor.cpp's hadamard_fp4_simulate.
// dim a power of two (the launchers check): a pair's indices by shifts and masks, not 64-bit divisions by h;
// dims 32-256 in registers (hadamard_fp4_regs).
__device__ __forceinline__ void hadamard_fp4_warp(float* x, int64_t dim) {
    switch (dim) {
        case 32: return hadamard_fp4_regs<1>(x);
        case 64: return hadamard_fp4_regs<2>(x);
        case 128: return hadamard_fp4_regs<4>(x);
        case 256: return hadamard_fp4_regs<8>(x);
        default: break;
    }
    const int half = static_cast<int>(dim / 2);
    for (int lh = 0; (1 << lh) < dim; ++lh) {
        const int h = 1 << lh;
        __syncwarp();
        for (int pair = static_cast<int>(threadIdx.x % 32); pair < half; pair += 32) {
            const int j = ((pair >> lh) << (lh + 1)) + (pair & (h - 1));  // (pair / h)·2h + pair % h
            const float a = x[j], b = x[j + h];
            x[j] = dev::add(a, b);
            x[j + h] = dev::add(a, -b);
        }
    }
    __syncwarp();
    const float scale = 1.0f / sqrtf(static_cast<float>(dim));
    for (int64_t i = threadIdx.x % 32; i < dim; i += 32) x[i] = dev::round_bf16(dev::mul(x[i], scale));
    __syncwarp();
    // FP4 per block of 32: the block's amax over the warp (one element per lane), then each lane its element.
    const int lane = static_cast<int>(threadIdx.x % 32);
    for (int64_t b = 0; b < dim; b += 32) {
        const int64_t e = b + 32 < dim ? b + 32 : dim;
        const float amax = warp_abs_max(x, b, e, 1);
        const dev::Pow2Scale s = dev::pow2_scale_ceil(dev::mul(fmaxf(amax, 6.0f * dev::exp2i(-126)), 1.0f / 6.0f));
        if (b + lane < e)
            x[b + lane] = dev::round_bf16(dev::mul(dev::round_e2m1(fminf(fmaxf(dev::mul(x[b + lane], s.inverse), -6.0f), 6.0f)), s.scale));
    }
    __syncwarp();
}

// RoPE (interleaved pairs of the trailing rope_dim dims) of one head in shared memory by a warp.
__device__ __forceinline__ void rope_warp(float* x, int64_t dim, int64_t rope_dim, const float* cs, bool inverse) {
    float* r = x + (dim - rope_dim);
    for (int64_t i = threadIdx.x % 32; i < rope_dim / 2; i += 32) dev::rope_pair(r, static_cast<int>(i), cs, inverse);
    __syncwarp();
}

// One warp per (row, head), kRopeWarps heads of a row per block; dynamic shared memory: dim floats per warp.
constexpr int kRopeWarps = 4;
static __global__ void rope_rows_kernel(const __grid_constant__ RopeRowsParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    extern __shared__ __align__(16) float rope_sh[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t row = blockIdx.x, head = static_cast<int64_t>(blockIdx.y) * kRopeWarps + warp;
    if (head >= p.heads) return;  // whole warps
    float* sh = rope_sh + warp * p.dim;
    float* g = p.x + (row * p.heads + head) * p.dim;
    // float4 copies with 4 loads per lane in flight where the rows are 16-byte aligned (a warp per head
    // is bound by load latency); else a float at a time.
    const bool vec = p.dim % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
    const int64_t n4 = p.dim / 4;
    if (vec) {
        for (int64_t i0 = lane; i0 < n4; i0 += 4 * 32) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u)
                v[u] = i0 + u * 32 < n4 ? reinterpret_cast<const float4*>(g)[i0 + u * 32] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (i0 + u * 32 < n4) reinterpret_cast<float4*>(sh)[i0 + u * 32] = v[u];
        }
    } else {
        for (int64_t i = lane; i < p.dim; i += 32) sh[i] = g[i];
    }
    __syncwarp();
    if (p.head_norm == HeadNorm::kF32) {
        const float d = dev::dot_group8(sh, sh, p.dim, lane % 8);
        const float r = 1.0f / sqrtf(dev::add(d / static_cast<float>(p.dim), p.eps));
        __syncwarp();
        // (rms_norm_kernel's arithmetic: the same dot, r, products and rounding)
        const float* w = p.head_norm_weight;
        for (int64_t i = lane; i < p.dim; i += 32)
            sh[i] = dev::maybe_bf16(w ? dev::mul(w[i], dev::mul(sh[i], r)) : dev::mul(sh[i], r), p.head_norm_round_bf16);
    } else if (p.head_norm == HeadNorm::kBf16Arith) {
        float r = 0, sum = 0;
        if (p.tree_sum) {  // fast mode: lane-strided partial sums, then a butterfly (equal in every lane)
            for (int64_t i = lane; i < p.dim; i += 32) sum = dev::add(sum, dev::round_bf16(dev::mul(sh[i], sh[i])));
            for (int o = 16; o > 0; o /= 2) sum = dev::add(sum, __shfl_xor_sync(0xFFFFFFFFu, sum, o));
        } else if (lane == 0) {
            for (int64_t i = 0; i < p.dim; ++i) sum = dev::add(sum, dev::round_bf16(dev::mul(sh[i], sh[i])));
        }
        if (lane == 0) {
            const float mean = dev::round_bf16(sum / static_cast<float>(p.dim));
            r = dev::round_bf16(1.0f / sqrtf(dev::round_bf16(dev::add(mean, p.eps))));
        }
        r = __shfl_sync(0xFFFFFFFFu, r, 0);
        for (int64_t i = lane; i < p.dim; i += 32) sh[i] = dev::round_bf16(dev::mul(sh[i], r));
    }
    __syncwarp();
    if (p.rope_dim > 0) {
        const int64_t pos = p.positions ? p.positions[row] : row * p.position_scale + p.position_offset;
        rope_warp(sh, p.dim, p.rope_dim, p.cos_sin + pos * p.rope_dim, p.inverse);
        if (p.round_rope_dims)
            for (int64_t i = p.dim - p.rope_dim + lane; i < p.dim; i += 32) sh[i] = dev::round_bf16(sh[i]);
    }
    if (p.round_all)
        for (int64_t i = lane; i < p.dim; i += 32) sh[i] = dev::round_bf16(sh[i]);
    __syncwarp();
    if (p.qat == Qat::kFp8Nope) fp8_simulate_nope_warp(sh, p.dim - p.rope_dim);
    else if (p.qat == Qat::kHadamardFp4) hadamard_fp4_warp(sh, p.dim);
    __syncwarp();
    if (p.out_bf16) {  // bf16 values (rope_rows checks): their high halves, exact
        uint16_t* o = p.out_bf16 + (row * p.heads + head) * p.dim;
        if (vec && reinterpret_cast<uintptr_t>(p.out_bf16) % 8 == 0) {
            for (int64_t i = lane; i < n4; i += 32) {
                const float4 v = reinterpret_cast<const float4*>(sh)[i];
                reinterpret_cast<uint2*>(o)[i] = make_uint2(__byte_perm(__float_as_uint(v.x), __float_as_uint(v.y), 0x7632u),
                                                            __byte_perm(__float_as_uint(v.z), __float_as_uint(v.w), 0x7632u));
            }
        } else {
            for (int64_t i = lane; i < p.dim; i += 32) o[i] = static_cast<uint16_t>(__float_as_uint(sh[i]) >> 16);
        }
    } else if (vec) {
        for (int64_t i = lane; i < n4; i += 32) reinterpret_cast<float4*>(g)[i] = reinterpret_cast<const float4*>(sh)[i];
    } else {
        for (int64_t i = lane; i < p.dim; i += 32) g[i] = sh[i];
    }
}

// grid (rows, column blocks), block 256: x[t, j, :] = embed[token[t]] for each stream; block y the
// columns y, y + gridDim.y·256, ... in steps of 256.
static __global__ void embed_kernel(const __grid_constant__ EmbedParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t t = blockIdx.x, D = p.table.in_features;
    const int64_t tok = p.tokens[t];
    for (int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; d < D; d += static_cast<int64_t>(gridDim.y) * blockDim.x) {
        const float v = dev::maybe_bf16(weight_at(p.table, tok, d), p.round_bf16);
        for (int64_t j = 0; j < p.hc; ++j) p.x[(t * p.hc + j) * D + d] = v;
    }
}

}  // namespace deepinfer::cuda::kernels
