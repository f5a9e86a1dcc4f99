// SPDX-License-Identifier: Apache-2.0
// config.json -> V41ModelConfig (spec §1; transformers' DeepseekV41Config / DeepseekV41TextConfig).
// Reads the composite layout (text_config, vision_config, root quantization_config and ids) or a
// flat deepseek_v41_text config, with DeepSeek's inference names as aliases; a key given under two
// names must agree. Schedule defaults that transformers derives (compress_ratios padding for the
// drafter, candidate_source_layer_id) are applied as transformers does; the schedule lists
// themselves are required (spec §1.2 pitfall). Every error names the file, the key and the value.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "deepinfer/check.h"
#include "model/config_json.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using config_json::list_str;
using config_json::read_rope;
using config_json::Reader;
using config_json::require_range;
using config_json::short_value;

V41TextConfig read_text(const json& obj, std::string_view source, const std::string& prefix) {
    Reader r(obj, source, prefix);
    V41TextConfig c;
    const std::string model_type = r.get_string({"model_type"}, "deepseek_v41_text");
    DI_CHECK(model_type == "deepseek_v41_text", source, ": key '", prefix, "model_type' = \"", model_type,
             "\" is not supported (expected \"deepseek_v41_text\")");

    c.vocab_size = r.get_int({"vocab_size"}, std::nullopt);
    c.hidden_size = r.get_int({"hidden_size", "dim"}, std::nullopt);
    c.num_hidden_layers = r.get_int({"num_hidden_layers", "n_layers"}, std::nullopt);
    c.num_attention_heads = r.get_int({"num_attention_heads", "n_heads"}, std::nullopt);
    c.num_key_value_heads = r.get_int({"num_key_value_heads"}, 1);
    c.head_dim = r.get_int({"head_dim"}, std::nullopt);
    c.qk_rope_head_dim = r.get_int({"qk_rope_head_dim", "rope_head_dim"}, std::nullopt);
    c.q_lora_rank = r.get_int({"q_lora_rank"}, std::nullopt);
    c.o_groups = r.get_int({"o_groups"}, std::nullopt);
    c.o_lora_rank = r.get_int({"o_lora_rank"}, std::nullopt);
    c.sliding_window = r.get_int({"sliding_window", "window_size"}, std::nullopt);
    c.attention_bias = r.get_bool({"attention_bias"}, false);

    c.num_nextn_predict_layers = r.get_int({"num_nextn_predict_layers", "n_mtp_layers"}, 3);
    require_range(source, r.key("num_hidden_layers"), c.num_hidden_layers, 1, 4096);
    require_range(source, r.key("num_nextn_predict_layers"), c.num_nextn_predict_layers, 0, 16);

    // compress_ratios: backbone entries, then (optionally) the drafter's, padded with 0 as transformers.
    const int64_t n = c.num_hidden_layers, n_draft = c.num_nextn_predict_layers;
    std::vector<int64_t> ratios = r.get_int_list({"compress_ratios"});
    DI_CHECK(int64_t(ratios.size()) >= n && int64_t(ratios.size()) <= n + n_draft, source, ": key '",
             r.key("compress_ratios"), "' has ", ratios.size(), " entries; expected num_hidden_layers (", n,
             ") to num_hidden_layers + num_nextn_predict_layers (", n + n_draft, ")");
    ratios.resize(size_t(n + n_draft), 0);
    c.compress_ratios = ratios;
    c.kv_source_layer_ids = r.get_int_list({"kv_source_layer_ids", "kv_source_layers"});
    c.index_source_layer_ids = r.get_int_list({"index_source_layer_ids", "index_source_layers"});
    const std::optional<int64_t> candidate = r.opt_int({"candidate_source_layer_id", "candidate_source_layer"});
    c.candidate_source_layer_id = candidate ? *candidate
                                            : (c.kv_source_layer_ids.empty() ? -1 : c.kv_source_layer_ids.back());
    if (c.candidate_source_layer_id < 0) c.candidate_source_layer_id = -1;
    c.candidate_topk_blocks = r.get_int({"candidate_topk_blocks"}, 2048);
    c.candidate_block_size = r.get_int({"candidate_block_size"}, 8);
    c.index_n_heads = r.get_int({"index_n_heads"}, std::nullopt);
    c.index_head_dim = r.get_int({"index_head_dim"}, std::nullopt);
    c.index_topk = r.get_int({"index_topk"}, std::nullopt);

    // layer_types (transformers writes it): only a consistency check against kv_source_layer_ids.
    if (const json* lt = r.find({"layer_types"})) {
        DI_CHECK(lt->is_array() && int64_t(lt->size()) == n, source, ": key '", r.key("layer_types"),
                 "' must be a list of num_hidden_layers (", n, ") strings, got ", short_value(*lt));
        for (int64_t i = 0; i < n; ++i) {
            const json& e = (*lt)[size_t(i)];
            const bool source_layer = std::count(c.kv_source_layer_ids.begin(), c.kv_source_layer_ids.end(), i) > 0;
            const char* want = source_layer ? "shared_compressed_attention" : "sliding_attention";
            DI_CHECK(e.is_string() && e.get<std::string>() == want, source, ": ", r.key("layer_types"), "[", i,
                     "] = ", short_value(e), " but kv_source_layer_ids ", list_str(c.kv_source_layer_ids),
                     " makes it \"", want, "\"");
        }
    }

    c.n_routed_experts = r.get_int({"n_routed_experts"}, std::nullopt);
    c.n_shared_experts = r.get_int({"n_shared_experts"}, 1);
    c.num_experts_per_tok = r.get_int({"num_experts_per_tok", "n_activated_experts"}, std::nullopt);
    c.moe_intermediate_size = r.get_int({"moe_intermediate_size", "moe_inter_dim"}, std::nullopt);
    c.scoring_func = r.get_string({"scoring_func", "score_func"}, "sqrtsoftplus");
    c.topk_method = r.get_string({"topk_method"}, "noaux_tc");
    c.norm_topk_prob = r.get_bool({"norm_topk_prob"}, true);
    c.routed_scaling_factor = r.get_double({"routed_scaling_factor", "route_scale"}, 1.5);
    c.gate_temp = r.get_double({"gate_temp"}, 1.0);
    c.swiglu_limit = r.get_double({"swiglu_limit"}, 10.0);
    c.hidden_act = r.get_string({"hidden_act"}, "silu");
    const int64_t num_hash_layers = r.get_int({"num_hash_layers", "n_hash_layers"}, 0);
    DI_CHECK(num_hash_layers == 0, source, ": key '", r.key("num_hash_layers"), "' = ", num_hash_layers,
             " is not supported: V4.1 has no hash-routed layers");

    c.rms_norm_eps = r.get_double({"rms_norm_eps", "norm_eps"}, 1e-20);
    c.hc_mult = r.get_int({"hc_mult"}, 4);
    c.hc_sinkhorn_iters = r.get_int({"hc_sinkhorn_iters"}, 20);
    c.hc_eps = r.get_double({"hc_eps"}, 1e-6);
    c.max_position_embeddings = r.get_int({"max_position_embeddings"}, 1048576);
    c.tie_word_embeddings = r.get_bool({"tie_word_embeddings"}, false);

    // RoPE: nested rope_parameters {main, compress} (transformers' saved form) or rope_theta +
    // compress_rope_theta + rope_scaling (the published form; YaRN on the compress set only).
    const double theta = r.get_double({"rope_theta"}, 10000.0);
    const double compress_theta = r.get_double({"compress_rope_theta"}, 160000.0);
    const json* rp = r.find({"rope_parameters"});
    if (rp && rp->is_object() && rp->contains("main") && rp->contains("compress")) {
        DI_CHECK((*rp)["main"].is_object() && (*rp)["compress"].is_object(), source, ": key '",
                 r.key("rope_parameters"), "' must hold objects 'main' and 'compress', got ", short_value(*rp));
        c.rope_main = read_rope((*rp)["main"], source, prefix + "rope_parameters.main.", theta);
        c.rope_compress = read_rope((*rp)["compress"], source, prefix + "rope_parameters.compress.", compress_theta);
    } else {
        c.rope_main.rope_theta = theta;
        if (const json* rs = r.find({"rope_scaling"})) {
            DI_CHECK(rs->is_object(), source, ": key '", r.key("rope_scaling"), "' must be an object, got ",
                     short_value(*rs));
            c.rope_compress = read_rope(*rs, source, prefix + "rope_scaling.", compress_theta);
            c.rope_compress.rope_theta = compress_theta;
        } else {
            c.rope_compress.rope_theta = compress_theta;
        }
    }
    DI_CHECK(!c.rope_main.is_yarn(), source, ": the main RoPE set must not use YaRN (V4.1 applies it to compressed "
             "layers only)");

    c.engram_layer_ids = r.opt_int_list({"engram_layer_ids"}).value_or(std::vector<int64_t>{});
    c.engram_num_embeddings = r.opt_int_list({"engram_num_embeddings"})
                                  .value_or(std::vector<int64_t>(c.engram_layer_ids.size(), 0));
    c.engram_vocab_size = r.get_int({"engram_vocab_size"}, 16000000);
    c.engram_max_ngram_size = r.get_int({"engram_max_ngram_size"}, 4);
    c.engram_n_heads = r.get_int({"engram_n_heads"}, 8);
    c.engram_head_dim = r.get_int({"engram_head_dim"}, 256);
    c.engram_pad_id = r.get_int({"engram_pad_id", "engram_pad_token_id"}, 2);
    c.engram_compressed_vocab_size = r.get_int({"engram_compressed_vocab_size"}, 99092);

    c.dspark_block_size = r.get_int({"dspark_block_size"}, 5);
    c.dspark_noise_token_id = r.get_int({"dspark_noise_token_id"}, 128799);
    if (auto targets = r.opt_int_list({"dspark_target_layer_ids"})) {
        c.dspark_target_layer_ids = *targets;
    } else {  // transformers: the last three layers that are not KV sources
        for (int64_t i = 0; i < n; ++i)
            if (std::count(c.kv_source_layer_ids.begin(), c.kv_source_layer_ids.end(), i) == 0)
                c.dspark_target_layer_ids.push_back(i);
        if (c.dspark_target_layer_ids.size() > 3)
            c.dspark_target_layer_ids.erase(c.dspark_target_layer_ids.begin(), c.dspark_target_layer_ids.end() - 3);
    }
    c.dspark_markov_rank = r.get_int({"dspark_markov_rank"}, 256);
    c.dspark_n_routed_experts = r.get_int({"dspark_n_routed_experts"}, 128);
    c.dspark_num_experts_per_tok = r.get_int({"dspark_num_experts_per_tok", "dspark_n_activated_experts"}, 3);
    return c;
}

