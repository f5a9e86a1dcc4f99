// SPDX-License-Identifier: Apache-2.0
// Device code of the fast GEMM on Hopper (sm_90a): wgmma.mma_async with both operands in shared
// memory. On sm_90, mma.sync with e4m3 operands runs on the f16 pipe (HMMA): only wgmma (QGMMA) gives
// the FP8 tensor-core rate.
// A block is one or two warpgroups (128 or 256 threads) over a tile of 64 or 128 rows x BN weight rows
// (BN = 64 or 128, chosen from the weight's shape only; one warpgroup for decode-sized row counts, two
// for prefill); warpgroup w owns rows 64w..64w+63 and issues m64nBNk32 e4m3
// (m64nBNk16 bf16) MMAs. Tiles live in shared memory in the K-major 128-byte-swizzle layout (one
// 128-byte K tile per row; measured 10-70% faster than the no-swizzle core-matrix layout).
// A cp.async pipeline of kStages K tiles (128 bytes of K each) feeds it; packed FP4
// weights arrive raw and are converted to e4m3 per K tile (see gemm_fast.h for the numerics).
// Every M uses the same instruction sequence per output element (a warpgroup's 64 rows never
// interact with another warpgroup's): batch-invariant.
// Split-K (kChunks, TcArgs::k_chunks = S > 1; FP8 and BF16): K tiles [KT·c/S, KT·(c+1)/S) form chunk c;
// each chunk accumulates from zero (FP8: its first promotion is a product, not an FMA into 0; BF16: its
// first MMA overwrites) and the chunk sums are added in chunk order. With TcArgs::partial, block z
// computes chunk z alone and stores it (split_reduce_kernel adds them); without, a block runs every
// chunk, folding each finished one into a running sum in registers when the next begins: the same
// additions in the same order, so the same bits. kChunks = false (S = 1) is the same arithmetic with
// one chunk, without the running sum's registers.
#pragma once

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/wgmma_sync.cuh"
#include "backends/cuda/kernels/gemm_tc.cuh"

namespace deepinfer::cuda::kernels::wg {

using tc::BKind;
using tc::TcArgs;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DI_WGMMA_ENABLED 1
#endif

// Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle layout: row r at r*128,
// its 16-byte chunk c at ((c ^ (r % 8)) * 16); 8-row groups 1024 bytes apart (tiles 1024-aligned).
// A K step of 32 bytes advances the start address inside the swizzle atom.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
    const uint64_t a = tc::smem_addr(p);
    constexpr uint64_t kLbo = 16, kSbo = 1024, kSwizzle128 = 1;
    return ((a & 0x3FFFFu) >> 4) | ((kLbo >> 4) << 16) | ((kSbo >> 4) << 32) | (kSwizzle128 << 62);
}

// setmaxnreg (sm_90a): a warpgroup of a warp-specialized kernel takes registers (inc) or gives them back
// (dec), every thread of it, once.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
#ifdef DI_WGMMA_ENABLED
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
#ifdef DI_WGMMA_ENABLED
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// acc += part · (activation scale x weight scale) for one promoted register tile of wgmma m64nN (f32
// accumulators): this thread's columns 8j + 2·t4 and 8j + 2·t4 + 1 take the activation scales sx[...]
// (the tile's K block), its rows r and r + 8 the weight scales sw0 and sw1. Shared by the FP4 kernels.
template <int N>
__device__ __forceinline__ void promote_tile(float (&acc)[N / 2], const float (&part)[N / 2], const float* sx, int t4,
                                             float sw0, float sw1) {
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
        const float2 x = *reinterpret_cast<const float2*>(sx + j * 8 + t4 * 2);
        acc[4 * j + 0] = fmaf(part[4 * j + 0], x.x * sw0, acc[4 * j + 0]);
        acc[4 * j + 1] = fmaf(part[4 * j + 1], x.y * sw0, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(part[4 * j + 2], x.x * sw1, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(part[4 * j + 3], x.y * sw1, acc[4 * j + 3]);
    }
}

using dev::fence_proxy_async;  // (common/wgmma_sync.cuh)
using dev::wgmma_commit;
using dev::wgmma_fence;
using dev::wgmma_wait;

#define DI_R8(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d (+)= A · Bᵀ for one K step (32 bytes); scale_d = 0 overwrites d.
template <int BN, BKind kB>
__device__ __forceinline__ void wgmma_step(float (&d)[BN / 2], uint64_t da, uint64_t db, int scale_d) {
#ifdef DI_WGMMA_ENABLED
    if constexpr (BN == 128 && kB != BKind::kBf16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
            "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
            "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n}\n"
            : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24), DI_R8(32), DI_R8(40), DI_R8(48), DI_R8(56)
            : "l"(da), "l"(db), "r"(scale_d));
    } else if constexpr (BN == 128) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
            "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
            "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
            : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24), DI_R8(32), DI_R8(40), DI_R8(48), DI_R8(56)
            : "l"(da), "l"(db), "r"(scale_d));
    } else if constexpr (kB != BKind::kBf16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
            "%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
            : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24)
            : "l"(da), "l"(db), "r"(scale_d));
    } else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
            "%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
            : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24)
            : "l"(da), "l"(db), "r"(scale_d));
    }
