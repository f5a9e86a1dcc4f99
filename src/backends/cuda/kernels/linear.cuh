// SPDX-License-Identifier: Apache-2.0
// Device code of the GEMM y = x · Wᵀ for every stored weight format and of act_quant. One output
// element per 8-thread group: lane j accumulates k = j, j+8, ... (products of x and the decoded weight,
// no FMA), then the lanes combine in cpu::dot's order and the tail is added in order. The arithmetic of
// an element depends only on K, never on the batch, the grid or the tile: batch-invariant by design.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/weight_scale.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kLinearGroups = 8;  // output columns per block (8 lanes each: 64 threads): many blocks even for
                                   // narrow outputs (a 256-expert router fills 32 SMs, not 8)
constexpr int kLinearThreads = kLinearGroups * 8;
constexpr int kLinearRows = 4;     // rows sharing each decoded weight element

using dev::weight_scale;  // (common/weight_scale.cuh)

// W[n, k] as f32 (exactly the CPU's dequantized value).
__device__ __forceinline__ float weight_at(const DeviceLinear& w, int64_t n, int64_t k) {
    const int64_t K = w.in_features;
    switch (w.kind) {
        case WeightKind::kF32: return static_cast<const float*>(w.weight)[n * K + k];
        case WeightKind::kBF16: return dev::bf16_value(static_cast<const uint16_t*>(w.weight)[n * K + k]);
        case WeightKind::kF16: return dev::f16_value(static_cast<const uint16_t*>(w.weight)[n * K + k]);
        case WeightKind::kFp8Block: {
            const int64_t scale_cols = (K + w.block_cols - 1) / w.block_cols;
            const float s = weight_scale(w, (n / w.block_rows) * scale_cols + k / w.block_cols);
            return dev::mul(dev::e4m3_value(static_cast<const uint8_t*>(w.weight)[n * K + k]), s);
        }
        case WeightKind::kFp4: {
            const uint8_t byte = static_cast<const uint8_t*>(w.weight)[n * (K / 2) + k / 2];
            const float s = dev::e8m0_value(static_cast<const uint8_t*>(w.scale)[n * (K / 32) + k / 32]);
            return dev::mul(dev::e2m1_value((k & 1) ? (byte >> 4) : (byte & 0xF)), s);
        }
    }
    return 0.0f;
}

// grid (ceil(rows / tile), ceil(N / kLinearGroups)), block kLinearThreads. `tile` = kLinearRows for a plain
// linear (rows share the weight), 1 for the grouped form (each row may use another expert).
template <int kTile>
static __global__ void __launch_bounds__(kLinearThreads) linear_kernel(const __grid_constant__ LinearParams p) {
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTile;
    if (p.experts && p.num_experts > 0 && p.row_expert[row0] >= p.num_experts) return;  // another rank's pair
    const DeviceLinear& w0 = p.experts ? p.experts[p.row_expert[row0]] : p.weight;
    const int64_t N = w0.out_features, K = w0.in_features;
    const int64_t n_raw = static_cast<int64_t>(blockIdx.y) * kLinearGroups + group;
    const bool valid_n = n_raw < N;
    const int64_t n = valid_n ? n_raw : N - 1;  // out-of-range groups compute a duplicate and skip the store
    const float* xr[kTile];
    bool valid_r[kTile];
#pragma unroll
    for (int r = 0; r < kTile; ++r) {
        const int64_t row = row0 + r;
        valid_r[r] = row < p.rows;
        const int64_t rr = valid_r[r] ? row : row0;
        xr[r] = p.x + (p.row_src ? static_cast<int64_t>(p.row_src[rr]) : rr) * p.x_ld;
    }
    float acc[kTile];
#pragma unroll
    for (int r = 0; r < kTile; ++r) acc[r] = 0.0f;
    const int64_t K8 = K - K % 8;
    // Each lane sums k = lane, lane + 8, ... in order (the CPU's blocked order). The loads of kUnroll
    // steps are issued before their adds, so a lane has kUnroll loads in flight instead of one (small
    // batches are bound by load latency); the order of the adds is unchanged.
    constexpr int kUnroll = 8;
    int64_t k = lane;
    for (; k + 8 * (kUnroll - 1) < K8; k += 8 * kUnroll) {
        float wv[kUnroll], xv[kTile][kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[u] = weight_at(w0, n, k + 8 * u);
#pragma unroll
        for (int r = 0; r < kTile; ++r)
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) xv[r][u] = xr[r][k + 8 * u];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
            for (int r = 0; r < kTile; ++r) acc[r] = dev::add(acc[r], dev::mul(xv[r][u], wv[u]));
    }
    for (; k < K8; k += 8) {
        const float wv = weight_at(w0, n, k);
#pragma unroll
        for (int r = 0; r < kTile; ++r) acc[r] = dev::add(acc[r], dev::mul(xr[r][k], wv));
    }
#pragma unroll
    for (int r = 0; r < kTile; ++r) {
        float t = dev::hsum8(acc[r]);
        if (lane == 0 && valid_n && valid_r[r]) {
            for (int64_t k = K8; k < K; ++k) t = dev::add(t, dev::mul(xr[r][k], weight_at(w0, n, k)));
            p.y[(row0 + r) * p.y_ld + n] = dev::maybe_bf16(t, p.round_output_bf16);
        }
    }
}

