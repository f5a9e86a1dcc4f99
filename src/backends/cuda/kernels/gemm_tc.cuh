// SPDX-License-Identifier: Apache-2.0
// Device code of the fast (tensor-core) GEMM: y = a · Wᵀ with mma.sync on byte tiles.
// Shared memory holds K tiles of 128 bytes per row (128 e4m3 or 64 bf16 values) in a padded pitch of
// 144 bytes, so that ldmatrix's 8 row addresses of a phase fall in distinct banks. An m16n8k32 e4m3
// MMA and an m16n8k16 bf16 MMA read the same fragment bytes (16 rows x 32 bytes of A, 8 columns x 32
// bytes of B), so one ldmatrix scheme serves both. A cp.async pipeline of kStages K tiles hides the
// global loads; packed FP4 weights land raw in the pipeline and are converted to e4m3 per K tile.
// See gemm_fast.h for the numerics and the batch-invariance argument.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/common/cp_async.cuh"
#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/fp4_codes.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/common/weight_scale.cuh"
#include "backends/cuda/kernels/act_quant_warp.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/gemm_fast.h"

namespace deepinfer::cuda::kernels::tc {

constexpr int kTileBytes = 128;  // bytes of K per tile row
constexpr int kPitch = 144;      // padded row pitch in shared memory
enum class BKind : int { kFp8 = 0, kFp4 = 1, kBf16 = 2 };

struct TcArgs {
    const uint8_t* a;  // dense rows of a_row_bytes
    int64_t a_row_bytes;
    const float* a_scale;  // [*, k_tiles] (fp8 / fp4)
    const int32_t* a_row_src;
    DeviceLinear weight;
    const DeviceLinear* experts;
    const int32_t* expert_offsets;
    const int32_t* tile_offsets;  // [num_experts + 1] first m-tile of each expert
    int64_t num_experts;
    const int32_t* y_row;
    float* y;
    int64_t y_ld, rows, N, K, k_tiles;
    bool round_bf16;
    // Split-K (the wgmma kernel only): K in k_chunks chunks of k_tiles * c / k_chunks .. tiles, summed
    // in chunk order; with `partial` ([k_chunks, rows, N] f32) block z computes chunk z into it.
    int k_chunks;
    float* partial;
    // The FP4 decode kernel: a second weight set of the grouped form into y2 (FastLinearParams::experts2),
    // on blocks blockIdx.x >= N / BN.
    const DeviceLinear* experts2;
    float* y2;
};

// ---- PTX wrappers ---------------------------------------------------------------------------------

using dev::cp_async16;  // (common/cp_async.cuh)
using dev::cp_async4;
using dev::cp_async_commit;
using dev::cp_async_wait;
using dev::smem_addr;
using dev::ldmatrix_x4;  // (common/mma_sync.cuh)
template <BKind kB>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (kB == BKind::kBf16) {
        dev::mma_bf16_16816(d, a, b0, b1);
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
        __trap();  // the launcher never selects the e4m3 path below sm_89
#endif
    }
}

// ---- FP4 -> e4m3 conversion -------------------------------------------------------------------------

// table[d*8 + c] = e4m3 byte of |e2m1 code c| · 2^-d (round to nearest even), d = 0..15.
__device__ __forceinline__ void build_fp4_table(uint8_t* table, int tid) {
    if (tid < 128) {
        const int d = tid / 8, c = tid % 8;
        const float mag = c < 2 ? 0.5f * float(c) : ldexpf(float((c & 1) | 2), (c >> 1) - 2);
        table[tid] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(ldexpf(mag, -d), __NV_SATFINITE, __NV_E4M3));
    }
}

// A weight row's four ue8m0 subblock scales of a 128 block (sc, subblock j in byte j): the largest (the row's
// promotion exponent in the block), and subblock j's row of the shift table: its distance to the largest,
// at most 15 (build_fp4_table's 16 rows). The fast FP4 kernels' definitions; the shared-memory kernel
// (gemm_wgmma.cuh), their test reference, spells them out itself.
__device__ __forceinline__ uint32_t fp4_block_emax(uint32_t sc) {
    return max(max(sc & 0xFFu, (sc >> 8) & 0xFFu), max((sc >> 16) & 0xFFu, sc >> 24));
}
__device__ __forceinline__ uint32_t fp4_subblock_shift(uint32_t emax, uint32_t sc, int j) {
    return min(emax - ((sc >> (8 * j)) & 0xFFu), 15u);
}

// fp4x8_to_e4m3_fast: common/fp4_codes.cuh (also the V4.1 caches' FP4 decoder's).
using dev::fp4x8_to_e4m3_fast;

