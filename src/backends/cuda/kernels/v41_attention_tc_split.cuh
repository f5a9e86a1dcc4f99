// SPDX-License-Identifier: Apache-2.0
// V4.1's tensor-core sink attention for a few rows, split over many CTAs (head_dim 512): v41_tc_attention_kernel's
// result, bit for bit, in two launches instead of one CTA (or a pair) per 16 heads. At a batch of one the
// few-rows kernel (v41_attention_tc_heads.cuh) runs on 4-8 SMs and walks the row's key blocks one after another,
// twice (scores, then P·V): ~80 us per layer for 128 + 512 keys, ~23 us for the window's 128 (ncu, session 45).
//   scores  grid (rows, ceil(heads / 16), kV41KeyTable / 64): CTA (r, g, b) stages key block b (64 keys) once
//           and scores it for the 16 heads of group g: per score the same m16n8k16 chain over K = kD
//           (v41h_score_tile), into the scratch.
//   P·V     grid (rows, ceil(heads / 16), kD / 64): CTA (r, g, c) computes the 16 heads' softmax
//           (v41_head_softmax: the same code as the other kernels; each of the row's column CTAs computes
//           it, into its own shared memory), stages columns 64c .. 64c + 63 of every key of the row, and
//           accumulates o = Σ_j p_j · key_j for those columns: per (head, column) one f32 accumulator through
//           the 16-key k-steps in ascending key order, as in the other kernels (the MMA's per-element result
//           does not depend on the tile's other columns), then bf16, the inverse RoPE of the rope dims in this
//           slice and their bf16.
// So every output element gets the same operations in the same order as in the 64-head kernel, and the three
// forms are interchangeable by row count without breaking batch invariance.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/kernels/v41_attention_keys.cuh"
#include "backends/cuda/kernels/v41_attention_softmax.cuh"
#include "backends/cuda/kernels/v41_attention_tc_heads.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kV41sThreads = 256;  // 8 warps
constexpr int kV41sKeys = 64;      // scores: keys per CTA (a warp's 8 each)
constexpr int kV41sCols = 64;      // P·V: output columns per CTA (a warp's n8 tile each)
constexpr int kV41sChunk = 320;    // P·V: keys staged per round (5 per thread, all their loads in flight)
constexpr int kV41sKeyBlocks = kV41KeyTable / kV41sKeys;

// Dynamic shared memory of the scores kernel: q [16, pitch] and the key block [64, pitch] bf16, the key table.
__host__ __device__ constexpr int64_t v41s_scores_smem_bytes(int64_t kd) {
    return 2 * (kV41hHeads + kV41sKeys) * tca_pitch(kd) + kV41KeyTableBytes;
}
// Of the P·V kernel: every key's column slice [kV41KeyTable, 64 + 8] and P [16, kV41KeyTable + 8] bf16, the
// output slice [16, 64] f32, the key table.
constexpr int kV41sCP = kV41sCols + 8, kV41sPP = kV41KeyTable + 8;
__host__ __device__ constexpr int64_t v41s_pv_smem_bytes() {
    return 2 * (int64_t{kV41KeyTable} * kV41sCP + int64_t{kV41hHeads} * kV41sPP) + 4 * kV41hHeads * kV41sCols + kV41KeyTableBytes;
}

// grid (rows, ceil(heads / 16), kV41sKeyBlocks), block kV41sThreads, dynamic shared memory v41s_scores_smem_bytes(kD).
template <int kD>
static __global__ void __launch_bounds__(kV41sThreads, 1) v41_tc_split_scores_kernel(const __grid_constant__ SinkAttentionParams p) {
    extern __shared__ __align__(16) unsigned char v41s_sm[];
    constexpr int kP = static_cast<int>(tca_pitch(kD));
    __nv_bfloat16* const sq = reinterpret_cast<__nv_bfloat16*>(v41s_sm);
    __nv_bfloat16* const skv = sq + kV41hHeads * kP;
    unsigned char* const table = reinterpret_cast<unsigned char*>(skv + kV41sKeys * kP);

    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kV41hHeads, j0 = static_cast<int64_t>(blockIdx.z) * kV41sKeys;
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
    int64_t nc;
    const SinkKeys key = v41_row_keys<kD, kV41sThreads>(p, r, tid, nc);
    if (j0 >= nc) return;  // (uniform: the row has fewer key blocks)
    const int64_t n = nc - j0 < kV41sKeys ? nc - j0 : kV41sKeys;
    const int64_t nh = p.heads - h0 < kV41hHeads ? p.heads - h0 : kV41hHeads;
    const V41KeyStaging<kD, kV41sThreads> keys(key, p, table, j0 + n, tid, j0);
    v41h_stage_q<kD, kV41sThreads>(sq, p, r, h0, nh, tid);
    keys.template stage<kV41sKeys, kP, 4>(skv, j0, n, key, p);
    __syncthreads();
    float sc[4];
    v41h_score_tile<kD, kP>(sc, sq, skv + warp * 8 * kP, lane);
    float* const scores0 = p.scratch + (r * p.heads + h0) * p.max_candidates;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int hh = g + (e / 2) * 8;
        const int64_t j = warp * 8 + qd * 2 + (e % 2);
        if (hh < nh && j < n) scores0[hh * p.max_candidates + j0 + j] = sc[e] * p.softmax_scale;
    }
}