V41VisionConfig read_vision(const json& obj, std::string_view source) {
    Reader r(obj, source, "vision_config.");
    const std::string model_type = r.get_string({"model_type"}, "deepseek_v41_vision");
    DI_CHECK(model_type == "deepseek_v41_vision", source, ": key 'vision_config.model_type' = \"", model_type,
             "\" is not supported (expected \"deepseek_v41_vision\")");
    V41VisionConfig v;
    v.hidden_size = r.get_int({"hidden_size"}, v.hidden_size);
    v.intermediate_size = r.get_int({"intermediate_size"}, v.intermediate_size);
    v.num_hidden_layers = r.get_int({"num_hidden_layers"}, v.num_hidden_layers);
    v.num_attention_heads = r.get_int({"num_attention_heads"}, v.num_attention_heads);
    v.patch_size = r.get_int({"patch_size"}, v.patch_size);
    v.downsample_ratio = r.get_int({"downsample_ratio"}, v.downsample_ratio);
    v.rope_theta = r.get_double({"rope_theta"}, v.rope_theta);
    v.max_image_tokens = r.get_int({"max_image_tokens"}, v.max_image_tokens);
    v.min_pixels = r.get_int({"min_pixels"}, v.min_pixels);
    v.max_wh_ratio = r.get_int({"max_wh_ratio"}, 0);
    return v;
}

