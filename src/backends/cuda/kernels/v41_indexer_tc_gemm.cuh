// SPDX-License-Identifier: Apache-2.0
// V4.1's lightning-indexer scores at prefill as a tiled GEMM: V4's indexer_tc_gemm_kernel
// (indexer_tc_gemm.cuh) over V4.1's index rows and compact keys. v41_indexer_tc_kernel (v41_indexer_tc.cuh)
// gives every index row its own block, so at prefill each row decodes every key it scores from the MXFP4
// cache again (a chunk of T rows over n keys: T x n key decodes); here a block takes kIgRows = 8
// consecutive index rows, decodes each 64-key tile once for all of them (the next tile's codes in
// registers while this one is scored) and runs one warp per row over its kMt x 16 heads.
//
// Same bits as v41_indexer_tc_kernel: the tile holds the same bf16 key values (cache_codes16 /
// cache_decode16 = cache_values16, through store_bf16x16), q and the head weights are staged with the same
// roundings, each warp's [heads x 64 keys] dot products come from indexer_tc_block's MMAs (the same
// fragments: head h at MMA row h % 16, key j at column j % 8, k ascending in steps of 16, f32 from zero),
// and the per-key sum over the heads runs in head order on packed bf16 pairs, each operation equal to
// the reference's f32 operation + round_bf16 (indexer_tc_gemm.cuh's epilogue: ig::). Scores depend on
// their row and key only (batch-invariant; the picks do not change).
//
// The rows of a block share one key tile when they score the same keys (one segment: a prefill chunk).
// A block whose rows come from several segments (the last rows of one chunk beside the next, decode rows
// beside a chunk) takes its segments in turn, each pass with the warps of that segment's rows.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/kernels/indexer_tc.cuh"
#include "backends/cuda/kernels/indexer_tc_gemm.cuh"
#include "backends/cuda/kernels/v41_cache.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// q [8 rows x kMt * 16 heads, pitch] bf16, two key tiles [64, pitch] bf16, the head weights [8 x kMt * 16] as
// bf16 pairs, per warp the transpose scratch [32 key pairs, kIgPairPitch] u32.
__host__ __device__ constexpr int64_t v41_ig_smem_bytes(int64_t kd, int64_t mt) {
    return 2 * (kIgRows * mt * 16 + 2 * kItcKeys) * itc_pitch(kd) + 4 * kIgRows * mt * 16 + 4 * kIgRows * 32 * kIgPairPitch;
}

