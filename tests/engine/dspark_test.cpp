// SPDX-License-Identifier: Apache-2.0
// The DSpark drafter of DeepSeek-V4.1 (model/v41/dspark.h) on tiny random V4.1 checkpoints written in
// the published layout (every V4.1 layer kind, Engram, a 3-stage drafter, window 8 so the drafter's
// rings wrap), in official (FP8/FP4) and exact (bf16) numerics:
//   * loading: the drafter is found from the stored mtp.N blocks, whatever num_nextn_predict_layers says;
//   * rollback without undo: after a verify pass whose drafts are all rejected, some accepted or all
//     accepted, the next block (tokens, sampled-draft distributions, confidences) is bit-identical to
//     the block of a fresh sequence that only ever saw the committed tokens; drafting is batch-invariant;
//   * through the engine: greedy output token-identical to no speculation (draft lengths 1..5, the
//     confidence scheduler on and off, alone and batched with penalties, logprobs and a sampled
//     neighbour; chunked prefill);
//   * against the reference's formulas (exact numerics): the context rows are built from the mean stream
//     ENTERING each target layer, a block attends to exactly the last window of context rows, and the
//     draft distributions and confidences follow the Markov and confidence heads;
//   * a drafter constructed to agree with the target (make_dspark_agree_with_target): near-complete
//     greedy acceptance, and the expected acceptance pattern for sampled drafts;
//   * asynchronous scheduling composes with speculation (same outputs as synchronous with a fixed k);
//   * sampled output with DSpark drafts (sampled, one-hot, scheduled, block verification, asynchronous) follows the same per-position token
//     distribution as without speculation (two-sample chi-square over many seeds, 16-token vocabulary).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <unistd.h>

#include "deepinfer/check.h"
#include "deepinfer/drafter.h"
#include "deepinfer/engine.h"
#include "deepinfer/model_v41.h"
#include "deepinfer/parallel.h"
#include "deepinfer/synthetic_v41.h"
#include "engine/chi_square.h"
#include "engine/drafter_checks.h"
#include "engine/dspark_engine_checks.h"
#include "engine/spec_test_util.h"
#include "model/v41/dspark.h"
#include "model/paged_rows.h"
#include "model/v41/qat.h"
#include "unit/fixtures.h"
#include "v41/tiny_published_config.h"

