// SPDX-License-Identifier: Apache-2.0
// The MTP drafter of CudaModel against the CPU MtpDrafter on the tiny MTP fixture (exact and official
// numerics, reference GEMMs): drafts, draft distributions and confidences bit-identical after chunked
// prefills, after verify passes rolled back by different amounts, and from a forked sequence; then the
// offline engine on the GPU with speculation: greedy output token-identical to no speculation (several
// draft lengths, scheduler on and off, batched with neighbours), whole blocks accepted or rejected
// (rollback of the CUDA sequence state), and sampled output equal to the CPU engine's speculative run
// with the same seeds. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/ops.h"
#include "deepinfer/check.h"
#include "deepinfer/drafter.h"
#include "deepinfer/engine.h"
#include "engine/spec_test_util.h"
#include "model/draft_device_probs.h"
#include "model/draft_sampling.h"
#include "model/forward.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

ModelOptions numerics(Numerics n) {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = n;
    return o;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % uint32_t(vocab));
    return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// draft_sample against src/model/draft_sampling.h (and the MTP confidence proxy) on rows with ties at
// the maximum, a -inf tail, a very low and a high temperature, greedy rows between sampled ones, and
// uniforms at the ends of [0, 1); a small vocabulary and V4's (253 blocks of ids spread over the GPU).
TEST(CudaMtpOps, DraftSampleEqualsTheCpuDraftRule) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (const int64_t V : {int64_t{1000}, int64_t{129280}}) {
        SCOPED_TRACE("vocab " + std::to_string(V));
        const int64_t R = 8;
        std::mt19937 rng(3);
        std::normal_distribution<float> nd(0.f, 3.f);
        std::vector<float> logits(size_t(R * V));
        for (float& x : logits) x = nd(rng);
        logits[size_t(1 * V + 10)] = logits[size_t(1 * V + 700)] = 50.f;  // tie: the lowest id wins
        for (int64_t v = 600; v < V; ++v) logits[size_t(2 * V + v)] = -INFINITY;
        const std::vector<double> temps = {0.0, 0.0, 1.0, 0.05, 3.0, 1.0, 0.7, 1.0};
        const std::vector<int32_t> sampled = {0, 0, 1, 1, 1, 0, 1, 1};
        const std::vector<double> uniforms = {0.5, 0.5, 0.999999, 0.3, 0.0, 0.5, 0.61, 0.999999999};
        auto upload = [](const auto& v) {
            auto b = std::make_unique<cuda::DeviceBuffer>(v.size() * sizeof(v[0]));
            b->copy_from_host(v.data(), b->nbytes());
            return b;
        };
        auto d_logits = upload(logits), d_temps = upload(temps), d_sampled = upload(sampled), d_unif = upload(uniforms);
        cuda::DeviceBuffer probs(size_t(R * V) * 4), tokens(size_t(R) * 4), conf(size_t(R) * 4);
        cuda::DeviceBuffer parts(size_t(cuda::draft_sample_parts(R, V)) * 8);
        cuda::draft_sample({.logits = static_cast<const float*>(d_logits->data()), .rows = R, .vocab = V,
                            .temperature = static_cast<const double*>(d_temps->data()),
                            .sampled = static_cast<const int32_t*>(d_sampled->data()),
                            .uniform = static_cast<const double*>(d_unif->data()), .uniform_stride = 1,
                            .parts = static_cast<double*>(parts.data()),
                            .probs = static_cast<float*>(probs.data()),
                            .tokens = static_cast<int32_t*>(tokens.data()), .confidence = static_cast<float*>(conf.data())},
                           cuda::Stream{});
        std::vector<float> got_probs(static_cast<size_t>(R * V)), got_conf(static_cast<size_t>(R));
        std::vector<int32_t> got_tokens(static_cast<size_t>(R));
        probs.copy_to_host(got_probs.data(), probs.nbytes());
        tokens.copy_to_host(got_tokens.data(), tokens.nbytes());
        conf.copy_to_host(got_conf.data(), conf.nbytes());
        for (int64_t r = 0; r < R; ++r) {
            const float* l = logits.data() + r * V;
            std::vector<float> want_probs;
            const bool smp = sampled[size_t(r)] != 0;
            const int32_t want = draw_draft(l, V, temps[size_t(r)], smp ? &uniforms[size_t(r)] : nullptr, want_probs);
            EXPECT_EQ(got_tokens[size_t(r)], want) << "row " << r;
            EXPECT_EQ(got_conf[size_t(r)], draft_confidence_proxy(l, V, want)) << "row " << r;
            if (smp) {
                EXPECT_EQ(std::memcmp(want_probs.data(), got_probs.data() + r * V, size_t(V) * 4), 0) << "row " << r;
            }
        }
        EXPECT_EQ(got_tokens[1], 10);
        EXPECT_LT(got_tokens[2], 600);  // never a -inf id, even at u -> 1
    }
}