void read_special_ids(const Reader& r, V41ModelConfig& c) {
    c.bos_token_id = r.get_int({"bos_token_id"}, c.bos_token_id);
    c.pad_token_id = r.get_int({"pad_token_id"}, c.pad_token_id);
    if (const json* eos = r.find({"eos_token_id"})) {
        c.eos_token_ids.clear();
        if (eos->is_array()) {
            for (const json& e : *eos) c.eos_token_ids.push_back(r.as_int(e, "eos_token_id"));
        } else {
            c.eos_token_ids.push_back(r.as_int(*eos, "eos_token_id"));
        }
    }
}

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

std::string_view csa_mode_name(CsaMode mode) {
    switch (mode) {
        case CsaMode::kWindowOnly: return "window";
        case CsaMode::kFull: return "full";
        case CsaMode::kReindex: return "reindex";
        case CsaMode::kReuse: return "reuse";
    }
    return "?";
}

bool V41TextConfig::is_kv_source(int64_t layer) const { return contains(kv_source_layer_ids, layer); }
bool V41TextConfig::is_index_source(int64_t layer) const { return contains(index_source_layer_ids, layer); }

int64_t V41TextConfig::kv_source(int64_t layer) const {
    if (compress_ratio(layer) == 0) return -1;
    int64_t best = -1;
    for (int64_t s : kv_source_layer_ids)
        if (s <= layer) best = std::max(best, s);
    return best;
}

