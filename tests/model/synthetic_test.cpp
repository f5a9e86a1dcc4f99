// SPDX-License-Identifier: Apache-2.0
// The synthetic checkpoint writer's parallel form (SyntheticCheckpointOptions::parallel, used for the
// 157 GB full-size benchmark model): deterministic, the same layout as the sequential writer with
// other random values, and a checkpoint the model loads and runs (bf16 linears and FP4 experts: the
// tiny widths have no whole 128-blocks for FP8).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "deepinfer/model_config.h"
#include "deepinfer/synthetic.h"
#include "model/forward.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string header_of(const std::string& file) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(file[size_t(i)])) << (8 * i);
    return file.substr(8, n);
}

TEST(SyntheticWriter, ParallelIsDeterministicSameLayoutOtherValuesAndRuns) {
    const std::string config = slurp(test::data_path("models/v4_tiny_a/config.json"));
    const auto root = std::filesystem::temp_directory_path() / "deepinfer-synthetic-parallel";
    std::filesystem::remove_all(root);
    const std::string seq = (root / "seq").string(), p1 = (root / "p1").string(), p2 = (root / "p2").string();
    write_synthetic_checkpoint(seq, config, {.seed = 5, .fp8_linears = false});
    write_synthetic_checkpoint(p1, config, {.seed = 5, .fp8_linears = false, .parallel = true});
    write_synthetic_checkpoint(p2, config, {.seed = 5, .fp8_linears = false, .parallel = true});
    const std::string a = slurp(seq + "/model.safetensors"), b = slurp(p1 + "/model.safetensors"),
                      c = slurp(p2 + "/model.safetensors");
    ASSERT_GT(a.size(), 1000u);
    EXPECT_EQ(b, c) << "the parallel writer is not deterministic";
    EXPECT_EQ(a.size(), b.size());
    EXPECT_EQ(header_of(a), header_of(b)) << "same tensors, dtypes, shapes and offsets";
    const size_t data = 8 + header_of(a).size();
    size_t differ = 0;
    for (size_t i = data; i < a.size(); ++i) differ += a[i] != b[i];
    EXPECT_GT(differ, (a.size() - data) / 4) << "parallel pieces use their own random streams";
    // The parallel checkpoint is a working model: finite logits for a prompt, greedy decode runs.
    ModelOptions exact;  // (official numerics' act_quant needs widths of 128; the tiny config has 64)
    exact.numerics_from_checkpoint = false;
    exact.numerics = Numerics::kExact;
    auto m = load_v4_model(p1, exact);
    Sequence s = m->new_sequence();
    const std::vector<int32_t> prompt = {1, 17, 300, 5, 42};
    const std::vector<float> logits = m->forward(s, prompt, true);
    ASSERT_EQ(logits.size(), prompt.size() * size_t(m->info().vocab_size));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    std::filesystem::remove_all(root);
}

TEST(SyntheticWriter, FlashConfigHasTheScheduleAndCuts) {
    const std::string text =
        v4_flash_config({.compress_ratios = {0, 4, 128, 4}, .num_hash_layers = 2, .n_routed_experts = 32, .vocab_size = 4096});
    const ModelConfig c = parse_model_config(text, "v4_flash_config");
    EXPECT_EQ(c.num_hidden_layers, 4);
    ASSERT_EQ(c.layer_types.size(), 4u);
    EXPECT_EQ(c.layer_types[0], AttentionType::kSliding);
    EXPECT_EQ(c.layer_types[1], AttentionType::kCsa);
    EXPECT_EQ(c.layer_types[2], AttentionType::kHca);
    EXPECT_EQ(c.compress_ratio(1), 4);
    EXPECT_EQ(c.compress_ratio(2), 128);
    EXPECT_EQ(c.mlp_layer_types[1], MlpType::kHashMoe);
    EXPECT_EQ(c.mlp_layer_types[2], MlpType::kMoe);
    EXPECT_EQ(c.n_routed_experts, 32);
    EXPECT_EQ(c.vocab_size, 4096);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.num_experts_per_tok, 6);
}

}  // namespace
}  // namespace deepinfer
