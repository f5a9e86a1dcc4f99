// SPDX-License-Identifier: Apache-2.0
// Device code of the fast GEMM for packed FP4 weights on Hopper (sm_90a), the routed experts' path:
// wgmma.mma_async in its register-source form with the operands swapped: the WEIGHT is wgmma's A
// operand (64 weight rows per warpgroup, e4m3 in registers) and TN activation rows (tokens) are its
// B operand, in shared memory; the result tile is yᵀ. The kernel of gemm_wgmma.cuh converts FP4 to
// e4m3 in shared memory (a write pass and a second barrier per K tile); here every thread converts
// just the bytes of its own A fragment in registers (the raw FP4 bytes arrive with the activations in
// one cp.async pipeline stage), so a K tile costs one barrier, and the conversion of K tile kt + 1
// runs while the tensor cores work on K tile kt.
// Numerics are those of gemm_fast.h, unchanged: per K tile of 128, four k32 MMAs into a fresh
// register tile (ascending K), whose result is promoted into the f32 accumulator times (activation
// scale x weight scale); each 32-subblock (one k32 MMA step) shifted by its scale's distance to the
// largest of its row's four scales in the 128 block (same table, same promotion scale).
// A fragment (CUTLASS's ALayout_64x32, PTX "wgmma register fragments"): thread (warp w, lane = 4g + t)
// holds rows 16w + g (registers 0, 2) and 16w + g + 8 (registers 1, 3), K bytes 4t..4t+3 (registers
// 0, 1) and 16 + 4t..16 + 4t + 3 (registers 2, 3) of the k32 step. In packed FP4 those are the 2-byte
// pieces at 2t and 8 + 2t of the step's 16 bytes: two 4-byte shared-memory reads and one byte_perm
// per row and step (raw rows 80 bytes apart: the reads of a warp hit 16 distinct banks).
// Tile shapes (TN = 8..128 tokens, one or two warpgroups of 64 weight rows per block) come from counts
// only (launch/gemm_fast.cu). Each output element is the same instruction sequence over K whatever TN
// or the block shape: batch-invariant, and bit-identical to the shared-memory-converting kernel
// (tests/ops/gemm_fast_cuda_test.cpp checks every configuration).
#pragma once

#include "backends/cuda/kernels/gemm_wgmma.cuh"
#include "backends/cuda/kernels/wgmma_rs.cuh"

