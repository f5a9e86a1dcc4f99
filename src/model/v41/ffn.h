// SPDX-License-Identifier: Apache-2.0
// The V4.1 MoE feed-forward (spec §6: sqrt-softplus router with gate_temp, bias-only selection,
// +1e-20 normalization, routed and shared clamped SwiGLU experts, routing weight before w2,
// ascending-expert combine then the shared expert) and the Engram module (spec §5.4), exact numerics.
#pragma once

#include <cstdint>

#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"
#include "model/v41/weights.h"

namespace deepinfer::v41 {

struct MoeParams {
    const MoeWeights* weights = nullptr;
    const float* x = nullptr;  // [num_tokens, D] ffn_norm output
    const uint8_t* image_mask = nullptr;  // [num_tokens] or null: 1 selects with bias_vl
    int64_t num_tokens = 0;
    float* out = nullptr;  // [num_tokens, D]
    Numerics numerics = Numerics::kExact;
};
void moe_forward(const V41TextConfig& config, const MoeParams& p);

struct EngramParams {
    const EngramWeights* weights = nullptr;
    const int64_t* rows = nullptr;  // [num_tokens, num_hash_cols] table rows of this layer
    const uint8_t* gate_off = nullptr;  // [num_tokens] or null: 1 forces the gate to 0 (image-span tokens)
    int64_t num_tokens = 0;
    float* streams = nullptr;  // [num_tokens, hc, D] updated in place
    Numerics numerics = Numerics::kExact;
};
void engram_forward(const V41TextConfig& config, const EngramParams& p);

}  // namespace deepinfer::v41
