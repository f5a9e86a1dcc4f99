// SPDX-License-Identifier: Apache-2.0
// V4.1 `official` numerics (src/model/v41/numerics.h): no end-to-end reference exists here (the official
// inference code is not public; spec §12), so the mode is guarded by its ops (the cache formats and the
// 32-wide act_quant bit for bit, qat_v41_test.cpp) and by these properties: it is the default for FP8/FP4
// checkpoints; it stays within a measured distance of the exact (transformers-checked) logits and is not
// the exact mode in disguise; every activation it hands between ops is a bf16 value; chunked prefill,
// decode and batching are bit-identical to one forward, as in exact mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <unistd.h>

#include "deepinfer/model.h"
#include "deepinfer/model_v41.h"
#include "deepinfer/synthetic_v41.h"
#include "tiny_published_config.h"

namespace deepinfer {
namespace {

std::unique_ptr<V41Model> load(const std::string& dir, std::optional<Numerics> numerics) {
    ModelOptions o;
    o.tokenizer_json = DI_TOKENIZER_JSON;
    if (numerics) {
        o.numerics_from_checkpoint = false;
        o.numerics = *numerics;
    }
    return V41Model::load(dir, o);
}

std::vector<int32_t> prompt_of(const std::string& dir, int i) {
    std::ifstream in(dir + "/ref.json");
    return nlohmann::json::parse(in)["prompts"][i].get<std::vector<int32_t>>();
}

class OfficialV41 : public ::testing::TestWithParam<const char*> {};

TEST_P(OfficialV41, ChunkedDecodeAndBatchesAreBitIdentical) {
    const std::string dir = std::string(DI_V41_DATA_DIR) + "/" + GetParam();
    const auto model = load(dir, Numerics::kOfficial);
    const std::vector<int32_t> ids = prompt_of(dir, 1);
    const std::vector<float> whole = model->forward(ids);
    const int64_t V = model->info().vocab_size;
    // Chunks of 7, then token by token for the last 9.
    Sequence seq = model->new_sequence();
    std::vector<float> pieces;
    size_t at = 0;
    while (at < ids.size()) {
        const size_t n = at + 9 >= ids.size() ? 1 : std::min<size_t>(7, ids.size() - at);
        const std::vector<float> part = model->forward(seq, std::span<const int32_t>(ids).subspan(at, n), true);
        pieces.insert(pieces.end(), part.begin(), part.end());
        at += n;
    }
    EXPECT_TRUE(pieces == whole);
    // Inside a batch of random neighbours.
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> others(5);
    for (auto& o : others) {
        o.resize(1 + rng() % 40);
        for (int32_t& t : o) t = int32_t(rng() % uint32_t(V));
    }
    std::vector<Sequence> seqs;
    for (int i = 0; i < 6; ++i) seqs.push_back(model->new_sequence());
    std::vector<SequenceChunk> chunks;
    for (int i = 0; i < 6; ++i)
        chunks.push_back({&seqs[size_t(i)], i == 3 ? std::span<const int32_t>(ids) : std::span<const int32_t>(others[size_t(i % 5)]),
                          true});
    EXPECT_TRUE(model->forward_batch(chunks)[3] == whole);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OfficialV41, ::testing::Values("v41_tiny_a", "v41_tiny_b"));

// A published-layout checkpoint (FP8 32x32, MXFP4 experts, FP8 Engram tables) with the residual
// branches damped x0.1: testing-notes.md §3 measured that official numerics are path-dependent on
// undamped random models (tens of percent between two orders of the same official code), and that
// damping brings that noise to ~0.2%. On it, official and exact must be close, and not identical.
class OfficialV41Published : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        namespace fs = std::filesystem;
        dir_ = (fs::temp_directory_path() / ("deepinfer-v41-official-" + std::to_string(::getpid()))).string();
        // The shared tiny config cut to 6 layers (5 = Reindex), 16 indexer heads, no drafter or vision.
        nlohmann::ordered_json j = tiny_published_config();
        auto& t = j["text_config"];
        t["num_hidden_layers"] = 6;
        t["compress_ratios"] = {0, 0, 2, 2, 1, 1};
        t["index_source_layer_ids"] = {2, 4, 5};
        t["index_n_heads"] = 16;
        t["num_nextn_predict_layers"] = 0;
        t["dspark_target_layer_ids"] = nlohmann::ordered_json::array();
        j.erase("vision_config");
        set_v41_engram_rows(j);
        write_synthetic_v41_checkpoint(dir_, j.dump(), {.seed = 11, .residual_damping = 0.1, .include_drafter = false});
    }
    static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
    static std::string dir_;
};
std::string OfficialV41Published::dir_;

TEST_F(OfficialV41Published, DefaultCloseToExactAndChunkInvariant) {
    const auto official = load(dir_, std::nullopt), exact = load(dir_, Numerics::kExact);
    EXPECT_EQ(official->numerics(), Numerics::kOfficial);  // FP8/FP4 checkpoint: official by default
    std::vector<int32_t> ids(40);
    std::mt19937 rng(3);
    for (int32_t& id : ids) id = int32_t(rng() % 512u);
    const std::vector<float> whole = official->forward(ids), ref = exact->forward(ids);
    float err = 0, amax = 0;
    for (size_t k = 0; k < whole.size(); ++k) {
        ASSERT_TRUE(std::isfinite(whole[k]));
        err = std::max(err, std::fabs(whole[k] - ref[k]));
        amax = std::max(amax, std::fabs(ref[k]));
    }
    std::printf("[ published, damped x0.1 ] official vs exact: max |err| %.3g, max |logit| %.3g (rel %.3g)\n",
                double(err), double(amax), double(err / amax));
    EXPECT_LT(err, 0.05f * amax);
    EXPECT_GT(err, 1e-4f * amax) << "official numerics changed nothing";
    Sequence seq = official->new_sequence();
    std::vector<float> pieces;
    for (auto [b, n] : {std::pair<size_t, size_t>{0, 11}, {11, 1}, {12, 28}}) {
        const std::vector<float> part = official->forward(seq, std::span<const int32_t>(ids).subspan(b, n), true);
        pieces.insert(pieces.end(), part.begin(), part.end());
    }
    EXPECT_TRUE(pieces == whole);
}

}  // namespace
}  // namespace deepinfer
