// SPDX-License-Identifier: Apache-2.0
// Engine tests' helpers shared by the DeepSeek-V4 and V4.1 engine tests: one engine run over named
// prompts, and the bit-for-bit comparison of two requests' outputs.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/model.h"

namespace deepinfer::test {

struct EngineRunResult {
    std::map<std::string, RequestOutput> outputs;
    EngineMetrics metrics;
};

// Every prompt of `reqs` (id, tokens) with the same sampling parameters, run to completion.
inline EngineRunResult run_requests(std::shared_ptr<const Model> model, const EngineConfig& cfg,
                                    const std::vector<std::pair<std::string, std::vector<int32_t>>>& reqs,
                                    const SamplingParams& sp) {
    Engine engine(std::move(model), nullptr, cfg);
    for (const auto& [id, prompt] : reqs) engine.add_request(id, prompt, sp);
    EngineRunResult r;
    engine.run_until_done([&](RequestOutput&& o) { r.outputs.emplace(o.request_id, std::move(o)); });
    r.metrics = engine.metrics();
    return r;
}

// Same completions: tokens, finish reasons and logprobs (with their top alternatives) bit for bit.
inline void expect_same_outputs(const RequestOutput& a, const RequestOutput& b, const std::string& what) {
    ASSERT_EQ(a.completions.size(), b.completions.size()) << what;
    for (size_t i = 0; i < a.completions.size(); ++i) {
        EXPECT_EQ(a.completions[i].token_ids, b.completions[i].token_ids) << what;
        EXPECT_EQ(a.completions[i].finish_reason, b.completions[i].finish_reason) << what;
        ASSERT_EQ(a.completions[i].logprobs.size(), b.completions[i].logprobs.size()) << what;
        for (size_t k = 0; k < a.completions[i].logprobs.size(); ++k) {
            EXPECT_EQ(a.completions[i].logprobs[k].logprob, b.completions[i].logprobs[k].logprob) << what;
            EXPECT_EQ(a.completions[i].logprobs[k].top, b.completions[i].logprobs[k].top) << what;
        }
    }
}

// Lengths of the random prompts of run_random_prompts: `count` prompts of first, first + step, ...
struct RandomPrompts {
    int count = 0;
    int64_t first = 0, step = 0;
    uint32_t seed = 0;      // of the tokens
    double temperature = 0;  // of the odd-numbered requests (the even ones are greedy)
    int64_t max_tokens = 0;
};

// The prompts (ids "0", "1", ...; request i seeded i, EOS ignored) run to completion: each request's
// first completion's tokens.
inline std::map<std::string, std::vector<int32_t>> run_random_prompts(std::shared_ptr<const Model> model, const EngineConfig& cfg,
                                                                       const RandomPrompts& r, EngineMetrics* metrics = nullptr) {
    const auto vocab = static_cast<uint32_t>(model->info().vocab_size);
    Engine engine(std::move(model), nullptr, cfg);
    std::mt19937 rng(r.seed);
    for (int i = 0; i < r.count; ++i) {
        std::vector<int32_t> p(static_cast<size_t>(r.first + r.step * i));
        for (int32_t& t : p) t = static_cast<int32_t>(rng() % vocab);
        SamplingParams sp;
        sp.temperature = i % 2 ? r.temperature : 0.0;
        sp.seed = uint64_t(i);
        sp.max_tokens = r.max_tokens;
        sp.ignore_eos = true;
        engine.add_request(std::to_string(i), std::move(p), sp);
    }
    std::map<std::string, std::vector<int32_t>> out;
    engine.run_until_done([&](RequestOutput&& o) { out[o.request_id] = o.completions.at(0).token_ids; });
    if (metrics) *metrics = engine.metrics();
    return out;
}

}  // namespace deepinfer::test
