// SPDX-License-Identifier: Apache-2.0
// The attention sub-block of a DeepSeek-V4 layer for a chunk of one sequence (spec §2.5-2.14):
// Q/KV projections, RoPE, compressors, lightning indexer, sliding + compressed sparse attention
// with sink, inverse RoPE and the grouped output projection. Updates the layer's state.
#pragma once

#include <cstdint>

#include "model/block_context.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer {

struct AttentionBlockParams {
    const LayerWeights* layer = nullptr;
    LayerState* state = nullptr;
    const float* a = nullptr;  // [num_tokens, D] input after attn_norm
    int64_t num_tokens = 0;
    int64_t first_position = 0;
    float* out = nullptr;  // [num_tokens, D]
};
void attention_block(const BlockContext& ctx, const AttentionBlockParams& p);

// Top-k of `scores` (n entries) by value, ties broken by the lower index; returns indices ascending.
std::vector<int32_t> topk_lowest_index(const float* scores, int64_t n, int64_t k);

}  // namespace deepinfer