// fp4x8_to_e4m3_fast of the word lo16 | hi16 << 16 with its halves given apart (each in the low 16 bits of a
// register, the rest zero: two 16-bit shared-memory loads): the same bytes without the byte_perm that joins
// the halves or the shift that splits them again; the shifts by 4 may issue on the FMA pipe (IMAD.SHL).
__device__ __forceinline__ void fp4x4x2_to_e4m3(uint32_t lo16, uint32_t hi16, uint32_t lo, uint32_t hi, uint32_t& out0, uint32_t& out1) {
    uint32_t m0, m1;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(m0) : "r"(lo), "r"(hi), "r"(lo16 & 0x7777u));
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(m1) : "r"(lo), "r"(hi), "r"(hi16 & 0x7777u));
    out0 = m0 | (__byte_perm(lo16 << 4, lo16, 0x5140u) & 0x80808080u);
    out1 = m1 | (__byte_perm(hi16 << 4, hi16, 0x5140u) & 0x80808080u);
}

// 8 packed e2m1 codes (one 32-bit word, low nibble first) -> 8 e4m3 bytes (two words) through the
// 8-byte table (lo, hi) of one shift.
__device__ __forceinline__ void fp4x8_to_e4m3(uint32_t w, uint32_t lo, uint32_t hi, uint32_t& out0, uint32_t& out1) {
    const uint32_t m0 = __byte_perm(lo, hi, w & 0x7777u);
    const uint32_t m1 = __byte_perm(lo, hi, (w >> 16) & 0x7777u);
    const uint32_t s = w & 0x88888888u;  // sign bit of each nibble (bit 4i+3)
    const uint32_t s0 = ((s & 0x8u) << 4) | ((s & 0x80u) << 8) | ((s & 0x800u) << 12) | ((s & 0x8000u) << 16);
    const uint32_t s1 = ((s & 0x80000u) >> 12) | ((s & 0x800000u) >> 8) | ((s & 0x8000000u) >> 4) | (s & 0x80000000u);
    out0 = m0 | s0;
    out1 = m1 | s1;
}

// ---- The kernel -------------------------------------------------------------------------------------

