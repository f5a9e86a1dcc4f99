// SPDX-License-Identifier: Apache-2.0
// The engine-level checks both DSpark drafters pass (tests/engine/dspark_test.cpp for V4.1,
// dspark_v4_engine_test.cpp for V4-Flash-0731): greedy output with speculation token-identical to
// plain decoding over several (draft length, scheduler) arms, batched with penalties, logprobs and a
// sampled neighbour, alone, and with `auto` choosing the checkpoint's drafter.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/drafter_checks.h"
#include "engine/spec_test_util.h"

namespace deepinfer::test {

// Five greedy requests of 2 .. 1 + prompt_spread prompt tokens and 8 .. 12 generated (one with a
// repetition penalty, which counts accepted drafts of the same step; one with logprobs), then a sampled
// neighbour whose randomness must not leak into them.
inline Requests greedy_requests_with_sampled_neighbour(std::mt19937& rng, int64_t vocab, int64_t prompt_spread) {
    Requests reqs;
    for (int i = 0; i < 5; ++i) {
        SamplingParams sp = greedy(8 + i);
        if (i == 2) sp.repetition_penalty = 1.3;
        if (i == 3) sp.logprobs = 2;
        reqs.emplace_back(std::string("g").append(std::to_string(i)),
                          drafter_checks::random_prompt(rng, 2 + int64_t(rng() % uint64_t(prompt_spread)), vocab), sp);
    }
    SamplingParams hot;
    hot.temperature = 1.0;
    hot.max_tokens = 7;
    hot.ignore_eos = true;
    reqs.emplace_back("hot", drafter_checks::random_prompt(rng, 12, vocab), hot);
    return reqs;
}

// For each (k, scheduler) arm the greedy requests' outputs equal `plain`'s (and a fixed k drafted);
// request `alone` by itself with k = 4; and `auto` with k = 9 (the checkpoint's drafter, k capped at its
// block of `block` drafts). `config(k, scheduler, method)` makes the engine configuration.
template <class MakeConfig>
void expect_dspark_greedy_arms(const std::shared_ptr<const Model>& model, const RunResult& plain, const Requests& reqs,
                               const std::vector<std::pair<int64_t, bool>>& arms, size_t alone, size_t block,
                               MakeConfig config) {
    for (const auto& [k, sched] : arms) {
        const RunResult spec = run(model, config(k, sched, "dspark"), reqs);
        const std::string what = "k=" + std::to_string(k) + " scheduler=" + std::to_string(sched);
        expect_same_greedy_outputs(plain, spec, reqs, what);
        if (!sched) {
            EXPECT_GT(spec.metrics.spec_draft_tokens, 0) << what;
        }
    }
    const Requests one(reqs.begin() + long(alone), reqs.begin() + long(alone) + 1);
    expect_same_greedy_outputs(plain, run(model, config(4, false, "dspark"), one), one, "alone");
    const RunResult a = run(model, config(9, false, "auto"), reqs);
    expect_same_greedy_outputs(plain, a, reqs, "auto");
    EXPECT_GT(a.metrics.spec_draft_tokens, 0);
    EXPECT_EQ(a.metrics.spec_position_verified.size(), block);
}

}  // namespace deepinfer::test
