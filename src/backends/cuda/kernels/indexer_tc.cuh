// SPDX-License-Identifier: Apache-2.0
// Lightning-indexer scores on tensor cores (fast GEMM mode, official numerics). For a query row and a
// key k the score is, over the heads h in order,
//   score = bf16(score + bf16(relu(bf16(q_h · k)) · w_h)),  w_h = bf16(weight_h · d^-1/2 · H^-1/2),
// exactly as indexer_scores_kernel (attention.cuh) except that the dot products q_h · k come from
// bf16 m16n8k16 MMAs with f32 accumulation (q and the keys hold Hadamard+FP4 values in official
// numerics, which bf16 holds exactly: only the order of the f32 sums differs). Each key's score
// depends on that row and key only, so the key split of the grid never changes a result.
//
// Block: 128 threads = 4 warps, warp w owns heads 16w..16w+15 of the (zero-padded) 64; a block takes
// one query row and the keys [blockIdx.y * span, +span) in tiles of 64.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <type_traits>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kItcThreads = 128;
constexpr int kItcHeads = 64;  // MMA rows (heads beyond p.heads are zero rows, never summed)
constexpr int kItcKeys = 64;   // keys per tile

__host__ __device__ constexpr int64_t itc_pitch(int64_t kd) { return kd + 8; }  // bf16 elements
// q [64, pitch] and a key tile [64, pitch] in bf16, the tile's rounded dot products [64, 64 + 1] f32,
// the head weights [64] f32.
__host__ __device__ constexpr int64_t itc_smem_bytes(int64_t kd) {
    return 2 * 2 * kItcHeads * itc_pitch(kd) + 4 * (kItcHeads * (kItcKeys + 1) + kItcHeads);
}

// Keys per block (whole tiles) so that `rows` rows make about two waves on `sms` multiprocessors; a
// key's score never depends on it.
inline int64_t itc_span(int64_t max_keys, int64_t rows, int64_t sms) {
    const int64_t tiles = (max_keys + kItcKeys - 1) / kItcKeys;
    const int64_t want = (2 * sms + rows - 1) / rows;
    const int64_t splits = want < 1 ? 1 : want > tiles ? tiles : want;
    return kItcKeys * ((tiles + splits - 1) / splits);
}

