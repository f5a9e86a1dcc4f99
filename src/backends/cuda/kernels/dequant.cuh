// SPDX-License-Identifier: Apache-2.0
// Device code for weight dequantization: FP8 e4m3 with block scales and packed FP4 e2m1 with
// per-32 ue8m0 scales, to f32 or bf16. One thread per output element pair; decoding is closed-form
// (bit manipulation), matching float_formats.cpp exactly, so results equal the CPU bit for bit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backends/cuda/common/device_math.cuh"

namespace deepinfer::cuda::kernels {

enum class ScaleKind : int { kF32 = 0, kE8M0 = 1, kBF16 = 2 };
enum class OutKind : int { kF32 = 0, kBF16 = 1 };

struct DequantFp8Args {
    const uint8_t* weight;  // [rows, cols] e4m3
    const void* scale;      // [scale_rows, scale_cols]
    void* out;              // [rows, cols]
    int64_t rows, cols, block_rows, block_cols, scale_cols;
    ScaleKind scale_kind;
    OutKind out_kind;
};

struct DequantFp4Args {
    const uint8_t* weight;  // [rows, cols/2] packed, low nibble first
    const uint8_t* scale;   // [rows, cols/block] ue8m0
    void* out;              // [rows, cols]
    int64_t rows, cols, block;
    OutKind out_kind;
};

__device__ __forceinline__ float e4m3_to_float(uint8_t b) {
    const uint32_t sign = (b >> 7) & 1u, exp = (b >> 3) & 0xFu, man = b & 7u;
    if ((b & 0x7Fu) == 0x7Fu) return __int_as_float(0x7FC00000);
    float v = exp == 0 ? ldexpf(static_cast<float>(man), -9) : ldexpf(static_cast<float>(man | 8u), static_cast<int>(exp) - 10);
    return sign ? -v : v;
}

__device__ __forceinline__ float e2m1_to_float(uint8_t code) {
    const uint32_t sign = (code >> 3) & 1u, exp = (code >> 1) & 3u, man = code & 1u;
    float v = exp == 0 ? 0.5f * static_cast<float>(man) : ldexpf(static_cast<float>(man | 2u), static_cast<int>(exp) - 2);
    return sign ? -v : v;
}

__device__ __forceinline__ float e8m0_to_float(uint8_t b) { return dev::e8m0_pow2(b); }

// NaN is stored as the canonical quiet NaN (f32 0x7FC00000, bf16 0x7FC0), as the CPU reference and
// PyTorch produce; GPU arithmetic would otherwise yield 0x7FFFFFFF.
__device__ __forceinline__ void store_out(void* out, OutKind kind, int64_t i, float v) {
    if (kind == OutKind::kF32) {
        static_cast<float*>(out)[i] = isnan(v) ? __int_as_float(0x7FC00000) : v;
    } else {
        static_cast<__nv_bfloat16*>(out)[i] = isnan(v) ? __ushort_as_bfloat16(0x7FC0) : __float2bfloat16_rn(v);
    }
}

static __global__ void dequant_fp8_block_kernel(const __grid_constant__ DequantFp8Args a) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= a.rows * a.cols) return;
    const int64_t r = i / a.cols, c = i % a.cols;
    const int64_t si = (r / a.block_rows) * a.scale_cols + c / a.block_cols;
    float s;
    switch (a.scale_kind) {
        case ScaleKind::kF32: s = static_cast<const float*>(a.scale)[si]; break;
        case ScaleKind::kE8M0: s = e8m0_to_float(static_cast<const uint8_t*>(a.scale)[si]); break;
        default: s = __bfloat162float(static_cast<const __nv_bfloat16*>(a.scale)[si]); break;
    }
    store_out(a.out, a.out_kind, i, e4m3_to_float(a.weight[i]) * s);
}

static __global__ void dequant_fp4_kernel(const __grid_constant__ DequantFp4Args a) {
    const int64_t pair = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // one byte = 2 elements
    if (pair >= a.rows * a.cols / 2) return;
    const int64_t i = pair * 2, r = i / a.cols, c = i % a.cols;
    const uint8_t byte = a.weight[pair];
    const float s = e8m0_to_float(a.scale[r * (a.cols / a.block) + c / a.block]);  // c, c+1 share a block
    store_out(a.out, a.out_kind, i, e2m1_to_float(byte & 0xF) * s);
    store_out(a.out, a.out_kind, i + 1, e2m1_to_float(byte >> 4) * s);
}

}  // namespace deepinfer::cuda::kernels
