// SPDX-License-Identifier: Apache-2.0
// Device code of the warp-specialized, persistent fast GEMM for the dense FP8 (128x128 block scales) and
// BF16 linears at prefill sizes on Hopper (sm_90a). It computes every output element with the same
// instruction sequence and the same additions as wg::wgmma_gemm_kernel (gemm_wgmma.cuh) with two
// warpgroups, so a row's bits are the same whichever kernel the launcher picks:
//  - per 128-byte K tile, four k steps of wgmma m64nIWk32 e4m3 (m64nIWk16 bf16) in ascending K; IW (the
//    instruction's N) 64 or 128: the classic kernel uses 64 for N <= 2048, and the m64n64 and m64n128
//    instructions give an element the same bits (tests/ops/gemm_fast_cuda_test.cpp, every form);
//  - FP8: the four MMAs into a fresh register tile, promoted into the chunk's f32 sum times (activation
//    scale x weight scale), the chunk's first tile by a product;
//  - K in TcArgs::k_chunks chunks (tiles [KT·c/S, KT·(c+1)/S)), each summed from zero and added in chunk
//    order, ((c0 + c1) + c2) + ..., the unsplit form of gemm_wgmma.cuh.
// A block is three warpgroups; it loops over output tiles of 128 rows x 128 weight rows (a static
// persistent schedule: tile t on block t mod grid, tiles ordered in groups of group_m row tiles so that
// the tiles running at once share their activation and weight rows in L2):
//  - warpgroup 0, one warp, the producer: per K tile, the tensor memory accelerator (TMA) copies the
//    activation tile and the weight tile (128 x 128 bytes each, in the 128-byte swizzle layout that the
//    wgmma descriptors read) into a ring of kStages stages, completing on the stage's `full` mbarrier;
//    its lanes copy the 128 rows' act_quant scales of the K tile (cp.async, arriving on the same barrier);
//  - warpgroups 1 and 2, the consumers: each owns 64 rows of the tile; per K tile it waits for the stage,
//    issues the MMAs (128 / IW per k step), waits for them, releases the stage (`empty` mbarrier), and
//    promotes; at the tile's end it stores its rows while the producer already fills the next tile's stages.
// The consumer warpgroups never wait for each other: one promotes while the other's MMAs run.
// kCluster = 2: blocks run in clusters of two over row-tile pairs (2u, 2u + 1) of the same weight rows;
// each block's producer copies half of the weight tile (64 rows) and multicasts it into both blocks, so
// that each K tile reads the weights from L2 once per pair (24 KB per block and K tile instead of 32 KB:
// the copies from L2 may bound 128 x 128 tiles); a stage is free again once the consumers of both blocks
// released it (each consumer warp arrives on both blocks' `empty` barriers). Correct (bit-identical in the
// tests) but measured at half the rate of kCluster = 1 on the H200 (cause not found: not the resident
// cluster count — 66 clusters hold every SM, bench/results/cuda-session31-h200-call7-dense-cluster.md —
// so the cross-block stage release or the pairs' lockstep), so the launcher's default is kCluster = 1.
#pragma once

#include <cuda.h>

#include "backends/cuda/common/mbarrier.cuh"
#include "backends/cuda/kernels/gemm_wgmma.cuh"

