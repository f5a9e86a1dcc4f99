// SPDX-License-Identifier: Apache-2.0
// Binding a V4.1 checkpoint's tensors. Canonical names are the published ones; transformers' names
// map onto them by dropping `model.` and renaming `lm_head.weight` to `head.weight`.
#include "model/v41/weights.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "deepinfer/check.h"
#include "deepinfer/float_formats.h"

namespace deepinfer::v41 {
namespace {

std::string canonical_name(const std::string& stored) {
    if (stored == "lm_head.weight") return "head.weight";
    if (stored.rfind("model.", 0) == 0) return stored.substr(6);
    return stored;
}

std::string layer_prefix(int64_t layer) { return "layers." + std::to_string(layer) + "."; }

}  // namespace

Weights::Weights(const std::string& dir, const V41TextConfig& c) : dir_(dir) {
    namespace fs = std::filesystem;
    std::vector<std::string> names;
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    if (fs::exists(index)) {
        std::ifstream in(index);
        const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        DI_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), index.string(),
                 ": no weight_map object");
        std::set<std::string> shards;
        for (const auto& [tensor, file] : j["weight_map"].items()) {
            DI_CHECK(file.is_string(), index.string(), ": weight_map entry ", tensor, " is not a file name");
            const std::string f = file.get<std::string>();
            DI_CHECK(f.find('/') == std::string::npos && f.find("..") == std::string::npos, index.string(),
                     ": shard name '", f, "' leaves the directory");
            shards.insert(f);
        }
        names.assign(shards.begin(), shards.end());
    } else {
        names.push_back("model.safetensors");
    }
    for (const std::string& n : names) {
        files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / n).string()));
        for (const SafetensorsTensorInfo& info : files_.back()->tensors()) {
            const std::string canon = canonical_name(info.name);
            DI_CHECK(tensors_.emplace(canon, Entry{files_.back().get(), &info}).second, dir, ": tensor ", canon,
                     " is stored twice");
        }
    }

    config_ = &c;
    embed = linear("embed.weight", c.vocab_size, c.hidden_size);
    head = linear("head.weight", c.vocab_size, c.hidden_size);
    norm = vec("norm.weight", {c.hidden_size});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        layers.push_back(bind_layer(layer_prefix(l), l, c.n_routed_experts, /*backbone=*/true));
    int64_t stages = 0;
    while (has("mtp." + std::to_string(stages) + ".attn_norm.weight")) ++stages;
    if (stages > 0) dspark = bind_dspark(stages);
    config_ = nullptr;
}

