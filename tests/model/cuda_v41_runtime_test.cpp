// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4.1 CUDA model as an engine runtime, as cuda_runtime_test.cpp checks the V4 one:
// the workspace sized at load from the engine's limits and never exceeded (high-water mark <= the
// bound of the forwards that ran, over prefill, mixed and decode steps, graph and eager); sampling
// on the device token-identical to the engine's host sampler (greedy, temperature, top-k/top-p/min-p,
// n > 1, with the host fallback for the rest); CUDA graphs of decode steps (Engram's side stream
// captured as a branch of the graph) bit-identical to launching the kernels one by one over a decode
// script whose batch changes size every step; no device allocation in decode steps. On the
// transformers-made fixtures v41_tiny_a / v41_tiny_b (ratio-2 and ratio-1 KV sources, a candidate
// stage, Engram at two layers) in exact and official numerics. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/bf16_key_plan.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "backends/cuda/model/decode_graphs.h"
#include "deepinfer/model.h"
#include "deepinfer/model_v41.h"
#include "model/cuda_engine_mix.h"
#include "model/v41_test_options.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using test::random_tokens;

struct Case {
    const char* model;  // a tests/data/v41 fixture
    Numerics numerics;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << numerics_name(c.numerics); }

class CudaV41Runtime : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        dir_ = test::data_path(std::string("v41/") + GetParam().model);
    }
    std::unique_ptr<Model> load(bool graphs, int64_t max_tokens = 2048, int64_t max_seqs = 256, int64_t max_len = 0) const {
        ModelOptions o = test::v41_options(GetParam().numerics, graphs);
        o.max_batch_tokens = max_tokens;
        o.max_num_seqs = max_seqs;
        cuda::CudaModelOptions co;
        co.max_model_len = max_len;
        return cuda::load_cuda_v41_model(dir_, o, co);
    }
    std::string name() const { return std::string(GetParam().model) + "/" + std::string(numerics_name(GetParam().numerics)); }
    std::string dir_;
};

// The engine with device sampling gives the CPU engine's tokens and logprobs (synchronous and
// asynchronous), the device really drew the plain requests' tokens, and host sampling on the GPU
// model gives them too.
TEST_P(CudaV41Runtime, DeviceSamplingEqualsHostSampling) {
    std::shared_ptr<const Model> cpu = V41Model::load(dir_, test::v41_options(GetParam().numerics, false));
    std::shared_ptr<const Model> gpu = load(true);
    const test::EngineRun ref = test::run_engine(cpu, false, true);
    EXPECT_EQ(ref.metrics.device_sampled_tokens, 0);
    for (bool async : {false, true}) {
        const test::EngineRun got = test::run_engine(gpu, async, true);
        EXPECT_EQ(got.tokens, ref.tokens) << name() << " async " << async;
        EXPECT_EQ(got.logprobs, ref.logprobs) << name() << " async " << async;
        EXPECT_EQ(got.metrics.device_sampled_tokens, test::kDeviceDrawnCompletions * 14) << name() << " async " << async;
    }
    const test::EngineRun host = test::run_engine(gpu, true, false);
    EXPECT_EQ(host.tokens, ref.tokens) << name();
    EXPECT_EQ(host.metrics.device_sampled_tokens, 0);
    EXPECT_GT(cuda::cuda_model_stats(*gpu).device_draws, 0);
}