namespace deepinfer::cuda::kernels::wgrs {

using tc::TcArgs;

// wgmma_rs_step (e4m3, k32) and wgmma_fence_a: wgmma_rs.cuh.

template <int kWGs, int TN, int kStages>
struct RsConfig {
    static constexpr int kThreads = 128 * kWGs;
    static constexpr int BN = 64 * kWGs;  // weight rows per block
    static constexpr int kWPitch = 80;    // bytes per raw FP4 weight row in a stage (64 + 16 padding)
    // A stage: activation tile (TN rows x 128 bytes, 128-byte swizzle), raw weight rows, their ue8m0
    // scales (4 per row), the activation scales (TN f32).
    static constexpr int kBBytes = TN * 128;
    static constexpr int kWOff = kBBytes;
    static constexpr int kWsOff = kWOff + BN * kWPitch;
    static constexpr int kSxOff = kWsOff + BN * 4;
    static constexpr int kStageBytes = (kSxOff + TN * 4 + 1023) / 1024 * 1024;
    static constexpr int kSmemBytes = kStages * kStageBytes + 128 + 1024;  // + table + alignment slack
    static_assert(kStages >= 3, "the conversion of K tile kt + 1 reads its stage during K tile kt");
    static constexpr int kAhead = kStages - 1;  // K tiles in flight ahead of kt
    static_assert(TN % 8 == 0 && TN <= 128 && TN <= kThreads, "TN: a multiple of 8 up to 128");
};

template <int kWGs, int TN, int kStages, int kMinBlocks>
static __global__ void __launch_bounds__(128 * kWGs, kMinBlocks) fp4_rs_kernel(const __grid_constant__ TcArgs p) {
    using C = RsConfig<kWGs, TN, kStages>;
    constexpr int BN = C::BN, kThreads = C::kThreads;
    extern __shared__ uint8_t smem_raw[];
    // 1024-aligned (the swizzle atom), as an offset from the shared array: the compiler keeps shared-space
    // loads (LDS) for everything derived from it.
    uint8_t* smem = smem_raw + ((1024 - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t* table = smem + kStages * C::kStageBytes;
    const int tid = threadIdx.x, wgi = tid / 128, lane = tid % 32, wi = (tid % 128) / 32;
    const int g = lane / 4, t4 = lane % 4;

    // This block's token rows (blockIdx.y: a tile of one expert's rows) and weight rows (blockIdx.x).
    int64_t row_begin, row_end;
    const DeviceLinear* wp = &p.weight;
    if (p.expert_offsets) {
        const int t = static_cast<int>(blockIdx.y);
        if (t >= p.tile_offsets[p.num_experts]) return;
        int lo = 0, hi = static_cast<int>(p.num_experts) - 1;  // last e with tile_offsets[e] <= t
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (p.tile_offsets[mid] <= t) lo = mid; else hi = mid - 1;
        }
        row_begin = p.expert_offsets[lo] + int64_t(t - p.tile_offsets[lo]) * TN;
        row_end = p.expert_offsets[lo + 1];
        wp = p.experts + lo;
    } else {
        row_begin = int64_t(blockIdx.y) * TN;
        row_end = p.rows;
    }
    const int64_t n0 = int64_t(blockIdx.x) * BN, K = p.K, KT = p.k_tiles;
    const uint8_t* wbytes = static_cast<const uint8_t*>(wp->weight);
    const uint8_t* wscales = static_cast<const uint8_t*>(wp->scale);
    tc::build_fp4_table(table, tid);

    auto a_row_of = [&](int64_t r) -> int64_t { return p.a_row_src ? p.a_row_src[r] : r; };
    // Each thread's copies are the same rows and chunks in every K tile: sources computed once (a token
    // row past the tile's end zero-fills; -1: no copy at all).
    constexpr int kAChunks = (TN * 8 + kThreads - 1) / kThreads;
    const uint8_t* a_src[kAChunks];
    int a_dst[kAChunks], a_len[kAChunks];
#pragma unroll
    for (int q = 0; q < kAChunks; ++q) {
        const int i = tid + q * kThreads, r = i >> 3, c = i & 7;
        const int64_t gr = row_begin + r;
        const bool ok = i < TN * 8 && gr < row_end;
        a_src[q] = ok ? p.a + a_row_of(gr) * p.a_row_bytes + c * 16 : p.a;
        a_dst[q] = wg::tile_offset(r, c);
        a_len[q] = i < TN * 8 ? (ok ? 16 : 0) : -1;
    }
    constexpr int kWChunks = BN * 4 / kThreads;  // 16-byte chunks of raw weight rows per thread
    const uint8_t* w_src[kWChunks];
    int w_dst[kWChunks];
#pragma unroll
    for (int q = 0; q < kWChunks; ++q) {
        const int i = tid + q * kThreads, r = i / 4, c = i % 4;
        w_src[q] = wbytes + (n0 + r) * (K / 2) + c * 16;
        w_dst[q] = C::kWOff + r * C::kWPitch + c * 16;
    }
    const uint8_t* ws_src = wscales + (n0 + min(tid, BN - 1)) * (K / 32);  // tid < BN: this row's scales
    const float* x_scale_src = p.a_scale;  // tid < TN: this token row's activation scales
    int x_scale_len = 0;
    if (tid < TN && row_begin + tid < row_end) {
        x_scale_src = p.a_scale + a_row_of(row_begin + tid) * KT;
        x_scale_len = 4;
    }
    // The copies of the next K tile into stage st (tiles are loaded in order: running source pointers).
    auto load_stage = [&](int st) {
        uint8_t* s = smem + st * C::kStageBytes;
#pragma unroll
        for (int q = 0; q < kAChunks; ++q) {
            if (a_len[q] >= 0) tc::cp_async16(s + a_dst[q], a_src[q], a_len[q]);
            a_src[q] += 128;
        }
#pragma unroll
        for (int q = 0; q < kWChunks; ++q) {
            tc::cp_async16(s + w_dst[q], w_src[q], 16);
            w_src[q] += 64;
        }
        if (tid < BN) tc::cp_async4(s + C::kWsOff + tid * 4, ws_src, 4);
        if (tid < TN) tc::cp_async4(s + C::kSxOff + tid * 4, x_scale_src, x_scale_len);
        ws_src += 4;
        x_scale_src += 1;
    };

    // This thread's A fragment of K tile kt (stage st): weight rows lr0 (h = 0) and lr0 + 8 (h = 1),
    // and their promotion scales (the largest of the row's four scales in the block).
    const int lr0 = wgi * 64 + wi * 16 + g;
    const uint32_t sel = (t4 & 1) ? 0x7632u : 0x5410u;
    const int cofs = 4 * (t4 >> 1);
    auto convert = [&](int st, uint32_t (&af)[4][4], float (&sw)[2]) {
        const uint8_t* s = smem + st * C::kStageBytes;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int lr = lr0 + 8 * h;
            const uint8_t* row = s + C::kWOff + lr * C::kWPitch + cofs;
            const uint32_t sc = *reinterpret_cast<const uint32_t*>(s + C::kWsOff + lr * 4);
            const uint32_t emax = tc::fp4_block_emax(sc);
            sw[h] = dev::e8m0_pow2(emax);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint32_t lo32 = *reinterpret_cast<const uint32_t*>(row + j * 16);
                const uint32_t hi32 = *reinterpret_cast<const uint32_t*>(row + j * 16 + 8);
                const uint32_t z = __byte_perm(lo32, hi32, sel);  // K 4t..4t+3 | 16+4t..16+4t+3 of step j
                const uint32_t d = tc::fp4_subblock_shift(emax, sc, j);
                const uint2 tv = *reinterpret_cast<const uint2*>(table + d * 8);
                tc::fp4x8_to_e4m3_fast(z, tv.x, tv.y, af[j][h], af[j][2 + h]);
            }
        }
    };

