// SPDX-License-Identifier: Apache-2.0
// Embedded default model: config and on-demand generation (bf16 weights, fixed seed).
#include "deepinfer/embedded.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "deepinfer/synthetic.h"

namespace deepinfer {

std::string embedded_model_config() {
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

std::string ensure_embedded_model(const std::string& cache_dir) {
    const std::string dir = (std::filesystem::path(cache_dir) / kEmbeddedModelName).string();
    const std::string config = embedded_model_config();
    std::string existing;
    if (std::ifstream in(dir + "/config.json"); in) existing.assign(std::istreambuf_iterator<char>(in), {});
    if (existing != config || !std::filesystem::exists(dir + "/model.safetensors")) {
        // Write into a temporary directory, then rename: a concurrent or interrupted run never sees
        // a half-written checkpoint.
        const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
        std::filesystem::remove_all(tmp);
        write_synthetic_checkpoint(tmp, config,
                                   {.seed = 20261130, .fp8_linears = false, .fp4_experts = false, .residual_damping = 0.5});
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(std::filesystem::path(dir).parent_path());
        std::filesystem::rename(tmp, dir);
    }
    return dir;
}

}  // namespace deepinfer
