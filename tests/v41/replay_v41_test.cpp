// SPDX-License-Identifier: Apache-2.0
// SWA bounded replay (spec deepseek-v41-model.md §2.3), an approximate prefill that is off by default:
// with the option off, prefill is the exact path; with it on, prompts of at most sliding_window tokens
// are bit-identical to the exact path, longer ones differ, and the error against the exact path (the
// prefill's last logits and the logits of a 16-token greedy decode after it) stays within the bound
// measured on these fixtures (docs/v41-bounded-replay.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "deepinfer/model.h"
#include "deepinfer/model_v41.h"
#include "model/v41/state.h"

namespace deepinfer {
namespace {

// Measured maximum over the fixtures (0.306, docs/v41-bounded-replay.md), rounded up.
constexpr float kBound = 0.35f;

std::shared_ptr<const Model> load(const std::string& name, bool replay) {
    ModelOptions o;
    o.tokenizer_json = DI_TOKENIZER_JSON;
    o.v41_bounded_replay = replay;
    return Model::load(std::string(DI_V41_DATA_DIR) + "/" + name, o);
}

// Prefill `prompt` in one chunk (last logits), then feed `decode` token by token; all logits rows.
std::vector<std::vector<float>> prefill_then_decode(const Model& m, const std::vector<int32_t>& prompt,
                                                    const std::vector<int32_t>& decode) {
    Sequence seq = m.new_sequence();
    std::vector<std::vector<float>> rows = {m.forward(seq, prompt, false)};
    for (int32_t t : decode) rows.push_back(m.forward(seq, std::span<const int32_t>(&t, 1), false));
    return rows;
}

TEST(V41BoundedReplay, OffByDefault) {
    EXPECT_FALSE(ModelOptions{}.v41_bounded_replay);
    const auto m = load("v41_tiny_a", false);
    std::ifstream in(std::string(DI_V41_DATA_DIR) + "/v41_tiny_a/ref.json");
    const std::vector<int32_t> prompt = nlohmann::json::parse(in)["prompts"][1].get<std::vector<int32_t>>();
    Sequence a = m->new_sequence(), b = m->new_sequence();
    const std::vector<float> all = m->forward(a, prompt, true);
    const std::vector<float> last = m->forward(b, prompt, false);
    EXPECT_TRUE(std::equal(last.begin(), last.end(), all.end() - long(last.size())));
}

// The rows before the replayed tail still run the encoder and the decoder's first (KV source) layer's
// compressor: every compressed entry and index key equals the exact path's, bit for bit.
TEST(V41BoundedReplay, GlobalCachesEqualTheExactPath) {
    const auto exact = load("v41_tiny_b", false), replay = load("v41_tiny_b", true);
    std::ifstream in(std::string(DI_V41_DATA_DIR) + "/v41_tiny_b/ref.json");
    const std::vector<int32_t> prompt = nlohmann::json::parse(in)["prompts"][1].get<std::vector<int32_t>>();
    Sequence a = exact->new_sequence(), b = replay->new_sequence();
    exact->forward(a, prompt, false);
    replay->forward(b, prompt, false);
    const auto& sa = dynamic_cast<const v41::SequenceState&>(a.state());
    const auto& sb = dynamic_cast<const v41::SequenceState&>(b.state());
    int64_t sources = 0;
    for (size_t l = 0; l < sa.layers.size(); ++l) {
        const v41::LayerState &la = sa.layers[l], &lb = sb.layers[l];
        ASSERT_EQ(la.num_entries(), lb.num_entries()) << "layer " << l;
        sources += la.ratio > 0;
        for (int64_t e = 0; e < la.num_entries(); ++e) {
            ASSERT_TRUE(std::equal(la.compressed.row(e), la.compressed.row(e) + la.compressed.width(), lb.compressed.row(e)))
                << "layer " << l << " entry " << e;
            ASSERT_TRUE(std::equal(la.index_keys.row(e), la.index_keys.row(e) + la.index_keys.width(), lb.index_keys.row(e)))
                << "layer " << l << " key " << e;
        }
    }
    EXPECT_EQ(sources, 2);  // the ratio-2 (encoder) and ratio-1 (decoder) KV sources
}

class V41BoundedReplayError : public ::testing::TestWithParam<std::string> {};

TEST_P(V41BoundedReplayError, WithinMeasuredBound) {
    const auto exact = load(GetParam(), false), replay = load(GetParam(), true);
    const auto& cfg = dynamic_cast<const V41Model&>(*exact).config().text;
    std::ifstream in(std::string(DI_V41_DATA_DIR) + "/" + GetParam() + "/ref.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    float worst = 0;
    for (size_t i = 0; i < ref["prompts"].size(); ++i) {
        const std::vector<int32_t> prompt = ref["prompts"][i].get<std::vector<int32_t>>();
        const std::vector<int32_t> greedy = ref["greedy"][i].get<std::vector<int32_t>>();
        ASSERT_GT(int64_t(prompt.size()), cfg.sliding_window);
        // Short prompts (<= the window) never replay: bit-identical.
        const std::vector<int32_t> short_prompt(prompt.begin(), prompt.begin() + cfg.sliding_window);
        EXPECT_EQ(prefill_then_decode(*exact, short_prompt, greedy), prefill_then_decode(*replay, short_prompt, greedy));
        const auto want = prefill_then_decode(*exact, prompt, greedy);
        const auto got = prefill_then_decode(*replay, prompt, greedy);
        float err = 0, max_logit = 0, first = 0;
        int top1 = 0;
        for (size_t r = 0; r < want.size(); ++r) {
            float e = 0;
            for (size_t k = 0; k < want[r].size(); ++k) {
                e = std::max(e, std::fabs(got[r][k] - want[r][k]));
                max_logit = std::max(max_logit, std::fabs(want[r][k]));
            }
            if (r == 0) first = e;
            err = std::max(err, e);
            top1 += std::max_element(got[r].begin(), got[r].end()) - got[r].begin() ==
                    std::max_element(want[r].begin(), want[r].end()) - want[r].begin();
        }
        EXPECT_GT(err, 0.0f) << "a prompt longer than the window must take the approximate path";
        std::printf("[ %s prompt %zu ] len %zu: max |dlogit| / max |logit| = %.4f (prefill's last row %.4f), "
                    "top-1 agreement %d/%zu\n",
                    GetParam().c_str(), i, prompt.size(), double(err / max_logit), double(first / max_logit), top1,
                    want.size());
        worst = std::max(worst, err / max_logit);
    }
    EXPECT_LE(worst, kBound) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(V41, V41BoundedReplayError, ::testing::Values("v41_tiny_a", "v41_tiny_b"));

}  // namespace
}  // namespace deepinfer
