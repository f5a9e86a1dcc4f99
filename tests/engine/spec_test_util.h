// SPDX-License-Identifier: Apache-2.0
// Shared by the speculative-decoding engine tests (MTP and DSpark): running requests through an
// Engine, greedy parameters, and the two-sample test that sampled outputs with speculation follow the
// distribution of sampled outputs without it (per output position, a chi-square bound).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "deepinfer/drafter.h"
#include "deepinfer/engine.h"
#include "engine/chi_square.h"

namespace deepinfer::test {

using Requests = std::vector<std::tuple<std::string, std::vector<int32_t>, SamplingParams>>;

struct RunResult {
    std::map<std::string, RequestOutput> outputs;
    EngineMetrics metrics;
};

inline RunResult run(std::shared_ptr<const Model> model, const EngineConfig& cfg, const Requests& reqs,
                     std::shared_ptr<const Drafter> drafter = nullptr) {
    Engine engine(std::move(model), nullptr, cfg, std::move(drafter));
    for (const auto& [id, prompt, sp] : reqs) engine.add_request(id, prompt, sp);
    RunResult r;
    engine.run_until_done([&](RequestOutput&& o) { r.outputs.emplace(o.request_id, std::move(o)); });
    r.metrics = engine.metrics();
    return r;
}

// An engine configuration that speculates with `method`, k drafts (the scheduler's maximum when it is on).
inline EngineConfig spec_config(int64_t k, bool scheduler, const char* method, int64_t max_prefill_chunk) {
    EngineConfig c;
    c.speculative_method = method;
    c.num_speculative_tokens = k;
    c.speculative_scheduler = scheduler;
    c.max_prefill_chunk = max_prefill_chunk;
    return c;
}

// The greedy requests of `reqs` (temperature 0) gave the same tokens, finish reasons and logprobs.
inline void expect_same_greedy_outputs(const RunResult& plain, const RunResult& spec, const Requests& reqs,
                                       const std::string& what) {
    for (const auto& [id, prompt, sp] : reqs) {
        if (sp.temperature > 0) continue;
        const CompletionOutput& a = plain.outputs.at(id).completions.at(0);
        const CompletionOutput& b = spec.outputs.at(id).completions.at(0);
        EXPECT_EQ(a.token_ids, b.token_ids) << what << " " << id;
        EXPECT_EQ(a.finish_reason, b.finish_reason) << what << " " << id;
        ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
        for (size_t t = 0; t < a.logprobs.size(); ++t) {
            EXPECT_EQ(a.logprobs[t].logprob, b.logprobs[t].logprob) << what << " " << t;
            EXPECT_EQ(a.logprobs[t].top, b.logprobs[t].top) << what << " " << t;
        }
    }
}

// A GPU engine's speculative run against the CPU engine's with the same config: the same tokens and accepted
// drafts, and every verify step decided on the device (each decides its accepted drafts and one more row),
// none on the CPU.
inline void expect_same_run_verified_on_device(const RunResult& cpu, const RunResult& gpu, const Requests& reqs,
                                               const std::string& what) {
    for (const auto& [id, prompt, sp] : reqs)
        EXPECT_EQ(cpu.outputs.at(id).completions.at(0).token_ids, gpu.outputs.at(id).completions.at(0).token_ids)
            << what << " " << id;
    EXPECT_EQ(cpu.metrics.spec_accepted_tokens, gpu.metrics.spec_accepted_tokens) << what;
    EXPECT_GT(gpu.metrics.spec_draft_tokens, 0) << what;
    EXPECT_EQ(cpu.metrics.device_verified_rows, 0) << what;
    EXPECT_GT(gpu.metrics.device_verified_rows, 0) << what;
    EXPECT_GE(gpu.metrics.device_verified_rows, gpu.metrics.spec_accepted_tokens + gpu.metrics.spec_verify_steps) << what;
}

inline SamplingParams greedy(int64_t max_tokens) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    return sp;
}