namespace deepinfer {
namespace {

// Many tiny steps: one thread avoids OpenMP fork/join costs that dominate at this size (and explode on
// a loaded machine).
struct OneThread {
    int saved = cpu_num_threads();
    OneThread() { set_cpu_num_threads(1); }
    ~OneThread() { set_cpu_num_threads(saved); }
};

std::string temp_dir(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("deepinfer_dspark_" + name + "_" + std::to_string(::getpid())))
        .string();
}

ModelOptions options() {
    ModelOptions o;
    o.tokenizer_json = std::string(DI_ASSETS_DIR) + "/tokenizer/deepseek-v4/tokenizer.json";
    return o;
}

nlohmann::ordered_json tiny_config() {
    nlohmann::ordered_json j = tiny_published_config();
    j.erase("vision_config");
    return j;
}

// A tiny V4.1 checkpoint with the drafter: `official` = FP8 linears and FP4 experts (official numerics,
// the checkpoint's default), else bf16 (exact numerics). Written, loaded and removed once per process.
std::shared_ptr<const Model> tiny_model(bool official) {
    static std::map<bool, std::shared_ptr<const Model>> cache;
    auto& m = cache[official];
    if (!m) {
        const std::string dir = temp_dir(official ? "official" : "exact");
        SyntheticCheckpointOptions o;
        o.seed = 17;
        o.fp8_linears = o.fp4_experts = official;
        o.residual_damping = 0.5;
        write_synthetic_v41_checkpoint(dir, tiny_config().dump(2), o);
        m = std::shared_ptr<const Model>(Model::load(dir, options()));
        std::filesystem::remove_all(dir);
    }
    return m;
}

// The same architecture with a 16-token vocabulary (bf16, exact numerics), for distribution tests.
std::shared_ptr<const Model> small_vocab_model() {
    static std::shared_ptr<const Model> m = [] {
        const std::string dir = temp_dir("v16");
        nlohmann::ordered_json j = tiny_config();
        j["text_config"]["vocab_size"] = 16;
        j["text_config"]["dspark_noise_token_id"] = 15;
        SyntheticCheckpointOptions o;
        o.seed = 37;
        o.fp8_linears = o.fp4_experts = false;
        write_synthetic_v41_checkpoint(dir, j.dump(2), o);
        auto model = std::shared_ptr<const Model>(Model::load(dir, options()));
        std::filesystem::remove_all(dir);
        return model;
    }();
    return m;
}

// The same architecture with markov rank = hidden size, rewritten so the drafter agrees with the target.
std::shared_ptr<const Model> agreeing_model() {
    static std::shared_ptr<const Model> m = [] {
        const std::string dir = temp_dir("agree");
        nlohmann::ordered_json j = tiny_config();
        j["text_config"]["dspark_markov_rank"] = j["text_config"]["hidden_size"];
        SyntheticCheckpointOptions o;
        o.seed = 23;
        o.fp8_linears = o.fp4_experts = false;
        write_synthetic_v41_checkpoint(dir, j.dump(2), o);
        make_dspark_agree_with_target(dir);
        auto model = std::shared_ptr<const Model>(Model::load(dir, options()));
        std::filesystem::remove_all(dir);
        return model;
    }();
    return m;
}

using drafter_checks::attached;
using drafter_checks::expect_same_draft;
using drafter_checks::random_prompt;

class DSpark : public ::testing::TestWithParam<bool> {  // official numerics?
    OneThread one_thread_;
};

TEST_P(DSpark, LoadedFromTheStoredBlocks) {
    const auto model = tiny_model(GetParam());
    const Drafter* d = model->drafter();
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->method(), "dspark");
    EXPECT_EQ(d->max_drafts(), 5);  // dspark_block_size
    std::mt19937 rng(3);
    const std::vector<int32_t> prompt = random_prompt(rng, 13, model->info().vocab_size);
    Sequence s = attached(*model, prompt, 64);
    const std::vector<double> u = {0.1, 0.9, 0.5, 0.3, 0.7};
    const std::vector<Draft> out = d->draft(std::vector<DraftRequest>{
        {.sequence = &s, .anchor = 42, .num_drafts = 5},
        {.sequence = &s, .anchor = 42, .num_drafts = 5, .temperature = 0.8, .uniforms = u}});
    ASSERT_EQ(out.size(), 2u);
    for (const Draft& dr : out) {
        ASSERT_EQ(dr.tokens.size(), 5u);
        ASSERT_EQ(dr.confidence.size(), 5u);
        for (float c : dr.confidence) EXPECT_TRUE(c > 0.0f && c < 1.0f) << c;
        for (int32_t t : dr.tokens) EXPECT_TRUE(t >= 0 && t < model->info().vocab_size);
    }
    EXPECT_TRUE(out[0].probs.empty());
    ASSERT_EQ(out[1].probs.size(), size_t(5 * model->info().vocab_size));
    for (int k = 0; k < 5; ++k) {
        double total = 0;
        for (int64_t v = 0; v < model->info().vocab_size; ++v) total += out[1].probs[size_t(k * model->info().vocab_size + v)];
        EXPECT_NEAR(total, 1.0, 1e-5);
    }
    // The first draft and confidence do not depend on the sampling (the Markov input is the anchor).
    EXPECT_EQ(out[0].confidence[0], out[1].confidence[0]);
}

TEST_P(DSpark, StateBytesCountTheContextRings) {
    const auto model = tiny_model(GetParam());
    const uint64_t page = 1024;
    auto pool = std::make_shared<StatePool>(uint64_t{64} << 20, page);
    std::mt19937 rng(5);
    const std::vector<int32_t> prompt = random_prompt(rng, 19, model->info().vocab_size);
    Sequence plain = model->new_sequence(pool), s = model->new_sequence(pool);
    model->drafter()->attach(s);
    model->forward(plain, prompt, false);
    model->forward(s, prompt, false);
    const uint64_t rings = model->drafter()->state_bytes(page);
    EXPECT_GT(rings, 0u);
    EXPECT_EQ(plain.state_bytes(), model->estimate_state_bytes(int64_t(prompt.size()), page));
    EXPECT_EQ(s.state_bytes(), model->estimate_state_bytes(int64_t(prompt.size()), page) + rings);
}