template <int WM, int WN, int MT, int NT, int kStages, BKind kB>
struct TcConfig {
    static constexpr int kThreads = WM * WN * 32;
    static constexpr int BM = WM * MT * 16;
    static constexpr int BN = WN * NT * 8;
    static_assert(NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
    static_assert(128 % BN == 0, "an FP8 weight tile must lie in one 128-row scale block");
    static constexpr int kABytes = BM * kPitch;
    static constexpr int kBBytes = kB == BKind::kFp4 ? BN * 64 + BN * 4 : BN * kPitch;
    static constexpr int kSxBytes = BM * 4;
    static constexpr int kStageBytes = kABytes + kBBytes + kSxBytes;
    // FP4 extras: converted B tile, per-row weight scales, conversion table.
    static constexpr int kExtraBytes = kB == BKind::kFp4 ? BN * kPitch + BN * 4 + 128 : 0;
    static constexpr int kSmemBytes = kStages * kStageBytes + kExtraBytes;
};

template <int WM, int WN, int MT, int NT, int kStages, BKind kB>
static __global__ void __launch_bounds__(WM* WN * 32, 1) tc_gemm_kernel(const __grid_constant__ TcArgs p) {
    using C = TcConfig<WM, WN, MT, NT, kStages, kB>;
    constexpr int BM = C::BM, BN = C::BN, kThreads = C::kThreads;
    constexpr bool kScaled = kB != BKind::kBf16;
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp / WN, warp_n = warp % WN;

    // Which rows (and which expert) this block computes.
    int64_t row_begin, row_end;
    const DeviceLinear* wp = &p.weight;
    if (p.expert_offsets) {
        const int t = static_cast<int>(blockIdx.x);
        if (t >= p.tile_offsets[p.num_experts]) return;
        int lo = 0, hi = static_cast<int>(p.num_experts) - 1;  // last e with tile_offsets[e] <= t
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
    const uint8_t* wbytes = static_cast<const uint8_t*>(w.weight);

    uint8_t* fp4_conv = smem + kStages * C::kStageBytes;
    float* fp4_sw = reinterpret_cast<float*>(fp4_conv + BN * kPitch);
    uint8_t* fp4_table = reinterpret_cast<uint8_t*>(fp4_sw + BN);
    if constexpr (kB == BKind::kFp4) build_fp4_table(fp4_table, tid);

    auto a_row_of = [&](int64_t r) -> int64_t { return p.a_row_src ? p.a_row_src[r] : r; };

    // Producer: issue the async copies of K tile kt into stage st.
    auto load_stage = [&](int st, int64_t kt) {
        uint8_t* sa = smem + st * C::kStageBytes;
        uint8_t* sb = sa + C::kABytes;
        float* sx = reinterpret_cast<float*>(sb + C::kBBytes);
        for (int i = tid; i < BM * 8; i += kThreads) {
            const int r = i / 8, c = i % 8;
            const int64_t gr = row_begin + r;
            const bool ok = gr < row_end;
            const uint8_t* src = ok ? p.a + a_row_of(gr) * p.a_row_bytes + kt * kTileBytes + c * 16 : p.a;
            cp_async16(sa + r * kPitch + c * 16, src, ok ? 16 : 0);
        }
        if constexpr (kScaled) {
            for (int i = tid; i < BM; i += kThreads) {
                const int64_t gr = row_begin + i;
                const bool ok = gr < row_end;
                const float* src = ok ? p.a_scale + a_row_of(gr) * KT + kt : p.a_scale;
                cp_async4(sx + i, src, ok ? 4 : 0);
            }
        }
        if constexpr (kB == BKind::kFp4) {
            for (int i = tid; i < BN * 4; i += kThreads) {
                const int r = i / 4, c = i % 4;
                const int64_t n = n0 + r;
                const bool ok = n < N;
                const uint8_t* src = ok ? wbytes + n * (K / 2) + kt * 64 + c * 16 : wbytes;
                cp_async16(sb + r * 64 + c * 16, src, ok ? 16 : 0);
            }
            const uint8_t* sbytes = static_cast<const uint8_t*>(w.scale);
            for (int i = tid; i < BN; i += kThreads) {
                const int64_t n = n0 + i;
                const bool ok = n < N;
                const uint8_t* src = ok ? sbytes + n * (K / 32) + kt * 4 : sbytes;
                cp_async4(sb + BN * 64 + i * 4, src, ok ? 4 : 0);
            }
        } else {
            const int64_t row_bytes = kB == BKind::kBf16 ? 2 * K : K;
            for (int i = tid; i < BN * 8; i += kThreads) {
                const int r = i / 8, c = i % 8;
                const int64_t n = n0 + r;
                const bool ok = n < N;
                const uint8_t* src = ok ? wbytes + n * row_bytes + kt * kTileBytes + c * 16 : wbytes;
                cp_async16(sb + r * kPitch + c * 16, src, ok ? 16 : 0);
            }
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;

#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
        if (st < KT) load_stage(st, st);
        cp_async_commit();
    }

    const int g = lane / 4, t4 = lane % 4;
    for (int64_t kt = 0; kt < KT; ++kt) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        {
            const int64_t next = kt + kStages - 1;
            if (next < KT) load_stage(static_cast<int>(next % kStages), next);
            cp_async_commit();
        }
        const int st = static_cast<int>(kt % kStages);
        const uint8_t* sa = smem + st * C::kStageBytes;
        const uint8_t* sb = sa + C::kABytes;
        const float* sx = reinterpret_cast<const float*>(sb + C::kBBytes);
        if constexpr (kB == BKind::kFp4) {
            // Convert the raw FP4 tile: one 32-subblock (16 packed bytes) per task.
            for (int i = tid; i < BN * 4; i += kThreads) {
                const int r = i / 4, j = i % 4;
                const uint32_t sc = *reinterpret_cast<const uint32_t*>(sb + BN * 64 + r * 4);
                const uint32_t e0 = sc & 0xFFu, e1 = (sc >> 8) & 0xFFu, e2 = (sc >> 16) & 0xFFu, e3 = sc >> 24;
                const uint32_t emax = max(max(e0, e1), max(e2, e3));
                const uint32_t ej = (sc >> (8 * j)) & 0xFFu;
                const uint32_t d = min(emax - ej, 15u);
                const uint32_t lo = *reinterpret_cast<const uint32_t*>(fp4_table + d * 8);
                const uint32_t hi = *reinterpret_cast<const uint32_t*>(fp4_table + d * 8 + 4);
                const uint4 packed = *reinterpret_cast<const uint4*>(sb + r * 64 + j * 16);
                uint4 o0, o1;
                fp4x8_to_e4m3(packed.x, lo, hi, o0.x, o0.y);
                fp4x8_to_e4m3(packed.y, lo, hi, o0.z, o0.w);
                fp4x8_to_e4m3(packed.z, lo, hi, o1.x, o1.y);
                fp4x8_to_e4m3(packed.w, lo, hi, o1.z, o1.w);
                *reinterpret_cast<uint4*>(fp4_conv + r * kPitch + j * 32) = o0;
                *reinterpret_cast<uint4*>(fp4_conv + r * kPitch + j * 32 + 16) = o1;
                if (j == 0) fp4_sw[r] = dev::e8m0_pow2(emax);
            }
            __syncthreads();
        }
        const uint8_t* bt = kB == BKind::kFp4 ? fp4_conv : sb;

        [[maybe_unused]] float part[MT][NT][4];
        if constexpr (kScaled) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int v = 0; v < 4; ++v) part[i][j][v] = 0.0f;
        }
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            uint32_t af[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int row = warp_m * MT * 16 + i * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
                ldmatrix_x4(af[i], sa + row * kPitch + ks * 32 + (lane / 16) * 16);
            }
            uint32_t bf[NT][2];
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                const int col = warp_n * NT * 8 + j * 8 + (lane % 8) + (lane / 16) * 8;
                uint32_t r[4];
                ldmatrix_x4(r, bt + col * kPitch + ks * 32 + ((lane / 8) % 2) * 16);
                bf[j][0] = r[0];
                bf[j][1] = r[1];
                bf[j + 1][0] = r[2];
                bf[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    if constexpr (kScaled)
                        mma<kB>(part[i][j], af[i], bf[j][0], bf[j][1]);
                    else
                        mma<kB>(acc[i][j], af[i], bf[j][0], bf[j][1]);
                }
        }
        if constexpr (kScaled) {
            // Promotion of this 128-wide K block: acc += part · (s_row · s_col).
            float swu = 1.0f;
            if constexpr (kB == BKind::kFp8) {
                const int64_t scale_cols = K / 128;
                const int64_t si = (n0 / 128) * scale_cols + kt;
                swu = dev::weight_scale(w, si);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int r0 = warp_m * MT * 16 + i * 16 + g;
                const float sx0 = sx[r0], sx1 = sx[r0 + 8];
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const int c0 = warp_n * NT * 8 + j * 8 + t4 * 2;
                    float sw0 = swu, sw1 = swu;
                    if constexpr (kB == BKind::kFp4) {
                        sw0 = fp4_sw[c0];
                        sw1 = fp4_sw[c0 + 1];
                    }
                    acc[i][j][0] = fmaf(part[i][j][0], sx0 * sw0, acc[i][j][0]);
                    acc[i][j][1] = fmaf(part[i][j][1], sx0 * sw1, acc[i][j][1]);
                    acc[i][j][2] = fmaf(part[i][j][2], sx1 * sw0, acc[i][j][2]);
                    acc[i][j][3] = fmaf(part[i][j][3], sx1 * sw1, acc[i][j][3]);
                }
            }
        }
    }
    cp_async_wait<0>();

    // Epilogue: f32 (optionally bf16-rounded) stores of the valid rows and columns.
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t gr = row_begin + warp_m * MT * 16 + i * 16 + g + h * 8;
            if (gr >= row_end) continue;
            float* yrow = p.y + (p.y_row ? int64_t(p.y_row[gr]) : gr) * p.y_ld;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int64_t n = n0 + warp_n * NT * 8 + j * 8 + t4 * 2;
                if (n < N) yrow[n] = dev::maybe_bf16(acc[i][j][2 * h], p.round_bf16);
                if (n + 1 < N) yrow[n + 1] = dev::maybe_bf16(acc[i][j][2 * h + 1], p.round_bf16);
            }
        }
    }
}

