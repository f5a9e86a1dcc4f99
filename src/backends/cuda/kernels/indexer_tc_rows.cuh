// SPDX-License-Identifier: Apache-2.0
// Lightning-indexer scores on tensor cores for prefill: kR query rows per block share each key tile.
// indexer_tc_kernel (indexer_tc.cuh) gives every query row its own block, so at prefill every block
// re-streams the same keys (with a page lookup per key element). Here a block takes kR consecutive
// rows (at prefill: consecutive positions of one segment, whose visible keys differ by at most a few),
// stages each 64-key tile once (one page lookup per key, float4 loads, the next tile's loads in flight
// while this one is scored) and runs kR x 4 warps: warp w scores heads 16(w%4)..+15 of local row w/4
// with exactly indexer_tc_block's MMAs (same fragments, same k order), so every (row, head, key) dot
// product is the same f32 value. The head-weighted terms bf16(relu(bf16(q_h · k)) · w_h) are formed in
// the MMA epilogue (bf16-exact, kept as their 16 high bits) and the per-key sum runs over the heads in
// order as before; every score is bit-identical to indexer_tc_kernel's and depends on its row and key
// only (batch-invariant; the picks do not change).
//
// Rows of one block may belong to different segments (a mixed batch): the block then scores each
// segment's rows in turn over that segment's keys (correct, without the sharing).
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/indexer_tc.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kItrRows = 4;  // rows per block of the prefill kernel (launch default)

template <int kR>
constexpr int itr_threads() {
    return kItcThreads * kR;
}
constexpr int kItrTermPitch = kItcKeys + 8;  // 16-bit terms per head row (conflict-free epilogue stores)

// q [kR * 64, pitch] and the key tile [64, pitch] in bf16, the terms [kR * 64 heads, kItrTermPitch]
// as 16-bit bf16 patterns, the head weights [kR * 64] f32.
__host__ __device__ constexpr int64_t itr_smem_bytes(int64_t kd, int64_t rows) {
    return 2 * (rows + 1) * kItcHeads * itc_pitch(kd) + 2 * rows * kItcHeads * kItrTermPitch + 4 * rows * kItcHeads;
}

