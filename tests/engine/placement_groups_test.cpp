// SPDX-License-Identifier: Apache-2.0
// A model that places its sequences in groups (as the expert-parallel CUDA model places each on one
// GPU): the engine splits a step's token budget equally over the groups, so a long prefill on one
// group cannot fill a step while the others idle; outputs are the same as without groups.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <mutex>

#include "deepinfer/engine.h"
#include "engine/engine_run.h"
#include "engine/tiny_engine_model.h"

namespace deepinfer {
namespace {

// A sequence of the grouped model: the tiny model's sequence and the group it was placed in.
class GroupedState : public SequenceState {
public:
    GroupedState(Sequence inner, int group) : inner_(std::move(inner)), group_(group) {}
    int64_t num_tokens() const override { return inner_.num_tokens(); }
    std::unique_ptr<SequenceState> clone() const override { return std::make_unique<GroupedState>(inner_.fork(), group_); }
    void truncate(int64_t n) override { inner_.truncate(n); }
    size_t bytes() const override { return inner_.state().bytes(); }
    size_t unshared_bytes() const override { return inner_.state().unshared_bytes(); }
    Sequence& inner() { return inner_; }
    int group() const { return group_; }

private:
    Sequence inner_;
    int group_;
};

// The tiny CPU model with two placement groups (new sequences alternate) that records the tokens
// each group ran in each forward.
class GroupedModel : public Model {
public:
    explicit GroupedModel(std::shared_ptr<const Model> inner, int groups) : inner_(std::move(inner)), groups_(groups) {}
    const ModelInfo& info() const override { return inner_->info(); }
    Numerics numerics() const override { return inner_->numerics(); }
    uint64_t estimate_state_bytes(int64_t n, uint64_t page) const override { return inner_->estimate_state_bytes(n, page); }
    Sequence new_sequence() const override { return wrap(inner_->new_sequence()); }
    Sequence new_sequence(std::shared_ptr<StatePool> pool) const override { return wrap(inner_->new_sequence(std::move(pool))); }
    std::vector<float> forward(Sequence& s, std::span<const int32_t> t, bool all) const override {
        SequenceChunk c{&s, t, all};
        return std::move(forward_batch(std::span<const SequenceChunk>(&c, 1))[0]);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override {
        std::vector<SequenceChunk> in(chunks.begin(), chunks.end());
        std::array<int64_t, 2> per_group{};
        for (SequenceChunk& c : in) {
            auto& st = static_cast<GroupedState&>(c.sequence->state());
            per_group[size_t(st.group())] += static_cast<int64_t>(c.tokens.size());
            c.sequence = &st.inner();
        }
        {
            std::lock_guard<std::mutex> lock(mu_);
            steps_.push_back(per_group);
        }
        return inner_->forward_batch(in);
    }
    int placement_groups() const override { return groups_; }
    int placement_group(const Sequence& s) const override { return static_cast<const GroupedState&>(s.state()).group(); }
    std::vector<std::array<int64_t, 2>> steps() const {
        std::lock_guard<std::mutex> lock(mu_);
        return steps_;
    }

private:
    Sequence wrap(Sequence inner) const {
        std::lock_guard<std::mutex> lock(mu_);
        return Sequence(std::make_unique<GroupedState>(std::move(inner), groups_ > 1 ? placed_++ % groups_ : 0));
    }
    std::shared_ptr<const Model> inner_;
    int groups_;
    mutable std::mutex mu_;
    mutable int placed_ = 0;
    mutable std::vector<std::array<int64_t, 2>> steps_;
};

std::map<std::string, std::vector<int32_t>> run(std::shared_ptr<const Model> model, const EngineConfig& cfg,
                                                EngineMetrics* metrics = nullptr) {
    return test::run_random_prompts(std::move(model), cfg,
                                    {.count = 4, .first = 150, .step = 37, .seed = 5, .temperature = 0.7, .max_tokens = 4},
                                    metrics);
}

EngineConfig small_steps() {
    EngineConfig cfg;
    cfg.max_num_batched_tokens = 64;
    cfg.max_prefill_chunk = 64;
    cfg.prefix_caching = false;
    return cfg;
}

TEST(EnginePlacementGroups, EachGroupGetsItsShareOfTheStepAndOutputsDoNotChange) {
    const auto plain = run(test::tiny_engine_model(), small_steps());
    auto grouped = std::make_shared<GroupedModel>(test::tiny_engine_model(), 2);
    EXPECT_EQ(run(grouped, small_steps()), plain);
    const auto steps = grouped->steps();
    ASSERT_FALSE(steps.empty());
    // The first step prefills both groups' first prompts, 32 tokens each, not 64 of one.
    EXPECT_EQ(steps.front()[0], 32);
    EXPECT_EQ(steps.front()[1], 32);
    for (const auto& s : steps) {
        EXPECT_LE(s[0], 32);
        EXPECT_LE(s[1], 32);
    }
}

// Memory too short for every prompt at once: sequences are preempted and recomputed (bit-identical
// outputs), each group still within its share of every step.
TEST(EnginePlacementGroups, PreemptionUnderGroupsKeepsOutputsAndShares) {
    EngineConfig tight = small_steps();
    tight.max_num_batched_tokens = 256;  // 128 per group: two 64-token chunks, so all four prompts start
    // Room for three sequences of 100 tokens, in small pages that grow as tokens arrive: three are
    // admitted at their first 64-token chunk and the latest admitted is preempted as they grow.
    tight.state_page_bytes = 1024;
    tight.state_memory_bytes = 3 * test::tiny_engine_model()->estimate_state_bytes(100, tight.state_page_bytes);
    const auto plain = run(test::tiny_engine_model(), tight);
    auto grouped = std::make_shared<GroupedModel>(test::tiny_engine_model(), 2);
    EngineMetrics m;
    EXPECT_EQ(run(grouped, tight, &m), plain);
    EXPECT_GT(m.preemptions, 0);
    for (const auto& s : grouped->steps()) {
        EXPECT_LE(s[0], 128);
        EXPECT_LE(s[1], 128);
    }
}

TEST(EnginePlacementGroups, OneGroupKeepsTheWholeBudget) {
    auto one = std::make_shared<GroupedModel>(test::tiny_engine_model(), 1);
    EXPECT_EQ(run(one, small_steps()), run(test::tiny_engine_model(), small_steps()));
    EXPECT_EQ(one->steps().front()[0], 64);
}

}  // namespace
}  // namespace deepinfer
