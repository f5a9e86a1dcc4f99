// SPDX-License-Identifier: Apache-2.0
// DeepSeek-V4.1's SWA bounded replay (ModelOptions::v41_bounded_replay, docs/v41-bounded-replay.md) on
// the CUDA backend against the CPU model's: with the option on, a long prompt's prefill logits and the
// decode logits after it are bit-identical to the CPU's bounded replay (as the exact path's are, in
// cuda_v41_model_test.cpp), greedy continuations identical; prompts of at most W tokens give the exact
// path's logits; long prompts differ from the exact path (the option does something); in a batch that
// mixes replayed prefills with other sequences, those get the results they get alone on the exact
// path and the replayed ones the results they get alone. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "deepinfer/embedded.h"
#include "deepinfer/model.h"
#include "deepinfer/model_v41.h"
#include "model/v41_test_options.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

int32_t argmax(const std::vector<float>& l) {
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// Prefill `prompt` in one chunk (last logits), then `steps` greedy decode steps: every logits row and
// the greedy tokens.
struct GreedyRun {
    std::vector<std::vector<float>> rows;
    std::vector<int32_t> tokens;
};
GreedyRun prefill_then_greedy(const Model& m, const std::vector<int32_t>& prompt, int steps) {
    GreedyRun r;
    Sequence seq = m.new_sequence();
    r.rows.push_back(m.forward(seq, prompt, false));
    for (int i = 0; i < steps; ++i) {
        const int32_t t = argmax(r.rows.back());
        r.tokens.push_back(t);
        r.rows.push_back(m.forward(seq, std::span<const int32_t>(&t, 1), false));
    }
    return r;
}

struct Case {
    const char* model;  // a tests/data/v41 fixture or "embedded"
    Numerics numerics;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << numerics_name(c.numerics); }

class CudaV41Replay : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        std::string dir;
        if (std::string(GetParam().model) != "embedded") {
            dir = test::data_path(std::string("v41/") + GetParam().model);
            std::ifstream in(dir + "/ref.json");
            // The parsed document is named: a range-for over a member of a temporary json would iterate a
            // destroyed object (C++20 extends only the outer temporary's lifetime), which left prompts_ empty.
            const nlohmann::json ref = nlohmann::json::parse(in);
            for (const auto& p : ref.at("prompts")) prompts_.push_back(p.get<std::vector<int32_t>>());
        } else {
            dir = ensure_embedded_model((fs::temp_directory_path() / "deepinfer-cuda-v41-embedded").string(),
                                        kEmbeddedDefault);
            std::mt19937 rng(11);
            for (int64_t len : {37, 150, 61}) {
                std::vector<int32_t> p(static_cast<size_t>(len));
                for (int32_t& t : p) t = static_cast<int32_t>(rng() % 129280u);
                prompts_.push_back(p);
            }
        }
        const Numerics n = GetParam().numerics;
        cpu_ = V41Model::load(dir, test::v41_options(n, /*graphs=*/true, /*replay=*/true));
        gpu_ = cuda::load_cuda_v41_model(dir, test::v41_options(n, /*graphs=*/true, /*replay=*/true));
        // The exact path's reference launches its kernels directly (CUDA graphs give the same bits:
        // cuda_v41_runtime_test.cpp), so one model of the process captures graphs.
        exact_ = cuda::load_cuda_v41_model(dir, test::v41_options(n, /*graphs=*/false, /*replay=*/false));
        W_ = dynamic_cast<const V41Model&>(*cpu_).config().text.sliding_window;
        ASSERT_GE(prompts_.size(), 3u) << name();
        for (const auto& p : prompts_) ASSERT_GT(int64_t(p.size()), W_);
    }
    std::string name() const { return std::string(GetParam().model) + "/" + std::string(numerics_name(GetParam().numerics)); }
    std::vector<std::vector<int32_t>> prompts_;
    std::unique_ptr<Model> cpu_, gpu_, exact_;
    int64_t W_ = 0;
};

TEST_P(CudaV41Replay, PrefillAndDecodeBitIdenticalToCpuReplay) {
    for (size_t i = 0; i < prompts_.size(); ++i) {
        const GreedyRun want = prefill_then_greedy(*cpu_, prompts_[i], 8);
        const GreedyRun got = prefill_then_greedy(*gpu_, prompts_[i], 8);
        ASSERT_EQ(want.rows.size(), got.rows.size());
        for (size_t r = 0; r < want.rows.size(); ++r)
            EXPECT_TRUE(same_bits(want.rows[r], got.rows[r])) << name() << " prompt " << i << " row " << r
                                                              << (r == 0 ? " (the prefill's last)" : " (decode)");
        EXPECT_EQ(want.tokens, got.tokens) << name() << " prompt " << i;
    }
}

TEST_P(CudaV41Replay, PromptsOfAtMostTheWindowEqualTheExactPath) {
    // A long prompt whose every row's logits are wanted runs the exact path.
    {
        Sequence a = exact_->new_sequence(), b = gpu_->new_sequence();
        EXPECT_TRUE(same_bits(exact_->forward(a, prompts_[1], true), gpu_->forward(b, prompts_[1], true))) << name();
    }
    // Prompts of at most W tokens (short chunks: graph steps on the replay model).
    for (int64_t len : {W_ - 1, W_}) {
        const std::vector<int32_t> p(prompts_[0].begin(), prompts_[0].begin() + len);
        const GreedyRun want = prefill_then_greedy(*exact_, p, 4);
        const GreedyRun got = prefill_then_greedy(*gpu_, p, 4);
        for (size_t r = 0; r < want.rows.size(); ++r)
            EXPECT_TRUE(same_bits(want.rows[r], got.rows[r])) << name() << " length " << len << " row " << r;
    }
}

