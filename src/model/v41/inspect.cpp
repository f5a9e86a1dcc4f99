// SPDX-License-Identifier: Apache-2.0
// Formats the inspection of a V4.1 checkpoint (spec deepseek-v41-model.md §1.3 schedule, §7 tensors).
#include "deepinfer/inspect_v41.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "deepinfer/inspect.h"
#include "deepinfer/weight_inventory_v41.h"

namespace deepinfer {
namespace {

// The decoder half starts at the candidate source (layer 20 in the release; spec §2.1); without a
// candidate stage every layer is reported as encoder.
const char* half(const V41TextConfig& c, int64_t layer) {
    return c.candidate_source_layer_id >= 0 && layer >= c.candidate_source_layer_id ? "decoder" : "encoder";
}

std::string source_label(int64_t s) { return s < 0 ? "-" : std::to_string(s); }

}  // namespace

std::string inspect_v41_text(const Checkpoint& ckpt, const V41ModelConfig& config) {
    const V41TextConfig& c = config.text;
    const InventoryReport r = check_inventory_v41(ckpt, config);
    std::string out;
    out += fmt::format("checkpoint          {}\n", ckpt.path());
    out += fmt::format("files               {} safetensors file(s), {} tensors, naming: {}\n", ckpt.files().size(),
                       ckpt.tensors().size(), naming_scheme_name(ckpt.naming_scheme()));
    out += describe_v41_model_config(config);
    out += "\nlayer schedule\n";
    out += fmt::format("  {:>5}  {:<8} {:<8} {:>5} {:>6} {:>6}  {:<10} {}\n", "layer", "half", "csa2", "ratio",
                       "kv_src", "idx_src", "rope", "engram");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const bool window = c.compress_ratio(l) == 0;
        out += fmt::format("  {:>5}  {:<8} {:<8} {:>5} {:>6} {:>6}  {:<10} {}\n", l, half(c, l),
                           csa_mode_name(c.csa_mode(l)), c.compress_ratio(l),
                           source_label(window ? -1 : c.kv_source(l)), source_label(window ? -1 : c.index_source(l)),
                           window ? "main" : "compress", c.engram_index(l) >= 0 ? "yes" : "");
    }
    for (int64_t m = 0; m < c.num_nextn_predict_layers; ++m)
        out += fmt::format("  {:>5}  {:<8} {:<8} {:>5} {:>6} {:>6}  {:<10} {}\n", fmt::format("mtp.{}", m), "dspark",
                           "window", 0, "-", "-", "main", r.has_mtp ? "" : "(not in checkpoint)");
    out += fmt::format("vision tower        {}\n", r.has_vision ? "present" : "not in checkpoint");
    out += inspect_inventory_text(ckpt, r);
    return out;
}

std::string inspect_v41_json(const Checkpoint& ckpt, const V41ModelConfig& config) {
    using nlohmann::json;
    const V41TextConfig& c = config.text;
    const InventoryReport r = check_inventory_v41(ckpt, config);
    json j;
    j["path"] = ckpt.path();
    j["architecture"] = config.architecture;
    j["family"] = "deepseek_v41";
    j["naming"] = naming_scheme_name(ckpt.naming_scheme());
    j["num_files"] = ckpt.files().size();
    j["num_tensors"] = ckpt.tensors().size();
    j["config"] = {{"vocab_size", c.vocab_size},
                   {"hidden_size", c.hidden_size},
                   {"num_hidden_layers", c.num_hidden_layers},
                   {"num_attention_heads", c.num_attention_heads},
                   {"head_dim", c.head_dim},
                   {"qk_rope_head_dim", c.qk_rope_head_dim},
                   {"n_routed_experts", c.n_routed_experts},
                   {"num_experts_per_tok", c.num_experts_per_tok},
                   {"hc_mult", c.hc_mult},
                   {"engram_layer_ids", c.engram_layer_ids},
                   {"engram_num_embeddings", c.engram_num_embeddings},
                   {"weight_block_size", {config.quantization.weight_block_rows, config.quantization.weight_block_cols}},
                   {"num_nextn_predict_layers", c.num_nextn_predict_layers}};
    json layers = json::array();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const bool window = c.compress_ratio(l) == 0;
        layers.push_back({{"layer", l},
                          {"half", half(c, l)},
                          {"csa2", csa_mode_name(c.csa_mode(l))},
                          {"compress_ratio", c.compress_ratio(l)},
                          {"kv_source", window ? json(nullptr) : json(c.kv_source(l))},
                          {"index_source", window ? json(nullptr) : json(c.index_source(l))},
                          {"rope", window ? "main" : "compress"},
                          {"engram", c.engram_index(l) >= 0}});
    }
    j["layers"] = layers;
    j["has_vision"] = r.has_vision;
    inspect_inventory_json(r, j);
    return j.dump(2);
}

}  // namespace deepinfer
