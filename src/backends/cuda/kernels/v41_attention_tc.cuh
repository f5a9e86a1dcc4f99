// SPDX-License-Identifier: Apache-2.0
// V4.1's sink attention on tensor cores (fast GEMM mode, official numerics): sink_attention_kernel's
// function (v41_attention.cuh, model/v41/attention.cpp) with the 64 heads of a block sharing each
// decoded key row (V4.1's heads share K=V):
//   pass 1  s_j = (q · key_j) · scale      bf16 m16n8k16 MMAs, f32 accumulation, into the scratch
//   pass 2  m = max(sink, max_j s_j), den = e^(sink - m) + Σ_j e^(s_j - m), p_j = bf16(e^(s_j - m) / den)
//   pass 3  o = Σ_j p_j · key_j             bf16 MMAs, f32 accumulation -> bf16, inverse RoPE
// Keys are decoded from the compact caches (FP8 window ring, FP4 entries: values bf16 holds exactly)
// or read from this chunk's rows, once per 64-key block and pass instead of once per head; q from f32 rows
// or from SinkAttentionParams::q_bf16, the output to out and/or out_bf16 (its bf16 bits). Only the
// order of the f32 sums differs from the reference kernel; a row's block reads only that row's keys,
// so results do not depend on the batch.
// Block layout, MMA loops and the split over a cluster's CTAs: attention_tc_common.cuh. Split: passes 1
// and 3 deal the key blocks round-robin to the row's CTAs, pass 2 gives each CTA 64 / kSplit heads (a
// head's softmax is the one-CTA kernel's), and the partial outputs of pass 3 are summed in CTA order.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/cp_async.cuh"
#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/kernels/v41_attention.cuh"
#include "backends/cuda/kernels/v41_attention_keys.cuh"
#include "backends/cuda/kernels/v41_attention_softmax.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// Dynamic shared memory: tca_smem_bytes' layout, then the row's key table (v41_attention_keys.cuh; a head's
// scores are in registers through its softmax, kV41KeyTable / 32 per lane).
__host__ __device__ constexpr int64_t v41_tca_smem_bytes(int64_t kd) { return tca_smem_bytes(kd) + kV41KeyTableBytes; }
// kAsync: that layout, then a second key block buffer [64, pitch] bf16.
__host__ __device__ constexpr int64_t v41_tca_async_smem_bytes(int64_t kd) {
    return v41_tca_smem_bytes(kd) + 2 * kTcaBlock * tca_pitch(kd);
}

// grid (rows, ceil(heads / 64), kSplit), cluster (1, 1, kSplit), block kTcaThreads, dynamic shared
// memory v41_tca_smem_bytes(kD) (kAsync: v41_tca_async_smem_bytes(kD)).
// Rows whose segment has pre-decoded keys (SinkAttentionParams::keys_bf16, bf16_keys[s].ring_row >= 0) are the
// kAsync form's (kSplit = 1), the others this form's: each form's CTAs leave the other's rows at once, and the
// launcher runs both forms where a launch has rows of both (v41_bf16_rows). kAsync stages a row's key blocks by
// cp.async into two buffers in turn: the next block's copies are in flight while this block's MMAs run (pass 1
// from the last block down, pass 3 from the first up; pass 3's first block is pass 1's last, still staged). The
// same blocks of the same values, the same MMAs in the same order as this form decoding them: the same bits.
__device__ __forceinline__ bool v41_bf16_row(const SinkAttentionParams& p, int64_t r) {
    return p.keys_bf16 && p.bf16_keys && p.bf16_keys[p.row_segment[r]].ring_row >= 0;
}

