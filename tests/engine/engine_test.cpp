// SPDX-License-Identifier: Apache-2.0
// Engine: batch invariance of logits, deterministic sampling independent of batch composition,
// chunk size, prefix sharing, async scheduling and preemption; n > 1; stop strings; sampler rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "deepinfer/check.h"
#include "deepinfer/embedded.h"
#include "deepinfer/engine.h"
#include "deepinfer/tokenizer.h"
#include "engine/engine_run.h"
#include "engine/forwarding_model.h"
#include "engine/sampler.h"
#include "engine/tiny_engine_model.h"
#include "model/draft_sampling.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

ModelOptions exact() { return test::exact_numerics(); }
std::shared_ptr<const Model> tiny_model() { return test::tiny_engine_model(); }

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len, int64_t vocab) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % uint32_t(vocab));
    return p;
}

TEST(BatchInvariance, LogitsAloneEqualInsideBatchesOf7And64) {
    auto model = tiny_model();
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(7);
    const std::vector<int32_t> target = random_prompt(rng, 150, V);
    Sequence alone = model->new_sequence();
    const std::vector<float> want = model->forward(alone, target, true);
    for (int neighbours : {7, 64}) {
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < neighbours; ++i) prompts.push_back(random_prompt(rng, 1 + rng() % 40, V));
        std::vector<Sequence> seqs;
        for (int i = 0; i <= neighbours; ++i) seqs.push_back(model->new_sequence());
        // The target goes in the middle of the batch.
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i <= neighbours; ++i) {
            if (i == neighbours / 2) chunks.push_back({&seqs[size_t(i)], target, true});
            else chunks.push_back({&seqs[size_t(i)], prompts[size_t(i < neighbours / 2 ? i : i - 1)], true});
        }
        std::vector<std::vector<float>> got = model->forward_batch(chunks);
        EXPECT_TRUE(got[size_t(neighbours / 2)] == want) << neighbours << " neighbours";
    }
}

using RunResult = test::EngineRunResult;

RunResult run(const EngineConfig& cfg, const std::vector<std::pair<std::string, std::vector<int32_t>>>& reqs,
              const SamplingParams& sp) {
    return test::run_requests(tiny_model(), cfg, reqs, sp);
}

using test::expect_same_outputs;

TEST(EngineDeterminism, SameTokensAloneAndInAnyBatchChunkingCacheAndScheduling) {
    const int64_t V = tiny_model()->info().vocab_size;
    std::mt19937 rng(11);
    const std::vector<int32_t> shared = random_prompt(rng, 96, V);  // a common "system prompt"
    auto with_prefix = [&](int64_t extra) {
        std::vector<int32_t> p = shared;
        std::vector<int32_t> tail = random_prompt(rng, extra, V);
        p.insert(p.end(), tail.begin(), tail.end());
        return p;
    };
    const std::vector<int32_t> target = with_prefix(37);
    SamplingParams sp;
    sp.temperature = 0.9;
    sp.top_p = 0.95;
    sp.max_tokens = 12;
    sp.logprobs = 3;
    sp.ignore_eos = true;
    EngineConfig base;
    base.max_num_seqs = 128;
    const RequestOutput alone = run(base, {{"target", target}}, sp).outputs.at("target");
    ASSERT_EQ(alone.completions[0].token_ids.size(), 12u);

    for (int neighbours : {7, 64}) {
        std::vector<std::pair<std::string, std::vector<int32_t>>> reqs;
        for (int i = 0; i < neighbours; ++i)
            reqs.emplace_back("n" + std::to_string(i), i % 2 ? with_prefix(1 + rng() % 50) : random_prompt(rng, 5 + rng() % 60, V));
        reqs.insert(reqs.begin() + neighbours / 2, {"target", target});
        struct Variant {
            const char* name;
            EngineConfig cfg;
        };
        std::vector<Variant> variants;
        EngineConfig c = base;
        variants.push_back({"default", c});
        c.max_prefill_chunk = 7;
        c.max_num_batched_tokens = 96;
        variants.push_back({"chunk 7, budget 96", c});
        c = base;
        c.prefix_caching = false;
        variants.push_back({"no prefix cache", c});
        c = base;
        c.async_scheduling = true;
        variants.push_back({"async", c});
        c = base;
        c.max_num_seqs = 5;
        c.prefix_block = 32;
        variants.push_back({"5 seqs, block 32", c});
        c = base;
        c.state_memory_bytes = 3 << 20;  // tight: forces preemption and recompute
        c.state_page_bytes = 1024;       // small pages: state grows page by page as tokens arrive
        c.prefix_cache_fraction = 0.1;
        variants.push_back({"tight memory", c});
        for (const Variant& v : variants) {
            RunResult r = run(v.cfg, reqs, sp);
            expect_same_outputs(r.outputs.at("target"), alone, std::string(v.name) + ", " + std::to_string(neighbours) + " neighbours");
            const std::string name = v.name;
            if (name == "5 seqs, block 32" || (name == "default" && neighbours == 64)) {
                EXPECT_GT(r.metrics.prefix_hit_rate(), 0.0) << name;  // later admissions reuse the shared prefix
            }
            if (name == "no prefix cache") {
                EXPECT_EQ(r.metrics.prefix_cache_hit_tokens, 0);
            }
            EXPECT_GT(r.metrics.pool_pages_peak, 0u) << name;  // compressed entries live in the paged pool
            EXPECT_LE(r.metrics.pool_pages_peak * r.metrics.pool_page_bytes, v.cfg.state_memory_bytes) << name;
            if (name == "tight memory" && neighbours == 64) {
                EXPECT_GT(r.metrics.preemptions, 0);
            }
        }
    }
}