TEST(DSparkLoad, StageCountComesFromTheCheckpointNotTheConfig) {
    const OneThread one_thread;
    // A checkpoint with 3 stages whose config claims 1 (num_nextn_predict_layers is vestigial in some
    // releases): the drafter still runs all three, i.e. drafts like the model with the right config.
    const std::string dir = temp_dir("stages"), lying = temp_dir("stages_lying");
    SyntheticCheckpointOptions o;
    o.seed = 29;
    o.fp8_linears = o.fp4_experts = false;
    nlohmann::ordered_json j = tiny_config();
    write_synthetic_v41_checkpoint(dir, j.dump(2), o);
    std::filesystem::create_directories(lying);
    std::filesystem::copy_file(dir + "/model.safetensors", lying + "/model.safetensors");
    auto& t = j["text_config"];
    t["num_nextn_predict_layers"] = 1;
    std::vector<int64_t> ratios = t["compress_ratios"].get<std::vector<int64_t>>();
    ratios.resize(ratios.size() - 2);
    t["compress_ratios"] = ratios;
    std::ofstream(lying + "/config.json") << j.dump(2);
    const auto right = Model::load(dir, options()), wrong = Model::load(lying, options());
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(lying);
    ASSERT_NE(wrong->drafter(), nullptr);
    std::mt19937 rng(4);
    const std::vector<int32_t> prompt = random_prompt(rng, 11, right->info().vocab_size);
    Sequence a = attached(*right, prompt, 64), b = attached(*wrong, prompt, 64);
    const std::vector<double> u = {0.2, 0.4, 0.6};
    const DraftRequest ra{.sequence = &a, .anchor = 7, .num_drafts = 3, .temperature = 1.0, .uniforms = u};
    DraftRequest rb = ra;
    rb.sequence = &b;
    expect_same_draft(right->drafter()->draft({&ra, 1})[0], wrong->drafter()->draft({&rb, 1})[0], "stages");
}

TEST_P(DSpark, RollbackNeedsNoUndoAndChunkingDoesNotMatter) {
    // Prompts around and beyond the window (8) and the ring (8 + headroom), so context rows wrap.
    const int64_t lens[] = {3, 9, 30};
    drafter_checks::check_rollback_needs_no_undo(*tiny_model(GetParam()), lens);
}

TEST_P(DSpark, DraftingIsBatchInvariant) {
    const int64_t lens[] = {2, 8, 21, 40};
    drafter_checks::check_drafting_batch_invariant(*tiny_model(GetParam()), lens);
}

// ---- the reference's formulas (inference/model.py of V4.1), exact numerics ----

const v41::DSparkModel& dspark_of(const Model& model) {
    const auto* d = dynamic_cast<const v41::DSparkDrafter*>(model.drafter());
    if (d == nullptr) throw std::runtime_error("no DSpark drafter");
    return d->model();
}

TEST(DSparkFormula, ContextRowsComeFromTheMeanStreamEnteringTheTargetLayers) {
    const auto model = tiny_model(false);
    const v41::DSparkModel& dm = dspark_of(*model);
    const V41TextConfig& c = *dm.config;
    const int64_t D = c.hidden_size, hc = c.hc_mult, hd = c.head_dim, T = dm.num_taps(), W = c.sliding_window;
    for (int64_t l : c.dspark_target_layer_ids) ASSERT_LT(c.engram_index(l), 0) << "a tapped layer has Engram";
    std::mt19937 rng(41);
    const std::vector<int32_t> prompt = random_prompt(rng, 13, c.vocab_size);
    Sequence s = attached(*model, prompt, 4);
    V41ForwardTrace trace;  // the same forward, one chunk, with the streams after every layer
    dynamic_cast<const V41Model&>(*model).forward(prompt, &trace);
    const auto& st = dynamic_cast<const v41::SequenceState&>(s.state());
    const v41::DSparkWeights& w = *dm.weights->dspark;
    const int64_t P = int64_t(prompt.size());
    for (bool input : {true, false}) {  // the layer's input (reference) vs its output (must differ)
        int64_t same = 0, rows = 0;
        for (int64_t p = P - W; p < P; ++p) {
            std::vector<float> taps(static_cast<size_t>(T * D)), main(static_cast<size_t>(D)), kv(static_cast<size_t>(hd));
            for (int64_t j = 0; j < T; ++j) {
                const int64_t l = c.dspark_target_layer_ids[size_t(j)] - (input ? 1 : 0);
                const float* x = trace.layer_out.at(l).data() + p * hc * D;
                for (int64_t d = 0; d < D; ++d) {
                    float sum = 0;
                    for (int64_t k = 0; k < hc; ++k) sum += x[k * D + d];
                    taps[size_t(j * D + d)] = sum / float(hc);
                }
            }
            cpu::linear_rows(w.main_proj, taps.data(), 1, main.data());
            cpu::rms_norm(main.data(), w.main_norm.data(), float(c.rms_norm_eps), D, main.data());
            for (size_t stage = 0; stage < w.stages.size(); ++stage) {
                cpu::linear_rows(w.stages[stage].attn.wkv, main.data(), 1, kv.data());
                cpu::rms_norm(kv.data(), w.stages[stage].attn.kv_norm.data(), float(c.rms_norm_eps), hd, kv.data());
                dm.rope_main->apply(kv.data(), hd, p);
                v41::fake_quant_fp8(kv.data(), hd, 32);
                const float* ring = st.dspark.stages[stage].row(p % st.dspark.rows);
                same += std::equal(kv.begin(), kv.end(), ring);
                ++rows;
            }
        }
        if (input) {
            EXPECT_EQ(same, rows);
        } else {
            EXPECT_EQ(same, 0);
        }
    }
}