// The same sequences on the CPU model and the GPU model, driven in lockstep.
struct Pair {
    std::vector<Sequence> cpu, gpu;
};

class CudaMtp : public ::testing::TestWithParam<Numerics> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        const std::string dir = test::data_path("models/v4_tiny_a_mtp");
        cpu_ = load_v4_model(dir, numerics(GetParam()));
        gpu_ = cuda::load_cuda_model(dir, numerics(GetParam()));
        ASSERT_NE(cpu_->drafter(), nullptr);
        ASSERT_NE(gpu_->drafter(), nullptr);
        EXPECT_EQ(gpu_->drafter()->method(), "mtp");
        EXPECT_EQ(gpu_->drafter()->max_drafts(), cpu_->drafter()->max_drafts());
    }
    // One batched forward of `chunks[i]` for sequence i on both models; logits of every row equal.
    void forward(Pair& p, const std::vector<std::vector<int32_t>>& chunks, bool all_logits) {
        std::vector<SequenceChunk> c, g;
        for (size_t i = 0; i < chunks.size(); ++i) {
            if (chunks[i].empty()) continue;
            c.push_back({&p.cpu[i], chunks[i], all_logits, {}});
            g.push_back({&p.gpu[i], chunks[i], all_logits, {}});
        }
        const auto lc = cpu_->forward_batch(c);
        const auto lg = gpu_->forward_batch(g);
        ASSERT_EQ(lc.size(), lg.size());
        for (size_t i = 0; i < lc.size(); ++i) EXPECT_TRUE(same_bits(lc[i], lg[i])) << "chunk " << i;
    }
    // Drafts on both models for every sequence; tokens, probs and confidences bit-identical. Returns them.
    std::vector<Draft> draft(Pair& p, const std::vector<int32_t>& anchors, const std::vector<int64_t>& counts,
                             const std::vector<double>& temps, const std::vector<std::vector<double>>& uniforms,
                             const std::string& what) {
        std::vector<DraftRequest> rc, rg;
        for (size_t i = 0; i < anchors.size(); ++i) {
            rc.push_back({&p.cpu[i], anchors[i], counts[i], temps[i], uniforms[i]});
            rg.push_back({&p.gpu[i], anchors[i], counts[i], temps[i], uniforms[i]});
        }
        const std::vector<Draft> dc = cpu_->drafter()->draft(rc), dg = gpu_->drafter()->draft(rg);
        EXPECT_EQ(dc.size(), dg.size());
        for (size_t i = 0; i < dc.size() && i < dg.size(); ++i) {
            EXPECT_EQ(dc[i].tokens, dg[i].tokens) << what << " request " << i;
            EXPECT_EQ(int64_t(dg[i].tokens.size()), counts[i]) << what;
            EXPECT_TRUE(same_bits(dc[i].probs, dg[i].probs)) << what << " request " << i << " (probs " << dc[i].probs.size()
                                                             << " vs " << dg[i].probs.size() << ")";
            EXPECT_TRUE(same_bits(dc[i].confidence, dg[i].confidence)) << what << " request " << i;
        }
        return dg;
    }
    std::unique_ptr<Model> cpu_, gpu_;
};

