// SPDX-License-Identifier: Apache-2.0
// V4.1 synthetic checkpoints: the V4.1 tensor list through the shared synthetic writer.
#include "deepinfer/synthetic_v41.h"

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

// Overwrites bf16 tensors of a safetensors file in place.
class Bf16Patcher {
public:
    explicit Bf16Patcher(const std::string& path)
        : file_(path), out_(path, std::ios::in | std::ios::out | std::ios::binary) {
        uint64_t header = 0;
        std::ifstream in(path, std::ios::binary);
        in.read(reinterpret_cast<char*>(&header), 8);
        data_ = 8 + header;
        DI_CHECK(out_.good(), path, ": cannot open for writing");
    }
    bool has(const std::string& name) const { return file_.find(name) != nullptr; }
    const SafetensorsTensorInfo& info(const std::string& name) const {
        const SafetensorsTensorInfo* t = file_.find(name);
        DI_CHECK(t != nullptr && t->dtype == DType::kBF16, "make_dspark_agree_with_target: tensor ", name,
                 " is missing or not bf16 (write the checkpoint with bf16 linears and experts)");
        return *t;
    }
    std::vector<float> read(const std::string& name) const {
        const SafetensorsTensorInfo& t = info(name);
        const TensorView v = file_.view(t);
        std::vector<float> out(static_cast<size_t>(v.numel()));
        for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(v.data_as<const uint16_t>()[i]);
        return out;
    }
    void write(const std::string& name, const std::vector<float>& values) {
        const SafetensorsTensorInfo& t = info(name);
        DI_CHECK(values.size() * 2 == t.end - t.begin, "make_dspark_agree_with_target: size of ", name);
        std::vector<uint16_t> bits(values.size());
        for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
        out_.seekp(static_cast<std::streamoff>(data_ + t.begin));
        out_.write(reinterpret_cast<const char*>(bits.data()), static_cast<std::streamsize>(bits.size() * 2));
    }
    void zero(const std::string& name) { write(name, std::vector<float>((info(name).end - info(name).begin) / 2, 0.0f)); }

private:
    SafetensorsFile file_;
    std::fstream out_;
    uint64_t data_ = 0;
};

}  // namespace

void make_dspark_agree_with_target(const std::string& dir, double noise, uint64_t seed) {
    const V41ModelConfig mc = load_v41_model_config(dir + "/config.json");
    const V41TextConfig& c = mc.text;
    const int64_t D = c.hidden_size, V = c.vocab_size, r = c.dspark_markov_rank;
    DI_CHECK(r == D, dir, ": make_dspark_agree_with_target needs dspark_markov_rank == hidden_size (", r, " vs ", D, ")");
    Bf16Patcher p(dir + "/model.safetensors");
    auto zero_branches = [&](const std::string& prefix, int64_t experts) {
        p.zero(prefix + "attn.wo_b.weight");
        p.zero(prefix + "ffn.shared_experts.w2.weight");
        for (int64_t e = 0; e < experts; ++e) p.zero(prefix + "ffn.experts." + std::to_string(e) + ".w2.weight");
        if (p.has(prefix + "engram.wkv.weight")) p.zero(prefix + "engram.wkv.weight");
    };
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) zero_branches("layers." + std::to_string(l) + ".", c.n_routed_experts);
    int64_t stages = 0;
    for (; p.has("mtp." + std::to_string(stages) + ".attn_norm.weight"); ++stages)
        zero_branches("mtp." + std::to_string(stages) + ".", c.dspark_n_routed_experts);
    DI_CHECK(stages > 0, dir, ": the checkpoint has no DSpark drafter");
    const std::string last = "mtp." + std::to_string(stages - 1) + ".";
    std::vector<float> embed = p.read("embed.weight");
    const std::vector<float> norm = p.read("norm.weight");
    // n(x) = norm ⊙ rmsnorm(embed[x]), from the embedding before the noise row is cleared.
    std::vector<float> W1(static_cast<size_t>(V * D));
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    for (int64_t x = 0; x < V; ++x) {
        const float* e = embed.data() + x * D;
        double ss = 0;
        for (int64_t d = 0; d < D; ++d) ss += double(e[d]) * e[d];
        const double inv = 1.0 / std::sqrt(ss / double(D) + c.rms_norm_eps);
        double nn = 0;
        for (int64_t d = 0; d < D; ++d) nn += std::pow(double(norm[size_t(d)]) * e[d] * inv, 2);
        const double rms = std::sqrt(nn / double(D));
        for (int64_t d = 0; d < D; ++d)
            W1[size_t(x * D + d)] = float(double(norm[size_t(d)]) * e[d] * inv + noise * rms * nd(rng));
    }
    std::fill_n(embed.begin() + c.dspark_noise_token_id * D, D, 0.0f);
    p.write("embed.weight", embed);
    p.write(last + "norm.weight", norm);
    p.write(last + "markov_head.embed.weight", W1);
    p.write(last + "markov_head.head.weight", p.read("head.weight"));
    p.zero(last + "confidence_head.proj.weight");
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