#else
    (void)d; (void)da; (void)db; (void)scale_d;
    __trap();  // the launcher selects this kernel only on sm_90 devices (built for sm_90a)
#endif
}
#undef DI_R8

template <int kWGs, int BN, int kStages, BKind kB>
struct WgConfig {
    static constexpr int kThreads = 128 * kWGs;
    static constexpr int BM = 64 * kWGs;
    static constexpr int kABytes = BM * 128;
    static constexpr int kBBytes = kB == BKind::kFp4 ? BN * 64 + BN * 4 : BN * 128;
    static constexpr int kStageBytes = (kABytes + kBBytes + BM * 4 + 1023) / 1024 * 1024;
    static constexpr int kExtraBytes = kB == BKind::kFp4 ? BN * 128 + BN * 4 + 128 : 0;
    static constexpr int kMaxKTiles = 256;  // FP8 weight scales kept per block: K <= 32768
    static constexpr int kSmemBytes = kStages * kStageBytes + kExtraBytes + kMaxKTiles * 4 + 1024;  // + alignment slack
};

// Byte offset of (row r, 16-byte K chunk c) in a tile.
__device__ __forceinline__ int tile_offset(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// Stores this thread's part of a wgmma m64nBN f32 tile: rows gr0 and gr0 + 8 (skipped at or past row_end) of
// y (row y_row[gr] when given), columns n0 + 8j + 2·t4 and + 1 below N, bf16-rounded when asked; float2
// stores when `pairs` (an even row stride and an 8-byte aligned y).
template <int BN>
__device__ __forceinline__ void store_tile_rows(const tc::TcArgs& p, const float (&acc)[BN / 2], bool pairs, int64_t gr0,
                                                int64_t row_end, int64_t n0, int64_t N, int t4) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int64_t gr = gr0 + h * 8;
        if (gr >= row_end) continue;
        float* yrow = p.y + (p.y_row ? int64_t(p.y_row[gr]) : gr) * p.y_ld;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int64_t n = n0 + j * 8 + t4 * 2;
            const float v0 = dev::maybe_bf16(acc[4 * j + 2 * h], p.round_bf16);
            const float v1 = dev::maybe_bf16(acc[4 * j + 2 * h + 1], p.round_bf16);
            if (pairs && n + 1 < N) {
                *reinterpret_cast<float2*>(yrow + n) = make_float2(v0, v1);
            } else {
                if (n < N) yrow[n] = v0;
                if (n + 1 < N) yrow[n + 1] = v1;
            }
        }
    }
}

// Each thread's cp.async chunks of a 128-byte-wide activation tile of rows row_begin.. (16-byte chunks, 8 per
// row, chunk i = tid + q·kThreads): source (row a_row_src[gr] or gr), swizzled offset, bytes (0: a row at or
// past row_end copies nothing and zero-fills). The same chunks in every K tile: computed once.
template <int kChunks, int kThreads>
__device__ __forceinline__ void a_tile_chunks(int tid, int64_t row_begin, int64_t row_end, const uint8_t* a,
                                              const int32_t* a_row_src, int64_t a_row_bytes,
                                              const uint8_t* (&src)[kChunks], int (&dst)[kChunks], int (&len)[kChunks]) {
#pragma unroll
    for (int q = 0; q < kChunks; ++q) {
        const int i = tid + q * kThreads, r = i >> 3, c = i & 7;
        const int64_t gr = row_begin + r;
        const bool ok = gr < row_end;
        src[q] = ok ? a + (a_row_src ? static_cast<int64_t>(a_row_src[gr]) : gr) * a_row_bytes + c * 16 : a;
        dst[q] = tile_offset(r, c);
        len[q] = ok ? 16 : 0;
    }
}

