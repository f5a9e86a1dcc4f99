// SPDX-License-Identifier: Apache-2.0
// The paged-state GPU tests' engine workload (V4: cuda_paged_state_test.cpp, V4.1:
// cuda_v41_paged_state_test.cpp): ten requests, every other one on a shared prefix, greedy, temperature
// and top-k draws, n = 2 siblings, small steps and chunks with 16-token prefix blocks; every
// completion's tokens (a pool too small for the mix makes the engine preempt and recompute).
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/model.h"

namespace deepinfer::test {

struct PoolMix {
    int64_t prefix = 0;        // shared prefix tokens
    int64_t extra = 0;         // each request adds 1..extra tokens of its own
    int64_t batch_tokens = 0;  // EngineConfig::max_num_batched_tokens
    int64_t chunk = 0;         // EngineConfig::max_prefill_chunk
    int64_t max_tokens = 0;
};

using PoolMixTokens = std::map<std::string, std::vector<std::vector<int32_t>>>;

inline PoolMixTokens run_pool_mix(std::shared_ptr<const Model> model, const PoolMix& mix, EngineMetrics* metrics) {
    const int64_t V = model->info().vocab_size;
    auto tokens = [V](int64_t n, uint32_t seed) {
        std::mt19937 rng(seed);
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (int32_t& x : t) x = int32_t(rng() % uint32_t(V));
        return t;
    };
    const std::vector<int32_t> shared_prefix = tokens(mix.prefix, 11);
    EngineConfig cfg;
    cfg.max_num_batched_tokens = mix.batch_tokens;
    cfg.max_prefill_chunk = mix.chunk;
    cfg.prefix_block = 16;
    Engine engine(std::move(model), nullptr, cfg);
    std::mt19937 rng(12);
    for (int i = 0; i < 10; ++i) {
        std::vector<int32_t> p = i % 2 ? shared_prefix : std::vector<int32_t>{};
        const std::vector<int32_t> extra = tokens(1 + int64_t(rng() % uint32_t(mix.extra)), 100 + uint32_t(i));
        p.insert(p.end(), extra.begin(), extra.end());
        SamplingParams sp;
        sp.max_tokens = mix.max_tokens;
        sp.ignore_eos = true;
        sp.temperature = i % 3 == 0 ? 0.0 : 0.9;
        sp.top_k = i % 3 == 2 ? 20 : 0;
        sp.n = i % 4 == 1 ? 2 : 1;
        sp.seed = 100 + uint64_t(i);
        std::string id = std::to_string(i);
        id.insert(0, 1, 'r');  // (not "r" + ...: GCC 12's -Wrestrict false positive)
        engine.add_request(id, std::move(p), sp);
    }
    PoolMixTokens out;
    engine.run_until_done([&](RequestOutput&& r) {
        for (const auto& c : r.completions) out[r.request_id].push_back(c.token_ids);
    });
    if (metrics) *metrics = engine.metrics();
    return out;
}

}  // namespace deepinfer::test
