// SPDX-License-Identifier: Apache-2.0
// Lightning-indexer scores at prefill as a tiled GEMM: a block takes kIgRows = 8 consecutive query rows
// of one segment (one warp per row, all 64 heads) and streams the shared 64-key tiles through a
// double buffer (the next tile's loads in flight while this one is scored); the two halves of the
// warps run half a tile apart (kStagger), so one warp's MMAs overlap the other's head sums on each SM
// sub-partition. Each warp computes the
// [64 heads x 64 keys] dot products of its row with exactly the MMAs of indexer_tc_block
// (indexer_tc.cuh): the same bf16 m16n8k16 fragments (head h at MMA row h % 16, key j at MMA column
// j % 8, k in order 0..kD-1 in steps of 16, f32 accumulation from zero), so every (row, head, key) dot
// product is the same f32 value.
//
// The epilogue keeps the official per-key arithmetic on packed bf16 pairs (two keys of one row, one
// head per instruction):
//   term  = bf16(relu(bf16(dot)) * w_h)     cvt.rn.bf16x2.f32, max.bf16x2 with 0, fma.rn.bf16x2(., w, -0)
//   score = bf16(score + term), h in order  fma.rn.bf16x2(term, 1, score), from +0
// Each equals the reference's f32 operation followed by round_bf16: a product of two bf16 values is
// exact in f32 and an f32 sum of two bf16 values rounded again to bf16 is the correctly rounded bf16
// sum (24 >= 2 * 8 + 2 bits, so the double rounding is innocuous); relu drops a NaN as fmaxf does; a
// NaN score is written as round_bf16's canonical NaN. So every score is bit-identical to
// indexer_tc_kernel's, and depends on its row and key only (batch-invariant; the picks do not change).
// The per-key sums over the heads need all 64 heads of a key pair in one lane: the warp transposes its
// terms through its own shared scratch, 32 heads at a time.
//
// A block whose rows belong to different segments (a batch mixing decode rows and prefill chunks)
// scores them with indexer_tc_rows_body (2 rows per 256-thread pass, same bits).
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/indexer_tc.cuh"
#include "backends/cuda/kernels/indexer_tc_rows.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kIgRows = 8;                // query rows per block, one warp each
constexpr int kIgThreads = 32 * kIgRows;  // = itr_threads<2>(): the mixed-segment path's block
constexpr int kIgPairPitch = 40;          // u32 per key pair in a warp's transpose scratch (32 heads + 8)
static_assert(kIgThreads == itr_threads<2>(), "mixed blocks run the 2-row kernel body");

// q [8 * 64, pitch] bf16, two key tiles [64, pitch] bf16, the head weights [8 * 64] as bf16 pairs, and
// per warp the transpose scratch [32 key pairs, kIgPairPitch] u32 (the larger of this and the 2-row
// body's layout).
__host__ __device__ constexpr int64_t ig_smem_bytes(int64_t kd) {
    const int64_t own = 2 * (kIgRows + 2) * kItcHeads * itc_pitch(kd) + 4 * kIgRows * kItcHeads + 4 * kIgRows * 32 * kIgPairPitch;
    const int64_t rows2 = itr_smem_bytes(kd, 2);
    return own > rows2 ? own : rows2;
}

