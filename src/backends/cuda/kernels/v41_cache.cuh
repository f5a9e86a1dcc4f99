// SPDX-License-Identifier: Apache-2.0
// Device code of V4.1's cache formats (model/v41/qat.cpp, spec §3.6): the fake quantization of
// rows with the reference's arithmetic (amax, floor, scale, x / scale, clamp, round, · scale), the
// compact codes they are stored in (equal to qat.cpp's encode_fp8 / encode_fp4), their decoding, byte
// row copies into rings and caches, and the compressor's per-channel softmax pooling.
#pragma once

#include <cuda_fp8.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/fp4_codes.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// The reference's conversions keep NaN (an overflowing e4m3 scale, a NaN input) where fminf/fmaxf
// would not: clamp that lets NaN through, and the canonical quiet NaN the CPU's decoders return.
__device__ __forceinline__ float clamp_keep_nan(float v, float lo, float hi) { return isnan(v) ? v : fminf(fmaxf(v, lo), hi); }
__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7FC00000); }

// e4m3 code of a value already rounded to e4m3 and within ±448 (sign kept, as float_formats.cpp;
// NaN -> the NaN code).
__device__ __forceinline__ uint8_t e4m3_code(float v) {
    const uint8_t sign = signbit(v) ? 0x80 : 0;
    if (isnan(v)) return sign | 0x7F;
    const float a = fabsf(v);
    if (a == 0.0f) return sign;
    const int e = static_cast<int>((__float_as_uint(a) >> 23) & 0xFFu) - 127;
    if (e < -6) return sign | static_cast<uint8_t>(a * 512.0f);  // subnormal: a = man · 2^-9
    const uint32_t man = static_cast<uint32_t>(ldexpf(a, 3 - e)) - 8u;
    return sign | static_cast<uint8_t>(((e + 7) << 3) | man);
}

// e2m1 code of a value already rounded to e2m1 (|v| <= 6); zero is stored as +0; NaN -> the
// saturated code (float_formats.cpp's e2m1 has no NaN).
__device__ __forceinline__ uint8_t e2m1_code(float v) {
    if (isnan(v)) return (signbit(v) ? 8 : 0) | 7;
    const float a = fabsf(v);
    if (a == 0.0f) return 0;
    const uint8_t sign = signbit(v) ? 8 : 0;
    if (a < 1.0f) return sign | 1;  // 0.5
    const int e = static_cast<int>((__float_as_uint(a) >> 23) & 0xFFu) - 127;
    const uint32_t man = static_cast<uint32_t>(ldexpf(a, 1 - e)) - 2u;
    return sign | static_cast<uint8_t>(((e + 1) << 1) | man);
}

// Bytes of one compact row (cache_row_bytes of ops.h, in device code).
__device__ __forceinline__ int64_t row_bytes_of(CacheFormat f, int64_t n, int64_t block) {
    return f == CacheFormat::kF32 ? n * 4 : f == CacheFormat::kFp8Ue8m0 ? n + n / block : n / 2 + n / block;
}

// Value i of a compact row of n values.
// Row i of a segment's cache: contiguous from `base`, or in the pool pages of `paged` (ops.h PagedCacheRows).
__device__ __forceinline__ const uint8_t* cache_row(const uint8_t* base, const PagedCacheRows& paged, int64_t segment,
                                                    int64_t i, int64_t row_bytes) {
    if (paged.tables == nullptr) return base + i * row_bytes;
    return paged.tables[segment * paged.table_len + i / paged.per_page] + paged.offset + (i % paged.per_page) * row_bytes;
}

__device__ __forceinline__ float cache_value(const uint8_t* row, CacheFormat f, int64_t n, int64_t block, int64_t i) {
    switch (f) {
        case CacheFormat::kF32: return reinterpret_cast<const float*>(row)[i];
        case CacheFormat::kFp8Ue8m0: return dev::mul(dev::e4m3_value(row[i]), dev::e8m0_value(row[n + i / block]));
        case CacheFormat::kFp4E4m3:
        case CacheFormat::kFp4Ue8m0: {
            const uint8_t byte = row[i / 2];
            const uint8_t sb = row[n / 2 + i / block];
            const float s = f == CacheFormat::kFp4E4m3 ? dev::e4m3_value(sb) : dev::e8m0_value(sb);
            return dev::mul(dev::e2m1_value((i & 1) ? (byte >> 4) : (byte & 0xF)), s);
        }
    }
    return 0.0f;
}