TEST(Engine, NCompletionsAreDistinctAndReproducible) {
    std::mt19937 rng(3);
    const auto prompt = random_prompt(rng, 20, tiny_model()->info().vocab_size);
    SamplingParams sp;
    sp.temperature = 1.0;
    sp.max_tokens = 10;
    sp.n = 3;
    sp.seed = 42;
    sp.ignore_eos = true;
    RunResult a = run({}, {{"r", prompt}}, sp), b = run({}, {{"r", prompt}}, sp);
    const auto& ca = a.outputs.at("r").completions;
    ASSERT_EQ(ca.size(), 3u);
    EXPECT_NE(ca[0].token_ids, ca[1].token_ids);
    EXPECT_NE(ca[1].token_ids, ca[2].token_ids);
    expect_same_outputs(a.outputs.at("r"), b.outputs.at("r"), "rerun");
    // Completion 0 of n = 3 equals the single completion with the same seed.
    sp.n = 1;
    RunResult one = run({}, {{"r", prompt}}, sp);
    EXPECT_EQ(one.outputs.at("r").completions[0].token_ids, ca[0].token_ids);
}

// Admission counts the prefix cache too: with budgets of a few sequences (snapshots, n > 1 siblings,
// preemption) the state pool never runs out, and the tokens are those of a roomy engine. (Before the
// cache made room at admission, 8 states' worth exhausted the pool.)
TEST(EngineMemory, TightBudgetsNeverExhaustThePool) {
    const std::shared_ptr<const Model> m = tiny_model();
    const int64_t V = m->info().vocab_size;
    std::mt19937 rng(12);
    const std::vector<int32_t> shared = random_prompt(rng, 150, V);
    std::vector<std::pair<std::string, std::vector<int32_t>>> reqs;
    for (int i = 0; i < 10; ++i) {
        std::vector<int32_t> p = i % 2 ? shared : std::vector<int32_t>{};
        const std::vector<int32_t> tail = random_prompt(rng, 1 + rng() % 90, V);
        p.insert(p.end(), tail.begin(), tail.end());
        std::string id = std::to_string(i);
        id.insert(0, 1, 'r');  // (not "r" + ...: GCC 12's -Wrestrict false positive at -O3)
        reqs.emplace_back(std::move(id), p);
    }
    auto run_with = [&](uint64_t budget, EngineMetrics* metrics) {
        EngineConfig cfg;
        cfg.max_num_batched_tokens = 96;
        cfg.max_prefill_chunk = 40;
        cfg.prefix_block = 16;
        if (budget) cfg.state_memory_bytes = budget;
        Engine engine(m, nullptr, cfg);
        for (size_t i = 0; i < reqs.size(); ++i) {
            SamplingParams sp;
            sp.max_tokens = 12;
            sp.ignore_eos = true;
            sp.temperature = i % 3 == 0 ? 0.0 : 0.9;
            sp.top_k = i % 3 == 2 ? 20 : 0;
            sp.n = i % 4 == 1 ? 2 : 1;
            sp.seed = 100 + i;
            engine.add_request(reqs[i].first, reqs[i].second, sp);
        }
        std::map<std::string, std::vector<std::vector<int32_t>>> out;
        engine.run_until_done([&](RequestOutput&& r) {
            for (const auto& c : r.completions) out[r.request_id].push_back(c.token_ids);
        });
        if (metrics) *metrics = engine.metrics();
        return out;
    };
    const auto want = run_with(0, nullptr);
    const uint64_t one = m->estimate_state_bytes(260, EngineConfig{}.state_page_bytes);
    int64_t preemptions = 0, hits = 0;
    for (int states = 4; states <= 12; states += 2) {
        EngineMetrics mt;
        EXPECT_EQ(run_with(uint64_t(states) * one, &mt), want) << states << " states";
        preemptions += mt.preemptions;
        hits += mt.prefix_cache_hit_tokens;
    }
    EXPECT_GT(preemptions, 0);
    EXPECT_GT(hits, 0);
}