int64_t V41TextConfig::index_source(int64_t layer) const {
    if (compress_ratio(layer) == 0) return -1;
    int64_t best = -1;
    for (int64_t s : index_source_layer_ids)
        if (s <= layer) best = std::max(best, s);
    return best;
}

CsaMode V41TextConfig::csa_mode(int64_t layer) const {
    if (compress_ratio(layer) == 0) return CsaMode::kWindowOnly;
    if (is_kv_source(layer)) return CsaMode::kFull;
    if (is_index_source(layer)) return CsaMode::kReindex;
    return CsaMode::kReuse;
}

int64_t V41TextConfig::engram_index(int64_t layer) const {
    auto it = std::find(engram_layer_ids.begin(), engram_layer_ids.end(), layer);
    return it == engram_layer_ids.end() ? -1 : int64_t(it - engram_layer_ids.begin());
}

bool is_v41_config(std::string_view json_text) {
    json root = json::parse(json_text.begin(), json_text.end(), nullptr, false);
    if (!root.is_object()) return false;
    const std::string model_type = root.value("model_type", "");
    if (model_type == "deepseek_v41" || model_type == "deepseek_v41_text") return true;
    if (root.contains("text_config") && root["text_config"].is_object() &&
        root["text_config"].value("model_type", "") == "deepseek_v41_text")
        return true;
    auto arch = root.find("architectures");
    return arch != root.end() && arch->is_array() && !arch->empty() && (*arch)[0] == "DeepseekV41ForCausalLM";
}

