// SPDX-License-Identifier: Apache-2.0
// Device code of FastLinearParams::fp8_as_bf16 on Hopper (sm_90a): FP8 e4m3 weights with 32x32 block
// scales multiplied as their bf16 values, weight-streaming, in the pattern of gemm_wgmma_fp4dec.cuh: the
// WEIGHT is wgmma's A operand from registers (64 weight rows per block of one warpgroup), each thread
// converting just the bytes of its own fragment; the tokens' bf16 rows are the B operand in shared memory
// (128-byte swizzle) with the wgmma width TN = 8 .. 128 from the launch's rows (token tiles of TN rows on
// grid y); the result tile is yᵀ. The conversion, with a power-of-two block scale 2^k: the e4m3 pair's
// magnitude bits placed as a bf16x2 word (value·2^-120, exact, subnormal codes too) times 2^(120 + k) (or
// 2^120, then 2^k) in one bf16 multiply: exact; other scales as the upload rounds them (f32 product ->
// bf16).
// The bf16 form's arithmetic: its K tiles (64 columns, four k16 MMAs each, ascending K) and its split-K
// chunks (TcArgs::k_chunks of the bf16 shape, each summed from zero in the MMA accumulator, the chunk sums
// added in chunk order; with TcArgs::partial block z computes chunk z into the partials that
// wg::split_reduce_kernel adds), so that a row's bits equal those of the same weight uploaded as bf16
// (the tensor cores give an element the same bits with the operands swapped: tests/ops/
// gemm_fp8b32_cuda_test.cpp checks every width against the bf16 upload on an H200).
#pragma once

#include "backends/cuda/kernels/gemm_wgmma.cuh"
#include "backends/cuda/kernels/wgmma_rs.cuh"

namespace deepinfer::cuda::kernels::wgfb {

using tc::TcArgs;

// Two e4m3 weights (the low byte first in K) times their scale as one bf16x2 word: the f32 product rounded to
// bf16, as the upload's dequantization (exact for power-of-two scales).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint16_t pair, float scale) {
#ifdef DI_WGMMA_ENABLED
    uint32_t f16x2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(f16x2) : "h"(pair));
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&f16x2));
#else
    const float2 f = make_float2(dev::e4m3_value(static_cast<uint8_t>(pair)), dev::e4m3_value(static_cast<uint8_t>(pair >> 8)));
#endif
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
    return *reinterpret_cast<const uint32_t*>(&b);
}

// Shared-memory plan of one stage: kKT K tiles of the tokens (TN rows x 128 bytes each, the 128-byte
// swizzle, so each tile's base is 1024-byte aligned), then the raw e4m3 of the block's 64 weight rows
// for those K tiles at a pitch of kKT·64 + 16 bytes (the 16 keep the fragment reads conflict-free).
// Two e4m3 codes (the low byte first in K) as the bf16x2 bits of their values times 2^-120, exact: the
// code's 7 magnitude bits become the bf16's exponent (low 4 bits) and top mantissa bits, so a normal code
// reads as 2^(e - 127)·1.m and a subnormal one as the bf16 subnormal 2^-126·0.m (e4m3: 2^(e - 7)·1.m and
// 2^-6·0.m). A bf16 multiply by 2^(120 + k) then gives value · 2^k exactly (byte 1 and 3 of the permute: the
// codes' signs replicated, of which bit 15 / 31 stay).
__device__ __forceinline__ uint32_t e4m3x2_bf16x2_biased(uint32_t pair) {
    uint32_t r;
    asm("prmt.b32 %0, %1, 0, 0x9180;\n" : "=r"(r) : "r"(pair));
    return (r << 4) & 0x87F087F0u;
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
}
// A block scale's multipliers for e4m3x2_bf16x2_biased: {2^(120 + k), 1} as bf16x2 when 2^k is a power of
// two with 120 + k a bf16 normal exponent; {2^120, 2^k} for other powers of two that bf16 holds; zero
// (not a power of two: the f32 conversion instead).
__device__ __forceinline__ uint2 pow2_multipliers(float scale) {
    const uint32_t b = __float_as_uint(scale), e = (b >> 23) & 0xFFu;
    if ((b & 0x807FFFFFu) != 0 || e == 0 || e == 255) return make_uint2(0, 0);
    const int k = int(e) - 127;
    auto pack = [](uint32_t bits) { return bits | (bits << 16); };
    if (k + 247 >= 1 && k + 247 <= 254) return make_uint2(pack(uint32_t(k + 247) << 7), pack(0x3F80u));
    if (k + 127 >= 1 && k + 127 <= 254) return make_uint2(pack(247u << 7), pack(uint32_t(k + 127) << 7));
    return make_uint2(0, 0);
}