// Two blocks per SM for one warpgroup or 64-wide tiles, except the two-warpgroup chunked form: its
// running sum does not fit 128 registers (it spilled at BN = 64), and it runs where the grid is small
// (split-K partials: at most one block per SM) or, unsplit at prefill sizes, only where the
// warp-specialized dense kernel (gemm_wgmma_dense_ws.cuh) does not apply.
template <int kWGs, int BN, int kStages, BKind kB, bool kChunks>
static __global__ void __launch_bounds__(128 * kWGs, ((kWGs == 1 || BN == 64) && !(kChunks && kWGs == 2)) ? 2 : 1)
    wgmma_gemm_kernel(const __grid_constant__ TcArgs p) {
    static_assert(!kChunks || kB != BKind::kFp4, "FP4 weights run in one K chunk (like the FP4 expert kernels)");
    using C = WgConfig<kWGs, BN, kStages, kB>;
    constexpr int BM = C::BM, kThreads = C::kThreads;
    constexpr bool kScaled = kB != BKind::kBf16;
    extern __shared__ uint8_t smem_raw[];
    // wgmma descriptors address shared memory in 16-byte units; keep tiles 1024-aligned.
    uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    const int tid = threadIdx.x, wgi = tid / 128, wl = tid % 128, lane = tid % 32, wi = wl / 32;

    // PDL (launch_pdl): a dense launch with no row table may copy its first stages' weight tiles (and the
    // FP8 weight scales) while the previous kernel finishes; the grouped and row-table forms read tables
    // an earlier kernel wrote, so they wait first.
    const bool early = p.expert_offsets == nullptr && p.a_row_src == nullptr;
    if (!early) pdl_wait();
    int64_t row_begin, row_end;
    const DeviceLinear* wp = &p.weight;
    if (p.expert_offsets) {
        const int t = static_cast<int>(blockIdx.x);
        if (t >= p.tile_offsets[p.num_experts]) return;
        int lo = 0, hi = static_cast<int>(p.num_experts) - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (p.tile_offsets[mid] <= t) lo = mid; else hi = mid - 1;
        }
        row_begin = p.expert_offsets[lo] + int64_t(t - p.tile_offsets[lo]) * BM;
        row_end = p.expert_offsets[lo + 1];
        wp = p.experts + lo;
    } else {
        row_begin = int64_t(blockIdx.x) * BM;
        row_end = p.rows;
    }
    const DeviceLinear& w = *wp;
    const int64_t n0 = int64_t(blockIdx.y) * BN;
    const int64_t N = p.N, K = p.K, KT = p.k_tiles;
    // This block's K tiles [kt0, kt1), and its current chunk [chunk_start, chunk_end) (K tiles <= 256).
    const int S = kChunks ? max(p.k_chunks, 1) : 1, KTi = static_cast<int>(KT);
    const bool split = kChunks && p.partial != nullptr;
    const int kt0 = split ? KTi * static_cast<int>(blockIdx.z) / S : 0;
    const int kt1 = split ? KTi * static_cast<int>(blockIdx.z + 1) / S : KTi;
    int chunk = 0, chunk_start = kt0, chunk_end = split ? kt1 : KTi / S;
    const uint8_t* wbytes = static_cast<const uint8_t*>(w.weight);
    const bool wg_active = row_begin + 64 * wgi < row_end;  // uniform per warpgroup

    uint8_t* conv = smem + kStages * C::kStageBytes;
    float* conv_sw = reinterpret_cast<float*>(conv + BN * 128);
    uint8_t* table = reinterpret_cast<uint8_t*>(conv_sw + BN);
    float* wscale = reinterpret_cast<float*>(conv + C::kExtraBytes);  // FP8: this block's weight scales per K tile
    if constexpr (kB == BKind::kFp4) tc::build_fp4_table(table, tid);

    auto a_row_of = [&](int64_t r) -> int64_t { return p.a_row_src ? p.a_row_src[r] : r; };
    // Each thread's async copies are the same rows and chunks in every K tile: their sources are computed
    // once (a row past the end copies nothing and zero-fills).
    constexpr int kAChunks = BM * 8 / kThreads;
    constexpr int kBChunks = kB == BKind::kFp4 ? (BN * 4 + kThreads - 1) / kThreads : BN * 8 / kThreads;
    const uint8_t* a_src[kAChunks];
    int a_dst[kAChunks], a_len[kAChunks];
    a_tile_chunks<kAChunks, kThreads>(tid, row_begin, row_end, p.a, p.a_row_src, p.a_row_bytes, a_src, a_dst, a_len);
    const uint8_t* b_src[kBChunks];
    int b_dst[kBChunks], b_len[kBChunks];
