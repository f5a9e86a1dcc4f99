// SPDX-License-Identifier: Apache-2.0
// The attention sub-block of a DeepSeek-V4 layer for a chunk of one sequence (spec §2.5-2.14):
// Q/KV projections, RoPE, compressors, lightning indexer, sliding + compressed sparse attention
// with sink, inverse RoPE and the grouped output projection. Updates the layer's state.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/block_context.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer {

// A run of consecutive rows of the batch that belong to one sequence.
struct Segment {
    LayerState* state = nullptr;  // this layer's state of the sequence
    int64_t row_begin = 0;        // first row in the batch
    int64_t num_rows = 0;
    int64_t first_position = 0;   // position of the first row in its sequence
};

struct AttentionBlockParams {
    const LayerWeights* layer = nullptr;
    std::span<const Segment> segments;  // in row order, covering every row
    const float* a = nullptr;           // [num_tokens, D] input after attn_norm (all segments)
    int64_t num_tokens = 0;
    float* out = nullptr;  // [num_tokens, D]
};
void attention_block(const BlockContext& ctx, const AttentionBlockParams& p);

// The attention's prologue and epilogue, shared with the DSpark drafter's attention (model/dspark_v4.cpp).
// Queries of S rows a [S, D] at `positions` [S]: qr = q_norm(wq_a a) [S, q_lora_rank]; q = per-head RMS
// of wq_b qr with RoPE [S, H, head_dim].
void attention_queries(const BlockContext& ctx, const AttentionWeights& w, const cpu::RopeTable& rope, const float* a,
                       int64_t S, const int64_t* positions, float* qr, float* q);
// K=V rows kv_norm(wkv a) with RoPE; official: the nope dims FP8-simulated (spec §2.7). kv: [S, head_dim].
void attention_kv_rows(const BlockContext& ctx, const AttentionWeights& w, const cpu::RopeTable& rope, const float* a,
                       int64_t S, const int64_t* positions, float* kv);
// One head's output oh [head_dim] (already divided by the softmax denominator): official bf16 rounding,
// inverse RoPE at `position`.
void attention_head_epilogue(const BlockContext& ctx, const cpu::RopeTable& rope, float* oh, int64_t position);
// Grouped wo_a, then wo_b: o [S, H*head_dim] -> out [S, D].
void attention_output(const BlockContext& ctx, const AttentionWeights& w, const float* o, int64_t S, float* out);

// Top-k of `scores` (n entries) by value, ties broken by the lower index; returns indices ascending.
std::vector<int32_t> topk_lowest_index(const float* scores, int64_t n, int64_t k);

}  // namespace deepinfer
