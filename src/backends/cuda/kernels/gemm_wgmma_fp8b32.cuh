// SPDX-License-Identifier: Apache-2.0
// Device code of the fast GEMM for FP8 weights with 32x32 block scales (DeepSeek-V4.1's dense linears)
// on Hopper (sm_90a): wgmma.mma_async m64nBNk32 e4m3 x e4m3 with both operands in shared memory, the
// tiles and the cp.async pipeline of gemm_wgmma.cuh (128-byte-swizzled K tiles of 128 bytes).
// The activations arrive as e4m3 with one power-of-two f32 scale per 32 columns of a row
// (act_quant_fp8 with block 32), the weights as e4m3 with one scale per 32x32 block. Each k32 MMA
// writes a fresh f32 partial tile, which is promoted into the f32 accumulator times
// (activation scale of the row's k-block) x (weight scale of the column's n-block and k-block):
// acc = fma(part, sa * sw, acc), k-blocks in ascending order. Two partial tiles alternate so the
// promotion of one k32 step overlaps the next step's MMA (wgmma.wait_group 1).
// Batch invariance: BN depends on the weight's shape only; a warpgroup's 64 rows never interact with
// another's, so every output element sees the same MMA and promotion sequence at every row count.
#pragma once

#include "backends/cuda/kernels/gemm_wgmma.cuh"

namespace deepinfer::cuda::kernels::wg {

template <int N>
__device__ __forceinline__ void wgmma_wait_n() {
#ifdef DI_WGMMA_ENABLED
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

template <int kWGs, int BN, int kStages>
struct B32Config {
    static constexpr int kThreads = 128 * kWGs;
    static constexpr int BM = 64 * kWGs;
    static constexpr int kABytes = BM * 128;
    static constexpr int kBBytes = BN * 128;
    static constexpr int kXScaleBytes = BM * 16;  // 4 activation scales (one per k32) per row and K tile
    static constexpr int kStageBytes = (kABytes + kBBytes + kXScaleBytes + 1023) / 1024 * 1024;
    static constexpr int kNBlocks = BN / 32;  // weight-scale n-blocks per block column
    // Dynamic shared memory: the stages, this block's weight scales ([K/32][BN/32] f32), alignment slack.
    static constexpr int64_t smem_bytes(int64_t K) { return int64_t(kStages) * kStageBytes + (K / 32) * kNBlocks * 4 + 1024; }
};

template <int kWGs, int BN, int kStages>
static __global__ void __launch_bounds__(128 * kWGs, (kWGs == 1 || BN == 64) ? 2 : 1)
    wgmma_fp8b32_kernel(const __grid_constant__ TcArgs p) {
    using C = B32Config<kWGs, BN, kStages>;
    constexpr int BM = C::BM, kThreads = C::kThreads, kNB = C::kNBlocks;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    const int tid = threadIdx.x, wgi = tid / 128, wl = tid % 128, lane = tid % 32, wi = wl / 32;

    const DeviceLinear& w = p.weight;
    const int64_t row_begin = int64_t(blockIdx.x) * BM, row_end = p.rows;
    const int64_t n0 = int64_t(blockIdx.y) * BN;
    const int64_t N = p.N, K = p.K, KT = p.k_tiles, KB = K / 32;
    const uint8_t* wbytes = static_cast<const uint8_t*>(w.weight);
    const bool wg_active = row_begin + 64 * wgi < row_end;  // uniform per warpgroup

    // This block's weight scales, [k-block][n-block] (n-blocks past the weight's end read as 1: their
    // rows are zero-filled and never stored).
    float* wscale = reinterpret_cast<float*>(smem + kStages * C::kStageBytes);
    {
        const int64_t nb0 = n0 / 32, nblocks = (N + 31) / 32;
        for (int64_t i = tid; i < KB * kNB; i += kThreads) {
            const int64_t kb = i / kNB, nb = nb0 + i % kNB;
            float v = 1.0f;
            if (nb < nblocks) {
                const int64_t si = nb * KB + kb;
                v = dev::weight_scale(w, si);
            }
            wscale[i] = v;
        }
    }

    auto a_row_of = [&](int64_t r) -> int64_t { return p.a_row_src ? p.a_row_src[r] : r; };
    constexpr int kAChunks = BM * 8 / kThreads;
    constexpr int kBChunks = BN * 8 / kThreads;
    const uint8_t* a_src[kAChunks];
    int a_dst[kAChunks], a_len[kAChunks];
    a_tile_chunks<kAChunks, kThreads>(tid, row_begin, row_end, p.a, p.a_row_src, p.a_row_bytes, a_src, a_dst, a_len);
    const uint8_t* b_src[kBChunks];
    int b_dst[kBChunks], b_len[kBChunks];
#pragma unroll
    for (int q = 0; q < kBChunks; ++q) {
        const int i = tid + q * kThreads, r = i >> 3, c = i & 7;
        const bool ok = n0 + r < N;
        b_src[q] = ok ? wbytes + (n0 + r) * K + c * 16 : wbytes;
        b_dst[q] = tile_offset(r, c);
        b_len[q] = ok ? 16 : 0;
    }
    // This thread's row of activation scales (tid < BM): 4 per K tile, 16 bytes.
    const float* x_scale_src = p.a_scale;
    int x_scale_len = 0;
    if (tid < BM && row_begin + tid < row_end) {
        x_scale_src = p.a_scale + a_row_of(row_begin + tid) * KB;
        x_scale_len = 16;
    }
    auto load_stage = [&](int st, int64_t kt) {
        uint8_t* sa = smem + st * C::kStageBytes;
        uint8_t* sb = sa + C::kABytes;
        uint8_t* sx = sb + C::kBBytes;
#pragma unroll
        for (int q = 0; q < kAChunks; ++q) tc::cp_async16(sa + a_dst[q], a_src[q] + kt * 128, a_len[q]);
        if (tid < BM) tc::cp_async16(sx + tid * 16, x_scale_src + kt * 4, x_scale_len);
#pragma unroll
        for (int q = 0; q < kBChunks; ++q) tc::cp_async16(sb + b_dst[q], b_src[q] + kt * 128, b_len[q]);
    };

    float acc[BN / 2], part0[BN / 2], part1[BN / 2];
#pragma unroll
    for (int j = 0; j < BN / 2; ++j) acc[j] = part0[j] = part1[j] = 0.0f;

#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
        if (st < KT) load_stage(st, st);
        tc::cp_async_commit();
    }

    const int g = lane / 4, t4 = lane % 4;
    const int r0 = wgi * 64 + wi * 16 + g;  // this thread's accumulator rows: r0 and r0 + 8
    // acc += part x (activation scale of the row) x (weight scale of the column's n-block), k32 step ks.
    auto promote = [&](const float (&part)[BN / 2], const float* sx, const float* sw, int ks) {
        const float sx0 = sx[r0 * 4 + ks], sx1 = sx[(r0 + 8) * 4 + ks];
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const float swj = sw[j / 4];  // columns j*8 .. j*8+7 lie in n-block j/4
            const float s0 = sx0 * swj, s1 = sx1 * swj;
            acc[4 * j + 0] = fmaf(part[4 * j + 0], s0, acc[4 * j + 0]);
            acc[4 * j + 1] = fmaf(part[4 * j + 1], s0, acc[4 * j + 1]);
            acc[4 * j + 2] = fmaf(part[4 * j + 2], s1, acc[4 * j + 2]);
            acc[4 * j + 3] = fmaf(part[4 * j + 3], s1, acc[4 * j + 3]);
        }
    };