TEST_P(CudaV41Replay, LongPromptsDifferFromTheExactPath) {
    for (size_t i = 0; i < prompts_.size(); ++i) {
        const GreedyRun want = prefill_then_greedy(*exact_, prompts_[i], 4);
        const GreedyRun got = prefill_then_greedy(*gpu_, prompts_[i], 4);
        bool differ = false;
        for (size_t r = 0; r < want.rows.size(); ++r) differ |= !same_bits(want.rows[r], got.rows[r]);
        EXPECT_TRUE(differ) << name() << " prompt " << i << ": a prompt longer than the window must take the approximate path";
    }
}

// One batch: a long prompt wanting every row's logits (exact path), a replayed prefill, a decode step
// of a started sequence, a second replayed prefill and a short prompt; then a decode step of all of
// them together. The non-replayed chunks equal the exact model's results alone, the replayed ones the
// replay model's results alone (and so the CPU's), bit for bit.
TEST_P(CudaV41Replay, MixedBatchLeavesTheOtherSequencesUnchanged) {
    const std::vector<int32_t>& full = prompts_[2];
    const std::vector<int32_t>& long_a = prompts_[1];
    const std::vector<int32_t> long_b(prompts_[0].rbegin(), prompts_[0].rend());
    const std::vector<int32_t> started(prompts_[2].begin(), prompts_[2].begin() + W_ / 2 + 1);
    const std::vector<int32_t> short_p(prompts_[1].begin(), prompts_[1].begin() + W_ / 2);
    const int32_t next = 3;

    // Alone: the exact model for the others, the replay model for the replayed prompts.
    auto alone = [&](const Model& m, const std::vector<int32_t>& prefix, const std::vector<int32_t>& chunk,
                     bool all) {
        Sequence s = m.new_sequence();
        if (!prefix.empty()) m.forward(s, prefix, false);
        std::vector<std::vector<float>> out = {m.forward(s, chunk, all)};
        out.push_back(m.forward(s, std::span<const int32_t>(&next, 1), false));
        return out;
    };
    const std::vector<int32_t> one = {next};
    const auto want_full = alone(*exact_, {}, full, true);
    const auto want_a = alone(*gpu_, {}, long_a, false);
    const auto want_dec = alone(*exact_, started, one, false);
    const auto want_b = alone(*gpu_, {}, long_b, false);
    const auto want_short = alone(*exact_, {}, short_p, false);
    // (the replay model alone equals the CPU's bounded replay)
    {
        Sequence s = cpu_->new_sequence();
        EXPECT_TRUE(same_bits(cpu_->forward(s, long_a, false), want_a[0])) << name();
        EXPECT_TRUE(same_bits(cpu_->forward(s, one, false), want_a[1])) << name();
    }

    std::vector<Sequence> seqs;
    for (int i = 0; i < 5; ++i) seqs.push_back(gpu_->new_sequence());
    gpu_->forward(seqs[2], started, false);
    const std::vector<SequenceChunk> chunks = {{&seqs[0], full, true, {}},
                                               {&seqs[1], long_a, false, {}},
                                               {&seqs[2], one, false, {}},
                                               {&seqs[3], long_b, false, {}},
                                               {&seqs[4], short_p, false, {}}};
    const auto out = gpu_->forward_batch(chunks);
    ASSERT_EQ(out.size(), 5u);
    EXPECT_TRUE(same_bits(out[0], want_full[0])) << name() << " all-logits prompt";
    EXPECT_TRUE(same_bits(out[1], want_a[0])) << name() << " replayed prompt a";
    EXPECT_TRUE(same_bits(out[2], want_dec[0])) << name() << " decode step";
    EXPECT_TRUE(same_bits(out[3], want_b[0])) << name() << " replayed prompt b";
    EXPECT_TRUE(same_bits(out[4], want_short[0])) << name() << " short prompt";

    std::vector<SequenceChunk> step;
    for (Sequence& s : seqs) step.push_back({&s, one, false, {}});
    const auto out2 = gpu_->forward_batch(step);
    EXPECT_TRUE(same_bits(out2[0], want_full[1])) << name() << " all-logits prompt, next step";
    EXPECT_TRUE(same_bits(out2[1], want_a[1])) << name() << " replayed prompt a, next step";
    EXPECT_TRUE(same_bits(out2[2], want_dec[1])) << name() << " decode step, next step";
    EXPECT_TRUE(same_bits(out2[3], want_b[1])) << name() << " replayed prompt b, next step";
    EXPECT_TRUE(same_bits(out2[4], want_short[1])) << name() << " short prompt, next step";
}

INSTANTIATE_TEST_SUITE_P(Models, CudaV41Replay,
                         ::testing::Values(Case{"v41_tiny_a", Numerics::kExact}, Case{"v41_tiny_b", Numerics::kExact},
                                           Case{"v41_tiny_a", Numerics::kOfficial},
                                           Case{"v41_tiny_b", Numerics::kOfficial}, Case{"embedded", Numerics::kOfficial}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.model) + "_" +
                                    std::string(numerics_name(param_info.param.numerics));
                         });

// The option is off by default (the exact path).
TEST(CudaV41ReplayOptions, OffByDefault) { EXPECT_FALSE(ModelOptions{}.v41_bounded_replay); }

}  // namespace
}  // namespace deepinfer