// 16 codes times their block's scale, as dev::e4m3_value / dev::e2m1_value times the scale (dev::mul), by
// way of f16: every e4m3 value is an f16 exactly (a normal one, or a signed zero), f16 -> f32 is exact,
// and the product is the same f32. e4m3: the hardware's e4m3x2 -> f16x2 conversion (sm_89+; a software
// form elsewhere); e2m1: first to e4m3 bytes by the FP4 GEMMs' byte permutes (dev::fp4x8_to_e4m3_fast with
// the shift-0 table; every e2m1 value is an e4m3 value). Was a decode by the codes' bits with a NaN branch
// per value, ~20 instructions a value in the V4.1 attention's SASS (ncu, session 35). A NaN code gives a
// NaN of another payload than quiet_nan(): NaN either way, and every use is NaN-propagating.
__device__ __forceinline__ void e4m3x16_values(const uint32_t (&w)[4], float s, float (&v)[16]) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // codes 2k (low byte) and 2k + 1
        const auto pair = static_cast<__nv_fp8x2_storage_t>((w[k / 2] >> (16 * (k % 2))) & 0xFFFFu);
        const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
        v[2 * k] = dev::mul(f.x, s), v[2 * k + 1] = dev::mul(f.y, s);
    }
}
__device__ __forceinline__ void e2m1x16_values(uint32_t w0, uint32_t w1, float s, float (&v)[16]) {
    uint32_t e[4];  // the 16 codes as e4m3 bytes, code 0 in e[0]'s low byte
    dev::fp4x8_to_e4m3_fast(w0, dev::kE2m1E4m3Lo, dev::kE2m1E4m3Hi, e[0], e[1]);
    dev::fp4x8_to_e4m3_fast(w1, dev::kE2m1E4m3Lo, dev::kE2m1E4m3Hi, e[2], e[3]);
    e4m3x16_values(e, s, v);
}

// Values d0 .. d0 + 15 of a compact row of n values (d0 % 16 == 0, n % 16 == 0, and for the quantized
// formats block % 16 == 0: one scale for the 16): cache_value of each, with one vector load of the codes
// (16-byte, 8-byte or per-byte as the address allows) instead of 16 scalar reads and decodes.
__device__ __forceinline__ void cache_values16(const uint8_t* row, CacheFormat f, int64_t n, int64_t block, int64_t d0,
                                               float (&v)[16]) {
    if (f == CacheFormat::kF32) {
        const float* src = reinterpret_cast<const float*>(row) + d0;
        if ((reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float4 x = reinterpret_cast<const float4*>(src)[k];
                v[4 * k] = x.x, v[4 * k + 1] = x.y, v[4 * k + 2] = x.z, v[4 * k + 3] = x.w;
            }
        } else {
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = src[k];
        }
        return;
    }
    uint32_t w[4];  // the codes: 16 bytes (FP8) or 8 (FP4, w[0..1])
    const bool fp8 = f == CacheFormat::kFp8Ue8m0;
    const uint8_t* codes = fp8 ? row + d0 : row + d0 / 2;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(codes);
    if (fp8 && (addr & 15u) == 0) {
        const uint4 x = *reinterpret_cast<const uint4*>(codes);
        w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
    } else if (!fp8 && (addr & 7u) == 0) {
        const uint2 x = *reinterpret_cast<const uint2*>(codes);
        w[0] = x.x, w[1] = x.y, w[2] = w[3] = 0;
    } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            w[k] = 0;
            if (fp8 || k < 2)
#pragma unroll
                for (int i = 0; i < 4; ++i) w[k] |= static_cast<uint32_t>(codes[4 * k + i]) << (8 * i);
        }
    }
    if (fp8) {
        e4m3x16_values(w, dev::e8m0_value(row[n + d0 / block]), v);
    } else {
        const uint8_t sb = row[n / 2 + d0 / block];
        e2m1x16_values(w[0], w[1], f == CacheFormat::kFp4E4m3 ? dev::e4m3_value(sb) : dev::e8m0_value(sb), v);
    }
}