    for (int64_t kt = 0; kt < KT; ++kt) {
        tc::cp_async_wait<kStages - 2>();
        fence_proxy_async();  // this thread's cp.async writes, visible to the tensor cores
        __syncthreads();
        const int st = static_cast<int>(kt % kStages);
        const uint8_t* sa = smem + st * C::kStageBytes;
        const uint8_t* sb = sa + C::kABytes;
        const float* sx = reinterpret_cast<const float*>(sb + C::kBBytes);
        const float* sw = wscale + kt * 4 * kNB;
        const uint8_t* sa_wg = sa + wgi * 8 * 1024;
        // Issued by every warpgroup, also one whose rows are all padding (see gemm_wgmma.cuh).
        wgmma_fence();
        wgmma_step<BN, BKind::kFp8>(part0, smem_desc(sa_wg), smem_desc(sb), 0);
        wgmma_commit();
        {
            // Prefetch while the tensor cores work: stage (kt - 1) % kStages, whose MMAs all completed in
            // the previous iteration (wait_group 0 there) before every thread passed the barrier above.
            const int64_t next = kt + kStages - 1;
            if (next < KT) load_stage(static_cast<int>(next % kStages), next);
            tc::cp_async_commit();
        }
        wgmma_fence();
        wgmma_step<BN, BKind::kFp8>(part1, smem_desc(sa_wg + 32), smem_desc(sb + 32), 0);
        wgmma_commit();
        wgmma_wait_n<1>();
        promote(part0, sx, sw, 0);
        wgmma_fence();
        wgmma_step<BN, BKind::kFp8>(part0, smem_desc(sa_wg + 64), smem_desc(sb + 64), 0);
        wgmma_commit();
        wgmma_wait_n<1>();
        promote(part1, sx, sw + kNB, 1);
        wgmma_fence();
        wgmma_step<BN, BKind::kFp8>(part1, smem_desc(sa_wg + 96), smem_desc(sb + 96), 0);
        wgmma_commit();
        wgmma_wait_n<1>();
        promote(part0, sx, sw + 2 * kNB, 2);
        wgmma_wait_n<0>();
        promote(part1, sx, sw + 3 * kNB, 3);
    }
    tc::cp_async_wait<0>();

    if (!wg_active) return;
    const bool pairs = p.y_ld % 2 == 0 && (reinterpret_cast<uintptr_t>(p.y) & 7) == 0;  // 8-byte stores
    store_tile_rows<BN>(p, acc, pairs, row_begin + r0, row_end, n0, N, t4);
}

}  // namespace deepinfer::cuda::kernels::wg