// A decode script over 7 sequences whose batch changes every step (sizes 1..7, different members and
// orders, so graph buckets 1/2/4/8 and context buckets 256/512 are all visited): logits and device
// draws of graph replays equal eager launches bit for bit; every step replayed a graph, each bucket
// captured once; the steps allocated no device memory.
TEST_P(CudaV41Runtime, GraphDecodeBitIdenticalToEager) {
    auto graphed = load(true), eager = load(false);
    const int64_t V = graphed->info().vocab_size;
    std::mt19937 rng(9);
    const int64_t pool = 7;
    std::vector<Sequence> gs, es;
    std::vector<SequenceChunk> gc, ec;
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < pool; ++i) {
        prompts.push_back(random_tokens(rng, 1 + int64_t(rng() % 40) + (i == 3 ? 250 : 0), V));  // one crosses 256
        gs.push_back(graphed->new_sequence());
        es.push_back(eager->new_sequence());
    }
    for (int64_t i = 0; i < pool; ++i) {
        gc.push_back({&gs[size_t(i)], prompts[size_t(i)], false, {}});
        ec.push_back({&es[size_t(i)], prompts[size_t(i)], false, {}});
    }
    ASSERT_EQ(graphed->forward_batch(gc), eager->forward_batch(ec)) << name();  // prefill: eager on both
    const auto before = cuda::cuda_model_stats(*graphed);
    const int steps = 40;
    uint64_t allocations = 0;
    for (int step = 0; step < steps; ++step) {
        if (step == 12) allocations = cuda::device_allocation_count();  // every bucket met by now
        std::vector<int64_t> members(static_cast<size_t>(pool));
        for (int64_t i = 0; i < pool; ++i) members[size_t(i)] = i;
        std::shuffle(members.begin(), members.end(), rng);
        members.resize(size_t(1 + step % pool));
        std::vector<int32_t> next(members.size());
        std::vector<DeviceDraw> draws;
        gc.clear();
        ec.clear();
        for (size_t k = 0; k < members.size(); ++k) {
            const size_t i = size_t(members[k]);
            next[k] = static_cast<int32_t>(rng() % uint32_t(V));
            gc.push_back({&gs[i], std::span<const int32_t>(&next[k], 1), false, {}});
            ec.push_back({&es[i], std::span<const int32_t>(&next[k], 1), false, {}});
            draws.push_back({.chunk = int32_t(k), .seed = uint64_t(i), .stream = 0, .counter = uint64_t(step),
                             .temperature = k % 2 ? 0.8 : 0.0, .top_k = k % 3 == 2 ? 20 : 0});
        }
        std::vector<uint8_t> want(members.size(), 1);
        if (step % 3 == 1) want[0] = 0;  // a chunk that only draws
        const ForwardOutputs a = graphed->forward_sampled(gc, want, draws);
        const ForwardOutputs b = eager->forward_sampled(ec, want, draws);
        ASSERT_EQ(a.logits, b.logits) << name() << " step " << step << " batch " << members.size();
        ASSERT_EQ(a.tokens, b.tokens) << name() << " step " << step;
    }
    EXPECT_EQ(cuda::device_allocation_count(), allocations) << name() << ": decode steps allocated device memory";
    const auto after = cuda::cuda_model_stats(*graphed);
    EXPECT_EQ(after.graph_replays - before.graph_replays, steps) << name();
    EXPECT_GE(after.graph_captures, 4);   // buckets 1, 2, 4, 8 at least
    EXPECT_LE(after.graph_captures, 8);   // ... in at most two context buckets
    EXPECT_EQ(cuda::cuda_model_stats(*eager).graph_replays, 0);
    std::printf("[cuda-v41-graphs] %s: %d decode steps, %lld captures, %lld replays, bit-identical to eager\n",
                name().c_str(), steps, static_cast<long long>(after.graph_captures),
                static_cast<long long>(after.graph_replays - before.graph_replays));
    // A 33-token prefill runs eagerly (a chunk longer than kGraphChunkRows); a step of one chunk that
    // wants all its logits replays a graph (a step of short chunks, as verify rows); both agree.
    Sequence g1 = graphed->new_sequence(), e1 = eager->new_sequence();
    const auto p = random_tokens(rng, 33, V);
    EXPECT_EQ(graphed->forward(g1, p, true), eager->forward(e1, p, true));
    EXPECT_EQ(cuda::cuda_model_stats(*graphed).graph_replays, after.graph_replays);
    const int32_t t = 5;
    EXPECT_EQ(graphed->forward(g1, std::span<const int32_t>(&t, 1), true), eager->forward(e1, std::span<const int32_t>(&t, 1), true));
    EXPECT_EQ(cuda::cuda_model_stats(*graphed).graph_replays, after.graph_replays + 1);
}