LayerWeights Weights::bind_layer(const std::string& p, int64_t l, int64_t E, bool backbone) const {
    const V41TextConfig& c = *config_;
    const int64_t D = c.hidden_size, hc = c.hc_mult, n_mix = (2 + hc) * hc;
    LayerWeights w;
    w.attn_norm = vec(p + "attn_norm.weight", {D});
    w.ffn_norm = vec(p + "ffn_norm.weight", {D});
    for (auto [site, hw] : {std::pair{"attn", &w.hc_attn}, std::pair{"ffn", &w.hc_ffn}}) {
        hw->fn = vec(p + "hc_" + site + "_fn", {n_mix, hc * D});
        hw->base = vec(p + "hc_" + site + "_base", {n_mix});
        hw->scale = vec(p + "hc_" + site + "_scale", {3});
    }
    AttentionWeights& a = w.attn;
    const int64_t H = c.num_attention_heads, hd = c.head_dim;
    a.wq_a = linear(p + "attn.wq_a.weight", c.q_lora_rank, D);
    a.q_norm = vec(p + "attn.q_norm.weight", {c.q_lora_rank});
    a.wq_b = linear(p + "attn.wq_b.weight", H * hd, c.q_lora_rank);
    a.wkv = linear(p + "attn.wkv.weight", hd, D);
    a.kv_norm = vec(p + "attn.kv_norm.weight", {hd});
    a.wo_a = linear(p + "attn.wo_a.weight", c.o_groups * c.o_lora_rank, H * hd / c.o_groups);
    a.wo_b = linear(p + "attn.wo_b.weight", D, c.o_groups * c.o_lora_rank);
    a.sink = vec(p + "attn.attn_sink", {H});
    a.has_compressor = backbone && c.is_kv_source(l);
    if (a.has_compressor) {
        a.compressor_wkv = linear(p + "attn.compressor.wkv.weight", hd, D);
        if (c.compress_ratio(l) > 1) a.compressor_wgate = linear(p + "attn.compressor.wgate.weight", hd, D);
        a.compressor_norm = vec(p + "attn.compressor.norm.weight", {hd});
    }
    a.has_indexer = backbone && c.is_index_source(l);
    if (a.has_indexer) {
        a.indexer_wq_b = linear(p + "attn.indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
        a.indexer_weights_proj = linear(p + "attn.indexer.weights_proj.weight", c.index_n_heads, D);
        a.has_index_keys = a.has_compressor;
        if (a.has_index_keys) {
            a.indexer_wk = linear(p + "attn.indexer.wk.weight", c.index_head_dim, hd);
            a.indexer_k_norm = vec(p + "attn.indexer.k_norm.weight", {c.index_head_dim});
        }
    }
    MoeWeights& m = w.ffn;
    const int64_t I = c.moe_intermediate_size;
    m.gate = linear(p + "ffn.gate.weight", E, D);
    m.bias = vec(p + "ffn.gate.bias", {E});
    m.bias_vl = has(p + "ffn.gate.bias_vl") ? vec(p + "ffn.gate.bias_vl", {E}) : m.bias;
    auto expert = [&](const std::string& q) {
        return ExpertWeights{linear(q + "w1.weight", I, D), linear(q + "w3.weight", I, D), linear(q + "w2.weight", D, I)};
    };
    for (int64_t e = 0; e < E; ++e) m.experts.push_back(expert(p + "ffn.experts." + std::to_string(e) + "."));
    m.shared = expert(p + "ffn.shared_experts.");
    const int64_t ei = backbone ? c.engram_index(l) : -1;
    if (ei >= 0) {
        EngramWeights e;
        const int64_t rows = c.engram_num_embeddings[size_t(ei)], ehd = c.engram_head_dim;
        const std::string q = p + "engram.";
        const TensorView table = view(q + "embed.weight", {rows, ehd});
        TensorView scale;
        if (table.dtype() == DType::kF8E4M3) scale = view(q + "embed.scale", {rows, ehd / 32});
        e.table = cpu::make_linear_weight(table, scale, rows, ehd, 1, 32);
        e.wkv = linear(has(q + "wkv.weight") ? q + "wkv.weight" : q + "wkv", D * (hc + 1), c.engram_num_hash_cols() * ehd);
        const Vec qw = vec(q + "q_weight", {hc, D}), kw = vec(q + "k_weight", {hc, D});
        e.gate_weight.resize(qw.size());
        for (size_t i = 0; i < qw.size(); ++i) e.gate_weight[i] = qw[i] * kw[i];
        w.engram = std::move(e);
    }
    return w;
}

DSparkWeights Weights::bind_dspark(int64_t stages) const {
    const V41TextConfig& c = *config_;
    const int64_t D = c.hidden_size, r = c.dspark_markov_rank, taps = int64_t(c.dspark_target_layer_ids.size());
    DI_CHECK(taps > 0, dir_, ": the checkpoint has a DSpark drafter but the config names no dspark_target_layer_ids");
    DSparkWeights d;
    for (int64_t s = 0; s < stages; ++s)
        d.stages.push_back(bind_layer("mtp." + std::to_string(s) + ".", c.num_hidden_layers + s,
                                      c.dspark_n_routed_experts, /*backbone=*/false));
    const std::string first = "mtp.0.", last = "mtp." + std::to_string(stages - 1) + ".";
    d.main_proj = linear(first + "main_proj.weight", D, taps * D);
    d.main_norm = vec(first + "main_norm.weight", {D});
    d.norm = vec(last + "norm.weight", {D});
    d.markov_embed = linear(last + "markov_head.embed.weight", c.vocab_size, r);
    d.markov_head = linear(last + "markov_head.head.weight", c.vocab_size, r);
    d.confidence = vec(last + "confidence_head.proj.weight", {1, D + r});
    return d;
}

const Weights::Entry& Weights::find(const std::string& name) const {
    auto it = tensors_.find(name);
    DI_CHECK(it != tensors_.end(), dir_, ": tensor ", name, " is missing");
    return it->second;
}

TensorView Weights::view(const std::string& name, std::initializer_list<int64_t> shape) const {
    const Entry& e = find(name);
    const TensorView v = e.file->view(*e.info);
    DI_CHECK(v.shape() == Shape(shape), dir_, ": tensor ", name, " has shape ", v.shape().str(), ", expected ",
             Shape(shape).str());
    return v;
}

Vec Weights::vec(const std::string& name, std::initializer_list<int64_t> shape) const {
    const TensorView v = view(name, shape);
    Vec out(static_cast<size_t>(v.numel()));
    switch (v.dtype()) {
        case DType::kF32: std::copy_n(v.data_as<const float>(), out.size(), out.data()); break;
        case DType::kBF16:
            for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(v.data_as<const uint16_t>()[i]);
            break;
        case DType::kF16:
            for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(v.data_as<const uint16_t>()[i]);
            break;
        default: DI_THROW(dir_, ": tensor ", name, " must be f32, bf16 or f16");
    }
    return out;
}

LinearWeight Weights::linear(const std::string& name, int64_t out, int64_t in) const {
    const Entry& e = find(name);
    const TensorView w = e.file->view(*e.info);
    TensorView scale;
    if (w.dtype() == DType::kF8E4M3 || w.dtype() == DType::kI8 || w.dtype() == DType::kU8) {
        const std::string scale_name = name.size() > 7 && name.ends_with(".weight")
                                           ? name.substr(0, name.size() - 7) + ".scale"
                                           : name + ".scale";
        const Entry& s = find(scale_name);
        scale = s.file->view(*s.info);
    }
    return cpu::make_linear_weight(w, scale, out, in, 32, 32);
}

}  // namespace deepinfer::v41