TEST(Engine, RejectsBadRequests) {
    Engine engine(tiny_model(), nullptr, {});
    EXPECT_THROW(engine.add_request("a", {}, {}), Error);
    EXPECT_THROW(engine.add_request("b", {1, 99999}, {}), Error);
    SamplingParams sp;
    sp.max_tokens = 1 << 30;
    EXPECT_THROW(engine.add_request("c", {1, 2}, sp), Error);
    sp = {};
    sp.stop = {"x"};
    EXPECT_THROW(engine.add_request("d", {1, 2}, sp), Error);  // stop strings need a tokenizer
}

// Untruncated sampling sums its weights in blocks of kDraftSumBlock ids (model/draft_sampling.h's order,
// the device sampler's): on the CPU's threads at V4's vocabulary, serially at a small one; the weights are
// the temperature's exp, the total is the blocks' sums in order (bit for bit the serial blocked sum), and
// the draw is the long-double inverse CDF in id order (away from a cumulative boundary), never a zero weight.
TEST(Sampler, UntruncatedDrawSumsInBlocksOfIds) {
    std::mt19937 rng(5);
    std::normal_distribution<float> n(0.0f, 4.0f);
    for (const int64_t V : {int64_t{1000}, int64_t{129280}}) {
        std::vector<float> l(static_cast<size_t>(V));
        for (float& x : l) x = n(rng);
        for (int64_t v = V - 700; v < V; ++v) l[size_t(v)] = -std::numeric_limits<float>::infinity();  // masked tail
        SamplingParams p;
        p.temperature = 0.8;
        const Distribution d = sampling_distribution(l, p);
        ASSERT_EQ(int64_t(d.weight.size()), V);
        ASSERT_EQ(int64_t(d.parts.size()), draft_sum_blocks(V));
        const double mx = *std::max_element(l.begin(), l.end());
        for (int64_t v = 0; v < V; ++v)
            ASSERT_EQ(d.weight[size_t(v)], std::exp((double(l[size_t(v)]) - mx) * (1.0 / 0.8))) << "id " << v;
        const double serial = draft_blocked_sum(V, [&](int64_t v) { return d.weight[size_t(v)]; });
        EXPECT_EQ(d.total, serial) << V;
        long double total = 0;
        for (double w : d.weight) total += w;
        for (double u : {0.0, 0.13, 0.5, 0.77, 0.999, 0.9999999999}) {
            const int32_t got = draw(d, u);
            ASSERT_GE(got, 0);
            ASSERT_LT(got, V - 700) << "a masked id drawn at u " << u;
            EXPECT_GT(d.weight[size_t(got)], 0.0);
            const long double target = static_cast<long double>(u) * total;
            long double before = 0;
            for (int32_t v = 0; v < got; ++v) before += d.weight[size_t(v)];
            const long double through = before + d.weight[size_t(got)], margin = 1e-9L * total;
            if (u < 0.9999) {  // (near u = 1 the last nonzero id, whatever the rounding)
                EXPECT_LE(before, target + margin) << V << " u " << u;
                EXPECT_GE(through, target - margin) << V << " u " << u;
            }
        }
    }
}

