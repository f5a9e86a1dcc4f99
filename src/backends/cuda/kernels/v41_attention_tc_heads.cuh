// SPDX-License-Identifier: Apache-2.0
// V4.1's tensor-core sink attention for a few rows (decode batches): v41_tc_attention_kernel's result,
// bit for bit, with a row's 64 heads over four CTAs of 16 (grid (rows, ceil(heads / 16))), so a batch of
// one fills four SMs instead of one. Each CTA decodes all of the row's keys (V4.1's heads share K=V; the
// decode is repeated per CTA, which is why the launcher takes this kernel only while the rows leave SMs
// idle) and does a quarter of the rest: the q·k and P·V MMAs and the softmax of its 16 heads.
// Every output element gets the same operations in the same order as in the 64-head kernel, so the two
// are interchangeable by row count without breaking batch invariance:
//   pass 1  s_j = (q · key_j) · scale: one m16n8k16 chain over K = kD per (16 heads, 8 keys) tile, k-steps
//           ascending from zero (the MMA's per-element result does not depend on the tile's other rows
//           and columns), 128 keys per block here (64 there: a block's scores do not depend on the others);
//   pass 2  the 64-head kernel's per-head code (a warp per head);
//   pass 3  o = Σ_j p_j · key_j: per (head, column) one f32 accumulator through the 16-key k-steps in
//           ascending key order (blocks of 128 here: the same sequence; a partial last block's zero rows
//           add +0 products, as the 64-key blocks' do), then bf16, the inverse RoPE and bf16 of its dims.
// Block: 512 threads = 16 warps. Pass 1: warp w takes keys 8w .. 8w + 7 of the block for the 16 heads;
// pass 2: warp w head w; pass 3: warp w columns 32w .. 32w + 31 (kD = 512).
// kPair (Hopper, a cluster of two CTAs per 16 heads, grid (rows, 2 x ceil(heads / 16))): CTA rank r of the pair
// scores the key blocks b with b % 2 == r in pass 1, the softmax of heads 8r .. 8r + 7 in pass 2 and output
// columns 256r .. 256r + 255 in pass 3 (warp w: 16 columns), the passes apart by cluster barriers (the scores and
// probabilities go through the global scratch, as between the CTAs' warps before). Every output element's
// operations are unchanged (a score's MMA chain, a head's softmax, a column's accumulation over all key blocks
// in order), so the bits are those of one CTA per 16 heads: half the per-CTA work at twice the CTAs, for batches
// whose CTAs leave most SMs idle (a batch of one: 8 SMs instead of 4).
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/kernels/v41_attention_keys.cuh"
#include "backends/cuda/kernels/v41_attention_softmax.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kV41hHeads = 16;    // heads per CTA (one MMA row tile)
constexpr int kV41hBlock = 128;   // keys per block
constexpr int kV41hThreads = 512;
// Key items whose code loads a thread puts in flight at once: 4 of a 128-key block's 8, two rounds of global
// loads per staging instead of 4 (the kernel is bound by latency chains at a few rows; ptxas: no spills at
// 4, 82 bytes at 8; the 64-head kernel keeps 2: its 64 accumulators leave no registers for more).
constexpr int kV41hLoadBatch = 4;
// Dynamic shared memory: q [16, pitch] and the key block [128, pitch] bf16 (at the end the f32 output
// [16, kD] over them), P [16, 128 + 8] bf16, the key table.
__host__ __device__ constexpr int64_t v41h_smem_bytes(int64_t kd) {
    return 2 * (kV41hHeads + kV41hBlock) * tca_pitch(kd) + 2 * kV41hHeads * (kV41hBlock + 8) + kV41KeyTableBytes;
}

// Every thread of both CTAs of the cluster arrives; the global (and shared) memory writes before it are visible to
// both after it (release / acquire at cluster scope).
__device__ __forceinline__ void v41h_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
    __trap();  // the launcher pairs CTAs only on devices with clusters (compute capability 9.0+)
#endif
}

// q of 16 heads h0 .. h0 + 15 of row r as bf16 into sq ([16, pitch]; the 64-head kernel's tca_stage_rows
// conversion); heads from nh on zero. Every thread of the CTA (kThreads).
template <int kD, int kThreads>
__device__ __forceinline__ void v41h_stage_q(__nv_bfloat16* sq, const SinkAttentionParams& p, int64_t r, int64_t h0, int64_t nh,
                                             int tid) {
    constexpr int kP = static_cast<int>(tca_pitch(kD)), kQuads = kD / 4, kPer = kV41hHeads * kQuads / kThreads;
    static_assert(kV41hHeads * kQuads % kThreads == 0, "whole sweeps");
    float4 v[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int i = tid + k * kThreads, hh = i / kQuads;
        v[k] = hh < nh ? *reinterpret_cast<const float4*>(p.q + (r * p.heads + h0 + hh) * kD + (i % kQuads) * 4)
                       : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int i = tid + k * kThreads;
        *reinterpret_cast<uint2*>(sq + (i / kQuads) * kP + (i % kQuads) * 4) =
            uint2{pack_bf16x2(v[k].x, v[k].y), pack_bf16x2(v[k].z, v[k].w)};
    }
}

