// SPDX-License-Identifier: Apache-2.0
// Device code of the fast GEMM for packed FP4 weights on Hopper (sm_90a) at decode-sized rows per
// expert (1..64): weight-streaming. The operands are those of gemm_wgmma_fp4rs.cuh (the WEIGHT is
// wgmma's A operand from registers, 64 weight rows per block of one warpgroup; the tokens of one
// expert are the B operand in shared memory, 128-byte swizzle; the result is a yᵀ tile), and so are
// the numerics (per K tile of 128 four k32 MMAs into a fresh register tile, promoted into the f32
// accumulator times activation scale x weight scale; the same shift table and promotion scale), so
// every output element gets the same bits as in the other FP4 kernels. What differs is the shape of
// the work, for the case where a tile holds only a few real token rows:
//  - A tile covers up to kMaxNT rows of one expert (the launcher's tile table), but the wgmma width N
//    (8, 16, 32 or 64) is chosen per block from the rows the tile really has: a 1-row expert stages one
//    8-row B tile and issues m64n8k32 MMAs, not 64-row ones. The whole K loop is instantiated per N, so
//    the MMA chain has no branches.
//  - A pipeline stage holds kKTSmall K tiles for N <= 32 (2: 128 bytes of each raw FP4 weight row, a
//    whole line; 1 for N = 64, whose activation tiles are large), the stage count per N fills a
//    shared-memory budget (a narrow B tile leaves room for more stages, i.e. more weight bytes in flight
//    per SM), and the weight copies may ask the L2 to prefetch 128 or 256 bytes (kPf).
//  - The conversion makes both output words of a thread's eight codes at once from their two 16-bit
//    halves (tc::fp4x4x2_to_e4m3: two masks, four byte_perms; loading the halves apart saves the
//    byte_perm that joined two 32-bit loads), the promotion scale is built from its bits (dev::e8m0_pow2),
//    the expert index of the block comes from one coalesced pass over the tile table instead of a
//    binary search of dependent loads.
//  - Each (weight row, K tile) pair's scale word is prepared once per stage, by the thread that copied
//    it, into the row's shared-memory padding: the promotion scale and the four subblocks' table offsets
//    (scale_info). The four lanes that share a row used to derive them each (the largest of four bytes,
//    four clamped differences, four table addresses per row and K tile): ~30% of the kernel's integer
//    instructions, and the kernel is bound by the integer pipe (ncu: ALU pipe 74% busy, math-pipe
//    throttle the second stall reason, bench/results/cuda-session29-*.md).
#pragma once

#include <type_traits>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/gemm_wgmma_fp4rs.cuh"

namespace deepinfer::cuda::kernels::wgdec {

using tc::TcArgs;

template <int kBytes>
__device__ __forceinline__ void cp_async_small(void* dst, const void* src, int src_bytes) {
    static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async sizes");
    if constexpr (kBytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tc::smem_addr(dst)), "l"(src), "r"(src_bytes));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(tc::smem_addr(dst)), "l"(src), "n"(kBytes),
                     "r"(src_bytes));
}

// 16-byte copy of raw weight bytes with an L2 prefetch hint of kPf bytes (0: none, 128, 256): the L2
// fetches the rest of the line (pair) that later stages read.
template <int kPf>
__device__ __forceinline__ void cp_async_w16(void* dst, const void* src) {
    if constexpr (kPf == 256)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(tc::smem_addr(dst)), "l"(src));
    else if constexpr (kPf == 128)
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(tc::smem_addr(dst)), "l"(src));
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(tc::smem_addr(dst)), "l"(src));
}