// cache_values16 in two steps, for callers that put several rows' loads in flight before decoding any
// (the V4.1 attention's key staging): cache_codes16 reads a quantized row's codes (one 16-byte or 8-byte
// load) and its scale byte; cache_decode16 turns them into the same 16 values. Rows of f32 or unaligned
// codes are `direct`: cache_decode16 reads them with cache_values16. (cache_values16 itself stays one
// function: the indexer's key staging, measured 38% slower when it was built from these two.)
struct Codes16 {
    uint32_t w[4];  // the codes: 16 bytes (FP8) or 8 (FP4, w[0..1])
    uint8_t scale;
    bool direct;
};
__device__ __forceinline__ Codes16 cache_codes16(const uint8_t* row, CacheFormat f, int64_t n, int64_t block, int64_t d0) {
    Codes16 c{};
    const bool fp8 = f == CacheFormat::kFp8Ue8m0;
    const uint8_t* codes = fp8 ? row + d0 : row + d0 / 2;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(codes);
    if (f == CacheFormat::kF32 || (fp8 && (addr & 15u) != 0) || (!fp8 && (addr & 7u) != 0)) {
        c.direct = true;
    } else if (fp8) {
        const uint4 x = *reinterpret_cast<const uint4*>(codes);
        c.w[0] = x.x, c.w[1] = x.y, c.w[2] = x.z, c.w[3] = x.w;
        c.scale = row[n + d0 / block];
    } else {
        const uint2 x = *reinterpret_cast<const uint2*>(codes);
        c.w[0] = x.x, c.w[1] = x.y;
        c.scale = row[n / 2 + d0 / block];
    }
    return c;
}
__device__ __forceinline__ void cache_decode16(const Codes16& c, const uint8_t* row, CacheFormat f, int64_t n, int64_t block,
                                               int64_t d0, float (&v)[16]) {
    if (c.direct) {
        cache_values16(row, f, n, block, d0, v);
    } else if (f == CacheFormat::kFp8Ue8m0) {
        e4m3x16_values(c.w, dev::e8m0_value(c.scale), v);
    } else {
        e2m1x16_values(c.w[0], c.w[1], f == CacheFormat::kFp4E4m3 ? dev::e4m3_value(c.scale) : dev::e8m0_value(c.scale), v);
    }
}