constexpr int kMaxKTiles = 256;  // bf16 K tiles of 64: K <= 16384 (fp8_as_bf16_supported)

template <int TN, int kKT_, int kStages_>
struct DecConfig {
    static constexpr int kThreads = 128;
    static constexpr int kKT = kKT_, kStages = kStages_;
    static constexpr int kBBytes = kKT * TN * 128;
    static constexpr int kWPitch = kKT * 64 + 16;
    static constexpr int kStageBytes = (kBBytes + 64 * kWPitch + 1023) / 1024 * 1024;
    static constexpr int kMaxKTiles = wgfb::kMaxKTiles;
    // Then, per [k-block (2 per K tile)][2 weight-row blocks]: the f32 scale and its two bf16x2 multipliers,
    // 12 bytes (sized by the launch's K).
    static constexpr int smem_bytes(int64_t K) { return kStages * kStageBytes + int(K / 32) * 2 * 12 + 1024; }
    static_assert(kKT == 1 || kKT == 2, "K tiles per stage: 1 or 2");
    static_assert(kStages >= 3, "the pipeline refills the stage two back");
};

// 16-byte copy of raw weight bytes asking the L2 to fetch the whole 256-byte pair of lines (the next
// stages' bytes of the same row).
__device__ __forceinline__ void cp_async_w16_pf256(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(tc::smem_addr(dst)), "l"(src));
}

// grid (N / 64 weight-row blocks, token tiles of TN rows, the split's chunks or 1), 128 threads.
// Each block streams its 64 weight rows over its K range in stages of kKT K tiles (kStages - 1 in flight);
// K tile kt's MMAs run while the thread converts K tile kt + 1's fragments (two fragment sets in turn).
// Every copy's source and destination are computed once and advance by a constant per stage.
template <int TN, int kKT, int kStages, bool kChunks>
static __global__ void __launch_bounds__(128) fp8bf16_dec_kernel(const __grid_constant__ TcArgs p) {
    using C = DecConfig<TN, kKT, kStages>;
    constexpr int kStageBytes = C::kStageBytes, kW = C::kBBytes, kWPitch = C::kWPitch;
    // Two K tiles per stage: each K tile's MMAs are waited for in the next one (a stage's slot is refilled
    // two stages later, after both). One per stage: each K tile waits for its own.
    constexpr bool kDeferred = kKT == 2;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);
    float* wscale = reinterpret_cast<float*>(smem + kStages * kStageBytes);
    const int tid = threadIdx.x, lane = tid % 32, wi = tid / 32, g = lane / 4, t4 = lane % 4;
    const DeviceLinear& w = p.weight;
    const int64_t N = p.N, K = p.K, KB = K / 32;
    const int64_t n0 = int64_t(blockIdx.x) * 64, row0 = int64_t(blockIdx.y) * TN;
    const int64_t rows = p.rows - row0 < TN ? p.rows - row0 : TN;  // this block's token rows
    const int KTi = static_cast<int>(p.k_tiles), S = kChunks ? max(p.k_chunks, 1) : 1;
    const bool split = kChunks && p.partial != nullptr;
    const int kt0 = split ? KTi * static_cast<int>(blockIdx.z) / S : 0;
    const int kt1 = split ? KTi * static_cast<int>(blockIdx.z + 1) / S : KTi;
    const int stages_total = (kt1 - kt0 + kKT - 1) / kKT;
    int chunk = 0, chunk_start = kt0, chunk_end = split ? kt1 : KTi / S;

    // Weight copies: 64 rows x 4·kKT chunks of 16 bytes per stage (a K tile past kt1: not copied, never read).
    constexpr int kWRowChunks = 4 * kKT, kWChunks = 64 * kWRowChunks / 128;
    const uint8_t* w_src[kWChunks];
    int w_dst[kWChunks], w_kl[kWChunks];
