// SPDX-License-Identifier: Apache-2.0
// Speculative decoding through the engine on tiny DeepSeek-V4 models with an MTP block:
//   * greedy output token-identical to greedy without speculation (several draft lengths, the
//     confidence scheduler on and off, batched with different neighbours, sampled neighbours);
//   * rollback: drafters whose drafts are all accepted (an oracle replaying the target's greedy
//     output) or all rejected leave the output unchanged, and the acceptance counters say so;
//   * sampled output with speculation follows the same per-position token distribution as without
//     (two-sample chi-square over many seeds on a 16-token vocabulary), for sampled and one-hot drafts
//     and with the scheduler on; with a fixed draft length it is batch-invariant and reproducible;
//   * the confidence scheduler's fallback, with injected step costs: where speculation loses it runs
//     plain decode steps, where it pays it speculates throughout; greedy output identical either way.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <map>
#include <random>

#include "deepinfer/drafter.h"
#include "engine/speculative/report.h"
#include "deepinfer/embedded.h"
#include "deepinfer/grammar.h"
#include "deepinfer/parallel.h"
#include "deepinfer/tokenizer.h"
#include "deepinfer/engine.h"
#include "deepinfer/check.h"
#include "deepinfer/synthetic.h"
#include "engine/chi_square.h"
#include "engine/spec_test_util.h"
#include "model/paged_rows.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

ModelOptions exact() {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = Numerics::kExact;
    return o;
}

int64_t vocab_of(const Model& m) { return m.info().vocab_size; }

std::shared_ptr<const Model> mtp_model() {
    static std::shared_ptr<const Model> m = Model::load(test::data_path("models/v4_tiny_a_mtp"), exact());
    return m;
}

// A random DeepSeek-V4 model with an MTP block and a 16-token vocabulary (the fixture's shape
// otherwise), written once per test process.
std::shared_ptr<const Model> small_vocab_model() {
    static std::shared_ptr<const Model> m = [] {
        const std::string dir = (std::filesystem::temp_directory_path() /
                                 ("deepinfer_spec_v16_" + std::to_string(::getpid()))).string();
        std::filesystem::create_directories(dir);
        std::ifstream in(test::data_path("models/v4_tiny_a_mtp/config.json"));
        std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const std::string key = "\"vocab_size\": 512";
        const size_t at = cfg.find(key);
        if (at == std::string::npos) throw std::runtime_error("fixture config has no vocab_size 512");
        cfg.replace(at, key.size(), "\"vocab_size\": 16");
        SyntheticCheckpointOptions o;
        o.seed = 5;
        o.fp8_linears = false;
        o.fp4_experts = false;
        write_synthetic_checkpoint(dir, cfg, o);
        auto model = std::shared_ptr<const Model>(Model::load(dir, exact()));
        std::filesystem::remove_all(dir);
        return model;
    }();
    return m;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len, int64_t vocab) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % uint32_t(vocab));
    return p;
}

using test::greedy;
using test::Requests;
using test::run;
using test::RunResult;

EngineConfig spec_config(int64_t k, bool scheduler) { return test::spec_config(k, scheduler, "mtp", 32); }

// The run summary's speculative line: the acceptance figures, and the rows decided on the device only when
// there were some.
TEST(SpeculativeEngine, SummaryNamesTheRowsVerifiedOnTheDevice) {
    EngineMetrics m;
    EXPECT_EQ(speculative_summary(m), "");  // no speculative step
    m.spec_steps = 4;
    m.spec_verify_steps = 4;
    m.spec_draft_tokens = 12;
    m.spec_accepted_tokens = 9;
    m.spec_verify_tokens = 16;
    m.spec_position_verified = {4, 4, 4};
    m.spec_position_accepted = {4, 3, 2};
    const std::string host = speculative_summary(m);
    EXPECT_NE(host.find("9 of 12 drafts accepted"), std::string::npos) << host;
    EXPECT_NE(host.find("acceptance by position 1.00/0.75/0.50"), std::string::npos) << host;
    EXPECT_EQ(host.find("on the device"), std::string::npos) << host;
    m.device_verified_rows = 13;
    const std::string dev = speculative_summary(m);
    EXPECT_NE(dev.find("13 verify rows decided on the device"), std::string::npos) << dev;
}