TEST_P(CudaMtp, DraftsEqualTheCpuDrafterThroughPrefillVerifyAndRollback) {
    const int64_t V = cpu_->info().vocab_size;
    std::mt19937 rng(7);
    Pair p;
    for (int i = 0; i < 3; ++i) {
        p.cpu.push_back(cpu_->new_sequence());
        p.gpu.push_back(gpu_->new_sequence());
        cpu_->drafter()->attach(p.cpu.back());
        gpu_->drafter()->attach(p.gpu.back());
    }
    // Prompts of 5, 23 and 70 tokens (the last in chunks of 9, 40 and 21: chunks longer than the tap ring).
    std::vector<std::vector<int32_t>> prompts = {random_tokens(rng, 5, V), random_tokens(rng, 23, V),
                                                 random_tokens(rng, 70, V)};
    forward(p, {prompts[0], prompts[1], {prompts[2].begin(), prompts[2].begin() + 9}}, false);
    forward(p, {{}, {}, {prompts[2].begin() + 9, prompts[2].begin() + 49}}, false);
    forward(p, {{}, {}, {prompts[2].begin() + 49, prompts[2].end()}}, false);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    auto uniforms = [&](int64_t n) {
        std::vector<double> u(static_cast<size_t>(n));
        for (double& x : u) x = u01(rng);
        return u;
    };
    // Rounds of draft -> verify pass over [anchor, drafts] -> rollback to a different accepted count.
    std::vector<int32_t> anchors = random_tokens(rng, 3, V);
    for (int round = 0; round < 4; ++round) {
        const std::vector<int64_t> counts = {5 + round, 2, 16 - 3 * round};
        const std::vector<double> temps = {0.0, 0.8, 1.3};
        const std::vector<std::vector<double>> u = {{}, uniforms(counts[1]), uniforms(counts[2])};
        const std::vector<Draft> d = draft(p, anchors, counts, temps, u, "round " + std::to_string(round));
        std::vector<std::vector<int32_t>> verify;
        for (size_t i = 0; i < 3; ++i) {
            std::vector<int32_t> rows = {anchors[i]};
            rows.insert(rows.end(), d[i].tokens.begin(), d[i].tokens.end());
            verify.push_back(rows);
        }
        forward(p, verify, true);
        // Accept none, some, all (rotating), then a new anchor.
        for (size_t i = 0; i < 3; ++i) {
            const int64_t n = static_cast<int64_t>(verify[i].size()), before = p.cpu[i].num_tokens() - n;
            const int64_t accepted = (int64_t(i) + round) % 3 == 0 ? 0 : (int64_t(i) + round) % 3 == 1 ? n / 2 : n - 1;
            p.cpu[i].truncate(before + 1 + accepted);
            p.gpu[i].truncate(before + 1 + accepted);
            anchors[i] = static_cast<int32_t>(rng() % uint32_t(V));
        }
    }
    // A fork drafts as its original.
    Pair f;
    f.cpu.push_back(p.cpu[1].fork());
    f.gpu.push_back(p.gpu[1].fork());
    draft(f, {anchors[1]}, {4}, {0.9}, {uniforms(4)}, "fork");
}

TEST_P(CudaMtp, AttachAddsTheDrafterStateBytesAndOnlyBeforeTheFirstForward) {
    Sequence s = gpu_->new_sequence();
    const size_t plain = s.state_bytes();
    EXPECT_EQ(plain, gpu_->estimate_state_bytes(0, 16 << 10));  // (pages grow with the tokens: device_sequence_state.h)
    gpu_->drafter()->attach(s);
    const uint64_t extra = gpu_->drafter()->state_bytes(16 << 10);
    EXPECT_GT(extra, 0u);
    EXPECT_EQ(s.state_bytes(), plain + extra);  // what the engine's admission estimate counts
    EXPECT_EQ(s.fork().state_bytes(), plain + extra);
    const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
    gpu_->forward(s, prompt, false);
    Sequence late = gpu_->new_sequence();
    gpu_->forward(late, prompt, false);
    EXPECT_THROW(gpu_->drafter()->attach(late), Error);
    // Drafting needs an attached sequence.
    const DraftRequest r{&late, 2, 3, 0.0, {}};
    EXPECT_THROW(gpu_->drafter()->draft(std::span<const DraftRequest>(&r, 1)), Error);
}

