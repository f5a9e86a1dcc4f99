// SPDX-License-Identifier: Apache-2.0
// Device code of the warp-specialized fast GEMM for packed FP4 weights on Hopper (sm_90a): the routed
// experts' prefill path (compute-bound tiles of up to 128 tokens of one expert).
// A block is kProducers + 2 warpgroups over 128 weight rows x up to 128 token rows:
//  - warpgroups 0 .. kProducers - 1, the producers (with two, producer p takes the K tiles kt = p mod 2,
//    so each has two tiles' time for a tile's copies and conversion; with one warpgroup its single warp
//    per scheduler was the kernel's bottleneck): cp.async copies of each K tile (128 bytes of K) into a
//    ring of kStages stages (the tokens' e4m3 rows in the 128-byte swizzle layout, the raw FP4 weight
//    rows in a 64-byte-pitch swizzle), and once per group of 4 (or 2) K tiles the rows' ue8m0 scales and
//    the tokens' act_quant scales of the whole group, 16 (8) bytes per row, into a small per-producer
//    ring (ncu: per-K-tile 4-byte copies, one row per lane, were a sixth of all shared-memory wavefronts,
//    nearly all of it bank and sector waste); then converts the FP4 weights of the tile
//    to e4m3 into the stage's swizzled weight tile (each producer thread one weight row: 64 raw bytes ->
//    128 e4m3 bytes), writes the stage's token and promotion scales, and signals the stage full
//    (mbarrier); kPf > 0: each
//    thread also prefetches its weight row kPf K tiles ahead into L2;
//  - the last two warpgroups, the consumers: each waits for the stage, issues four
//    wgmma.mma_async m64nNTk32 e4m3 with both operands in shared memory (A = its 64 converted weight
//    rows, B = the NT token rows), waits for them, promotes the fresh register tile into its f32
//    accumulator, and releases the stage (mbarrier).
// The stage's token scales are stored in the consumers' read order (token_scale_slot); the consumers'
// stage, phase and operand descriptors come from a 32-bit K-tile count and stage 0's descriptors.
// kSelf (producer threads convert the chunks they copied, no producer barrier) and the kOpt options
// (elected full-barrier arrive, consumer ping-pong) are measured alternatives, none faster than the
// default (bench/results/cuda-expert-prefill-h200-*.md).
// With two producer warpgroups (512 threads) setmaxnreg gives the producers 96 registers and the
// consumers 160. kPersistent: one block per SM loops over the (weight-row block, token tile) pairs, the
// stage ring running on across them (a tile's first copies overlap the previous tile's last MMAs and
// stores: no block start, prologue or pipeline fill per tile).
// Conversion, copies and the tensor cores overlap; the conversion of a weight tile is done once per
// block and shared by all its tokens; the consumers run no conversion or address arithmetic.
// NT (the wgmma N: 32, 64, 96 or 128) is chosen per block from its tile's row count (a 96-row expert
// does not pay for 128), never changing a row's arithmetic.
// Numerics are those of gemm_fast.h and of the two other FP4 kernels, bit for bit: per K tile of 128,
// four k32 MMAs into a fresh register tile (ascending K), promoted into the f32 accumulator times
// (activation scale x weight scale); each 32-subblock of a weight row shifted by its scale's distance
// to the largest of the row's four scales in the 128 block (the same table). Each output element is
// the same instruction sequence over K whatever the tile's rows or NT: batch-invariant
// (tests/ops/gemm_fast_cuda_test.cpp compares every configuration with the shared-memory kernel).
#pragma once

#include "backends/cuda/common/mbarrier.cuh"
#include "backends/cuda/kernels/gemm_wgmma.cuh"

namespace deepinfer::cuda::kernels::wgws {

using tc::TcArgs;

#define DI_R8(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d (+)= A · Bᵀ for one k32 step, A (64 x 32 e4m3) and B (NT x 32 e4m3) by descriptor; scale_d = 0
// overwrites d.
template <int NT>
__device__ __forceinline__ void wgmma_ss_step(float (&d)[NT / 2], uint64_t da, uint64_t db, int scale_d) {
#ifdef DI_WGMMA_ENABLED
    if constexpr (NT == 32) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
            "}, %16, %17, p, 1, 1;\n}\n"
            : DI_R8(0), DI_R8(8)
            : "l"(da), "l"(db), "r"(scale_d));
    } else if constexpr (NT == 64) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
            "%24,%25,%26,%27,%28,%29,%30,%31"
            "}, %32, %33, p, 1, 1;\n}\n"
            : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24)
            : "l"(da), "l"(db), "r"(scale_d));
    } else if constexpr (NT == 96) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
            "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47"
            "}, %48, %49, p, 1, 1;\n}\n"
            : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24), DI_R8(32), DI_R8(40)
            : "l"(da), "l"(db), "r"(scale_d));
    } else {
        static_assert(NT == 128, "NT: 32, 64, 96 or 128");
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
            "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
            "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
            "}, %64, %65, p, 1, 1;\n}\n"
            : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24), DI_R8(32), DI_R8(40), DI_R8(48), DI_R8(56)
            : "l"(da), "l"(db), "r"(scale_d));
    }
