// SPDX-License-Identifier: Apache-2.0
// The MoE feed-forward of a DeepSeek-V4 layer (spec §2.15): router (hash or bias-corrected top-k
// over sqrt-softplus scores), routed SwiGLU experts with clamp, shared expert, combine.
#pragma once

#include <cstdint>

#include "model/block_context.h"
#include "model/weights.h"

namespace deepinfer {

struct MoeBlockParams {
    const MoeWeights* weights = nullptr;
    bool hash_routing = false;
    const float* x = nullptr;            // [num_tokens, D] input after ffn_norm
    const int32_t* token_ids = nullptr;  // [num_tokens] (hash routing)
    int64_t num_tokens = 0;
    float* out = nullptr;  // [num_tokens, D]
};
void moe_block(const BlockContext& ctx, const MoeBlockParams& p);

// Router only: expert ids [num_tokens, top_k] and weights [num_tokens, top_k] (after normalization
// and routed scaling). Exposed for tests.
void route(const BlockContext& ctx, const MoeBlockParams& p, int32_t* expert_ids, float* expert_weights);

}  // namespace deepinfer