V41ModelConfig parse_v41_model_config(std::string_view json_text, std::string_view source) {
    json root;
    try {
        root = json::parse(json_text.begin(), json_text.end());
    } catch (const json::parse_error& e) {
        DI_THROW(source, ": not valid JSON (", e.what(), ")");
    }
    DI_CHECK(root.is_object(), source, ": the top level must be a JSON object");
    Reader top(root, source, "");
    V41ModelConfig c;
    c.model_type = top.get_string({"model_type"}, "deepseek_v41");
    if (const json* arch = top.find({"architectures"})) {
        DI_CHECK(arch->is_array() && !arch->empty() && (*arch)[0].is_string(), source,
                 ": key 'architectures' must be a non-empty list of strings, got ", short_value(*arch));
        c.architecture = (*arch)[0].get<std::string>();
    }
    c.torch_dtype = top.get_string({"dtype", "torch_dtype"}, "bfloat16");

    if (c.model_type == "deepseek_v41_text") {
        // A flat text config (transformers' DeepseekV41TextModel): everything at the root.
        c.text = read_text(root, source, "");
        read_special_ids(top, c);
    } else {
        DI_CHECK(c.model_type == "deepseek_v41", source, ": model_type \"", c.model_type,
                 "\" is not supported (expected \"deepseek_v41\" or \"deepseek_v41_text\")");
        DI_CHECK(c.architecture == "DeepseekV41ForCausalLM", source, ": architecture \"", c.architecture,
                 "\" is not supported (expected \"DeepseekV41ForCausalLM\")");
        const json* text = top.find({"text_config"});
        DI_CHECK(text && text->is_object(), source, ": key 'text_config' must be an object (the V4.1 text backbone)");
        c.text = read_text(*text, source, "text_config.");
        // Special ids: the text config's, overridden by the root's (the published config has them at the root).
        read_special_ids(Reader(*text, source, "text_config."), c);
        read_special_ids(top, c);
        if (const json* vision = top.find({"vision_config"})) {
            DI_CHECK(vision->is_object(), source, ": key 'vision_config' must be an object, got ", short_value(*vision));
            c.vision = read_vision(*vision, source);
        }
    }
    c.image_token_id = top.get_int({"image_token_id"}, c.image_token_id);

    if (const json* q = top.find({"quantization_config"})) {
        DI_CHECK(q->is_object(), source, ": key 'quantization_config' must be an object, got ", short_value(*q));
        Reader qr(*q, source, "quantization_config.");
        c.quantization.quant_method = qr.get_string({"quant_method"}, "");
        c.quantization.fmt = qr.get_string({"fmt"}, "e4m3");
        c.quantization.scale_fmt = qr.get_string({"scale_fmt"}, "");
        c.quantization.activation_scheme = qr.get_string({"activation_scheme"}, "dynamic");
        c.expert_dtype = qr.get_string({"expert_dtype"}, "");
        if (const json* b = qr.find({"weight_block_size"})) {
            DI_CHECK(b->is_array() && b->size() == 2, source,
                     ": key 'quantization_config.weight_block_size' must be [rows, cols], got ", short_value(*b));
            c.quantization.weight_block_rows = qr.as_int((*b)[0], "weight_block_size");
            c.quantization.weight_block_cols = qr.as_int((*b)[1], "weight_block_size");
        } else {
            c.quantization.weight_block_rows = c.quantization.weight_block_cols = 32;
        }
    }
    // V4 kept expert_dtype at the root; accept it there too (it must agree).
    if (const json* e = top.find({"expert_dtype"})) {
        DI_CHECK(e->is_string(), source, ": key 'expert_dtype' must be a string, got ", short_value(*e));
        DI_CHECK(c.expert_dtype.empty() || c.expert_dtype == e->get<std::string>(), source,
                 ": keys 'expert_dtype' and 'quantization_config.expert_dtype' disagree");
        c.expert_dtype = e->get<std::string>();
    }
    validate_v41_model_config(c, source);
    return c;
}

V41ModelConfig load_v41_model_config(const std::string& path) {
    return parse_v41_model_config(config_json::read_config_file(path), path);
}

