// SPDX-License-Identifier: Apache-2.0
// The CUDA model as an engine runtime: sampling on the device (token-identical to the engine's host
// sampler, with the per-request fallback to host logits), CUDA graphs for decode steps (bit-identical
// to launching the kernels one by one), no device allocation in a decode step, and the workspace
// sized at load from the engine's limits. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/synthetic.h"
#include "model/forward.h"
#include "model/cuda_engine_mix.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using test::EngineRun;
using test::random_tokens;
using test::run_engine;

ModelOptions options(Numerics n, bool graphs) {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = n;
    o.cuda_graphs = graphs;
    return o;
}

class CudaRuntime : public ::testing::TestWithParam<Numerics> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        dir_ = test::data_path("models/v4_tiny_a");
    }
    std::string dir_;
};

// The engine with device sampling produces the CPU engine's tokens and logprobs, synchronous and
// asynchronous, and the device really drew the plain requests' tokens.
TEST_P(CudaRuntime, DeviceSamplingEqualsHostSampling) {
    std::shared_ptr<const Model> cpu = load_v4_model(dir_, options(GetParam(), false));
    std::shared_ptr<const Model> gpu = cuda::load_cuda_model(dir_, options(GetParam(), true));
    const EngineRun ref = run_engine(cpu, false, true);
    EXPECT_EQ(ref.metrics.device_sampled_tokens, 0);  // a CPU model never samples on a device
    for (bool async : {false, true}) {
        const EngineRun got = run_engine(gpu, async, true);
        EXPECT_EQ(got.tokens, ref.tokens) << "async " << async;
        EXPECT_EQ(got.logprobs, ref.logprobs) << "async " << async;
        EXPECT_EQ(got.metrics.generated_tokens, ref.metrics.generated_tokens);
        // 10 plain requests (13 completions) x 14 tokens drawn on the device; the rest on the host.
        EXPECT_EQ(got.metrics.device_sampled_tokens, test::kDeviceDrawnCompletions * 14) << "async " << async;
    }
    const EngineRun host = run_engine(gpu, true, false);
    EXPECT_EQ(host.tokens, ref.tokens);
    EXPECT_EQ(host.metrics.device_sampled_tokens, 0);
}

// Decode steps replayed from CUDA graphs (padded batch buckets) give the same logits and device
// draws bit for bit as the eager path, across batch sizes, context buckets and compression windows.
TEST_P(CudaRuntime, GraphDecodeBitIdenticalToEager) {
    auto graphed = cuda::load_cuda_model(dir_, options(GetParam(), true));
    auto eager = cuda::load_cuda_model(dir_, options(GetParam(), false));
    const int64_t V = graphed->info().vocab_size;
    std::mt19937 rng(9);
    for (int64_t batch : {1, 3, 5, 17}) {
        std::vector<Sequence> gs, es;
        std::vector<SequenceChunk> gc, ec;
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t i = 0; i < batch; ++i) prompts.push_back(random_tokens(rng, 20 + int64_t(rng() % 280), V));
        for (int64_t i = 0; i < batch; ++i) {
            gs.push_back(graphed->new_sequence());
            es.push_back(eager->new_sequence());
        }
        for (int64_t i = 0; i < batch; ++i) {
            gc.push_back({&gs[size_t(i)], prompts[size_t(i)], false});
            ec.push_back({&es[size_t(i)], prompts[size_t(i)], false});
        }
        ASSERT_EQ(graphed->forward_batch(gc), eager->forward_batch(ec));  // prefill: eager on both
        const auto before = cuda::cuda_model_stats(*graphed);
        std::vector<int32_t> next(static_cast<size_t>(batch));
        for (int step = 0; step < 12; ++step) {
            for (int64_t i = 0; i < batch; ++i) next[size_t(i)] = static_cast<int32_t>(rng() % uint32_t(V));
            std::vector<DeviceDraw> draws;
            for (int64_t i = 0; i < batch; ++i)
                draws.push_back({.chunk = int32_t(i), .seed = uint64_t(i), .stream = 0, .counter = uint64_t(step),
                                 .temperature = i % 2 ? 0.8 : 0.0, .top_k = i % 3 == 2 ? 20 : 0});
            std::vector<uint8_t> want(static_cast<size_t>(batch), 1);
            for (int64_t i = 0; i < batch; ++i) {
                gc[size_t(i)] = {&gs[size_t(i)], std::span<const int32_t>(&next[size_t(i)], 1), false};
                ec[size_t(i)] = {&es[size_t(i)], std::span<const int32_t>(&next[size_t(i)], 1), false};
            }
            const ForwardOutputs a = graphed->forward_sampled(gc, want, draws);
            const ForwardOutputs b = eager->forward_sampled(ec, want, draws);
            ASSERT_EQ(a.logits, b.logits) << "batch " << batch << " step " << step;
            ASSERT_EQ(a.tokens, b.tokens) << "batch " << batch << " step " << step;
        }
        const auto after = cuda::cuda_model_stats(*graphed);
        EXPECT_EQ(after.graph_replays - before.graph_replays, 12) << "batch " << batch;
        EXPECT_EQ(cuda::cuda_model_stats(*eager).graph_replays, 0);
    }
    // A 33-token prefill runs eagerly (a chunk longer than kGraphChunkRows); a step of one chunk that
    // wants all its logits replays a graph (the short-chunk variant, as verify rows); both agree.
    const auto st = cuda::cuda_model_stats(*graphed);
    Sequence g1 = graphed->new_sequence(), e1 = eager->new_sequence();
    const auto p = random_tokens(rng, 33, V);
    EXPECT_EQ(graphed->forward(g1, p, true), eager->forward(e1, p, true));
    EXPECT_EQ(cuda::cuda_model_stats(*graphed).graph_replays, st.graph_replays);
    const int32_t t = 5;
    EXPECT_EQ(graphed->forward(g1, std::span<const int32_t>(&t, 1), true), eager->forward(e1, std::span<const int32_t>(&t, 1), true));
    EXPECT_EQ(cuda::cuda_model_stats(*graphed).graph_replays, st.graph_replays + 1);
}