// grid (ceil(num_rows / 8), key spans), block kIgThreads, dynamic shared memory v41_ig_smem_bytes(kD, kMt);
// heads <= kMt * 16 (kMt 2 or 4). Groups run last rows first (at prefill the rows with the most keys start
// first). kStagger false: all warps in step (the same bits).
template <int kD, int kMt, bool kStagger>
static __global__ void __launch_bounds__(kIgThreads, 1) v41_indexer_tc_gemm_kernel(const __grid_constant__ IndexScoresParams p,
                                                                                   int64_t span) {
    extern __shared__ __align__(16) unsigned char v41_ig_sm[];
    static_assert(kMt == 2 || kMt == 4, "32 or 64 MMA head rows");
    constexpr int kH = kMt * 16;  // MMA head rows per query row
    constexpr int kP = static_cast<int>(itc_pitch(kD));
    constexpr int kD4 = kD / 4;
    constexpr int kItems = kItcKeys * (kD / 16);                            // 16-value items of a key tile
    constexpr int kPer = (kItems + kIgThreads - 1) / kIgThreads;            // items per thread and tile
    static_assert(kD % 16 == 0 && (kP * 2) % 16 == 0, "16 values per item, 16-byte shared-memory stores");
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4;
    const int64_t group = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
    const int64_t r0 = group * kIgRows;
    const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * span;
    const int64_t key_bytes = row_bytes_of(p.key_format, kD, p.key_block);
    const int64_t heads = p.heads;
    const float softmax_scale = 1.0f / sqrtf(static_cast<float>(kD));
    const float weights_scale = 1.0f / sqrtf(static_cast<float>(heads));

    // This warp's index row: its -inf tail [scored_end, k_end) within the span, its keys' end.
    const int64_t my_i = r0 + warp;
    const bool my_valid = my_i < p.num_rows;
    const IndexRow my_row = my_valid ? p.rows[my_i] : IndexRow{};
    const int64_t my_k_end = my_valid ? (k_begin + span < my_row.num_entries ? k_begin + span : my_row.num_entries) : k_begin;
    const int64_t my_scored_end =
        my_k_end < my_row.visible ? my_k_end : (my_row.visible > k_begin ? static_cast<int64_t>(my_row.visible) : k_begin);
    float* out = p.scores + (my_valid ? my_i : 0) * p.max_entries;
    for (int64_t j = my_scored_end + lane; j < my_k_end; j += 32) out[j] = -__int_as_float(0x7F800000);

    __shared__ const uint8_t* keys_sh[kIgRows];
    __shared__ int seg_sh[kIgRows];
    __shared__ long long end_sh[kIgRows];
    if (lane == 0) {
        keys_sh[warp] = my_row.keys;
        seg_sh[warp] = my_valid ? my_row.segment : -1;
        end_sh[warp] = my_scored_end;  // (k_begin when the row scores nothing in this span)
    }

    auto* q_s = reinterpret_cast<__nv_bfloat16*>(v41_ig_sm);             // [8 * kH, kP]
    __nv_bfloat16* k_s = q_s + kIgRows * kH * kP;                          // [2][64, kP]
    auto* w_s = reinterpret_cast<uint32_t*>(k_s + 2 * kItcKeys * kP);     // [8 * kH] (w, w) bf16 pairs
    uint32_t* x_s = w_s + kIgRows * kH + warp * 32 * kIgPairPitch;         // this warp's [32, kIgPairPitch]

    // q of the 8 rows (bf16, indexer_tc_block's rounding; zero rows past num_rows and for heads >= p.heads)
    // and the head weights, 8 float4 loads in flight.
    {
        constexpr int kQ4 = kIgRows * kH * kD4;
        static_assert(kQ4 % (8 * kIgThreads) == 0, "q staging in batches of 8");
        for (int x0 = tid; x0 < kQ4; x0 += 8 * kIgThreads) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int x = x0 + u * kIgThreads, i = x / (kH * kD4), h = (x / kD4) % kH;
                v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (r0 + i < p.num_rows && h < heads) {
                    const int64_t br = p.rows[r0 + i].row;
                    v[u] = reinterpret_cast<const float4*>(p.q + (br * heads + h) * kD)[x % kD4];
                }
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int x = x0 + u * kIgThreads;
                uint2 b;
                b.x = ig::pack_bf16x2(v[u].x, v[u].y);
                b.y = ig::pack_bf16x2(v[u].z, v[u].w);
                *reinterpret_cast<uint2*>(q_s + (x / kD4) * kP + (x % kD4) * 4) = b;
            }
        }
        for (int x = tid; x < kIgRows * kH; x += kIgThreads) {
            const int64_t i = x / kH, h = x % kH;
            float w = 0.f;
            if (r0 + i < p.num_rows && h < heads)
                w = dev::round_bf16(dev::mul(dev::mul(p.weights[p.rows[r0 + i].row * heads + h], softmax_scale), weights_scale));
            const uint32_t hi = __float_as_uint(w) >> 16;  // bf16-exact: the high half is the value
            w_s[x] = hi | hi << 16;
        }
    }
    __syncthreads();  // q_s, w_s, the rows' facts
    // This warp's head weights: heads 16 mt + g and + 8.
    uint32_t wpair[kMt][2];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
        wpair[mt][0] = w_s[warp * kH + mt * 16 + g];
        wpair[mt][1] = w_s[warp * kH + mt * 16 + g + 8];
    }
    const __nv_bfloat16* qw = q_s + warp * kH * kP;

    // One pass per segment among the block's rows (one at prefill), lowest row first; block-uniform.
    unsigned done = 0;
    for (int i = 0; i < kIgRows; ++i)
        if (seg_sh[i] < 0 || end_sh[i] <= k_begin) done |= 1u << i;  // (no keys to score here)
