// SPDX-License-Identifier: Apache-2.0
// V4.1's sink attention on tensor cores (fast GEMM mode, official numerics): sink_attention_kernel's
// function (v41_attention.cuh, model/v41/attention.cpp) with the 64 heads of a block sharing each
// decoded key row (V4.1's heads share K=V):
//   pass 1  s_j = (q · key_j) · scale      bf16 m16n8k16 MMAs, f32 accumulation, into the scratch
//   pass 2  m = max(sink, max_j s_j), den = e^(sink - m) + Σ_j e^(s_j - m), p_j = bf16(e^(s_j - m) / den)
//   pass 3  o = Σ_j p_j · key_j             bf16 MMAs, f32 accumulation -> bf16, inverse RoPE
// Keys are decoded from the compact caches (FP8 window ring, FP4 entries: values bf16 holds exactly)
// or read from this chunk's rows, once per 64-key block and pass instead of once per head. Only the
// order of the f32 sums differs from the reference kernel; a row's block reads only that row's keys,
// so results do not depend on the batch.
// Block: 512 threads = 16 warps; warp w owns head group w % 4 (16 heads) and quarter w / 4 of the
// block's 64 keys (scores) or of the head dimension (outputs), as attention_tc.cuh.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention_tc.cuh"
#include "backends/cuda/kernels/v41_attention.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// q [64, pitch] and one key block [64, pitch] in bf16 (later the f32 output [64, kD]), P [64, 64 + 8].
__host__ __device__ constexpr int64_t v41_tca_smem_bytes(int64_t kd) {
    return 2 * (2 * kTcaHeads * tca_pitch(kd) + kTcaHeads * (kTcaBlock + 8));
}

