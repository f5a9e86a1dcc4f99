// SPDX-License-Identifier: Apache-2.0
// V4.1 checkpoint inventory (spec deepseek-v41-model.md §7): the expected list reproduces the
// release's pinned tensor count; transformers' saved fixtures and a synthetic checkpoint written in the
// published layout (FP8 32x32, MXFP4 experts, FP8 Engram tables, drafter, vision, shards) are
// recognized tensor by tensor; a schedule mismatch is reported by name; the synthetic checkpoint loads
// and runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unistd.h>

#include "deepinfer/checkpoint.h"
#include "deepinfer/inspect_v41.h"
#include "deepinfer/model_v41.h"
#include "deepinfer/synthetic_v41.h"
#include "deepinfer/weight_inventory_v41.h"
#include "tiny_published_config.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

class SyntheticV41 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = (fs::temp_directory_path() / ("deepinfer-v41-published-" + std::to_string(::getpid()))).string();
        write_synthetic_v41_checkpoint(dir_, tiny_published_config().dump(2),
                                       {.seed = 7, .residual_damping = 0.5, .include_drafter = true,
                                        .include_vision = true, .sharded = true});
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }
    static std::string dir_;
};
std::string SyntheticV41::dir_;

TEST(InventoryV41, ReleaseConfigMatchesTheSpecAndThePinnedTensorCount) {
    const V41ModelConfig file = load_v41_model_config(std::string(DI_V41_DATA_DIR) + "/configs/deepseek-v41-flash.json");
    const V41ModelConfig built = parse_v41_model_config(v41_flash_config().dump());
    EXPECT_EQ(describe_v41_model_config(built), describe_v41_model_config(file));
    EXPECT_EQ(built.text.engram_num_embeddings, file.text.engram_num_embeddings);
    // spec §7.2: 6 + 40·2,334 + 3·8 + 7 + 4·3 + 2·6 + 263 + 3·798 + 7 = 96,085.
    EXPECT_EQ(published_tensor_count_v41(file, true, true), 96085);
    EXPECT_EQ(published_tensor_count_v41(file, false, false), 96085 - 263 - 3 - 3 * 798 - 7);
    // One backbone layer without extras holds 2,334 tensors (scales included).
    int64_t layer0 = 0;
    for (const ExpectedTensor& e : expected_tensors_v41(file, false, false))
        if (e.name.rfind("layers.0.", 0) == 0) layer0 += e.kind == WeightKind::kFloat ? 1 : 2;
    EXPECT_EQ(layer0, 2334);
}

TEST(InventoryV41, TransformersFixturesAreComplete) {
    for (const char* name : {"v41_tiny_a", "v41_tiny_b"}) {
        const std::string dir = std::string(DI_V41_DATA_DIR) + "/" + name;
        const V41ModelConfig c = load_v41_model_config(dir + "/config.json");
        const Checkpoint ckpt(dir, {.read_v4_config = false});
        const InventoryReport r = check_inventory_v41(ckpt, c);
        EXPECT_TRUE(r.complete()) << name << ": missing " << r.missing.size() << ", unexpected " << r.unexpected.size()
                                  << ", mismatched " << r.mismatched.size()
                                  << (r.missing.empty() ? "" : " first missing " + r.missing[0])
                                  << (r.unexpected.empty() ? "" : " first unexpected " + r.unexpected[0])
                                  << (r.mismatched.empty() ? "" : " first mismatched " + r.mismatched[0]);
        EXPECT_EQ(ckpt.naming_scheme(), NamingScheme::kTransformers);
        EXPECT_FALSE(r.has_mtp);
        EXPECT_FALSE(r.has_vision);
    }
}