#else
    (void)d; (void)da; (void)db; (void)scale_d;
    __trap();  // the launcher selects this kernel only on sm_90 devices (built for sm_90a)
#endif
}
#undef DI_R8

// ---- mbarriers (shared::cta) and the producers' named barrier -----------------------------------------

using dev::mbar_arrive;  // (common/mbarrier.cuh)
using dev::mbar_init;
using dev::mbar_wait;
// Barrier 1 + p among the 128 threads of producer warpgroup p (barrier 0 is __syncthreads).
__device__ __forceinline__ void producer_sync(int p) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + p) : "memory"); }

// Options of the warp-specialized kernel (a bit mask, template argument kOpt):
//  - kOptElect: a producer warp's lanes signal a converted stage through one elected arrive per warp (the
//    full barrier counts 4 arrivals per producer warpgroup instead of 128: fewer shared-memory atomics);
//  - kOptPingPong: the two consumer warpgroups issue their MMAs in strict alternation (named barriers 3 and
//    4 of the 256 consumer threads), so one warpgroup's MMAs run while the other promotes instead of both
//    waiting on the tensor cores together and then promoting together.
// Neither changes a row's arithmetic.
constexpr int kOptElect = 1, kOptPingPong = 2;
// Consumer warpgroup cw's turn to issue (barrier 3 + cw), and passing the turn to the other (4 - cw).
__device__ __forceinline__ void consumer_turn_wait(int cw) { asm volatile("bar.sync %0, 256;\n" ::"r"(3 + cw) : "memory"); }
__device__ __forceinline__ void consumer_turn_pass(int cw) { asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - cw) : "memory"); }


// 8-byte async copy; src_bytes = 0 fills the destination with zeros.
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(tc::smem_addr(dst)), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// base + row · stride (one mad.wide per copy: volatile, so the compiler keeps no 64-bit product per row
// in registers across the loop).
__device__ __forceinline__ const uint8_t* row_address(const uint8_t* base, uint32_t row, uint32_t stride) {
    uint64_t a;
    asm volatile("mad.wide.u32 %0, %1, %2, %3;\n" : "=l"(a) : "r"(row), "r"(stride), "l"(reinterpret_cast<uint64_t>(base)));
    return reinterpret_cast<const uint8_t*>(a);
}

// Tile t's expert: the last e < num_experts with tile_offsets[e] <= t (tile_offsets ascending from 0), as
// the count of those e minus one; each lane counts a strided share, one round of independent loads
// instead of a binary search's chain of dependent ones (the block's prologue).
__device__ __forceinline__ int expert_of_tile(const int32_t* tile_offsets, int64_t num_experts, int t) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    int n = 0;
#pragma unroll 4
    for (int64_t e = lane; e < num_experts; e += 32) n += __ldg(tile_offsets + e) <= t ? 1 : 0;
    return __reduce_add_sync(0xFFFFFFFFu, n) - 1;
}

// The stage's token scales in the order the consumers read them: a consumer thread (t4 = lane % 4) needs
// the scales of token columns 8j + 2·t4 and + 1 for every j; column c = 8j + 2·t4 + e sits at
// 16·(j / 2) + 4·t4 + 2·(j % 2) + e, so one 16-byte read gives columns j and j + 1 (j even) and a warp's
// read (4 distinct addresses, 64 contiguous bytes) is one shared-memory wavefront: 8 reads per 128 tokens
// instead of 16 8-byte ones. A permutation within each 32 tokens (conflict-free writes).
__device__ __forceinline__ int token_scale_slot(int c) {
    return (c >> 4) * 16 + ((c >> 1) & 3) * 4 + ((c >> 3) & 1) * 2 + (c & 1);
}