// grid (rows, ceil(heads / 64)), block kTcaThreads, dynamic shared memory v41_tca_smem_bytes(kD).
template <int kD>
static __global__ void __launch_bounds__(kTcaThreads, 1) v41_tc_attention_kernel(const __grid_constant__ SinkAttentionParams p) {
    extern __shared__ __align__(16) unsigned char v41_tca_sm[];
    constexpr int kP = static_cast<int>(tca_pitch(kD));
    constexpr int kPP = kTcaBlock + 8;
    auto* q_s = reinterpret_cast<__nv_bfloat16*>(v41_tca_sm);  // [64, kP]
    __nv_bfloat16* kv_s = q_s + kTcaHeads * kP;                // [64, kP]
    __nv_bfloat16* p_s = kv_s + kTcaHeads * kP;                // [64, kPP]

    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kTcaHeads;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
    const int hg = warp % 4, quarter = warp / 4;
    const SinkSegment& seg = p.segments[p.row_segment[r]];
    const int64_t pos = p.positions[r];
    const int64_t lo = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
    const int32_t* sel = (seg.entries && p.selected) ? p.selected + r * p.topk : nullptr;
    // The picks are ascending and -1 padded: count the valid ones (topk <= 512 = one per thread, or a loop).
    int64_t nsel = 0;
    for (int64_t base = 0; base < (sel ? p.topk : 0); base += kTcaThreads)
        nsel += __syncthreads_count(base + tid < p.topk && sel[base + tid] >= 0);
    const SinkKeys key{&seg, p.kv + seg.row_begin * kD, sel, lo, pos - lo + 1, kD, p.window_rows,
                       row_bytes_of(p.window_format, kD, p.window_block), row_bytes_of(p.entry_format, kD, p.entry_block),
                       p.window_block, p.entry_block, p.window_format, p.entry_format, &p.paged_entries, p.row_segment[r]};
    const int64_t nc = key.num_window + nsel;
    const int64_t nh = p.heads - h0 < kTcaHeads ? p.heads - h0 : kTcaHeads;
    auto scores = [&](int64_t hh) { return p.scratch + (r * p.heads + h0 + hh) * p.max_candidates; };
    // Keys j0 .. j0 + n - 1 decoded into kv_s as bf16; rows n..63 zero.
    auto stage_keys = [&](int64_t j0, int64_t n) {
        for (int i = tid; i < kTcaBlock * kD; i += kTcaThreads) {
            const int j = i / kD, d = i % kD;
            kv_s[j * kP + d] = __float2bfloat16_rn(j < n ? key(j0 + j, d) : 0.0f);
        }
    };
    tca_stage<kD>(q_s, nh, [&](int64_t j) { return p.q + (r * p.heads + h0 + j) * kD; });

    // Pass 1: scores of 16 heads x 16 keys per warp.
    for (int64_t j0 = 0; j0 < nc; j0 += kTcaBlock) {
        const int64_t n = nc - j0 < kTcaBlock ? nc - j0 : kTcaBlock;
        __syncthreads();
        stage_keys(j0, n);
        __syncthreads();
        float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll 4
        for (int ks = 0; ks < kD / 16; ++ks) {
            uint32_t a[4], b[4];
            dev::ldmatrix_x4(a, q_s + (hg * 16 + lane % 16) * kP + ks * 16 + (lane / 16) * 8);
            dev::ldmatrix_x4(b, kv_s + (quarter * 16 + lane % 8 + (lane / 16) * 8) * kP + ks * 16 + ((lane / 8) % 2) * 8);
            dev::mma_bf16_16816(sc[0], a, b[0], b[1]);
            dev::mma_bf16_16816(sc[1], a, b[2], b[3]);
        }
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int hh = hg * 16 + g + (e / 2) * 8;
                const int64_t j = quarter * 16 + t * 8 + qd * 2 + (e % 2);
                if (hh < nh && j < n) scores(hh)[j0 + j] = sc[t][e] * p.softmax_scale;
            }
    }
    __syncthreads();
    // Pass 2: per head (a warp each), the maximum from the sink, the denominator, bf16 probabilities.
    for (int64_t hh = warp; hh < nh; hh += kTcaThreads / 32) {
        float* s = scores(hh);
        const float sink = p.sink[h0 + hh];
        float mx = sink;
        for (int64_t j = lane; j < nc; j += 32) mx = fmaxf(mx, s[j]);
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
        float den = 0.0f;
        for (int64_t j = lane; j < nc; j += 32) {
            const float e = __expf(s[j] - mx);
            s[j] = e;
            den += e;
        }
        for (int o = 16; o > 0; o /= 2) den += __shfl_xor_sync(0xFFFFFFFFu, den, o);
        den += __expf(sink - mx);
        for (int64_t j = lane; j < nc; j += 32) s[j] = dev::round_bf16(s[j] / den);
    }
    __syncthreads();
    // Pass 3: o = P · V, 16 heads x kD/4 columns per warp.
    constexpr int kNt = kD / 32;
    float acc[kNt][4];
#pragma unroll
    for (int t = 0; t < kNt; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    const int c0 = quarter * (kD / 4);
    for (int64_t j0 = 0; j0 < nc; j0 += kTcaBlock) {
        const int64_t n = nc - j0 < kTcaBlock ? nc - j0 : kTcaBlock;
        __syncthreads();
        stage_keys(j0, n);
        for (int i = tid; i < kTcaHeads * kTcaBlock; i += kTcaThreads) {
            const int hh = i / kTcaBlock, j = i % kTcaBlock;
            p_s[hh * kPP + j] = __float2bfloat16_rn(hh < nh && j < n ? scores(hh)[j0 + j] : 0.0f);
        }
        __syncthreads();
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
    float* o_s = reinterpret_cast<float*>(v41_tca_sm);  // [64, kD] over q_s and kv_s
#pragma unroll
    for (int t = 0; t < kNt; ++t) {
        const int col = c0 + t * 8 + qd * 2, row0 = hg * 16 + g;
        o_s[row0 * kD + col] = dev::round_bf16(acc[t][0]);
        o_s[row0 * kD + col + 1] = dev::round_bf16(acc[t][1]);
        o_s[(row0 + 8) * kD + col] = dev::round_bf16(acc[t][2]);
        o_s[(row0 + 8) * kD + col + 1] = dev::round_bf16(acc[t][3]);
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