#pragma unroll
    for (int q = 0; q < kWChunks; ++q) {
        const int i = tid + q * 128, r = i / kWRowChunks, c = i % kWRowChunks;
        const int64_t n = n0 + r < N ? n0 + r : N - 1;  // (rows past N: a real row's bytes, never stored)
        w_src[q] = static_cast<const uint8_t*>(w.weight) + n * K + int64_t(kt0) * 64 + c * 16;
        w_dst[q] = kW + r * kWPitch + c * 16;
        w_kl[q] = c / 4;
    }
    // Token copies: kKT K tiles x TN rows x 8 chunks per stage; rows past the block's zero-filled.
    constexpr int kAChunksAll = kKT * TN * 8, kAChunks = (kAChunksAll + 127) / 128;
    const uint8_t* a_src[kAChunks];
    int a_dst[kAChunks], a_len[kAChunks], a_kl[kAChunks];
#pragma unroll
    for (int q = 0; q < kAChunks; ++q) {
        const int i = tid + q * 128, kl = i / (TN * 8), r = (i / 8) % TN, c = i % 8;
        const bool ok = i < kAChunksAll && r < rows;
        const int64_t src = ok ? (p.a_row_src ? p.a_row_src[row0 + r] : row0 + r) : 0;
        a_src[q] = ok ? p.a + src * p.a_row_bytes + int64_t(kt0 + kl) * 128 + c * 16 : p.a;
        a_dst[q] = kl * TN * 128 + wg::tile_offset(r, c);
        a_len[q] = i < kAChunksAll ? (ok ? 16 : 0) : -1;
        a_kl[q] = kl;
    }
    // Stage s: K tiles kt0 + kKT·s + kl (kl < kKT); the weight bytes may stream before the previous kernel
    // ends (read-only), the tokens after pdl_enter.
    auto load_w = [&](int slot, int s) {
        uint8_t* st = smem + slot * kStageBytes;
        const int left = kt1 - kt0 - kKT * s;  // K tiles of the stage that exist: min(kKT, left)
#pragma unroll
        for (int q = 0; q < kWChunks; ++q) {
            if (w_kl[q] < left) cp_async_w16_pf256(st + w_dst[q], w_src[q]);
            w_src[q] += 64 * kKT;
        }
    };
    auto load_a = [&](int slot, int s) {
        uint8_t* st = smem + slot * kStageBytes;
        const int left = kt1 - kt0 - kKT * s;
#pragma unroll
        for (int q = 0; q < kAChunks; ++q) {
            if (a_len[q] >= 0 && a_kl[q] < left) tc::cp_async16(st + a_dst[q], a_src[q], a_len[q]);
            a_src[q] += 128 * kKT;
        }
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s)
        if (s < stages_total) load_w(s, s);
    // [k-block][row block] (blocks past the weight's end: 1, never stored): the f32 scale and its multipliers.
    uint2* wmul = reinterpret_cast<uint2*>(wscale + 2 * KB);  // (8-byte aligned: KB even)
    int two_step = 0, not_pow2 = 0;
    for (int i = tid; i < 2 * KB; i += 128) {
        const int64_t kb = i / 2, nb = n0 / 32 + i % 2;
        const float sc = nb < (N + 31) / 32 ? dev::weight_scale(w, nb * KB + kb) : 1.0f;
        const uint2 m = pow2_multipliers(sc);
        wscale[i] = sc;
        wmul[i] = m;
        not_pow2 |= m.x == 0;
        two_step |= m.y != 0x3F803F80u;
    }
    // 0: one bf16 multiply per pair; 1: two; 2: some scale is no power of two (f32 arithmetic, as the upload's)
    const int mul_mode = __syncthreads_or(not_pow2) ? 2 : __syncthreads_or(two_step) ? 1 : 0;
    pdl_enter();
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < stages_total) load_a(s, s);
        tc::cp_async_commit();
    }

    const int ra = wi * 16 + g;  // this thread's weight rows ra and ra + 8 of the block (A fragment)
    // The A fragments of K tile kt (tile ktl of the stage in `slot`), four k16 steps: rows ra, ra + 8; K
    // columns 16s + 2·t4 (+1) and 16s + 8 + 2·t4 (+1), with the scale of (row block, k-block 2·kt + s/2).
    auto convert = [&](int slot, int ktl, int kt, uint32_t (&frag)[4][4]) {
        const uint8_t* sa = smem + slot * kStageBytes + kW + ra * kWPitch + ktl * 64 + 2 * t4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int i0 = (2 * kt + h) * 2 + ra / 32, i1 = (2 * kt + h) * 2 + (ra + 8) / 32;
            uint32_t raw[2][4];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const uint8_t* r0 = sa + (2 * h + e) * 16;
                const uint8_t* r1 = r0 + 8 * kWPitch;
                raw[e][0] = *reinterpret_cast<const uint16_t*>(r0);
                raw[e][1] = *reinterpret_cast<const uint16_t*>(r1);
                raw[e][2] = *reinterpret_cast<const uint16_t*>(r0 + 8);
                raw[e][3] = *reinterpret_cast<const uint16_t*>(r1 + 8);
            }
            if (mul_mode == 2) {
                const float sc0 = wscale[i0], sc1 = wscale[i1];
#pragma unroll
                for (int e = 0; e < 2; ++e)
#pragma unroll
                    for (int j = 0; j < 4; ++j) frag[2 * h + e][j] = e4m3x2_to_bf16x2(uint16_t(raw[e][j]), j % 2 ? sc1 : sc0);
            } else {
                const uint2 m0 = wmul[i0], m1 = wmul[i1];
#pragma unroll
                for (int e = 0; e < 2; ++e)
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const uint2 m = j % 2 ? m1 : m0;
                        uint32_t v = bf16x2_mul(e4m3x2_bf16x2_biased(raw[e][j]), m.x);
                        if (mul_mode == 1) v = bf16x2_mul(v, m.y);
                        frag[2 * h + e][j] = v;
                    }
            }
        }
    };

    float acc[TN / 2];