namespace deepinfer::cuda::kernels::wgd {

using tc::BKind;

// The kernel's arguments: the tensor maps of the activations ([rows, K bytes]) and the weights ([N, K
// bytes]), both uint8 with 128 x 128-byte boxes and the 128-byte swizzle.
struct DenseWsArgs {
    CUtensorMap a_map;
    CUtensorMap b_map;
    const float* a_scale;  // [rows, k_tiles] (FP8)
    DeviceLinear weight;   // its scales (FP8)
    const int32_t* y_row;
    float* y;
    int64_t y_ld, rows, N;
    int k_tiles, k_chunks;
    int m_tiles, n_tiles, group_m;  // kCluster = 2: m_tiles counts row-tile pairs
    bool round_bf16;
};

template <int kStages>
struct DenseWsConfig {
    static constexpr int kThreads = 384;
    static constexpr int BM = 128, BN = 128;
    static constexpr int kTileBytes = 128 * 128;                 // one operand tile of one K tile
    static constexpr int kSxOff = 2 * kTileBytes;                // the rows' activation scales (f32)
    static constexpr int kStageBytes = 2 * kTileBytes + 1024;    // (1024-aligned: the swizzle atom)
    static constexpr int kBarOff = kStages * kStageBytes;        // full[kStages], empty[kStages]
    static constexpr int kMaxKTiles = 256;
    static constexpr int kWscOff = kBarOff + 2 * kStages * 8;    // per consumer: weight scales of the tile's K tiles
    static constexpr int kSmemBytes = kWscOff + 2 * kMaxKTiles * 4 + 1024;  // + alignment slack
    static constexpr uint32_t kTxBytes = 2 * kTileBytes;
    // Registers per thread after setmaxnreg: producer warpgroup, consumers (128·56 + 256·224 <= 64K; at 40 the
    // cluster form's producer spilled).
    static constexpr int kProducerRegs = 56, kConsumerRegs = 224;
};

// ---- mbarriers (shared::cta), TMA, register reallocation ------------------------------------------------

using dev::mbar_arrive;  // (common/mbarrier.cuh)
using dev::mbar_init;
using dev::mbar_wait;
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#ifdef DI_WGMMA_ENABLED
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(tc::smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}
// Arrives on the barrier when this thread's earlier cp.async copies complete (counted in its init count).
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
#ifdef DI_WGMMA_ENABLED
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(tc::smem_addr(bar)) : "memory");
#endif
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int32_t c0, int32_t c1, uint64_t* bar) {
#ifdef DI_WGMMA_ENABLED
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            tc::smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(tc::smem_addr(bar))
        : "memory");
#endif
}
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
#ifdef DI_WGMMA_ENABLED
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}
// The same, multicast into the blocks of `mask` (this cluster), each completing on its barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, int32_t c0, int32_t c1, uint64_t* bar,
                                                      uint16_t mask) {
#ifdef DI_WGMMA_ENABLED
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], "
        "[%4], %5;\n" ::"r"(tc::smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(tc::smem_addr(bar)), "h"(mask)
        : "memory");
#endif
}
// Arrive on the barrier at `bar`'s offset in block `rank` of this cluster (release at cluster scope).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
#ifdef DI_WGMMA_ENABLED
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(tc::smem_addr(bar)),
        "r"(rank)
        : "memory");