// CUDA graphs with the MTP block (draft_graphs.h, decode_graphs.h): draft calls replay a graph per
// (request bucket, longest chain, sampling), decode and verify steps of at most kGraphChunkRows rows per
// sequence replay their bucket's MTP variant (the block's rows one per pass row, padding rows into the
// padding sequence's window). Drafts, confidences, sampled distributions and every logit equal a model's
// without graphs and the CPU model's bit for bit, through rollbacks, other subsets of requests, other
// chain lengths, a verify pass too long for a graph (eager) and the decode steps between.
TEST_P(CudaMtp, GraphsEqualEagerDraftsAndSteps) {
    ModelOptions no_graphs = numerics(GetParam());
    no_graphs.cuda_graphs = false;
    const std::unique_ptr<Model> eager = cuda::load_cuda_model(test::data_path("models/v4_tiny_a_mtp"), no_graphs);
    const Model* models[3] = {cpu_.get(), gpu_.get(), eager.get()};
    const int64_t V = cpu_->info().vocab_size, N = 5;
    std::mt19937 rng(23);
    std::vector<Sequence> seqs[3];
    for (int64_t i = 0; i < N; ++i) {
        const std::vector<int32_t> prompt = random_tokens(rng, 4 + 7 * i, V);
        for (int m = 0; m < 3; ++m) {
            seqs[m].push_back(models[m]->new_sequence());
            models[m]->drafter()->attach(seqs[m].back());
            models[m]->forward(seqs[m].back(), prompt, false);
        }
    }
    // Every batched forward on the three models: the logits of every row bit-identical.
    auto step = [&](const std::vector<int64_t>& ids, const std::vector<std::vector<int32_t>>& rows, bool all,
                    const std::string& what) {
        std::vector<float> logits[3];
        for (int m = 0; m < 3; ++m) {
            std::vector<SequenceChunk> chunks;
            for (size_t k = 0; k < ids.size(); ++k) chunks.push_back({&seqs[m][size_t(ids[k])], rows[k], all, {}});
            for (const auto& l : models[m]->forward_batch(chunks)) logits[m].insert(logits[m].end(), l.begin(), l.end());
        }
        EXPECT_FALSE(logits[0].empty()) << what;
        EXPECT_TRUE(same_bits(logits[1], logits[2])) << what;
        EXPECT_TRUE(same_bits(logits[1], logits[0])) << what;
    };
    const auto before = cuda::cuda_model_stats(*gpu_);
    std::vector<int32_t> anchors = random_tokens(rng, N, V);
    const int64_t sizes[] = {1, 2, 3, 5, 4, 5, 2, 5};
    int64_t graph_steps = 0, rounds = 0;
    for (int round = 0; round < 8; ++round, ++rounds) {
        const bool sampled = round == 3 || round == 6;
        std::vector<int64_t> ids, counts;
        for (int64_t j = 0; j < sizes[round]; ++j) {
            ids.push_back((round + j) % N);
            counts.push_back(round == 5 && j == 1 ? 12 : 1 + (ids.back() + round) % 7);  // 12: a 13-row verify pass
        }
        std::vector<double> u;  // the sampled request's uniforms (DraftRequest holds a span)
        for (int64_t k = 0; sampled && k < counts[0]; ++k) u.push_back(0.05 + 0.13 * double(k));
        std::vector<Draft> d[3];
        for (int m = 0; m < 3; ++m) {
            std::vector<DraftRequest> reqs;
            for (size_t k = 0; k < ids.size(); ++k) {
                const bool smp = sampled && k == 0;
                reqs.push_back({&seqs[m][size_t(ids[k])], anchors[size_t(ids[k])], counts[k], smp ? 0.9 : 0.0,
                                smp ? std::span<const double>(u) : std::span<const double>()});
            }
            d[m] = models[m]->drafter()->draft(reqs);
        }
        const std::string what = "round " + std::to_string(round);
        for (size_t k = 0; k < ids.size(); ++k) {
            EXPECT_EQ(int64_t(d[1][k].tokens.size()), counts[k]) << what;
            for (int m : {0, 2}) {
                EXPECT_EQ(d[1][k].tokens, d[m][k].tokens) << what << " request " << ids[k] << " model " << m;
                EXPECT_TRUE(same_bits(d[1][k].confidence, d[m][k].confidence)) << what << " request " << ids[k];
                EXPECT_TRUE(same_bits(d[1][k].probs, d[m][k].probs)) << what << " request " << ids[k];
            }
            EXPECT_EQ(d[1][k].probs.empty(), !(sampled && k == 0)) << what;
        }
        // The verify pass over [anchor, drafts], then keep none, some or all of each chain (rotating).
        std::vector<std::vector<int32_t>> rows;
        int64_t longest = 0;
        for (size_t k = 0; k < ids.size(); ++k) {
            rows.push_back({anchors[size_t(ids[k])]});
            rows.back().insert(rows.back().end(), d[0][k].tokens.begin(), d[0][k].tokens.end());
            longest = std::max<int64_t>(longest, int64_t(rows.back().size()));
        }
        step(ids, rows, true, what + " verify");
        graph_steps += longest <= 8 ? 1 : 0;
        for (size_t k = 0; k < ids.size(); ++k) {
            const int64_t n = int64_t(rows[k].size()), i = ids[k];
            const int64_t keep = (i + round) % 3 == 0 ? 1 : (i + round) % 3 == 1 ? (n + 1) / 2 : n;
            for (int m = 0; m < 3; ++m) seqs[m][size_t(i)].truncate(seqs[m][size_t(i)].num_tokens() - n + keep);
        }
        // A decode step of every sequence, then new anchors.
        std::vector<int64_t> all(static_cast<size_t>(N));
        std::iota(all.begin(), all.end(), 0);
        std::vector<std::vector<int32_t>> one;
        for (int64_t i = 0; i < N; ++i) one.push_back(random_tokens(rng, 1, V));
        step(all, one, false, what + " decode");
        ++graph_steps;
        anchors = random_tokens(rng, N, V);
    }
    const auto after = cuda::cuda_model_stats(*gpu_);
    EXPECT_EQ(after.draft_graph_replays - before.draft_graph_replays, rounds);  // every draft call
    EXPECT_EQ(after.graph_replays - before.graph_replays, graph_steps);  // (a capture is replayed too)
    EXPECT_EQ(graph_steps, 15);  // the 13-row verify pass ran eagerly
    const auto e = cuda::cuda_model_stats(*eager);
    EXPECT_EQ(e.graph_replays + e.graph_captures + e.draft_graph_replays + e.draft_graph_captures, 0);
    EXPECT_LE(after.workspace_high_water, after.workspace_bytes);
}

