// SPDX-License-Identifier: Apache-2.0
// CSA2 attention of one V4.1 layer for a chunk of tokens at absolute positions (spec §3; exact
// numerics = transformers' fp32 DeepseekV41Attention, QAT fake quantization included). Full layers
// publish their compressed KV and index keys, index sources their top-k, the candidate source its
// block mask; later layers of the same forward read them from `SharedState`.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/primitives.h"
#include "deepinfer/model_config_v41.h"
#include "model/v41/state.h"
#include "model/v41/weights.h"

namespace deepinfer::v41 {

struct Context {
    const V41TextConfig& config;
    const cpu::RopeTable& rope_main;      // ratio-0 layers
    const cpu::RopeTable& rope_compress;  // ratio > 0 layers and everything inside them
};

// What source layers publish within one forward (transformers' per-forward `shared` dict): the
// latest KV source's running caches, the latest index source's top-k and the candidate mask.
struct SharedState {
    const LayerState* kv_source = nullptr;  // compressed entries and index keys of the latest KV source
    std::vector<int32_t> topk;              // [num_tokens, index_topk] ascending, -1 padded
    bool has_topk = false;
    std::vector<uint8_t> candidates;        // [num_tokens, num_entries] candidate mask of the candidate source
    bool has_candidates = false;
};

struct AttentionParams {
    int64_t layer = 0;
    const AttentionWeights* weights = nullptr;
    const float* x = nullptr;      // [num_tokens, D] attn_norm output
    int64_t num_tokens = 0;        // tokens of this call
    int64_t position_begin = 0;    // absolute position of the first (state->num_window etc. are before it)
    LayerState* state = nullptr;   // this layer's state, updated
    float* out = nullptr;          // [num_tokens, D]
};
void attention_forward(const Context& ctx, const AttentionParams& p, SharedState& shared);

}  // namespace deepinfer::v41
