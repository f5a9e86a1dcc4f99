// SPDX-License-Identifier: Apache-2.0
// The two numerics of the V4.1 forward at its rounding points. `exact`: f32 everywhere (transformers'
// fp32 DeepseekV41; the QAT cache formats are applied in both modes). `official`: the precision map of
// DeepSeek's reference (spec deepseek-v41-model.md §0.4, §3, §6.3 on top of deepseek-v4-model.md §5.1):
// bf16 activations between ops, FP8 activation quantization in blocks of 32 before every FP8/FP4
// weight, bf16 outputs of FP8 and BF16 linears, fp32 router, ratio-2 compressor projections and head.
#pragma once

#include <cstdint>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "deepinfer/model.h"

namespace deepinfer::v41 {

inline constexpr int64_t kActivationBlock = 32;  // act_quant block of V4.1's FP8 GEMMs (spec §6.3)

// Rounds `n` values to bf16 in official numerics (a no-op in exact numerics).
inline void round_activations(Numerics numerics, float* x, int64_t n) {
    if (numerics == Numerics::kOfficial) cpu::round_bf16_inplace(x, n);
}

// y[rows, out] = x[rows, in] · Wᵀ. Official: x quantized to e4m3 per 32 first when W is FP8/FP4 (a
// quantized GEMM), y rounded to bf16 (FP8 and BF16 linears both return bf16 in the reference).
inline void project(Numerics numerics, const cpu::LinearWeight& w, const float* x, int64_t rows, float* y) {
    const bool official = numerics == Numerics::kOfficial;
    const bool quantized = w.format == cpu::WeightFormat::kFp8Block || w.format == cpu::WeightFormat::kFp4;
    cpu::linear({.x = TensorView(const_cast<float*>(x), DType::kF32, {rows, w.in_features}),
                 .weight = &w,
                 .y = TensorView(y, DType::kF32, {rows, w.out_features}),
                 .quantize_activations = official && quantized,
                 .activation_block = kActivationBlock,
                 .round_output_bf16 = official});
}

// A linear whose weights the reference holds in bf16 even when stored as FP8 (wo_a, dequantized at
// load): no activation quantization, bf16 output in official numerics.
inline void project_bf16(Numerics numerics, const cpu::LinearWeight& w, const float* x, int64_t rows, float* y) {
    cpu::linear({.x = TensorView(const_cast<float*>(x), DType::kF32, {rows, w.in_features}),
                 .weight = &w,
                 .y = TensorView(y, DType::kF32, {rows, w.out_features}),
                 .round_output_bf16 = numerics == Numerics::kOfficial});
}

}  // namespace deepinfer::v41
