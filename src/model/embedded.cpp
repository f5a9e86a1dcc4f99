// SPDX-License-Identifier: Apache-2.0
// Embedded default models: configs and on-demand generation (bf16 weights, fixed seed).
#include "deepinfer/embedded.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "deepinfer/check.h"
#include "deepinfer/synthetic.h"
#include "deepinfer/synthetic_v41.h"

namespace deepinfer {
namespace {

std::string v4_config() {
    nlohmann::ordered_json j = {
        {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"vocab_size", 129280},
        {"hidden_size", 64}, {"moe_intermediate_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
        {"num_key_value_heads", 1}, {"head_dim", 64}, {"qk_rope_head_dim", 16}, {"q_lora_rank", 32}, {"o_groups", 2},
        {"o_lora_rank", 16}, {"sliding_window", 64}, {"compress_ratios", {0, 4, 128, 4, 0}}, {"num_hash_layers", 1},
        {"n_routed_experts", 8}, {"n_shared_experts", 1}, {"num_experts_per_tok", 2}, {"scoring_func", "sqrtsoftplus"},
        {"routed_scaling_factor", 1.5}, {"swiglu_limit", 10.0}, {"rms_norm_eps", 1e-6}, {"hc_mult", 4},
        {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6}, {"rope_theta", 10000}, {"compress_rope_theta", 160000},
        {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 4096},
                          {"beta_fast", 32}, {"beta_slow", 1}}},
        {"index_n_heads", 16}, {"index_head_dim", 32}, {"index_topk", 16}, {"num_nextn_predict_layers", 1},
        {"max_position_embeddings", 65536}, {"bos_token_id", 0}, {"eos_token_id", 1}, {"tie_word_embeddings", false},
        {"torch_dtype", "bfloat16"}, {"deepinfer_note", "random weights: the text this model writes is meaningless"}};
    return j.dump(2) + "\n";
}

// The release's config scaled down (spec deepseek-v41-model.md §1.4): 8 layers = window, window,
// ratio-2 Full, Reuse, ratio-1 Full (candidate source), Reuse, Reindex, Reuse; Engram before layers 1
// and 2 (n-grams 2..4, 2 heads, tables of ~500 rows); 16 indexer heads (few heads make top-k ties).
std::string v41_config() {
    nlohmann::ordered_json j = v41_flash_config();
    nlohmann::ordered_json& t = j["text_config"];
    t["hidden_size"] = 64;
    t["num_hidden_layers"] = 8;
    t["num_attention_heads"] = 4;
    t["head_dim"] = 64;
    t["qk_rope_head_dim"] = 16;
    t["q_lora_rank"] = 32;
    t["o_groups"] = 2;
    t["o_lora_rank"] = 32;
    t["sliding_window"] = 32;
    t["compress_ratios"] = {0, 0, 2, 2, 1, 1, 1, 1};
    t["kv_source_layer_ids"] = {2, 4};
    t["index_source_layer_ids"] = {2, 4, 6};
    t["candidate_source_layer_id"] = 4;
    t["candidate_topk_blocks"] = 4;
    t["candidate_block_size"] = 8;
    t["index_n_heads"] = 16;
    t["index_head_dim"] = 32;
    t["index_topk"] = 16;
    t["n_routed_experts"] = 8;
    t["num_experts_per_tok"] = 2;
    t["moe_intermediate_size"] = 64;
    t["rope_scaling"]["original_max_position_embeddings"] = 4096;
    t["max_position_embeddings"] = 65536;
    t["engram_layer_ids"] = {1, 2};
    t["engram_n_heads"] = 2;
    t["engram_head_dim"] = 32;
    t["engram_vocab_size"] = 64;
    t["num_nextn_predict_layers"] = 0;
    t.erase("dspark_target_layer_ids");
    j.erase("vision_config");
    j.erase("quantization_config");
    set_v41_engram_rows(j);
    j["deepinfer_note"] = "random weights: the text this model writes is meaningless";
    return j.dump(2) + "\n";
}

}  // namespace

bool is_embedded_model_name(std::string_view name) { return name == kEmbeddedDefault || name == kEmbeddedV4; }

std::string embedded_model_dir_name(std::string_view name) {
    DI_CHECK(is_embedded_model_name(name), "unknown embedded model '", name, "' (expected ", kEmbeddedDefault, " or ",
             kEmbeddedV4, ")");
    return name == kEmbeddedV4 ? "deepinfer-embedded-v4-tiny" : "deepinfer-embedded-v41-tiny";
}

std::string embedded_model_config(std::string_view name) {
    DI_CHECK(is_embedded_model_name(name), "unknown embedded model '", name, "'");
    return name == kEmbeddedV4 ? v4_config() : v41_config();
}

std::string ensure_embedded_model(const std::string& cache_dir, std::string_view name) {
    const std::string dir = (std::filesystem::path(cache_dir) / embedded_model_dir_name(name)).string();
    const std::string config = embedded_model_config(name);
    std::string existing;
    if (std::ifstream in(dir + "/config.json"); in) existing.assign(std::istreambuf_iterator<char>(in), {});
    if (existing != config || !std::filesystem::exists(dir + "/model.safetensors")) {
        // Write into a temporary directory, then rename: a concurrent or interrupted run never sees
        // a half-written checkpoint.
        const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
        std::filesystem::remove_all(tmp);
        const SyntheticCheckpointOptions o{.seed = 20261130, .fp8_linears = false, .fp4_experts = false,
                                           .residual_damping = 0.5, .include_drafter = false};
        if (name == kEmbeddedV4) write_synthetic_checkpoint(tmp, config, o);
        else write_synthetic_v41_checkpoint(tmp, config, o);
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(std::filesystem::path(dir).parent_path());
        std::filesystem::rename(tmp, dir);
    }
    return dir;
}

}  // namespace deepinfer