// grid (rows), block 128.
static __global__ void decode_rows_kernel(const __grid_constant__ DecodeRowsParams p) {
    const int64_t r = blockIdx.x;
    const uint8_t* row = p.src + r * row_bytes_of(p.format, p.n, p.block);
    float* out = p.out + r * p.n;
    if (p.by16) {
        for (int64_t d0 = 16 * static_cast<int64_t>(threadIdx.x); d0 < p.n; d0 += 16 * static_cast<int64_t>(blockDim.x)) {
            float v[16];
            if (p.two_step) {
                cache_decode16(cache_codes16(row, p.format, p.n, p.block, d0), row, p.format, p.n, p.block, d0, v);
            } else {
                cache_values16(row, p.format, p.n, p.block, d0, v);
            }
#pragma unroll
            for (int k = 0; k < 16; ++k) out[d0 + k] = v[k];
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) out[i] = cache_value(row, p.format, p.n, p.block, i);
}

// One thread per block of a row: grid (rows), block threads cover the row's blocks.
static __global__ void qat_rows_kernel(const __grid_constant__ QatRowsParams p) {
    const int64_t r = blockIdx.x;
    float* x = p.x + r * p.n;
    uint8_t* dst = p.dst ? p.dst[r] : nullptr;
    if (p.format == CacheFormat::kF32) {
        if (dst)
            for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) reinterpret_cast<float*>(dst)[i] = x[i];
        return;
    }
    const int64_t B = p.block;
    for (int64_t b = static_cast<int64_t>(threadIdx.x) * B; b < p.n; b += static_cast<int64_t>(blockDim.x) * B) {
        float amax = 0.0f;
        for (int64_t i = b; i < b + B; ++i) amax = fmaxf(amax, fabsf(x[i]));
        if (p.format == CacheFormat::kFp8Ue8m0) {
            const dev::Pow2Scale s = dev::pow2_scale_ceil(dev::mul(fmaxf(amax, 1e-4f), 1.0f / 448.0f));
            if (dst) dst[p.n + b / B] = static_cast<uint8_t>(s.k + 127);
            for (int64_t i = b; i < b + B; ++i) {
                const float q = dev::round_e4m3(clamp_keep_nan(dev::mul(x[i], s.inverse), -448.0f, 448.0f));  // x / scale
                if (dst) dst[i] = e4m3_code(q);
                if (p.fake_quant) x[i] = isnan(q) ? quiet_nan() : dev::mul(q, s.scale);
            }
        } else {
            float scale;
            if (p.format == CacheFormat::kFp4E4m3) {
                float sv = dev::round_e4m3(fmaxf(amax, 6.0f * ldexpf(1.0f, -9)) / 6.0f);
                if (sv > 448.0f) sv = quiet_nan();  // e4m3 overflow: the reference's cast gives NaN
                if (dst) dst[p.n / 2 + b / B] = e4m3_code(sv);
                scale = sv;
            } else {
                const int k = dev::ceil_log2_bits(dev::mul(fmaxf(amax, 6.0f * dev::exp2i(-126)), 1.0f / 6.0f));
                if (dst) dst[p.n / 2 + b / B] = static_cast<uint8_t>(k + 127);
                scale = dev::exp2i(k);
            }
            for (int64_t i = b; i < b + B; i += 2) {
                float q0 = dev::round_e2m1(clamp_keep_nan(x[i] / scale, -6.0f, 6.0f));
                float q1 = dev::round_e2m1(clamp_keep_nan(x[i + 1] / scale, -6.0f, 6.0f));
                if (q0 == 0.0f) q0 = 0.0f;  // -0 -> +0 (the reference's code table)
                if (q1 == 0.0f) q1 = 0.0f;
                if (dst) dst[i / 2] = static_cast<uint8_t>(e2m1_code(q0) | (e2m1_code(q1) << 4));
                if (p.fake_quant) {
                    x[i] = isnan(q0) || isnan(scale) ? quiet_nan() : dev::mul(q0, scale);
                    x[i + 1] = isnan(q1) || isnan(scale) ? quiet_nan() : dev::mul(q1, scale);
                }
            }
        }
    }
}

// qat_rows_kernel's results with four consecutive values per thread (grid over rows x n / 4, block
// kQatQuadThreads): a scale block's block / 4 lanes are adjacent in one warp (block / 4 a power of two <= 32,
// n % block == 0), its largest |x| a shuffle maximum over them (fmaxf ignores NaN in any order and |x| has no
// -0: the serial loop's amax), then each value quantized exactly as there; the block's first lane writes
// its scale. Was one thread per block: 4 of 64 threads busy on a 128-value index row.
constexpr int kQatQuadThreads = 256;
static __global__ void qat_rows_quad_kernel(const __grid_constant__ QatRowsParams p) {
    const int64_t quads = p.n / 4, item = static_cast<int64_t>(blockIdx.x) * kQatQuadThreads + threadIdx.x;
    const bool live = item < p.rows * quads;  // (dead lanes fill whole blocks of lanes: rows x quads is a multiple)
    const int64_t r = live ? item / quads : 0, i0 = live ? (item % quads) * 4 : 0, B = p.block;
    const int lanes = static_cast<int>(B / 4);
    float* x = p.x + r * p.n;
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = live ? x[i0 + k] : 0.0f;
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xFFFFFFFFu, amax, o);
        if (o < lanes) amax = fmaxf(amax, other);
    }
    if (!live) return;
    uint8_t* dst = p.dst ? p.dst[r] : nullptr;
    const bool first = i0 % B == 0;
    if (p.format == CacheFormat::kFp8Ue8m0) {
        const dev::Pow2Scale s = dev::pow2_scale_ceil(dev::mul(fmaxf(amax, 1e-4f), 1.0f / 448.0f));
        if (dst && first) dst[p.n + i0 / B] = static_cast<uint8_t>(s.k + 127);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float q = dev::round_e4m3(clamp_keep_nan(dev::mul(v[k], s.inverse), -448.0f, 448.0f));  // x / scale
            if (dst) dst[i0 + k] = e4m3_code(q);
            if (p.fake_quant) x[i0 + k] = isnan(q) ? quiet_nan() : dev::mul(q, s.scale);
        }
        return;
    }
    float scale;
    if (p.format == CacheFormat::kFp4E4m3) {
        float sv = dev::round_e4m3(fmaxf(amax, 6.0f * ldexpf(1.0f, -9)) / 6.0f);
        if (sv > 448.0f) sv = quiet_nan();  // e4m3 overflow: the reference's cast gives NaN
        if (dst && first) dst[p.n / 2 + i0 / B] = e4m3_code(sv);
        scale = sv;
    } else {
        const int k = dev::ceil_log2_bits(dev::mul(fmaxf(amax, 6.0f * dev::exp2i(-126)), 1.0f / 6.0f));
        if (dst && first) dst[p.n / 2 + i0 / B] = static_cast<uint8_t>(k + 127);
        scale = dev::exp2i(k);
    }