    float acc[TN / 2], part[TN / 2];
#pragma unroll
    for (int j = 0; j < TN / 2; ++j) acc[j] = part[j] = 0.0f;
    // A fragments and promotion scales of K tiles kt (cur) and kt + 1 (next), in registers swapped by
    // unrolling two K tiles: the conversion never writes a register an in-flight wgmma reads (which
    // would make ptxas serialize the MMAs, C7513).
    uint32_t a0[4][4], a1[4][4];
    float s0[2], s1[2];

    // acc += part · (activation scale x weight scale), K tile of stage st.
    auto promote = [&](int st, const float (&sw)[2]) {
        const float* sx = reinterpret_cast<const float*>(smem + st * C::kStageBytes + C::kSxOff);
        wg::promote_tile<TN>(acc, part, sx, t4, sw[0], sw[1]);
    };

#pragma unroll
    for (int st = 0; st < C::kAhead; ++st) {
        if (st < KT) load_stage(st);
        tc::cp_async_commit();
    }
    tc::cp_async_wait<C::kAhead - 1>();  // K tile 0 (and the table: the barrier below)
    __syncthreads();
    convert(0, a0, s0);

    auto k_tile = [&](int64_t kt, uint32_t (&acur)[4][4], uint32_t (&anext)[4][4], const float (&swc)[2],
                      float (&swn)[2]) {
        // K tile kt + 1 has landed (this thread's copies); after the barrier, everyone's, and every thread
        // is done with stage (kt - 1) % kStages (its MMAs completed, its scales promoted, its weights
        // converted an iteration earlier): refill it.
        tc::cp_async_wait<C::kAhead - 2>();
        wg::fence_proxy_async();
        __syncthreads();
        {
            const int64_t next = kt + C::kAhead;
            if (next < KT) load_stage(static_cast<int>(next % kStages));
            tc::cp_async_commit();
        }
        const int st = static_cast<int>(kt % kStages);
        const uint8_t* sb = smem + st * C::kStageBytes;
        wgmma_fence_a(acur);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) wgmma_rs_step<TN>(part, acur[ks], wg::smem_desc(sb + ks * 32), ks > 0 ? 1 : 0);
        wg::wgmma_commit();
        // While the tensor cores work: the next K tile's A fragment (past the last tile: a stale stage,
        // converted and never used).
        convert(static_cast<int>((kt + 1) % kStages), anext, swn);
        wg::wgmma_wait();
        promote(st, swc);
    };
    for (int64_t kt = 0; kt < KT; kt += 2) {  // KT even (the launcher's condition)
        k_tile(kt, a0, a1, s0, s1);
        k_tile(kt + 1, a1, a0, s1, s0);
    }
    tc::cp_async_wait<0>();

    // yᵀ tile: token column c of this thread's weight rows n and n + 8.
    const int64_t n = n0 + lr0;
#pragma unroll
    for (int j = 0; j < TN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int64_t gr = row_begin + j * 8 + t4 * 2 + e;
            if (gr >= row_end) continue;
            float* yrow = p.y + (p.y_row ? int64_t(p.y_row[gr]) : gr) * p.y_ld;
            yrow[n] = dev::maybe_bf16(acc[4 * j + e], p.round_bf16);
            yrow[n + 8] = dev::maybe_bf16(acc[4 * j + 2 + e], p.round_bf16);
        }
}

}  // namespace deepinfer::cuda::kernels::wgrs
