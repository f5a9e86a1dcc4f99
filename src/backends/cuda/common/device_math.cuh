// SPDX-License-Identifier: Apache-2.0
// Device arithmetic shared by every kernel, written to reproduce the CPU reference bit for bit where
// the CPU is exactly specified: the 8-lane dot product of cpu::dot (lane j sums k = j, j+8, ...; then
// ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)); then the tail in order), bf16 rounding (ties to even), and
// the round-to-nearest-even narrow formats of the QAT simulations. No FP contraction: products and
// sums go through __fmul_rn / __fadd_rn, as the CPU reference is compiled with -ffp-contract=off.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::dev {

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }

// Round to bf16 and back (ties to even; NaN -> canonical NaN as the CPU reference).
__device__ __forceinline__ float round_bf16(float x) {
    if (isnan(x)) return __int_as_float(0x7FC00000);
    uint32_t bits = __float_as_uint(x);
    bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    return __uint_as_float(bits);
}
__device__ __forceinline__ float maybe_bf16(float x, bool round) { return round ? round_bf16(x) : x; }

// ceil(log2(t)) from the bit pattern of a positive normal t (DeepSeek's act_quant rule).
__device__ __forceinline__ int ceil_log2_bits(float t) {
    const uint32_t bits = __float_as_uint(t);
    return static_cast<int>((bits >> 23) & 0xFFu) - 127 + ((bits & 0x7FFFFFu) != 0 ? 1 : 0);
}

// 2^k by its bits for -149 <= k <= 128 (subnormal below -126, inf at 128): ldexpf(1, k)'s value without
// ldexpf's general sequence (~18 instructions and a branch).
__device__ __forceinline__ float exp2i(int k) {
    return __int_as_float(k >= -126 ? (k + 127) << 23 : 1 << (k + 149));
}
// A multiplier m with x · m == x / exp2i(k) bit for bit for every x, -127 <= k <= 128 (ceil_log2_bits' range):
// 2^-k (both are the correctly rounded x·2^-k), and 0 for the infinite divisor (x / inf: ±0, or NaN for inf/NaN).
__device__ __forceinline__ float exp2i_inv(int k) { return k >= 128 ? 0.0f : exp2i(-k); }
// The quantizers' power-of-two block scale: 2^k with k = ceil_log2_bits(t), and the multiplier that divides
// by it exactly (x / scale == x · inverse).
struct Pow2Scale {
    int k;
    float scale, inverse;
};
__device__ __forceinline__ Pow2Scale pow2_scale_ceil(float t) {
    const int k = ceil_log2_bits(t);
    return {k, exp2i(k), exp2i_inv(k)};
}

// Value of x rounded to nearest-even in a binary format with `man_bits` mantissa bits and smallest
// normal exponent `emin` (x finite and within the format's range: callers clamp first). The quantum
// 2^(e - man_bits) and its inverse are normal floats for every format here (emin - man_bits >= -126),
// so a / quantum is a · (1 / quantum) exactly.
__device__ __forceinline__ float round_narrow(float x, int man_bits, int emin) {
    const float a = fabsf(x);
    if (a == 0.0f) return x;
    int e = static_cast<int>((__float_as_uint(a) >> 23) & 0xFFu) - 127;
    if (e < emin) e = emin;
    const float quantum = exp2i(e - man_bits), inverse = exp2i(man_bits - e);
    const float r = mul(rintf(mul(a, inverse)), quantum);
    return signbit(x) ? -r : r;
}
__device__ __forceinline__ float round_e4m3(float x) { return round_narrow(x, 3, -6); }
__device__ __forceinline__ float round_e2m1(float x) { return round_narrow(x, 1, 0); }

