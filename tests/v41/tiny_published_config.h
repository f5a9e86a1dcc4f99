// SPDX-License-Identifier: Apache-2.0
// The tiny published-layout V4.1 config shared by the inventory and numerics tests.
#pragma once

#include <nlohmann/json.hpp>

#include "deepinfer/synthetic_v41.h"

namespace deepinfer {

// The release config scaled down as spec §1.4 recommends (every code path: window-only, ratio-2
// Full + Reuse, ratio-1 Full + Reuse + Reindex, candidate stage, Engram at a window-only and a Full
// layer), with a 3-stage drafter and a 2-block vision tower.
inline nlohmann::ordered_json tiny_published_config() {
    nlohmann::ordered_json j = v41_flash_config();
    auto& t = j["text_config"];
    t["vocab_size"] = 512;
    t["hidden_size"] = 128;
    t["num_hidden_layers"] = 8;
    t["num_attention_heads"] = 4;
    t["head_dim"] = 64;
    t["qk_rope_head_dim"] = 16;
    t["q_lora_rank"] = 64;
    t["o_groups"] = 2;
    t["o_lora_rank"] = 32;
    t["sliding_window"] = 8;
    t["compress_ratios"] = {0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0};
    t["kv_source_layer_ids"] = {2, 4};
    t["index_source_layer_ids"] = {2, 4, 6};
    t["candidate_source_layer_id"] = 4;
    t["candidate_topk_blocks"] = 2;
    t["candidate_block_size"] = 4;
    t["index_topk"] = 4;
    t["index_n_heads"] = 4;
    t["index_head_dim"] = 32;
    t["n_routed_experts"] = 8;
    t["num_experts_per_tok"] = 2;
    t["moe_intermediate_size"] = 64;
    t["engram_layer_ids"] = {1, 2};
    t["engram_n_heads"] = 2;
    t["engram_head_dim"] = 32;
    t["engram_vocab_size"] = 64;
    t["max_position_embeddings"] = 4096;
    t["dspark_target_layer_ids"] = {5, 6, 7};
    t["dspark_markov_rank"] = 16;
    t["dspark_n_routed_experts"] = 4;
    t["dspark_num_experts_per_tok"] = 2;
    t["dspark_noise_token_id"] = 511;
    auto& v = j["vision_config"];
    v["hidden_size"] = 32;
    v["intermediate_size"] = 48;
    v["num_hidden_layers"] = 2;
    v["num_attention_heads"] = 2;
    set_v41_engram_rows(j);
    return j;
}

}  // namespace deepinfer
