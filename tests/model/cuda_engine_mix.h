// SPDX-License-Identifier: Apache-2.0
// The request mix the CUDA runtime tests run through the offline engine (V4: cuda_runtime_test.cpp,
// V4.1: cuda_v41_runtime_test.cpp): requests the device sampler serves (greedy, temperature, top-k
// with top-p/min-p inside, low temperatures, n > 1) and host-fallback ones (top-p without top-k,
// logprobs, penalties, logit bias), on shared and distinct prompts; every completion's tokens and
// logprobs.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/model.h"

namespace deepinfer::test {

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % uint32_t(vocab));
    return t;
}

struct EngineRun {
    std::map<std::string, std::vector<std::vector<int32_t>>> tokens;
    std::map<std::string, std::vector<std::vector<float>>> logprobs;
    EngineMetrics metrics;
};

inline EngineRun run_engine(std::shared_ptr<const Model> model, bool async, bool device_sampling) {
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(5);
    const std::vector<int32_t> shared = random_tokens(rng, 70, V);
    EngineConfig cfg;
    cfg.max_num_batched_tokens = 128;
    cfg.max_prefill_chunk = 48;
    cfg.prefix_block = 16;
    cfg.async_scheduling = async;
    cfg.device_sampling = device_sampling;
    Engine engine(std::move(model), nullptr, cfg);
    // Device-drawable requests (greedy, temperature, top-k with top-p/min-p inside, low temperatures,
    // n > 1, top-p / min-p without top-k: the fixtures' 512 ids fit the device's sort) and host-fallback
    // ones (logprobs, penalties, logit bias).
    std::vector<SamplingParams> params;
    auto add = [&](auto&& set) {
        SamplingParams p;
        p.max_tokens = 14;
        p.ignore_eos = true;
        set(p);
        params.push_back(p);
    };
    add([](SamplingParams& p) { p.temperature = 0; });
    add([](SamplingParams& p) { p.temperature = 0.8; });
    add([](SamplingParams& p) { p.temperature = 0.05; });
    add([](SamplingParams& p) { p.temperature = 1.1, p.top_k = 7; });
    add([](SamplingParams& p) { p.temperature = 0.9, p.top_k = 40, p.top_p = 0.8; });
    add([](SamplingParams& p) { p.temperature = 0.7, p.top_k = 1000, p.min_p = 0.05; });
    add([](SamplingParams& p) { p.temperature = 1.0, p.n = 3; });
    add([](SamplingParams& p) { p.temperature = 0.6, p.top_k = 5, p.n = 2; });
    add([](SamplingParams& p) { p.temperature = 0.9, p.top_p = 0.9; });              // device: top-p alone
    add([](SamplingParams& p) { p.temperature = 1.2, p.top_p = 0.95, p.min_p = 0.02; });  // device: top-p, min-p
    add([](SamplingParams& p) { p.temperature = 0.9, p.logprobs = 3; });             // host: logprobs
    add([](SamplingParams& p) { p.temperature = 0.9, p.repetition_penalty = 1.3; });  // host: penalty
    add([](SamplingParams& p) { p.temperature = 0, p.logit_bias = {{3, 5.0f}}; });  // host: bias
    add([](SamplingParams& p) { p.temperature = 0.8, p.presence_penalty = 0.5, p.n = 2; });
    for (size_t i = 0; i < params.size(); ++i) {
        std::vector<int32_t> prompt = i % 2 ? shared : std::vector<int32_t>{};
        const std::vector<int32_t> extra = random_tokens(rng, 1 + int64_t(rng() % 60), V);
        prompt.insert(prompt.end(), extra.begin(), extra.end());
        params[i].seed = 40 + i;
        std::string id = std::to_string(i);
        id.insert(0, 1, 'r');
        engine.add_request(id, prompt, params[i]);
    }
    EngineRun out;
    engine.run_until_done([&](RequestOutput&& r) {
        for (const CompletionOutput& c : r.completions) {
            out.tokens[r.request_id].push_back(c.token_ids);
            std::vector<float> lp;
            for (const TokenLogprob& t : c.logprobs) {
                lp.push_back(t.logprob);
                for (const auto& [tok, v] : t.top) lp.push_back(float(tok) + v);
            }
            out.logprobs[r.request_id].push_back(lp);
        }
    });
    out.metrics = engine.metrics();
    return out;
}

// Completions of run_engine's mix the device sampler draws (10 requests, 13 completions) per token.
inline constexpr int64_t kDeviceDrawnCompletions = 13;

}  // namespace deepinfer::test