TEST(SpeculativeEngine, ModelHasTheMtpDrafter) {
    ASSERT_NE(mtp_model()->drafter(), nullptr);
    EXPECT_EQ(mtp_model()->drafter()->method(), "mtp");
    EngineConfig c;
    c.speculative_method = "dspark";
    EXPECT_THROW(Engine(mtp_model(), nullptr, c), Error);  // the checkpoint has no DSpark drafter
}

TEST(SpeculativeEngine, StateEstimateCountsTheMtpRing) {
    const uint64_t page = 1024;
    auto pool = std::make_shared<StatePool>(uint64_t{64} << 20, page);
    Sequence s = mtp_model()->new_sequence(pool);
    const std::vector<int32_t> prompt = {5, 9, 2, 7, 1, 3, 8, 4, 6, 11, 10};
    mtp_model()->forward(s, prompt, false);
    EXPECT_EQ(s.state_bytes(), mtp_model()->estimate_state_bytes(int64_t(prompt.size()), page));
}

TEST(SpeculativeEngine, GreedyIsTokenIdenticalToNoSpeculation) {
    const int64_t V = vocab_of(*mtp_model());
    std::mt19937 rng(21);
    Requests reqs;
    for (int i = 0; i < 6; ++i) {
        SamplingParams sp = greedy(10 + i);
        if (i == 2) sp.repetition_penalty = 1.3;  // penalties count accepted drafts of the same step
        if (i == 3) sp.frequency_penalty = 0.7;
        if (i == 4) sp.logprobs = 2;
        reqs.emplace_back("g" + std::to_string(i), random_prompt(rng, 3 + int64_t(rng() % 40), V), sp);
    }
    // A sampled neighbour: its randomness must not leak into the greedy requests.
    SamplingParams hot;
    hot.temperature = 1.0;
    hot.max_tokens = 9;
    hot.ignore_eos = true;
    reqs.emplace_back("hot", random_prompt(rng, 17, V), hot);
    const RunResult plain = run(mtp_model(), {}, reqs);
    for (int64_t k : {1, 2, 4, 7}) {
        for (bool sched : {false, true}) {
            for (size_t batch : {size_t{1}, reqs.size()}) {
                Requests sub(reqs.begin(), reqs.begin() + std::ptrdiff_t(batch));
                const RunResult spec = run(mtp_model(), spec_config(k, sched), sub);
                const std::string what = "k=" + std::to_string(k) + " scheduler=" + std::to_string(sched) +
                                         " batch=" + std::to_string(batch);
                test::expect_same_greedy_outputs(plain, spec, sub, what);
                if (!sched) {
                    EXPECT_GT(spec.metrics.spec_draft_tokens, 0) << what;
                }
                EXPECT_EQ(spec.metrics.generated_tokens, [&] {
                    int64_t n = 0;
                    for (const auto& [id, p, sp] : sub) n += sp.max_tokens;
                    return n;
                }()) << what;
            }
        }
    }
}

using test::TableDrafter;

std::shared_ptr<const Model> v41_model() {
    static std::shared_ptr<const Model> m = [] {
        ModelOptions o;
        o.tokenizer_json = std::string(DI_ASSETS_DIR) + "/tokenizer/deepseek-v4/tokenizer.json";
        return std::shared_ptr<const Model>(Model::load(test::data_path("v41/v41_tiny_a"), o));
    }();
    return m;
}

// Rollback on DeepSeek-V4 (sliding, CSA and HCA state) and DeepSeek-V4.1 (CSA2, shared compressed KV,
// Engram): whole verify blocks accepted, or every draft rejected (truncate after each pass).
class Rollback : public ::testing::TestWithParam<const char*> {};