// acc += part · (token scale x weight-row scale), as wg::promote_tile (the same products and FMAs per
// element, the same bits) with the token scales in token_scale_slot order.
template <int NT>
__device__ __forceinline__ void promote_tile_x4(float (&acc)[NT / 2], const float (&part)[NT / 2], const float* sx, int t4, float sw0,
                                                float sw1) {
    static_assert(NT % 16 == 0, "NT: a multiple of 16");
#pragma unroll
    for (int jj = 0; jj < NT / 16; ++jj) {
        const float4 x = *reinterpret_cast<const float4*>(sx + jj * 16 + t4 * 4);
        const int a = 8 * jj, b = 8 * jj + 4;  // accumulators of columns j = 2jj and j = 2jj + 1
        acc[a + 0] = fmaf(part[a + 0], x.x * sw0, acc[a + 0]);
        acc[a + 1] = fmaf(part[a + 1], x.y * sw0, acc[a + 1]);
        acc[a + 2] = fmaf(part[a + 2], x.x * sw1, acc[a + 2]);
        acc[a + 3] = fmaf(part[a + 3], x.y * sw1, acc[a + 3]);
        acc[b + 0] = fmaf(part[b + 0], x.z * sw0, acc[b + 0]);
        acc[b + 1] = fmaf(part[b + 1], x.w * sw0, acc[b + 1]);
        acc[b + 2] = fmaf(part[b + 2], x.z * sw1, acc[b + 2]);
        acc[b + 3] = fmaf(part[b + 3], x.w * sw1, acc[b + 3]);
    }
}

template <int kStages, int kProducers = 1>
struct WsConfig {
    static_assert(kProducers == 1 || kProducers == 2, "one or two producer warpgroups");
    static constexpr int kThreads = 128 * (kProducers + 2);  // producer warpgroups + two consumer warpgroups
    static constexpr int BN = 128;        // weight rows per block (64 per consumer warpgroup)
    static constexpr int kMaxTokens = 128;
    // Raw FP4 weight row r of a stage at r * 64, its 16-byte chunk c at ((c ^ ((r / 2) % 4)) * 16): 8 rows
    // fill the 32 banks once for the copies (lanes 4r..4r+3 copy row r), and a warp's one-row-per-thread
    // reads of chunk j hit 8 distinct 16-byte bank groups per quarter warp.
    static constexpr int kWPitch = 64;
    // A stage: token tile (128 rows x 128 bytes, swizzled), converted weight tile (128 x 128, swizzled), raw
    // weight rows (128 x 64).
    static constexpr int kXOff = 0;
    static constexpr int kCOff = kMaxTokens * 128;
    static constexpr int kROff = kCOff + BN * 128;
    static constexpr int kStageBytes = kROff + BN * kWPitch;  // 40 KB: a multiple of 1024 (the swizzle atom)
    // Per stage, outside the stages: the tokens' act_quant scales and the rows' promotion scales (f32).
    static constexpr int kSmallOff = kStages * kStageBytes;
    static constexpr int kSmallBytes = kMaxTokens * 4 + BN * 4;
    // Per producer warpgroup, a ring of kRing scale groups (a group: gs = 4 K tiles, or 2 when the K tiles
    // are not a multiple of 4): the weight rows' ue8m0 scales (gs x 4 bytes per row) and the tokens' scales
    // (gs floats per row), copied 8 or 16 bytes per row once per group instead of 4 bytes every K tile.
    static constexpr int kRing = kProducers == 1 && kStages >= 5 ? 4 : 2;
    static constexpr int kRingOff = kSmallOff + kStages * kSmallBytes;
    static constexpr int kRingSlotBytes = BN * 16 + kMaxTokens * 16;  // weights' scales, then tokens'
    static constexpr int kBarOff = kRingOff + kProducers * kRing * kRingSlotBytes;  // full[kStages], empty[kStages]
    static constexpr int kTableOff = kBarOff + 2 * kStages * 8;
    static constexpr int kSmemBytes = kTableOff + 128 + 1024;  // + alignment slack
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
    // K tiles copied ahead of the one being converted (a multiple of kProducers: a producer's own tiles).
    static constexpr int kAhead = kProducers == 1 ? kStages - 2 : 2;
    static constexpr int kOwnAhead = kAhead / kProducers;  // cp.async groups in flight behind tile kt's
    static_assert(kStages >= kAhead + kProducers, "the producers convert while the consumers use the tile before");
    // Registers per thread (setmaxnreg, two producer warpgroups only: 512 threads enter with 128).
    static constexpr int kProducerRegs = 96, kConsumerRegs = 160;
    static_assert(kProducers == 1 || 256 * (kProducerRegs + kConsumerRegs) <= 65536, "register file");
    static constexpr uint32_t kConsumerWarps = 8;
};

