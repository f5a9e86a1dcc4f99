// SPDX-License-Identifier: Apache-2.0
// What every block of the forward needs besides its weights and state: the config, the numerics
// mode and the two RoPE tables.
#pragma once

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config.h"

namespace deepinfer {

struct BlockContext {
    const ModelConfig& config;
    Numerics numerics;
    const cpu::RopeTable& rope_main;      // sliding layers, MTP
    const cpu::RopeTable& rope_compress;  // CSA/HCA layers, their compressors and indexer
    bool official() const { return numerics == Numerics::kOfficial; }
};

// y[rows, out] = x[rows, in] · Wᵀ with the numerics' rounding points: in official mode, FP8 activation
// quantization before FP8/FP4 weights and a bf16 rounding of the output.
inline void project(const BlockContext& ctx, const cpu::LinearWeight& w, const float* x, int64_t rows, float* y) {
    const bool quantized = w.format == cpu::WeightFormat::kFp8Block || w.format == cpu::WeightFormat::kFp4;
    cpu::linear({.x = TensorView(const_cast<float*>(x), DType::kF32, {rows, w.in_features}),
                 .weight = &w,
                 .y = TensorView(y, DType::kF32, {rows, w.out_features}),
                 .quantize_activations = ctx.official() && quantized,
                 .round_output_bf16 = ctx.official()});
}

}  // namespace deepinfer