namespace ig {
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
__device__ __forceinline__ uint32_t max_bf16x2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("max.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
constexpr uint32_t kOnes = 0x3F803F80u;      // (1, 1)
constexpr uint32_t kNegZeros = 0x80008000u;  // (-0, -0): a * b + (-0) is the rounded product, zero signs kept
// A bf16 half as the f32 the reference stores (NaN as round_bf16's canonical NaN).
__device__ __forceinline__ float score_of(uint32_t half16) {
    const float f = __uint_as_float(half16 << 16);
    return isnan(f) ? __int_as_float(0x7FC00000) : f;
}

// The tile routines of the GEMM kernels (V4's below, V4.1's in v41_indexer_tc_gemm.cuh): a warp's query row against
// a 64-key tile, kMt x 16 MMA head rows.
// acc = the [kMt * 16 heads x 64 keys] dot products of the warp's q rows qw ([kMt * 16, itc_pitch(kD)] bf16) with
// the key tile kb ([64, itc_pitch(kD)] bf16): indexer_tc_block's fragments and k order.
template <int kD, int kMt>
__device__ __forceinline__ void tile_mma(float (&acc)[kMt][8][4], const __nv_bfloat16* qw, const __nv_bfloat16* kb, int lane) {
    constexpr int kP = static_cast<int>(itc_pitch(kD));
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
        uint32_t a[kMt][4];
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) dev::ldmatrix_x4(a[mt], qw + (mt * 16 + lane % 16) * kP + ks * 16 + (lane / 16) * 8);
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2) {
            uint32_t b[4];
            dev::ldmatrix_x4(b, kb + (nt * 8 + lane % 8 + (lane / 16) * 8) * kP + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
            for (int mt = 0; mt < kMt; ++mt) {
                dev::mma_bf16_16816(acc[mt][nt], a[mt], b[0], b[1]);
                dev::mma_bf16_16816(acc[mt][nt + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// The tile's scores of key pair `lane` (keys 2 lane, 2 lane + 1 of the tile) as a packed bf16 pair: each head's
// term bf16(relu(bf16(dot)) * w_h) (wpair: this warp's head weights as (w, w) pairs, heads 16 mt + g and + 8), summed
// over the heads in order from +0, 32 heads at a time through the warp's scratch x_s ([32, kIgPairPitch] u32).
template <int kMt>
__device__ __forceinline__ uint32_t tile_scores(const float (&acc)[kMt][8][4], const uint32_t (&wpair)[kMt][2], uint32_t* x_s,
                                                int64_t heads, int lane) {
    const int g = lane / 4, qd = lane % 4;
    uint32_t score = 0;  // (+0, +0)
#pragma unroll
    for (int half = 0; half < kMt / 2; ++half) {
#pragma unroll
        for (int m2 = 0; m2 < 2; ++m2) {
            const int mt = half * 2 + m2;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                uint32_t* row = x_s + (nt * 4 + qd) * kIgPairPitch + m2 * 16 + g;
                const uint32_t d0 = max_bf16x2(pack_bf16x2(acc[mt][nt][0], acc[mt][nt][1]), 0u);
                const uint32_t d1 = max_bf16x2(pack_bf16x2(acc[mt][nt][2], acc[mt][nt][3]), 0u);
                row[0] = fma_bf16x2(d0, wpair[mt][0], kNegZeros);
                row[8] = fma_bf16x2(d1, wpair[mt][1], kNegZeros);
            }
        }
        __syncwarp();
        const uint32_t* mine_row = x_s + lane * kIgPairPitch;
        uint4 v[8];
#pragma unroll
        for (int h4 = 0; h4 < 8; ++h4) v[h4] = *reinterpret_cast<const uint4*>(mine_row + h4 * 4);
#pragma unroll
        for (int h4 = 0; h4 < 8; ++h4) {
            const int64_t h = half * 32 + h4 * 4;
            if (h + 4 <= heads) {  // warp-uniform
                score = fma_bf16x2(v[h4].x, kOnes, score);
                score = fma_bf16x2(v[h4].y, kOnes, score);
                score = fma_bf16x2(v[h4].z, kOnes, score);
                score = fma_bf16x2(v[h4].w, kOnes, score);
            } else {
                if (h < heads) score = fma_bf16x2(v[h4].x, kOnes, score);
                if (h + 1 < heads) score = fma_bf16x2(v[h4].y, kOnes, score);
                if (h + 2 < heads) score = fma_bf16x2(v[h4].z, kOnes, score);
            }
        }
        __syncwarp();  // the reads are done before the next half's writes
    }
    return score;
}

// The tiles' order: mma(t), then the warp's epilogue(t) (mine(t): the warp's row scores tile t), stage_next(t) stores
// tile t + 1 into the key buffer tile t - 1 released and loads tile t + 2; a block barrier between steps. kStagger:
// half steps, warps 0-3 (one per SM sub-partition) run tile t's MMAs in half step 2t and its epilogue in 2t + 1,
// warps 4-7 one half step later, so each sub-partition's tensor core works while its other warp sums heads (key
// buffer t % 2 is read in half steps 2t and 2t + 1; tile t + 1 is stored in half step 2t). Else all warps in step.
template <bool kStagger, class Mine, class Mma, class Epilogue, class StageNext>
__device__ __forceinline__ void tile_schedule(int64_t tiles, int warp, Mine mine, Mma mma, Epilogue epilogue, StageNext stage_next) {
    if constexpr (!kStagger) {
#pragma unroll 1
        for (int64_t t = 0; t < tiles; ++t) {
            if (mine(t)) mma(t);
            stage_next(t);
            if (mine(t)) epilogue(t);
            __syncthreads();
        }
    } else {
        const int lag = warp / 4;
#pragma unroll 1
        for (int64_t hs = 0; hs <= 2 * tiles; ++hs) {
            const int64_t rel = hs - lag;
            if (rel >= 0 && rel < 2 * tiles && mine(rel / 2)) {
                if ((rel & 1) == 0) mma(rel / 2);
                else epilogue(rel / 2);
            }
            if ((hs & 1) == 0) stage_next(hs / 2);
            __syncthreads();
        }
    }
}
}  // namespace ig

// grid (ceil(rows / 8), key spans), block kIgThreads, dynamic shared memory ig_smem_bytes(kD). Groups
// run last rows first (at prefill the rows with the most keys start first). kStagger false: all warps
// in step (the benchmark's comparison; the same bits).
template <int kD, bool kStagger>
static __global__ void __launch_bounds__(kIgThreads, 1) indexer_tc_gemm_kernel(const __grid_constant__ IndexerParams p, int64_t span) {
    extern __shared__ __align__(16) unsigned char ig_sm[];
    constexpr int kP = static_cast<int>(itc_pitch(kD));
    constexpr int kD4 = kD / 4;
    constexpr int kLoads = kItcKeys * kD4 / kIgThreads;  // float4 key loads per thread and tile
    constexpr int kKeysPerLoad = 32 / kD4;               // keys of one warp's float4 batch
    static_assert(kD % 16 == 0 && kD4 <= 32 && kLoads >= 1 && kLoads * kKeysPerLoad == 8, "8 keys per warp and tile");
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4;
    const int64_t group = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
    const int64_t r0 = group * kIgRows;
    const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * span;

    // Rows of this block: one segment (the GEMM path) or several (the 2-row body per row pair).
    const int64_t my_r = r0 + warp;
    const bool my_valid = my_r < p.rows;
    const int my_seg = my_valid ? p.row_segment[my_r] : -1;
    const int64_t my_vis = my_valid ? (static_cast<int64_t>(p.positions[my_r]) + 1) / p.ratio : 0;
    __shared__ int seg_sh[kIgRows];
    __shared__ long long vis_sh[kIgRows];
    if (lane == 0) {
        seg_sh[warp] = my_seg;
        vis_sh[warp] = my_vis;
    }
    __syncthreads();
    bool one_segment = true;
    int64_t k_end = k_begin;
#pragma unroll
    for (int i = 0; i < kIgRows; ++i) {
        if (seg_sh[i] < 0) continue;
        one_segment = one_segment && seg_sh[i] == seg_sh[0];
        const int64_t e = k_begin + span < vis_sh[i] ? k_begin + span : static_cast<int64_t>(vis_sh[i]);
        k_end = e > k_end ? e : k_end;
    }
    if (!one_segment) {  // block-uniform
#pragma unroll 1
        for (int pair = 0; pair < kIgRows / 2; ++pair) indexer_tc_rows_body<kD, 2>(p, span, r0 + 2 * pair, k_begin);
        return;
    }
    if (k_begin >= k_end) return;  // block-uniform
    const DeviceSegment& s = p.segments[seg_sh[0]];

    auto* q_s = reinterpret_cast<__nv_bfloat16*>(ig_sm);                // [8 * 64, kP]
    __nv_bfloat16* k_s = q_s + kIgRows * kItcHeads * kP;                 // [2][64, kP]
    auto* w_s = reinterpret_cast<uint32_t*>(k_s + 2 * kItcKeys * kP);   // [8 * 64] (w, w) bf16 pairs
    uint32_t* x_s = w_s + kIgRows * kItcHeads + warp * 32 * kIgPairPitch;  // this warp's [32, kIgPairPitch]
    const int64_t heads = p.heads;
    const float softmax_scale = 1.0f / sqrtf(static_cast<float>(kD));
    const float weights_scale = 1.0f / sqrtf(static_cast<float>(heads));

    // q of the 8 rows (bf16; zero rows past p.rows and for heads >= p.heads), 8 float4 loads in flight.
    {
        constexpr int kQ4 = kIgRows * kItcHeads * kD4;
        static_assert(kQ4 % (8 * kIgThreads) == 0, "q staging in batches of 8");
        for (int x0 = tid; x0 < kQ4; x0 += 8 * kIgThreads) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int x = x0 + u * kIgThreads, i = x / (kItcHeads * kD4), h = (x / kD4) % kItcHeads;
                v[u] = r0 + i < p.rows && h < heads
                           ? reinterpret_cast<const float4*>(p.q + ((r0 + i) * heads + h) * kD)[x % kD4]
                           : make_float4(0.f, 0.f, 0.f, 0.f);
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
        for (int x = tid; x < kIgRows * kItcHeads; x += kIgThreads) {
            const int64_t i = x / kItcHeads, h = x % kItcHeads;
            float w = 0.f;
            if (r0 + i < p.rows && h < heads)
                w = dev::round_bf16(dev::mul(dev::mul(p.weights[(r0 + i) * heads + h], softmax_scale), weights_scale));
            const uint32_t hi = __float_as_uint(w) >> 16;  // bf16-exact: the high half is the value
            w_s[x] = hi | hi << 16;
        }
    }

    // Key tiles: thread tid loads float4 (tid + u * 256) of a tile, of key (that index) / kD4. A warp's 8
    // keys of a tile: lane l < 8 finds the row of key slot l (one page lookup), the lanes fetch theirs.
    float4 kv[kLoads];
    auto load_tile = [&](int64_t k0) {
        const int slot_key = warp * kKeysPerLoad + (lane / kKeysPerLoad) * (kIgThreads / kD4) + lane % kKeysPerLoad;
        const int64_t jl = k0 + slot_key;
        const float* rowp = lane < 8 && jl < k_end ? entry_row(s, true, jl, kD) : nullptr;
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int slot = u * kKeysPerLoad + lane / kD4;
            const auto* src = reinterpret_cast<const float*>(
                __shfl_sync(0xFFFFFFFFu, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(rowp)), slot));
            kv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (src != nullptr) {
                src += (lane % kD4) * 4;
                if ((reinterpret_cast<uintptr_t>(src) & 15u) == 0) kv[u] = *reinterpret_cast<const float4*>(src);
                else kv[u] = make_float4(src[0], src[1], src[2], src[3]);
            }
        }
    };
    auto store_tile = [&](int buf) {
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int x = tid + u * kIgThreads;
            uint2 b;
            b.x = ig::pack_bf16x2(kv[u].x, kv[u].y);
            b.y = ig::pack_bf16x2(kv[u].z, kv[u].w);
            *reinterpret_cast<uint2*>(k_s + (buf * kItcKeys + x / kD4) * kP + (x % kD4) * 4) = b;
        }
    };
    load_tile(k_begin);
    store_tile(0);
    if (k_begin + kItcKeys < k_end) load_tile(k_begin + kItcKeys);
    // This warp's head weights: heads 16 mt + g and + 8.
    uint32_t wpair[4][2];
    __syncthreads();  // q_s, w_s, tile 0
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
        wpair[mt][0] = w_s[warp * kItcHeads + mt * 16 + g];
        wpair[mt][1] = w_s[warp * kItcHeads + mt * 16 + g + 8];
    }
    const int64_t row_end = my_vis < k_begin + span ? my_vis : k_begin + span;  // this row's keys end here
    const __nv_bfloat16* qw = q_s + warp * kItcHeads * kP;

    // Tile t's [64 heads x 64 keys] dot products of this warp's row into acc (key buffer t % 2), then its scores.
    float acc[4][8][4];
    auto mma_tile = [&](int64_t t) { ig::tile_mma<kD, 4>(acc, qw, k_s + (t & 1) * kItcKeys * kP, lane); };
    auto epilogue_tile = [&](int64_t t) {
        const uint32_t score = ig::tile_scores<4>(acc, wpair, x_s, heads, lane);
        const int64_t j = k_begin + t * kItcKeys + 2 * lane;
        float* out = p.scores + my_r * p.max_visible;
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
    auto mine = [&](int64_t t) { return my_valid && k_begin + t * kItcKeys < row_end; };  // warp-uniform
    const int64_t tiles = (k_end - k_begin + kItcKeys - 1) / kItcKeys;
    ig::tile_schedule<kStagger>(tiles, warp, mine, mma_tile, epilogue_tile, stage_next);
}

}  // namespace deepinfer::cuda::kernels