// Per output position, how often each token was drawn by n requests of `prompt` with `base` and seeds
// seed0, seed0 + 1, ... (every request generates `len` tokens); `metrics` receives the run's metrics.
inline std::vector<std::vector<int64_t>> token_histograms(const std::shared_ptr<const Model>& model,
                                                          const EngineConfig& cfg, const SamplingParams& base,
                                                          uint64_t seed0, int64_t n, int64_t len,
                                                          const std::vector<int32_t>& prompt, EngineMetrics* metrics) {
    Requests reqs;
    for (int64_t s = 0; s < n; ++s) {
        SamplingParams sp = base;
        sp.seed = seed0 + static_cast<uint64_t>(s);
        std::string id = std::to_string(s);
        id.insert(id.begin(), 's');  // not "s" + ...: GCC 12 warns falsely (-Wrestrict)
        reqs.emplace_back(std::move(id), prompt, sp);
    }
    EngineConfig c = cfg;
    c.max_num_seqs = 512;
    c.max_num_batched_tokens = 8192;
    const RunResult r = run(model, c, reqs);
    if (metrics) *metrics = r.metrics;
    const int64_t V = model->info().vocab_size;
    std::vector<std::vector<int64_t>> h(size_t(len), std::vector<int64_t>(size_t(V), 0));
    for (const auto& [id, out] : r.outputs) {
        const auto& toks = out.completions.at(0).token_ids;
        EXPECT_EQ(static_cast<int64_t>(toks.size()), len);
        for (int64_t p = 0; p < len && p < static_cast<int64_t>(toks.size()); ++p) ++h[size_t(p)][size_t(toks[size_t(p)])];
    }
    return h;
}

// Every position's two histograms pass the two-sample chi-square test at chi_square_bound.
inline void expect_same_token_distribution(const std::vector<std::vector<int64_t>>& want,
                                           const std::vector<std::vector<int64_t>>& got, const std::string& what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t pos = 0; pos < want.size(); ++pos) {
        int df = 0;
        const double x2 = two_sample_chi_square(want[pos], got[pos], &df);
        EXPECT_LT(x2, chi_square_bound(df)) << what << " position " << pos << " df " << df;
    }
}

// Drafts from a table of the target's own greedy continuation, keyed by (position, anchor): every
// draft is accepted when `corrupt` is false; every draft is wrong (and rejected) when it is true.
class TableDrafter final : public Drafter {
public:
    TableDrafter(std::map<int64_t, int32_t> token_at, int64_t vocab, bool corrupt, bool check_anchor = true)
        : token_at_(std::move(token_at)), vocab_(vocab), corrupt_(corrupt), check_anchor_(check_anchor) {}
    std::string_view method() const override { return "mtp"; }
    int64_t max_drafts() const override { return 8; }
    void attach(Sequence&) const override {}
    std::vector<Draft> draft(std::span<const DraftRequest> reqs) const override {
        std::vector<Draft> out;
        for (const DraftRequest& r : reqs) {
            Draft d;
            const int64_t anchor_pos = r.sequence->num_tokens();
            if (check_anchor_) {
                EXPECT_EQ(token_at_.at(anchor_pos), r.anchor) << "the anchor is the target's token";
            }
            for (int64_t k = 0; k < r.num_drafts; ++k) {
                auto it = token_at_.find(anchor_pos + 1 + k);
                const int32_t t = it == token_at_.end() ? 0 : it->second;
                d.tokens.push_back(corrupt_ ? static_cast<int32_t>((t + 1) % vocab_) : t);
            }
            out.push_back(std::move(d));
        }
        return out;
    }

private:
    std::map<int64_t, int32_t> token_at_;
    int64_t vocab_;
    bool corrupt_;
    bool check_anchor_;  // false: sampled runs leave the table's path
};

}  // namespace deepinfer::test