template <int kMaxNT_, int kKTSmall_, int kBudget, int kMinBlocks_, int kPf_>
struct DecConfig {
    static constexpr int kMaxNT = kMaxNT_, kKTSmall = kKTSmall_, kMinBlocks = kMinBlocks_, kPf = kPf_;
    static constexpr int kThreads = 128;
    static constexpr int BN = 64;  // weight rows per block
    // K tiles per stage: kKTSmall for wgmma widths up to 32, 1 for 64 (its activation tiles are large).
    __host__ __device__ static constexpr int kt(int nt) { return nt <= 32 ? kKTSmall : 1; }
    // Bytes per raw FP4 weight row in a stage: kt(nt) x 64 bytes of codes, then 16 bytes that keep the
    // fragment reads conflict-free and hold the row's scale_info, 8 bytes per K tile of the stage.
    __host__ __device__ static constexpr int w_pitch(int nt) { return kt(nt) * 64 + 16; }
    // A stage for wgmma width nt: kt(nt) activation tiles (nt rows x 128 bytes, 128-byte swizzle), the raw
    // weight rows with their scale_info, the activation scales ([kt][nt] f32).
    __host__ __device__ static constexpr int w_off(int nt) { return kt(nt) * nt * 128; }
    __host__ __device__ static constexpr int sx_off(int nt) { return w_off(nt) + BN * w_pitch(nt); }
    __host__ __device__ static constexpr int stage_bytes(int nt) { return (sx_off(nt) + kt(nt) * nt * 4 + 1023) / 1024 * 1024; }
    __host__ __device__ static constexpr int stages(int nt) {
        const int s = kBudget / stage_bytes(nt);
        return s < 3 ? 3 : (s > 10 ? 10 : s);
    }
    __host__ __device__ static constexpr int area(int nt) { return stages(nt) * stage_bytes(nt); }
    __host__ __device__ static constexpr int max2(int a, int b) { return a > b ? a : b; }
    static constexpr int kStageArea = max2(max2(area(8), area(16)), max2(kMaxNT >= 32 ? area(32) : 0, kMaxNT >= 64 ? area(64) : 0));
    static constexpr int kSmemBytes = kStageArea + 128 + 1024;  // + table + alignment slack
    static_assert(kMaxNT == 16 || kMaxNT == 32 || kMaxNT == 64, "tile rows: 16, 32 or 64");
    static_assert(kKTSmall == 1 || kKTSmall == 2, "K tiles per stage: 1 or 2");
};

// The block's work: token rows [row_begin, row_begin + count) of one expert, weight rows n0..n0+63.
// A (weight row, K tile) pair's scale_info in the row's padding: {promotion scale (f32 bits), byte j = 8·d_j}
// with d_j = min(emax - scale_j, 15) the shift-table row of subblock j and emax the largest of the four
// ue8m0 scales (the same values the other FP4 kernels derive per lane). The raw scale word is copied into
// the second half and rewritten in place by the thread that copied it, once its copy landed.
__device__ __forceinline__ void prepare_scale_info(uint8_t* info) {
    const uint32_t sc = *reinterpret_cast<const uint32_t*>(info + 4);
    const uint32_t emax = tc::fp4_block_emax(sc);
    const uint32_t offs = (tc::fp4_subblock_shift(emax, sc, 0) << 3) | (tc::fp4_subblock_shift(emax, sc, 1) << 11) |
                          (tc::fp4_subblock_shift(emax, sc, 2) << 19) | (tc::fp4_subblock_shift(emax, sc, 3) << 27);
    *reinterpret_cast<uint2*>(info) = make_uint2(__float_as_uint(dev::e8m0_pow2(emax)), offs);
}

struct DecTile {
    int64_t row_begin;
    int count;
    int64_t n0;
    const DeviceLinear* wp;
    float* y;  // p.y, or p.y2 for the second weight set
};