// The consumers' part for NT token columns: MMAs, promotion, and the yᵀ stores.
template <int kStages, int kProducers, int NT, int kOpt = 0>
__device__ __forceinline__ void consume(const TcArgs& p, uint8_t* smem, int64_t row_begin, int64_t row_end, int64_t n0, uint32_t g0) {
    using C = WsConfig<kStages, kProducers>;
    const int tid = threadIdx.x, cw = tid / 128 - kProducers, lane = tid % 32, wi = (tid % 128) / 32;
    const int g = lane / 4, t4 = lane % 4;
    const int lr0 = cw * 64 + wi * 16 + g;  // this thread's weight rows lr0 and lr0 + 8 (of the block's 128)
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOff);
    uint64_t* empty = full + kStages;
    const int64_t KT = p.k_tiles;

    float acc[NT / 2], part[NT / 2];
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) acc[j] = part[j] = 0.0f;
    // The stages' operand descriptors: stage 0's plus the stage's offset (in 16-byte units; shared-memory
    // addresses stay below 2^18, so the sum never carries out of the descriptor's address field).
    const uint64_t da0 = wg::smem_desc(smem + C::kCOff + cw * 64 * 128), db0 = wg::smem_desc(smem + C::kXOff);
    for (uint32_t kt = 0; kt < static_cast<uint32_t>(KT); ++kt) {
        const uint32_t g = g0 + kt;  // the block's K tile count: its stage and phase
        const int st = static_cast<int>(g % kStages);
        mbar_wait(full + st, (g / kStages) & 1u);
        const uint8_t* s = smem + st * C::kStageBytes;
        const uint64_t so = static_cast<uint64_t>(st * (C::kStageBytes >> 4));
        if constexpr ((kOpt & kOptPingPong) != 0) consumer_turn_wait(cw);
        wg::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) wgmma_ss_step<NT>(part, da0 + so + 2 * ks, db0 + so + 2 * ks, ks > 0 ? 1 : 0);
        wg::wgmma_commit();
        if constexpr ((kOpt & kOptPingPong) != 0) consumer_turn_pass(cw);
        wg::wgmma_wait();
        const float* sx = reinterpret_cast<const float*>(smem + C::kSmallOff + st * C::kSmallBytes);
        const float* swr = sx + C::kMaxTokens;
        const float sw0 = swr[lr0], sw1 = swr[lr0 + 8];
        promote_tile_x4<NT>(acc, part, sx, t4, sw0, sw1);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + st);
    }

    // yᵀ tile: token column c of this thread's weight rows n and n + 8.
    const int64_t n = n0 + lr0;
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int64_t gr = row_begin + j * 8 + t4 * 2 + e;
            if (gr >= row_end) continue;
            float* yrow = p.y + (p.y_row ? int64_t(p.y_row[gr]) : gr) * p.y_ld;
            yrow[n] = dev::maybe_bf16(acc[4 * j + e], p.round_bf16);
            yrow[n + 8] = dev::maybe_bf16(acc[4 * j + 2 + e], p.round_bf16);
        }
}

// The producers' part (warpgroups 0 .. kProducers - 1; producer pw takes K tiles pw, pw + kProducers, ...).
// kSelf: each thread converts the raw 16-byte chunks it copied itself (chunk pt % 4 of the rows pt / 4 +
// 32q: 32 codes of one scale subblock each) instead of one whole row copied by four other threads, so
// no barrier among the warpgroup's 128 threads before converting (a thread waits for its own copies
// only); the scale groups its warp's rows need are copied by lanes of the same warp (a warp barrier).
template <int kStages, int kProducers, int kPf, int kLate, bool kSelf = false, int kOpt = 0>
__device__ __forceinline__ void produce(const TcArgs& p, uint8_t* smem, const DeviceLinear* wp, int64_t row_begin, int rows, int nt,
                                        int64_t n0, uint32_t g0) {
    using C = WsConfig<kStages, kProducers>;
    constexpr int BN = C::BN;
    const int tid = threadIdx.x;
    const int64_t K = p.K, KT = p.k_tiles;
    const uint8_t* table = smem + C::kTableOff;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOff);
    uint64_t* empty = full + kStages;
    const int pw = tid / 128, pt = tid % 128;
    constexpr int P = kProducers;
    const uint8_t* wbytes = static_cast<const uint8_t*>(wp->weight);
    const uint8_t* wscales = static_cast<const uint8_t*>(wp->scale);
    auto a_row_of = [&](int64_t r) -> int64_t { return p.a_row_src ? p.a_row_src[r] : r; };
    // A converted stage's signal: every thread arrives, or (kOptElect) lane 0 of each warp once the warp's
    // lanes are past their fences (the warp barrier orders them before its release).
    auto signal_full = [&](uint64_t* bar) {
        if constexpr ((kOpt & kOptElect) != 0) {
            __syncwarp();
            if (tid % 32 == 0) mbar_arrive(bar);
        } else {
            mbar_arrive(bar);
        }
    };
    // Each thread's copies are the same rows and chunks in every K tile: base addresses plus the K tile's
    // offset, in few registers (with two producer warpgroups a producer thread has C::kProducerRegs).
    // Token chunks: chunk c = pt % 8 of rows pt / 8 + 16q, rows < nt copied (a row past the tile's end
    // zero-fills: the MMAs read nt rows); x_row[q]: the source row (0 when zero-filled).
    constexpr int kXChunks = C::kMaxTokens * 8 / 128;
    uint32_t x_row[kXChunks];
