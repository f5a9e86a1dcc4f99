// SPDX-License-Identifier: Apache-2.0
// A random V4.1 checkpoint at the release's widths for the CUDA tests (cuda_v41_model_test.cpp,
// cuda_v41_fast_test.cpp): hidden 5120, 64 heads x 512 with rope 64, q_lora 1280, 8 output groups x
// 1024, window 128, indexer 32 x 128 top-512, HC 4, experts 2304 wide top-6 of 16 MXFP4, Engram 8
// heads x 256 with n-grams up to 4, FP8 32x32-block linears with ue8m0 scales; a window-only layer
// with Engram, a ratio-2 Full layer and a ratio-1 Full layer (candidate source); vocabulary 1024.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "deepinfer/synthetic_v41.h"

namespace deepinfer::test {

inline void write_v41_flash_width_checkpoint(const std::string& dir, uint64_t seed = 5) {
    nlohmann::ordered_json j = v41_flash_config();
    auto& t = j["text_config"];
    t["vocab_size"] = 1024;
    t["num_hidden_layers"] = 3;
    t["num_nextn_predict_layers"] = 0;
    t["compress_ratios"] = {0, 2, 1};
    t["kv_source_layer_ids"] = {1, 2};
    t["index_source_layer_ids"] = {1, 2};
    t["candidate_source_layer_id"] = 2;
    t["candidate_topk_blocks"] = 8;  // 8 blocks of 8: the candidate stage selects within 160 entries
    t["n_routed_experts"] = 16;
    t["engram_layer_ids"] = {0};
    t["engram_vocab_size"] = 2000;
    t["dspark_target_layer_ids"] = nlohmann::ordered_json::array();
    j.erase("vision_config");
    set_v41_engram_rows(j);
    write_synthetic_v41_checkpoint(dir, j.dump(), {.seed = seed, .residual_damping = 0.25, .include_drafter = false});
}

}  // namespace deepinfer::test