// The sampled drafts' distributions the drafter keeps on the device (Draft::device_probs, draft_device_probs.h):
// in graph calls (buckets 1, 2, 4, 8: padding slots) and eager calls, with host_probs on, off and mixed,
// the device rows equal the host probs bit for bit and the drafts do not change.
TEST_P(CudaMtp, DeviceProbsEqualTheHostProbs) {
    ModelOptions no_graphs = numerics(GetParam());
    no_graphs.cuda_graphs = false;
    const std::unique_ptr<Model> eager = cuda::load_cuda_model(test::data_path("models/v4_tiny_a_mtp"), no_graphs);
    const Model* models[2] = {gpu_.get(), eager.get()};
    const int64_t V = cpu_->info().vocab_size, N = 6;
    std::mt19937 rng(31);
    std::vector<Sequence> seqs[2];
    for (int64_t i = 0; i < N; ++i) {
        const std::vector<int32_t> prompt = random_tokens(rng, 4 + 7 * i, V);
        for (int m = 0; m < 2; ++m) {
            seqs[m].push_back(models[m]->new_sequence());
            models[m]->drafter()->attach(seqs[m].back());
            models[m]->forward(seqs[m].back(), prompt, false);
        }
    }
    test::check_device_probs(*gpu_, seqs[0], true, 5, "graphs");
    test::check_device_probs(*eager, seqs[1], false, 5, "eager");
    const auto st = cuda::cuda_model_stats(*gpu_);
    EXPECT_LE(st.workspace_high_water, st.workspace_bytes);
}