// The top logprobs: the k largest processed logits by (logit desc, id asc), minus the log-sum-exp, as a
// full sort picks them (ties across the cut, k at and past the one-pass selection's limit, k = 0).
TEST(Sampler, TopLogprobsAreTheLargestLogitsInOrder) {
    std::mt19937 rng(9);
    for (const int64_t V : {int64_t{1000}, int64_t{129280}}) {
        std::vector<float> l(static_cast<size_t>(V));
        for (float& x : l) x = static_cast<float>(int(rng() % 200)) * 0.05f;  // many ties
        std::vector<int32_t> order(static_cast<size_t>(V));
        for (int32_t v = 0; v < int32_t(V); ++v) order[size_t(v)] = v;
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            return l[size_t(a)] != l[size_t(b)] ? l[size_t(a)] > l[size_t(b)] : a < b;
        });
        const float mx = l[size_t(order[0])];
        double den = 0;
        for (float x : l) den += std::exp(double(x) - mx);
        const double lse = mx + std::log(den);
        for (const int64_t k : {0, 1, 5, 20, 64, 65, 100}) {
            const TokenLogprob t = token_logprob(l, k, 3);
            ASSERT_EQ(int64_t(t.top.size()), k) << V << " k " << k;
            for (int64_t i = 0; i < k; ++i) {
                EXPECT_EQ(t.top[size_t(i)].first, order[size_t(i)]) << V << " k " << k << " rank " << i;
                EXPECT_NEAR(t.top[size_t(i)].second, double(l[size_t(order[size_t(i)])]) - lse, 1e-5) << V << " k " << k;
            }
        }
    }
}

TEST(Sampler, Rules) {
    std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
    SamplingParams p;
    p.temperature = 0;
    EXPECT_EQ(sample({.logits = logits, .params = &p}).token, 1);  // tie -> lowest id
    p.logit_bias = {{4, 10.0f}};
    EXPECT_EQ(sample({.logits = logits, .params = &p}).token, 4);
    p = {};
    p.temperature = 1.0;
    p.top_k = 1;
    for (uint64_t s = 0; s < 20; ++s) EXPECT_EQ(sample({.logits = logits, .params = &p, .seed = s}).token, 1);
    p = {};
    p.temperature = 0;
    p.repetition_penalty = 2.0;
    std::vector<int32_t> gen = {1, 3};
    EXPECT_EQ(sample({.logits = logits, .params = &p, .generated = gen}).token, 2);  // 3/2 < 2
    p = {};
    p.temperature = 0;
    p.presence_penalty = 1.5;
    EXPECT_EQ(sample({.logits = logits, .params = &p, .generated = gen}).token, 2);  // 3-1.5 < 2
    p = {};
    p.temperature = 1.0;
    p.logprobs = 2;
    SampleResult r = sample({.logits = logits, .params = &p, .seed = 1});
    ASSERT_EQ(r.logprob.top.size(), 2u);
    EXPECT_EQ(r.logprob.top[0].first, 1);
    EXPECT_NEAR(r.logprob.top[0].second, r.logprob.top[1].second, 1e-6);
    double total = 0;
    for (float l : logits) total += std::exp(double(l) - 3.0);
    EXPECT_NEAR(r.logprob.top[0].second, -std::log(total), 1e-5);
    // min_p keeps only tokens within the ratio of the best.
    p = {};
    p.temperature = 1.0;
    p.min_p = 0.9;
    for (uint64_t s = 0; s < 50; ++s) {
        int32_t t = sample({.logits = logits, .params = &p, .seed = s}).token;
        EXPECT_TRUE(t == 1 || t == 3) << t;
    }
    // The stream is a pure function of (seed, stream, counter).
    EXPECT_EQ(counter_uniform(5, 1, 9), counter_uniform(5, 1, 9));
    EXPECT_NE(counter_uniform(5, 1, 9), counter_uniform(5, 2, 9));
    EXPECT_NE(derive_seed(0, "a"), derive_seed(0, "b"));
}

