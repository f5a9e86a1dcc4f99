// SPDX-License-Identifier: Apache-2.0
// The sparse sink attention on tensor cores (fast GEMM mode, official numerics), in the form of
// DeepSeek's `sparse_attn` kernel (spec §2.8): per query row, the 64 heads of a block (V4's heads share
// each candidate's K=V row) against candidates in blocks of 64 with an online softmax —
//   s = (q · kv) · scale           bf16 x bf16 on m16n8k16 MMAs, f32 accumulation
//   m' = max(m, max_j s_j)         per head, f32
//   l = l · e^(m - m') + Σ_j e^(s_j - m')       f32 probabilities
//   o = o · e^(m - m') + Σ_j bf16(e^(s_j - m')) · kv_j     bf16 P x bf16 V on MMAs, f32 accumulation
// then den = l + e^(sink - m), o / den -> bf16, inverse RoPE of the rope dims -> bf16 (as the CUDA-core
// kernels). q and kv hold bf16 values in official numerics, so converting them to bf16 is exact; the
// result differs from the reference kernels only in the order of the f32 sums and the online
// rescaling. Every row's block reads only that row's candidates: batch-invariant.
//
// Block: 512 threads = 16 warps; warp w owns head group w % 4 (16 heads) and quarter w / 4: of the
// block's 64 candidates for the scores (16 each), of the head dimension for the outputs (kD / 4 each).
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kTcaThreads = 512;
constexpr int kTcaHeads = 64;  // heads per block (MMA rows; missing heads are zero rows)
constexpr int kTcaBlock = 64;  // candidates per online-softmax block

__host__ __device__ constexpr int64_t tca_pitch(int64_t kd) { return kd + 8; }  // bf16 elements per row
// Dynamic shared memory: q [64, pitch] and the candidate block [64, pitch] in bf16 (later reused as the
// f32 output [64, kD]), P [64, 64 + 8] bf16, the per-quarter row maxima and sums [2, 4, 64] f32.
__host__ __device__ constexpr int64_t tca_smem_bytes(int64_t kd) {
    return 2 * (2 * kTcaHeads * tca_pitch(kd) + kTcaHeads * (kTcaBlock + 8)) + 4 * 2 * 4 * kTcaHeads;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// Rows [0, n) of `rows` (row j at src(j), kD floats) into dst as bf16; rows n..63 zero.
template <int kD, class Src>
__device__ __forceinline__ void tca_stage(__nv_bfloat16* dst, int64_t n, Src src) {
    constexpr int kQuads = kD / 4;
    for (int i = threadIdx.x; i < kTcaBlock * kQuads; i += kTcaThreads) {
        const int j = i / kQuads, c = (i % kQuads) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (j < n) v = *reinterpret_cast<const float4*>(src(j) + c);
        uint2 packed{pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w)};
        *reinterpret_cast<uint2*>(dst + j * tca_pitch(kD) + c) = packed;
    }
}

