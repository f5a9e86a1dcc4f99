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
// Block layout, staging, MMA loops and the split of a row's candidate blocks over the CTAs of a cluster
// (each CTA an online softmax over its blocks, merged in CTA order): attention_tc_common.cuh.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// grid (rows, ceil(heads / 64), kSplit), cluster (1, 1, kSplit), block kTcaThreads, dynamic shared
// memory tca_smem_bytes(kD).
template <int kD, int kSplit>
static __global__ void __launch_bounds__(kTcaThreads, 1) tc_attention_kernel(const __grid_constant__ SparseAttentionParams p) {
    extern __shared__ __align__(16) unsigned char tca_sm[];
    const TcaShared<kD> sm(tca_sm);
    constexpr int kPP = TcaShared<kD>::kPP;

    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kTcaHeads;
    const int split = static_cast<int>(blockIdx.z);
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
    const int64_t num_blocks = (nc + kTcaBlock - 1) / kTcaBlock;

    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, qd = lane % 4;
    const int hg = warp % 4, quarter = warp / 4;
    const int row0 = hg * 16 + lane / 4, row1 = row0 + 8;  // this thread's two heads (block-local)
    constexpr float kLog2e = 1.4426950408889634f;
    const float scale2 = p.softmax_scale * kLog2e;  // scores in base-2 units
    const float neg_inf = -__int_as_float(0x7F800000);

    constexpr int kNt = kD / 32;  // output n-tiles of 8 columns per warp
    float acc[kNt][4];
#pragma unroll
    for (int t = 0; t < kNt; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};

    if (split < num_blocks) {
        if (tid < kTcaBlock) sm.rows[tid] = tid < nh ? p.q + (r * p.heads + h0 + tid) * kD : nullptr;
        __syncthreads();
        tca_stage_rows<kD>(sm.q, sm.rows);
    }
    for (int64_t b = split; b < num_blocks; b += kSplit) {
        const int64_t j0 = b * kTcaBlock, n = nc - j0 < kTcaBlock ? nc - j0 : kTcaBlock;
        __syncthreads();  // the previous block's MMAs and staging are done with kv, p and rows
        if (tid < kTcaBlock) sm.rows[tid] = tid < n ? cand(j0 + tid) : nullptr;
        __syncthreads();
        tca_stage_rows<kD>(sm.kv, sm.rows);
        __syncthreads();
        float sc[2][4];
        tca_scores<kD>(sc, sm, hg, quarter, lane);
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
            sm.red_max[quarter * kTcaHeads + row0] = mx[0];
            sm.red_max[quarter * kTcaHeads + row1] = mx[1];
        }
        __syncthreads();
        float m_new[2], alpha[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = i ? row1 : row0;
            const float bm = fmaxf(fmaxf(sm.red_max[row], sm.red_max[kTcaHeads + row]),
                                   fmaxf(sm.red_max[2 * kTcaHeads + row], sm.red_max[3 * kTcaHeads + row]));
            m_new[i] = fmaxf(m_run[i], bm);  // finite: every block holds at least one candidate
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
            *reinterpret_cast<uint32_t*>(sm.p + row0 * kPP + col) = pack_bf16x2(e4[0], e4[1]);
            *reinterpret_cast<uint32_t*>(sm.p + row1 * kPP + col) = pack_bf16x2(e4[2], e4[3]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
        }
        if (qd == 0) {
            sm.red_sum[quarter * kTcaHeads + row0] = sum[0];
            sm.red_sum[quarter * kTcaHeads + row1] = sum[1];
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = i ? row1 : row0;
            const float bs = (sm.red_sum[row] + sm.red_sum[kTcaHeads + row]) +
                             (sm.red_sum[2 * kTcaHeads + row] + sm.red_sum[3 * kTcaHeads + row]);
            l_run[i] = l_run[i] * alpha[i] + bs;
            m_run[i] = m_new[i];
        }
        // o = o · alpha + P · V over this block.
#pragma unroll
        for (int t = 0; t < kNt; ++t) {
            acc[t][0] *= alpha[0];
            acc[t][1] *= alpha[0];
            acc[t][2] *= alpha[1];
            acc[t][3] *= alpha[1];
        }
        tca_pv<kD>(acc, sm, hg, quarter, lane);
    }
    const int parts = static_cast<int>(num_blocks < kSplit ? num_blocks : kSplit);
    tca_merge_store<kD, kSplit, true>(sm, acc, m_run, l_run, split, parts, nh, p.sink, h0, p.cos_sin + pos * p.rope_dim,
                                      p.rope_dim, p.out + r * p.heads * kD);
}

}  // namespace deepinfer::cuda::kernels