// Top-p and min-p without top-k: the candidates are the prefix of the (logit desc, id asc) order that the
// rules keep, found by partial sorts of growing length; checked against a full sort of every id, with the
// normalizer over all ids in the blocked id order. Nuclei of a few ids to most of the vocabulary (past the
// first partial sorts of 256 and 1,024), ties broken by the lower id.
TEST(Sampler, TopPAndMinPKeepTheSortedPrefix) {
    const int64_t V = 5000;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(V));
    for (float& x : logits) x = std::round(nd(rng) * 4.0f) / 4.0f;  // (many equal logits)
    struct Case { double t, top_p, min_p; };
    for (const Case c : {Case{0.7, 0.5, 0}, Case{1.3, 0.9, 0}, Case{1.0, 0.99, 0}, Case{8.0, 0.99, 0},
                         Case{8.0, 1.0, 0.5}, Case{1.0, 1.0, 0.05}, Case{2.0, 0.95, 0.02}}) {
        SamplingParams p;
        p.temperature = c.t;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        const Distribution d = sampling_distribution(logits, p);
        std::vector<int32_t> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
        });
        const double mx = logits[size_t(order[0])];
        const double inv_t = 1.0 / c.t;  // (the sampler's arithmetic: times 1 / T)
        const double den = draft_blocked_sum(V, [&](int64_t v) { return std::exp((double(logits[size_t(v)]) - mx) * inv_t); });
        std::vector<double> prob;
        for (int32_t id : order) prob.push_back(std::exp((double(logits[size_t(id)]) - mx) * inv_t) / den);
        size_t n = prob.size();
        double cum = 0;
        for (size_t i = 0; i < n && c.top_p < 1.0; ++i)
            if ((cum += prob[i]) >= c.top_p) n = i + 1;
        size_t m = 1;
        while (c.min_p > 0 && m < n && prob[m] >= c.min_p * prob[0]) ++m;
        if (c.min_p > 0) n = m;
        const std::string what = "T=" + std::to_string(c.t) + " top_p=" + std::to_string(c.top_p) + " min_p=" + std::to_string(c.min_p);
        ASSERT_EQ(d.ids.size(), n) << what;
        EXPECT_TRUE(std::equal(d.ids.begin(), d.ids.end(), order.begin())) << what;
        for (size_t i = 0; i < n; ++i) ASSERT_DOUBLE_EQ(d.weight[i], prob[i]) << what << " candidate " << i;
        if (c.t == 8.0 && c.top_p < 1.0) {
            EXPECT_GT(n, size_t{1024}) << what;  // past the first partial sorts
        }
        if (c.t == 0.7) {
            EXPECT_LT(n, size_t{256}) << what;
        }
    }
}

// A model whose "device" takes every plain draw and gives every one up (token -1 with the row's logits,
// as a GPU sampler does for top-p rows keeping more ids than it sorts): the engine samples those rows on
// the host and the output is the host sampler's, n > 1 siblings included.
class GivingUpDevice : public test::ForwardingModel {
public:
    using ForwardingModel::ForwardingModel;
    bool can_sample_on_device(const DeviceDraw& d) const override { return d.draft < 0; }
    ForwardOutputs forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want,
                                   std::span<const DeviceDraw> draws) const override {
        ForwardOutputs out;
        out.logits = inner().forward_batch(chunks);
        for (const DeviceDraw& d : draws) {
            EXPECT_EQ(d.row, -1);
            const std::vector<float>& l = out.logits.at(size_t(d.chunk));
            const size_t V = size_t(info().vocab_size);
            out.draw_logits.emplace_back(l.end() - std::ptrdiff_t(V), l.end());  // the chunk's last row
            out.tokens.push_back(-1);
            out.accepted.push_back(0);
            ++given_up;
        }
        for (size_t i = 0; i < chunks.size(); ++i)
            if (!want.empty() && !want[i]) out.logits[i].clear();
        return out;
    }
    mutable int64_t given_up = 0;  // draws handed back
};