#pragma unroll
    for (int j = 0; j < TN / 2; ++j) acc[j] = 0.0f;
    [[maybe_unused]] float total[kChunks ? TN / 2 : 1];
    uint32_t a0[4][4], a1[4][4];
    tc::cp_async_wait<kStages - 2>();
    __syncthreads();
    if (kt0 < kt1) convert(0, 0, kt0, a0);

    // K tile kt (tile ktl of stage s_idx, in `slot`): its MMAs (A = acur), then K tile kt + 1's conversion
    // while they run. When kt + 1 opens a stage, that stage must have landed: wait for this thread's copies,
    // barrier (then everyone's have, and every thread is done with the stage two back: its MMAs completed,
    // its weights converted), and refill that slot with the stage kStages - 2 ahead of kt + 1's.
    int slot = 0, s_idx = 0;
    auto k_tile = [&](auto ktl_c, int kt, uint32_t (&acur)[4][4], uint32_t (&anext)[4][4]) {
        constexpr int ktl = decltype(ktl_c)::value;
        constexpr bool kNewStage = ktl == kKT - 1;
        if constexpr (kChunks) {
            if (kt == chunk_end) {  // unsplit: the next chunk begins; fold the finished one in
                if constexpr (kDeferred) wg::wgmma_wait();  // (else the previous K tile waited for its MMAs)
#pragma unroll
                for (int j = 0; j < TN / 2; ++j) total[j] = chunk == 0 ? acc[j] : total[j] + acc[j];
                ++chunk;
                chunk_start = kt;
                chunk_end = KTi * (chunk + 1) / S;
            }
        }
        const int next_slot = kNewStage ? (slot + 1 == kStages ? 0 : slot + 1) : slot;
        if constexpr (kNewStage) {
            tc::cp_async_wait<kStages - 3>();
            wg::fence_proxy_async();
            __syncthreads();
            const int ahead = s_idx + kStages - 1;
            if (ahead < stages_total) {
                const int fill = next_slot >= 2 ? next_slot - 2 : next_slot + kStages - 2;
                load_w(fill, ahead);
                load_a(fill, ahead);
            }
            tc::cp_async_commit();
        }
        const uint8_t* sb = smem + slot * kStageBytes + ktl * TN * 128;
        wgrs::wgmma_fence_a(acur);
#pragma unroll
        for (int s = 0; s < 4; ++s)
            wgrs::wgmma_rs_step<TN, true>(acc, acur[s], wg::smem_desc(sb + s * 32), (kt > chunk_start || s > 0) ? 1 : 0);
        wg::wgmma_commit();
        if constexpr (kDeferred) {
            // anext was K tile kt - 1's A: its MMAs must be done; kt's stay in flight into the next K tile
            // (the same accumulators: in order), during the conversion. The stage refilled above (two back)
            // held K tiles <= kt - 2, waited for in K tile kt - 1.
            dev::wgmma_wait_pending<1>();
            if (kt + 1 < kt1) convert(next_slot, kNewStage ? 0 : ktl + 1, kt + 1, anext);
        } else {
            if (kt + 1 < kt1) convert(next_slot, kNewStage ? 0 : ktl + 1, kt + 1, anext);
            wg::wgmma_wait();
        }
        slot = next_slot;
        if constexpr (kNewStage) ++s_idx;
    };
    using Ktl0 = std::integral_constant<int, 0>;
    using Ktl1 = std::integral_constant<int, kKT - 1>;  // 0 (kKT = 1) or 1
    int kt = kt0;
    for (; kt + 1 < kt1; kt += 2) {
        k_tile(Ktl0{}, kt, a0, a1);
        k_tile(Ktl1{}, kt + 1, a1, a0);
    }
    if (kt < kt1) k_tile(Ktl0{}, kt, a0, a1);  // (an odd count: the last stage holds one K tile)
    if constexpr (kDeferred) wg::wgmma_wait();
    tc::cp_async_wait<0>();
    if constexpr (kChunks) {
        if (chunk > 0) {
#pragma unroll
            for (int j = 0; j < TN / 2; ++j) acc[j] = total[j] + acc[j];
        }
    }
    // yᵀ tile: this thread holds weight rows n0 + ra (+8) x token columns 8j + 2·t4 (+1).
#pragma unroll
    for (int j = 0; j < TN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t n = n0 + ra + (e >= 2 ? 8 : 0), c = j * 8 + 2 * t4 + (e & 1);
            if (n >= N || c >= rows) continue;
            const float v = acc[4 * j + e];
            if (split) {
                p.partial[(int64_t(blockIdx.z) * p.rows + row0 + c) * N + n] = v;
            } else {
                p.y[(p.y_row ? int64_t(p.y_row[row0 + c]) : row0 + c) * p.y_ld + n] = dev::maybe_bf16(v, p.round_bf16);
            }
        }
}

}  // namespace deepinfer::cuda::kernels::wgfb