#endif
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r = 0;
#ifdef DI_WGMMA_ENABLED
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
    return r;
}
// All threads of the cluster (barrier.cluster: every thread of both blocks arrives).
__device__ __forceinline__ void cluster_sync() {
#ifdef DI_WGMMA_ENABLED
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
using wg::setmaxnreg_dec;  // (gemm_wgmma.cuh)
using wg::setmaxnreg_inc;
// Named barrier `id` among the 128 threads of one consumer warpgroup.
__device__ __forceinline__ void wg_sync(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }

// Output tile t -> (row tile, weight-row tile): groups of group_m row tiles, the row tile fastest.
__device__ __forceinline__ void tile_coords(const DenseWsArgs& p, int t, int& mt, int& nt) {
    const int per_group = p.group_m * p.n_tiles, g = t / per_group, first = g * p.group_m;
    const int gm = min(p.group_m, p.m_tiles - first), local = t - g * per_group;
    mt = first + local % gm;
    nt = local / gm;
}

// A consumer warpgroup (cw = 0, 1): rows 64·cw .. of every tile.
template <int IW, BKind kB, int kStages, int kCluster>
__device__ __forceinline__ void consume(const DenseWsArgs& p, uint8_t* smem, int cw) {
#ifdef DI_WGMMA_ENABLED
    using C = DenseWsConfig<kStages>;
    constexpr int NI = C::BN / IW;  // MMAs per k step
    constexpr bool kScaled = kB != BKind::kBf16;
    const int wl = threadIdx.x % 128, lane = wl % 32, wi = wl / 32, g = lane / 4, t4 = lane % 4;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOff);
    uint64_t* empty = full + kStages;
    float* wsc = reinterpret_cast<float*>(smem + C::kWscOff) + cw * C::kMaxKTiles;
    const int KT = p.k_tiles, S = max(p.k_chunks, 1);
    const int tiles = p.m_tiles * p.n_tiles;
    const DeviceLinear& w = p.weight;
    const int unit0 = blockIdx.x / kCluster, units = gridDim.x / kCluster;
    const int rank = kCluster > 1 ? static_cast<int>(cluster_rank()) : 0;
    uint32_t it = 0;  // K tiles consumed by this block: the ring position
    // The weight scales of a tile's K tiles (KT <= kMaxKTiles = 2 x 128: thread wl holds K tiles wl and
    // wl + 128), read from global memory one tile ahead, so that their latency falls under the previous
    // tile's MMAs instead of stalling both consumer warpgroups at every tile's start.
    static_assert(C::kMaxKTiles <= 2 * 128, "two weight scales per consumer thread");
    float next_sc[2] = {1.0f, 1.0f};
    auto fetch_scales = [&](int t) {
        if constexpr (kScaled) {
            if (t >= tiles) return;
            int mt_, nt_;
            tile_coords(p, t, mt_, nt_);
            const int64_t row = nt_ * int64_t(C::BN) / 128;
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (wl + 128 * h < KT) next_sc[h] = dev::weight_scale(w, row * KT + wl + 128 * h);
        }
    };
    fetch_scales(unit0);
    for (int t = unit0; t < tiles; t += units) {
        int mt, nt;
        tile_coords(p, t, mt, nt);
        mt = mt * kCluster + rank;
        const int64_t m0 = int64_t(mt) * C::BM, n0 = int64_t(nt) * C::BN;
        if constexpr (kScaled) {
            wg_sync(2 + cw);  // the previous tile's reads of wsc are done
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (wl + 128 * h < KT) wsc[wl + 128 * h] = next_sc[h];
            wg_sync(2 + cw);
            fetch_scales(t + units);  // in flight during this tile
        }
        float acc[NI][IW / 2], part[NI][IW / 2], total[NI][IW / 2];
#pragma unroll
        for (int i = 0; i < NI; ++i)
#pragma unroll
            for (int j = 0; j < IW / 2; ++j) acc[i][j] = part[i][j] = total[i][j] = 0.0f;
        int chunk = 0, chunk_start = 0, chunk_end = KT / S;
        const int r0 = cw * 64 + wi * 16 + g;  // this thread's rows r0 and r0 + 8 of the tile
        for (int kt = 0; kt < KT; ++kt, ++it) {
            if (kt == chunk_end) {  // the next chunk begins: fold the finished one in
#pragma unroll
                for (int i = 0; i < NI; ++i)
#pragma unroll
                    for (int j = 0; j < IW / 2; ++j) total[i][j] = chunk == 0 ? acc[i][j] : total[i][j] + acc[i][j];
                ++chunk;
                chunk_start = kt;
                chunk_end = KT * (chunk + 1) / S;
            }
            const int st = static_cast<int>(it % kStages);
            mbar_wait(full + st, (it / kStages) & 1u);
            const uint8_t* s = smem + st * C::kStageBytes;
            float sx0 = 1.0f, sx1 = 1.0f;
            if constexpr (kScaled) {
                const float* sx = reinterpret_cast<const float*>(s + C::kSxOff);
                sx0 = sx[r0];
                sx1 = sx[r0 + 8];
            }
            wg::wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                const uint64_t da = wg::smem_desc(s + cw * 8 * 1024 + ks * 32);
#pragma unroll
                for (int i = 0; i < NI; ++i) {
                    const uint64_t db = wg::smem_desc(s + C::kTileBytes + i * IW * 128 + ks * 32);
                    if constexpr (kScaled)
                        wg::wgmma_step<IW, kB>(part[i], da, db, ks > 0 ? 1 : 0);
                    else
                        wg::wgmma_step<IW, kB>(acc[i], da, db, (kt > chunk_start || ks > 0) ? 1 : 0);
                }
            }
            wg::wgmma_commit();
            wg::wgmma_wait();
            __syncwarp();
            if (lane == 0) {
                if constexpr (kCluster > 1) {
#pragma unroll
                    for (int r = 0; r < kCluster; ++r) mbar_arrive_cluster(empty + st, static_cast<uint32_t>(r));
                } else {
                    mbar_arrive(empty + st);
                }
            }
            if constexpr (kScaled) {
                const float swu = wsc[kt];
                const float s00 = sx0 * swu, s10 = sx1 * swu;
                if (kt == chunk_start) {
#pragma unroll
                    for (int i = 0; i < NI; ++i)
#pragma unroll
                        for (int j = 0; j < IW / 8; ++j) {
                            acc[i][4 * j + 0] = part[i][4 * j + 0] * s00;
                            acc[i][4 * j + 1] = part[i][4 * j + 1] * s00;
                            acc[i][4 * j + 2] = part[i][4 * j + 2] * s10;
                            acc[i][4 * j + 3] = part[i][4 * j + 3] * s10;
                        }
                } else {
#pragma unroll
                    for (int i = 0; i < NI; ++i)
#pragma unroll
                        for (int j = 0; j < IW / 8; ++j) {
                            acc[i][4 * j + 0] = fmaf(part[i][4 * j + 0], s00, acc[i][4 * j + 0]);
                            acc[i][4 * j + 1] = fmaf(part[i][4 * j + 1], s00, acc[i][4 * j + 1]);
                            acc[i][4 * j + 2] = fmaf(part[i][4 * j + 2], s10, acc[i][4 * j + 2]);
                            acc[i][4 * j + 3] = fmaf(part[i][4 * j + 3], s10, acc[i][4 * j + 3]);
                        }
                }
            }
        }
        if (chunk > 0) {
#pragma unroll
            for (int i = 0; i < NI; ++i)
#pragma unroll
                for (int j = 0; j < IW / 2; ++j) acc[i][j] = total[i][j] + acc[i][j];
        }
        // Store this thread's rows (as gemm_wgmma.cuh: 8-byte pairs where aligned).
        const bool pairs = p.y_ld % 2 == 0 && (reinterpret_cast<uintptr_t>(p.y) & 7) == 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t gr = m0 + r0 + h * 8;
            if (gr >= p.rows) continue;
            float* yrow = p.y + (p.y_row ? int64_t(p.y_row[gr]) : gr) * p.y_ld;
#pragma unroll
            for (int i = 0; i < NI; ++i)
#pragma unroll
                for (int j = 0; j < IW / 8; ++j) {
                    const int64_t n = n0 + i * IW + j * 8 + t4 * 2;
                    const float v0 = dev::maybe_bf16(acc[i][4 * j + 2 * h], p.round_bf16);
                    const float v1 = dev::maybe_bf16(acc[i][4 * j + 2 * h + 1], p.round_bf16);
                    if (pairs && n + 1 < p.N) {
                        *reinterpret_cast<float2*>(yrow + n) = make_float2(v0, v1);
                    } else {
                        if (n < p.N) yrow[n] = v0;
                        if (n + 1 < p.N) yrow[n + 1] = v1;
                    }
                }
        }
    }