TEST(DSparkFormula, BlockAttendsToExactlyTheLastWindowOfContextRows) {
    const auto model = tiny_model(false);
    const v41::DSparkModel& dm = dspark_of(*model);
    const int64_t W = dm.config->sliding_window, hd = dm.config->head_dim;
    std::mt19937 rng(43);
    const int64_t P = 20;  // > W + 1, < the ring (W + headroom): every position has its own slot
    Sequence s = attached(*model, random_prompt(rng, P, dm.config->vocab_size), 64);
    auto block = [&](Sequence& q) {
        v41::SequenceState* st = &dynamic_cast<v41::SequenceState&>(q.state());
        const int32_t anchor = 9;
        return v41::dspark_block_forward(dm, std::span<v41::SequenceState* const>(&st, 1), std::span(&anchor, 1));
    };
    const v41::DSparkBlockOutput base = block(s);
    for (int64_t p : {P - W - 2, P - W - 1, P - W, P - 1}) {
        Sequence f = s.fork();
        auto& st = dynamic_cast<v41::SequenceState&>(f.state());
        ASSERT_GT(st.dspark.rows, P);
        for (PagedRing& ring : st.dspark.stages) std::fill_n(ring.mutable_row(p % st.dspark.rows), hd, 0.5f);
        const bool visible = p >= P - W;
        EXPECT_EQ(block(f).y != base.y, visible) << "context position " << p;
    }
    EXPECT_EQ(block(s).y, base.y);  // the forks wrote their own pages
}

TEST(DSparkFormula, DraftsFollowTheMarkovAndConfidenceHeads) {
    const auto model = tiny_model(false);
    const v41::DSparkModel& dm = dspark_of(*model);
    const V41TextConfig& c = *dm.config;
    const v41::DSparkWeights& w = *dm.weights->dspark;
    const int64_t D = c.hidden_size, V = c.vocab_size, r = c.dspark_markov_rank, G = dm.block_size();
    std::mt19937 rng(47);
    Sequence s = attached(*model, random_prompt(rng, 10, V), 64);
    const int32_t anchor = 77;
    const double T = 0.8;
    const std::vector<double> u = {0.25, 0.5, 0.75, 0.1, 0.9};
    const DraftRequest req{.sequence = &s, .anchor = anchor, .num_drafts = G, .temperature = T, .uniforms = u};
    const Draft d = model->drafter()->draft({&req, 1})[0];
    v41::SequenceState* st = &dynamic_cast<v41::SequenceState&>(s.state());
    const v41::DSparkBlockOutput b = v41::dspark_block_forward(dm, std::span<v41::SequenceState* const>(&st, 1),
                                                               std::span(&anchor, 1));
    drafter_checks::expect_markov_and_confidence_heads({.markov_embed = &w.markov_embed, .markov_head = &w.markov_head,
                                                        .confidence = w.confidence.data(), .hidden = D, .rank = r,
                                                        .vocab = V, .block = G},
                                                       b, d, anchor, T);
}

// ---- through the engine ----

using test::greedy;
using test::Requests;
using test::run;
using test::RunResult;

EngineConfig spec_config(int64_t k, bool scheduler, const char* method = "dspark") {
    return test::spec_config(k, scheduler, method, 8);
}
void expect_same_outputs(const RunResult& plain, const RunResult& spec, const Requests& reqs, const std::string& what) {
    test::expect_same_greedy_outputs(plain, spec, reqs, what);
}



TEST_P(DSpark, GreedyIsTokenIdenticalToNoSpeculation) {
    const auto model = tiny_model(GetParam());
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(21);
    const Requests reqs = test::greedy_requests_with_sampled_neighbour(rng, V, 30);
    const RunResult plain = run(model, {}, reqs);
    // Official numerics cost more per step: fewer arms there (every arm is batched with all neighbours).
    const std::vector<std::pair<int64_t, bool>> arms =
        GetParam() ? std::vector<std::pair<int64_t, bool>>{{2, false}, {5, true}}
                   : std::vector<std::pair<int64_t, bool>>{{1, false}, {3, false}, {5, false}, {5, true}};
    test::expect_dspark_greedy_arms(model, plain, reqs, arms, 0, 5, [](int64_t k, bool sched, const char* method) {
        return spec_config(k, sched, method);
    });
}