#pragma unroll
    for (int q = 0; q < kXChunks; ++q) {
        const int r = pt / 8 + 16 * q;
        x_row[q] = r < rows ? static_cast<uint32_t>(a_row_of(row_begin + r)) : 0u;
    }
    const int xr0 = pt / 8;
    const int x_copy = (nt - xr0 + 15) / 16, x_ok = (rows - xr0 + 15) / 16;  // q < x_copy copies, q < x_ok non-zero
    const uint32_t x_dst = C::kXOff + xr0 * 128 + (((pt % 8) ^ (xr0 % 8)) << 4);  // + q * 2048 (16 rows)
    const uint8_t* x_base = p.a + (pt % 8) * 16;
    const uint32_t x_stride = static_cast<uint32_t>(p.a_row_bytes);
    // Raw weight chunks: chunk pt % 4 of rows pt / 4 + 32q.
    constexpr int kWChunks = BN * 4 / 128;
    const uint8_t* w_base = wbytes + (n0 + pt / 4) * (K / 2) + (pt % 4) * 16;
    const int64_t w_qstride = 32 * (K / 2);
    // kSelf: a thread reads back only its own chunks (8 lanes = two whole rows: no swizzle needed).
    const uint32_t w_dst = C::kROff + (pt / 4) * C::kWPitch + ((kSelf ? pt % 4 : (pt % 4) ^ ((pt / 8) % 4)) << 4);  // + q * 32 * kWPitch
    // The weight row whose scale group this thread copies: row pt, or (kSelf) one of the rows its warp
    // converts (warp w: rows 8w + i + 32q, i < 8, q < 4; lane l copies i = l % 8, q = l / 8).
    const int ws_row = kSelf ? 8 * (pt / 32) + pt % 8 + 32 * ((pt % 32) / 8) : pt;
    const uint8_t* ws_base = wscales + (n0 + ws_row) * (K / 32);
    const float* xs_base = pt < rows ? p.a_scale + a_row_of(row_begin + pt) * KT : p.a_scale;  // token row pt's
    const int xs_len = pt < rows ? 1 : (pt < nt ? 0 : -1);  // copy, zero-fill, none
    const int gshift = KT % 4 == 0 ? 2 : 1, gmask = (1 << gshift) - 1;  // 4 or 2 K tiles per scale group (KT is even)
    const uint32_t ring = C::kRingOff + pw * C::kRing * C::kRingSlotBytes;
    auto ring_slot = [&](int64_t kt) {
        return smem + ring + (((g0 + static_cast<uint32_t>(kt)) >> gshift) & (C::kRing - 1)) * C::kRingSlotBytes;
    };
    auto load_stage = [&](int st, int64_t kt) {
        uint8_t* s = smem + st * C::kStageBytes;
        const uint8_t* xb = x_base + kt * 128;
#pragma unroll
        for (int q = 0; q < kXChunks; ++q)
            if (q < x_copy) tc::cp_async16(s + x_dst + q * 2048, row_address(xb, x_row[q], x_stride), q < x_ok ? 16 : 0);
        const uint8_t* wb = w_base + kt * 64;
#pragma unroll
        for (int q = 0; q < kWChunks; ++q) tc::cp_async16(s + w_dst + q * 32 * C::kWPitch, wb + q * w_qstride, 16);
        if ((static_cast<int>(kt) & gmask) == pw) {
            // This producer's first K tile of a scale group: the group's scales (from its first K tile kg) of
            // weight row pt and token row pt.
            uint8_t* slot = ring_slot(kt);
            const int64_t kg = kt - pw;
            const uint8_t* wsrc = ws_base + kg * 4;
            const float* xsrc = xs_base + (xs_len > 0 ? kg : 0);
            const int gbytes = 4 << gshift;
            if (((reinterpret_cast<uintptr_t>(wsrc) | reinterpret_cast<uintptr_t>(xsrc)) & (gbytes - 1)) == 0) {
                if (gshift == 2) {
                    tc::cp_async16(slot + ws_row * 16, wsrc, 16);
                    if (xs_len >= 0) tc::cp_async16(slot + BN * 16 + pt * 16, xsrc, 16 * xs_len);
                } else {
                    cp_async8(slot + ws_row * 16, wsrc, 8);
                    if (xs_len >= 0) cp_async8(slot + BN * 16 + pt * 16, xsrc, 8 * xs_len);
                }
            } else {
                // Scales not aligned to the group's bytes (a weight or activation-scale buffer at an odd
                // offset): 4 bytes per K tile, as the plain layout does.
                for (int i = 0; i < (1 << gshift); ++i) {
                    tc::cp_async4(slot + ws_row * 16 + i * 4, wsrc + i * 4, 4);
                    if (xs_len >= 0) tc::cp_async4(slot + BN * 16 + pt * 16 + i * 4, xsrc + (xs_len > 0 ? i : 0), 4 * xs_len);
                }
            }
        }
        if constexpr (kPf > 0) {
            // Weight row pt's bytes kPf K tiles ahead into L2 (the copies then wait on L2, not DRAM).
            if (kt + kPf < KT) prefetch_l2(wbytes + (n0 + pt) * (K / 2) + (kt + kPf) * 64);
        }
    };

    // K tile kt into its stage (the block's K tile count g0 + kt), once the consumers released the stage's
    // previous tile (of this or an earlier tile of the block).
    auto load = [&](int64_t kt) {
        const uint32_t g = g0 + static_cast<uint32_t>(kt);
        const int st = static_cast<int>(g % kStages);
        if (g >= static_cast<uint32_t>(kStages)) mbar_wait(empty + st, ((g / kStages) & 1u) ^ 1u);
        load_stage(st, kt);
    };
    // kLate = 0: a producer's own K tile kt + kAhead is copied before it converts kt (kOwnAhead own tiles
    // in flight behind kt's); kLate = A > 0: after it converted kt and released the stage to the consumers
    // (A own tiles ahead; a wait for a free stage then never delays a converted tile).
    constexpr int kOwn = kLate > 0 ? kLate : C::kOwnAhead;
    constexpr int kAh = kOwn * P;
    static_assert(kLate == 0 || kAh <= kStages - 1, "the stage a late copy waits for is two tiles behind");
    // A scale group's ring slot is copied again kRing groups later: by then this producer converted the
    // group's last own K tile (groups of at least 2 K tiles).
    static_assert(kLate == 0 ? kAh < 2 * (C::kRing - 1) + P : kAh <= 2 * (C::kRing - 1) + P, "scale ring too short");