// tile_offsets[e] = Σ_{e' < e} ceil(count(e') / bm) for e = 0..E: one block of kExpertTileThreads
// threads, a prefix sum over each kExpertTileThreads experts (integers: exact in any order).
constexpr int kExpertTileThreads = 1024;
static __global__ void __launch_bounds__(kExpertTileThreads) expert_tiles_kernel(const int32_t* expert_offsets,
                                                                               int64_t num_experts, int bm,
                                                                               int32_t* tile_offsets) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    __shared__ int32_t sh[kExpertTileThreads];
    const int i = threadIdx.x;
    int32_t carry = 0;
    for (int64_t base = 0; base < num_experts; base += kExpertTileThreads) {
        const int64_t e = base + i;
        const int32_t tiles = e < num_experts ? (expert_offsets[e + 1] - expert_offsets[e] + bm - 1) / bm : 0;
        sh[i] = tiles;
        __syncthreads();
        for (int o = 1; o < kExpertTileThreads; o <<= 1) {  // inclusive scan
            const int32_t add = i >= o ? sh[i - o] : 0;
            __syncthreads();
            sh[i] += add;
            __syncthreads();
        }
        if (e < num_experts) tile_offsets[e] = carry + sh[i] - tiles;
        carry += sh[kExpertTileThreads - 1];
        __syncthreads();
    }
    if (i == 0) tile_offsets[num_experts] = carry;
}

