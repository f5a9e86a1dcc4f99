// SPDX-License-Identifier: Apache-2.0
// Formats the inspection of a checkpoint (config summary, schedule, inventory check).
#include "deepinfer/inspect.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "deepinfer/weight_inventory.h"

namespace deepinfer {
namespace {

std::string rope_label(const ModelConfig& c, int64_t layer) {
    if (c.compress_ratio(layer) == 0) return fmt::format("main(theta={:g})", c.rope_main.rope_theta);
    return fmt::format("compress(theta={:g}{})", c.rope_compress.rope_theta, c.rope_compress.is_yarn() ? ",yarn" : "");
}

std::string human_bytes(uint64_t b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(b);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace

std::string inspect_inventory_text(const Checkpoint& ckpt, const InventoryReport& r) {
    std::string out;
    out += "\nparameters\n";
    out += fmt::format("  total               {} ({:.3f} B)\n", r.num_parameters, double(r.num_parameters) / 1e9);
    out += fmt::format("  scale elements      {}\n", r.num_scale_elements);
    out += fmt::format("  experts layout      {}\n", r.merged_experts ? "merged (transformers)" : "per expert");
    out += "  bytes by dtype\n";
    uint64_t total = 0;
    for (const auto& [dt, bytes] : r.bytes_by_dtype) {
        out += fmt::format("    {:<10} {:>8} tensors  {:>12}  ({} bytes)\n", dt, r.tensors_by_dtype.at(dt),
                           human_bytes(bytes), bytes);
        total += bytes;
    }
    out += fmt::format("    {:<10} {:>8} tensors  {:>12}  ({} bytes)\n", "total", ckpt.tensors().size(),
                       human_bytes(total), total);
    out += "\ntensor check\n";
    out += fmt::format("  missing     {}\n", r.missing.size());
    for (const auto& n : r.missing) out += fmt::format("    missing     {}\n", n);
    out += fmt::format("  unexpected  {}\n", r.unexpected.size());
    for (const auto& n : r.unexpected) out += fmt::format("    unexpected  {}\n", n);
    out += fmt::format("  mismatched  {}\n", r.mismatched.size());
    for (const auto& n : r.mismatched) out += fmt::format("    mismatched  {}\n", n);
    out += fmt::format("  complete    {}\n", r.complete() ? "yes" : "no");
    return out;
}

std::string inspect_text(const Checkpoint& ckpt) {
    const ModelConfig& c = ckpt.config();
    const InventoryReport r = check_inventory(ckpt, c);
    std::string out;
    out += fmt::format("checkpoint          {}\n", ckpt.path());
    out += fmt::format("files               {} safetensors file(s), {} tensors, naming: {}\n", ckpt.files().size(),
                       ckpt.tensors().size(), naming_scheme_name(ckpt.naming_scheme()));
    out += describe_model_config(c);
    out += "\nlayer schedule\n";
    out += fmt::format("  {:>5}  {:<8} {:>5}  {:<28} {}\n", "layer", "attn", "ratio", "rope", "mlp");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        out += fmt::format("  {:>5}  {:<8} {:>5}  {:<28} {}\n", l, attention_type_name(c.layer_types[size_t(l)]),
                           c.compress_ratio(l), rope_label(c, l), mlp_type_name(c.mlp_layer_types[size_t(l)]));
    }
    if (r.has_dspark) {  // V4-Flash-0731's DSpark: the stored blocks, whatever num_nextn_predict_layers says
        int64_t stages = 0;
        while (ckpt.find(fmt::format("mtp.{}.attn_norm.weight", stages))) ++stages;
        for (int64_t m = 0; m < stages; ++m)
            out += fmt::format("  {:>5}  {:<8} {:>5}  {:<28} moe ({} experts top-{}, DSpark stage)\n",
                               fmt::format("mtp.{}", m), "sliding", 0,
                               fmt::format("main(theta={:g})", c.rope_main.rope_theta), c.dspark_n_routed_experts,
                               c.dspark_num_experts_per_tok);
        std::string taps;
        for (int64_t t : c.dspark_target_layer_ids) taps += (taps.empty() ? "" : ", ") + std::to_string(t);
        out += fmt::format("dspark              block {}, taps = outputs of layers [{}], markov rank {}, noise id {}\n",
                           c.dspark_block_size, taps, c.dspark_markov_rank, c.dspark_noise_token_id);
    } else {
        for (int64_t m = 0; m < c.num_nextn_predict_layers; ++m)
            out += fmt::format("  {:>5}  {:<8} {:>5}  {:<28} {}{}\n", fmt::format("mtp.{}", m), "sliding", 0,
                               fmt::format("main(theta={:g})", c.rope_main.rope_theta), "moe",
                               r.has_mtp ? "" : "  (not in checkpoint)");
    }
    out += inspect_inventory_text(ckpt, r);
    return out;
}

void inspect_inventory_json(const InventoryReport& r, nlohmann::json& j) {
    j["num_parameters"] = r.num_parameters;
    j["num_scale_elements"] = r.num_scale_elements;
    j["bytes_by_dtype"] = r.bytes_by_dtype;
    j["tensors_by_dtype"] = r.tensors_by_dtype;
    j["merged_experts"] = r.merged_experts;
    j["has_mtp"] = r.has_mtp;
    j["has_dspark"] = r.has_dspark;
    j["missing"] = r.missing;
    j["unexpected"] = r.unexpected;
    j["mismatched"] = r.mismatched;
    j["complete"] = r.complete();
}

std::string inspect_json(const Checkpoint& ckpt) {
    using nlohmann::json;
    const ModelConfig& c = ckpt.config();
    const InventoryReport r = check_inventory(ckpt, c);
    json j;
    j["path"] = ckpt.path();
    j["architecture"] = c.architecture;
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
                   {"num_nextn_predict_layers", c.num_nextn_predict_layers}};
    json layers = json::array();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        layers.push_back({{"layer", l},
                          {"attention", attention_type_name(c.layer_types[size_t(l)])},
                          {"compress_ratio", c.compress_ratio(l)},
                          {"rope", c.compress_ratio(l) == 0 ? "main" : "compress"},
                          {"yarn", c.compress_ratio(l) != 0 && c.rope_compress.is_yarn()},
                          {"mlp", mlp_type_name(c.mlp_layer_types[size_t(l)])}});
    j["layers"] = layers;
    inspect_inventory_json(r, j);
    return j.dump(2);
}

}  // namespace deepinfer
