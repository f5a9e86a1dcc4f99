// SPDX-License-Identifier: Apache-2.0
// config.json -> ModelConfig. Reads both key vocabularies (Hugging Face and DeepSeek's inference
// ModelArgs), the legacy schedule keys, and every RoPE/YaRN layout seen in the wild; a key given in
// both vocabularies must agree. Every error names the file, the key and the value.
#include "deepinfer/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "deepinfer/check.h"
#include "model/config_json.h"

namespace deepinfer {
namespace {

using nlohmann::json;

using config_json::Reader;
using config_json::require_range;
using config_json::short_value;

AttentionType attention_type_from_name(const std::string& name, std::string_view source) {
    if (name == "sliding_attention") return AttentionType::kSliding;
    if (name == "compressed_sparse_attention") return AttentionType::kCsa;
    if (name == "heavily_compressed_attention") return AttentionType::kHca;
    DI_THROW(source, ": layer_types entry \"", name,
             "\" is not one of sliding_attention, compressed_sparse_attention, heavily_compressed_attention");
}

using config_json::read_rope;

}  // namespace

std::string_view attention_type_name(AttentionType type) {
    switch (type) {
        case AttentionType::kSliding: return "sliding";
        case AttentionType::kCsa: return "csa";
        case AttentionType::kHca: return "hca";
    }
    return "?";
}

std::string_view mlp_type_name(MlpType type) { return type == MlpType::kHashMoe ? "hash_moe" : "moe"; }

int64_t ModelConfig::compress_ratio(int64_t layer) const {
    switch (layer_types.at(static_cast<size_t>(layer))) {
        case AttentionType::kSliding: return 0;
        case AttentionType::kCsa: return compress_rate_csa;
        case AttentionType::kHca: return compress_rate_hca;
    }
    return 0;
}

const RopeParams& ModelConfig::rope_for_layer(int64_t layer) const {
    return compress_ratio(layer) == 0 ? rope_main : rope_compress;
}

int64_t ModelConfig::num_hash_layers() const {
    int64_t n = 0;
    for (MlpType t : mlp_layer_types) n += t == MlpType::kHashMoe ? 1 : 0;
    return n;
}

ModelConfig parse_model_config(std::string_view json_text, std::string_view source) {
    json root;
    try {
        root = json::parse(json_text.begin(), json_text.end());
    } catch (const json::parse_error& e) {
        DI_THROW(source, ": not valid JSON (", e.what(), ")");
    }
    DI_CHECK(root.is_object(), source, ": the top level must be a JSON object");
    DI_CHECK(!root.contains("text_config"), source,
             ": this is a nested (text_config) config, e.g. DeepseekV41ForCausalLM; V4.1 checkpoints are not "
             "supported by this build");

    Reader r(root, source);
    ModelConfig c;
    c.model_type = r.get_string({"model_type"}, "deepseek_v4");
    if (const json* arch = r.find({"architectures"})) {
        DI_CHECK(arch->is_array() && !arch->empty() && (*arch)[0].is_string(), source,
                 ": key 'architectures' must be a non-empty list of strings, got ", short_value(*arch));
        c.architecture = (*arch)[0].get<std::string>();
    }
    DI_CHECK(c.model_type == "deepseek_v4", source, ": model_type \"", c.model_type,
             "\" is not supported (expected \"deepseek_v4\")");
    DI_CHECK(c.architecture == "DeepseekV4ForCausalLM", source, ": architecture \"", c.architecture,
             "\" is not supported (expected \"DeepseekV4ForCausalLM\")");

    c.vocab_size = r.get_int({"vocab_size"});
    c.hidden_size = r.get_int({"hidden_size", "dim"});
    c.num_hidden_layers = r.get_int({"num_hidden_layers", "n_layers"});
    c.num_attention_heads = r.get_int({"num_attention_heads", "n_heads"});
    c.num_key_value_heads = r.get_int({"num_key_value_heads"}, int64_t{1});
    c.head_dim = r.get_int({"head_dim"});
    c.q_lora_rank = r.get_int({"q_lora_rank"});
    c.o_groups = r.get_int({"o_groups"});
    c.o_lora_rank = r.get_int({"o_lora_rank"});
    c.sliding_window = r.get_int({"sliding_window", "window_size"}, int64_t{128});

    // Rotary dims: qk_rope_head_dim / rope_head_dim, or HF's partial_rotary_factor.
    if (auto rope_dim = r.opt_int({"qk_rope_head_dim", "rope_head_dim"})) {
        c.qk_rope_head_dim = *rope_dim;
        if (const json* f = r.find({"partial_rotary_factor"})) {
            DI_CHECK(f->is_number() && std::fabs(f->get<double>() * static_cast<double>(c.head_dim) -
                                                 static_cast<double>(c.qk_rope_head_dim)) < 1e-6,
                     source, ": keys 'qk_rope_head_dim' (", c.qk_rope_head_dim, ") and 'partial_rotary_factor' (",
                     short_value(*f), ") disagree");
        }
    } else {
        double factor = r.get_double({"partial_rotary_factor"}, 64.0 / 512.0);
        c.qk_rope_head_dim = static_cast<int64_t>(std::llround(factor * static_cast<double>(c.head_dim)));
    }

    // ---- MoE ----
    c.n_routed_experts = r.get_int({"n_routed_experts", "num_local_experts"});
    c.n_shared_experts = r.get_int({"n_shared_experts"}, int64_t{1});
    c.num_experts_per_tok = r.get_int({"num_experts_per_tok", "n_activated_experts"});
    c.moe_intermediate_size = r.get_int({"moe_intermediate_size", "moe_inter_dim"});
    c.scoring_func = r.get_string({"scoring_func", "score_func"}, "sqrtsoftplus");
    c.topk_method = r.get_string({"topk_method"}, "noaux_tc");
    c.routed_scaling_factor = r.get_double({"routed_scaling_factor", "route_scale"}, 1.0);
    c.norm_topk_prob = r.get_bool({"norm_topk_prob"}, true);
    c.swiglu_limit = r.get_double({"swiglu_limit"}, 0.0);

    c.rms_norm_eps = r.get_double({"rms_norm_eps", "norm_eps"}, 1e-6);
    c.hc_mult = r.get_int({"hc_mult"}, int64_t{4});
    c.hc_sinkhorn_iters = r.get_int({"hc_sinkhorn_iters"}, int64_t{20});
    c.hc_eps = r.get_double({"hc_eps"}, 1e-6);

    c.index_n_heads = r.get_int({"index_n_heads"}, int64_t{64});
    c.index_head_dim = r.get_int({"index_head_dim"}, int64_t{128});
    c.index_topk = r.get_int({"index_topk"}, int64_t{512});
    c.num_nextn_predict_layers = r.get_int({"num_nextn_predict_layers", "n_mtp_layers"}, int64_t{0});
    c.max_position_embeddings = r.get_int({"max_position_embeddings"}, int64_t{1048576});
    c.dspark_block_size = r.get_int({"dspark_block_size"}, int64_t{5});
    c.dspark_noise_token_id = r.get_int({"dspark_noise_token_id"}, int64_t{128799});
    if (auto targets = r.opt_int_list({"dspark_target_layer_ids"})) {
        c.dspark_target_layer_ids = *targets;
    } else {  // the 0731 release taps the outputs of the last three layers (40, 41, 42 of 43)
        for (int64_t l = std::max<int64_t>(0, c.num_hidden_layers - 3); l < c.num_hidden_layers; ++l)
            c.dspark_target_layer_ids.push_back(l);
    }
    c.dspark_markov_rank = r.get_int({"dspark_markov_rank"}, int64_t{256});
    c.dspark_n_routed_experts = r.get_int({"dspark_n_routed_experts"}, c.n_routed_experts);
    c.dspark_num_experts_per_tok =
        r.get_int({"dspark_num_experts_per_tok", "dspark_n_activated_experts"}, c.num_experts_per_tok);
    c.tie_word_embeddings = r.get_bool({"tie_word_embeddings"}, false);
    c.bos_token_id = r.get_int({"bos_token_id"}, int64_t{0});
    if (const json* eos = r.find({"eos_token_id"})) {
        if (eos->is_array()) {
            for (const json& e : *eos) c.eos_token_ids.push_back(r.as_int(e, "eos_token_id"));
        } else {
            c.eos_token_ids.push_back(r.as_int(*eos, "eos_token_id"));
        }
    } else {
        c.eos_token_ids.push_back(1);
    }
    c.torch_dtype = r.get_string({"torch_dtype", "dtype"}, "bfloat16");
    c.hidden_act = r.get_string({"hidden_act"}, "silu");
    c.expert_dtype = r.get_string({"expert_dtype"}, "");

    // ---- Quantization: HF quantization_config, or DeepSeek's dtype/scale_fmt keys ----
    if (const json* q = r.find({"quantization_config"})) {
        DI_CHECK(q->is_object(), source, ": key 'quantization_config' must be an object, got ", short_value(*q));
        Reader qr(*q, source, "quantization_config.");
        c.quantization.quant_method = qr.get_string({"quant_method"}, "");
        c.quantization.fmt = qr.get_string({"fmt"}, "e4m3");
        c.quantization.scale_fmt = qr.get_string({"scale_fmt"}, "");
        c.quantization.activation_scheme = qr.get_string({"activation_scheme"}, "dynamic");
        if (const json* b = qr.find({"weight_block_size"})) {
            DI_CHECK(b->is_array() && b->size() == 2, source,
                     ": key 'quantization_config.weight_block_size' must be a list of two integers, got ",
                     short_value(*b));
            c.quantization.weight_block_rows = qr.as_int((*b)[0], "weight_block_size");
            c.quantization.weight_block_cols = qr.as_int((*b)[1], "weight_block_size");
        }
        if (c.expert_dtype.empty()) c.expert_dtype = qr.get_string({"expert_dtype"}, "");
    } else if (root.contains("dtype") && root["dtype"] == "fp8") {
        c.quantization.quant_method = "fp8";
        c.quantization.fmt = "e4m3";
        c.quantization.scale_fmt = r.get_string({"scale_fmt"}, "");
        c.torch_dtype = "bfloat16";
    }
    DI_CHECK(c.quantization.quant_method.empty() || c.quantization.quant_method == "fp8", source,
             ": quantization_config.quant_method \"", c.quantization.quant_method,
             "\" is not supported (expected \"fp8\")");
    DI_CHECK(c.quantization.scale_fmt.empty() || c.quantization.scale_fmt == "ue8m0", source,
             ": scale_fmt \"", c.quantization.scale_fmt, "\" is not supported (expected \"ue8m0\")");
    DI_CHECK(c.expert_dtype.empty() || c.expert_dtype == "fp4" || c.expert_dtype == "fp8", source,
             ": expert_dtype \"", c.expert_dtype, "\" is not supported (expected \"fp4\" or \"fp8\")");

    // ---- Attention schedule: layer_types (HF) or compress_ratios (legacy / DeepSeek) ----
    if (const json* rates = r.find({"compress_rates"})) {
        DI_CHECK(rates->is_object(), source, ": key 'compress_rates' must be an object, got ", short_value(*rates));
        Reader rr(*rates, source, "compress_rates.");
        c.compress_rate_csa = rr.get_int({"compressed_sparse_attention"}, int64_t{4});
        c.compress_rate_hca = rr.get_int({"heavily_compressed_attention"}, int64_t{128});
    }
    c.compress_rate_csa = r.get_int({"compress_rate_csa"}, c.compress_rate_csa);
    c.compress_rate_hca = r.get_int({"compress_rate_hca"}, c.compress_rate_hca);
    require_range(source, "compress_rates.compressed_sparse_attention", c.compress_rate_csa, 2, 1 << 16);
    require_range(source, "compress_rates.heavily_compressed_attention", c.compress_rate_hca, 2, 1 << 16);
    DI_CHECK(c.compress_rate_csa != c.compress_rate_hca, source, ": CSA and HCA compress rates must differ, both are ",
             c.compress_rate_csa);

    require_range(source, "num_hidden_layers", c.num_hidden_layers, 1, 4096);
    const size_t num_layers = static_cast<size_t>(c.num_hidden_layers);
    if (const json* lt = r.find({"layer_types"})) {
        DI_CHECK(lt->is_array(), source, ": key 'layer_types' must be a list, got ", short_value(*lt));
        DI_CHECK(lt->size() >= num_layers, source, ": 'layer_types' has ", lt->size(),
                 " entries but num_hidden_layers is ", num_layers);
        for (size_t i = 0; i < num_layers; ++i) {
            DI_CHECK((*lt)[i].is_string(), source, ": layer_types[", i, "] must be a string, got ",
                     short_value((*lt)[i]));
            c.layer_types.push_back(attention_type_from_name((*lt)[i].get<std::string>(), source));
        }
    }
    if (const json* cr = r.find({"compress_ratios"})) {
        DI_CHECK(cr->is_array(), source, ": key 'compress_ratios' must be a list, got ", short_value(*cr));
        DI_CHECK(cr->size() >= num_layers, source, ": 'compress_ratios' has ", cr->size(),
                 " entries but num_hidden_layers is ", num_layers);
        std::vector<AttentionType> from_ratios;
        for (size_t i = 0; i < num_layers; ++i) {
            int64_t v = r.as_int((*cr)[i], "compress_ratios");
            if (v == 0) from_ratios.push_back(AttentionType::kSliding);
            else if (v == c.compress_rate_csa) from_ratios.push_back(AttentionType::kCsa);
            else if (v == c.compress_rate_hca) from_ratios.push_back(AttentionType::kHca);
            else
                DI_THROW(source, ": compress_ratios[", i, "] = ", v, " is none of 0, ", c.compress_rate_csa,
                         " (CSA), ", c.compress_rate_hca, " (HCA)");
        }
        if (c.layer_types.empty()) {
            c.layer_types = std::move(from_ratios);
        } else {
            DI_CHECK(c.layer_types == from_ratios, source, ": keys 'layer_types' and 'compress_ratios' disagree");
        }
    }
    if (c.layer_types.empty()) {
        // transformers' default when the config carries no schedule (a V4-Pro-style layout):
        // two HCA layers, then HCA/CSA alternating, starting with HCA.
        for (size_t i = 0; i < num_layers; ++i)
            c.layer_types.push_back(i >= 2 && (i - 2) % 2 == 1 ? AttentionType::kCsa : AttentionType::kHca);
    }

    // ---- MLP schedule: mlp_layer_types (HF) or num_hash_layers / n_hash_layers ----
    std::optional<int64_t> num_hash = r.opt_int({"num_hash_layers", "n_hash_layers"});
    if (const json* mt = r.find({"mlp_layer_types"})) {
        DI_CHECK(mt->is_array() && mt->size() >= num_layers, source,
                 ": key 'mlp_layer_types' must be a list of at least ", num_layers, " strings, got ", short_value(*mt));
        for (size_t i = 0; i < num_layers; ++i) {
            const json& e = (*mt)[i];
            DI_CHECK(e.is_string() && (e == "hash_moe" || e == "moe"), source, ": mlp_layer_types[", i,
                     "] must be \"hash_moe\" or \"moe\", got ", short_value(e));
            c.mlp_layer_types.push_back(e == "hash_moe" ? MlpType::kHashMoe : MlpType::kMoe);
        }
        if (num_hash) {
            DI_CHECK(*num_hash == c.num_hash_layers(), source, ": keys 'mlp_layer_types' (", c.num_hash_layers(),
                     " hash layers) and 'num_hash_layers' (", *num_hash, ") disagree");
        }
    } else {
        int64_t n = num_hash.value_or(3);
        require_range(source, "num_hash_layers", n, 0, c.num_hidden_layers);
        for (size_t i = 0; i < num_layers; ++i)
            c.mlp_layer_types.push_back(static_cast<int64_t>(i) < n ? MlpType::kHashMoe : MlpType::kMoe);
    }

    // ---- RoPE. Layouts: nested rope_parameters {main, compress}; flat rope_parameters;
    //      legacy rope_scaling; or DeepSeek's rope_factor / original_seq_len / beta_* keys. ----
    const double rope_theta = r.get_double({"rope_theta"}, 10000.0);
    const double compress_theta = r.get_double({"compress_rope_theta"}, 160000.0);
    c.rope_main = RopeParams{};
    c.rope_main.rope_theta = rope_theta;
    c.rope_compress = RopeParams{};
    c.rope_compress.rope_theta = compress_theta;
    const json* rp = r.find({"rope_parameters"});
    const json* rs = r.find({"rope_scaling"});
    if (rp) DI_CHECK(rp->is_object(), source, ": key 'rope_parameters' must be an object, got ", short_value(*rp));
    if (rs) DI_CHECK(rs->is_object(), source, ": key 'rope_scaling' must be an object, got ", short_value(*rs));
    if (rp && rp->contains("main") && rp->contains("compress")) {
        DI_CHECK((*rp)["main"].is_object() && (*rp)["compress"].is_object(), source,
                 ": rope_parameters.main and rope_parameters.compress must be objects");
        c.rope_main = read_rope((*rp)["main"], source, "rope_parameters.main.", rope_theta);
        c.rope_compress = read_rope((*rp)["compress"], source, "rope_parameters.compress.", compress_theta);
        DI_CHECK(!c.rope_main.is_yarn(), source,
                 ": rope_parameters.main uses YaRN; V4 applies YaRN only to compressed layers");
    } else if (rp || rs) {
        // A flat set describes the compressed layers' scaling (YaRN applies only to CSA/HCA).
        const json& flat = rp ? *rp : *rs;
        c.rope_compress = read_rope(flat, source, rp ? "rope_parameters." : "rope_scaling.", compress_theta);
        c.rope_compress.rope_theta = compress_theta;
        if (rp && rs) {
            RopeParams other = read_rope(*rs, source, "rope_scaling.", compress_theta);
            DI_CHECK(other.rope_type == c.rope_compress.rope_type && other.factor == c.rope_compress.factor &&
                         other.original_max_position_embeddings ==
                             c.rope_compress.original_max_position_embeddings,
                     source, ": keys 'rope_parameters' and 'rope_scaling' disagree");
        }
    } else if (root.contains("rope_factor")) {
        c.rope_compress.factor = r.get_double({"rope_factor"}, 1.0);
        c.rope_compress.original_max_position_embeddings = r.get_int({"original_seq_len"}, int64_t{0});
        c.rope_compress.beta_fast = r.get_double({"beta_fast"}, 32.0);
        c.rope_compress.beta_slow = r.get_double({"beta_slow"}, 1.0);
        if (c.rope_compress.factor > 1.0 && c.rope_compress.original_max_position_embeddings > 0)
            c.rope_compress.rope_type = "yarn";
    }

    validate_model_config(c, source);
    return c;
}

ModelConfig load_model_config(const std::string& path) {
    return parse_model_config(config_json::read_config_file(path), path);
}

void validate_model_config(const ModelConfig& c, std::string_view source) {
    auto positive = [&](std::string_view key, int64_t v, int64_t hi = int64_t{1} << 32) {
        require_range(source, key, v, 1, hi);
    };
    positive("vocab_size", c.vocab_size);
    positive("hidden_size", c.hidden_size, 1 << 20);
    positive("num_attention_heads", c.num_attention_heads, 1 << 16);
    positive("head_dim", c.head_dim, 1 << 16);
    positive("q_lora_rank", c.q_lora_rank, 1 << 20);
    positive("o_groups", c.o_groups, 1 << 16);
    positive("o_lora_rank", c.o_lora_rank, 1 << 20);
    positive("sliding_window", c.sliding_window, 1 << 24);
    positive("n_routed_experts", c.n_routed_experts, 1 << 16);
    positive("num_experts_per_tok", c.num_experts_per_tok, c.n_routed_experts);
    positive("moe_intermediate_size", c.moe_intermediate_size, 1 << 24);
    positive("hc_mult", c.hc_mult, 64);
    positive("max_position_embeddings", c.max_position_embeddings, int64_t{1} << 40);
    require_range(source, "hc_sinkhorn_iters", c.hc_sinkhorn_iters, 0, 1 << 16);
    require_range(source, "num_key_value_heads", c.num_key_value_heads, 1, 1);
    require_range(source, "n_shared_experts", c.n_shared_experts, 1, 1);
    require_range(source, "num_nextn_predict_layers", c.num_nextn_predict_layers, 0, 16);
    require_range(source, "qk_rope_head_dim", c.qk_rope_head_dim, 2, c.head_dim);
    positive("dspark_block_size", c.dspark_block_size, 1024);
    positive("dspark_markov_rank", c.dspark_markov_rank, 1 << 16);
    positive("dspark_n_routed_experts", c.dspark_n_routed_experts, 1 << 16);
    positive("dspark_num_experts_per_tok", c.dspark_num_experts_per_tok, c.dspark_n_routed_experts);
    for (int64_t t : c.dspark_target_layer_ids)
        DI_CHECK(t >= 0 && t < c.num_hidden_layers, source, ": dspark_target_layer_ids entry ", t,
                 " is outside [0, ", c.num_hidden_layers, ")");
    DI_CHECK(c.qk_rope_head_dim % 2 == 0, source, ": qk_rope_head_dim = ", c.qk_rope_head_dim, " must be even");
    DI_CHECK((c.num_attention_heads * c.head_dim) % c.o_groups == 0, source, ": num_attention_heads*head_dim = ",
             c.num_attention_heads * c.head_dim, " is not divisible by o_groups = ", c.o_groups);
    bool any_csa = false;
    for (AttentionType t : c.layer_types) any_csa |= t == AttentionType::kCsa;
    if (any_csa) {
        positive("index_n_heads", c.index_n_heads, 1 << 16);
        positive("index_head_dim", c.index_head_dim, 1 << 16);
        positive("index_topk", c.index_topk, int64_t{1} << 32);
        DI_CHECK(c.index_head_dim >= c.qk_rope_head_dim, source, ": index_head_dim = ", c.index_head_dim,
                 " is smaller than qk_rope_head_dim = ", c.qk_rope_head_dim);
    }
    DI_CHECK(c.layer_types.size() == static_cast<size_t>(c.num_hidden_layers), source, ": the layer schedule has ",
             c.layer_types.size(), " entries for ", c.num_hidden_layers, " layers");
    DI_CHECK(c.mlp_layer_types.size() == static_cast<size_t>(c.num_hidden_layers), source,
             ": the MLP schedule has ", c.mlp_layer_types.size(), " entries for ", c.num_hidden_layers, " layers");
    DI_CHECK(c.scoring_func == "sqrtsoftplus" || c.scoring_func == "softmax" || c.scoring_func == "sigmoid", source,
             ": scoring_func \"", c.scoring_func, "\" is not one of sqrtsoftplus, softmax, sigmoid");
    DI_CHECK(c.hidden_act == "silu", source, ": hidden_act \"", c.hidden_act, "\" is not supported (expected silu)");
    DI_CHECK(c.rms_norm_eps > 0 && c.rms_norm_eps < 1, source, ": rms_norm_eps = ", c.rms_norm_eps,
             " is out of range (0, 1)");
    DI_CHECK(c.swiglu_limit >= 0, source, ": swiglu_limit = ", c.swiglu_limit, " must be >= 0");
    for (const RopeParams* p : {&c.rope_main, &c.rope_compress}) {
        DI_CHECK(p->rope_theta > 0, source, ": rope_theta = ", p->rope_theta, " must be positive");
        if (p->is_yarn()) {
            DI_CHECK(p->factor >= 1.0, source, ": YaRN factor = ", p->factor, " must be >= 1");
            DI_CHECK(p->original_max_position_embeddings > 0, source,
                     ": YaRN needs original_max_position_embeddings > 0, got ", p->original_max_position_embeddings);
        }
    }
    if (c.quantization.is_fp8()) {
        positive("quantization_config.weight_block_size[0]", c.quantization.weight_block_rows, 1 << 16);
        positive("quantization_config.weight_block_size[1]", c.quantization.weight_block_cols, 1 << 16);
    }
    for (int64_t eos : c.eos_token_ids) require_range(source, "eos_token_id", eos, 0, c.vocab_size - 1);
    require_range(source, "bos_token_id", c.bos_token_id, 0, c.vocab_size - 1);
}

std::string describe_model_config(const ModelConfig& c) {
    std::ostringstream os;
    os << "architecture        " << c.architecture << " (" << c.model_type << ")\n";
    os << "vocab_size          " << c.vocab_size << "\n";
    os << "hidden_size         " << c.hidden_size << "\n";
    os << "layers              " << c.num_hidden_layers << " (+" << c.num_nextn_predict_layers << " MTP)\n";
    os << "attention           " << c.num_attention_heads << " heads x " << c.head_dim << " (rope "
       << c.qk_rope_head_dim << "), q_lora_rank " << c.q_lora_rank << ", o_groups " << c.o_groups
       << " x o_lora_rank " << c.o_lora_rank << ", sliding_window " << c.sliding_window << "\n";
    os << "compress rates      csa " << c.compress_rate_csa << ", hca " << c.compress_rate_hca << "; indexer "
       << c.index_n_heads << " heads x " << c.index_head_dim << ", top-k " << c.index_topk << "\n";
    os << "moe                 " << c.n_routed_experts << " experts, top-" << c.num_experts_per_tok << ", width "
       << c.moe_intermediate_size << ", " << c.n_shared_experts << " shared, " << c.scoring_func << ", scale "
       << c.routed_scaling_factor << ", swiglu_limit " << c.swiglu_limit << ", hash layers "
       << c.num_hash_layers() << "\n";
    os << "hyper-connections   hc_mult " << c.hc_mult << ", sinkhorn " << c.hc_sinkhorn_iters << " iters\n";
    auto rope = [](const RopeParams& p) {
        std::ostringstream r;
        r << "theta " << p.rope_theta;
        if (p.is_yarn())
            r << ", yarn factor " << p.factor << " orig " << p.original_max_position_embeddings << " beta "
              << p.beta_fast << "/" << p.beta_slow;
        return r.str();
    };
    os << "rope main           " << rope(c.rope_main) << "\n";
    os << "rope compress       " << rope(c.rope_compress) << "\n";
    os << "quantization        "
       << (c.quantization.is_fp8() ? "fp8 e4m3 " + std::to_string(c.quantization.weight_block_rows) + "x" +
                                         std::to_string(c.quantization.weight_block_cols) + " blocks, scales " +
                                         (c.quantization.scale_fmt.empty() ? "f32" : c.quantization.scale_fmt)
                                   : std::string("none"))
       << "; experts " << (c.expert_dtype.empty() ? "same as linears" : c.expert_dtype) << "\n";
    os << "max_position        " << c.max_position_embeddings << "\n";
    return os.str();
}

}  // namespace deepinfer
