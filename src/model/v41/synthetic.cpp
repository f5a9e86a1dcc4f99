// SPDX-License-Identifier: Apache-2.0
// V4.1 synthetic checkpoints: the V4.1 tensor list through the shared synthetic writer.
#include "deepinfer/synthetic_v41.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "deepinfer/check.h"
#include "deepinfer/engram.h"
#include "deepinfer/float_formats.h"
#include "deepinfer/safetensors.h"
#include "deepinfer/model_config_v41.h"
#include "deepinfer/weight_inventory_v41.h"
#include "model/dspark_agree.h"

namespace deepinfer {
namespace {

// The release's grouping: one shard per backbone layer, each Engram table in a shard of its own, the
// drafter together, and the small top-level and vision tensors together.
std::string v41_shard_of(const std::string& name) {
    if (name.rfind("layers.", 0) == 0) {
        const std::string layer = name.substr(7, name.find('.', 7) - 7);
        return name.find(".engram.embed.") != std::string::npos ? "engram-" + layer : "layer-" + layer;
    }
    if (name.rfind("mtp.", 0) == 0) return "mtp";
    return "top";
}

}  // namespace

void make_dspark_agree_with_target(const std::string& dir, double noise, uint64_t seed) {
    const V41ModelConfig mc = load_v41_model_config(dir + "/config.json");
    const V41TextConfig& c = mc.text;
    const std::string path = dir + "/model.safetensors";
    const DSparkAgreeLayout l = dspark_agree_layout(
        path,
        {.hidden = c.hidden_size, .vocab = c.vocab_size, .rank = c.dspark_markov_rank, .noise_token = c.dspark_noise_token_id,
         .layers = c.num_hidden_layers, .experts = c.n_routed_experts, .stage_experts = c.dspark_n_routed_experts,
         .rms_norm_eps = c.rms_norm_eps},
        "markov_head.embed.weight", "markov_head.head.weight");
    make_dspark_agree(path, l, noise, seed);
}

nlohmann::ordered_json v41_flash_config() {
    using J = nlohmann::ordered_json;
    std::vector<int64_t> ratios = {0, 0};
    ratios.insert(ratios.end(), 18, 2);
    ratios.insert(ratios.end(), 20, 1);
    ratios.insert(ratios.end(), 3, 0);
    J text = {{"model_type", "deepseek_v41_text"}, {"vocab_size", 129280}, {"hidden_size", 5120},
              {"num_hidden_layers", 40}, {"num_attention_heads", 64}, {"num_key_value_heads", 1}, {"head_dim", 512},
              {"qk_rope_head_dim", 64}, {"q_lora_rank", 1280}, {"o_groups", 8}, {"o_lora_rank", 1024},
              {"sliding_window", 128}, {"compress_ratios", ratios}, {"kv_source_layer_ids", {2, 8, 14, 20}},
              {"index_source_layer_ids", {2, 8, 14, 20, 24, 28, 32, 36}}, {"candidate_source_layer_id", 20},
              {"candidate_topk_blocks", 2048}, {"candidate_block_size", 8}, {"index_n_heads", 32},
              {"index_head_dim", 128}, {"index_topk", 512}, {"n_routed_experts", 384}, {"n_shared_experts", 1},
              {"num_experts_per_tok", 6}, {"moe_intermediate_size", 2304}, {"scoring_func", "sqrtsoftplus"},
              {"topk_method", "noaux_tc"}, {"norm_topk_prob", true}, {"routed_scaling_factor", 1.5},
              {"swiglu_limit", 10.0}, {"rms_norm_eps", 1e-20}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20},
              {"hc_eps", 1e-06}, {"rope_theta", 10000}, {"compress_rope_theta", 160000},
              {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 16}, {"beta_fast", 32}, {"beta_slow", 1},
                                {"original_max_position_embeddings", 65536}}},
              {"max_position_embeddings", 1048576}, {"tie_word_embeddings", false}, {"attention_bias", false},
              {"hidden_act", "silu"}, {"engram_layer_ids", {1, 14}},
              {"engram_num_embeddings", {384006168, 384016682}}, {"engram_max_ngram_size", 4},
              {"engram_n_heads", 8}, {"engram_head_dim", 256}, {"engram_vocab_size", 16000000},
              {"engram_pad_token_id", 2}, {"engram_compressed_vocab_size", 99092}, {"num_nextn_predict_layers", 3},
              {"dspark_block_size", 5}, {"dspark_noise_token_id", 128799}, {"dspark_target_layer_ids", {37, 38, 39}},
              {"dspark_markov_rank", 256}, {"dspark_n_routed_experts", 128}, {"dspark_num_experts_per_tok", 3}};
    return J{{"architectures", {"DeepseekV41ForCausalLM"}}, {"model_type", "deepseek_v41"}, {"dtype", "bfloat16"},
             {"transformers_version", "5.6.0"}, {"bos_token_id", 0}, {"eos_token_id", 1}, {"pad_token_id", 2},
             {"image_token_id", 129264},
             {"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
                                      {"weight_block_size", {32, 32}}, {"scale_fmt", "ue8m0"},
                                      {"expert_dtype", "fp4"}}},
             {"text_config", text},
             {"vision_config", {{"model_type", "deepseek_v41_vision"}, {"hidden_size", 1024},
                                {"intermediate_size", 2816}, {"num_hidden_layers", 32}, {"num_attention_heads", 16},
                                {"patch_size", 14}, {"downsample_ratio", 3}, {"rope_theta", 10000.0},
                                {"max_image_tokens", 1024}, {"min_pixels", 295936}}}};
}

