// SPDX-License-Identifier: Apache-2.0
// One DeepSeek-V4 block on the residual streams (spec §2.4, §2.15): per sub-block the mHC pre-mix
// (pre/post/comb from the block's own hc_attn_* / hc_ffn_*) collapses the streams, the sub-block's
// norm and body run on the collapsed rows, and the post/comb mix writes the streams back. The
// attention body is a callback, so the target's layers (attention_block) and the DSpark stages of
// V4-Flash-0731 (DSparkAttention, model/dspark_v4.cpp) share the rest; the MoE body is moe_block with
// `moe_ctx`'s expert counts.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/block_context.h"
#include "model/weights.h"

namespace deepinfer {

// a: [S, D] the attention input after attn_norm; out: [S, D] the attention output.
using AttentionBody = std::function<void(const float* a, float* out)>;

// x: [S, hc, D] streams, updated in place; tokens [S] (hash routing).
void run_v4_block(const BlockContext& ctx, const BlockContext& moe_ctx, const LayerWeights& lw, std::vector<float>& x,
                  std::span<const int32_t> tokens, const AttentionBody& attention);

}  // namespace deepinfer