// The scores of rows [r0, r0 + kR) over keys [k_begin, k_begin + span), by a block of itr_threads<kR>()
// threads with itr_smem_bytes(kD, kR) of dynamic shared memory (also the mixed-segment path of
// indexer_tc_gemm.cuh, whose blocks have the thread count of kR = 2).
template <int kD, int kR>
__device__ __forceinline__ void indexer_tc_rows_body(const IndexerParams& p, int64_t span, int64_t r0, int64_t k_begin) {
    extern __shared__ __align__(16) unsigned char itr_sm[];
    constexpr int kT = kItcThreads * kR;
    constexpr int kP = static_cast<int>(itc_pitch(kD));
    constexpr int kD4 = kD / 4;
    constexpr int kLoads = kItcKeys * kD4 / kT;  // float4 key loads per thread and tile
    static_assert(kItcKeys * kD4 % kT == 0 && kLoads >= 1, "key staging: whole float4 batches");
    auto* q_s = reinterpret_cast<__nv_bfloat16*>(itr_sm);                   // [kR * 64, kP]
    __nv_bfloat16* k_s = q_s + kR * kItcHeads * kP;                          // [64, kP]
    auto* t_s = reinterpret_cast<uint16_t*>(k_s + kItcHeads * kP);           // [kR * 64, kItrTermPitch]
    float* w_s = reinterpret_cast<float*>(t_s + kR * kItcHeads * kItrTermPitch);  // [kR * 64]
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
    const int my_row = warp / 4, hw = warp % 4;  // MMA role: local row, head group of 16
    const int64_t heads = p.heads;
    const float softmax_scale = 1.0f / sqrtf(static_cast<float>(kD));
    const float weights_scale = 1.0f / sqrtf(static_cast<float>(heads));

    int seg_of[kR];
    int64_t vis_of[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) {
        const int64_t r = r0 + i;
        seg_of[i] = r < p.rows ? p.row_segment[r] : -1;
        vis_of[i] = r < p.rows ? (static_cast<int64_t>(p.positions[r]) + 1) / p.ratio : 0;
    }
    // Visible keys of this warp's MMA row and of this thread's summing row (register selects, no
    // dynamically indexed local arrays in the tile loop).
    const int sum_row = tid / kItcKeys;
    int64_t mma_vis = 0, sum_vis = 0;
#pragma unroll
    for (int i = 0; i < kR; ++i) {
        mma_vis = i == my_row ? vis_of[i] : mma_vis;
        sum_vis = i == sum_row ? vis_of[i] : sum_vis;
    }
    // One pass per distinct segment among the block's rows (one pass at prefill); every branch below
    // depends on block-uniform values only.
#pragma unroll 1
    for (int lead = 0; lead < kR; ++lead) {
        int lead_seg = -1;
#pragma unroll
        for (int i = 0; i < kR; ++i) lead_seg = i == lead ? seg_of[i] : lead_seg;
        bool first = lead_seg >= 0;
#pragma unroll
        for (int i = 0; i < kR; ++i) first = first && !(i < lead && seg_of[i] == lead_seg);
        if (!first) continue;
        unsigned active = 0;
        int64_t k_end = k_begin;
#pragma unroll
        for (int i = 0; i < kR; ++i) {
            if (seg_of[i] != lead_seg) continue;
            const int64_t e = k_begin + span < vis_of[i] ? k_begin + span : vis_of[i];
            if (e > k_begin) active |= 1u << i;
            k_end = e > k_end ? e : k_end;
        }
        if (active == 0) continue;
        const DeviceSegment& s = p.segments[lead_seg];
        __syncthreads();  // a previous pass's readers are done with q_s, w_s, k_s, t_s
        // q of the active rows (bf16, zero rows for heads >= p.heads) and their weights.
        for (int i = 0; i < kR; ++i) {
            if (!(active >> i & 1u)) continue;
            const float* q = p.q + (r0 + i) * heads * kD;
            for (int x = tid; x < kItcHeads * kD4; x += kT) {
                const int h = x / kD4;
                const float4 v = h < heads ? reinterpret_cast<const float4*>(q)[x] : make_float4(0.f, 0.f, 0.f, 0.f);
                __nv_bfloat16* dst = q_s + (i * kItcHeads + h) * kP + (x % kD4) * 4;
                dst[0] = __float2bfloat16_rn(v.x);
                dst[1] = __float2bfloat16_rn(v.y);
                dst[2] = __float2bfloat16_rn(v.z);
                dst[3] = __float2bfloat16_rn(v.w);
            }
            for (int64_t h = tid; h < heads; h += kT)
                w_s[i * kItcHeads + h] =
                    dev::round_bf16(dev::mul(dev::mul(p.weights[(r0 + i) * heads + h], softmax_scale), weights_scale));
        }
        // Key tile staging: float4 x of a tile is key x / kD4, floats 4 (x % kD4)..+3 (zeros past k_end).
        float4 kv[kLoads];
        auto load_tile = [&](int64_t k0) {
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {
                const int x = tid + u * kT;
                const int64_t j = k0 + x / kD4;
                kv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (j < k_end) {
                    const float* src = entry_row(s, true, j, kD) + (x % kD4) * 4;
                    if ((reinterpret_cast<uintptr_t>(src) & 15u) == 0) kv[u] = *reinterpret_cast<const float4*>(src);
                    else kv[u] = make_float4(src[0], src[1], src[2], src[3]);
                }
            }
        };
        load_tile(k_begin);
#pragma unroll 1
        for (int64_t k0 = k_begin; k0 < k_end; k0 += kItcKeys) {
            __syncthreads();  // the previous tile's readers are done with k_s and t_s
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {
                const int x = tid + u * kT;
                __nv_bfloat16* dst = k_s + (x / kD4) * kP + (x % kD4) * 4;
                dst[0] = __float2bfloat16_rn(kv[u].x);
                dst[1] = __float2bfloat16_rn(kv[u].y);
                dst[2] = __float2bfloat16_rn(kv[u].z);
                dst[3] = __float2bfloat16_rn(kv[u].w);
            }
            __syncthreads();
            if (k0 + kItcKeys < k_end) load_tile(k0 + kItcKeys);  // in flight while this tile is scored
            if ((active >> my_row & 1u) && k0 < mma_vis) {  // warp-uniform
                float acc[8][4];
#pragma unroll
                for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
                const __nv_bfloat16* qw = q_s + (my_row * kItcHeads + hw * 16) * kP;
#pragma unroll
                for (int ks = 0; ks < kD / 16; ++ks) {
                    uint32_t a[4];
                    dev::ldmatrix_x4(a, qw + (lane % 16) * kP + ks * 16 + (lane / 16) * 8);
#pragma unroll
                    for (int t = 0; t < 8; t += 2) {
                        uint32_t b[4];
                        dev::ldmatrix_x4(b, k_s + (t * 8 + lane % 8 + (lane / 16) * 8) * kP + ks * 16 + ((lane / 8) % 2) * 8);
                        dev::mma_bf16_16816(acc[t], a, b[0], b[1]);
                        dev::mma_bf16_16816(acc[t + 1], a, b[2], b[3]);
                    }
                }
                // Terms bf16(relu(bf16(dot)) · w_h) of heads h < p.heads, as 16-bit bf16 patterns.
                const int h0 = hw * 16 + g;
                const float w0 = h0 < heads ? w_s[my_row * kItcHeads + h0] : 0.f;
                const float w1 = h0 + 8 < heads ? w_s[my_row * kItcHeads + h0 + 8] : 0.f;
                auto term = [](float dot, float w) {
                    return __float_as_uint(dev::round_bf16(dev::mul(fmaxf(dev::round_bf16(dot), 0.0f), w))) >> 16;
                };
                uint32_t* t0 = reinterpret_cast<uint32_t*>(t_s + (my_row * kItcHeads + h0) * kItrTermPitch);
                uint32_t* t1 = reinterpret_cast<uint32_t*>(t_s + (my_row * kItcHeads + h0 + 8) * kItrTermPitch);
#pragma unroll
                for (int t = 0; t < 8; ++t) {
                    const int c2 = (t * 8 + qd * 2) / 2;
                    t0[c2] = term(acc[t][0], w0) | term(acc[t][1], w0) << 16;
                    t1[c2] = term(acc[t][2], w1) | term(acc[t][3], w1) << 16;
                }
            }
            __syncthreads();
            // Per (local row, key) of the tile: the heads' terms summed in order with bf16 rounding.
            if (tid < kR * kItcKeys) {
                const int i = sum_row, c = tid % kItcKeys;
                const int64_t j = k0 + c;
                if ((active >> i & 1u) && j < sum_vis && j < k_begin + span) {
                    const uint16_t* tt = t_s + i * kItcHeads * kItrTermPitch + c;
                    float score = 0;
                    for (int64_t h = 0; h < heads; ++h)
                        score = dev::round_bf16(dev::add(score, __uint_as_float(static_cast<uint32_t>(tt[h * kItrTermPitch]) << 16)));
                    p.scores[(r0 + i) * p.max_visible + j] = score;
                }
            }
        }
    }
}

// grid (ceil(rows / kR), key spans), block itr_threads<kR>(), dynamic shared memory itr_smem_bytes(kD, kR).
template <int kD, int kR>
static __global__ void __launch_bounds__(kItcThreads* kR) indexer_tc_rows_kernel(const __grid_constant__ IndexerParams p, int64_t span) {
    indexer_tc_rows_body<kD, kR>(p, span, static_cast<int64_t>(blockIdx.x) * kR, static_cast<int64_t>(blockIdx.y) * span);
}

}  // namespace deepinfer::cuda::kernels
