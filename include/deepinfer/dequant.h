// SPDX-License-Identifier: Apache-2.0
// CPU conversions of checkpoint formats to compute formats: FP8 e4m3 weights with block scales,
// packed FP4 (MXFP4-style) expert weights with per-32 ue8m0 scales, float-to-float casts, and
// DeepSeek's per-128 FP8 activation quantization (act_quant). Formulas: deepseek-v4-model.md
// §4.7-4.9 and §5.2. Inputs may be unaligned (views into a safetensors mapping).
#pragma once

#include <cstdint>

#include "deepinfer/tensor.h"

namespace deepinfer {

// out[r, c] = e4m3(weight[r, c]) * scale[r / block_rows, c / block_cols]   (f32 multiply)
struct DequantFp8BlockParams {
    TensorView weight;  // [rows, cols]                                       fp8_e4m3
    TensorView scale;   // [ceil(rows/block_rows), ceil(cols/block_cols)]     f32 | bf16 | ue8m0
    TensorView out;     // [rows, cols]                                       f32 | bf16
    int64_t block_rows = 128;
    int64_t block_cols = 128;
};
void dequant_fp8_block(const DequantFp8BlockParams& p);

// out[r, k] = e2m1(code[r, k]) * 2^(scale[r, k / block] - 127); code 2j in the low nibble of byte j.
struct DequantFp4Params {
    TensorView weight;  // [rows, cols/2] i8 | u8 (packed), or [rows, cols] fp4_e2m1
    TensorView scale;   // [rows, cols/block]                                 ue8m0
    TensorView out;     // [rows, cols]                                       f32 | bf16
    int64_t block = 32;
};
void dequant_fp4(const DequantFp4Params& p);

// Element i of a float-typed buffer (f32, bf16, f16, fp8_e4m3, ue8m0) as f32; unaligned-safe.
float load_float(const void* base, DType dtype, int64_t i);

// Elementwise cast between float dtypes (f32, f16, bf16, fp8_e4m3 -> f32, f16, bf16), rounding to
// nearest-even. Shapes must have the same element count.
void convert_float(const TensorView& src, const TensorView& dst);

// act_quant: per row and per `block` consecutive elements, s = 2^ceil(log2(max(amax, 1e-4) * (1/448)))
// and q = e4m3(clamp(x / s, -448, 448)).
struct ActQuantParams {
    TensorView x;      // [rows, cols]            f32 | bf16
    TensorView q;      // [rows, cols]            fp8_e4m3
    TensorView scale;  // [rows, cols / block]    f32 | ue8m0
    int64_t block = 128;
};
void act_quant(const ActQuantParams& p);

}  // namespace deepinfer