// Decode steps (graph replays and eager launches) never allocate device memory.
TEST_P(CudaRuntime, DecodeStepsAllocateNothing) {
    for (bool graphs : {true, false}) {
        auto model = cuda::load_cuda_model(dir_, options(GetParam(), graphs));
        const int64_t V = model->info().vocab_size;
        std::mt19937 rng(2);
        std::vector<Sequence> seqs;
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < 6; ++i) {
            seqs.push_back(model->new_sequence());
            prompts.push_back(random_tokens(rng, 10 + i * 13, V));
        }
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i < 6; ++i) chunks.push_back({&seqs[size_t(i)], prompts[size_t(i)], false});
        model->forward_batch(chunks);
        std::vector<int32_t> next(6, 1);
        auto decode = [&] {
            std::vector<DeviceDraw> draws;
            for (int i = 0; i < 6; ++i) {
                chunks[size_t(i)] = {&seqs[size_t(i)], std::span<const int32_t>(&next[size_t(i)], 1), false};
                draws.push_back({.chunk = i, .seed = 3, .stream = uint64_t(i), .counter = 0, .temperature = 0.7});
            }
            const std::vector<uint8_t> want(6, 0);
            next = model->forward_sampled(chunks, want, draws).tokens;
        };
        decode();  // first step of this bucket: captures the graph
        const uint64_t allocations = cuda::device_allocation_count();
        for (int step = 0; step < 10; ++step) decode();
        EXPECT_EQ(cuda::device_allocation_count(), allocations) << "graphs " << graphs;
        const auto st = cuda::cuda_model_stats(*model);
        EXPECT_EQ(st.graph_replays, graphs ? 11 : 0);
        EXPECT_GT(st.gpu_seconds, 0.0);
        EXPECT_GE(st.gap_seconds, 0.0);
    }
}

// The workspace sized at load from the limits holds the largest forward they allow (every row a
// logits row, sequences near max_model_len, a full group of device draws), and the bound covers
// what forwards really take.
TEST_P(CudaRuntime, WorkspaceSizedFromLimits) {
    ModelOptions o = options(GetParam(), true);
    o.max_batch_tokens = 96;
    o.max_num_seqs = 4;
    cuda::CudaModelOptions co;
    co.max_model_len = 640;
    auto model = cuda::load_cuda_model(dir_, o, co);
    const int64_t V = model->info().vocab_size;
    const auto st0 = cuda::cuda_model_stats(*model);
    EXPECT_EQ(st0.workspace_bytes, st0.workspace_need_max);
    std::mt19937 rng(4);
    std::vector<Sequence> seqs;
    for (int i = 0; i < 4; ++i) seqs.push_back(model->new_sequence());
    // Fill to 528 tokens each in forwards of 4 x 24 rows (the limit), then one forward of 96 rows
    // with all logits and 4 device draws at positions up to 551.
    for (int64_t done = 0; done < 528; done += 24) {
        std::vector<std::vector<int32_t>> toks;
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i < 4; ++i) toks.push_back(random_tokens(rng, 24, V));
        for (int i = 0; i < 4; ++i) chunks.push_back({&seqs[size_t(i)], toks[size_t(i)], false});
        model->forward_batch(chunks);
    }
    std::vector<std::vector<int32_t>> toks;
    std::vector<SequenceChunk> chunks;
    std::vector<DeviceDraw> draws;
    for (int i = 0; i < 4; ++i) toks.push_back(random_tokens(rng, 24, V));
    for (int i = 0; i < 4; ++i) {
        chunks.push_back({&seqs[size_t(i)], toks[size_t(i)], true});
        draws.push_back({.chunk = i, .seed = 1, .temperature = 1.0});
    }
    const ForwardOutputs out = model->forward_sampled(chunks, {}, draws);
    ASSERT_EQ(out.tokens.size(), 4u);
    ASSERT_EQ(out.logits[0].size(), size_t(24 * V));
    const auto st = cuda::cuda_model_stats(*model);
    const size_t bound = cuda::cuda_workspace_bound(*model, 96, 4, 96, 552, 4);
    std::printf("[workspace] capacity %zu, high water %zu, bound of the last forward %zu\n", st.workspace_bytes,
                st.workspace_high_water, bound);
    EXPECT_LE(st.workspace_high_water, bound);
    EXPECT_LE(bound, st.workspace_bytes);
    EXPECT_GT(double(st.workspace_high_water), 0.5 * double(bound));  // the bound is not loose
}