// grid (rows, ceil(heads / 64)), block kTcaThreads, dynamic shared memory tca_smem_bytes(kD).
template <int kD>
static __global__ void __launch_bounds__(kTcaThreads, 1) tc_attention_kernel(const __grid_constant__ SparseAttentionParams p) {
    extern __shared__ __align__(16) unsigned char tca_sm[];
    constexpr int kP = static_cast<int>(tca_pitch(kD));
    constexpr int kPP = kTcaBlock + 8;
    auto* q_s = reinterpret_cast<__nv_bfloat16*>(tca_sm);      // [64, kP]
    __nv_bfloat16* kv_s = q_s + kTcaHeads * kP;                // [64, kP]
    __nv_bfloat16* p_s = kv_s + kTcaHeads * kP;                // [64, kPP]
    float* red_max = reinterpret_cast<float*>(p_s + kTcaHeads * kPP);  // [4, 64]
    float* red_sum = red_max + 4 * kTcaHeads;                           // [4, 64]

    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kTcaHeads;
    const DeviceSegment& s = p.segments[p.row_segment[r]];
    const int64_t pos = p.positions[r];
    const int64_t lo = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
    int64_t num_comp = 0;
    if (p.kind == AttentionKind::kHca) num_comp = (pos + 1) / p.ratio;
    if (p.kind == AttentionKind::kCsa) {
        const int64_t vis = (pos + 1) / p.ratio;
        num_comp = vis < p.topk ? vis : p.topk;
    }
    const Candidates cand{p.kv + s.row_begin * kD, s.window, &s,
                          p.kind == AttentionKind::kCsa ? p.selected + r * p.topk : nullptr,
                          lo, s.first_position, p.window_rows, pos - lo + 1, kD};
    const int64_t nc = cand.num_window + num_comp;
    const int64_t nh = p.heads - h0 < kTcaHeads ? p.heads - h0 : kTcaHeads;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
    const int hg = warp % 4, quarter = warp / 4;
    const int row0 = hg * 16 + g, row1 = row0 + 8;  // this thread's two heads (block-local)
    constexpr float kLog2e = 1.4426950408889634f;
    const float scale2 = p.softmax_scale * kLog2e;  // scores in base-2 units
    const float neg_inf = -__int_as_float(0x7F800000);

    tca_stage<kD>(q_s, nh, [&](int64_t j) { return p.q + (r * p.heads + h0 + j) * kD; });

    constexpr int kNt = kD / 32;  // output n-tiles of 8 columns per warp
    float acc[kNt][4];
#pragma unroll
    for (int t = 0; t < kNt; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};

    for (int64_t j0 = 0; j0 < nc; j0 += kTcaBlock) {
        const int64_t n = nc - j0 < kTcaBlock ? nc - j0 : kTcaBlock;
        __syncthreads();  // the previous block's MMAs are done with kv_s and p_s
        tca_stage<kD>(kv_s, n, [&](int64_t j) { return cand(j0 + j); });
        __syncthreads();
        // Scores of 16 heads x 16 candidates: two n-tiles over K = kD.
        float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll 4
        for (int ks = 0; ks < kD / 16; ++ks) {
            uint32_t a[4], b[4];
            dev::ldmatrix_x4(a, q_s + (hg * 16 + lane % 16) * kP + ks * 16 + (lane / 16) * 8);
            dev::ldmatrix_x4(b, kv_s + (quarter * 16 + lane % 8 + (lane / 16) * 8) * kP + ks * 16 + ((lane / 8) % 2) * 8);
            dev::mma_bf16_16816(sc[0], a, b[0], b[1]);
            dev::mma_bf16_16816(sc[1], a, b[2], b[3]);
        }
        // Mask, row maxima of this quarter (quad shuffle), exchanged through shared memory.
        float mx[2] = {neg_inf, neg_inf};
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t j = quarter * 16 + t * 8 + qd * 2 + (e % 2);
                sc[t][e] = j < n ? sc[t][e] * scale2 : neg_inf;
                mx[e / 2] = fmaxf(mx[e / 2], sc[t][e]);
            }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        }
        if (qd == 0) {
            red_max[quarter * kTcaHeads + row0] = mx[0];
            red_max[quarter * kTcaHeads + row1] = mx[1];
        }
        __syncthreads();
        float m_new[2], alpha[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = i ? row1 : row0;
            const float bm = fmaxf(fmaxf(red_max[row], red_max[kTcaHeads + row]),
                                   fmaxf(red_max[2 * kTcaHeads + row], red_max[3 * kTcaHeads + row]));
            m_new[i] = fmaxf(m_run[i], bm);  // finite: the first block holds the query's own row
            alpha[i] = exp2f(m_run[i] - m_new[i]);
        }
        // Probabilities: f32 into the row sums, bf16 into P.
        float sum[2] = {0.f, 0.f};
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            float e4[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                e4[e] = exp2f(sc[t][e] - m_new[e / 2]);
                sum[e / 2] += e4[e];
            }
            const int col = quarter * 16 + t * 8 + qd * 2;
            *reinterpret_cast<uint32_t*>(p_s + row0 * kPP + col) = pack_bf16x2(e4[0], e4[1]);
            *reinterpret_cast<uint32_t*>(p_s + row1 * kPP + col) = pack_bf16x2(e4[2], e4[3]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
        }
        if (qd == 0) {
            red_sum[quarter * kTcaHeads + row0] = sum[0];
            red_sum[quarter * kTcaHeads + row1] = sum[1];
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = i ? row1 : row0;
            const float bs = (red_sum[row] + red_sum[kTcaHeads + row]) + (red_sum[2 * kTcaHeads + row] + red_sum[3 * kTcaHeads + row]);
            l_run[i] = l_run[i] * alpha[i] + bs;
            m_run[i] = m_new[i];
        }
        // o = o · alpha + P · V over this block: 16 heads x kD/4 columns per warp.
#pragma unroll
        for (int t = 0; t < kNt; ++t) {
            acc[t][0] *= alpha[0];
            acc[t][1] *= alpha[0];
            acc[t][2] *= alpha[1];
            acc[t][3] *= alpha[1];
        }
        const int c0 = quarter * (kD / 4);
#pragma unroll
        for (int ks = 0; ks < kTcaBlock / 16; ++ks) {
            uint32_t a[4];
            dev::ldmatrix_x4(a, p_s + (hg * 16 + lane % 16) * kPP + ks * 16 + (lane / 16) * 8);
#pragma unroll
            for (int t = 0; t < kNt; t += 2) {
                uint32_t b[4];
                dev::ldmatrix_x4_trans(b, kv_s + (ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kP + c0 + t * 8 + (lane / 16) * 8);
                dev::mma_bf16_16816(acc[t], a, b[0], b[1]);
                dev::mma_bf16_16816(acc[t + 1], a, b[2], b[3]);
            }
        }
    }
    __syncthreads();
    // Sink, normalization, bf16; the f32 outputs [64, kD] go to shared memory (over q_s and kv_s).
    float* o_s = reinterpret_cast<float*>(tca_sm);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int row = i ? row1 : row0;
        const int64_t h = h0 + row < p.heads ? h0 + row : p.heads - 1;
        const float den = l_run[i] + exp2f(p.sink[h] * kLog2e - m_run[i]);
        const int c0 = quarter * (kD / 4);
#pragma unroll
        for (int t = 0; t < kNt; ++t) {
            const int col = c0 + t * 8 + qd * 2;
            o_s[row * kD + col] = dev::round_bf16(acc[t][2 * i] / den);
            o_s[row * kD + col + 1] = dev::round_bf16(acc[t][2 * i + 1] / den);
        }
    }
    __syncthreads();
    const float* cs = p.cos_sin + pos * p.rope_dim;
    for (int hh = warp; hh < nh; hh += kTcaThreads / 32) {
        float* o = o_s + hh * kD;
        for (int64_t i = lane; i < p.rope_dim / 2; i += 32) dev::rope_pair(o + (kD - p.rope_dim), static_cast<int>(i), cs, true);
        __syncwarp();
        float* out = p.out + (r * p.heads + h0 + hh) * kD;
        for (int d = lane; d < kD; d += 32) out[d] = d >= kD - p.rope_dim ? dev::round_bf16(o[d]) : o[d];
    }
}

}  // namespace deepinfer::cuda::kernels