#pragma unroll
    for (int k = 0; k < 4; k += 2) {
        float q0 = dev::round_e2m1(clamp_keep_nan(v[k] / scale, -6.0f, 6.0f));
        float q1 = dev::round_e2m1(clamp_keep_nan(v[k + 1] / scale, -6.0f, 6.0f));
        if (q0 == 0.0f) q0 = 0.0f;  // -0 -> +0 (the reference's code table)
        if (q1 == 0.0f) q1 = 0.0f;
        if (dst) dst[(i0 + k) / 2] = static_cast<uint8_t>(e2m1_code(q0) | (e2m1_code(q1) << 4));
        if (p.fake_quant) {
            x[i0 + k] = isnan(q0) || isnan(scale) ? quiet_nan() : dev::mul(q0, scale);
            x[i0 + k + 1] = isnan(q1) || isnan(scale) ? quiet_nan() : dev::mul(q1, scale);
        }
    }
}

// grid (rows), block 128.
static __global__ void copy_rows_kernel(const __grid_constant__ CopyRowsParams p) {
    const int64_t r = blockIdx.x;
    auto* dst = static_cast<uint8_t*>(p.dst[r]);
    if (!dst) return;
    const auto* src = static_cast<const uint8_t*>(p.src) + r * p.row_bytes;
    for (int64_t i = threadIdx.x; i < p.row_bytes; i += blockDim.x) dst[i] = src[i];
}

// grid (groups), block 128: one thread per channel, the CPU's per-channel order.
static __global__ void compress_pool_kernel(const __grid_constant__ CompressPoolParams p) {
    const int64_t g = blockIdx.x, R = p.ratio;
    const float* const* kv = p.kv_rows + g * R;
    float* out = p.out + g * p.width;
    for (int64_t ch = threadIdx.x; ch < p.width; ch += blockDim.x) {
        if (!p.gate_rows) {
            out[ch] = dev::maybe_bf16(kv[0][ch], p.round_bf16);
            continue;
        }
        const float* const* gate = p.gate_rows + g * R;
        float mx = -__int_as_float(0x7F800000);
        for (int64_t r = 0; r < R; ++r) mx = fmaxf(mx, gate[r][ch]);
        float sum = 0.0f;
        for (int64_t r = 0; r < R; ++r) sum = dev::add(sum, dev::exp_f32(dev::add(gate[r][ch], -mx)));
        float acc = 0.0f;
        for (int64_t r = 0; r < R; ++r) acc = dev::add(acc, dev::mul(kv[r][ch], dev::exp_f32(dev::add(gate[r][ch], -mx)) / sum));
        out[ch] = dev::maybe_bf16(acc, p.round_bf16);
    }
}

}  // namespace deepinfer::cuda::kernels
