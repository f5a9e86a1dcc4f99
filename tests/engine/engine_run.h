// SPDX-License-Identifier: Apache-2.0
// Engine tests' helpers shared by the DeepSeek-V4 and V4.1 engine tests: one engine run over named
// prompts, and the bit-for-bit comparison of two requests' outputs.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
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

}  // namespace deepinfer::test