#else
    (void)p; (void)smem; (void)cw;
#endif
}

// The producer warp.
template <BKind kB, int kStages, int kCluster>
__device__ __forceinline__ void produce(const DenseWsArgs& p, uint8_t* smem) {
#ifdef DI_WGMMA_ENABLED
    using C = DenseWsConfig<kStages>;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOff);
    uint64_t* empty = full + kStages;
    const int tid = threadIdx.x;

    // ---- Producer (warp 0) ----
    const int lane = tid, KT = p.k_tiles, tiles = p.m_tiles * p.n_tiles;
    constexpr bool kScaled = kB != BKind::kBf16;
    const int unit0 = blockIdx.x / kCluster, units = gridDim.x / kCluster;
    const int rank = kCluster > 1 ? static_cast<int>(cluster_rank()) : 0;
    uint32_t it = 0;
    for (int t = unit0; t < tiles; t += units) {
        int mt, nt;
        tile_coords(p, t, mt, nt);
        mt = mt * kCluster + rank;
        const int64_t m0 = int64_t(mt) * C::BM;
        for (int kt = 0; kt < KT; ++kt, ++it) {
            const int st = static_cast<int>(it % kStages);
            if (it >= kStages) mbar_wait(empty + st, ((it / kStages) - 1) & 1u);
            uint8_t* s = smem + st * C::kStageBytes;
            if (lane == 0) {
                mbar_arrive_expect_tx(full + st, C::kTxBytes);
                tma_load_2d(s, &p.a_map, kt * 128, mt * C::BM, full + st);
                if constexpr (kCluster > 1) {  // this block's half of the weight rows, into both blocks
                    constexpr int kRows = C::BN / kCluster;
                    tma_load_2d_multicast(s + C::kTileBytes + rank * kRows * 128, &p.b_map, kt * 128, nt * C::BN + rank * kRows,
                                          full + st, static_cast<uint16_t>((1u << kCluster) - 1));
                } else {
                    tma_load_2d(s + C::kTileBytes, &p.b_map, kt * 128, nt * C::BN, full + st);
                }
            }
            if constexpr (kScaled) {
                float* sx = reinterpret_cast<float*>(s + C::kSxOff);
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int r = lane + 32 * q;
                    if (m0 + r < p.rows) tc::cp_async4(sx + r, p.a_scale + (m0 + r) * KT + kt, 4);
                }
            }
            cp_async_arrive_noinc(full + st);
        }
    }
    tc::cp_async_wait<0>();