// Asynchronous scheduling (the next step is sized before its drafts exist; the forward worker drafts,
// allocates and verifies): with a fixed draft length every output, sampled ones included, equals the
// synchronous engine's; with the confidence scheduler greedy output equals plain decoding. DSpark
// (both numerics) and the V4 MTP fixture.
class AsyncSpec : public ::testing::TestWithParam<const char*> {
    OneThread one_thread_;
};

TEST_P(AsyncSpec, ComposesWithSpeculation) {
    const std::string which = GetParam();
    std::shared_ptr<const Model> model;
    if (which == "mtp") {
        ModelOptions o;
        o.numerics_from_checkpoint = false;
        static std::shared_ptr<const Model> mtp(Model::load(test::data_path("models/v4_tiny_a_mtp"), o));
        model = mtp;
    } else {
        model = tiny_model(which == "official");
    }
    const char* method = which == "mtp" ? "mtp" : "dspark";
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(61);
    Requests reqs;
    for (int i = 0; i < 6; ++i) {
        SamplingParams sp = greedy(7 + i);
        if (i % 2) {
            sp.temperature = 0.9;
            sp.seed = uint64_t(100 + i);
            sp.top_k = 20;
        }
        if (i == 2) sp.presence_penalty = 0.5;
        if (i == 3) sp.logprobs = 1;
        reqs.emplace_back("a" + std::to_string(i), random_prompt(rng, 3 + int64_t(rng() % 25), V), sp);
    }
    const RunResult plain = run(model, {}, reqs);
    EngineConfig sync_cfg = spec_config(3, false, method), async_cfg = sync_cfg;
    async_cfg.async_scheduling = true;
    const RunResult sync = run(model, sync_cfg, reqs), async = run(model, async_cfg, reqs);
    for (const auto& [id, prompt, sp] : reqs) {
        const CompletionOutput& a = sync.outputs.at(id).completions.at(0);
        const CompletionOutput& b = async.outputs.at(id).completions.at(0);
        EXPECT_EQ(a.token_ids, b.token_ids) << id;
        ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << id;
        for (size_t t = 0; t < a.logprobs.size(); ++t) EXPECT_EQ(a.logprobs[t].logprob, b.logprobs[t].logprob) << id;
    }
    EXPECT_EQ(sync.metrics.spec_draft_tokens, async.metrics.spec_draft_tokens);
    EXPECT_EQ(sync.metrics.spec_accepted_tokens, async.metrics.spec_accepted_tokens);
    expect_same_outputs(plain, async, reqs, "async fixed");
    EngineConfig sched = spec_config(which == "mtp" ? 4 : 5, true, method);
    sched.async_scheduling = true;
    const RunResult scheduled = run(model, sched, reqs);
    expect_same_outputs(plain, scheduled, reqs, "async scheduler");
    EXPECT_GT(scheduled.metrics.spec_draft_tokens, 0);
}