INSTANTIATE_TEST_SUITE_P(CudaMtp, CudaMtp, ::testing::Values(Numerics::kExact, Numerics::kOfficial),
                         [](const ::testing::TestParamInfo<Numerics>& p) { return std::string(numerics_name(p.param)); });

// ---- The engine on the GPU with MTP speculation ---------------------------------------------------

class CudaMtpEngine : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        const std::string dir = test::data_path("models/v4_tiny_a_mtp");
        cpu_ = std::shared_ptr<const Model>(load_v4_model(dir, numerics(Numerics::kExact)));
        gpu_ = std::shared_ptr<const Model>(cuda::load_cuda_model(dir, numerics(Numerics::kExact)));
    }
    static EngineConfig spec(int64_t k, bool scheduler, bool async) {
        EngineConfig c;
        c.speculative_method = "mtp";
        c.num_speculative_tokens = k;
        c.speculative_scheduler = scheduler;
        c.async_scheduling = async;
        c.max_prefill_chunk = 32;
        return c;
    }
    std::shared_ptr<const Model> cpu_, gpu_;
};

TEST_F(CudaMtpEngine, GreedyIsTokenIdenticalToNoSpeculation) {
    const int64_t V = gpu_->info().vocab_size;
    std::mt19937 rng(21);
    test::Requests reqs;
    for (int i = 0; i < 6; ++i) {
        SamplingParams sp = test::greedy(10 + 3 * i);
        if (i == 2) sp.repetition_penalty = 1.3;  // penalties count the accepted drafts of a step
        reqs.emplace_back("g" + std::to_string(i), random_tokens(rng, 3 + int64_t(rng() % 60), V), sp);
    }
    SamplingParams hot;  // a sampled neighbour
    hot.temperature = 1.0;
    hot.max_tokens = 9;
    hot.ignore_eos = true;
    hot.seed = 3;
    reqs.emplace_back("hot", random_tokens(rng, 17, V), hot);
    const test::RunResult plain = test::run(gpu_, {}, reqs);
    const test::RunResult cpu_plain = test::run(cpu_, {}, reqs);
    for (const auto& [id, prompt, sp] : reqs)
        EXPECT_EQ(plain.outputs.at(id).completions.at(0).token_ids, cpu_plain.outputs.at(id).completions.at(0).token_ids) << id;
    for (int64_t k : {1, 3, 7}) {
        for (bool sched : {false, true}) {
            for (bool async : {false, true}) {
                for (size_t batch : {size_t{1}, reqs.size()}) {
                    const test::Requests sub(reqs.begin(), reqs.begin() + std::ptrdiff_t(batch));
                    const test::RunResult r = test::run(gpu_, spec(k, sched, async), sub);
                    const std::string what = "k=" + std::to_string(k) + " scheduler=" + std::to_string(sched) +
                                             " async=" + std::to_string(async) + " batch=" + std::to_string(batch);
                    for (const auto& [id, prompt, sp] : sub) {
                        if (sp.temperature > 0) continue;
                        EXPECT_EQ(plain.outputs.at(id).completions.at(0).token_ids,
                                  r.outputs.at(id).completions.at(0).token_ids)
                            << what << " " << id;
                    }
                    if (!sched) {
                        EXPECT_GT(r.metrics.spec_draft_tokens, 0) << what;
                    }
                }
            }
        }
    }
}