template <class C, int NT>
__device__ __forceinline__ void dec_tile(const TcArgs& p, const DecTile& t, uint8_t* smem, const uint8_t* table) {
    constexpr int kKT = C::kt(NT), kStages = C::stages(NT), kThreads = C::kThreads, BN = C::BN, kWPitch = C::w_pitch(NT);
    constexpr int kStageBytes = C::stage_bytes(NT);
    constexpr int kW = C::w_off(NT), kSx = C::sx_off(NT);
    constexpr int kInfo = kW + kKT * 64;  // a row's scale_info: kInfo + row · kWPitch + 8 · (K tile of the stage)
    const int tid = threadIdx.x, lane = tid % 32, wi = tid / 32;
    const int g = lane / 4, t4 = lane % 4;
    const int64_t K = p.K;
    const int KT = static_cast<int>(p.k_tiles), KS = KT / kKT;  // K tiles, stages of kKT K tiles
    const uint8_t* wbytes = static_cast<const uint8_t*>(t.wp->weight);
    const uint8_t* wscales = static_cast<const uint8_t*>(t.wp->scale);
    auto a_row_of = [&](int64_t r) -> int64_t { return p.a_row_src ? p.a_row_src[r] : r; };

    // Each thread's copies are the same rows and chunks in every stage: sources computed once (a token
    // row past the tile's rows zero-fills; len -1: no copy at all).
    constexpr int kAChunksAll = NT * 8 * kKT;  // 16-byte chunks of activation rows per stage
    constexpr int kAChunks = (kAChunksAll + kThreads - 1) / kThreads;
    const uint8_t* a_src[kAChunks];
    int a_dst[kAChunks], a_len[kAChunks];
#pragma unroll
    for (int q = 0; q < kAChunks; ++q) {
        const int i = tid + q * kThreads, r = i / (8 * kKT), cc = i % (8 * kKT);
        const bool ok = i < kAChunksAll && r < t.count;
        a_src[q] = ok ? p.a + a_row_of(t.row_begin + r) * p.a_row_bytes + cc * 16 : p.a;
        a_dst[q] = (cc / 8) * NT * 128 + wg::tile_offset(r, cc % 8);
        a_len[q] = i < kAChunksAll ? (ok ? 16 : 0) : -1;
    }
    constexpr int kWRowChunks = 4 * kKT;                   // 16-byte chunks of a weight row per stage
    constexpr int kWChunks = BN * kWRowChunks / kThreads;  // per thread
    const uint8_t* w_src[kWChunks];
    int w_dst[kWChunks];
#pragma unroll
    for (int q = 0; q < kWChunks; ++q) {
        const int i = tid + q * kThreads, r = i / kWRowChunks, c = i % kWRowChunks;
        w_src[q] = wbytes + (t.n0 + r) * (K / 2) + c * 16;
        w_dst[q] = kW + r * kWPitch + c * 16;
    }
    // The (weight row, K tile) pair whose scale word this thread copies and prepares: tid < BN · kKT.
    constexpr int kPairs = BN * kKT;
    static_assert(kPairs <= kThreads, "one scale pair per thread");
    const int pr = tid / kKT, pk = tid % kKT;
    const uint8_t* ws_src = wscales + (t.n0 + pr) * (K / 32) + pk * 4;
    const int info_dst = kInfo + pr * kWPitch + pk * 8;
    // tid < kKT * NT: the activation scale of token row tid % NT, K tile tid / NT of each stage.
    const int sx_tok = tid % NT, sx_kt = tid / NT;
    const float* x_scale_src = p.a_scale;
    int x_scale_len = 0;
    if (tid < kKT * NT && sx_tok < t.count) {
        x_scale_src = p.a_scale + a_row_of(t.row_begin + sx_tok) * KT + sx_kt;
        x_scale_len = 4;
    }
    auto load_stage = [&](int slot) {
        uint8_t* s = smem + slot * kStageBytes;
#pragma unroll
        for (int q = 0; q < kAChunks; ++q) {
            if (a_len[q] >= 0) tc::cp_async16(s + a_dst[q], a_src[q], a_len[q]);
            a_src[q] += 128 * kKT;
        }
#pragma unroll
        for (int q = 0; q < kWChunks; ++q) {
            cp_async_w16<C::kPf>(s + w_dst[q], w_src[q]);
            w_src[q] += 64 * kKT;
        }
        if (tid < kPairs) cp_async_small<4>(s + info_dst + 4, ws_src, 4);
        if (tid < kKT * NT) tc::cp_async4(s + kSx + (sx_kt * NT + sx_tok) * 4, x_scale_src, x_scale_len);
        ws_src += 4 * kKT;
        x_scale_src += kKT;
    };

    // The stage in `slot` landed (this thread's copies): its scale pair's scale_info, before the barrier
    // that publishes the stage.
    auto prepare = [&](int slot) {
        if (tid < kPairs) prepare_scale_info(smem + slot * kStageBytes + info_dst);
    };

    // This thread's A fragment of K tile kt: weight rows lr0 (h = 0) and lr0 + 8 (h = 1), and their
    // promotion scales (from the rows' scale_info).
    const int lr0 = wi * 16 + g;
    auto convert = [&](int slot, int ktl, uint32_t (&af)[4][4], float (&sw)[2]) {
        const uint8_t* s = smem + slot * kStageBytes;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int lr = lr0 + 8 * h;
            const uint8_t* row = s + kW + lr * kWPitch + ktl * 64 + 2 * t4;
            const uint2 info = *reinterpret_cast<const uint2*>(s + kInfo + lr * kWPitch + ktl * 8);
            sw[h] = __uint_as_float(info.x);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                // K 4t..4t+3 and 16+4t..16+4t+3 of step j: bytes 2t, 2t+1 and 8+2t, 9+2t of its 16 (two 16-bit
                // loads, conflict-free: 8 rows x 2 banks per warp).
                const uint32_t lo16 = *reinterpret_cast<const uint16_t*>(row + j * 16);
                const uint32_t hi16 = *reinterpret_cast<const uint16_t*>(row + j * 16 + 8);
                const uint32_t off = j == 0 ? info.y & 0xFFu : j == 3 ? info.y >> 24 : (info.y >> (8 * j)) & 0xFFu;  // 8 · d_j
                const uint2 tv = *reinterpret_cast<const uint2*>(table + off);
                tc::fp4x4x2_to_e4m3(lo16, hi16, tv.x, tv.y, af[j][h], af[j][2 + h]);
            }
        }
    };

    float acc[NT / 2], part[NT / 2];
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) acc[j] = part[j] = 0.0f;
    uint32_t a0[4][4], a1[4][4];
    float s0[2], s1[2];

    // acc += part · (activation scale x weight scale), K tile ktl of the stage in `slot`.
    auto promote = [&](int slot, int ktl, const float (&sw)[2]) {
        const float* sx = reinterpret_cast<const float*>(smem + slot * kStageBytes + kSx) + ktl * NT;
        wg::promote_tile<NT>(acc, part, sx, t4, sw[0], sw[1]);
    };

    // Prologue: stages 0 .. kStages - 2 in flight; stage 0 landed (everyone's copies: the barrier).
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
        if (st < KS) load_stage(st);
        tc::cp_async_commit();
    }
    tc::cp_async_wait<kStages - 2>();
    prepare(0);
    __syncthreads();
    convert(0, 0, a0, s0);

    // K tile kt (K tile ktl of the stage in `slot`): its MMAs (A = acur), then the conversion of K tile
    // kt + 1 while they run. When kt + 1 opens a stage (ktl = kKT - 1), that stage must have landed: wait
    // for this thread's copies, barrier (then everyone's have, and every thread is done with the stage two
    // back: its MMAs completed, its scales promoted, its weights converted), and refill that one with the
    // stage kStages - 2 ahead of kt + 1's. Slots advance by one per stage (no divisions).
    int slot = 0;
    auto k_tile = [&](auto ktl_c, int kt, uint32_t (&acur)[4][4], uint32_t (&anext)[4][4], const float (&swc)[2],
                      float (&swn)[2]) {
        constexpr int ktl = decltype(ktl_c)::value;
        constexpr bool kNewStage = ktl == kKT - 1;
        const int next_slot = kNewStage ? (slot + 1 == kStages ? 0 : slot + 1) : slot;
        if constexpr (kNewStage) {
            tc::cp_async_wait<kStages - 3>();
            prepare(next_slot);  // past the last K tile a stale stage's, never used
            wg::fence_proxy_async();
            __syncthreads();
            const int ahead = (kt + 1) / kKT + kStages - 2;
            if (ahead < KS) load_stage(next_slot >= 2 ? next_slot - 2 : next_slot + kStages - 2);
            tc::cp_async_commit();
        }
        const uint8_t* sb = smem + slot * kStageBytes + ktl * NT * 128;
        wgrs::wgmma_fence_a(acur);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) wgrs::wgmma_rs_step<NT>(part, acur[ks], wg::smem_desc(sb + ks * 32), ks > 0 ? 1 : 0);
        wg::wgmma_commit();
        // Past the last K tile this converts a stale stage, never used.
        convert(next_slot, kNewStage ? 0 : ktl + 1, anext, swn);
        wg::wgmma_wait();
        promote(slot, ktl, swc);
        slot = next_slot;
    };
    using Ktl0 = std::integral_constant<int, 0>;
    using Ktl1 = std::integral_constant<int, kKT - 1>;  // 0 (kKT = 1) or 1
    for (int kt = 0; kt < KT; kt += 2) {  // KT even (the launcher's condition)
        k_tile(Ktl0{}, kt, a0, a1, s0, s1);
        k_tile(Ktl1{}, kt + 1, a1, a0, s1, s0);
    }
    tc::cp_async_wait<0>();

    // yᵀ tile: token column c of this thread's weight rows n and n + 8.
    const int64_t n = t.n0 + lr0;
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int r = j * 8 + t4 * 2 + e;
            if (r >= t.count) continue;
            const int64_t gr = t.row_begin + r;
            float* yrow = t.y + (p.y_row ? int64_t(p.y_row[gr]) : gr) * p.y_ld;
            yrow[n] = dev::maybe_bf16(acc[4 * j + e], p.round_bf16);
            yrow[n + 8] = dev::maybe_bf16(acc[4 * j + 2 + e], p.round_bf16);
        }
}