#pragma unroll
    for (int q = 0; q < kBChunks; ++q) {
        const int i = tid + q * kThreads;
        if constexpr (kB == BKind::kFp4) {
            const int r = min(i / 4, BN - 1), c = i % 4;
            const bool ok = i < BN * 4 && n0 + r < N;
            b_src[q] = ok ? wbytes + (n0 + r) * (K / 2) + c * 16 : wbytes;
            b_dst[q] = r * 64 + c * 16;
            b_len[q] = ok ? 16 : (i < BN * 4 ? 0 : -1);  // -1: no copy at all (beyond the tile)
        } else {
            const int64_t row_bytes = kB == BKind::kBf16 ? 2 * K : K;
            const int r = i >> 3, c = i & 7;
            const bool ok = n0 + r < N;
            b_src[q] = ok ? wbytes + (n0 + r) * row_bytes + c * 16 : wbytes;
            b_dst[q] = tile_offset(r, c);
            b_len[q] = ok ? 16 : 0;
        }
    }
    const float* x_scale_src = p.a_scale;  // this thread's row of activation scales (tid < BM)
    int x_scale_len = 0;
    if (kScaled && tid < BM && row_begin + tid < row_end) {
        x_scale_src = p.a_scale + a_row_of(row_begin + tid) * KT;
        x_scale_len = 4;
    }
    const uint8_t* w_scale_src = nullptr;  // FP4: this thread's weight row of ue8m0 scales (tid < BN)
    int w_scale_len = 0;
    if constexpr (kB == BKind::kFp4) {
        w_scale_src = static_cast<const uint8_t*>(w.scale);
        if (tid < BN && n0 + tid < N) {
            w_scale_src += (n0 + tid) * (K / 32);
            w_scale_len = 4;
        }
    }
    // A stage: the activation tile and scales (load_a: an earlier kernel's output) and the weight tile
    // (load_b: read-only).
    auto load_a = [&](int st, int64_t kt) {
        uint8_t* sa = smem + st * C::kStageBytes;
        float* sx = reinterpret_cast<float*>(sa + C::kABytes + C::kBBytes);
#pragma unroll
        for (int q = 0; q < kAChunks; ++q) tc::cp_async16(sa + a_dst[q], a_src[q] + kt * 128, a_len[q]);
        if (kScaled && tid < BM) tc::cp_async4(sx + tid, x_scale_src + kt, x_scale_len);
    };
    auto load_b = [&](int st, int64_t kt) {
        uint8_t* sb = smem + st * C::kStageBytes + C::kABytes;
        constexpr int kStep = kB == BKind::kFp4 ? 64 : 128;
#pragma unroll
        for (int q = 0; q < kBChunks; ++q)
            if (b_len[q] >= 0) tc::cp_async16(sb + b_dst[q], b_src[q] + kt * kStep, b_len[q]);
        if constexpr (kB == BKind::kFp4)
            if (tid < BN) tc::cp_async4(sb + BN * 64 + tid * 4, w_scale_src + kt * 4, w_scale_len);
    };
    auto load_stage = [&](int st, int64_t kt) {
        load_a(st, kt);
        load_b(st, kt);
    };

    float acc[BN / 2];  // the current chunk's sum
