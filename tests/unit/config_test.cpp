// SPDX-License-Identifier: Apache-2.0
// config.json parsing: the real V4-Flash config in both key vocabularies, tiny configs in every
// schedule/RoPE layout, and errors that name the key and value.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "deepinfer/check.h"
#include "deepinfer/model_config.h"

namespace deepinfer {
namespace {

using nlohmann::json;
const std::string kData = DI_TEST_DATA_DIR;

void expect_flash(const ModelConfig& c) {
    EXPECT_EQ(c.vocab_size, 129280);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.num_hidden_layers, 43);
    EXPECT_EQ(c.num_attention_heads, 64);
    EXPECT_EQ(c.head_dim, 512);
    EXPECT_EQ(c.qk_rope_head_dim, 64);
    EXPECT_EQ(c.nope_head_dim(), 448);
    EXPECT_EQ(c.q_lora_rank, 1024);
    EXPECT_EQ(c.o_groups, 8);
    EXPECT_EQ(c.o_lora_rank, 1024);
    EXPECT_EQ(c.sliding_window, 128);
    EXPECT_EQ(c.n_routed_experts, 256);
    EXPECT_EQ(c.num_experts_per_tok, 6);
    EXPECT_EQ(c.moe_intermediate_size, 2048);
    EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
    EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
    EXPECT_EQ(c.hc_mult, 4);
    EXPECT_EQ(c.hc_sinkhorn_iters, 20);
    EXPECT_EQ(c.index_n_heads, 64);
    EXPECT_EQ(c.index_head_dim, 128);
    EXPECT_EQ(c.index_topk, 512);
    EXPECT_EQ(c.num_nextn_predict_layers, 1);
    EXPECT_EQ(c.num_hash_layers(), 3);
    // Schedule (spec §1.3): 0,1 sliding; 2 CSA; odd >= 3 HCA; even >= 4 CSA.
    ASSERT_EQ(c.layer_types.size(), 43u);
    int csa = 0, hca = 0, sliding = 0;
    for (int64_t l = 0; l < 43; ++l) {
        AttentionType want = l < 2 ? AttentionType::kSliding : (l % 2 == 0 ? AttentionType::kCsa : AttentionType::kHca);
        EXPECT_EQ(c.layer_types[size_t(l)], want) << "layer " << l;
        csa += want == AttentionType::kCsa;
        hca += want == AttentionType::kHca;
        sliding += want == AttentionType::kSliding;
        EXPECT_EQ(c.mlp_layer_types[size_t(l)], l < 3 ? MlpType::kHashMoe : MlpType::kMoe);
    }
    EXPECT_EQ(csa, 21);
    EXPECT_EQ(hca, 20);
    EXPECT_EQ(sliding, 2);
    EXPECT_EQ(c.compress_ratio(2), 4);
    EXPECT_EQ(c.compress_ratio(3), 128);
    EXPECT_DOUBLE_EQ(c.rope_main.rope_theta, 10000);
    EXPECT_FALSE(c.rope_main.is_yarn());
    EXPECT_DOUBLE_EQ(c.rope_compress.rope_theta, 160000);
    EXPECT_TRUE(c.rope_compress.is_yarn());
    EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16);
    EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 65536);
    EXPECT_DOUBLE_EQ(c.rope_compress.beta_fast, 32);
    EXPECT_DOUBLE_EQ(c.rope_compress.beta_slow, 1);
    EXPECT_EQ(&c.rope_for_layer(0), &c.rope_main);
    EXPECT_EQ(&c.rope_for_layer(2), &c.rope_compress);
    EXPECT_TRUE(c.quantization.is_fp8());
    EXPECT_EQ(c.quantization.scale_fmt, "ue8m0");
    EXPECT_EQ(c.quantization.weight_block_rows, 128);
    EXPECT_EQ(c.expert_dtype, "fp4");
}

TEST(ModelConfig, RealFlashConfigHfKeys) { expect_flash(load_model_config(kData + "/configs/deepseek-v4-flash.config.json")); }

TEST(ModelConfig, RealFlashConfigInferenceKeys) {
    expect_flash(load_model_config(kData + "/configs/deepseek-v4-flash.inference-config.json"));
}

json tiny() {
    return json{{"architectures", {"DeepseekV4ForCausalLM"}},
                {"model_type", "deepseek_v4"},
                {"vocab_size", 512},
                {"hidden_size", 64},
                {"num_hidden_layers", 4},
                {"num_attention_heads", 4},
                {"head_dim", 32},
                {"qk_rope_head_dim", 8},
                {"q_lora_rank", 32},
                {"o_groups", 2},
                {"o_lora_rank", 16},
                {"sliding_window", 8},
                {"n_routed_experts", 4},
                {"num_experts_per_tok", 2},
                {"moe_intermediate_size", 32},
                {"index_n_heads", 16},
                {"index_head_dim", 16},
                {"index_topk", 4}};
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "tiny.json"); }

std::string error_of(const json& j) {
    try {
        parse(j);
    } catch (const Error& e) {
        return e.message();
    }
    return "";
}