#pragma unroll 1
    while (done != (1u << kIgRows) - 1) {
        const int lead = __ffs(~done) - 1;
        const int seg = seg_sh[lead];
        const uint8_t* keys = keys_sh[lead];
        unsigned members = 0;
        int64_t k_end = k_begin;
        for (int i = 0; i < kIgRows; ++i)
            if (!(done >> i & 1u) && seg_sh[i] == seg && keys_sh[i] == keys) {
                members |= 1u << i;
                k_end = end_sh[i] > k_end ? static_cast<int64_t>(end_sh[i]) : k_end;
            }
        done |= members;
        const bool member = members >> warp & 1u;

        // Key tiles: thread tid decodes items tid + u * kIgThreads of a tile (key item / (kD / 16), values
        // 16 * (item % (kD / 16)) ..), the codes of the next tile loaded into registers ahead.
        Codes16 codes[kPer];
        const uint8_t* krow[kPer];
        auto load_tile = [&](int64_t k0) {
#pragma unroll
            for (int u = 0; u < kPer; ++u) {
                const int item = tid + u * kIgThreads, j = item / (kD / 16), d0 = (item % (kD / 16)) * 16;
                krow[u] = nullptr;
                if (item < kItems && k0 + j < k_end) {
                    krow[u] = cache_row(keys, p.paged_keys, seg, k0 + j, key_bytes);
                    codes[u] = cache_codes16(krow[u], p.key_format, kD, p.key_block, d0);
                }
            }
        };
        auto store_tile = [&](int buf) {
#pragma unroll
            for (int u = 0; u < kPer; ++u) {
                const int item = tid + u * kIgThreads, j = item / (kD / 16), d0 = (item % (kD / 16)) * 16;
                if (item >= kItems) continue;
                float v[16];
                if (krow[u] != nullptr) {
                    cache_decode16(codes[u], krow[u], p.key_format, kD, p.key_block, d0, v);
                } else {
#pragma unroll
                    for (int k = 0; k < 16; ++k) v[k] = 0.0f;
                }
                store_bf16x16(k_s + (buf * kItcKeys + j) * kP + d0, v);
            }
        };
        __syncthreads();  // the previous pass's readers are done with k_s
        load_tile(k_begin);
        store_tile(0);
        if (k_begin + kItcKeys < k_end) load_tile(k_begin + kItcKeys);
        __syncthreads();  // tile 0
        const int64_t row_end = my_scored_end;  // this row's scored keys end here

        // Tile t's [kH heads x 64 keys] dot products of this warp's row into acc (key buffer t % 2), then its scores.
        float acc[kMt][8][4];
        auto mma_tile = [&](int64_t t) { ig::tile_mma<kD, kMt>(acc, qw, k_s + (t & 1) * kItcKeys * kP, lane); };
        auto epilogue_tile = [&](int64_t t) {
            const uint32_t score = ig::tile_scores<kMt>(acc, wpair, x_s, heads, lane);
            const int64_t j = k_begin + t * kItcKeys + 2 * lane;
            if (j < row_end) out[j] = ig::score_of(score & 0xFFFFu);
            if (j + 1 < row_end) out[j + 1] = ig::score_of(score >> 16);
        };
        // After tile t's buffer is taken: tile t + 1 (in registers) into the other buffer, whose readers are
        // done, and tile t + 2 into registers, in flight while tiles are scored.
        auto stage_next = [&](int64_t t) {
            if (k_begin + (t + 1) * kItcKeys >= k_end) return;  // block-uniform
            store_tile(static_cast<int>((t + 1) & 1));
            if (k_begin + (t + 2) * kItcKeys < k_end) load_tile(k_begin + (t + 2) * kItcKeys);
        };
        auto mine = [&](int64_t t) { return member && k_begin + t * kItcKeys < row_end; };  // warp-uniform
        const int64_t tiles = (k_end - k_begin + kItcKeys - 1) / kItcKeys;
        ig::tile_schedule<kStagger>(tiles, warp, mine, mma_tile, epilogue_tile, stage_next);
    }
}

}  // namespace deepinfer::cuda::kernels