// Weight-format decoders (closed form, equal to float_formats.cpp).
__device__ __forceinline__ float e4m3_value(uint8_t b) {
    const uint32_t sign = (b >> 7) & 1u, exp = (b >> 3) & 0xFu, man = b & 7u;
    if ((b & 0x7Fu) == 0x7Fu) return __int_as_float(0x7FC00000);
    const float v = exp == 0 ? ldexpf(static_cast<float>(man), -9)
                             : ldexpf(static_cast<float>(man | 8u), static_cast<int>(exp) - 10);
    return sign ? -v : v;
}
__device__ __forceinline__ float e2m1_value(uint8_t code) {
    const uint32_t sign = (code >> 3) & 1u, exp = (code >> 1) & 3u, man = code & 1u;
    const float v = exp == 0 ? 0.5f * static_cast<float>(man)
                             : ldexpf(static_cast<float>(man | 2u), static_cast<int>(exp) - 2);
    return sign ? -v : v;
}
// 2^(e - 127) for a ue8m0 scale byte e, by its bits (e = 0: the subnormal 2^-127, 0x00400000), NaN for
// 0xFF: ldexpf(1, e - 127)'s value without ldexpf's general sequence (~18 instructions and a branch).
__device__ __forceinline__ float e8m0_pow2(uint32_t e) {
    return e == 0xFFu ? __int_as_float(0x7FC00000) : exp2i(static_cast<int>(e) - 127);
}
__device__ __forceinline__ float e8m0_value(uint8_t b) { return e8m0_pow2(b); }
__device__ __forceinline__ float bf16_value(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ float f16_value(uint16_t b) { return __half2float(__ushort_as_half(b)); }

// The fast mode's fixed block order of sums (RmsNormParams::tree_sum, EngramFuseParams::tree_sum): each thread's
// kN partial sums v (its elements t, t + blockDim.x, .. added in order by the caller) through its warp's butterfly,
// then the warps' sums in warp order; the totals in thread 0's v. warp_sh: kN x 32 floats of shared memory; every
// thread of the block calls it (it synchronizes the block); warps = blockDim.x / 32.
template <int kN>
__device__ __forceinline__ void block_tree_sums(float (&v)[kN], float (*warp_sh)[32], int64_t warps) {
    for (int o = 16; o > 0; o /= 2)
#pragma unroll
        for (int k = 0; k < kN; ++k) v[k] = add(v[k], __shfl_xor_sync(0xFFFFFFFFu, v[k], o));
    if (threadIdx.x % 32 == 0)
#pragma unroll
        for (int k = 0; k < kN; ++k) warp_sh[k][threadIdx.x / 32] = v[k];
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < kN; ++k) v[k] = 0.0f;
        for (int64_t w = 0; w < warps; ++w)
#pragma unroll
            for (int k = 0; k < kN; ++k) v[k] = add(v[k], warp_sh[k][w]);
    }
}

// Combines the 8 lane partial sums of one 8-thread group (lanes 8g..8g+7 of a warp) in cpu::dot's
// order; the result is valid in lane 0 of the group.
__device__ __forceinline__ float hsum8(float v) {
    v = add(v, __shfl_down_sync(0xFFFFFFFFu, v, 4, 8));  // j<4: v_j + v_{j+4}
    v = add(v, __shfl_down_sync(0xFFFFFFFFu, v, 2, 8));  // j<2: (v_j+v_{j+4}) + (v_{j+2}+v_{j+6})
    v = add(v, __shfl_down_sync(0xFFFFFFFFu, v, 1, 8));  // j=0: a + b
    return v;
}

// cpu::dot(a, b, n) by one thread (8 register accumulators), bit-identical to the CPU.
__device__ __forceinline__ float dot_serial(const float* a, const float* b, int64_t n) {
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = add(v[j], mul(a[k + j], b[k + j]));
    float t = add(add(add(v[0], v[4]), add(v[2], v[6])), add(add(v[1], v[5]), add(v[3], v[7])));
    for (; k < n; ++k) t = add(t, mul(a[k], b[k]));
    return t;
}

// cpu::dot(a, b, n) by an 8-thread group (`lane` = 0..7, all 8 lanes of the group must call it);
// result in every lane. Same arithmetic as dot_serial.
__device__ __forceinline__ float dot_group8(const float* a, const float* b, int64_t n, int lane) {
    float v = 0.0f;
    const int64_t n8 = n - n % 8;
    int64_t k = lane;
    for (; k + 56 < n8; k += 64) {  // the loads of 8 steps issued before their (ordered) adds
        float av[8], bv[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            av[u] = a[k + 8 * u];
            bv[u] = b[k + 8 * u];
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) v = add(v, mul(av[u], bv[u]));
    }
    for (; k < n8; k += 8) v = add(v, mul(a[k], b[k]));
    v = hsum8(v);
    float t = __shfl_sync(0xFFFFFFFFu, v, 0, 8);
    for (int64_t k = n8; k < n; ++k) t = add(t, mul(a[k], b[k]));
    return t;
}

// exp and log1p of an f32, rounded once from double precision: correctly rounded except in
// vanishingly rare cases, as glibc's expf (< 0.502 ulp) used by the CPU reference is; CUDA's own
// expf (up to 2 ulp) would differ from the CPU in the last bit often enough that the official
// numerics' bf16 rounding points amplify it.
__device__ __forceinline__ float exp_f32(float x) { return __double2float_rn(exp(static_cast<double>(x))); }
__device__ __forceinline__ float log1p_f32(float x) { return __double2float_rn(log1p(static_cast<double>(x))); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + exp_f32(-x)); }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + exp_f32(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1p_f32(exp_f32(x)); }

// Interleaved RoPE on the trailing rope_dim dims of x at the table row of `position`
// (cos_sin: [positions, rope_dim/2, 2] f32, computed on the host with the CPU's std::cos/std::sin).
__device__ __forceinline__ void rope_pair(float* r, int i, const float* cs, bool inverse) {
    const float c = cs[2 * i], s = inverse ? -cs[2 * i + 1] : cs[2 * i + 1];
    const float a = r[2 * i], b = r[2 * i + 1];
    r[2 * i] = add(mul(a, c), -mul(b, s));
    r[2 * i + 1] = add(mul(b, c), mul(a, s));
}

}  // namespace deepinfer::cuda::dev