TEST(ModelConfig, HfLayerTypesAndNestedRope) {
    json j = tiny();
    j["layer_types"] = {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                        "compressed_sparse_attention"};
    j["mlp_layer_types"] = {"hash_moe", "moe", "moe", "moe"};
    j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 16}};
    j["partial_rotary_factor"] = 0.25;
    j.erase("qk_rope_head_dim");
    j["rope_parameters"] = {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                            {"compress", {{"rope_type", "yarn"}, {"rope_theta", 160000.0}, {"factor", 4.0},
                                          {"original_max_position_embeddings", 32}, {"beta_fast", 32},
                                          {"beta_slow", 1}, {"attention_factor", 1.0}}}};
    ModelConfig c = parse(j);
    EXPECT_EQ(c.qk_rope_head_dim, 8);
    EXPECT_EQ(c.compress_ratio(0), 0);
    EXPECT_EQ(c.compress_ratio(1), 4);
    EXPECT_EQ(c.compress_ratio(2), 16);
    EXPECT_EQ(c.num_hash_layers(), 1);
    EXPECT_TRUE(c.rope_compress.is_yarn());
    EXPECT_DOUBLE_EQ(c.rope_compress.factor, 4.0);
    EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 32);
    EXPECT_FALSE(c.rope_main.is_yarn());
}

TEST(ModelConfig, FlatRopeParametersDescribeCompressedLayers) {
    json j = tiny();
    j["compress_ratios"] = {0, 4, 128, 4, 0};
    j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 8}, {"original_max_position_embeddings", 64}};
    ModelConfig c = parse(j);
    EXPECT_TRUE(c.rope_compress.is_yarn());
    EXPECT_DOUBLE_EQ(c.rope_compress.rope_theta, 160000);
    EXPECT_DOUBLE_EQ(c.rope_main.rope_theta, 10000);
    EXPECT_EQ(c.num_hash_layers(), 3);  // default
}

TEST(ModelConfig, DefaultScheduleMatchesTransformers) {
    json j = tiny();
    j["num_hidden_layers"] = 6;
    ModelConfig c = parse(j);
    // transformers: 2x HCA then interleave starting with HCA.
    std::vector<AttentionType> want = {AttentionType::kHca, AttentionType::kHca, AttentionType::kHca,
                                       AttentionType::kCsa, AttentionType::kHca, AttentionType::kCsa};
    EXPECT_EQ(c.layer_types, want);
}

TEST(ModelConfig, ErrorsNameKeyAndValue) {
    json j = tiny();
    j["hidden_size"] = "wide";
    EXPECT_NE(error_of(j).find("'hidden_size' must be an integer, got \"wide\""), std::string::npos) << error_of(j);
    j = tiny();
    j.erase("vocab_size");
    EXPECT_NE(error_of(j).find("missing required key 'vocab_size'"), std::string::npos);
    j = tiny();
    j["num_key_value_heads"] = 2;
    EXPECT_NE(error_of(j).find("'num_key_value_heads' = 2 is out of range"), std::string::npos);
    j = tiny();
    j["compress_ratios"] = {0, 4, 7, 4};
    EXPECT_NE(error_of(j).find("compress_ratios[2] = 7"), std::string::npos);
    j = tiny();
    j["compress_ratios"] = {0, 4};
    EXPECT_NE(error_of(j).find("'compress_ratios' has 2 entries but num_hidden_layers is 4"), std::string::npos);
    j = tiny();
    j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"};
    EXPECT_NE(error_of(j).find("\"full_attention\""), std::string::npos);
    j = tiny();
    j["dim"] = 128;  // disagrees with hidden_size = 64
    EXPECT_NE(error_of(j).find("'hidden_size' (64) and 'dim' (128) disagree"), std::string::npos) << error_of(j);
    j = tiny();
    j["o_groups"] = 3;
    EXPECT_NE(error_of(j).find("not divisible by o_groups = 3"), std::string::npos);
    j = tiny();
    j["scoring_func"] = "relu";
    EXPECT_NE(error_of(j).find("scoring_func \"relu\""), std::string::npos);
    j = tiny();
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}};
    EXPECT_NE(error_of(j).find("original_max_position_embeddings"), std::string::npos);
    j = tiny();
    j["model_type"] = "llama";
    EXPECT_NE(error_of(j).find("model_type \"llama\""), std::string::npos);
    j = tiny();
    j["num_experts_per_tok"] = 9;
    EXPECT_NE(error_of(j).find("'num_experts_per_tok' = 9"), std::string::npos);
    j = tiny();
    j["quantization_config"] = {{"quant_method", "gptq"}};
    EXPECT_NE(error_of(j).find("\"gptq\""), std::string::npos);
    try {
        parse_model_config("{not json", "bad.json");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("bad.json: not valid JSON"), std::string::npos);
    }
}

TEST(ModelConfig, NestedV41ConfigIsRejectedClearly) {
    json j = {{"model_type", "deepseek_v41"}, {"text_config", tiny()}};
    EXPECT_NE(error_of(j).find("text_config"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
