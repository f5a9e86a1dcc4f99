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
// Block layout, MMA loops and the split over a cluster's CTAs: attention_tc_common.cuh. Split: passes 1
// and 3 deal the key blocks round-robin to the row's CTAs, pass 2 gives each CTA 64 / kSplit heads (a
// head's softmax is the one-CTA kernel's), and the partial outputs of pass 3 are summed in CTA order.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/kernels/v41_attention.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// Keys per row the kernel holds (the window's and the picks': window + topk <= this, the release's 128 + 512;
// the launcher takes the reference kernel otherwise): their rows located once, after tca_smem_bytes'
// layout (an address and a kind byte each), and a head's scores in registers (kV41KeyTable / 32 per lane)
// through its softmax.
constexpr int kV41KeyTable = 640;
__host__ __device__ constexpr int64_t v41_tca_smem_bytes(int64_t kd) { return tca_smem_bytes(kd) + 9 * kV41KeyTable; }

// grid (rows, ceil(heads / 64), kSplit), cluster (1, 1, kSplit), block kTcaThreads, dynamic shared
// memory v41_tca_smem_bytes(kD).
template <int kD, int kSplit>
static __global__ void __launch_bounds__(kTcaThreads, 1) v41_tc_attention_kernel(const __grid_constant__ SinkAttentionParams p) {
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
    // Keys j0 .. j0 + n - 1 decoded into kv as bf16; rows n..63 zero. By 16 values (one vector load of a
    // key's codes and one scale) where the formats allow (by16), else 8 single decodes in flight per thread.
    // by16: every key located once (key_rows: the pick, its page, its ring slot; key_kind: how it is
    // stored), and each thread decodes the same 16 columns d0 .. d0 + 15 of its keys jt, jt + kKeyStep, ...
    // (a warp: one key of 512 values, or several of fewer), its code and scale offsets in either format
    // worked out once: each staging puts two items' code loads in flight per thread before decoding them.
    // (Was an item index split, a format lookup through the segment and a 64-bit division by the scale
    // block per item: most of the kernel's integer instructions, ncu, session 36.)
    const bool by16 = key.by16();
    const uint8_t** key_rows = reinterpret_cast<const uint8_t**>(v41_tca_sm + tca_smem_bytes(kD));
    uint8_t* key_kind = reinterpret_cast<uint8_t*>(key_rows + kV41KeyTable);  // 0: f32 row, 1: window format, 2: entry format
    if (by16) {
        for (int64_t j = tid; j < nc; j += kTcaThreads) {
            CacheFormat f;
            int64_t blk;
            key.format_of(j, f, blk);
            key_rows[j] = key.row_of(j);
            key_kind[j] = f == CacheFormat::kF32 ? 0 : j >= key.num_window ? 2 : 1;
        }
        __syncthreads();
    }
    constexpr int kLanesPerKey = kD / 16, kKeyStep = kTcaThreads / kLanesPerKey;
    constexpr int kPer = (kTcaBlock + kKeyStep - 1) / kKeyStep, kBatch = kPer < 2 ? kPer : 2;
    static_assert(kTcaThreads % kLanesPerKey == 0 && kPer % kBatch == 0, "whole keys per sweep");
    const int d0 = (tid % kLanesPerKey) * 16, jt = tid / kLanesPerKey;
    // The quantized formats' facts for this thread's columns (w: the window ring's, e: the entries'): codes
    // at row + *_codes, the scale byte at row + *_scale (scalars, not a struct picked by reference, which
    // the compiler kept in local memory).
    const bool w_fp8 = p.window_format == CacheFormat::kFp8Ue8m0, e_fp8 = p.entry_format == CacheFormat::kFp8Ue8m0;
    const bool w_e4m3 = p.window_format == CacheFormat::kFp4E4m3, e_e4m3 = p.entry_format == CacheFormat::kFp4E4m3;
    const int w_codes = w_fp8 ? d0 : d0 / 2, e_codes = e_fp8 ? d0 : d0 / 2;
    const int w_scale = static_cast<int>((w_fp8 ? kD : kD / 2) + d0 / (p.window_block > 0 ? p.window_block : 1));
    const int e_scale = static_cast<int>((e_fp8 ? kD : kD / 2) + d0 / (p.entry_block > 0 ? p.entry_block : 1));
    auto stage_keys = [&](int64_t j0, int64_t n) {
        static_assert(kTcaBlock * kD % (8 * kTcaThreads) == 0, "key staging in batches of 8");
        static_assert(kD % 16 == 0 && (kP * 2) % 16 == 0, "16 values per item, 16-byte shared-memory stores");
        if (by16) {
#pragma unroll
            for (int u0 = 0; u0 < kPer; u0 += kBatch) {
                Codes16 c[kBatch];
                const uint8_t* row[kBatch];
                int kind[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int j = jt + (u0 + u) * kKeyStep;
                    row[u] = nullptr, kind[u] = 0, c[u].direct = true;
                    if (j < n) {
                        row[u] = key_rows[j0 + j];
                        kind[u] = key_kind[j0 + j];
                        if (kind[u] != 0) {
                            const bool w = kind[u] == 1, fp8 = w ? w_fp8 : e_fp8;
                            const uint8_t* codes = row[u] + (w ? w_codes : e_codes);
                            const uintptr_t addr = reinterpret_cast<uintptr_t>(codes);
                            if (fp8 && (addr & 15u) == 0) {
                                const uint4 x = *reinterpret_cast<const uint4*>(codes);
                                c[u].w[0] = x.x, c[u].w[1] = x.y, c[u].w[2] = x.z, c[u].w[3] = x.w;
                                c[u].scale = row[u][w ? w_scale : e_scale], c[u].direct = false;
                            } else if (!fp8 && (addr & 7u) == 0) {
                                const uint2 x = *reinterpret_cast<const uint2*>(codes);
                                c[u].w[0] = x.x, c[u].w[1] = x.y;
                                c[u].scale = row[u][w ? w_scale : e_scale], c[u].direct = false;
                            }
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int j = jt + (u0 + u) * kKeyStep;
                    if (j >= kTcaBlock) continue;
                    float v[16];
                    const bool w = kind[u] == 1;
                    if (!row[u]) {
#pragma unroll
                        for (int k = 0; k < 16; ++k) v[k] = 0.0f;
                    } else if (c[u].direct) {
                        // (f32 rows, and codes off their vector alignment)
                        cache_values16(row[u], kind[u] == 0 ? CacheFormat::kF32 : w ? p.window_format : p.entry_format, kD,
                                       kind[u] == 0 ? 1 : w ? p.window_block : p.entry_block, d0, v);
                    } else if (w ? w_fp8 : e_fp8) {
                        e4m3x16_values(c[u].w, dev::e8m0_value(c[u].scale), v);
                    } else {
                        e2m1x16_values(c[u].w[0], c[u].w[1],
                                       (w ? w_e4m3 : e_e4m3) ? dev::e4m3_value(c[u].scale) : dev::e8m0_value(c[u].scale), v);
                    }
                    store_bf16x16(sm.kv + j * kP + d0, v);
                }
            }
            return;
        }
        for (int i0 = tid; i0 < kTcaBlock * kD; i0 += 8 * kTcaThreads) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int i = i0 + u * kTcaThreads, j = i / kD;
                v[u] = j < n ? key(j0 + j, i % kD) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int i = i0 + u * kTcaThreads;
                sm.kv[(i / kD) * kP + i % kD] = __float2bfloat16_rn(v[u]);
            }
        }
    };
    if (split < num_blocks) {
        if (tid < kTcaBlock) sm.rows[tid] = tid < nh ? p.q + (r * p.heads + h0 + tid) * kD : nullptr;
        __syncthreads();
        tca_stage_rows<kD>(sm.q, sm.rows);
    }

    // Pass 1: scores of 16 heads x 16 keys per warp, this CTA's blocks, the last first: a block's scores
    // do not depend on the order, and the CTA's first block (b = split) stays staged for pass 3's first
    // P·V (pass 2 leaves kv alone).
    const int64_t last = split < num_blocks ? split + (num_blocks - 1 - split) / kSplit * kSplit : -1;
    for (int64_t b = last; b >= split; b -= kSplit) {
        const int64_t j0 = b * kTcaBlock, n = nc - j0 < kTcaBlock ? nc - j0 : kTcaBlock;
        __syncthreads();
        stage_keys(j0, n);
        __syncthreads();
        float sc[2][4];
        tca_scores<kD>(sc, sm, hg, quarter, lane);
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int hh = hg * 16 + g + (e / 2) * 8;
                const int64_t j = quarter * 16 + t * 8 + qd * 2 + (e % 2);
                if (hh < nh && j < n) scores(hh)[j0 + j] = sc[t][e] * p.softmax_scale;
            }
    }
    tca_row_sync<kSplit>();  // every CTA's scores are in the scratch
    // Pass 2: per head (a warp each; this CTA's 64 / kSplit heads), the maximum from the sink, the
    // denominator, bf16 probabilities.
    // A head's scores are read once, all of a lane's in flight (nc <= kV41KeyTable: at most kPerLane per
    // lane), and kept in registers through the maximum, the exponentials and their sum (each lane's in
    // ascending j, then the shuffle tree: the order of the loop that read them three times).
    // A lane's valid slots are its first `mine` (k < mine <=> lane + 32k < nc); the rest hold -inf, which
    // leaves the maximum as it is and adds exact zeros after the lane's last term (x + 0 = x): the same bits
    // as skipping them, without a 64-bit compare and a predicate per slot in the maximum and the sum
    // (ncu, session 35: the predicates' bookkeeping was most of this pass's instructions).
    constexpr int kRowsPerCta = kTcaHeads / kSplit, kPerLane = kV41KeyTable / 32;
    const int mine = lane < nc ? static_cast<int>((nc - 1 - lane) / 32) + 1 : 0;
    for (int64_t hh = split * kRowsPerCta + warp; hh < (split + 1) * kRowsPerCta && hh < nh; hh += kTcaThreads / 32) {
        float* s = scores(hh) + lane;
        const float sink = p.sink[h0 + hh];
        float e[kPerLane];
        // Scores other CTAs wrote: read through L2 (__ldcg), never a stale L1 line.
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) e[k] = k < mine ? __ldcg(s + 32 * k) : -INFINITY;
        float mx = sink;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) mx = fmaxf(mx, e[k]);
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
        float den = 0.0f;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
            e[k] = __expf(e[k] - mx);
            den += e[k];
        }
        for (int o = 16; o > 0; o /= 2) den += __shfl_xor_sync(0xFFFFFFFFu, den, o);
        den += __expf(sink - mx);
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
    for (int64_t b = split; b < num_blocks; b += kSplit) {
        const int64_t j0 = b * kTcaBlock, n = nc - j0 < kTcaBlock ? nc - j0 : kTcaBlock;
        __syncthreads();
        if (b != split) stage_keys(j0, n);  // (block split: still staged from pass 1)
        float pv[kPPer];
#pragma unroll
        for (int k = 0; k < kPPer; ++k)
            pv[k] = ph + k * kPHeads < nh && pj < n ? __ldcg(p_src + static_cast<int64_t>(k * kPHeads) * p.max_candidates + j0) : 0.0f;
#pragma unroll
        for (int k = 0; k < kPPer; ++k) sm.p[(ph + k * kPHeads) * kPP + pj] = __float2bfloat16_rn(pv[k]);
        __syncthreads();
        tca_pv<kD>(acc, sm, hg, quarter, lane);
    }
    const float none[2] = {0.f, 0.f};
    const int parts = static_cast<int>(num_blocks < kSplit ? num_blocks : kSplit);
    tca_merge_store<kD, kSplit, false>(sm, acc, none, none, split, parts, nh, p.sink, h0, p.cos_sin + pos * p.rope_dim,
                                       p.rope_dim, p.out + r * p.heads * kD);
}

}  // namespace deepinfer::cuda::kernels