TEST(DSparkPrefixCache, SnapshotsCarryTheContextRings) {
    // Requests sharing a long prompt prefix, one at a time, so the later ones start from prefix-cache
    // snapshots: the drafter's rings come with the snapshot, so every draft (hence every acceptance
    // count) is the same as with the prefix cache off, and the output is plain greedy decoding.
    const OneThread one_thread;
    const auto model = small_vocab_model();  // 16 tokens: random drafts are sometimes accepted
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(67);
    const std::vector<int32_t> shared = random_prompt(rng, 37, V);
    Requests reqs;
    for (int i = 0; i < 3; ++i) {
        std::vector<int32_t> p = shared;
        const std::vector<int32_t> tail = random_prompt(rng, 2 + i, V);
        p.insert(p.end(), tail.begin(), tail.end());
        reqs.emplace_back("p" + std::to_string(i), p, greedy(16));
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
    EXPECT_EQ(b.metrics.prefix_cache_hit_tokens, 0);
    expect_same_outputs(plain, a, reqs, "prefix cache");
    EXPECT_EQ(a.metrics.spec_draft_tokens, b.metrics.spec_draft_tokens);
    EXPECT_EQ(a.metrics.spec_accepted_tokens, b.metrics.spec_accepted_tokens);
    EXPECT_EQ(a.metrics.spec_position_accepted, b.metrics.spec_position_accepted);
    EXPECT_GT(a.metrics.spec_accepted_tokens, 0);  // the counts carry information about the drafts
}

INSTANTIATE_TEST_SUITE_P(SpeculativeEngine, AsyncSpec, ::testing::Values("official", "exact", "mtp"));

TEST(DSparkReplay, BoundedReplayPrefillFeedsTheDrafter) {
    // With SWA bounded replay a long prompt chunk runs the decoder (where the tapped layers are) on its
    // last window of rows only: the drafter's context rows come from those rows, which are exactly the
    // positions a draft reads. Greedy output stays the plain output and drafts are still accepted.
    const OneThread one_thread;
    const std::string dir = temp_dir("replay");
    SyntheticCheckpointOptions o;
    o.seed = 53;
    o.fp8_linears = o.fp4_experts = false;
    nlohmann::ordered_json j = tiny_config();
    j["text_config"]["dspark_markov_rank"] = j["text_config"]["hidden_size"];
    write_synthetic_v41_checkpoint(dir, j.dump(2), o);
    make_dspark_agree_with_target(dir);
    ModelOptions mo = options();
    mo.v41_bounded_replay = true;
    const std::shared_ptr<const Model> model(Model::load(dir, mo));
    std::filesystem::remove_all(dir);
    std::mt19937 rng(59);
    Requests reqs;
    for (int i = 0; i < 3; ++i) reqs.emplace_back("r" + std::to_string(i), random_prompt(rng, 20 + 9 * i, 512), greedy(12));
    EngineConfig plain_cfg;
    plain_cfg.max_prefill_chunk = 64;  // whole prompts in one chunk: replayed
    EngineConfig spec_cfg = spec_config(5, false);
    spec_cfg.max_prefill_chunk = 64;
    const RunResult plain = run(model, plain_cfg, reqs), spec = run(model, spec_cfg, reqs);
    expect_same_outputs(plain, spec, reqs, "bounded replay");
    EXPECT_GT(spec.metrics.spec_accepted_tokens, 0.8 * double(spec.metrics.spec_draft_tokens));
    // Every context row a draft reads was written by the replayed prefill: rings poisoned with NaN
    // before it give finite confidences after it; poisoning one read slot afterwards does not.
    const int64_t W = dspark_of(*model).config->sliding_window, hd = dspark_of(*model).config->head_dim;
    const std::vector<int32_t> prompt = random_prompt(rng, 29, 512);
    Sequence s = model->new_sequence();
    model->drafter()->attach(s);
    auto& st = dynamic_cast<v41::SequenceState&>(s.state());
    for (PagedRing& ring : st.dspark.stages)
        for (int64_t r = 0; r < st.dspark.rows; ++r) std::fill_n(ring.mutable_row(r), hd, NAN);
    model->forward(s, prompt, false);  // one chunk of 29 > W rows, last logits only: replayed
    const DraftRequest req{.sequence = &s, .anchor = 3, .num_drafts = 5};
    // (the drafts held in a named vector: a range-for over a member of a temporary would read freed memory)
    const auto drafts = model->drafter()->draft({&req, 1});
    ASSERT_EQ(drafts.size(), 1u);
    ASSERT_FALSE(drafts[0].confidence.empty());
    for (float c : drafts[0].confidence) EXPECT_TRUE(std::isfinite(c));
    std::fill_n(st.dspark.stages[0].mutable_row((int64_t(prompt.size()) - W) % st.dspark.rows), hd, NAN);
    EXPECT_FALSE(std::isfinite(model->drafter()->draft({&req, 1})[0].confidence[0]));
}

INSTANTIATE_TEST_SUITE_P(SpeculativeEngine, DSpark, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "official" : "exact"; });

// The agreeing rewrite of a checkpoint in the published formats (FP8 linears, FP4 experts: zeroed branches
// stay exactly zero), as spec_bench --formats published writes it: the drafter agrees as with bf16.
TEST(DSparkAgreeing, PublishedFormatsAgreeToo) {
    const OneThread one_thread;
    const std::string dir = temp_dir("agree_published");
    nlohmann::ordered_json j = tiny_published_config();
    j.erase("vision_config");
    j["text_config"]["dspark_markov_rank"] = j["text_config"]["hidden_size"];
    SyntheticCheckpointOptions o;
    o.seed = 23;
    o.fp8_linears = o.fp4_experts = true;
    write_synthetic_v41_checkpoint(dir, j.dump(2), o);
    make_dspark_agree_with_target(dir);
    const std::shared_ptr<const Model> model(Model::load(dir, options()));
    std::filesystem::remove_all(dir);
    EXPECT_EQ(model->numerics(), Numerics::kOfficial);
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(41);
    Requests reqs;
    for (int i = 0; i < 3; ++i) reqs.emplace_back("r" + std::to_string(i), random_prompt(rng, 6 + 5 * i, V), greedy(16));
    const RunResult plain = run(model, {}, reqs), spec = run(model, spec_config(5, false), reqs);
    expect_same_outputs(plain, spec, reqs, "published agreeing");
    EXPECT_GT(spec.metrics.spec_draft_tokens, 0);
    EXPECT_GT(spec.metrics.spec_accepted_tokens, 0.9 * double(spec.metrics.spec_draft_tokens));
}