#pragma unroll
    for (int j = 0; j < BN / 2; ++j) acc[j] = 0.0f;
    [[maybe_unused]] float total[kChunks ? BN / 2 : 1];  // the sum of the chunks before it
    [[maybe_unused]] float part[BN / 2];
    if constexpr (kScaled) {
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) part[j] = 0.0f;
    }

    // The first stages: early weight copies (uncommitted: they join stage 0's group), then the FP8 weight
    // scales (loads in flight with the copies, not ahead of them), the wait for the previous kernel, then
    // the activations. (The scales' shared-memory stores are ordered before their reads by the K loop's
    // first barrier.)
    if (early) {
#pragma unroll
        for (int st = 0; st < kStages - 1; ++st)
            if (kt0 + st < kt1) load_b(st, kt0 + st);
    }
    if constexpr (kB == BKind::kFp8) {
        for (int64_t i = kt0 + tid; i < kt1; i += kThreads) wscale[i] = dev::weight_scale(w, (n0 / 128) * KT + i);
    }
    pdl_enter();
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
        if (kt0 + st < kt1) {
            load_a(st, kt0 + st);
            if (!early) load_b(st, kt0 + st);
        }
        tc::cp_async_commit();
    }

    const int g = lane / 4, t4 = lane % 4;
    for (int kt = kt0; kt < kt1; ++kt) {
        tc::cp_async_wait<kStages - 2>();
        fence_proxy_async();  // this thread's cp.async writes, visible to the tensor cores
        __syncthreads();
        if constexpr (kChunks) {
            if (kt == chunk_end) {  // unsplit: the next chunk begins; fold the finished one in
#pragma unroll
                for (int j = 0; j < BN / 2; ++j) total[j] = chunk == 0 ? acc[j] : total[j] + acc[j];
                ++chunk;
                chunk_start = kt;
                chunk_end = KTi * (chunk + 1) / S;
            }
        }
        const int st = (kt - kt0) % kStages;
        const uint8_t* sa = smem + st * C::kStageBytes;
        const uint8_t* sb = sa + C::kABytes;
        const float* sx = reinterpret_cast<const float*>(sb + C::kBBytes);
        if constexpr (kB == BKind::kFp4) {
            for (int i = tid; i < BN * 4; i += kThreads) {
                const int r = i % BN, j = i / BN;
                const uint32_t sc = *reinterpret_cast<const uint32_t*>(sb + BN * 64 + r * 4);
                const uint32_t emax = max(max(sc & 0xFFu, (sc >> 8) & 0xFFu), max((sc >> 16) & 0xFFu, sc >> 24));
                const uint32_t d = min(emax - ((sc >> (8 * j)) & 0xFFu), 15u);
                const uint32_t lo = *reinterpret_cast<const uint32_t*>(table + d * 8);
                const uint32_t hi = *reinterpret_cast<const uint32_t*>(table + d * 8 + 4);
                const uint4 packed = *reinterpret_cast<const uint4*>(sb + r * 64 + j * 16);
                uint4 o0, o1;
                tc::fp4x8_to_e4m3(packed.x, lo, hi, o0.x, o0.y);
                tc::fp4x8_to_e4m3(packed.y, lo, hi, o0.z, o0.w);
                tc::fp4x8_to_e4m3(packed.z, lo, hi, o1.x, o1.y);
                tc::fp4x8_to_e4m3(packed.w, lo, hi, o1.z, o1.w);
                *reinterpret_cast<uint4*>(conv + tile_offset(r, 2 * j)) = o0;
                *reinterpret_cast<uint4*>(conv + tile_offset(r, 2 * j + 1)) = o1;
                if (j == 0) conv_sw[r] = dev::e8m0_pow2(emax);
            }
            fence_proxy_async();
            __syncthreads();
        }
        const uint8_t* bt = kB == BKind::kFp4 ? conv : sb;
        // Issued by every warpgroup, also one whose rows are all padding (zero-filled, never stored): a
        // branch here makes ptxas serialize the wgmma chain (C7518).
        {
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                const uint64_t da = smem_desc(sa + wgi * 8 * 1024 + ks * 32);
                const uint64_t db = smem_desc(bt + ks * 32);
                if constexpr (kScaled)
                    wgmma_step<BN, kB>(part, da, db, ks > 0 ? 1 : 0);
                else
                    wgmma_step<BN, kB>(acc, da, db, (kt > chunk_start || ks > 0) ? 1 : 0);
            }
            wgmma_commit();
        }
        // Prefetch while the tensor cores work: stage (kt - 1) % kStages, whose MMAs completed last
        // iteration and whose bytes every thread has passed the barrier above for.
        {
            const int next = kt + kStages - 1;
            if (next < kt1) load_stage((next - kt0) % kStages, next);
            tc::cp_async_commit();
        }
        {
            wgmma_wait();
            if constexpr (kScaled) {
                float swu = 1.0f;
                if constexpr (kB == BKind::kFp8) swu = wscale[kt];
                const int r0 = wgi * 64 + wi * 16 + g;
                const float sx0 = sx[r0], sx1 = sx[r0 + 8];
                // A chunk's first K tile starts its sum with the product (one chunk: the first tile).
                auto promote = [&](bool first) {
#pragma unroll
                    for (int j = 0; j < BN / 8; ++j) {
                        const int c0 = j * 8 + t4 * 2;
                        float sw0 = swu, sw1 = swu;
                        if constexpr (kB == BKind::kFp4) {
                            sw0 = conv_sw[c0];
                            sw1 = conv_sw[c0 + 1];
                        }
                        const float s00 = sx0 * sw0, s01 = sx0 * sw1, s10 = sx1 * sw0, s11 = sx1 * sw1;
                        if (first) {
                            acc[4 * j + 0] = part[4 * j + 0] * s00;
                            acc[4 * j + 1] = part[4 * j + 1] * s01;
                            acc[4 * j + 2] = part[4 * j + 2] * s10;
                            acc[4 * j + 3] = part[4 * j + 3] * s11;
                        } else {
                            acc[4 * j + 0] = fmaf(part[4 * j + 0], s00, acc[4 * j + 0]);
                            acc[4 * j + 1] = fmaf(part[4 * j + 1], s01, acc[4 * j + 1]);
                            acc[4 * j + 2] = fmaf(part[4 * j + 2], s10, acc[4 * j + 2]);
                            acc[4 * j + 3] = fmaf(part[4 * j + 3], s11, acc[4 * j + 3]);
                        }
                    }
                };
                if (kt == chunk_start)
                    promote(true);
                else
                    promote(false);
            }
        }
    }
    tc::cp_async_wait<0>();
    if constexpr (kChunks) {
        if (chunk > 0) {
#pragma unroll
            for (int j = 0; j < BN / 2; ++j) acc[j] = total[j] + acc[j];
        }
    }

    if (!wg_active) return;
    if (split) {  // this chunk's sums, unrounded, at [chunk][row][n]
        float* part_out = p.partial + int64_t(blockIdx.z) * p.rows * N;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t gr = row_begin + wgi * 64 + wi * 16 + g + h * 8;
            if (gr >= row_end) continue;
            float* prow = part_out + gr * N;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int64_t n = n0 + j * 8 + t4 * 2;
                if (N % 2 == 0 && n + 1 < N) {
                    *reinterpret_cast<float2*>(prow + n) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                } else {
                    if (n < N) prow[n] = acc[4 * j + 2 * h];
                    if (n + 1 < N) prow[n + 1] = acc[4 * j + 2 * h + 1];
                }
            }
        }
        return;
    }
    const bool pairs = p.y_ld % 2 == 0 && (reinterpret_cast<uintptr_t>(p.y) & 7) == 0;  // 8-byte stores
    store_tile_rows<BN>(p, acc, pairs, row_begin + wgi * 64 + wi * 16 + g, row_end, n0, N, t4);
}