// At the real V4-Flash attention widths (FP8 linears, FP4 experts, a CSA and an HCA layer), in both
// GEMM modes (the tensor-core one where the GPU has FP8 MMAs): graph replays equal eager steps bit for bit.
TEST(CudaRuntimeFlashWidth, GraphDecodeBitIdenticalToEagerInBothGemmModes) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string cfg =
        v4_flash_config({.compress_ratios = {4, 128}, .num_hash_layers = 0, .n_routed_experts = 16, .vocab_size = 2048});
    const std::string dir = (std::filesystem::temp_directory_path() / "deepinfer-cuda-runtime-flash").string();
    std::filesystem::create_directories(dir);
    write_synthetic_checkpoint(dir, cfg, {.seed = 5, .residual_damping = 0.25});
    std::vector<cuda::GemmMode> modes = {cuda::GemmMode::kReference};
    if (cuda::fast_fp8_available()) modes.push_back(cuda::GemmMode::kFast);
    for (cuda::GemmMode mode : modes) {
        std::unique_ptr<Model> m[2];
        for (int g = 0; g < 2; ++g) {
            ModelOptions o;
            o.cuda_graphs = g == 1;
            o.max_batch_tokens = 1024;
            o.max_num_seqs = 8;
            cuda::CudaModelOptions co;
            co.max_model_len = 1024;
            co.gemm = mode;
            m[g] = cuda::load_cuda_model(dir, o, co);
        }
        std::mt19937 rng(8);
        const int64_t B = 5;
        std::vector<Sequence> s0, s1;
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t i = 0; i < B; ++i) {
            s0.push_back(m[0]->new_sequence());
            s1.push_back(m[1]->new_sequence());
            prompts.push_back(random_tokens(rng, 120 + 30 * i, 2048));
        }
        std::vector<SequenceChunk> c0, c1;
        for (int64_t i = 0; i < B; ++i) {
            c0.push_back({&s0[size_t(i)], prompts[size_t(i)], false});
            c1.push_back({&s1[size_t(i)], prompts[size_t(i)], false});
        }
        ASSERT_EQ(m[0]->forward_batch(c0), m[1]->forward_batch(c1));
        std::vector<int32_t> next(static_cast<size_t>(B));
        for (int step = 0; step < 6; ++step) {
            for (int64_t i = 0; i < B; ++i) {
                next[size_t(i)] = static_cast<int32_t>(rng() % 2048);
                c0[size_t(i)] = {&s0[size_t(i)], std::span<const int32_t>(&next[size_t(i)], 1), false};
                c1[size_t(i)] = {&s1[size_t(i)], std::span<const int32_t>(&next[size_t(i)], 1), false};
            }
            ASSERT_EQ(m[0]->forward_batch(c0), m[1]->forward_batch(c1))
                << "gemm " << (mode == cuda::GemmMode::kFast ? "fast" : "reference") << " step " << step;
        }
        EXPECT_EQ(cuda::cuda_model_stats(*m[1]).graph_replays, 6);
        EXPECT_EQ(cuda::cuda_model_stats(*m[0]).graph_replays, 0);
    }
    std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Numerics, CudaRuntime, ::testing::Values(Numerics::kExact, Numerics::kOfficial),
                         [](const auto& param_info) { return std::string(numerics_name(param_info.param)); });

}  // namespace
}  // namespace deepinfer