// Pass 1's scores of one warp: sc = q (16 heads, sq [16, kP]) · keys 0 .. 7 (kv [8, kP]) over K = kD, one m16n8k16
// chain with k-steps ascending from zero (sc: the C fragment: heads g, g + 8 x keys 2q, 2q + 1). The MMA's
// per-element result does not depend on the tile's other rows and columns, so a score's bits do not depend on
// which keys and CTA share its tile.
template <int kD, int kP>
__device__ __forceinline__ void v41h_score_tile(float (&sc)[4], const __nv_bfloat16* sq, const __nv_bfloat16* kv, int lane) {
    sc[0] = sc[1] = sc[2] = sc[3] = 0.f;
#pragma unroll 4
    for (int ks = 0; ks < kD / 16; ks += 2) {  // two k-steps' B fragments per ldmatrix
        uint32_t a0[4], a1[4], bb[4];
        dev::ldmatrix_x4(a0, sq + (lane % 16) * kP + ks * 16 + (lane / 16) * 8);
        dev::ldmatrix_x4(a1, sq + (lane % 16) * kP + (ks + 1) * 16 + (lane / 16) * 8);
        dev::ldmatrix_x4(bb, kv + (lane % 8) * kP + ks * 16 + (lane / 8) * 8);
        dev::mma_bf16_16816(sc, a0, bb[0], bb[1]);
        dev::mma_bf16_16816(sc, a1, bb[2], bb[3]);
    }
}