#pragma unroll
    for (int a = 0; a < kOwn; ++a) {
        const int64_t kt = pw + int64_t(a) * P;
        if (kt < KT) load(kt);
        tc::cp_async_commit();
    }
    for (int64_t kt = pw; kt < KT; kt += P) {
        // kSelf: the warp's reads of a scale group's ring slot (converting earlier K tiles) before any lane
        // copies a later group into it.
        if constexpr (kSelf) __syncwarp();
        if constexpr (kLate == 0) {
            if (kt + kAh < KT) load(kt + kAh);
            tc::cp_async_commit();
            tc::cp_async_wait<kOwn>();  // K tile kt (this thread's copies)
        } else {
            tc::cp_async_wait<kOwn - 1>();
        }
        if constexpr (kSelf) __syncwarp();  // the scale groups copied by other lanes of the warp
        else producer_sync(pw);             // everyone's in this warpgroup
        const int st = static_cast<int>((g0 + static_cast<uint32_t>(kt)) % kStages);
        uint8_t* s = smem + st * C::kStageBytes;
        const uint8_t* slot = ring_slot(kt);
        const int ki = static_cast<int>(kt) & gmask;
        float* small = reinterpret_cast<float*>(smem + C::kSmallOff + st * C::kSmallBytes);
        small[token_scale_slot(pt)] = reinterpret_cast<const float*>(slot + BN * 16 + pt * 16)[ki];  // token row pt's scale (pt < nt read)
        if constexpr (kSelf) {
            // Chunk c = pt % 4 (subblock c: 32 codes -> 32 e4m3 bytes) of the rows pt / 4 + 32q; lane c = 0
            // writes the row's promotion scale.
            const int c = pt % 4;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int r = pt / 4 + 32 * q;
                const uint32_t sc = reinterpret_cast<const uint32_t*>(slot + r * 16)[ki];
                const uint32_t emax = tc::fp4_block_emax(sc);
                if (c == 0) small[C::kMaxTokens + r] = dev::e8m0_pow2(emax);
                const uint32_t d = tc::fp4_subblock_shift(emax, sc, c);
                const uint2 tv = *reinterpret_cast<const uint2*>(table + d * 8);
                const uint4 packed = *reinterpret_cast<const uint4*>(s + w_dst + q * 32 * C::kWPitch);
                uint4 o0, o1;
                tc::fp4x8_to_e4m3_fast(packed.x, tv.x, tv.y, o0.x, o0.y);
                tc::fp4x8_to_e4m3_fast(packed.y, tv.x, tv.y, o0.z, o0.w);
                tc::fp4x8_to_e4m3_fast(packed.z, tv.x, tv.y, o1.x, o1.y);
                tc::fp4x8_to_e4m3_fast(packed.w, tv.x, tv.y, o1.z, o1.w);
                *reinterpret_cast<uint4*>(s + C::kCOff + wg::tile_offset(r, 2 * c)) = o0;
                *reinterpret_cast<uint4*>(s + C::kCOff + wg::tile_offset(r, 2 * c + 1)) = o1;
            }
            wg::fence_proxy_async();  // this thread's copies and conversions, visible to the tensor cores
            signal_full(full + st);
            if constexpr (kLate > 0) {
                if (kt + kAh < KT) load(kt + kAh);
                tc::cp_async_commit();
            }
            continue;
        }
        // Weight row pt of the tile: 4 subblocks of 32 codes -> 128 e4m3 bytes, and its promotion scale.
        const uint32_t sc = reinterpret_cast<const uint32_t*>(slot + pt * 16)[ki];
        const uint32_t emax = tc::fp4_block_emax(sc);
        small[C::kMaxTokens + pt] = dev::e8m0_pow2(emax);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t d = tc::fp4_subblock_shift(emax, sc, j);
            const uint2 tv = *reinterpret_cast<const uint2*>(table + d * 8);
            const uint4 packed = *reinterpret_cast<const uint4*>(s + C::kROff + pt * C::kWPitch + ((j ^ ((pt / 2) % 4)) << 4));
            uint4 o0, o1;
            tc::fp4x8_to_e4m3_fast(packed.x, tv.x, tv.y, o0.x, o0.y);
            tc::fp4x8_to_e4m3_fast(packed.y, tv.x, tv.y, o0.z, o0.w);
            tc::fp4x8_to_e4m3_fast(packed.z, tv.x, tv.y, o1.x, o1.y);
            tc::fp4x8_to_e4m3_fast(packed.w, tv.x, tv.y, o1.z, o1.w);
            *reinterpret_cast<uint4*>(s + C::kCOff + wg::tile_offset(pt, 2 * j)) = o0;
            *reinterpret_cast<uint4*>(s + C::kCOff + wg::tile_offset(pt, 2 * j + 1)) = o1;
        }
        wg::fence_proxy_async();  // this thread's copies and conversions, visible to the tensor cores
        signal_full(full + st);
        if constexpr (kLate > 0) {
            if (kt + kAh < KT) load(kt + kAh);
            tc::cp_async_commit();
        }
    }
    tc::cp_async_wait<0>();
}