// grid (rows, ceil(heads / 16), kD / kV41sCols), block kV41sThreads, dynamic shared memory v41s_pv_smem_bytes();
// after v41_tc_split_scores_kernel on the same scratch.
template <int kD>
static __global__ void __launch_bounds__(kV41sThreads, 1) v41_tc_split_pv_kernel(const __grid_constant__ SinkAttentionParams p) {
    static_assert(kD % kV41sCols == 0 && kV41sCols == 8 * (kV41sThreads / 32), "P·V: an n8 tile per warp");
    extern __shared__ __align__(16) unsigned char v41s_sm[];
    __nv_bfloat16* const skv = reinterpret_cast<__nv_bfloat16*>(v41s_sm);  // [kV41KeyTable, kV41sCP]
    __nv_bfloat16* const sp = skv + kV41KeyTable * kV41sCP;                  // [16, kV41sPP]
    float* const so = reinterpret_cast<float*>(sp + kV41hHeads * kV41sPP);   // [16, kV41sCols]
    unsigned char* const table = reinterpret_cast<unsigned char*>(so + kV41hHeads * kV41sCols);

    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kV41hHeads;
    const int c0 = static_cast<int>(blockIdx.z) * kV41sCols;
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
    const int64_t pos = p.positions[r];
    int64_t nc;
    const SinkKeys key = v41_row_keys<kD, kV41sThreads>(p, r, tid, nc);
    const int64_t nh = p.heads - h0 < kV41hHeads ? p.heads - h0 : kV41hHeads;
    // P: zero first (heads from nh on, and keys from nc to the last k-step's end: +0 products, as the others' zero
    // rows and columns).
    for (int i = tid; i < kV41hHeads * kV41sPP / 8; i += kV41sThreads) reinterpret_cast<uint4*>(sp)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
    const V41KeyStaging<kD, kV41sThreads, kV41sCols> keys(key, p, table, nc, tid, 0, c0);
    // Every key's columns c0 .. c0 + 63 (a round's rows past nc zero).
    for (int64_t j0 = 0; j0 < nc; j0 += kV41sChunk)
        keys.template stage<kV41sChunk, kV41sCP, kV41sChunk / (kV41sThreads / (kV41sCols / 16))>(
            skv + j0 * kV41sCP, j0, nc - j0 < kV41sChunk ? nc - j0 : kV41sChunk, key, p);
    // Pass 2: warp w's heads w and w + 8 (v41_head_softmax), bf16 probabilities into sp.
    constexpr int kPerLane = kV41KeyTable / 32;
    const int mine = lane < nc ? static_cast<int>((nc - 1 - lane) / 32) + 1 : 0;
    for (int64_t hh = warp; hh < nh; hh += kV41sThreads / 32) {
        float e[kPerLane];
        const float den = v41_head_softmax(p.scratch + (r * p.heads + h0 + hh) * p.max_candidates + lane, p.sink[h0 + hh], mine, e);
#pragma unroll
        for (int k = 0; k < kPerLane; ++k)
            if (k < mine) sp[hh * kV41sPP + lane + 32 * k] = __float2bfloat16_rn(dev::round_bf16(e[k] / den));
    }
    __syncthreads();
    // Pass 3: warp w's 16 heads x columns c0 + 8w .. c0 + 8w + 7, k-steps of 16 keys in ascending order (two per
    // ldmatrix of the keys; the second MMA only where that k-step exists).
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int ksteps = static_cast<int>((nc + 15) / 16);
    for (int ks = 0; ks < ksteps; ks += 2) {
        uint32_t a0[4], a1[4], bb[4];
        dev::ldmatrix_x4(a0, sp + (lane % 16) * kV41sPP + ks * 16 + (lane / 16) * 8);
        dev::ldmatrix_x4(a1, sp + (lane % 16) * kV41sPP + (ks + 1) * 16 + (lane / 16) * 8);
        dev::ldmatrix_x4_trans(bb, skv + (ks * 16 + lane) * kV41sCP + warp * 8);
        dev::mma_bf16_16816(acc, a0, bb[0], bb[1]);
        if (ks + 1 < ksteps) dev::mma_bf16_16816(acc, a1, bb[2], bb[3]);
    }
    // bf16 outputs through shared memory, then per head the inverse RoPE of this slice's rope dims and their bf16.
    {
        const int col = warp * 8 + qd * 2;
        *reinterpret_cast<float2*>(so + g * kV41sCols + col) = make_float2(dev::round_bf16(acc[0]), dev::round_bf16(acc[1]));
        *reinterpret_cast<float2*>(so + (g + 8) * kV41sCols + col) = make_float2(dev::round_bf16(acc[2]), dev::round_bf16(acc[3]));
    }
    __syncthreads();
    const float* cs = p.cos_sin + pos * p.rope_dim;
    const int rs = static_cast<int>(kD - p.rope_dim);  // the first rope dim (even; pairs 2i, 2i + 1 from it)
    for (int hh = warp; hh < nh; hh += kV41sThreads / 32) {
        float* o = so + hh * kV41sCols;
        for (int d = (rs > c0 ? rs : c0) + 2 * lane; d < c0 + kV41sCols; d += 64) {
            const int i = (d - rs) / 2;
            dev::rope_pair(o + (d - c0), 0, cs + 2 * i, true);
        }
        __syncwarp();
        float* dst = p.out + (r * p.heads + h0 + hh) * kD + c0;
        for (int d = lane; d < kV41sCols; d += 32) dst[d] = c0 + d >= rs ? dev::round_bf16(o[d]) : o[d];
    }
}

}  // namespace deepinfer::cuda::kernels
