// SPDX-License-Identifier: Apache-2.0
// CSA2 attention of one V4.1 layer over a whole sequence starting at position 0 (spec §3; exact
// numerics = transformers' fp32 DeepseekV41Attention, QAT fake quantization included). Full layers
// publish their compressed KV and index keys, index sources their top-k, the candidate source its
// block mask; later layers of the same forward read them from `SharedState`.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/primitives.h"
#include "deepinfer/model_config_v41.h"
#include "model/v41/weights.h"

namespace deepinfer::v41 {

struct Context {
    const V41TextConfig& config;
    const cpu::RopeTable& rope_main;      // ratio-0 layers
    const cpu::RopeTable& rope_compress;  // ratio > 0 layers and everything inside them
};

// What source layers publish within one forward (transformers' per-forward `shared` dict).
struct SharedState {
    std::vector<float> compressed;      // [num_entries, head_dim] latest KV source's entries (RoPE'd, FP4 QAT)
    std::vector<float> index_keys;      // [num_entries, index_head_dim] (RoPE'd, MXFP4 QAT)
    int64_t num_entries = 0;            // entries of the latest KV source (-1: no KV source yet)
    bool has_keys = false;
    std::vector<int32_t> topk;          // [num_tokens, index_topk] ascending, -1 padded
    bool has_topk = false;
    std::vector<uint8_t> candidates;    // [num_tokens, num_entries] candidate mask of the candidate source
    bool has_candidates = false;
};

struct AttentionParams {
    int64_t layer = 0;
    const AttentionWeights* weights = nullptr;
    const float* x = nullptr;  // [num_tokens, D] attn_norm output
    int64_t num_tokens = 0;    // positions 0 .. num_tokens-1
    float* out = nullptr;      // [num_tokens, D]
};
void attention_forward(const Context& ctx, const AttentionParams& p, SharedState& shared);

}  // namespace deepinfer::v41