template <int kD, int kSplit, bool kAsync = false>
static __global__ void __launch_bounds__(kTcaThreads, 1) v41_tc_attention_kernel(const __grid_constant__ SinkAttentionParams p) {
    static_assert(!kAsync || kSplit == 1, "the pipelined form: one CTA per row");
    if (v41_bf16_row(p, blockIdx.x) != kAsync) return;  // (uniform per CTA: the other form's row)
    extern __shared__ __align__(16) unsigned char v41_tca_sm[];
    const TcaShared<kD> sm(v41_tca_sm);
    constexpr int kP = TcaShared<kD>::kP, kPP = TcaShared<kD>::kPP;

    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kTcaHeads;
    const int split = static_cast<int>(blockIdx.z);
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
    const int hg = warp % 4, quarter = warp / 4;
    const SinkSegment& seg = p.segments[p.row_segment[r]];
    const int64_t pos = p.positions[r];
    const int64_t lo0 = seg.window_begin > 0 ? seg.window_begin : 0;  // (bounded replay's floor)
    const int64_t lo = pos - p.window + 1 > lo0 ? pos - p.window + 1 : lo0;
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
    const int64_t num_blocks = (nc + kTcaBlock - 1) / kTcaBlock;
    auto scores = [&](int64_t hh) { return p.scratch + (r * p.heads + h0 + hh) * p.max_candidates; };
    // The row's keys, located once (after tca_smem_bytes' layout), staged a block at a time.
    const V41KeyStaging<kD, kTcaThreads, kD, kAsync> keys(key, p, v41_tca_sm + tca_smem_bytes(kD), nc, tid);
    // (pass 1 puts all 4 of a thread's items' loads in flight: no accumulators live yet; pass 3 two, beside its 64)
    auto stage_keys1 = [&](int64_t j0, int64_t n) { keys.template stage<kTcaBlock, kP, 4>(sm.kv, j0, n, key, p); };
    auto stage_keys = [&](int64_t j0, int64_t n) { keys.template stage<kTcaBlock, kP>(sm.kv, j0, n, key, p); };
    if (split < num_blocks) {
        if (p.q_bf16) {  // (fast mode's prefill: the same values, half the bytes, no conversion)
            tca_stage_q_bf16<kD>(sm.q, p.q_bf16 + (r * p.heads + h0) * kD, nh);
        } else {
            if (tid < kTcaBlock) sm.rows[tid] = tid < nh ? p.q + (r * p.heads + h0 + tid) * kD : nullptr;
            __syncthreads();
            tca_stage_rows<kD>(sm.q, sm.rows);
        }
    }

    // Pass 1: scores of 16 heads x 16 keys per warp, this CTA's blocks, the last first: a block's scores
    // do not depend on the order, and the CTA's first block (b = split) stays staged for pass 3's first
    // P·V (pass 2 leaves kv alone).
    const int64_t last = split < num_blocks ? split + (num_blocks - 1 - split) / kSplit * kSplit : -1;
    // kAsync: the two key buffers (kvb[i % 2] holds the i-th block staged).
    __nv_bfloat16* const kvb[2] = {sm.kv, reinterpret_cast<__nv_bfloat16*>(v41_tca_sm + v41_tca_smem_bytes(kD))};
    auto block_rows = [&](int64_t b) { return nc - b * kTcaBlock < kTcaBlock ? nc - b * kTcaBlock : int64_t(kTcaBlock); };
    auto score_block = [&](const __nv_bfloat16* kv, int64_t j0, int64_t n) {
        float sc[2][4];
        tca_scores<kD>(sc, sm, kv, hg, quarter, lane);
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int hh = hg * 16 + g + (e / 2) * 8;
                const int64_t j = quarter * 16 + t * 8 + qd * 2 + (e % 2);
                if (hh < nh && j < n) scores(hh)[j0 + j] = sc[t][e] * p.softmax_scale;
            }
    };
    if constexpr (kAsync) {
        if (last >= 0) {
            keys.template stage_async<kTcaBlock, kP>(kvb[0], last * kTcaBlock, block_rows(last), p.keys_bf16);
            dev::cp_async_commit();
        }
        for (int64_t b = last, i = 0; b >= 0; --b, ++i) {
            if (b > 0) keys.template stage_async<kTcaBlock, kP>(kvb[(i + 1) & 1], (b - 1) * kTcaBlock, block_rows(b - 1), p.keys_bf16);
            dev::cp_async_commit();  // (an empty group after the last block)
            dev::cp_async_wait<1>();  // block b's copies (every group but the one just committed)
            __syncthreads();
            score_block(kvb[i & 1], b * kTcaBlock, block_rows(b));
            __syncthreads();  // kvb[i % 2] is read; the next iteration copies into the other buffer, the one after into this
        }
    } else {
        for (int64_t b = last; b >= split; b -= kSplit) {
            const int64_t j0 = b * kTcaBlock, n = block_rows(b);
            __syncthreads();
            stage_keys1(j0, n);
            __syncthreads();
            score_block(sm.kv, j0, n);
        }
    }
    tca_row_sync<kSplit>();  // every CTA's scores are in the scratch
    // Pass 2: per head (a warp each; this CTA's 64 / kSplit heads): v41_head_softmax, bf16 probabilities into
    // the scratch over the scores.
    constexpr int kRowsPerCta = kTcaHeads / kSplit, kPerLane = kV41KeyTable / 32;
    const int mine = lane < nc ? static_cast<int>((nc - 1 - lane) / 32) + 1 : 0;
    for (int64_t hh = split * kRowsPerCta + warp; hh < (split + 1) * kRowsPerCta && hh < nh; hh += kTcaThreads / 32) {
        float* s = scores(hh) + lane;
        float e[kPerLane];
        const float den = v41_head_softmax(s, p.sink[h0 + hh], mine, e);
#pragma unroll
        for (int k = 0; k < kPerLane; ++k)
            if (k < mine) s[32 * k] = dev::round_bf16(e[k] / den);
    }
    tca_row_sync<kSplit>();  // every head's probabilities are in the scratch
    // Pass 3: o = P · V over this CTA's blocks, 16 heads x kD/4 columns per warp.
    constexpr int kNt = kD / 32;
    float acc[kNt][4];