// One query row's scores for keys [k_begin, k_end) in tiles of 64: q rows of the row's heads
// (kD floats each, `heads` <= 64), their weights, key(j, d) the key values (bf16-exact), and
// store(j, score). Shared by the V4 kernel (contiguous or paged f32 keys) and V4.1's (compact keys).
// key16 (optional): key16(j, d0, v) fills v[0..15] with key j's values d0 .. d0 + 15 (d0 % 16 == 0), the values
// key(j, d0 + i) gives, from one read of the key's codes (V4.1's compact keys: cache_values16); the tile is then
// staged 16 values per item instead of one.
template <int kD, class Key, class Store, class Key16 = std::nullptr_t>
__device__ __forceinline__ void indexer_tc_block(const float* q, const float* weights, int64_t heads, int64_t k_begin,
                                                 int64_t k_end, Key key, Store store, Key16 key16 = nullptr) {
    extern __shared__ __align__(16) unsigned char itc_sm[];
    constexpr int kP = static_cast<int>(itc_pitch(kD));
    constexpr int kSP = kItcKeys + 1;
    auto* q_s = reinterpret_cast<__nv_bfloat16*>(itc_sm);  // [64, kP]
    __nv_bfloat16* k_s = q_s + kItcHeads * kP;             // [64, kP]
    float* dp_s = reinterpret_cast<float*>(k_s + kItcHeads * kP);  // [64 heads, kSP]
    float* w_s = dp_s + kItcHeads * kSP;                             // [64]
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, qd = lane % 4;
    const float softmax_scale = 1.0f / sqrtf(static_cast<float>(kD));
    const float weights_scale = 1.0f / sqrtf(static_cast<float>(heads));
    // Operands arrive 8 loads in flight per thread (a tile is bound by load latency, not bandwidth); q
    // as float4 (the launchers check its 16-byte alignment).
    constexpr int kQ4 = kItcHeads * kD / 4;
    for (int i0 = tid; i0 < kQ4; i0 += 8 * kItcThreads) {
        float4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = i0 + u * kItcThreads;
            v[u] = i < kQ4 && (i * 4) / kD < heads ? reinterpret_cast<const float4*>(q)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = i0 + u * kItcThreads;
            if (i < kQ4) {
                __nv_bfloat16* dst = q_s + ((i * 4) / kD) * kP + (i * 4) % kD;
                dst[0] = __float2bfloat16_rn(v[u].x);
                dst[1] = __float2bfloat16_rn(v[u].y);
                dst[2] = __float2bfloat16_rn(v[u].z);
                dst[3] = __float2bfloat16_rn(v[u].w);
            }
        }
    }
    for (int64_t h = tid; h < heads; h += kItcThreads)
        w_s[h] = dev::round_bf16(dev::mul(dev::mul(weights[h], softmax_scale), weights_scale));
    for (int64_t k0 = k_begin; k0 < k_end; k0 += kItcKeys) {
        const int64_t n = k_end - k0 < kItcKeys ? k_end - k0 : kItcKeys;
        __syncthreads();  // the previous tile's readers are done with k_s and dp_s
        static_assert(kItcKeys * kD % (8 * kItcThreads) == 0, "key staging in batches of 8");
        if constexpr (!std::is_same_v<Key16, std::nullptr_t>) {
            static_assert(kD % 16 == 0 && (kP * 2) % 16 == 0, "16 values per item, 16-byte shared-memory stores");
            for (int i = tid; i < kItcKeys * kD / 16; i += kItcThreads) {
                const int j = i / (kD / 16), d0 = (i % (kD / 16)) * 16;
                float v[16];
                if (j < n) {
                    key16(k0 + j, d0, v);
                } else {
#pragma unroll
                    for (int u = 0; u < 16; ++u) v[u] = 0.0f;
                }
                store_bf16x16(k_s + j * kP + d0, v);
            }
        } else
        for (int i0 = tid; i0 < kItcKeys * kD; i0 += 8 * kItcThreads) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int i = i0 + u * kItcThreads, j = i / kD;
                v[u] = j < n ? key(k0 + j, i % kD) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int i = i0 + u * kItcThreads;
                k_s[(i / kD) * kP + i % kD] = __float2bfloat16_rn(v[u]);
            }
        }
        __syncthreads();
        float acc[8][4];
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) {
            uint32_t a[4];
            dev::ldmatrix_x4(a, q_s + (warp * 16 + lane % 16) * kP + ks * 16 + (lane / 16) * 8);
#pragma unroll
            for (int t = 0; t < 8; t += 2) {
                uint32_t b[4];
                dev::ldmatrix_x4(b, k_s + (t * 8 + lane % 8 + (lane / 16) * 8) * kP + ks * 16 + ((lane / 8) % 2) * 8);
                dev::mma_bf16_16816(acc[t], a, b[0], b[1]);
                dev::mma_bf16_16816(acc[t + 1], a, b[2], b[3]);
            }
        }
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int col = t * 8 + qd * 2, h = warp * 16 + g;
            dp_s[h * kSP + col] = dev::round_bf16(acc[t][0]);
            dp_s[h * kSP + col + 1] = dev::round_bf16(acc[t][1]);
            dp_s[(h + 8) * kSP + col] = dev::round_bf16(acc[t][2]);
            dp_s[(h + 8) * kSP + col + 1] = dev::round_bf16(acc[t][3]);
        }
        __syncthreads();
        if (tid < n) {
            float score = 0;
            for (int64_t h = 0; h < heads; ++h)
                score = dev::round_bf16(dev::add(score, dev::round_bf16(dev::mul(fmaxf(dp_s[h * kSP + tid], 0.0f), w_s[h]))));
            store(k0 + tid, score);
        }
    }
}

// V4: grid (rows, key spans), block kItcThreads, dynamic shared memory itc_smem_bytes(kD).
template <int kD>
static __global__ void __launch_bounds__(kItcThreads) indexer_tc_kernel(const __grid_constant__ IndexerParams p, int64_t span) {
    const int64_t r = blockIdx.x;
    const int64_t visible = (static_cast<int64_t>(p.positions[r]) + 1) / p.ratio;
    const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * span;
    const int64_t k_end = k_begin + span < visible ? k_begin + span : visible;
    if (k_begin >= k_end) return;  // uniform over the block
    const DeviceSegment& s = p.segments[p.row_segment[r]];
    indexer_tc_block<kD>(
        p.q + r * p.heads * kD, p.weights + r * p.heads, p.heads, k_begin, k_end,
        [&](int64_t j, int d) { return entry_row(s, true, j, kD)[d]; },
        [&](int64_t j, float score) { p.scores[r * p.max_visible + j] = score; });
}

}  // namespace deepinfer::cuda::kernels
