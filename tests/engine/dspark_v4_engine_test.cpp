// SPDX-License-Identifier: Apache-2.0
// The DSpark drafter of DeepSeek-V4-Flash-0731 through the engine, on the tiny checkpoints of
// dspark_v4_fixtures.h:
//   * greedy output token-identical to no speculation (k = 1..5, the confidence scheduler on and off,
//     alone and batched with penalties, logprobs and a sampled neighbour; chunked prefill), `auto`;
//   * asynchronous scheduling and prefix-cache snapshots compose with the drafter;
//   * an agreeing drafter (make_v4_dspark_agree_with_target): every draft accepted; the same drafter
//     with every draft shifted: none accepted; the output is plain greedy either way;
//   * sampled output with speculation follows the same per-position token distribution as without
//     (two-sample chi-square over many seeds, 16-token vocabulary).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/dspark_engine_checks.h"
#include "engine/dspark_v4_fixtures.h"
#include "engine/forwarding_model.h"

namespace deepinfer {
namespace {

using namespace dspark_v4_test;

class DSparkV4 : public ::testing::TestWithParam<bool> {  // official numerics?
    OneThread one_thread_;
};

// ---- through the engine ----

using test::greedy;
using test::Requests;
using test::run;
using test::RunResult;

EngineConfig spec_config(int64_t k, bool scheduler, const char* method = "dspark") {
    return test::spec_config(k, scheduler, method, 16);
}
void expect_same_outputs(const RunResult& plain, const RunResult& spec, const Requests& reqs, const std::string& what) {
    test::expect_same_greedy_outputs(plain, spec, reqs, what);
}



TEST_P(DSparkV4, GreedyIsTokenIdenticalToNoSpeculation) {
    const auto model = tiny_model(GetParam());
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(21);
    const Requests reqs = test::greedy_requests_with_sampled_neighbour(rng, V, 40);
    const RunResult plain = run(model, {}, reqs);
    const std::vector<std::pair<int64_t, bool>> arms =
        GetParam() ? std::vector<std::pair<int64_t, bool>>{{2, false}, {5, true}}
                   : std::vector<std::pair<int64_t, bool>>{{1, false}, {2, false}, {3, false}, {4, false},
                                                           {5, false}, {3, true}, {5, true}};
    test::expect_dspark_greedy_arms(model, plain, reqs, arms, 1, 5, [](int64_t k, bool sched, const char* method) {
        return spec_config(k, sched, method);
    });
}

TEST(DSparkV4Async, AsynchronousSchedulingComposesWithTheDrafter) {
    // The next step is sized before its drafts exist and the forward worker drafts: with a fixed k every
    // output (sampled ones too) equals the synchronous engine's; with the scheduler greedy equals plain.
    // (Exact numerics only: the drafter's numerics do not enter the engine's scheduling.)
    const OneThread one_thread;
    const auto model = tiny_model(false);
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(61);
    Requests reqs;
    for (int i = 0; i < 5; ++i) {
        SamplingParams sp = greedy(7 + i);
        if (i % 2) {
            sp.temperature = 0.9;
            sp.seed = uint64_t(100 + i);
        }
        reqs.emplace_back(std::string("a").append(std::to_string(i)), random_prompt(rng, 3 + int64_t(rng() % 30), V), sp);
    }
    const RunResult plain = run(model, {}, reqs);
    EngineConfig sync_cfg = spec_config(3, false), async_cfg = sync_cfg;
    async_cfg.async_scheduling = true;
    const RunResult sync = run(model, sync_cfg, reqs), async = run(model, async_cfg, reqs);
    for (const auto& [id, prompt, sp] : reqs)
        EXPECT_EQ(sync.outputs.at(id).completions.at(0).token_ids, async.outputs.at(id).completions.at(0).token_ids) << id;
    EXPECT_EQ(sync.metrics.spec_accepted_tokens, async.metrics.spec_accepted_tokens);
    expect_same_outputs(plain, async, reqs, "async fixed");
    EngineConfig sched = spec_config(5, true);
    sched.async_scheduling = true;
    expect_same_outputs(plain, run(model, sched, reqs), reqs, "async scheduler");
}

TEST(DSparkV4PrefixCache, SnapshotsCarryTheContextRings) {
    // Requests sharing a long prefix, one at a time: later ones start from prefix-cache snapshots, whose
    // copies carry the drafter's rings, so every draft (hence every acceptance count) is the same as
    // with the cache off.
    const OneThread one_thread;
    const auto model = small_vocab_model();  // 16 tokens: random drafts are sometimes accepted
    std::mt19937 rng(67);
    const std::vector<int32_t> shared = random_prompt(rng, 41, 16);
    Requests reqs;
    for (int i = 0; i < 3; ++i) {
        std::vector<int32_t> p = shared;
        const std::vector<int32_t> tail = random_prompt(rng, 2 + i, 16);
        p.insert(p.end(), tail.begin(), tail.end());
        reqs.emplace_back(std::string("p").append(std::to_string(i)), p, greedy(16));
    }
    EngineConfig cached = spec_config(4, false);
    cached.max_num_seqs = 1;
    cached.prefix_block = 8;
    EngineConfig uncached = cached;
    uncached.prefix_caching = false;
    EngineConfig plain_cfg = uncached;
    plain_cfg.speculative_method = "none";
    const RunResult a = run(model, cached, reqs), b = run(model, uncached, reqs), plain = run(model, plain_cfg, reqs);
    EXPECT_GT(a.metrics.prefix_cache_hit_tokens, 0);
    expect_same_outputs(plain, a, reqs, "prefix cache");
    EXPECT_EQ(a.metrics.spec_position_accepted, b.metrics.spec_position_accepted);
    EXPECT_GT(a.metrics.spec_accepted_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(SpeculativeEngine, DSparkV4, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "official" : "exact"; });

// The model's own drafter with every draft token shifted by one (argmax drafts only): with the agreeing
// model every shifted draft is wrong, so each verify pass rejects all of its drafts.
class ShiftedDrafter final : public test::ForwardingDrafter {
public:
    explicit ShiftedDrafter(const Drafter& inner, int64_t vocab) : ForwardingDrafter(inner), vocab_(vocab) {}
    std::vector<Draft> draft(std::span<const DraftRequest> requests) const override {
        std::vector<Draft> out = ForwardingDrafter::draft(requests);
        for (Draft& d : out)
            for (int32_t& t : d.tokens) t = static_cast<int32_t>((t + 1) % vocab_);
        return out;
    }

private:
    int64_t vocab_;
};

TEST(DSparkV4Agreeing, EveryDraftAcceptedOrEveryDraftRejected) {
    const OneThread one_thread;
    const auto model = agreeing_model();
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(31);
    Requests reqs;
    for (int i = 0; i < 4; ++i) reqs.emplace_back(std::string("r").append(std::to_string(i)), random_prompt(rng, 5 + 9 * i, V), greedy(24));
    const RunResult plain = run(model, {}, reqs);
    const RunResult all = run(model, spec_config(5, false), reqs);
    expect_same_outputs(plain, all, reqs, "all accepted");
    EXPECT_EQ(all.metrics.spec_accepted_tokens, all.metrics.spec_draft_tokens);
    EXPECT_GT(all.metrics.spec_draft_tokens, 0);
    EXPECT_LT(2 * all.metrics.steps, plain.metrics.steps);
    const auto shifted = std::make_shared<ShiftedDrafter>(*model->drafter(), V);
    const RunResult none = run(model, spec_config(5, false), reqs, shifted);
    expect_same_outputs(plain, none, reqs, "all rejected");
    EXPECT_GT(none.metrics.spec_draft_tokens, 0);
    EXPECT_EQ(none.metrics.spec_accepted_tokens, 0);
    // Sampled drafts (T = 1): after the first, each draft comes from the target's own distribution
    // given the previous draft (up to bf16 rounding), so later positions are nearly always accepted.
    SamplingParams hot;
    hot.temperature = 1.0;
    hot.max_tokens = 24;
    hot.ignore_eos = true;
    hot.seed = 5;
    Requests sampled;
    for (const auto& [id, prompt, sp] : reqs) sampled.emplace_back(id, prompt, hot);
    const EngineMetrics m = run(model, spec_config(5, false), sampled).metrics;
    ASSERT_EQ(m.spec_position_verified.size(), 5u);
    for (size_t j = 1; j < 5; ++j) {
        if (m.spec_position_verified[j] < 5) continue;
        EXPECT_GT(double(m.spec_position_accepted[j]), 0.85 * double(m.spec_position_verified[j])) << "position " << j;
    }
}

// A model whose "device" takes every draw, verify rows included, and gives every one up (token -1 with the
// row's logits and, for a sampled draft, the draft's distribution: what the GPU sampler does for top-p /
// min-p rows keeping more ids than it sorts); its drafter is the checkpoint's, with the host distributions
// standing in for device copies (Draft::device_probs).
class GivingUpVerifier final : public test::ForwardingModel {
    class Drafts final : public test::ForwardingDrafter {
    public:
        Drafts(const Drafter& inner, int64_t vocab) : ForwardingDrafter(inner), vocab_(vocab) {}
        std::vector<Draft> draft(std::span<const DraftRequest> requests) const override {
            std::vector<Draft> out = ForwardingDrafter::draft(requests);
            for (Draft& d : out)
                if (!d.probs.empty()) {  // (the engine moves the vector: the pointer stays valid)
                    d.device_probs = d.probs.data();
                    d.device_probs_stride = vocab_;
                }
            return out;
        }

    private:
        int64_t vocab_;
    };

public:
    explicit GivingUpVerifier(std::shared_ptr<const Model> m)
        : ForwardingModel(m), drafts_(*m->drafter(), m->info().vocab_size) {}
    const Drafter* drafter() const override { return &drafts_; }
    bool can_sample_on_device(const DeviceDraw&) const override { return true; }
    ForwardOutputs forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want,
                                   std::span<const DeviceDraw> draws) const override {
        ForwardOutputs out;
        out.logits = inner().forward_batch(chunks);
        const int64_t V = info().vocab_size;
        for (const DeviceDraw& d : draws) {
            const std::vector<float>& l = out.logits.at(size_t(d.chunk));
            const int64_t n = static_cast<int64_t>(chunks[size_t(d.chunk)].tokens.size());
            const int64_t at = static_cast<int64_t>(l.size()) / V - (n - (d.row < 0 ? n - 1 : d.row));  // (rows end with the last)
            EXPECT_GE(at, 0);
            out.draw_logits.emplace_back(l.begin() + at * V, l.begin() + (at + 1) * V);
            out.draw_probs.emplace_back(d.draft >= 0 && d.draft_probs ? std::vector<float>(d.draft_probs, d.draft_probs + V)
                                                                      : std::vector<float>());
            out.tokens.push_back(-1);
            out.accepted.push_back(0);
            verify_rows += d.draft >= 0;
            sampled_drafts += d.draft >= 0 && d.draft_probs;
        }
        for (size_t i = 0; i < chunks.size(); ++i)
            if (!want.empty() && !want[i]) out.logits[i].clear();
        return out;
    }
    mutable int64_t verify_rows = 0, sampled_drafts = 0;  // verify draws handed back (with a distribution)

private:
    Drafts drafts_;
};

// Verify rows the device gives up are decided on the host from the logits and draft distributions that come
// back with them: the output equals the host verifier's (sampled and one-hot drafts, top-p, min-p, greedy).
TEST(DSparkV4DeviceVerify, RowsTheDeviceGivesUpAreVerifiedOnTheHost) {
    const OneThread one_thread;
    const auto model = agreeing_model();  // (drafts accepted and rejected)
    const auto device = std::make_shared<GivingUpVerifier>(model);
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(41);
    Requests reqs;
    for (int i = 0; i < 4; ++i) {
        SamplingParams sp;
        sp.temperature = i == 3 ? 0.0 : 0.8;
        sp.top_p = i == 0 || i == 2 ? 0.9 : 1.0;
        sp.min_p = i == 1 || i == 2 ? 0.05 : 0.0;
        sp.max_tokens = 14;
        sp.ignore_eos = true;
        sp.seed = uint64_t(70 + i);
        reqs.emplace_back("r" + std::to_string(i), random_prompt(rng, 5 + 6 * i, V), sp);
    }
    for (bool sample_drafts : {true, false}) {
        for (bool async : {false, true}) {
            EngineConfig c = spec_config(3, false);
            c.speculative_sample_drafts = sample_drafts;
            c.async_scheduling = async;
            const std::string what = "sampled drafts " + std::to_string(sample_drafts) + " async " + std::to_string(async);
            const int64_t before = device->verify_rows, before_sampled = device->sampled_drafts;
            const RunResult host = run(model, c, reqs), given_up = run(device, c, reqs);
            for (const auto& [id, prompt, sp] : reqs)
                EXPECT_EQ(host.outputs.at(id).completions.at(0).token_ids, given_up.outputs.at(id).completions.at(0).token_ids)
                    << what << " " << id;
            EXPECT_EQ(host.metrics.spec_accepted_tokens, given_up.metrics.spec_accepted_tokens) << what;
            EXPECT_GT(given_up.metrics.spec_accepted_tokens, 0) << what;
            EXPECT_LT(given_up.metrics.spec_accepted_tokens, given_up.metrics.spec_draft_tokens) << what;
            EXPECT_EQ(given_up.metrics.device_verified_rows, 0) << what;  // every row decided on the host
            EXPECT_GT(device->verify_rows, before) << what;
            if (sample_drafts) {
                EXPECT_GT(device->sampled_drafts, before_sampled) << what;
            }
        }
    }
}

TEST(DSparkV4Sampled, OutputKeepsTheTargetDistribution) {
    const OneThread one_thread;
    const auto model = small_vocab_model();
    const int64_t n = 400, len = 4;
    const std::vector<int32_t> prompt = {3, 7, 1, 12, 5, 9, 2, 11, 4, 6, 8, 10, 13, 0, 14, 3, 2, 9};  // > window
    SamplingParams sp;
    sp.temperature = 0.9;
    sp.top_k = 10;
    sp.presence_penalty = 0.3;
    sp.max_tokens = len;
    sp.ignore_eos = true;
    const auto want = test::token_histograms(model, EngineConfig{}, sp, 1000, n, len, prompt, nullptr);
    struct Arm {
        const char* name;
        EngineConfig cfg;
    };
    std::vector<Arm> arms = {{"sampled drafts k=3", spec_config(3, false)},
                             {"one-hot drafts k=2", spec_config(2, false)},
                             {"scheduler k=5", spec_config(5, true)}};
    arms[1].cfg.speculative_sample_drafts = false;
    uint64_t seed0 = 1000;
    for (const Arm& arm : arms) {
        EngineMetrics m;
        seed0 += 100000;
        const auto got = test::token_histograms(model, arm.cfg, sp, seed0, n, len, prompt, &m);
        EXPECT_GT(m.spec_accepted_tokens, 0) << arm.name;  // both branches of the rejection rule run
        EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens) << arm.name;
        test::expect_same_token_distribution(want, got, arm.name);
    }
}

}  // namespace
}  // namespace deepinfer