TEST(DSparkAgreeing, NearlyEveryDraftIsAccepted) {
    const OneThread one_thread;
    const auto model = agreeing_model();
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(31);
    Requests reqs;
    for (int i = 0; i < 4; ++i) reqs.emplace_back("r" + std::to_string(i), random_prompt(rng, 5 + 7 * i, V), greedy(24));
    const RunResult plain = run(model, {}, reqs);
    const RunResult spec = run(model, spec_config(5, false), reqs);
    expect_same_outputs(plain, spec, reqs, "agreeing");
    EXPECT_GT(spec.metrics.spec_accepted_tokens, 0.9 * double(spec.metrics.spec_draft_tokens));
    EXPECT_GT(spec.metrics.mean_accepted_length(), 5.0);
    EXPECT_LT(2 * spec.metrics.steps, plain.metrics.steps);
    // Sampled drafts (T = 1): the first draft comes from softmax(2 L(anchor)), which is not the target's
    // softmax(L(anchor)); later drafts from softmax(L(previous draft)), the target's own distribution
    // given that draft (up to bf16 rounding of n(x)), so their conditional acceptance is nearly 1.
    SamplingParams hot;
    hot.temperature = 1.0;
    hot.max_tokens = 24;
    hot.ignore_eos = true;
    hot.seed = 5;
    Requests sampled;
    for (const auto& [id, prompt, sp] : reqs) sampled.emplace_back(id, prompt, hot);
    const RunResult s = run(model, spec_config(5, false), sampled);
    const EngineMetrics& m = s.metrics;
    ASSERT_EQ(m.spec_position_verified.size(), 5u);
    EXPECT_LT(m.spec_position_accepted[0], m.spec_position_verified[0]);
    for (size_t j = 1; j < 5; ++j) {
        if (m.spec_position_verified[j] < 5) continue;
        EXPECT_GT(double(m.spec_position_accepted[j]), 0.85 * double(m.spec_position_verified[j])) << "position " << j;
    }
}

TEST(DSparkSampled, OutputKeepsTheTargetDistribution) {
    const OneThread one_thread;
    const auto model = small_vocab_model();
    const int64_t n = 400, len = 4;
    const std::vector<int32_t> prompt = {3, 7, 1, 12, 5, 9, 2, 11, 4, 6};  // longer than the window (8)
    auto histograms = [&](const EngineConfig& cfg, const SamplingParams& base, uint64_t seed0, EngineMetrics* m) {
        return test::token_histograms(model, cfg, base, seed0, n, len, prompt, m);
    };
    SamplingParams sp;
    sp.temperature = 0.9;
    sp.top_k = 10;
    sp.presence_penalty = 0.3;
    sp.max_tokens = len;
    sp.ignore_eos = true;
    const auto want = histograms(EngineConfig{}, sp, 1000, nullptr);
    struct Arm { const char* name; EngineConfig cfg; };
    std::vector<Arm> arms = {{"sampled drafts k=3", spec_config(3, false)}, {"one-hot drafts k=2", spec_config(2, false)},
                             {"scheduler k=5", spec_config(5, true)}, {"block verification k=4", spec_config(4, false)},
                             {"asynchronous scheduler k=5", spec_config(5, true)}};
    arms[1].cfg.speculative_sample_drafts = false;
    arms[3].cfg.speculative_block_verification = true;
    arms[4].cfg.async_scheduling = true;
    uint64_t seed0 = 1000;
    for (const Arm& arm : arms) {
        EngineMetrics m;
        seed0 += 100000;
        const auto got = histograms(arm.cfg, sp, seed0, &m);
        EXPECT_GT(m.spec_accepted_tokens, 0) << arm.name;  // both branches of the rejection rule run
        EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens) << arm.name;
        test::expect_same_token_distribution(want, got, arm.name);
    }
}