// One warp per p.block-wide block (a power of two <= 128; lane l takes elements l, l + 32, ..), 8 warps per
// block of threads: the block's amax by a warp max (fmaxf ignores NaN in any order: the same amax as any
// reduction tree), then each element quantized and dequantized on its own.
constexpr int kActQuantWarps = 8;
static __global__ void act_quant_kernel(const __grid_constant__ ActQuantParams p) {
    const int64_t per_row = p.cols / p.block;
    const int64_t g = static_cast<int64_t>(blockIdx.x) * kActQuantWarps + threadIdx.x / 32;
    if (g >= p.rows * per_row) return;  // (uniform per warp)
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int64_t base = (g / per_row) * p.cols + (g % per_row) * p.block;
    float v[4];
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int64_t i = lane + 32 * k;
        v[k] = i < p.block ? p.x[base + i] : 0.0f;
        amax = fmaxf(amax, fabsf(v[k]));
    }
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    amax = fmaxf(amax, 1e-4f);
    const dev::Pow2Scale ps = dev::pow2_scale_ceil(dev::mul(amax, 1.0f / 448.0f));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int64_t i = lane + 32 * k;
        if (i < p.block) {
            const float q = dev::round_e4m3(fminf(fmaxf(dev::mul(v[k], ps.inverse), -448.0f), 448.0f));  // (v / scale)
            p.out[base + i] = dev::mul(q, ps.scale);
        }
    }
}

// The vector form of act_quant_kernel, for blocks of 4..128 elements over 16-byte aligned x and out: a thread
// takes two float4s (4 consecutive elements each, in two 128-element warp chunks kThreads·4 elements apart,
// both loads in flight before either reduction), a block's amax is a max over its kBlock / 4 lanes. fmaxf
// ignores NaN in any order and the amax starts from 0 as there, so the same scale; each element is
// quantized and dequantized on its own by the same expression: the same bits, with a quarter of the load
// and store instructions (act_quant_kernel's one float per lane at V4.1's 32-element blocks ran at ~0.8 TB/s).
constexpr int kActQuantVecThreads = 256;
template <int kBlock>
static __global__ void __launch_bounds__(kActQuantVecThreads) act_quant_vec4_kernel(const __grid_constant__ ActQuantParams p) {
    static_assert(kBlock >= 4 && kBlock <= 128 && (kBlock & (kBlock - 1)) == 0, "blocks of 4..128, a power of two");
    const int64_t n4 = p.rows * p.cols / 4;  // float4s (cols is a multiple of the block)
    const int64_t i0 = int64_t(blockIdx.x) * (2 * kActQuantVecThreads) + threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(p.x);
    float4 v[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const int64_t i = i0 + u * kActQuantVecThreads;
        v[u] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const int64_t i = i0 + u * kActQuantVecThreads;
        // A lane past the end takes part in the shuffles with zeros; its whole block is past the end too
        // (n4 is a multiple of kBlock / 4 and blocks of lanes are aligned).
        float amax = fmaxf(fmaxf(fmaxf(fmaxf(0.0f, fabsf(v[u].x)), fabsf(v[u].y)), fabsf(v[u].z)), fabsf(v[u].w));
#pragma unroll
        for (int o = kBlock / 8; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
        amax = fmaxf(amax, 1e-4f);
        const dev::Pow2Scale ps = dev::pow2_scale_ceil(dev::mul(amax, 1.0f / 448.0f));
        auto qd = [&](float e) {
            return dev::mul(dev::round_e4m3(fminf(fmaxf(dev::mul(e, ps.inverse), -448.0f), 448.0f)), ps.scale);
        };
        if (i < n4) reinterpret_cast<float4*>(p.out)[i] = make_float4(qd(v[u].x), qd(v[u].y), qd(v[u].z), qd(v[u].w));
    }
}

}  // namespace deepinfer::cuda::kernels