TEST(Engine, DrawsTheDeviceGivesUpAreSampledOnTheHost) {
    auto device = std::make_shared<GivingUpDevice>(test::tiny_engine_model());
    std::mt19937 rng(8);
    const int64_t V = device->info().vocab_size;
    for (bool async : {false, true}) {
        EngineConfig on, off;
        on.async_scheduling = off.async_scheduling = async;
        off.device_sampling = false;
        Engine a(device, nullptr, on), b(device, nullptr, off);
        for (int i = 0; i < 4; ++i) {
            std::vector<int32_t> prompt(size_t(5 + 7 * i));
            for (int32_t& t : prompt) t = int32_t(rng() % uint32_t(V));
            SamplingParams sp;
            sp.temperature = i % 2 ? 0.9 : 0.0;
            sp.top_p = i == 1 ? 0.8 : 1.0;
            sp.n = i == 3 ? 3 : 1;
            sp.max_tokens = 9;
            sp.ignore_eos = true;
            sp.seed = uint64_t(i);
            a.add_request("r" + std::to_string(i), prompt, sp);
            b.add_request("r" + std::to_string(i), prompt, sp);
        }
        std::map<std::string, RequestOutput> ra, rb;
        a.run_until_done([&](RequestOutput&& o) { ra.emplace(o.request_id, std::move(o)); });
        b.run_until_done([&](RequestOutput&& o) { rb.emplace(o.request_id, std::move(o)); });
        ASSERT_EQ(ra.size(), 4u);
        for (const auto& [id, o] : rb) test::expect_same_outputs(ra.at(id), o, id + " async " + std::to_string(async));
        EXPECT_EQ(a.metrics().device_sampled_tokens, 0);  // every draw given up
        EXPECT_EQ(a.metrics().generated_tokens, b.metrics().generated_tokens);
    }
    EXPECT_GT(device->given_up, 2 * 9);  // (every plain draw of the device-sampling engine, both runs)
}

TEST(Engine, StopStringsAcrossTokenBoundaries) {
    const std::string cache = (std::filesystem::temp_directory_path() / "deepinfer_test_embedded").string();
    auto model = std::shared_ptr<const Model>(Model::load(ensure_embedded_model(cache), exact()));
    auto tok = std::make_shared<const Tokenizer>(Tokenizer::from_file(std::string(DI_ASSETS_DIR) +
                                                                      "/tokenizer/deepseek-v4/tokenizer.json"));
    const std::vector<int32_t> prompt = tok->encode("Hello there, tell me a story about a lighthouse.");
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 24;
    sp.ignore_eos = true;
    auto go = [&](const SamplingParams& s) {
        Engine e(model, tok, {});
        e.add_request("r", prompt, s);
        std::vector<RequestOutput> out;
        e.run_until_done([&](RequestOutput&& o) { out.push_back(std::move(o)); });
        return out.at(0).completions.at(0);
    };
    CompletionOutput full = go(sp);
    ASSERT_EQ(full.finish_reason, "length");
    EXPECT_EQ(full.text, tok->decode(full.token_ids));
    // A stop string that starts inside one token's text and ends inside a later one.
    std::string first = tok->decode(std::span<const int32_t>(full.token_ids.data(), 5));
    std::string upto = tok->decode(std::span<const int32_t>(full.token_ids.data(), 8));
    ASSERT_GT(upto.size(), first.size() + 2);
    const size_t start = first.size() - 1;
    const std::string stop = upto.substr(start, upto.size() - start - 1);
    ASSERT_EQ(full.text.find(stop), start) << "chosen stop string occurs earlier";
    sp.stop = {stop};
    CompletionOutput stopped = go(sp);
    EXPECT_EQ(stopped.finish_reason, "stop");
    EXPECT_EQ(stopped.text, full.text.substr(0, start));
    EXPECT_LT(stopped.token_ids.size(), full.token_ids.size());
}

}  // namespace
}  // namespace deepinfer