nlohmann::ordered_json v41_flash_layers(int64_t layers) {
    DI_CHECK(layers >= 4 && layers <= 40, "a V4.1-Flash cut needs 4 to 40 layers, not ", layers);
    nlohmann::ordered_json j = v41_flash_config();
    auto& t = j["text_config"];
    const int64_t rest = layers - 2;
    const int64_t csa2 = std::max<int64_t>(1, (rest * 18 + 19) / 38), csa1 = rest - csa2;  // 40: 18, 20; 12: 5, 5
    const int64_t g2 = 2, g1 = g2 + csa2;  // the groups' first layers
    std::vector<int64_t> ratios = {0, 0}, kv, index, engram = {1};
    ratios.insert(ratios.end(), size_t(csa2), 2);
    ratios.insert(ratios.end(), size_t(csa1), 1);
    for (int64_t l = g2; l < g1; l += 6) kv.push_back(l);
    index = kv;
    if (g2 + 12 < g1) engram.push_back(g2 + 12);
    if (csa1 > 0) {
        kv.push_back(g1);
        for (int64_t l = g1; l < layers; l += 4) index.push_back(l);
    }
    t["num_hidden_layers"] = layers;
    t["compress_ratios"] = ratios;
    t["kv_source_layer_ids"] = kv;
    t["index_source_layer_ids"] = index;
    t["candidate_source_layer_id"] = csa1 > 0 ? g1 : kv.back();
    t["engram_layer_ids"] = engram;
    t["num_nextn_predict_layers"] = 0;
    t["dspark_target_layer_ids"] = nlohmann::ordered_json::array();
    set_v41_engram_rows(j);
    return j;
}

void set_v41_engram_rows(nlohmann::ordered_json& config) {
    nlohmann::ordered_json& t = config["text_config"];
    const std::vector<int64_t> layers = t["engram_layer_ids"].get<std::vector<int64_t>>();
    const EngramLayout layout = EngramLayout::build(layers, t["engram_vocab_size"].get<int64_t>(),
                                                    t["engram_max_ngram_size"].get<int64_t>(),
                                                    t["engram_n_heads"].get<int64_t>(),
                                                    t["engram_compressed_vocab_size"].get<int64_t>());
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < layout.num_layers(); ++i) rows.push_back(layout.num_rows(i));
    t["engram_num_embeddings"] = rows;
}

void write_synthetic_v41_checkpoint(const std::string& dir, const std::string& config_json,
                                    const SyntheticCheckpointOptions& o) {
    const V41ModelConfig c = parse_v41_model_config(config_json, dir + "/config.json");
    std::filesystem::create_directories(dir);
    {
        std::ofstream cfg(dir + "/config.json", std::ios::trunc);
        cfg << config_json;
        DI_CHECK(cfg.good(), dir, "/config.json: write failed");
    }
    SyntheticLayout layout{.block_rows = c.quantization.weight_block_rows,
                           .block_cols = c.quantization.weight_block_cols,
                           .routed_experts = c.text.n_routed_experts,
                           .experts_per_token = c.text.num_experts_per_tok,
                           .shard_of = o.sharded ? &v41_shard_of : nullptr};
    write_synthetic_tensors(dir, expected_tensors_v41(c, o.include_drafter, o.include_vision), layout, o);
}

}  // namespace deepinfer
