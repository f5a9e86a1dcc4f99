// SPDX-License-Identifier: Apache-2.0
// y = x · Wᵀ on the CPU for every weight format of a DeepSeek checkpoint (f32, bf16, f16, fp8 e4m3
// with block scales, packed fp4 with per-32 ue8m0 scales). Weights are dequantized panel by panel
// into f32 scratch (exact: every format's value times its power-of-two or f32 scale is exact in f32)
// and multiplied with f32 accumulation. Each output element is one dot product whose reduction order
// depends only on in_features: results are batch-invariant (independent of the number of rows, the
// thread count and the tiling).
#pragma once

#include <cstdint>

#include "deepinfer/tensor.h"

namespace deepinfer::cpu {

enum class WeightFormat : uint8_t { kF32, kBF16, kF16, kFp8Block, kFp4 };

// A linear layer's weight as stored (usually a view into the checkpoint mapping).
struct LinearWeight {
    TensorView weight;  // [out, in] f32|bf16|f16|fp8_e4m3, or [out, in/2] i8|u8 (packed fp4)
    TensorView scale;   // fp8: [ceil(out/block_rows), ceil(in/block_cols)] f32|bf16|ue8m0; fp4: [out, in/32] ue8m0
    WeightFormat format = WeightFormat::kF32;
    int64_t out_features = 0;
    int64_t in_features = 0;
    int64_t block_rows = 128;
    int64_t block_cols = 128;

    bool empty() const { return weight.empty(); }
    // Rows [begin, end) of the output dimension (e.g. one expert of a merged tensor).
    LinearWeight rows(int64_t begin, int64_t end) const;
};

// Builds a LinearWeight from a stored tensor (+ scale), inferring the format from the dtypes.
LinearWeight make_linear_weight(const TensorView& weight, const TensorView& scale, int64_t out_features,
                                int64_t in_features, int64_t block_rows = 128, int64_t block_cols = 128);

// Writes rows [row_begin, row_end) of W, dequantized, into `out` ([row_end-row_begin, in] f32, dense).
void dequantize_rows(const LinearWeight& w, int64_t row_begin, int64_t row_end, float* out);

struct LinearParams {
    TensorView x;               // [num_tokens, in_features]  f32 (contiguous)
    const LinearWeight* weight = nullptr;
    TensorView y;               // [num_tokens, out_features] f32 (contiguous)
    // official numerics: quantize x per `activation_block` to e4m3 with ue8m0 scales before the product
    // (act_quant; 128 for V4, 32 for V4.1)
    bool quantize_activations = false;
    int64_t activation_block = 128;
    // official numerics: round y to bf16 (kept in f32 storage)
    bool round_output_bf16 = false;
};
void linear(const LinearParams& p);

// y[rows, out] = x[rows, in] · Wᵀ for contiguous f32 rows, no rounding options (a shorthand for linear()).
void linear_rows(const LinearWeight& w, const float* x, int64_t rows, float* y);

// Dot product of two f32 vectors with the fixed reduction order used by `linear`.
float dot(const float* a, const float* b, int64_t n);

}  // namespace deepinfer::cpu
