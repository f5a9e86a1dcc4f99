// SPDX-License-Identifier: Apache-2.0
// ModelConfig: the validated, typed hyperparameters of a DeepseekV4ForCausalLM checkpoint.
// Field names are the Hugging Face config.json names (style.md §4); parse_model_config also reads
// DeepSeek's own inference keys (dim, n_layers, window_size, ...) and the legacy forms
// (compress_ratios, num_hash_layers, flat or nested rope_parameters / rope_scaling with YaRN).
// docs/architecture.md maps the vocabularies.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

enum class AttentionType : uint8_t {
    kSliding,  // sliding window only (compress ratio 0)
    kCsa,      // compressed sparse attention: ratio-4 compressor + lightning indexer
    kHca,      // heavily compressed attention: ratio-128 compressor
};
enum class MlpType : uint8_t {
    kHashMoe,  // routed by the token-id table tid2eid
    kMoe,      // routed by the score function with bias-corrected top-k
};
std::string_view attention_type_name(AttentionType type);  // "sliding" | "csa" | "hca"
std::string_view mlp_type_name(MlpType type);              // "hash_moe" | "moe"

// One RoPE parameter set. V4 has two: `main` (sliding layers, MTP) and `compress` (CSA/HCA).
struct RopeParams {
    double rope_theta = 10000.0;
    std::string rope_type = "default";  // "default" | "yarn"
    double factor = 1.0;                // YaRN scaling factor
    int64_t original_max_position_embeddings = 0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    bool is_yarn() const { return rope_type == "yarn"; }
};

// FP8 block quantization of the linear weights (quantization_config).
struct QuantizationConfig {
    std::string quant_method;  // "fp8", or empty for unquantized checkpoints
    std::string fmt;           // "e4m3"
    int64_t weight_block_rows = 128;
    int64_t weight_block_cols = 128;
    std::string scale_fmt;  // "ue8m0", or empty for f32 scales
    std::string activation_scheme;
    bool is_fp8() const { return quant_method == "fp8"; }
};

struct ModelConfig {
    std::string model_type = "deepseek_v4";
    std::string architecture = "DeepseekV4ForCausalLM";

    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 1;
    int64_t head_dim = 0;
    int64_t qk_rope_head_dim = 0;
    int64_t q_lora_rank = 0;
    int64_t o_groups = 0;
    int64_t o_lora_rank = 0;
    int64_t sliding_window = 0;

    std::vector<AttentionType> layer_types;  // [num_hidden_layers]
    int64_t compress_rate_csa = 4;
    int64_t compress_rate_hca = 128;
    std::vector<MlpType> mlp_layer_types;  // [num_hidden_layers]

    int64_t n_routed_experts = 0;
    int64_t n_shared_experts = 1;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;
    std::string scoring_func = "sqrtsoftplus";
    std::string topk_method = "noaux_tc";
    double routed_scaling_factor = 1.0;
    bool norm_topk_prob = true;
    double swiglu_limit = 0.0;  // 0 = no clamp

    double rms_norm_eps = 1e-6;
    int64_t hc_mult = 4;
    int64_t hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;

    RopeParams rope_main;
    RopeParams rope_compress;

    int64_t index_n_heads = 0;
    int64_t index_head_dim = 0;
    int64_t index_topk = 0;

    int64_t num_nextn_predict_layers = 0;

    // DSpark drafter of DeepSeek-V4-Flash-0731 (speculative-decoding.md §1.2), used when the checkpoint
    // carries one (mtp.N blocks with main_proj; the stage count is that of the stored blocks).
    int64_t dspark_block_size = 5;
    int64_t dspark_noise_token_id = 128799;
    // Target layers whose OUTPUT streams are tapped; default: the last three layers ([40, 41, 42] at 43).
    std::vector<int64_t> dspark_target_layer_ids;
    int64_t dspark_markov_rank = 256;
    int64_t dspark_n_routed_experts = 0;     // default: n_routed_experts
    int64_t dspark_num_experts_per_tok = 0;  // default: num_experts_per_tok
    int64_t max_position_embeddings = 0;

    QuantizationConfig quantization;
    std::string expert_dtype;  // "fp4" | "fp8" | "" (same as the other linears)
    bool tie_word_embeddings = false;
    int64_t bos_token_id = 0;
    std::vector<int64_t> eos_token_ids;
    std::string torch_dtype = "bfloat16";
    std::string hidden_act = "silu";

    // ---- derived ----
    int64_t compress_ratio(int64_t layer) const;  // 0, compress_rate_csa or compress_rate_hca
    const RopeParams& rope_for_layer(int64_t layer) const;
    int64_t num_hash_layers() const;
    int64_t nope_head_dim() const { return head_dim - qk_rope_head_dim; }
};

// Parses config.json text. `source` names the file in error messages. Every error names the key
// and the offending value. A V4.1 (DeepseekV41ForCausalLM) config is rejected with a clear message.
ModelConfig parse_model_config(std::string_view json_text, std::string_view source = "config.json");
ModelConfig load_model_config(const std::string& path);

// Checks internal consistency (ranks divide, schedule lengths, ranges); throws naming the field.
void validate_model_config(const ModelConfig& config, std::string_view source = "config.json");

// One line per fact, for `deepinfer inspect`.
std::string describe_model_config(const ModelConfig& config);

}  // namespace deepinfer