TEST_P(Rollback, AllDraftsAcceptedOrAllRejected) {
    const std::shared_ptr<const Model> model = std::string(GetParam()) == "v4" ? mtp_model() : v41_model();
    const int64_t V = vocab_of(*model);
    std::mt19937 rng(5);
    // Two requests whose generated positions do not overlap, so one position table serves both. The
    // long prompt crosses compressed-group boundaries (ratio 4 and 128) inside verify passes.
    Requests reqs = {{"short", random_prompt(rng, 6, V), greedy(20)}, {"long", random_prompt(rng, 150, V), greedy(24)}};
    const RunResult plain = run(model, {}, reqs);
    std::map<int64_t, int32_t> table;
    for (const auto& [id, prompt, sp] : reqs) {
        const auto& toks = plain.outputs.at(id).completions.at(0).token_ids;
        for (size_t i = 0; i < toks.size(); ++i) table[static_cast<int64_t>(prompt.size() + i)] = toks[i];
    }
    for (bool corrupt : {false, true}) {
        for (int64_t k : {1, 3, 8}) {
            auto drafter = std::make_shared<TableDrafter>(table, V, corrupt);
            const RunResult spec = run(model, spec_config(k, false), reqs, drafter);
            for (const auto& [id, prompt, sp] : reqs)
                EXPECT_EQ(plain.outputs.at(id).completions.at(0).token_ids, spec.outputs.at(id).completions.at(0).token_ids)
                    << "corrupt=" << corrupt << " k=" << k << " " << id;
            EXPECT_GT(spec.metrics.spec_draft_tokens, 0);
            if (corrupt) {
                EXPECT_EQ(spec.metrics.spec_accepted_tokens, 0);
                EXPECT_DOUBLE_EQ(spec.metrics.mean_accepted_length(), 1.0);
            } else {
                EXPECT_EQ(spec.metrics.spec_accepted_tokens, spec.metrics.spec_draft_tokens);
                EXPECT_GT(spec.metrics.mean_accepted_length(), 1.0 + 0.5 * double(k));
                EXPECT_LT(spec.metrics.steps, plain.metrics.steps);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(SpeculativeEngine, Rollback, ::testing::Values("v4", "v41"));

TEST(SpeculativeEngine, StopStringsAndGrammarOnVerifiedTokens) {
    // The built-in model (real vocabulary) with the DeepSeek tokenizer; drafts from a table of the
    // target's own output, so whole blocks are accepted and a stop string can complete in the middle of
    // them (the accepted tokens after it must be dropped), or wrong drafts (all rejected).
    const std::string cache = (std::filesystem::temp_directory_path() / "deepinfer_test_embedded").string();
    auto model = std::shared_ptr<const Model>(Model::load(ensure_embedded_model(cache), exact()));
    auto tok = std::make_shared<const Tokenizer>(
        Tokenizer::from_file(std::string(DI_ASSETS_DIR) + "/tokenizer/deepseek-v4/tokenizer.json"));
    const std::vector<int32_t> prompt = tok->encode("Write one short sentence about the sea.");
    auto go = [&](const SamplingParams& sp, std::shared_ptr<const Drafter> drafter, int64_t k) {
        EngineConfig cfg;
        if (drafter) {
            cfg.speculative_method = "mtp";
            cfg.num_speculative_tokens = k;
        }
        Engine e(model, tok, cfg, drafter);
        e.add_request("r", prompt, sp);
        std::vector<RequestOutput> out;
        e.run_until_done([&](RequestOutput&& o) { out.push_back(std::move(o)); });
        return std::make_pair(out.at(0).completions.at(0), e.metrics());
    };
    auto table_of = [&](const CompletionOutput& c) {
        std::map<int64_t, int32_t> t;
        for (size_t i = 0; i < c.token_ids.size(); ++i) t[static_cast<int64_t>(prompt.size() + i)] = c.token_ids[i];
        return t;
    };
    SamplingParams sp = greedy(24);
    const CompletionOutput full = go(sp, nullptr, 0).first;
    ASSERT_EQ(full.token_ids.size(), 24u);
    const std::string upto = tok->decode(std::span<const int32_t>(full.token_ids.data(), 10));
    const std::string before = tok->decode(std::span<const int32_t>(full.token_ids.data(), 7));
    ASSERT_GT(upto.size(), before.size() + 1);
    sp.stop = {upto.substr(before.size(), upto.size() - before.size() - 1)};
    const CompletionOutput stopped = go(sp, nullptr, 0).first;
    ASSERT_EQ(stopped.finish_reason, "stop");
    const int64_t V = vocab_of(*model);
    for (bool corrupt : {false, true}) {
        for (int64_t k : {2, 8}) {
            auto d = std::make_shared<TableDrafter>(table_of(full), V, corrupt);
            const auto [got, m] = go(sp, d, k);
            EXPECT_EQ(got.token_ids, stopped.token_ids) << corrupt << " " << k;
            EXPECT_EQ(got.text, stopped.text) << corrupt << " " << k;
            EXPECT_EQ(got.finish_reason, "stop");
            EXPECT_EQ(m.generated_tokens, static_cast<int64_t>(stopped.token_ids.size()));
            if (!corrupt) {
                EXPECT_GT(m.spec_accepted_tokens, 0);
            }
        }
    }
    // Structured output: the mask of every verify row follows the tokens accepted before it.
    SamplingParams g = greedy(16);
    GrammarSpec regex;
    regex.kind = GrammarSpec::Kind::kRegex;
    regex.text = "(sea|wave|blue| )+\\.";
    g.grammar = regex;
    const CompletionOutput constrained = go(g, nullptr, 0).first;
    for (bool corrupt : {false, true}) {
        auto d = std::make_shared<TableDrafter>(table_of(constrained), V, corrupt);
        const auto [got, m] = go(g, d, 4);
        EXPECT_EQ(got.token_ids, constrained.token_ids) << corrupt;
        EXPECT_EQ(got.finish_reason, constrained.finish_reason) << corrupt;
        if (!corrupt) {
            EXPECT_GT(m.spec_accepted_tokens, 0);
        }
    }
    // Block verification of sampled requests under the grammar: every row's mask follows the drafts
    // before it, so every output stays in the language (and drafts are accepted).
    auto d = std::make_shared<TableDrafter>(table_of(constrained), V, false, /*check_anchor=*/false);
    EngineConfig cfg;
    cfg.speculative_method = "mtp";
    cfg.num_speculative_tokens = 4;
    cfg.speculative_block_verification = true;
    Engine e(model, tok, cfg, d);
    for (int i = 0; i < 8; ++i) {
        SamplingParams hot = g;
        hot.temperature = 0.6;
        hot.seed = uint64_t(i + 1);
        e.add_request("b" + std::to_string(i), prompt, hot);
    }
    int64_t complete = 0;
    e.run_until_done([&](RequestOutput&& o) {
        const CompletionOutput& c = o.completions.at(0);
        EXPECT_EQ(c.text.find_first_not_of("seawvblu ."), std::string::npos) << c.text;
        if (c.finish_reason == "stop") {
            ++complete;
            EXPECT_FALSE(c.text.empty());
            EXPECT_EQ(c.text.back(), '.') << c.text;
            EXPECT_EQ(c.text.find('.'), c.text.size() - 1) << c.text;
        }
    });
    EXPECT_GT(e.metrics().spec_accepted_tokens, 0);
    EXPECT_GT(e.metrics().spec_draft_tokens, e.metrics().spec_accepted_tokens);
    EXPECT_GT(complete, 0);
}

TEST(SpeculativeEngine, SampledOutputKeepsTheTargetDistribution) {
    auto model = small_vocab_model();
    ASSERT_NE(model->drafter(), nullptr);
    // Many tiny steps: one thread avoids fork/join overhead that dominates at this size.
    const int threads = cpu_num_threads();
    set_cpu_num_threads(1);
    struct Restore {
        int n;
        ~Restore() { set_cpu_num_threads(n); }
    } restore{threads};
    const int64_t n = 400, len = 4;
    const std::vector<int32_t> prompt = {3, 7, 1, 12, 5};
    // Independent samples: every arm draws its own seeds.
    auto histograms = [&](const EngineConfig& cfg, const SamplingParams& base, uint64_t seed0, EngineMetrics* m) {
        return test::token_histograms(model, cfg, base, seed0, n, len, prompt, m);
    };
    SamplingParams sp;
    sp.temperature = 1.0;
    sp.max_tokens = len;
    sp.ignore_eos = true;
    SamplingParams trunc = sp;
    trunc.temperature = 0.8;
    trunc.top_k = 6;
    trunc.presence_penalty = 0.4;
    for (const SamplingParams* p : {&sp, &trunc}) {
        const auto want = histograms(EngineConfig{}, *p, 1000, nullptr);
        struct Arm { const char* name; EngineConfig cfg; };
        std::vector<Arm> arms = {{"sampled drafts k=3", spec_config(3, false)}, {"one-hot drafts k=2", spec_config(2, false)},
                                 {"scheduler k=3", spec_config(3, true)}};
        arms[1].cfg.speculative_sample_drafts = false;
        uint64_t seed0 = 1000;
        for (const Arm& arm : arms) {
            EngineMetrics m;
            seed0 += 100000;
            const auto got = histograms(arm.cfg, *p, seed0, &m);
            // The random drafter agrees often enough on 16 tokens that both branches are exercised.
            EXPECT_GT(m.spec_accepted_tokens, 0) << arm.name;
            EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens) << arm.name;
            test::expect_same_token_distribution(want, got, arm.name);
        }
    }
}

TEST(SpeculativeEngine, SampledOutputWithFixedDraftLengthIsBatchInvariant) {
    const int64_t V = vocab_of(*mtp_model());
    std::mt19937 rng(9);
    SamplingParams sp;
    sp.temperature = 0.9;
    sp.top_p = 0.9;
    sp.max_tokens = 12;
    sp.ignore_eos = true;
    sp.logprobs = 1;
    const std::vector<int32_t> target = random_prompt(rng, 30, V);
    const RunResult alone = run(mtp_model(), spec_config(3, false), {{"t", target, sp}});
    Requests reqs;
    for (int i = 0; i < 9; ++i) {
        SamplingParams o = sp;
        o.max_tokens = 3 + i;
        reqs.emplace_back("n" + std::to_string(i), random_prompt(rng, 2 + int64_t(rng() % 50), V), o);
    }
    reqs.insert(reqs.begin() + 4, {"t", target, sp});
    EngineConfig cfg = spec_config(3, false);
    cfg.max_prefill_chunk = 7;
    const RunResult batched = run(mtp_model(), cfg, reqs);
    EXPECT_EQ(alone.outputs.at("t").completions.at(0).token_ids, batched.outputs.at("t").completions.at(0).token_ids);
    const RunResult again = run(mtp_model(), cfg, reqs);
    for (const auto& [id, p, s] : reqs)
        EXPECT_EQ(batched.outputs.at(id).completions.at(0).token_ids, again.outputs.at(id).completions.at(0).token_ids);
}

// The confidence scheduler against injected step costs (EngineConfig::speculative_step_cost): plain
// steps cheap per row and verify rows expensive (a GPU at large batch) -> it falls back to plain decode
// steps after learning; every step about as cheap as any other (a GPU at small batch) -> it speculates
// on every decode step. Greedy output is the plain engine's either way (synchronous and asynchronous). The
// scheduler's trace (EngineConfig::speculative_trace) reports every decode step with the injected cost, and the
// prompt's steps marked as not decode-only.
TEST(SpeculativeEngine, SchedulerFallsBackToPlainStepsWhereSpeculationLoses) {
    const int64_t V = vocab_of(*mtp_model());
    std::mt19937 rng(33);
    Requests reqs;
    for (int i = 0; i < 4; ++i) reqs.emplace_back("r" + std::to_string(i), random_prompt(rng, 5 + 7 * i, V), greedy(60));
    const RunResult plain = run(mtp_model(), {}, reqs);
    std::map<std::string, std::map<int64_t, int32_t>> tables;  // position -> token, per request
    for (const auto& [id, prompt, sp] : reqs) {
        const auto& toks = plain.outputs.at(id).completions.at(0).token_ids;
        for (size_t i = 0; i < toks.size(); ++i) tables[id][static_cast<int64_t>(prompt.size() + i)] = toks[i];
    }
    for (const auto& [id, prompt, sp] : reqs) {
        // Requests run alone with the oracle drafter of their own output (every draft accepted).
        const Requests one = {{id, prompt, sp}};
        for (bool async : {false, true}) {
            for (bool loses : {true, false}) {
                EngineConfig cfg = spec_config(4, true);
                cfg.async_scheduling = async;
                cfg.speculative_step_cost = [loses](const SpeculativeStepShape& s) {
                    const double per_row = s.drafter_taps && loses ? 1e-3 : 1e-5;
                    return SpeculativeStepCost{.step_seconds = 1e-3 + per_row * double(s.tokens),
                                               .draft_seconds = loses ? 1e-3 : 1e-5};
                };
                std::vector<SpeculativeTraceStep> trace;
                cfg.speculative_trace = [&trace](const SpeculativeTraceStep& t) { trace.push_back(t); };
                auto drafter = std::make_shared<TableDrafter>(tables.at(id), V, false);
                const RunResult spec = run(mtp_model(), cfg, one, drafter);
                const std::string what = id + " async=" + std::to_string(async) + " loses=" + std::to_string(loses);
                EXPECT_EQ(plain.outputs.at(id).completions.at(0).token_ids, spec.outputs.at(id).completions.at(0).token_ids)
                    << what;
                const EngineMetrics& m = spec.metrics;
                // The trace: every decode step of the run, with the injected costs; the verify steps' accepted
                // drafts add up to the run's; the tapped line, once learned, predicts the (linear) cost.
                ASSERT_FALSE(trace.empty()) << what;
                int64_t accepted = 0;
                int64_t mixed = 0;
                for (const SpeculativeTraceStep& t : trace) {
                    accepted += t.accepted;
                    if (!t.decode_only) {  // a step with prefill rows (the prompt): reported, not learned from
                        EXPECT_LT(t.decode_rows, t.shape.tokens) << what << " step " << t.step;
                        ++mixed;
                        continue;
                    }
                    EXPECT_EQ(t.decode_rows, t.shape.tokens) << what << " step " << t.step;
                    const double per_row = t.shape.drafter_taps && loses ? 1e-3 : 1e-5;
                    EXPECT_EQ(t.step_seconds, 1e-3 + per_row * double(t.shape.tokens)) << what << " step " << t.step;
                    EXPECT_LE(t.verifying, 1) << what;
                    EXPECT_LE(t.accepted, t.drafts) << what;
                    EXPECT_EQ(t.shape.tokens, 1 + t.drafts) << what << " step " << t.step;
                }
                EXPECT_GE(mixed, 1) << what;  // the prompt's step
                EXPECT_EQ(accepted, m.spec_accepted_tokens) << what;
                const auto last_tapped = std::find_if(trace.rbegin(), trace.rend(), [](const SpeculativeTraceStep& t) {
                    return t.decode_only && t.shape.drafter_taps && t.drafts > 0;
                });
                ASSERT_NE(last_tapped, trace.rend()) << what;
                EXPECT_GT(last_tapped->predicted_step_seconds, 0.0) << what;
                if (!loses) {  // (where it loses, the last tapped step may precede the line's slope)
                    EXPECT_NEAR(last_tapped->predicted_step_seconds, last_tapped->step_seconds, 0.02 * last_tapped->step_seconds)
                        << what;
                }
                if (loses) {
                    EXPECT_GE(trace.back().expected_gain, 0.0) << what;
                    EXPECT_LT(trace.back().expected_gain, 1.0) << what;
                } else {
                    EXPECT_GE(trace.back().expected_gain, 1.0) << what;
                }
                if (loses) {
                    // A few steps to learn the costs, then plain steps (and short probes).
                    EXPECT_GT(m.spec_plain_steps, m.steps / 2) << what;
                    EXPECT_LT(m.spec_accepted_tokens, 60 / 2) << what;
                } else {
                    EXPECT_EQ(m.spec_plain_steps, 0) << what;
                    EXPECT_GT(m.spec_accepted_tokens, 60 / 2) << what;
                    EXPECT_LT(m.steps, 60 / 3) << what;
                }
            }
        }
    }
}

// Steps that carry new requests' prefill chunks next to decode rows (a wave of requests ends, new ones are
// admitted): the prefill is the same work with or without drafts, so whether to speculate is decided on the
// decode rows alone (extra tokens per extra second against plain decoding). Here speculation loses on every
// decode shape, and it must lose in the mixed steps too: weighed with their prefill rows (the plain line
// extrapolated to them), the draft call's fixed cost would look small and the gain above 1.
TEST(SpeculativeEngine, SchedulerDecidesStepsWithPrefillOnTheirDecodeRows) {
    const int64_t V = vocab_of(*mtp_model());
    std::mt19937 rng(41);
    const std::vector<int32_t> prompt = random_prompt(rng, 48, V);
    // One prompt, greedy: every output is a prefix of the longest, so one table drafts all of them
    // exactly. First 4 requests of different lengths alone (decode-only steps at 4, 3, 2 rows: both cost
    // lines learn their slopes), then 16 more while the longest still decodes: their prompts prefill
    // (3 chunks each) in steps with decode rows.
    Requests first, second;
    for (int i = 0; i < 4; ++i) first.emplace_back("a" + std::to_string(i), prompt, greedy(i < 3 ? 30 + 20 * i : 200));
    for (int i = 0; i < 16; ++i) second.emplace_back("b" + std::to_string(i), prompt, greedy(10 + 6 * (i % 4)));
    Requests all = first;
    all.insert(all.end(), second.begin(), second.end());
    const RunResult plain = run(mtp_model(), {}, all);
    std::map<int64_t, int32_t> table;
    const auto& longest = plain.outputs.at("a3").completions.at(0).token_ids;
    for (size_t i = 0; i < longest.size(); ++i) table[static_cast<int64_t>(prompt.size() + i)] = longest[i];
    for (bool async : {false, true}) {
        EngineConfig cfg = spec_config(4, true);
        cfg.async_scheduling = async;
        cfg.max_num_seqs = 4;
        cfg.max_prefill_chunk = 16;
        cfg.prefix_caching = false;  // every admission prefills its whole prompt
        // Every row costs 0.1 ms, a step 1 ms more, the draft call 6 ms: with every draft accepted, a
        // decode-only step of n <= 4 requests emits 5n tokens in (8 + 0.5n) ms against n in (1 + 0.1n) ms.
        cfg.speculative_step_cost = [](const SpeculativeStepShape& s) {
            return SpeculativeStepCost{.step_seconds = 1e-3 + 1e-4 * double(s.tokens), .draft_seconds = 6e-3};
        };
        std::vector<SpeculativeTraceStep> trace;
        cfg.speculative_trace = [&trace](const SpeculativeTraceStep& t) { trace.push_back(t); };
        Engine engine(mtp_model(), nullptr, cfg, std::make_shared<TableDrafter>(table, V, false));
        for (const auto& [id, p, sp] : first) engine.add_request(id, p, sp);
        RunResult spec;
        bool added = false;
        while (engine.has_unfinished()) {
            for (RequestOutput& o : engine.step()) spec.outputs.emplace(o.request_id, std::move(o));
            if (!added && spec.outputs.size() == 3) {  // only the longest of the first requests is left
                for (const auto& [id, p, sp] : second) engine.add_request(id, p, sp);
                added = true;
            }
        }
        const std::string what = std::string("async=") + (async ? "1" : "0");
        ASSERT_TRUE(added) << what;
        test::expect_same_greedy_outputs(plain, spec, all, what);
        // Mixed steps with decode rows once the costs are learned (after the first plain step): none
        // verifies drafts but a probe's, and every gain the scheduler estimated is below 1.
        const auto first_plain = std::find_if(trace.begin(), trace.end(), [](const SpeculativeTraceStep& t) {
            return t.decode_only && !t.shape.drafter_taps;
        });
        ASSERT_NE(first_plain, trace.end()) << what;
        int64_t mixed = 0, mixed_verifying = 0;
        for (auto t = first_plain; t != trace.end(); ++t) {
            if (t->decode_only || t->decode_rows == 0) continue;
            ++mixed;
            mixed_verifying += t->verifying > 0;
            EXPECT_LT(t->expected_gain, 1.0) << what << " step " << t->step;
        }
        EXPECT_GE(mixed, 16) << what;  // the run has such steps to decide
        EXPECT_LE(mixed_verifying, 1) << what;
    }
}

}  // namespace
}  // namespace deepinfer
