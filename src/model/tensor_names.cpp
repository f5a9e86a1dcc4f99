// SPDX-License-Identifier: Apache-2.0
// transformers -> DeepSeek tensor-name mapping (deepseek-v4-model.md §4.12). Names are rewritten
// segment-wise after an optional "model." prefix; layer-local paths go through one table, longest
// match first, so that the indexer's compressor is not mistaken for the attention compressor.
#include "deepinfer/tensor_names.h"

#include <array>
#include <tuple>
#include <utility>

namespace deepinfer {
namespace {

struct Rewrite {
    std::string_view from;  // a dotted path prefix inside "layers.N." (or at top level)
    std::string_view to;
};

// Top-level renames (whole prefix up to the last segment).
constexpr std::array<Rewrite, 6> kTopLevel = {{
    {"embed_tokens.", "embed."},
    {"lm_head.", "head."},
    {"hc_head.hc_fn", "hc_head_fn"},
    {"hc_head.hc_base", "hc_head_base"},
    {"hc_head.hc_scale", "hc_head_scale"},
    {"hc_head.fn", "hc_head_fn"},
}};

// Layer-local renames, longest first where prefixes overlap.
constexpr std::array<Rewrite, 37> kLayer = {{
    // transformers 5.17 saves the main attention's kv_norm as attn.norm (not attn.compressor.norm).
    {"attn.norm.", "attn.kv_norm."},
    {"self_attn.compressor.indexer.scorer.weights_proj.", "attn.indexer.weights_proj."},
    {"self_attn.compressor.indexer.weights_proj.", "attn.indexer.weights_proj."},
    {"self_attn.compressor.indexer.q_b_proj.", "attn.indexer.wq_b."},
    {"self_attn.compressor.indexer.kv_proj.", "attn.indexer.compressor.wkv."},
    {"self_attn.compressor.indexer.gate_proj.", "attn.indexer.compressor.wgate."},
    {"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"},
    {"self_attn.compressor.indexer.kv_norm.", "attn.indexer.compressor.norm."},
    {"self_attn.indexer.scorer.weights_proj.", "attn.indexer.weights_proj."},
    {"self_attn.indexer.weights_proj.", "attn.indexer.weights_proj."},
    {"self_attn.indexer.q_b_proj.", "attn.indexer.wq_b."},
    {"self_attn.compressor.kv_proj.", "attn.compressor.wkv."},
    {"self_attn.compressor.gate_proj.", "attn.compressor.wgate."},
    {"self_attn.compressor.position_bias", "attn.compressor.ape"},
    {"self_attn.compressor.kv_norm.", "attn.compressor.norm."},
    {"self_attn.q_a_proj.", "attn.wq_a."},
    {"self_attn.q_a_norm.", "attn.q_norm."},
    {"self_attn.q_b_proj.", "attn.wq_b."},
    {"self_attn.kv_proj.", "attn.wkv."},
    {"self_attn.kv_norm.", "attn.kv_norm."},
    {"self_attn.o_a_proj.", "attn.wo_a."},
    {"self_attn.o_b_proj.", "attn.wo_b."},
    {"self_attn.sinks", "attn.attn_sink"},
    {"input_layernorm.", "attn_norm."},
    {"post_attention_layernorm.", "ffn_norm."},
    {"attn_hc.fn", "hc_attn_fn"},
    {"attn_hc.base", "hc_attn_base"},
    {"attn_hc.scale", "hc_attn_scale"},
    {"ffn_hc.fn", "hc_ffn_fn"},
    {"ffn_hc.base", "hc_ffn_base"},
    {"ffn_hc.scale", "hc_ffn_scale"},
    {"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
    {"mlp.gate.", "ffn.gate."},
    {"mlp.shared_experts.gate_proj.", "ffn.shared_experts.w1."},
    {"mlp.shared_experts.up_proj.", "ffn.shared_experts.w3."},
    {"mlp.shared_experts.down_proj.", "ffn.shared_experts.w2."},
    {"mlp.experts.", "ffn.experts."},
}};

// Per-expert projections inside ffn.experts.E.
constexpr std::array<Rewrite, 3> kExpert = {{
    {"gate_proj.", "w1."},
    {"up_proj.", "w3."},
    {"down_proj.", "w2."},
}};

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Applies the first matching rewrite of `table` to the front of `s`; returns whether one matched.
template <size_t N>
bool rewrite_front(std::string& s, const std::array<Rewrite, N>& table) {
    for (const Rewrite& r : table) {
        if (starts_with(s, r.from)) {
            s = std::string(r.to) + s.substr(r.from.size());
            return true;
        }
    }
    return false;
}

// Splits "layers.12.rest" into ("layers.12.", "rest"); empty prefix when not a layer path.
std::pair<std::string, std::string> split_layer(const std::string& s, std::string_view head) {
    if (!starts_with(s, head)) return {"", s};
    size_t pos = head.size();
    size_t dot = s.find('.', pos);
    if (dot == std::string::npos || dot == pos) return {"", s};
    for (size_t i = pos; i < dot; ++i)
        if (s[i] < '0' || s[i] > '9') return {"", s};
    return {s.substr(0, dot + 1), s.substr(dot + 1)};
}

}  // namespace

NormalizedName normalize_tensor_name(std::string_view stored_name) {
    NormalizedName out;
    std::string s(stored_name);
    bool changed = false;
    if (starts_with(s, "model.")) {
        s = s.substr(6);
        changed = true;
    }
    auto [layer_prefix, rest] = split_layer(s, "layers.");
    if (layer_prefix.empty()) std::tie(layer_prefix, rest) = split_layer(s, "mtp.");
    if (!layer_prefix.empty()) {
        changed |= rewrite_front(rest, kLayer);
        // ffn.experts.E.{gate,up,down}_proj -> w1/w3/w2
        auto [expert_prefix, expert_rest] = split_layer(rest, "ffn.experts.");
        if (!expert_prefix.empty() && rewrite_front(expert_rest, kExpert)) {
            rest = expert_prefix + expert_rest;
            changed = true;
        }
        s = layer_prefix + rest;
    } else {
        changed |= rewrite_front(s, kTopLevel);
    }
    const std::string_view kScaleInv = ".weight_scale_inv";
    if (s.size() > kScaleInv.size() && s.compare(s.size() - kScaleInv.size(), kScaleInv.size(), kScaleInv) == 0) {
        s = s.substr(0, s.size() - kScaleInv.size()) + ".scale";
        changed = true;
    }
    out.canonical = std::move(s);
    out.was_transformers = changed;
    out.was_deepseek = !changed;
    return out;
}

}  // namespace deepinfer
