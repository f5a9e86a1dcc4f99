// SPDX-License-Identifier: Apache-2.0
// The fast GEMM's FP8 activation quantization of 128 columns of a row by one warp (lane l: columns
// 4l..4l+3): a power-of-two scale per block of 32 or 128 columns from the block's largest |x| (at least
// 1e-4), each value divided by it (an exact multiply by the scale's inverse), clamped to ±448 and rounded to
// e4m3. Shared by act_quant_fp8_kernel and the fused SwiGLU + quantization kernel, so both give the same
// codes and scales; act_dequant_quad is act_quant_dequant's arithmetic on the same lanes (the fused kernel's
// finer QAT step).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/common/device_math.cuh"

namespace deepinfer::cuda::dev {

struct Fp8Quad {
    uint32_t packed;  // this lane's four e4m3 codes, column 4l in the low byte
    float scale;      // the scale of this lane's block
};

// The power-of-two scale of a block shared by `lanes` = block / 4 lanes (8 or 32): from the block's largest
// |x| (fmaxf ignores NaN in any order, and |x| has no -0: any reduction tree gives the same), at least 1e-4.
__device__ __forceinline__ Pow2Scale quad_block_scale(float4 v, int lanes) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xFFFFFFFFu, amax, o);
        if (o < lanes) amax = fmaxf(amax, other);
    }
    amax = fmaxf(amax, 1e-4f);
    return pow2_scale_ceil(mul(amax, 1.0f / 448.0f));
}

// act_quant_kernel's quantize-dequantize (act_quant_dequant: x / scale clamped to ±448, rounded to e4m3,
// times the scale) of this lane's four values, blocks of 4 · `lanes` columns (8 lanes: 32).
__device__ __forceinline__ float4 act_dequant_quad(float4 v, int lanes) {
    const Pow2Scale ps = quad_block_scale(v, lanes);
    auto qd = [&](float x) { return mul(round_e4m3(fminf(fmaxf(mul(x, ps.inverse), -448.0f), 448.0f)), ps.scale); };
    return make_float4(qd(v.x), qd(v.y), qd(v.z), qd(v.w));
}

// `lanes` = block / 4 lanes share a scale (8 or 32).
__device__ __forceinline__ Fp8Quad act_quant_quad(float4 v, int lanes) {
    const Pow2Scale ps = quad_block_scale(v, lanes);
    auto clamped = [&](float x) { return fminf(fmaxf(mul(x, ps.inverse), -448.0f), 448.0f); };  // x / scale
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    // The hardware conversion (cvt.rn.satfinite.e4m3x2.f32, two values per instruction) rounds to nearest
    // even, e4m3 subnormals included: the codes of round_e4m3 then the conversion below, in fewer
    // instructions (tests/ops/gemm_fast_cuda_test.cpp checks every code against a brute-force nearest-even).
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(clamped(v.x), clamped(v.y)), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(clamped(v.z), clamped(v.w)), __NV_SATFINITE, __NV_E4M3);
    return {lo | (hi << 16), ps.scale};
#else
    auto q = [&](float x) -> uint32_t {
        const float e = round_e4m3(clamped(x));  // exact e4m3
        return static_cast<uint32_t>(__nv_cvt_float_to_fp8(e, __NV_SATFINITE, __NV_E4M3));
    };
    return {q(v.x) | (q(v.y) << 8) | (q(v.z) << 16) | (q(v.w) << 24), ps.scale};
#endif
}

}  // namespace deepinfer::cuda::dev