// The workspace sized at load from the limits (96 tokens, 4 sequences, 640 positions) is exactly the
// bound of the largest forward they allow, and forwards of every kind (chunked prefill, mixed, all
// logits, decode graph and eager steps with draws, the largest one) stay below the bound of their
// own shapes: the arena's high-water mark never exceeds the largest bound of the forwards run.
TEST_P(CudaV41Runtime, WorkspaceSizedFromLimitsAndNeverExceeded) {
    for (bool graphs : {true, false}) {
        auto model = load(graphs, 96, 4, 640);
        const int64_t V = model->info().vocab_size;
        const auto st0 = cuda::cuda_model_stats(*model);
        EXPECT_EQ(st0.workspace_bytes, st0.workspace_need_max);
        EXPECT_EQ(st0.workspace_high_water, 0u);
        std::mt19937 rng(4);
        std::vector<Sequence> seqs;
        for (int i = 0; i < 4; ++i) seqs.push_back(model->new_sequence());
        size_t max_bound = 0;
        auto run = [&](const std::vector<std::vector<int32_t>>& toks, std::vector<int> members, bool all_logits,
                       bool with_draws) {
            std::vector<SequenceChunk> chunks;
            std::vector<DeviceDraw> draws;
            int64_t rows = 0, logit_rows = 0, positions = 0;
            bool decode = true, short_chunks = true;
            for (size_t k = 0; k < members.size(); ++k) {
                Sequence& s = seqs[size_t(members[k])];
                chunks.push_back({&s, toks[k], all_logits, {}});
                rows += int64_t(toks[k].size());
                logit_rows += all_logits ? int64_t(toks[k].size()) : 1;
                positions = std::max(positions, s.num_tokens() + int64_t(toks[k].size()));
                decode = decode && toks[k].size() == 1 && !all_logits;
                short_chunks = short_chunks && int64_t(toks[k].size()) <= cuda::kGraphChunkRows;
                if (with_draws) draws.push_back({.chunk = int32_t(k), .seed = 1, .counter = uint64_t(rows), .temperature = 0.9, .top_k = 30});
            }
            int64_t n = int64_t(members.size());
            if (graphs && (decode || short_chunks)) {  // a graph step (decode rows, or chunks of verify-sized
                                                       // rows): padded one-row segments and the context bucket
                rows = logit_rows = n = cuda::graph_bucket(rows);
                positions = cuda::context_bucket(positions, cuda::cuda_model_max_len(*model));
            }
            const ForwardOutputs out = model->forward_sampled(chunks, {}, draws);
            ASSERT_EQ(out.tokens.size(), draws.size());
            max_bound = std::max(max_bound, cuda::cuda_workspace_bound(*model, rows, n, logit_rows, positions,
                                                                       int64_t(draws.size())));
            const auto st = cuda::cuda_model_stats(*model);
            ASSERT_LE(st.workspace_high_water, max_bound) << name() << " graphs " << graphs << " rows " << rows;
            ASSERT_LE(max_bound, st.workspace_bytes);
        };
        auto tokens = [&](std::vector<int64_t> sizes) {
            std::vector<std::vector<int32_t>> t;
            for (int64_t n : sizes) t.push_back(random_tokens(rng, n, V));
            return t;
        };
        run(tokens({5}), {0}, false, false);                          // a small prefill
        run(tokens({17, 30, 1}), {1, 2, 0}, true, true);              // mixed, all logits, draws
        for (int step = 0; step < 6; ++step) run(tokens({1, 1, 1}), {0, 1, 2}, false, true);  // decode (bucket 4)
        run(tokens({1}), {3}, false, true);                           // decode alone (bucket 1)
        for (int64_t done = 40; done < 528; done += 24) run(tokens({24, 24, 24, 24}), {0, 1, 2, 3}, false, false);
        for (int step = 0; step < 3; ++step) run(tokens({1, 1, 1, 1}), {0, 1, 2, 3}, false, true);  // context bucket capped at 640
        run(tokens({24, 24, 24, 24}), {0, 1, 2, 3}, true, true);      // the largest: 96 logits rows, 4 draws
        const auto st = cuda::cuda_model_stats(*model);
        std::printf("[cuda-v41-workspace] %s graphs %d: capacity %zu (bound at the limits), high water %zu, largest bound of the forwards run %zu\n",
                    name().c_str(), int(graphs), st.workspace_bytes, st.workspace_high_water, max_bound);
        EXPECT_GT(st.workspace_high_water, 0u);
        EXPECT_GT(double(st.workspace_high_water), 0.1 * double(max_bound)) << "the bound is loose";
    }
}