// y[y_row(r), n] = ((partial[0][r][n] + partial[1][r][n]) + ...) + partial[S-1][r][n], the chunk order
// of the unsplit kernel's running sum; four consecutive n per thread.
static __global__ void split_reduce_kernel(const __grid_constant__ TcArgs p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t N = p.N, quads = (N + 3) / 4;
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= p.rows * quads) return;
    const int64_t r = i / quads, n = (i % quads) * 4, plane = p.rows * N;
    const float* src = p.partial + r * N + n;
    float* yrow = p.y + (p.y_row ? int64_t(p.y_row[r]) : r) * p.y_ld;
    const int S = max(p.k_chunks, 1);
    if (N % 4 == 0) {
        float4 v = __ldcs(reinterpret_cast<const float4*>(src));
        for (int c = 1; c < S; ++c) {
            const float4 u = __ldcs(reinterpret_cast<const float4*>(src + c * plane));
            v.x = v.x + u.x;
            v.y = v.y + u.y;
            v.z = v.z + u.z;
            v.w = v.w + u.w;
        }
        v = make_float4(dev::maybe_bf16(v.x, p.round_bf16), dev::maybe_bf16(v.y, p.round_bf16),
                        dev::maybe_bf16(v.z, p.round_bf16), dev::maybe_bf16(v.w, p.round_bf16));
        if (p.y_ld % 4 == 0 && (reinterpret_cast<uintptr_t>(p.y) & 15) == 0) {
            *reinterpret_cast<float4*>(yrow + n) = v;
            return;
        }
        yrow[n] = v.x;
        yrow[n + 1] = v.y;
        yrow[n + 2] = v.z;
        yrow[n + 3] = v.w;
        return;
    }
    for (int64_t k = n; k < min(n + 4, N); ++k) {
        float v = src[k - n];
        for (int c = 1; c < S; ++c) v = v + src[k - n + c * plane];
        yrow[k] = dev::maybe_bf16(v, p.round_bf16);
    }
}

}  // namespace deepinfer::cuda::kernels::wg
