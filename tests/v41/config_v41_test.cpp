// SPDX-License-Identifier: Apache-2.0
// V4.1 config parsing (spec §1): the released composite config, transformers' saved forms (nested
// rope_parameters + layer_types, flat text config), and errors that name the key and the value.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "deepinfer/check.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer {
namespace {

using nlohmann::json;
const std::string kV41Data = DI_V41_DATA_DIR;

json released() {
    std::ifstream in(kV41Data + "/configs/deepseek-v41-flash.json");
    return json::parse(in);
}

// The tiny schedule of spec §1.4.
json tiny_text() {
    return json{{"model_type", "deepseek_v41_text"}, {"vocab_size", 512}, {"hidden_size", 128},
                {"num_hidden_layers", 8}, {"num_attention_heads", 4}, {"head_dim", 64},
                {"qk_rope_head_dim", 16}, {"q_lora_rank", 64}, {"o_groups", 2}, {"o_lora_rank", 32},
                {"sliding_window", 8}, {"compress_ratios", {0, 0, 2, 2, 1, 1, 1, 1}},
                {"kv_source_layer_ids", {2, 4}}, {"index_source_layer_ids", {2, 4, 6}},
                {"candidate_source_layer_id", 4}, {"candidate_topk_blocks", 2}, {"candidate_block_size", 4},
                {"index_n_heads", 16}, {"index_head_dim", 32}, {"index_topk", 4}, {"n_routed_experts", 8},
                {"num_experts_per_tok", 2}, {"moe_intermediate_size", 64}, {"engram_layer_ids", {1, 2}},
                {"engram_num_embeddings", {462, 630}}, {"engram_vocab_size", 64}, {"engram_n_heads", 2},
                {"engram_head_dim", 32}, {"num_nextn_predict_layers", 0},
                {"rope_parameters",
                 {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                  {"compress",
                   {{"rope_type", "yarn"}, {"rope_theta", 160000.0}, {"factor", 16.0}, {"beta_fast", 32.0},
                    {"beta_slow", 1.0}, {"original_max_position_embeddings", 64}, {"attention_factor", 1.0}}}}}};
}

json composite(const json& text) {
    return json{{"architectures", {"DeepseekV41ForCausalLM"}}, {"model_type", "deepseek_v41"},
                {"text_config", text}, {"vision_config", nullptr}};
}

V41ModelConfig parse(const json& j) { return parse_v41_model_config(j.dump(), "config.json"); }

// Expects parse to throw with every `needles` entry in the message.
void expect_error(const json& j, std::initializer_list<std::string> needles) {
    try {
        parse(j);
        ADD_FAILURE() << "expected an error for " << j.dump().substr(0, 200);
    } catch (const Error& e) {
        for (const std::string& needle : needles)
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "'" << needle << "' not in: " << e.what();
    }
}

TEST(V41Config, ReleasedFlash) {
    const json j = released();
    EXPECT_TRUE(is_v41_config(j.dump()));
    const V41ModelConfig c = parse(j);
    const V41TextConfig& t = c.text;
    EXPECT_EQ(c.architecture, "DeepseekV41ForCausalLM");
    EXPECT_EQ(t.hidden_size, 5120);
    EXPECT_EQ(t.num_hidden_layers, 40);
    EXPECT_EQ(t.q_lora_rank, 1280);
    EXPECT_EQ(t.compress_ratios.size(), 43u);
    EXPECT_EQ(t.index_n_heads, 32);
    EXPECT_EQ(t.n_routed_experts, 384);
    EXPECT_EQ(t.moe_intermediate_size, 2304);
    EXPECT_DOUBLE_EQ(t.rms_norm_eps, 1e-20);
    EXPECT_DOUBLE_EQ(t.gate_temp, 1.0);
    EXPECT_EQ(t.engram_layer_ids, (std::vector<int64_t>{1, 14}));
    EXPECT_EQ(t.engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
    EXPECT_EQ(t.engram_pad_id, 2);
    EXPECT_EQ(t.engram_num_hash_cols(), 24);
    EXPECT_EQ(t.dspark_target_layer_ids, (std::vector<int64_t>{37, 38, 39}));
    EXPECT_EQ(c.image_token_id, 129264);
    EXPECT_EQ(c.pad_token_id, 2);
    EXPECT_EQ(c.quantization.weight_block_rows, 32);
    EXPECT_EQ(c.quantization.weight_block_cols, 32);
    EXPECT_EQ(c.expert_dtype, "fp4");
    ASSERT_TRUE(c.vision.has_value());
    EXPECT_EQ(c.vision->num_hidden_layers, 32);
    EXPECT_FALSE(t.rope_main.is_yarn());
    EXPECT_TRUE(t.rope_compress.is_yarn());
    EXPECT_DOUBLE_EQ(t.rope_compress.rope_theta, 160000);
    EXPECT_DOUBLE_EQ(t.rope_compress.factor, 16);
    EXPECT_EQ(t.rope_compress.original_max_position_embeddings, 65536);

    // Schedule (spec §1.3): 4 Full, 4 Reindex, 30 Reuse, 2 window-only.
    int counts[4] = {0, 0, 0, 0};
    for (int64_t l = 0; l < 40; ++l) ++counts[int(t.csa_mode(l))];
    EXPECT_EQ(counts[int(CsaMode::kFull)], 4);
    EXPECT_EQ(counts[int(CsaMode::kReindex)], 4);
    EXPECT_EQ(counts[int(CsaMode::kReuse)], 30);
    EXPECT_EQ(counts[int(CsaMode::kWindowOnly)], 2);
    EXPECT_EQ(t.csa_mode(20), CsaMode::kFull);
    EXPECT_EQ(t.csa_mode(24), CsaMode::kReindex);
    EXPECT_EQ(t.kv_source(25), 20);
    EXPECT_EQ(t.index_source(25), 24);
    EXPECT_EQ(t.kv_source(13), 8);
    EXPECT_EQ(t.index_source(13), 8);
    EXPECT_EQ(t.kv_source(1), -1);
    EXPECT_EQ(t.engram_index(14), 1);
    EXPECT_EQ(t.engram_index(2), -1);
    EXPECT_NE(describe_v41_model_config(c).find("4 full, 4 reindex, 30 reuse, 2 window-only"), std::string::npos);
}

TEST(V41Config, TransformersSavedForms) {
    const V41ModelConfig c = parse(composite(tiny_text()));
    EXPECT_FALSE(c.vision.has_value());
    EXPECT_EQ(c.text.compress_ratios.size(), 8u);
    EXPECT_EQ(c.text.csa_mode(6), CsaMode::kReindex);
    EXPECT_EQ(c.text.csa_mode(7), CsaMode::kReuse);
    EXPECT_EQ(c.text.index_source(7), 6);
    EXPECT_EQ(c.text.rope_compress.original_max_position_embeddings, 64);
    EXPECT_TRUE(c.quantization.quant_method.empty());

    // transformers' layer_types must agree with kv_source_layer_ids.
    json t = tiny_text();
    t["layer_types"] = {"sliding_attention", "sliding_attention", "shared_compressed_attention", "sliding_attention",
                        "shared_compressed_attention", "sliding_attention", "sliding_attention", "sliding_attention"};
    EXPECT_NO_THROW(parse(composite(t)));
    t["layer_types"][3] = "shared_compressed_attention";
    expect_error(composite(t), {"text_config.layer_types[3]"});

    // A flat text config (DeepseekV41TextModel) parses too; candidate defaults to the last KV source.
    json flat = tiny_text();
    flat.erase("candidate_source_layer_id");
    EXPECT_TRUE(is_v41_config(flat.dump()));
    EXPECT_EQ(parse(flat).text.candidate_source_layer_id, 4);
    // Drafter entries of compress_ratios are padded with 0.
    flat["num_nextn_predict_layers"] = 2;
    flat["dspark_noise_token_id"] = 5;
    EXPECT_EQ(parse(flat).text.compress_ratios.size(), 10u);
}

TEST(V41Config, ErrorsNameKeyAndValue) {
    json t = tiny_text();
    t["hidden_size"] = "wide";
    expect_error(composite(t), {"text_config.hidden_size", "\"wide\""});

    t = tiny_text();
    t.erase("compress_ratios");
    expect_error(composite(t), {"missing required key 'text_config.compress_ratios'"});

    t = tiny_text();
    t["compress_ratios"] = {0, 0, 2, 2, 1, 1, 1};
    expect_error(composite(t), {"text_config.compress_ratios", "7 entries"});

    t = tiny_text();
    t["kv_source_layer_ids"] = {1, 4};
    expect_error(composite(t), {"kv_source_layer_ids", "layer 1 has compress ratio 0"});

    t = tiny_text();
    t["kv_source_layer_ids"] = {4};
    t["index_source_layer_ids"] = {4, 6};
    expect_error(composite(t), {"layer 2 has compress ratio 2", "kv_source_layer_ids"});

    t = tiny_text();
    t["kv_source_layer_ids"] = {2, 5};
    t["index_source_layer_ids"] = {2, 5, 6};
    t["candidate_source_layer_id"] = 5;
    expect_error(composite(t), {"layer 4 has compress ratio 1 but its KV source, layer 2, has ratio 2"});

    t = tiny_text();
    t["candidate_source_layer_id"] = 5;
    expect_error(composite(t), {"candidate_source_layer_id' = 5"});

    t = tiny_text();
    t["engram_num_embeddings"] = {462};
    expect_error(composite(t), {"engram_num_embeddings' = [462]"});

    t = tiny_text();
    t["num_hash_layers"] = 3;
    expect_error(composite(t), {"num_hash_layers' = 3"});

    t = tiny_text();
    t["rope_parameters"]["compress"]["attention_factor"] = 1.2;
    expect_error(composite(t), {"attention_factor' = 1.2"});

    t = tiny_text();
    t["compress_ratios"] = {0, 0, 2, 2, 1, 1, 1, 1, 2};
    t["num_nextn_predict_layers"] = 1;
    expect_error(composite(t), {"compress_ratios[8] = 2"});

    json j = composite(tiny_text());
    j["architectures"] = {"DeepseekV4ForCausalLM"};
    expect_error(j, {"DeepseekV4ForCausalLM"});

    j = released();
    j["quantization_config"]["expert_dtype"] = "int4";
    expect_error(j, {"quantization_config.expert_dtype' = \"int4\""});

    EXPECT_FALSE(is_v41_config(R"({"model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"]})"));
    EXPECT_FALSE(is_v41_config("not json"));
}

}  // namespace
}  // namespace deepinfer