TEST_F(SyntheticV41, PublishedLayoutIsRecognizedTensorByTensor) {
    const V41ModelConfig c = parse_v41_model_config(read_text(dir_ + "/config.json"));
    const Checkpoint ckpt(dir_, {.read_v4_config = false});
    EXPECT_EQ(ckpt.naming_scheme(), NamingScheme::kDeepSeek);
    // One shard per layer, each Engram table apart, the drafter, and the top-level group.
    EXPECT_EQ(ckpt.files().size(), 8u + 2u + 1u + 1u);
    EXPECT_TRUE(fs::exists(dir_ + "/model.safetensors.index.json"));
    const InventoryReport r = check_inventory_v41(ckpt, c);
    EXPECT_TRUE(r.complete()) << (r.missing.empty() ? "" : "first missing " + r.missing[0])
                              << (r.unexpected.empty() ? "" : " first unexpected " + r.unexpected[0])
                              << (r.mismatched.empty() ? "" : " first mismatched " + r.mismatched[0]);
    EXPECT_TRUE(r.has_mtp);
    EXPECT_TRUE(r.has_vision);
    EXPECT_EQ(int64_t(ckpt.tensors().size()), published_tensor_count_v41(c, true, true));

    // The published formats, tensor by tensor (spec §7.2).
    auto dtype_of = [&](const std::string& n) {
        const CheckpointTensor* t = ckpt.find(n);
        EXPECT_NE(t, nullptr) << n;
        return t ? t->info->dtype : DType::kF32;
    };
    auto shape_of = [&](const std::string& n) { return ckpt.find(n)->info->shape; };
    EXPECT_EQ(dtype_of("layers.3.attn.wq_b.weight"), DType::kF8E4M3);
    EXPECT_EQ(shape_of("layers.3.attn.wq_b.scale"), Shape({256 / 32, 64 / 32}));  // 32x32 blocks
    EXPECT_EQ(dtype_of("layers.3.ffn.experts.5.w2.weight"), DType::kI8);              // packed e2m1 pairs
    EXPECT_EQ(shape_of("layers.3.ffn.experts.5.w2.weight"), Shape({128, 32}));
    EXPECT_EQ(shape_of("layers.3.ffn.experts.5.w2.scale"), Shape({128, 2}));
    EXPECT_EQ(dtype_of("layers.1.engram.embed.weight"), DType::kF8E4M3);
    EXPECT_EQ(dtype_of("layers.1.engram.embed.scale"), DType::kF8E8M0);
    EXPECT_EQ(shape_of("layers.1.engram.embed.scale"), Shape({c.text.engram_num_embeddings[0], 1}));
    EXPECT_EQ(dtype_of("embed.weight"), DType::kBF16);
    EXPECT_EQ(dtype_of("layers.2.attn.compressor.wgate.weight"), DType::kBF16);
    EXPECT_EQ(ckpt.find("layers.4.attn.compressor.wgate.weight"), nullptr);  // ratio 1: no gate
    EXPECT_NE(ckpt.find("layers.6.attn.indexer.wq_b.weight"), nullptr);        // Reindex
    EXPECT_EQ(ckpt.find("layers.6.attn.indexer.wk.weight"), nullptr);
    EXPECT_EQ(ckpt.find("layers.5.attn.indexer.wq_b.weight"), nullptr);  // Reuse
    EXPECT_EQ(dtype_of("layers.0.hc_attn_fn"), DType::kF32);
    EXPECT_EQ(shape_of("mtp.0.main_proj.weight"), Shape({128, 3 * 128}));
    EXPECT_EQ(shape_of("mtp.2.confidence_head.proj.weight"), Shape({1, 128 + 16}));
    EXPECT_EQ(shape_of("aligner.w1.weight"), Shape({128, 32 * 9}));

    const std::string text = inspect_v41_text(ckpt, c);
    EXPECT_NE(text.find("complete    yes"), std::string::npos) << text;
    EXPECT_NE(text.find("reindex"), std::string::npos);
    const nlohmann::json j = nlohmann::json::parse(inspect_v41_json(ckpt, c));
    EXPECT_TRUE(j["complete"].get<bool>());
    EXPECT_EQ(j["layers"][6]["csa2"], "reindex");
    EXPECT_EQ(j["layers"][5]["kv_source"], 4);
    EXPECT_EQ(j["layers"][5]["index_source"], 4);
    EXPECT_EQ(j["layers"][7]["index_source"], 6);
    EXPECT_EQ(j["layers"][4]["half"], "decoder");
}

TEST_F(SyntheticV41, ScheduleMismatchIsReportedByName) {
    // Read the checkpoint with a schedule in which layer 3 is a Full layer instead of Reuse: its
    // compressor and indexer are missing; and one in which layer 2 is Reuse: its extras are unexpected.
    nlohmann::ordered_json j = tiny_published_config();
    j["text_config"]["kv_source_layer_ids"] = {2, 3, 4};
    j["text_config"]["index_source_layer_ids"] = {2, 3, 4, 6};
    const Checkpoint ckpt(dir_, {.read_v4_config = false});
    InventoryReport r = check_inventory_v41(ckpt, parse_v41_model_config(j.dump()));
    EXPECT_FALSE(r.complete());
    std::set<std::string> missing(r.missing.begin(), r.missing.end());
    EXPECT_TRUE(missing.count("layers.3.attn.compressor.wkv.weight"));
    EXPECT_TRUE(missing.count("layers.3.attn.indexer.wq_b.weight"));
    EXPECT_TRUE(r.unexpected.empty());

    nlohmann::ordered_json k = tiny_published_config();
    k["text_config"]["hidden_size"] = 96;  // every D-shaped tensor is now mismatched
    r = check_inventory_v41(ckpt, parse_v41_model_config(k.dump()));
    EXPECT_FALSE(r.mismatched.empty());
    EXPECT_NE(r.mismatched[0].find("expected"), std::string::npos) << r.mismatched[0];
}

TEST_F(SyntheticV41, PublishedLayoutLoadsAndRuns) {
    const auto model = V41Model::load(dir_, DI_TOKENIZER_JSON);
    const std::vector<int32_t> ids = {0, 17, 400, 3, 3, 98, 250, 511, 12, 60, 61, 62, 5, 200, 300, 7, 8, 9, 10, 11};
    const std::vector<float> all = model->forward(ids);
    const int64_t V = model->config().text.vocab_size;
    ASSERT_EQ(all.size(), ids.size() * size_t(V));
    float amax = 0;
    for (float v : all) {
        ASSERT_TRUE(std::isfinite(v));
        amax = std::max(amax, std::fabs(v));
    }
    EXPECT_GT(amax, 0.0f);
    // Chunked (5 + 1 + 14) equals one forward, bit for bit, on FP8/FP4 weights too.
    V41Sequence seq;
    std::vector<float> chunked;
    for (auto [b, e] : {std::pair<size_t, size_t>{0, 5}, {5, 6}, {6, ids.size()}}) {
        const std::vector<float> part =
            model->forward(std::span<const int32_t>(ids.data() + b, e - b), seq);
        chunked.insert(chunked.end(), part.begin(), part.end());
    }
    EXPECT_EQ(chunked, all);
}

}  // namespace
}  // namespace deepinfer