// grid (rows, ceil(heads / 16)), or with kPair (rows, 2 x ceil(heads / 16)) in clusters of (1, 2, 1); block
// kV41hThreads, dynamic shared memory v41h_smem_bytes(kD).
template <int kD, bool kPair = false>
static __global__ void __launch_bounds__(kV41hThreads, 1) v41_tc_attention_heads_kernel(const __grid_constant__ SinkAttentionParams p) {
    static_assert(kD == 32 * (kV41hThreads / 32), "pass 3: 32 columns per warp");
    constexpr int kParts = kPair ? 2 : 1;                // CTAs per 16 heads
    constexpr int kTiles = 4 / kParts;                  // pass 3: n8 column tiles per warp
    constexpr int kSoftmaxHeads = kV41hHeads / kParts;  // pass 2: heads per CTA
    extern __shared__ __align__(16) unsigned char v41h_sm[];
    constexpr int kP = static_cast<int>(tca_pitch(kD)), kPP = kV41hBlock + 8;
    __nv_bfloat16* const sq = reinterpret_cast<__nv_bfloat16*>(v41h_sm);
    __nv_bfloat16* const skv = sq + kV41hHeads * kP;
    __nv_bfloat16* const sp = skv + kV41hBlock * kP;
    unsigned char* const table = reinterpret_cast<unsigned char*>(sp + kV41hHeads * kPP);
    float* const so = reinterpret_cast<float*>(v41h_sm);  // [16, kD] at the end, over q and kv

    const int part = kPair ? static_cast<int>(blockIdx.y % 2) : 0;  // the CTA's rank in its cluster
    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y / kParts) * kV41hHeads;
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
    const int64_t pos = p.positions[r];
    int64_t nc;
    const SinkKeys key = v41_row_keys<kD, kV41hThreads>(p, r, tid, nc);
    const int64_t nh = p.heads - h0 < kV41hHeads ? p.heads - h0 : kV41hHeads;
    const int64_t num_blocks = (nc + kV41hBlock - 1) / kV41hBlock;
    float* const scores0 = p.scratch + (r * p.heads + h0) * p.max_candidates;  // head hh at + hh * max_candidates
    const V41KeyStaging<kD, kV41hThreads> keys(key, p, table, nc, tid);

    v41h_stage_q<kD, kV41hThreads>(sq, p, r, h0, nh, tid);

    // Pass 1: warp w's 16 heads x 8 keys per block (kPair: this CTA's blocks), the last block first (the first stays
    // staged for pass 3).
    int64_t staged = -1;  // the block left in skv
    for (int64_t b = num_blocks - 1; b >= 0; --b) {
        if (kPair && static_cast<int>(b % 2) != part) continue;  // (uniform over the CTA)
        const int64_t j0 = b * kV41hBlock, n = nc - j0 < kV41hBlock ? nc - j0 : kV41hBlock;
        __syncthreads();
        keys.template stage<kV41hBlock, kP, kV41hLoadBatch>(skv, j0, n, key, p);
        staged = b;
        __syncthreads();
        float sc[4];
        v41h_score_tile<kD, kP>(sc, sq, skv + warp * 8 * kP, lane);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int hh = g + (e / 2) * 8;
            const int64_t j = warp * 8 + qd * 2 + (e % 2);
            if (hh < nh && j < n) scores0[hh * p.max_candidates + j0 + j] = sc[e] * p.softmax_scale;
        }
    }
    __syncthreads();  // every head's scores are in the scratch
    if constexpr (kPair) v41h_cluster_sync();  // (the other CTA's blocks too)
    // Pass 2: warp w's head (v41_tc_attention_kernel's pass 2, the same code); kPair: heads 8·part + w, w < 8.
    constexpr int kPerLane = kV41KeyTable / 32;
    const int mine = lane < nc ? static_cast<int>((nc - 1 - lane) / 32) + 1 : 0;
    for (int64_t hh = part * kSoftmaxHeads + warp; warp < kSoftmaxHeads && hh < nh; hh += kV41hThreads / 32) {
        float* s = scores0 + hh * p.max_candidates + lane;
        float e[kPerLane];
        const float den = v41_head_softmax(s, p.sink[h0 + hh], mine, e);
#pragma unroll
        for (int k = 0; k < kPerLane; ++k)
            if (k < mine) s[32 * k] = dev::round_bf16(e[k] / den);
    }
    __syncthreads();  // every head's probabilities are in the scratch
    if constexpr (kPair) v41h_cluster_sync();  // (the other CTA's heads too)
    // Pass 3: o = P · V, warp w's 16 heads x 32 columns (kPair: 16 of this CTA's 256), blocks in order.
    float acc[kTiles][4];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    constexpr int kPHeads = kV41hThreads / kV41hBlock, kPPer = kV41hHeads / kPHeads;  // P staging: 4 heads per sweep
    const int pj = tid % kV41hBlock, ph = tid / kV41hBlock;
    constexpr int kCols = kD / kParts;  // this CTA's output columns [cbeg, cbeg + kCols)
    const int cbeg = part * kCols, c0 = cbeg + warp * (32 / kParts);
    for (int64_t b = 0; b < num_blocks; ++b) {
        const int64_t j0 = b * kV41hBlock, n = nc - j0 < kV41hBlock ? nc - j0 : kV41hBlock;
        __syncthreads();
        if (b != staged) keys.template stage<kV41hBlock, kP, kV41hLoadBatch>(skv, j0, n, key, p);  // (else still staged from pass 1)
        staged = -1;
        float pv[kPPer];
#pragma unroll
        for (int k = 0; k < kPPer; ++k) {
            const int hh = ph + k * kPHeads;
            pv[k] = hh < nh && pj < n ? __ldcg(scores0 + hh * p.max_candidates + j0 + pj) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kPPer; ++k) sp[(ph + k * kPHeads) * kPP + pj] = __float2bfloat16_rn(pv[k]);
        __syncthreads();
        const int ksteps = static_cast<int>((n + 15) / 16);  // (the rest are zero rows: +0 products)
        for (int ks = 0; ks < ksteps; ++ks) {
            uint32_t a[4];
            dev::ldmatrix_x4(a, sp + (lane % 16) * kPP + ks * 16 + (lane / 16) * 8);
#pragma unroll
            for (int t = 0; t < kTiles; t += 2) {
                uint32_t bb[4];
                dev::ldmatrix_x4_trans(bb, skv + (ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kP + c0 + t * 8 + (lane / 16) * 8);
                dev::mma_bf16_16816(acc[t], a, bb[0], bb[1]);
                dev::mma_bf16_16816(acc[t + 1], a, bb[2], bb[3]);
            }
        }
    }
    // bf16 outputs through shared memory, then per head the inverse RoPE and bf16 of its dims (tca_merge_store's
    // one-part form).
    __syncthreads();  // every warp's MMAs are done with q and kv, which the output overwrites
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
        const int col = c0 + t * 8 + qd * 2;
        *reinterpret_cast<float2*>(so + g * kD + col) = make_float2(dev::round_bf16(acc[t][0]), dev::round_bf16(acc[t][1]));
        *reinterpret_cast<float2*>(so + (g + 8) * kD + col) = make_float2(dev::round_bf16(acc[t][2]), dev::round_bf16(acc[t][3]));
    }
    __syncthreads();
    const float* cs = p.cos_sin + pos * p.rope_dim;
    // The rope dims [kD - rope_dim, kD) are this CTA's (kPair: the second CTA's; the launcher pairs only when
    // rope_dim <= kD / 2).
    const bool rope_here = kD - p.rope_dim >= cbeg && kD <= cbeg + kCols;
    for (int hh = warp; hh < nh; hh += kV41hThreads / 32) {
        float* o = so + hh * kD;
        if (rope_here)
            for (int64_t i = lane; i < p.rope_dim / 2; i += 32) dev::rope_pair(o + (kD - p.rope_dim), static_cast<int>(i), cs, true);
        __syncwarp();
        float* dst = p.out + (r * p.heads + h0 + hh) * kD;
        for (int d = cbeg + lane; d < cbeg + kCols; d += 32) dst[d] = d >= kD - p.rope_dim ? dev::round_bf16(o[d]) : o[d];
    }
}

}  // namespace deepinfer::cuda::kernels