template <int kMaxNT, int kKTSmall, int kBudget, int kMinBlocks, int kPf>
static __global__ void __launch_bounds__(128, kMinBlocks) fp4_dec_kernel(const __grid_constant__ TcArgs p) {
    using C = DecConfig<kMaxNT, kKTSmall, kBudget, kMinBlocks, kPf>;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t* table = smem + C::kStageArea;
    __shared__ int s_expert;
    const int tid = threadIdx.x;
    tc::build_fp4_table(table, tid);
    pdl_enter();  // launched by launch_pdl (common/launch.cuh): the tables below come from earlier kernels

    // This block's token rows (blockIdx.y: a tile of up to kMaxNT rows of one expert) and weight rows.
    DecTile t;
    // Blocks x >= N / BN: the second weight set (p.experts2 into p.y2), same tiles.
    const int64_t wblocks = p.N / C::BN;
    const bool second = p.experts2 != nullptr && int64_t(blockIdx.x) >= wblocks;
    t.n0 = (int64_t(blockIdx.x) - (second ? wblocks : 0)) * C::BN;
    t.wp = &p.weight;
    t.y = second ? p.y2 : p.y;
    int64_t row_end;
    if (p.expert_offsets) {
        const int tile = static_cast<int>(blockIdx.y);
        if (tile >= p.tile_offsets[p.num_experts]) return;
        // The expert e with tile_offsets[e] <= tile < tile_offsets[e + 1] (one per tile: empty experts
        // have no tiles), found by one coalesced pass.
        if (tid == 0) s_expert = 0;
        __syncthreads();
#pragma unroll 2
        for (int64_t e = tid; e < p.num_experts; e += C::kThreads)
            if (p.tile_offsets[e] <= tile && tile < p.tile_offsets[e + 1]) s_expert = static_cast<int>(e);
        __syncthreads();
        const int e = s_expert;
        t.row_begin = p.expert_offsets[e] + int64_t(tile - p.tile_offsets[e]) * kMaxNT;
        row_end = p.expert_offsets[e + 1];
        t.wp = (second ? p.experts2 : p.experts) + e;
    } else {
        t.row_begin = int64_t(blockIdx.y) * kMaxNT;
        row_end = p.rows;
    }
    t.count = static_cast<int>(row_end - t.row_begin < kMaxNT ? row_end - t.row_begin : kMaxNT);
    // The wgmma width from the tile's rows; the same bits in each (batch invariance).
    if (t.count <= 8) {
        dec_tile<C, 8>(p, t, smem, table);
    } else if (t.count <= 16) {
        dec_tile<C, 16>(p, t, smem, table);
    } else if constexpr (kMaxNT >= 32) {
        if (t.count <= 32) {
            dec_tile<C, 32>(p, t, smem, table);
        } else if constexpr (kMaxNT >= 64) {
            dec_tile<C, 64>(p, t, smem, table);
        }
    }
}

}  // namespace deepinfer::cuda::kernels::wgdec