void validate_v41_model_config(const V41ModelConfig& config, std::string_view source) {
    const V41TextConfig& c = config.text;
    const std::string p = config.model_type == "deepseek_v41_text" ? "" : "text_config.";
    auto range = [&](std::string_view key, int64_t v, int64_t lo, int64_t hi) {
        require_range(source, p + std::string(key), v, lo, hi);
    };
    range("vocab_size", c.vocab_size, 1, int64_t{1} << 24);
    range("hidden_size", c.hidden_size, 1, 1 << 16);
    range("num_hidden_layers", c.num_hidden_layers, 1, 4096);
    range("num_attention_heads", c.num_attention_heads, 1, 4096);
    range("num_key_value_heads", c.num_key_value_heads, 1, 1);
    range("head_dim", c.head_dim, 2, 1 << 14);
    range("qk_rope_head_dim", c.qk_rope_head_dim, 2, c.head_dim);
    DI_CHECK(c.qk_rope_head_dim % 2 == 0, source, ": key '", p, "qk_rope_head_dim' = ", c.qk_rope_head_dim,
             " must be even");
    range("q_lora_rank", c.q_lora_rank, 1, 1 << 16);
    range("o_groups", c.o_groups, 1, c.num_attention_heads * c.head_dim);
    range("o_lora_rank", c.o_lora_rank, 1, 1 << 16);
    DI_CHECK((c.num_attention_heads * c.head_dim) % c.o_groups == 0, source, ": num_attention_heads*head_dim = ",
             c.num_attention_heads * c.head_dim, " is not divisible by '", p, "o_groups' = ", c.o_groups);
    range("sliding_window", c.sliding_window, 1, 1 << 20);
    DI_CHECK(!c.attention_bias, source, ": key '", p, "attention_bias' = true is not supported");
    range("max_position_embeddings", c.max_position_embeddings, 1, int64_t{1} << 40);

    // ---- schedule (spec §1.3; transformers' __post_init__ rules plus engine rules) ----
    const int64_t n = c.num_hidden_layers;
    DI_CHECK(int64_t(c.compress_ratios.size()) == n + c.num_nextn_predict_layers, source, ": key '", p,
             "compress_ratios' has ", c.compress_ratios.size(), " entries, expected ", n + c.num_nextn_predict_layers);
    for (int64_t i = 0; i < int64_t(c.compress_ratios.size()); ++i) {
        const int64_t r = c.compress_ratios[size_t(i)];
        DI_CHECK(r >= 0 && r <= 4096, source, ": ", p, "compress_ratios[", i, "] = ", r, " is out of range [0, 4096]");
        DI_CHECK(i < n || r == 0, source, ": ", p, "compress_ratios[", i, "] = ", r,
                 " but DSpark draft layers (entries past num_hidden_layers) are window-only (0)");
    }
    auto check_ids = [&](std::string_view key, const std::vector<int64_t>& ids) {
        for (size_t k = 0; k < ids.size(); ++k) {
            DI_CHECK(ids[k] >= 0 && ids[k] < n, source, ": key '", p, key, "' = ", list_str(ids), ": entry ", ids[k],
                     " is out of range [0, ", n, ")");
            DI_CHECK(k == 0 || ids[k] > ids[k - 1], source, ": key '", p, key, "' = ", list_str(ids),
                     " must be strictly increasing");
        }
    };
    check_ids("kv_source_layer_ids", c.kv_source_layer_ids);
    check_ids("index_source_layer_ids", c.index_source_layer_ids);
    for (int64_t s : c.kv_source_layer_ids) {
        DI_CHECK(c.compress_ratio(s) > 0, source, ": key '", p, "kv_source_layer_ids' = ", list_str(c.kv_source_layer_ids),
                 ": layer ", s, " has compress ratio 0");
        DI_CHECK(c.is_index_source(s), source, ": key '", p, "kv_source_layer_ids' = ",
                 list_str(c.kv_source_layer_ids), ": layer ", s, " is not in index_source_layer_ids ",
                 list_str(c.index_source_layer_ids), " (a KV source must also publish index keys and a top-k)");
    }
    for (int64_t s : c.index_source_layer_ids)
        DI_CHECK(c.compress_ratio(s) > 0, source, ": key '", p, "index_source_layer_ids' = ",
                 list_str(c.index_source_layer_ids), ": layer ", s, " has compress ratio 0");
    for (int64_t l = 0; l < n; ++l) {
        if (c.compress_ratio(l) == 0) continue;
        const int64_t kv = c.kv_source(l);
        DI_CHECK(kv >= 0, source, ": layer ", l, " has compress ratio ", c.compress_ratio(l), " but no entry of '", p,
                 "kv_source_layer_ids' ", list_str(c.kv_source_layer_ids), " is at or before it");
        DI_CHECK(c.compress_ratio(kv) == c.compress_ratio(l), source, ": layer ", l, " has compress ratio ",
                 c.compress_ratio(l), " but its KV source, layer ", kv, ", has ratio ", c.compress_ratio(kv),
                 " (key '", p, "compress_ratios')");
        // The top-k a layer uses must index its own KV source's cache.
        DI_CHECK(c.index_source(l) >= kv, source, ": layer ", l, " would use the top-k of layer ", c.index_source(l),
                 ", which indexes another KV source than its own (layer ", kv, "); check '", p,
                 "index_source_layer_ids'");
    }
    if (c.candidate_source_layer_id >= 0) {
        DI_CHECK(c.is_index_source(c.candidate_source_layer_id), source, ": key '", p,
                 "candidate_source_layer_id' = ", c.candidate_source_layer_id, " must be in index_source_layer_ids ",
                 list_str(c.index_source_layer_ids));
        range("candidate_topk_blocks", c.candidate_topk_blocks, 1, int64_t{1} << 30);
        range("candidate_block_size", c.candidate_block_size, 1, 1 << 20);
    }
    if (!c.kv_source_layer_ids.empty()) {
        range("index_n_heads", c.index_n_heads, 1, 4096);
        range("index_head_dim", c.index_head_dim, c.qk_rope_head_dim, 1 << 14);
        range("index_topk", c.index_topk, 1, int64_t{1} << 30);
    }

    // ---- MoE ----
    range("n_routed_experts", c.n_routed_experts, 1, 1 << 16);
    range("n_shared_experts", c.n_shared_experts, 1, 1);
    range("num_experts_per_tok", c.num_experts_per_tok, 1, c.n_routed_experts);
    range("moe_intermediate_size", c.moe_intermediate_size, 1, 1 << 20);
    DI_CHECK(c.scoring_func == "sqrtsoftplus" || c.scoring_func == "softmax" || c.scoring_func == "sigmoid", source,
             ": key '", p, "scoring_func' = \"", c.scoring_func, "\" is not supported");
    DI_CHECK(c.topk_method == "noaux_tc", source, ": key '", p, "topk_method' = \"", c.topk_method,
             "\" is not supported (expected \"noaux_tc\")");
    DI_CHECK(c.hidden_act == "silu", source, ": key '", p, "hidden_act' = \"", c.hidden_act,
             "\" is not supported (expected \"silu\")");
    DI_CHECK(c.gate_temp > 0, source, ": key '", p, "gate_temp' = ", c.gate_temp, " must be positive");
    DI_CHECK(c.swiglu_limit >= 0, source, ": key '", p, "swiglu_limit' = ", c.swiglu_limit, " must be >= 0");
    DI_CHECK(c.routed_scaling_factor > 0, source, ": key '", p, "routed_scaling_factor' = ", c.routed_scaling_factor,
             " must be positive");

    // ---- norms, mHC, RoPE ----
    DI_CHECK(c.rms_norm_eps > 0 && c.rms_norm_eps < 1, source, ": key '", p, "rms_norm_eps' = ", c.rms_norm_eps,
             " must be in (0, 1)");
    range("hc_mult", c.hc_mult, 1, 64);
    range("hc_sinkhorn_iters", c.hc_sinkhorn_iters, 1, 1 << 16);
    DI_CHECK(c.hc_eps >= 0 && c.hc_eps < 1, source, ": key '", p, "hc_eps' = ", c.hc_eps, " must be in [0, 1)");
    for (const RopeParams* rope : {&c.rope_main, &c.rope_compress}) {
        DI_CHECK(rope->rope_theta > 0, source, ": RoPE theta = ", rope->rope_theta, " must be positive");
        if (rope->is_yarn()) {
            DI_CHECK(rope->factor >= 1.0, source, ": YaRN factor = ", rope->factor, " must be >= 1");
            DI_CHECK(rope->original_max_position_embeddings > 0, source,
                     ": YaRN original_max_position_embeddings must be positive");
        }
    }

    // ---- Engram ----
    DI_CHECK(c.engram_num_embeddings.size() == c.engram_layer_ids.size(), source, ": key '", p,
             "engram_num_embeddings' = ", list_str(c.engram_num_embeddings), " must have one entry per '", p,
             "engram_layer_ids' = ", list_str(c.engram_layer_ids));
    check_ids("engram_layer_ids", c.engram_layer_ids);
    if (!c.engram_layer_ids.empty()) {
        for (size_t k = 0; k < c.engram_num_embeddings.size(); ++k)
            DI_CHECK(c.engram_num_embeddings[k] > 0, source, ": key '", p, "engram_num_embeddings' = ",
                     list_str(c.engram_num_embeddings), ": entry ", k, " must be positive");
        range("engram_vocab_size", c.engram_vocab_size, 1, int64_t{1} << 40);
        range("engram_max_ngram_size", c.engram_max_ngram_size, 2, 16);
        range("engram_n_heads", c.engram_n_heads, 1, 1024);
        range("engram_head_dim", c.engram_head_dim, 1, 1 << 16);
        range("engram_pad_id", c.engram_pad_id, 0, c.vocab_size - 1);
        range("engram_compressed_vocab_size", c.engram_compressed_vocab_size, 1, int64_t{1} << 31);
    }

    // ---- DSpark ----
    if (c.num_nextn_predict_layers > 0) {
        range("dspark_block_size", c.dspark_block_size, 1, 1024);
        range("dspark_noise_token_id", c.dspark_noise_token_id, 0, c.vocab_size - 1);
        range("dspark_markov_rank", c.dspark_markov_rank, 1, 1 << 16);
        range("dspark_n_routed_experts", c.dspark_n_routed_experts, 1, 1 << 16);
        range("dspark_num_experts_per_tok", c.dspark_num_experts_per_tok, 1, c.dspark_n_routed_experts);
        for (int64_t t : c.dspark_target_layer_ids)
            DI_CHECK(t >= 0 && t < n, source, ": key '", p, "dspark_target_layer_ids' = ",
                     list_str(c.dspark_target_layer_ids), ": entry ", t, " is out of range [0, ", n, ")");
    }

    // ---- root ----
    require_range(source, "bos_token_id", config.bos_token_id, 0, c.vocab_size - 1);
    require_range(source, "pad_token_id", config.pad_token_id, 0, c.vocab_size - 1);
    DI_CHECK(!config.eos_token_ids.empty(), source, ": key 'eos_token_id' must not be empty");
    for (int64_t eos : config.eos_token_ids) require_range(source, "eos_token_id", eos, 0, c.vocab_size - 1);
    require_range(source, "image_token_id", config.image_token_id, 0, int64_t{1} << 24);
    const QuantizationConfig& q = config.quantization;
    DI_CHECK(q.quant_method.empty() || q.quant_method == "fp8", source, ": key 'quantization_config.quant_method' = \"",
             q.quant_method, "\" is not supported (expected \"fp8\")");
    if (q.is_fp8()) {
        DI_CHECK(q.fmt == "e4m3", source, ": key 'quantization_config.fmt' = \"", q.fmt, "\" is not supported");
        DI_CHECK(q.scale_fmt.empty() || q.scale_fmt == "ue8m0", source, ": key 'quantization_config.scale_fmt' = \"",
                 q.scale_fmt, "\" is not supported (expected \"ue8m0\")");
        require_range(source, "quantization_config.weight_block_size[0]", q.weight_block_rows, 1, 1 << 16);
        require_range(source, "quantization_config.weight_block_size[1]", q.weight_block_cols, 1, 1 << 16);
    }
    DI_CHECK(config.expert_dtype.empty() || config.expert_dtype == "fp4" || config.expert_dtype == "fp8", source,
             ": key 'quantization_config.expert_dtype' = \"", config.expert_dtype,
             "\" is not supported (expected \"fp4\" or \"fp8\")");
}

