// SPDX-License-Identifier: Apache-2.0
// Checkpoint directories: single and sharded files, both naming schemes, the inventory check
// (missing / unexpected / mismatched), and a hostile index. The transformers-written fixtures
// under tests/data/v4_tiny_* are checked in tests/python/test_inspect_cli.py and below.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "deepinfer/check.h"
#include "deepinfer/checkpoint.h"
#include "deepinfer/weight_inventory.h"
#include "unit/fixtures.h"
#include "unit/safetensors_writer.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using test::TensorBytes;

json tiny_config() {
    return json{{"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"},
                {"vocab_size", 64}, {"hidden_size", 32}, {"num_hidden_layers", 3}, {"num_attention_heads", 2},
                {"head_dim", 32}, {"qk_rope_head_dim", 8}, {"q_lora_rank", 32}, {"o_groups", 2},
                {"o_lora_rank", 16}, {"sliding_window", 4}, {"n_routed_experts", 2}, {"num_experts_per_tok", 1},
                {"moe_intermediate_size", 64}, {"index_n_heads", 2}, {"index_head_dim", 16}, {"index_topk", 2},
                {"compress_ratios", {0, 4, 8, 0}}, {"compress_rates", {{"compressed_sparse_attention", 4},
                                                                       {"heavily_compressed_attention", 8}}},
                {"num_hash_layers", 1}, {"num_nextn_predict_layers", 1}, {"hc_mult", 2},
                {"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}, {"scale_fmt", "ue8m0"}}},
                {"expert_dtype", "fp4"}};
}

// Tensors in the published layout: FP8 linears with ue8m0 block scales, packed FP4 experts.
std::vector<TensorBytes> published_tensors(const ModelConfig& c) {
    std::vector<TensorBytes> out;
    auto bytes = [](DType dt, const Shape& s) {
        return std::vector<uint8_t>(*dtype_storage_bytes(dt, uint64_t(s.numel())), uint8_t(0x11));
    };
    auto vec = [](const Shape& s) {
        std::vector<int64_t> v;
        for (int i = 0; i < s.ndim(); ++i) v.push_back(s[i]);
        return v;
    };
    for (const ExpectedTensor& e : expected_tensors(c)) {
        std::string base = e.name.substr(0, e.name.size() - std::string(".weight").size());
        if (e.kind == WeightKind::kLinear) {
            Shape s{(e.shape[0] + 15) / 16, (e.shape[1] + 15) / 16};
            out.push_back({e.name, DType::kF8E4M3, vec(e.shape), bytes(DType::kF8E4M3, e.shape)});
            out.push_back({base + ".scale", DType::kF8E8M0, vec(s), bytes(DType::kF8E8M0, s)});
        } else if (e.kind == WeightKind::kExpertLinear) {
            Shape w{e.shape[0], e.shape[1] / 2}, s{e.shape[0], e.shape[1] / 32};
            out.push_back({e.name, DType::kI8, vec(w), bytes(DType::kI8, w)});
            out.push_back({base + ".scale", DType::kF8E8M0, vec(s), bytes(DType::kF8E8M0, s)});
        } else if (e.kind == WeightKind::kIndex) {
            out.push_back({e.name, DType::kI64, vec(e.shape), bytes(DType::kI64, e.shape)});
        } else {
            DType dt = e.name.find("hc_") != std::string::npos || e.name.find("ape") != std::string::npos ||
                               e.name.find("attn_sink") != std::string::npos || e.name.find("gate.bias") != std::string::npos
                           ? DType::kF32 : DType::kBF16;
            out.push_back({e.name, dt, vec(e.shape), bytes(dt, e.shape)});
        }
    }
    return out;
}

class CheckpointTest : public ::testing::Test {
protected:
    ModelConfig config = parse_model_config(tiny_config().dump());
    std::string make_dir(const std::string& name) {
        std::string d = test::temp_dir(name);
        test::write_text(d + "/config.json", tiny_config().dump(2));
        return d;
    }
    // Writes `tensors` into `num_shards` files plus an index.
    void write_sharded(const std::string& dir, const std::vector<TensorBytes>& tensors, int num_shards) {
        json weight_map = json::object();
        std::vector<std::vector<TensorBytes>> shards(static_cast<size_t>(num_shards));
        for (size_t i = 0; i < tensors.size(); ++i) shards[i % shards.size()].push_back(tensors[i]);
        for (size_t s = 0; s < shards.size(); ++s) {
            char name[64];
            std::snprintf(name, sizeof(name), "model-%05zu-of-%05d.safetensors", s + 1, num_shards);
            test::write_safetensors(dir + "/" + name, shards[s]);
            for (const auto& t : shards[s]) weight_map[t.name] = name;
        }
        test::write_text(dir + "/model.safetensors.index.json",
                         json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
    }
};

TEST_F(CheckpointTest, PublishedLayoutSingleFileIsComplete) {
    std::string dir = make_dir("published_single");
    test::write_safetensors(dir + "/model.safetensors", published_tensors(config));
    Checkpoint ckpt(dir);
    EXPECT_EQ(ckpt.naming_scheme(), NamingScheme::kDeepSeek);
    InventoryReport r = check_inventory(ckpt, ckpt.config());
    EXPECT_TRUE(r.complete()) << (r.missing.empty() ? "" : r.missing[0]) << (r.mismatched.empty() ? "" : r.mismatched[0]);
    EXPECT_TRUE(r.has_mtp);
    EXPECT_GT(r.bytes_by_dtype.at("fp8_e4m3"), 0u);
    EXPECT_GT(r.bytes_by_dtype.at("i8"), 0u);
}

TEST_F(CheckpointTest, ShardedEqualsSingle) {
    std::string dir = make_dir("published_sharded");
    write_sharded(dir, published_tensors(config), 3);
    Checkpoint ckpt(dir);
    EXPECT_EQ(ckpt.files().size(), 3u);
    EXPECT_TRUE(check_inventory(ckpt, ckpt.config()).complete());
    const CheckpointTensor* t = ckpt.find("layers.1.attn.indexer.wq_b.scale");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(ckpt.view(*t).dtype(), DType::kF8E8M0);
}

TEST_F(CheckpointTest, InventoryNamesMissingUnexpectedAndMismatched) {
    std::string dir = make_dir("published_broken");
    auto tensors = published_tensors(config);
    std::erase_if(tensors, [](const TensorBytes& t) { return t.name == "layers.1.attn.compressor.ape"; });
    std::erase_if(tensors, [](const TensorBytes& t) { return t.name == "layers.2.attn.wo_b.scale"; });
    for (auto& t : tensors)
        if (t.name == "layers.0.attn.kv_norm.weight") {
            t.shape = {16};
            t.bytes.resize(32);
        }
    tensors.push_back({"layers.0.attn.rogue", DType::kF32, {2}, std::vector<uint8_t>(8)});
    test::write_safetensors(dir + "/model.safetensors", tensors);
    Checkpoint ckpt(dir);
    InventoryReport r = check_inventory(ckpt, ckpt.config());
    EXPECT_FALSE(r.complete());
    EXPECT_EQ(r.missing, (std::vector<std::string>{"layers.1.attn.compressor.ape", "layers.2.attn.wo_b.scale"}));
    EXPECT_EQ(r.unexpected, std::vector<std::string>{"layers.0.attn.rogue"});
    ASSERT_EQ(r.mismatched.size(), 1u);
    EXPECT_NE(r.mismatched[0].find("layers.0.attn.kv_norm.weight: is bf16[16], expected a float tensor [32]"),
              std::string::npos) << r.mismatched[0];
}

void expect_error(const std::string& dir, const std::string& needle) {
    try {
        Checkpoint ckpt(dir);
        FAIL() << "expected an error containing " << needle;
    } catch (const Error& e) {
        EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
}

TEST_F(CheckpointTest, HostileIndex) {
    auto tensors = published_tensors(config);
    std::string dir = make_dir("index_traversal");
    test::write_safetensors(dir + "/model-1.safetensors", tensors);
    test::write_text(dir + "/model.safetensors.index.json",
                     json{{"weight_map", {{"embed.weight", "../../etc/passwd"}}}}.dump());
    expect_error(dir, "is not a plain file name");

    dir = make_dir("index_missing_shard");
    test::write_text(dir + "/model.safetensors.index.json", json{{"weight_map", {{"embed.weight", "nope.safetensors"}}}}.dump());
    expect_error(dir, "shard 'nope.safetensors' (listed for tensor 'embed.weight') does not exist");

    dir = make_dir("index_wrong_shard");
    write_sharded(dir, tensors, 2);
    auto index = json::parse(std::ifstream(dir + "/model.safetensors.index.json"));
    index["weight_map"]["embed.weight"] = index["weight_map"]["embed.weight"] == "model-00001-of-00002.safetensors"
                                              ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    test::write_text(dir + "/model.safetensors.index.json", index.dump());
    expect_error(dir, "tensor 'embed.weight'");

    dir = make_dir("index_json");
    test::write_text(dir + "/model.safetensors.index.json", "{\"weight_map\": ");
    expect_error(dir, "not valid JSON");

    dir = make_dir("duplicate_across_schemes");
    test::write_safetensors(dir + "/a.safetensors", {{"embed.weight", DType::kF32, {1}, std::vector<uint8_t>(4)}});
    test::write_safetensors(dir + "/b.safetensors",
                            {{"model.embed_tokens.weight", DType::kF32, {1}, std::vector<uint8_t>(4)}});
    expect_error(dir, "duplicates");

    dir = make_dir("bad_config");
    test::write_text(dir + "/config.json", "{\"model_type\": \"deepseek_v4\", \"hidden_size\": -3}");
    expect_error(dir, "config.json");
}

// The tiny checkpoints transformers 5.17 wrote (tools/reference/make_v4_models.py).
class TransformersFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(TransformersFixture, InventoryComplete) {
    Checkpoint ckpt(test::data_path(GetParam()));
    const bool upstream = std::string(GetParam()).find("upstream") != std::string::npos;
    EXPECT_EQ(ckpt.naming_scheme(), upstream ? NamingScheme::kDeepSeek : NamingScheme::kTransformers);
    InventoryReport r = check_inventory(ckpt, ckpt.config());
    std::string problems;
    for (const auto& m : r.missing) problems += "missing " + m + "\n";
    for (const auto& m : r.unexpected) problems += "unexpected " + m + "\n";
    for (const auto& m : r.mismatched) problems += "mismatched " + m + "\n";
    EXPECT_TRUE(r.complete()) << problems;
    EXPECT_GT(r.num_parameters, 0);
}

INSTANTIATE_TEST_SUITE_P(Tiny, TransformersFixture,
                         ::testing::Values("models/v4_tiny_a", "models/v4_tiny_a_sharded", "models/v4_tiny_a_upstream",
                                           "models/v4_tiny_b", "models/v4_tiny_b_sharded", "models/v4_tiny_b_upstream"));

}  // namespace
}  // namespace deepinfer