// ---- Activation conversion ---------------------------------------------------------------------------

// A warp per kActQuantBlocks consecutive 128-column blocks of a row (lane l: columns 4l..4l+3 of each), their
// loads all issued before the arithmetic (one block per warp left each thread a single 16-byte load per
// block lifetime: 32-39% of the copy bandwidth at prefill, bench/results/cuda-session30-h200-actquant.md). Each block's
// codes and scale are act_quant_quad's, whatever the grouping.
constexpr int kActQuantBlocks = 4;
static __global__ void act_quant_fp8_kernel(const __grid_constant__ ActQuantFp8Params p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    // A scale per `block` (32 or 128) columns: groups of 8 or 32 lanes.
    const int64_t blocks = p.cols / 128, per_block = 128 / p.block, groups = (blocks + kActQuantBlocks - 1) / kActQuantBlocks;
    const int64_t gw = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (gw >= p.rows * groups) return;  // whole warps
    const int64_t r = gw / groups, b0 = (gw % groups) * kActQuantBlocks;
    const int64_t src = p.row_src ? p.row_src[r] : r;
    const float* xr = p.x + src * p.x_ld + lane * 4;
    float4 v[kActQuantBlocks];
#pragma unroll
    for (int i = 0; i < kActQuantBlocks; ++i)
        if (b0 + i < blocks) v[i] = *reinterpret_cast<const float4*>(xr + (b0 + i) * 128);
    const int lanes = static_cast<int>(p.block / 4);
    const int pre_lanes = static_cast<int>(p.pre_block / 4);
#pragma unroll
    for (int i = 0; i < kActQuantBlocks; ++i)
        if (b0 + i < blocks) {  // warp-uniform
            const int64_t b = b0 + i;
            if (pre_lanes > 0) v[i] = dev::act_dequant_quad(v[i], pre_lanes);  // (warp-uniform)
            const dev::Fp8Quad o = dev::act_quant_quad(v[i], lanes);
            *reinterpret_cast<uint32_t*>(p.q + r * p.cols + b * 128 + lane * 4) = o.packed;
            if (lane % lanes == 0) p.scale[(r * blocks + b) * per_block + lane / lanes] = o.scale;
        }
}

// 8 columns per thread.
static __global__ void to_bf16_kernel(const __grid_constant__ ToBf16Params p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t per_row = p.cols / 8;
    if (i >= p.rows * per_row) return;
    const int64_t r = i / per_row, c = (i % per_row) * 8;
    const float4 v0 = *reinterpret_cast<const float4*>(p.x + r * p.x_ld + c);
    const float4 v1 = *reinterpret_cast<const float4*>(p.x + r * p.x_ld + c + 4);
    auto b = [](float x) { return __float_as_uint(dev::round_bf16(x)) >> 16; };
    uint4 o;
    o.x = b(v0.x) | (b(v0.y) << 16);
    o.y = b(v0.z) | (b(v0.w) << 16);
    o.z = b(v1.x) | (b(v1.y) << 16);
    o.w = b(v1.z) | (b(v1.w) << 16);
    *reinterpret_cast<uint4*>(p.out + r * p.cols + c) = o;
}

// to_bf16 with act_quant_dequant per p.quant_block first (cols % 128 == 0): a float4 per lane, a warp per 128
// columns of a row (act_dequant_quad's lanes), the quantize-dequantize of act_quant_vec4_kernel.
static __global__ void to_bf16_quant_kernel(const __grid_constant__ ToBf16Params p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t per_row = p.cols / 4;
    if (i >= p.rows * per_row) return;  // whole warps: per_row is a multiple of 32
    const int64_t r = i / per_row, c = (i % per_row) * 4;
    const float4 v = dev::act_dequant_quad(*reinterpret_cast<const float4*>(p.x + r * p.x_ld + c), static_cast<int>(p.quant_block / 4));
    auto b = [](float x) { return __float_as_uint(dev::round_bf16(x)) >> 16; };
    *reinterpret_cast<uint2*>(p.out + r * p.cols + c) = make_uint2(b(v.x) | (b(v.y) << 16), b(v.z) | (b(v.w) << 16));
}

}  // namespace deepinfer::cuda::kernels::tc
