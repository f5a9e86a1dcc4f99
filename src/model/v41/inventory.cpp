// SPDX-License-Identifier: Apache-2.0
// Expected tensor list of DeepseekV41ForCausalLM (spec deepseek-v41-model.md §7.2) with every
// dimension read from the config, and the check of a checkpoint against it.
#include "deepinfer/weight_inventory_v41.h"

#include <string>

namespace deepinfer {
namespace {

void add(std::vector<ExpectedTensor>& out, const std::string& name, Shape shape, WeightKind kind) {
    out.push_back({name, std::move(shape), kind});
}

// The tensors every block has (backbone layer or drafter stage): norms, mHC sites, the attention
// projections, the router and the experts. `experts` differs for the drafter.
void add_common_block(std::vector<ExpectedTensor>& out, const V41TextConfig& c, const std::string& p,
                      int64_t experts) {
    const int64_t D = c.hidden_size, H = c.num_attention_heads, Dh = c.head_dim, hc = c.hc_mult;
    const int64_t I = c.moe_intermediate_size, Q = c.q_lora_rank;
    add(out, p + "attn_norm.weight", {D}, WeightKind::kFloat);
    add(out, p + "ffn_norm.weight", {D}, WeightKind::kFloat);
    for (const std::string site : {"attn", "ffn"}) {
        add(out, p + "hc_" + site + "_fn", {(2 + hc) * hc, hc * D}, WeightKind::kFloat);
        add(out, p + "hc_" + site + "_base", {(2 + hc) * hc}, WeightKind::kFloat);
        add(out, p + "hc_" + site + "_scale", {3}, WeightKind::kFloat);
    }
    add(out, p + "attn.attn_sink", {H}, WeightKind::kFloat);
    add(out, p + "attn.q_norm.weight", {Q}, WeightKind::kFloat);
    add(out, p + "attn.kv_norm.weight", {Dh}, WeightKind::kFloat);
    add(out, p + "attn.wq_a.weight", {Q, D}, WeightKind::kLinear);
    add(out, p + "attn.wq_b.weight", {H * Dh, Q}, WeightKind::kLinear);
    add(out, p + "attn.wkv.weight", {Dh, D}, WeightKind::kLinear);
    add(out, p + "attn.wo_a.weight", {c.o_groups * c.o_lora_rank, H * Dh / c.o_groups}, WeightKind::kLinear);
    add(out, p + "attn.wo_b.weight", {D, c.o_groups * c.o_lora_rank}, WeightKind::kLinear);
    add(out, p + "ffn.gate.weight", {experts, D}, WeightKind::kFloat);
    add(out, p + "ffn.gate.bias", {experts}, WeightKind::kFloat);
    add(out, p + "ffn.gate.bias_vl", {experts}, WeightKind::kFloat);
    add(out, p + "ffn.shared_experts.w1.weight", {I, D}, WeightKind::kLinear);
    add(out, p + "ffn.shared_experts.w3.weight", {I, D}, WeightKind::kLinear);
    add(out, p + "ffn.shared_experts.w2.weight", {D, I}, WeightKind::kLinear);
    for (int64_t e = 0; e < experts; ++e) {
        const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
        add(out, ep + "w1.weight", {I, D}, WeightKind::kExpertLinear);
        add(out, ep + "w3.weight", {I, D}, WeightKind::kExpertLinear);
        add(out, ep + "w2.weight", {D, I}, WeightKind::kExpertLinear);
    }
}

// A backbone layer: the common block plus its CSA2 extras (spec §1.3, §7.2) and its Engram module.
void add_layer(std::vector<ExpectedTensor>& out, const V41TextConfig& c, int64_t layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    const int64_t D = c.hidden_size, Dh = c.head_dim, hc = c.hc_mult;
    add_common_block(out, c, p, c.n_routed_experts);
    if (c.is_kv_source(layer)) {
        add(out, p + "attn.compressor.wkv.weight", {Dh, D}, WeightKind::kFloat);
        if (c.compress_ratio(layer) > 1) add(out, p + "attn.compressor.wgate.weight", {Dh, D}, WeightKind::kFloat);
        add(out, p + "attn.compressor.norm.weight", {Dh}, WeightKind::kFloat);
    }
    if (c.is_index_source(layer)) {
        add(out, p + "attn.indexer.wq_b.weight", {c.index_n_heads * c.index_head_dim, c.q_lora_rank},
            WeightKind::kLinear);
        add(out, p + "attn.indexer.weights_proj.weight", {c.index_n_heads, D}, WeightKind::kFloat);
        if (c.is_kv_source(layer)) {
            add(out, p + "attn.indexer.wk.weight", {c.index_head_dim, Dh}, WeightKind::kFloat);
            add(out, p + "attn.indexer.k_norm.weight", {c.index_head_dim}, WeightKind::kFloat);
        }
    }
    const int64_t ei = c.engram_index(layer);
    if (ei >= 0) {
        const int64_t rows = c.engram_num_embeddings[size_t(ei)], ehd = c.engram_head_dim;
        add(out, p + "engram.embed.weight", {rows, ehd}, WeightKind::kRowTable);
        add(out, p + "engram.wkv.weight", {D * (hc + 1), c.engram_num_hash_cols() * ehd}, WeightKind::kLinear);
        add(out, p + "engram.q_weight", {hc, D}, WeightKind::kFloat);
        add(out, p + "engram.k_weight", {hc, D}, WeightKind::kFloat);
    }
}

// The DSpark drafter (spec §6.5): window-only stages with their own expert count; stage 0 projects the
// target layers' inputs, the last stage holds the final norm, the Markov head and the confidence head.
void add_dspark(std::vector<ExpectedTensor>& out, const V41TextConfig& c) {
    const int64_t D = c.hidden_size, n = c.num_nextn_predict_layers;
    for (int64_t m = 0; m < n; ++m) {
        const std::string p = "mtp." + std::to_string(m) + ".";
        add_common_block(out, c, p, c.dspark_n_routed_experts);
        if (m == 0) {
            add(out, p + "main_proj.weight", {D, int64_t(c.dspark_target_layer_ids.size()) * D}, WeightKind::kLinear);
            add(out, p + "main_norm.weight", {D}, WeightKind::kFloat);
        }
        if (m == n - 1) {
            add(out, p + "norm.weight", {D}, WeightKind::kFloat);
            add(out, p + "markov_head.embed.weight", {c.vocab_size, c.dspark_markov_rank}, WeightKind::kFloat);
            add(out, p + "markov_head.head.weight", {c.vocab_size, c.dspark_markov_rank}, WeightKind::kFloat);
            add(out, p + "confidence_head.proj.weight", {1, D + c.dspark_markov_rank}, WeightKind::kFloat);
        }
    }
}

// The vision tower and aligner (spec §9, §7.2), all bf16 in the release.
void add_vision(std::vector<ExpectedTensor>& out, const V41VisionConfig& v, int64_t D) {
    const int64_t h = v.hidden_size, ds = v.downsample_ratio;
    add(out, "vision.patch_embed.proj.weight", {h, 3 * v.patch_size * v.patch_size}, WeightKind::kFloat);
    add(out, "vision.patch_embed.proj.bias", {h}, WeightKind::kFloat);
    for (int64_t b = 0; b < v.num_hidden_layers; ++b) {
        const std::string p = "vision.blocks." + std::to_string(b) + ".";
        add(out, p + "norm1.weight", {h}, WeightKind::kFloat);
        add(out, p + "norm2.weight", {h}, WeightKind::kFloat);
        add(out, p + "attn.wqkv.weight", {3 * h, h}, WeightKind::kFloat);
        add(out, p + "attn.wqkv.bias", {3 * h}, WeightKind::kFloat);
        add(out, p + "attn.wo.weight", {h, h}, WeightKind::kFloat);
        add(out, p + "attn.wo.bias", {h}, WeightKind::kFloat);
        add(out, p + "mlp.w1.weight", {2 * v.intermediate_size, h}, WeightKind::kFloat);
        add(out, p + "mlp.w2.weight", {h, v.intermediate_size}, WeightKind::kFloat);
    }
    add(out, "vision.norm.weight", {h}, WeightKind::kFloat);
    add(out, "aligner.w1.weight", {D, h * ds * ds}, WeightKind::kFloat);
    add(out, "aligner.w1.bias", {D}, WeightKind::kFloat);
    add(out, "aligner.w2.weight", {D, D}, WeightKind::kFloat);
    add(out, "aligner.w2.bias", {D}, WeightKind::kFloat);
}

bool is_vision_name(const std::string& n) {
    return n.rfind("vision.", 0) == 0 || n.rfind("aligner.", 0) == 0 || n.rfind("image_", 0) == 0;
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors_v41(const V41ModelConfig& config, bool include_dspark,
                                                 bool include_vision) {
    const V41TextConfig& c = config.text;
    const int64_t D = c.hidden_size;
    std::vector<ExpectedTensor> out;
    add(out, "embed.weight", {c.vocab_size, D}, WeightKind::kFloat);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) add_layer(out, c, l);
    add(out, "norm.weight", {D}, WeightKind::kFloat);
    add(out, "head.weight", {c.vocab_size, D}, WeightKind::kFloat);
    if (include_vision) {
        for (const char* n : {"image_start", "image_end", "image_newline"}) add(out, n, {D}, WeightKind::kFloat);
        add_vision(out, config.vision.value_or(V41VisionConfig{}), D);
    }
    if (include_dspark) add_dspark(out, c);
    return out;
}

int64_t published_tensor_count_v41(const V41ModelConfig& config, bool include_dspark, bool include_vision) {
    int64_t n = 0;
    for (const ExpectedTensor& e : expected_tensors_v41(config, include_dspark, include_vision))
        n += e.kind == WeightKind::kFloat || e.kind == WeightKind::kIndex ? 1 : 2;
    return n;
}

InventoryReport check_inventory_v41(const Checkpoint& ckpt, const V41ModelConfig& config) {
    InventoryChecker checker(ckpt, config.quantization.weight_block_rows, config.quantization.weight_block_cols);
    InventoryReport& report = checker.report();
    for (const CheckpointTensor& t : ckpt.tensors()) {
        report.has_mtp |= t.name.rfind("mtp.", 0) == 0;
        report.has_vision |= is_vision_name(t.name);
    }
    for (ExpectedTensor e : expected_tensors_v41(config, report.has_mtp, report.has_vision)) {
        // The Engram projection is also written without the `.weight` suffix (spec §7.2 names it
        // `engram.wkv`); its `.scale` companion is the same either way.
        const std::string bare = e.name.substr(0, e.name.size() - 7);
        if (e.name.ends_with("engram.wkv.weight") && !ckpt.find(e.name) && ckpt.find(bare)) e.name = bare;
        checker.check(e);
    }
    return checker.finish();
}

}  // namespace deepinfer