#else
    (void)p; (void)smem;
#endif
}

template <int IW, BKind kB, int kStages, int kCluster>
static __global__ void __launch_bounds__(384, 1) dense_ws_kernel(const __grid_constant__ DenseWsArgs p) {
#ifdef DI_WGMMA_ENABLED
    static_assert(kB != BKind::kFp4, "dense FP8 or BF16 weights only");
    using C = DenseWsConfig<kStages>;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);  // the swizzle atom
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOff);
    uint64_t* empty = full + kStages;
    const int tid = threadIdx.x;
    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(full + s, 1 + 32);  // the TMA's expect_tx arrival + the 32 lanes' scale copies
            mbar_init(empty + s, 8 * kCluster);  // one lane per consumer warp (of each block of the cluster)
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        prefetch_map(&p.a_map);
        prefetch_map(&p.b_map);
    }
    if constexpr (kCluster > 1)
        cluster_sync();  // both blocks' barriers initialized before either copies into the other
    else
        __syncthreads();

    if (tid >= 128) {
        setmaxnreg_inc<C::kConsumerRegs>();
        consume<IW, kB, kStages, kCluster>(p, smem, tid / 128 - 1);
    } else {
        setmaxnreg_dec<C::kProducerRegs>();
        if (tid < 32) produce<kB, kStages, kCluster>(p, smem);
    }
    // A block leaves only after its peer: the peer's consumers still arrive on this block's barriers.
    if constexpr (kCluster > 1) cluster_sync();
#else
    (void)p;
    __trap();  // the launcher selects this kernel only on sm_90 devices (built for sm_90a)
#endif
}

}  // namespace deepinfer::cuda::kernels::wgd