TEST_F(CudaMtpEngine, WholeBlocksAcceptedOrRejectedRollBackTheDeviceState) {
    // Drafts from a table of the target's own greedy output (all accepted) or off by one (all
    // rejected); the long prompt crosses ratio-4 and ratio-128 group boundaries inside verify passes.
    const int64_t V = gpu_->info().vocab_size;
    std::mt19937 rng(5);
    const test::Requests reqs = {{"short", random_tokens(rng, 6, V), test::greedy(20)},
                                 {"long", random_tokens(rng, 150, V), test::greedy(24)}};
    const test::RunResult plain = test::run(gpu_, {}, reqs);
    std::map<int64_t, int32_t> table;
    for (const auto& [id, prompt, sp] : reqs) {
        const auto& toks = plain.outputs.at(id).completions.at(0).token_ids;
        for (size_t i = 0; i < toks.size(); ++i) table[static_cast<int64_t>(prompt.size() + i)] = toks[i];
    }
    for (bool corrupt : {false, true}) {
        for (int64_t k : {1, 3, 8}) {
            auto drafter = std::make_shared<test::TableDrafter>(table, V, corrupt);
            const test::RunResult r = test::run(gpu_, spec(k, false, false), reqs, drafter);
            for (const auto& [id, prompt, sp] : reqs)
                EXPECT_EQ(plain.outputs.at(id).completions.at(0).token_ids, r.outputs.at(id).completions.at(0).token_ids)
                    << "corrupt=" << corrupt << " k=" << k << " " << id;
            if (corrupt) {
                EXPECT_EQ(r.metrics.spec_accepted_tokens, 0);
            } else {
                EXPECT_EQ(r.metrics.spec_accepted_tokens, r.metrics.spec_draft_tokens);
                EXPECT_LT(r.metrics.steps, plain.metrics.steps);
            }
        }
    }
}

TEST_F(CudaMtpEngine, SampledOutputEqualsTheCpuEnginesSpeculativeRun) {
    const int64_t V = gpu_->info().vocab_size;
    std::mt19937 rng(9);
    test::Requests reqs;
    for (int i = 0; i < 8; ++i) {
        SamplingParams sp;
        sp.temperature = i % 2 ? 0.7 : 1.2;
        if (i == 3) sp.top_k = 20;
        if (i == 5) sp.top_p = 0.9;
        if (i == 1) sp.min_p = 0.05;  // (min-p alone, and with top-p below: verified on the device too)
        if (i == 4) {
            sp.top_p = 0.8;
            sp.min_p = 0.02;
        }
        sp.max_tokens = 12 + i;
        sp.ignore_eos = true;
        sp.seed = uint64_t(100 + i);
        reqs.emplace_back("s" + std::to_string(i), random_tokens(rng, 4 + int64_t(rng() % 30), V), sp);
    }
    // The GPU engine verifies every request's rows on the device (the drafts' distributions read where the
    // drafter left them): untruncated, top-k, and top-p / min-p ones (the nucleus kernel; the fixture's
    // vocabulary is sorted whole, so no row is given up to the host).
    for (bool sample_drafts : {true, false}) {
        for (int64_t k : {2, 5}) {
            for (bool async : {false, true}) {
                EngineConfig c = spec(k, false, async);  // (the scheduler's budgets follow timings)
                c.speculative_sample_drafts = sample_drafts;
                const std::string what = "sampled drafts " + std::to_string(sample_drafts) + " k=" + std::to_string(k) +
                                         " async=" + std::to_string(async);
                test::expect_same_run_verified_on_device(test::run(cpu_, c, reqs), test::run(gpu_, c, reqs), reqs, what);
            }
        }
    }
}

}  // namespace
}  // namespace deepinfer
