// SPDX-License-Identifier: Apache-2.0
// V41ModelConfig: the validated, typed configuration of a DeepseekV41ForCausalLM checkpoint (spec
// deepseek-v41-model.md §1). The published config.json is composite: the text backbone under
// `text_config`, the vision tower under `vision_config`, quantization and special ids at the root.
// Field names are the Hugging Face names; the text reader also takes DeepSeek's inference names
// (window_size, kv_source_layers, score_func, ...). A flat `deepseek_v41_text` config (what
// transformers saves for DeepseekV41TextModel) is accepted too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/model_config.h"

namespace deepinfer {

// What a layer's CSA2 attention computes (spec §1.3).
enum class CsaMode : uint8_t {
    kWindowOnly,  // compress ratio 0: sliding window only
    kFull,        // KV source: own compressor, index keys, indexer and top-k
    kReindex,     // index source that is not a KV source: own indexer over the KV source's keys
    kReuse,       // reuses the compressed KV of its KV source and the top-k of its index source
};
std::string_view csa_mode_name(CsaMode mode);  // "window" | "full" | "reindex" | "reuse"

struct V41TextConfig {
    int64_t vocab_size = 129280;
    int64_t hidden_size = 5120;
    int64_t num_hidden_layers = 40;
    int64_t num_attention_heads = 64;
    int64_t num_key_value_heads = 1;
    int64_t head_dim = 512;
    int64_t qk_rope_head_dim = 64;
    int64_t q_lora_rank = 1280;
    int64_t o_groups = 8;
    int64_t o_lora_rank = 1024;
    int64_t sliding_window = 128;
    bool attention_bias = false;

    // ---- CSA2 schedule ----
    std::vector<int64_t> compress_ratios;  // [num_hidden_layers + num_nextn_predict_layers]
    std::vector<int64_t> kv_source_layer_ids;
    std::vector<int64_t> index_source_layer_ids;
    int64_t candidate_source_layer_id = -1;  // < 0: no candidate stage
    int64_t candidate_topk_blocks = 2048;
    int64_t candidate_block_size = 8;
    int64_t index_n_heads = 32;
    int64_t index_head_dim = 128;
    int64_t index_topk = 512;

    // ---- MoE ----
    int64_t n_routed_experts = 384;
    int64_t n_shared_experts = 1;
    int64_t num_experts_per_tok = 6;
    int64_t moe_intermediate_size = 2304;
    std::string scoring_func = "sqrtsoftplus";
    std::string topk_method = "noaux_tc";
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.5;
    double gate_temp = 1.0;
    double swiglu_limit = 10.0;
    std::string hidden_act = "silu";

    // ---- norms, mHC, RoPE ----
    double rms_norm_eps = 1e-20;
    int64_t hc_mult = 4;
    int64_t hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;
    RopeParams rope_main;      // ratio-0 layers and the drafter
    RopeParams rope_compress;  // every ratio > 0 layer
    int64_t max_position_embeddings = 1048576;

    // ---- Engram ----
    std::vector<int64_t> engram_layer_ids;
    std::vector<int64_t> engram_num_embeddings;  // [engram layers] table rows
    int64_t engram_vocab_size = 16000000;        // prime-search start
    int64_t engram_max_ngram_size = 4;
    int64_t engram_n_heads = 8;
    int64_t engram_head_dim = 256;
    int64_t engram_pad_id = 2;  // a token id (mapped through the compressed token map)
    int64_t engram_compressed_vocab_size = 99092;

    // ---- DSpark drafter ----
    int64_t num_nextn_predict_layers = 3;
    int64_t dspark_block_size = 5;
    int64_t dspark_noise_token_id = 128799;
    std::vector<int64_t> dspark_target_layer_ids;
    int64_t dspark_markov_rank = 256;
    int64_t dspark_n_routed_experts = 128;
    int64_t dspark_num_experts_per_tok = 3;

    bool tie_word_embeddings = false;

    // ---- derived (valid after validation) ----
    int64_t compress_ratio(int64_t layer) const { return compress_ratios.at(size_t(layer)); }
    const RopeParams& rope_for_layer(int64_t layer) const {
        return compress_ratio(layer) == 0 ? rope_main : rope_compress;
    }
    // Latest KV / index source at or before `layer` (-1 for a ratio-0 layer).
    int64_t kv_source(int64_t layer) const;
    int64_t index_source(int64_t layer) const;
    CsaMode csa_mode(int64_t layer) const;
    bool is_kv_source(int64_t layer) const;
    bool is_index_source(int64_t layer) const;
    // Position of `layer` in engram_layer_ids, or -1.
    int64_t engram_index(int64_t layer) const;
    int64_t engram_num_hash_cols() const { return (engram_max_ngram_size - 1) * engram_n_heads; }
};

struct V41VisionConfig {
    int64_t hidden_size = 1024;
    int64_t intermediate_size = 2816;
    int64_t num_hidden_layers = 32;
    int64_t num_attention_heads = 16;
    int64_t patch_size = 14;
    int64_t downsample_ratio = 3;
    double rope_theta = 10000.0;
    int64_t max_image_tokens = 1024;
    int64_t min_pixels = 295936;
    int64_t max_wh_ratio = 0;  // 0: no cap (config null)
};

struct V41ModelConfig {
    std::string model_type = "deepseek_v41";
    std::string architecture = "DeepseekV41ForCausalLM";
    std::string torch_dtype = "bfloat16";
    int64_t bos_token_id = 0;
    std::vector<int64_t> eos_token_ids = {1};
    int64_t pad_token_id = 2;
    int64_t image_token_id = 129264;
    QuantizationConfig quantization;  // weight_block 32x32 in the release; empty quant_method: unquantized
    std::string expert_dtype;         // quantization_config.expert_dtype ("fp4"), or empty
    V41TextConfig text;
    std::optional<V41VisionConfig> vision;
};

// True when the JSON text is a V4.1 config (composite with a deepseek_v41 text_config, or a flat
// deepseek_v41_text config). Cheap enough for format dispatch; never throws on valid JSON.
bool is_v41_config(std::string_view json_text);

// Parses and validates config.json text. Every error names `source`, the key and the value.
V41ModelConfig parse_v41_model_config(std::string_view json_text, std::string_view source = "config.json");
V41ModelConfig load_v41_model_config(const std::string& path);

// Checks the schedule (sources, ratios, candidate layer), Engram and DSpark keys and all ranges;
// throws naming the key. parse_v41_model_config calls it.
void validate_v41_model_config(const V41ModelConfig& config, std::string_view source = "config.json");

// One line per fact, for `deepinfer inspect`.
std::string describe_v41_model_config(const V41ModelConfig& config);

}  // namespace deepinfer