// Injected step costs of a GPU-like device: a step costs 1 ms plus per row 1 us, or, where speculation
// loses, 1 ms per row of a step with drafter taps and 1 ms per draft call. Each step's drafted requests
// go to `drafted` (when given).
std::function<SpeculativeStepCost(const SpeculativeStepShape&)> simulated_step_cost(
    bool loses, std::shared_ptr<std::vector<int64_t>> drafted = nullptr) {
    return [loses, drafted](const SpeculativeStepShape& s) {
        if (drafted && s.drafted_requests > 0) drafted->push_back(s.drafted_requests);
        const double per_row = s.drafter_taps && loses ? 1e-3 : 1e-5;
        return SpeculativeStepCost{.step_seconds = 1e-3 + per_row * double(s.tokens), .draft_seconds = loses ? 1e-3 : 1e-5};
    };
}

// The confidence scheduler with the DSpark drafter against injected step costs: where verify rows cost
// 100x a plain step's row it falls back to plain steps after learning (and probes), where every step
// costs alike it speculates on every decode step; greedy output equals no speculation either way.
// (The GPU twin, tests/model/cuda_dspark_test.cpp, also checks the paused passes replay CUDA graphs.)
TEST(DSparkScheduler, FallsBackToPlainStepsWhereSpeculationLoses) {
    OneThread one_thread;
    const std::shared_ptr<const Model> model = agreeing_model();
    std::mt19937 rng(4);
    test::Requests reqs;
    for (int i = 0; i < 4; ++i)
        reqs.emplace_back("p" + std::to_string(i), random_prompt(rng, 5 + 9 * i, model->info().vocab_size), test::greedy(90));
    const test::RunResult plain = test::run(model, {}, reqs);
    for (bool async : {false, true}) {
        for (bool loses : {true, false}) {
            EngineConfig c = test::spec_config(5, true, "dspark", 16);
            c.async_scheduling = async;
            c.speculative_step_cost = simulated_step_cost(loses);
            const test::RunResult r = test::run(model, c, reqs);
            const std::string what = "async=" + std::to_string(async) + " loses=" + std::to_string(loses);
            test::expect_same_greedy_outputs(plain, r, reqs, what);
            const EngineMetrics& m = r.metrics;
            EXPECT_GT(m.spec_accepted_tokens, 0) << what;
            if (loses) {
                EXPECT_GT(m.spec_plain_steps, m.steps / 2) << what;
            } else {
                EXPECT_EQ(m.spec_plain_steps, 0) << what;
            }
        }
    }
}

// At large batches (here from 4 decode rows: EngineConfig::speculative_subset_from) the scheduler's
// exploration speculates for a subset of the requests: in one step some rows verify drafts and update the
// drafter while the others decode plainly. Where speculation loses, no step drafts for more than a quarter
// of the batch; where it pays, it moves on to every request. Greedy output equals no speculation.
TEST(DSparkScheduler, ExploresWithASubsetOfTheBatch) {
    OneThread one_thread;
    const std::shared_ptr<const Model> model = agreeing_model();
    std::mt19937 rng(5);
    test::Requests reqs;
    const int64_t n = 8;
    for (int64_t i = 0; i < n; ++i)
        reqs.emplace_back("s" + std::to_string(i), random_prompt(rng, 4 + 3 * i, model->info().vocab_size), test::greedy(48));
    const test::RunResult plain = test::run(model, {}, reqs);
    for (bool async : {false, true}) {
        for (bool loses : {true, false}) {
            EngineConfig c = test::spec_config(5, true, "dspark", 16);
            c.async_scheduling = async;
            c.speculative_subset_from = 4;
            auto drafted = std::make_shared<std::vector<int64_t>>();
            c.speculative_step_cost = simulated_step_cost(loses, drafted);
            const test::RunResult r = test::run(model, c, reqs);
            const std::string what = "async=" + std::to_string(async) + " loses=" + std::to_string(loses);
            test::expect_same_greedy_outputs(plain, r, reqs, what);
            const EngineMetrics& m = r.metrics;
            EXPECT_GT(m.spec_accepted_tokens, 0) << what;  // the subset's drafts were verified
            ASSERT_FALSE(drafted->empty()) << what;
            const int64_t most = *std::max_element(drafted->begin(), drafted->end());
            if (loses) {
                EXPECT_LE(most, n / 4) << what;
                EXPECT_GT(m.spec_plain_steps, m.steps / 2) << what;
            } else {
                EXPECT_EQ(most, n) << what;
                EXPECT_LT(m.spec_plain_steps, m.steps / 4) << what;
            }
        }
    }
}

}  // namespace
}  // namespace deepinfer