#pragma unroll
    for (int t = 0; t < kNt; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    // P staging: thread tid takes key pj of heads ph, ph + kPHeads, ...; all its loads in flight at once.
    constexpr int kPHeads = kTcaThreads / kTcaBlock, kPPer = kTcaHeads / kPHeads;
    static_assert(kTcaThreads % kTcaBlock == 0 && kTcaHeads % kPHeads == 0, "whole heads per sweep");
    const int pj = tid % kTcaBlock, ph = tid / kTcaBlock;
    const float* p_src = p.scratch + (r * p.heads + h0 + ph) * p.max_candidates + pj;
    // Block b's probabilities into P (bf16).
    auto stage_p = [&](int64_t j0, int64_t n) {
        float pv[kPPer];
#pragma unroll
        for (int k = 0; k < kPPer; ++k)
            pv[k] = ph + k * kPHeads < nh && pj < n ? __ldcg(p_src + static_cast<int64_t>(k * kPHeads) * p.max_candidates + j0) : 0.0f;
#pragma unroll
        for (int k = 0; k < kPPer; ++k) sm.p[(ph + k * kPHeads) * kPP + pj] = __float2bfloat16_rn(pv[k]);
    };
    if constexpr (kAsync) {
        // Block 0 is still in the buffer pass 1 staged it into (its index last); pass 2's barriers published it.
        int ci = static_cast<int>(last & 1);
        for (int64_t b = 0; b < num_blocks; ++b, ci ^= 1) {
            if (b + 1 < num_blocks)
                keys.template stage_async<kTcaBlock, kP>(kvb[ci ^ 1], (b + 1) * kTcaBlock, block_rows(b + 1), p.keys_bf16);
            dev::cp_async_commit();
            stage_p(b * kTcaBlock, block_rows(b));
            dev::cp_async_wait<1>();  // block b's copies (committed an iteration earlier; block 0's in pass 1)
            __syncthreads();
            tca_pv<kD>(acc, sm, kvb[ci], hg, quarter, lane);
            __syncthreads();  // kvb[ci] and P are read before the next iteration writes P and the one after kvb[ci]
        }
        dev::cp_async_wait<0>();
    } else {
        for (int64_t b = split; b < num_blocks; b += kSplit) {
            const int64_t j0 = b * kTcaBlock, n = block_rows(b);
            __syncthreads();
            if (b != split) stage_keys(j0, n);  // (block split: still staged from pass 1)
            stage_p(j0, n);
            __syncthreads();
            tca_pv<kD>(acc, sm, hg, quarter, lane);
        }
    }
    const float none[2] = {0.f, 0.f};
    const int parts = static_cast<int>(num_blocks < kSplit ? num_blocks : kSplit);
    const TcaBf16Out out16{p.out_bf16, p.bf16_group_heads > 0 ? p.bf16_group_heads : p.heads, p.bf16_group_stride, r};
    tca_merge_store<kD, kSplit, false>(sm, acc, none, none, split, parts, nh, p.sink, h0, p.cos_sin + pos * p.rope_dim,
                                       p.rope_dim, p.out ? p.out + r * p.heads * kD : nullptr, out16);
}

}  // namespace deepinfer::cuda::kernels