std::string describe_v41_model_config(const V41ModelConfig& config) {
    const V41TextConfig& c = config.text;
    std::ostringstream os;
    os << "architecture: " << config.architecture << " (" << config.model_type << ")\n";
    os << "hidden_size " << c.hidden_size << ", layers " << c.num_hidden_layers << " (+" << c.num_nextn_predict_layers
       << " DSpark), heads " << c.num_attention_heads << " x " << c.head_dim << ", q_lora_rank " << c.q_lora_rank
       << ", vocab " << c.vocab_size << "\n";
    int64_t counts[4] = {0, 0, 0, 0};
    os << "CSA2 schedule:";
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const CsaMode m = c.csa_mode(l);
        ++counts[int(m)];
        os << " " << l << ":" << csa_mode_name(m) << "/" << c.compress_ratio(l);
    }
    os << "\nCSA2 layers: " << counts[int(CsaMode::kFull)] << " full, " << counts[int(CsaMode::kReindex)]
       << " reindex, " << counts[int(CsaMode::kReuse)] << " reuse, " << counts[int(CsaMode::kWindowOnly)]
       << " window-only; candidate source " << c.candidate_source_layer_id << " (" << c.candidate_topk_blocks
       << " blocks of " << c.candidate_block_size << ")\n";
    os << "experts " << c.n_routed_experts << " (top " << c.num_experts_per_tok << ") x " << c.moe_intermediate_size
       << ", index " << c.index_n_heads << " x " << c.index_head_dim << " top " << c.index_topk << "\n";
    os << "engram layers " << list_str(c.engram_layer_ids) << ", rows " << list_str(c.engram_num_embeddings)
       << ", compressed vocab " << c.engram_compressed_vocab_size << "\n";
    os << "quantization: " << (config.quantization.quant_method.empty() ? "none" : config.quantization.quant_method)
       << " " << config.quantization.weight_block_rows << "x" << config.quantization.weight_block_cols
       << ", experts " << (config.expert_dtype.empty() ? "same" : config.expert_dtype) << "\n";
    return os.str();
}

}  // namespace deepinfer