// Which segments get pre-decoded keys (bf16_key_plan.h): host code, no GPU needed.
TEST(CudaV41Bf16Keys, PlanTakesSegmentsThatPayWithinTheBudget) {
    using cuda::Bf16KeySegment;
    const int64_t W = 128, K = 512, S = 9000;
    // A decode row; an 8192-row prompt from 0 (2,048 entries); a 64-row chunk at 5,000 (1,266 entries, 127 ring rows);
    // the same with a bounded-replay floor at 4,950; a 16-row chunk at 100,000 whose 25,004 entries cost more than its
    // rows' 16 x 640 keys; a 20-row window-only chunk at 40 (39 ring rows).
    const std::vector<Bf16KeySegment> segs = {{4000, 1, 0, 1000}, {0, 8192, 0, 2048},   {5000, 64, 0, 1266},
                                              {5000, 64, 4950, 1266}, {100000, 16, 0, 25004}, {40, 20, 0, 0}};
    const auto plan = cuda::plan_bf16_keys(segs, S, W, K, 1 << 20);
    ASSERT_EQ(plan.keys.size(), segs.size());
    EXPECT_LT(plan.keys[0].ring_row, 0) << "one row: decoded in place";
    EXPECT_LT(plan.keys[4].ring_row, 0) << "its entries cost more than its rows' keys";
    const cuda::SinkBf16Keys& a = plan.keys[1];
    EXPECT_EQ(a.ring_row, S);
    EXPECT_EQ(a.ring_n, 0);
    EXPECT_EQ(a.entry_row, S);
    EXPECT_EQ(a.entries, 2048);
    const cuda::SinkBf16Keys& b = plan.keys[2];
    EXPECT_EQ(b.ring_lo, 5000 - W + 1);
    EXPECT_EQ(b.ring_n, W - 1);
    EXPECT_EQ(b.ring_row, S + 2048);
    EXPECT_EQ(b.entry_row, S + 2048 + W - 1);
    EXPECT_EQ(b.entries, 1266);
    const cuda::SinkBf16Keys& c = plan.keys[3];
    EXPECT_EQ(c.ring_lo, 4950);
    EXPECT_EQ(c.ring_n, 50);
    EXPECT_EQ(c.ring_row, b.entry_row + 1266);
    const cuda::SinkBf16Keys& d = plan.keys[5];
    EXPECT_EQ(d.ring_lo, 0);
    EXPECT_EQ(d.ring_n, 40);
    EXPECT_EQ(d.entries, 0);
    EXPECT_EQ(d.ring_row, c.entry_row + 1266);
    EXPECT_EQ(plan.key_rows, d.ring_row + 40);
    EXPECT_EQ(plan.max_rows, 2048);
    EXPECT_TRUE(plan.any());

    // A budget that holds the prompt's 2,048 rows and the window-only chunk's 39 but not a 64-row chunk's 1,393:
    // later segments that fit are still taken.
    const auto tight = cuda::plan_bf16_keys(segs, S, W, K, 2048 + 40);
    EXPECT_GE(tight.keys[1].ring_row, 0);
    EXPECT_LT(tight.keys[2].ring_row, 0);
    EXPECT_LT(tight.keys[3].ring_row, 0);
    EXPECT_EQ(tight.keys[5].ring_row, S + 2048);
    EXPECT_EQ(tight.key_rows, S + 2048 + 40);

    const auto off = cuda::plan_bf16_keys(segs, S, W, K, 0);
    EXPECT_FALSE(off.any());
    EXPECT_EQ(off.key_rows, 0);
    for (const auto& k : off.keys) EXPECT_LT(k.ring_row, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaV41Runtime,
                         ::testing::Values(Case{"v41_tiny_a", Numerics::kExact}, Case{"v41_tiny_b", Numerics::kExact},
                                           Case{"v41_tiny_a", Numerics::kOfficial}, Case{"v41_tiny_b", Numerics::kOfficial}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.model) + "_" +
                                    std::string(numerics_name(param_info.param.numerics));
                         });

}  // namespace
}  // namespace deepinfer