// Token tile t of the launch (up to 128 rows of one expert, or of the plain GEMM): its rows and weight;
// false past the last tile.
struct WsTile {
    int64_t row_begin, row_end;
    const DeviceLinear* wp;
};
template <int kMaxTokens>
__device__ __forceinline__ bool ws_tile(const TcArgs& p, int64_t t, WsTile& tile) {
    tile.wp = &p.weight;
    if (p.expert_offsets) {
        if (t >= p.tile_offsets[p.num_experts]) return false;
        const int e = expert_of_tile(p.tile_offsets, p.num_experts, static_cast<int>(t));
        tile.row_begin = p.expert_offsets[e] + (t - p.tile_offsets[e]) * kMaxTokens;
        tile.row_end = p.expert_offsets[e + 1];
        tile.wp = p.experts + e;
    } else {
        tile.row_begin = t * kMaxTokens;
        if (tile.row_begin >= p.rows) return false;
        tile.row_end = p.rows;
    }
    tile.row_end = min(tile.row_end, tile.row_begin + kMaxTokens);
    return true;
}

// One block per (weight-row block, token tile) (kPersistent = false: blockIdx.x, blockIdx.y), or one
// block per SM looping over them (kPersistent: tile i = blockIdx.x + j·gridDim.x, weight-row blocks
// fastest), its stage ring running on across tiles: the producers load a tile's first K tiles while the
// consumers finish the previous one and store it (no block start, prologue or pipeline fill per tile).
// Either way a tile's arithmetic is the same.
template <int kStages, int kProducers, bool kPersistent, int kPf = 0, int kLate = 0, bool kSelf = false, int kOpt = 0>
static __global__ void __launch_bounds__(WsConfig<kStages, kProducers>::kThreads, 1) fp4_ws_kernel(const __grid_constant__ TcArgs p) {
#ifdef DI_WGMMA_ENABLED
    using C = WsConfig<kStages, kProducers>;
    constexpr int BN = C::BN;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);  // the swizzle atom
    uint8_t* table = smem + C::kTableOff;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOff);
    uint64_t* empty = full + kStages;
    const int tid = threadIdx.x;
    const int64_t nb = p.N / BN;  // weight-row blocks

    WsTile tile;
    int64_t i = kPersistent ? int64_t(blockIdx.x) : int64_t(blockIdx.y) * nb + blockIdx.x;
    if (!ws_tile<C::kMaxTokens>(p, i / nb, tile)) return;

    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(full + s, (kOpt & kOptElect) != 0 ? 4 : 128);  // a producer warpgroup's threads (or warps), once per K tile
            mbar_init(empty + s, C::kConsumerWarps);    // one lane per consumer warp
        }
    }
    tc::build_fp4_table(table, tid);
    __syncthreads();

    // Each role loops over the block's tiles in its own branch (setmaxnreg needs one branch per role).
    auto next_tile = [&]() -> bool {
        if constexpr (!kPersistent) return false;
        i += gridDim.x;
        return ws_tile<C::kMaxTokens>(p, i / nb, tile);
    };
    if (tid >= 128 * kProducers) {
        if constexpr (kProducers > 1) wg::setmaxnreg_inc<C::kConsumerRegs>();
        // kOptPingPong: consumer warpgroup 0 issues first (warpgroup 1's initial turn pass); at the end
        // warpgroup 0 takes warpgroup 1's last pass, so both named barriers end complete.
        const int cw = tid / 128 - kProducers;
        if constexpr ((kOpt & kOptPingPong) != 0) {
            if (cw == 1) consumer_turn_pass(cw);
        }
        for (uint32_t g0 = 0;; g0 += static_cast<uint32_t>(p.k_tiles)) {
            const int nt = static_cast<int>((tile.row_end - tile.row_begin + 31) / 32 * 32);  // the wgmma N of this tile
            const int64_t n0 = (i % nb) * BN;
            switch (nt) {
                case 32: consume<kStages, kProducers, 32, kOpt>(p, smem, tile.row_begin, tile.row_end, n0, g0); break;
                case 64: consume<kStages, kProducers, 64, kOpt>(p, smem, tile.row_begin, tile.row_end, n0, g0); break;
                case 96: consume<kStages, kProducers, 96, kOpt>(p, smem, tile.row_begin, tile.row_end, n0, g0); break;
                default: consume<kStages, kProducers, 128, kOpt>(p, smem, tile.row_begin, tile.row_end, n0, g0); break;
            }
            if (!next_tile()) break;
        }
        if constexpr ((kOpt & kOptPingPong) != 0) {
            if (cw == 0) consumer_turn_wait(cw);
        }
    } else {
        if constexpr (kProducers > 1) wg::setmaxnreg_dec<C::kProducerRegs>();
        for (uint32_t g0 = 0;; g0 += static_cast<uint32_t>(p.k_tiles)) {
            const int rows = static_cast<int>(tile.row_end - tile.row_begin);  // 1..128
            produce<kStages, kProducers, kPf, kLate, kSelf, kOpt>(p, smem, tile.wp, tile.row_begin, rows, (rows + 31) / 32 * 32, (i % nb) * BN, g0);
            if (!next_tile()) break;
        }
    }
#else
    (void)p;
    __trap();  // the launcher selects this kernel only on sm_90 devices (built for sm_90a)
#endif
}

}  // namespace deepinfer::cuda::kernels::wgws
