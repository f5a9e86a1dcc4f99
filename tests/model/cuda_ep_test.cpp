// SPDX-License-Identifier: Apache-2.0
// Expert parallelism (src/backends/cuda/ep): a DeepSeek-V4 or V4.1 model whose routed experts are sharded
// across GPUs gives logits bit-identical to the same model on one GPU — the tiny fixture models in
// exact and official numerics, and a model at the real V4-Flash widths (FP8 linears, FP4 experts, a
// hash-routed layer) on the reference and the fast (tensor-core) GEMMs — for batches that spread
// sequences over the ranks (prefill, chunked prefill, batched decode, a rank left without sequences)
// and through the offline engine with device sampling — under both dispatch forms (all-gather, and
// routed: rows only to the ranks of their experts, which with these fixtures' few experts often means
// one rank). Skips without two GPUs or without NCCL; the one-rank form (every exchange a local copy)
// runs on any GPU; the batch split runs everywhere (the routed plan: cuda_ep_dispatch_test.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ep/batch_split.h"
#include "backends/cuda/ep/cuda_ep_model.h"
#include "backends/cuda/ep/nccl_exchange.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/synthetic.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using nlohmann::json;

ModelOptions with_numerics(Numerics n) {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = n;
    return o;
}

std::string skip_reason(int gpus) {
    if (cuda::device_count() < gpus) return std::to_string(gpus) + " CUDA devices needed, " +
                                            std::to_string(cuda::device_count()) + " present";
    if (!cuda::nccl_available()) return "this build has no NCCL";
    return "";
}

std::vector<int> first_devices(int n) {
    std::vector<int> d;
    for (int i = 0; i < n; ++i) d.push_back(i);
    return d;
}

// Bit-identical float blocks (NaN never expected; reported by position).
void expect_same(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    size_t differ = 0, first = a.size();
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (first == a.size()) first = i;
            ++differ;
        }
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " logits differ, first at " << first
                          << " (" << (first < a.size() ? a[first] : 0.f) << " vs " << (first < a.size() ? b[first] : 0.f)
                          << ")";
}

// Random token ids of a model's vocabulary from one seeded stream.
struct RandomTokens {
    int64_t vocab;
    std::mt19937 rng;
    RandomTokens(const Model& m, uint32_t seed) : vocab(m.info().vocab_size), rng(seed) {}
    std::vector<int32_t> operator()(size_t n) {
        std::vector<int32_t> t(n);
        for (int32_t& x : t) x = int32_t(rng() % uint32_t(vocab));
        return t;
    }
};

// One script run on a model: four sequences of different lengths prefilled together (all logits),
// then two of them prefilled further in chunks while the other two decode, then batched decode of
// all four, then one sequence alone (the other ranks idle). Returns every logits block in order.
std::vector<std::vector<float>> run_script(const Model& m, uint32_t seed) {
    RandomTokens tokens(m, seed);
    std::vector<Sequence> seqs;
    for (int i = 0; i < 4; ++i) seqs.push_back(m.new_sequence());
    std::vector<std::vector<float>> out;
    std::vector<std::vector<int32_t>> prompts = {tokens(37), tokens(5), tokens(70), tokens(1)};
    {
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i < 4; ++i) chunks.push_back({&seqs[size_t(i)], prompts[size_t(i)], true});
        for (auto& l : m.forward_batch(chunks)) out.push_back(std::move(l));
    }
    for (int step = 0; step < 3; ++step) {
        std::vector<std::vector<int32_t>> parts = {tokens(step == 0 ? 9 : 1), tokens(1), tokens(13), tokens(1)};
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i < 4; ++i) chunks.push_back({&seqs[size_t(i)], parts[size_t(i)], i == 2});
        for (auto& l : m.forward_batch(chunks)) out.push_back(std::move(l));
    }
    for (int step = 0; step < 4; ++step) {
        std::vector<std::vector<int32_t>> parts = {tokens(1), tokens(1), tokens(1), tokens(1)};
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i < 4; ++i) chunks.push_back({&seqs[size_t(i)], parts[size_t(i)], false});
        for (auto& l : m.forward_batch(chunks)) out.push_back(std::move(l));
    }
    for (int step = 0; step < 3; ++step) out.push_back(m.forward(seqs[1], tokens(step == 0 ? 6 : 1), step == 0));
    // A forked sequence continues like its origin.
    Sequence fork = seqs[3].fork();
    const std::vector<int32_t> t = tokens(1);
    out.push_back(m.forward(fork, t, false));
    out.push_back(m.forward(seqs[3], t, false));
    return out;
}

using Script = std::vector<std::vector<float>> (*)(const Model&, uint32_t);
void expect_script_equal(const Model& one, const Model& ep, const std::string& what, Script script = run_script, uint32_t seed = 5) {
    const auto a = script(one, seed), b = script(ep, seed);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) expect_same(a[i], b[i], what + ", logits block " + std::to_string(i));
}

// The batch split (host logic, no GPU): chunks keep their order per rank, draws follow their chunk's
// rank with the chunk's index there, a rank without chunks runs one idle row, bad indices throw.
TEST(CudaEpSplit, ChunksDrawsAndIdleRanks) {
    const std::vector<int> rank = {1, 0, 1, 1};
    const std::vector<int64_t> rows = {5, 1, 1, 30};
    const std::vector<int32_t> draws = {3, 1, 0};
    const cuda::EpSplit s = cuda::split_ep_batch(3, rank, rows, draws);
    ASSERT_EQ(s.chunks.size(), 3u);
    EXPECT_EQ(s.chunks[0], (std::vector<size_t>{1}));
    EXPECT_EQ(s.chunks[1], (std::vector<size_t>{0, 2, 3}));
    EXPECT_TRUE(s.chunks[2].empty());
    EXPECT_EQ(s.rows, (std::vector<int64_t>{1, 36, 1}));
    EXPECT_EQ(s.idle, (std::vector<uint8_t>{0, 0, 1}));
    EXPECT_EQ(s.chunk[3].rank, 1);
    EXPECT_EQ(s.chunk[3].index, 2);
    EXPECT_EQ(s.chunk[1].index, 0);
    EXPECT_EQ(s.draws[0], (std::vector<size_t>{1}));
    EXPECT_EQ(s.draws[1], (std::vector<size_t>{0, 2}));
    EXPECT_TRUE(s.draws[2].empty());
    // No chunks at all: every rank idles (it still serves its experts).
    const cuda::EpSplit none = cuda::split_ep_batch(2, {}, {}, {});
    EXPECT_EQ(none.rows, (std::vector<int64_t>{1, 1}));
    EXPECT_EQ(none.idle, (std::vector<uint8_t>{1, 1}));
    EXPECT_THROW(cuda::split_ep_batch(2, std::vector<int>{2}, std::vector<int64_t>{1}, {}), Error);
    EXPECT_THROW(cuda::split_ep_batch(2, std::vector<int>{0}, std::vector<int64_t>{1}, std::vector<int32_t>{1}), Error);
    EXPECT_THROW(cuda::split_ep_batch(0, {}, {}, {}), Error);
}

TEST(CudaEpSplit, NewSequencesGoToTheLeastLoadedRank) {
    EXPECT_EQ(cuda::least_loaded_rank(std::vector<int64_t>{3, 1, 1}), 1);
    EXPECT_EQ(cuda::least_loaded_rank(std::vector<int64_t>{0, 0}), 0);
    EXPECT_EQ(cuda::least_loaded_rank(std::vector<int64_t>{4, 5, 2}), 2);
    EXPECT_THROW(cuda::least_loaded_rank({}), Error);
}

struct Case {
    const char* model;
    Numerics numerics;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << numerics_name(c.numerics); }

class CudaEpTiny : public ::testing::TestWithParam<Case> {};

TEST_P(CudaEpTiny, TwoGpuLogitsEqualOneGpu) {
    if (auto why = skip_reason(2); !why.empty()) GTEST_SKIP() << why;
    const std::string dir = test::data_path(std::string("models/") + GetParam().model);
    const ModelOptions mo = with_numerics(GetParam().numerics);
    auto one = cuda::load_cuda_model(dir, mo);
    auto ep = cuda::load_cuda_ep_model(dir, mo, {}, first_devices(2));
    // Sequences are spread: the first two land on different ranks.
    Sequence a = ep->new_sequence(), b = ep->new_sequence();
    EXPECT_NE(cuda::cuda_ep_rank_of(*ep, a), cuda::cuda_ep_rank_of(*ep, b));
    expect_script_equal(*one, *ep, std::string(GetParam().model) + " 2 GPUs");
}

// Each dispatch form forced: the same logits; the routed one sent fewer rows and expert outputs than
// the all-gather would have (some rows need one rank only), the all-gather none routed.
TEST_P(CudaEpTiny, TwoGpuEachDispatchEqualsOneGpu) {
    if (auto why = skip_reason(2); !why.empty()) GTEST_SKIP() << why;
    const std::string dir = test::data_path(std::string("models/") + GetParam().model);
    const ModelOptions mo = with_numerics(GetParam().numerics);
    auto one = cuda::load_cuda_model(dir, mo);
    for (cuda::EpDispatch d : {cuda::EpDispatch::kRouted, cuda::EpDispatch::kAllGather}) {
        cuda::CudaModelOptions co;
        co.ep_dispatch = d;
        auto ep = cuda::load_cuda_ep_model(dir, mo, co, first_devices(2));
        expect_script_equal(*one, *ep, std::string(GetParam().model) + " 2 GPUs " + cuda::ep_dispatch_name(d));
        const cuda::EpExchangeStats st = cuda::cuda_ep_exchange_stats(*ep);
        if (d == cuda::EpDispatch::kRouted) {
            EXPECT_GT(st.layers_routed, 0);
            EXPECT_EQ(st.layers_all_gather, 0);
            EXPECT_GT(st.rows_sent, 0);
            EXPECT_LT(st.rows_sent, st.rows_broadcast);
            EXPECT_LT(st.pairs_returned, st.slots_all_gather);
        } else {
            EXPECT_EQ(st.layers_routed, 0);
            EXPECT_GT(st.layers_all_gather, 0);
        }
        cuda::reset_cuda_ep_exchange_stats(*ep);
        EXPECT_EQ(cuda::cuda_ep_exchange_stats(*ep).layers_all_gather + cuda::cuda_ep_exchange_stats(*ep).layers_routed, 0);
    }
}

TEST_P(CudaEpTiny, OneRankLogitsEqualPlainModel) {
    if (auto why = skip_reason(1); !why.empty()) GTEST_SKIP() << why;
    const std::string dir = test::data_path(std::string("models/") + GetParam().model);
    const ModelOptions mo = with_numerics(GetParam().numerics);
    auto one = cuda::load_cuda_model(dir, mo);
    auto ep = cuda::load_cuda_ep_model(dir, mo, {}, first_devices(1));
    expect_script_equal(*one, *ep, std::string(GetParam().model) + " 1 rank");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEpTiny,
                         ::testing::Values(Case{"v4_tiny_a", Numerics::kExact}, Case{"v4_tiny_b", Numerics::kExact},
                                           Case{"v4_tiny_a", Numerics::kOfficial}, Case{"v4_tiny_b", Numerics::kOfficial}),
                         [](const auto& p) {
                             return std::string(p.param.model) + "_" + std::string(numerics_name(p.param.numerics));
                         });

// DeepSeek-V4.1 (the default family): the tiny fixtures through Model::load, one GPU vs two.
class CudaEpV41 : public ::testing::TestWithParam<Case> {};

TEST_P(CudaEpV41, TwoGpuLogitsEqualOneGpu) {
    if (auto why = skip_reason(2); !why.empty()) GTEST_SKIP() << why;
    const std::string dir = test::data_path(std::string("v41/") + GetParam().model);
    ModelOptions mo = with_numerics(GetParam().numerics);
    mo.device = Device::kCuda;
    mo.tokenizer_json = DI_TOKENIZER_JSON;  // the Engram token map
    auto one = Model::load(dir, mo);
    mo.gpus = 2;
    auto ep = Model::load(dir, mo);
    ASSERT_EQ(cuda::cuda_ep_ranks(*ep).size(), 2u);
    EXPECT_EQ(ep->info().family, "deepseek_v41");
    expect_script_equal(*one, *ep, std::string(GetParam().model) + " V4.1 2 GPUs");
    // The default dispatch: routed for the first prefill's 113 rows, all-gather for the 4-row decodes.
    const cuda::EpExchangeStats st = cuda::cuda_ep_exchange_stats(*ep);
    EXPECT_GT(st.layers_routed, 0);
    EXPECT_GT(st.layers_all_gather, 0);
}

// V4.1's bounded replay under expert parallelism: which chunks replay (host rule, no GPU): a chunk that wants only
// its last logits, has no verify draw and more than W rows.
TEST(CudaV41ReplayRule, ChunksThatReplay) {
    const int64_t W = 16;
    EXPECT_TRUE(cuda::v41_replays_chunk(false, 0, W + 1, W));
    EXPECT_TRUE(cuda::v41_replays_chunk(false, 1, 100, W)) << "a draw from the last row";
    EXPECT_FALSE(cuda::v41_replays_chunk(false, 2, 100, W)) << "a verify draw (rows before the last)";
    EXPECT_FALSE(cuda::v41_replays_chunk(true, 0, 100, W)) << "every row's logits";
    EXPECT_FALSE(cuda::v41_replays_chunk(false, 0, W, W)) << "at most W rows";
}

// A script for bounded replay: prompts longer than the window (last logits only: they replay) beside short ones and
// decode rows, then further chunks and decode steps; every logits block in order.
std::vector<std::vector<float>> replay_script(const Model& m, uint32_t seed) {
    RandomTokens tokens(m, seed);
    std::vector<Sequence> seqs;
    for (int i = 0; i < 3; ++i) seqs.push_back(m.new_sequence());
    std::vector<std::vector<float>> out;
    const std::vector<std::vector<int32_t>> prompts = {tokens(90), tokens(5), tokens(41)};
    std::vector<SequenceChunk> chunks;
    for (int i = 0; i < 3; ++i) chunks.push_back({&seqs[size_t(i)], prompts[size_t(i)], i == 1});
    for (auto& l : m.forward_batch(chunks)) out.push_back(std::move(l));
    for (int step = 0; step < 3; ++step) {
        const std::vector<std::vector<int32_t>> parts = {tokens(1), tokens(step == 1 ? 37 : 1), tokens(1)};
        chunks.clear();
        for (int i = 0; i < 3; ++i) chunks.push_back({&seqs[size_t(i)], parts[size_t(i)], false});
        for (auto& l : m.forward_batch(chunks)) out.push_back(std::move(l));
    }
    out.push_back(m.forward(seqs[0], tokens(60), false));  // one sequence alone (other ranks idle)
    return out;
}

// V4.1's bounded replay (ModelOptions::v41_bounded_replay) under expert parallelism: the exchange's tail counts from
// the cut on. One rank (any GPU) against the plain model, bit for bit.
TEST_P(CudaEpV41, OneRankBoundedReplayEqualsPlainModel) {
    if (auto why = skip_reason(1); !why.empty()) GTEST_SKIP() << why;
    const std::string dir = test::data_path(std::string("v41/") + GetParam().model);
    ModelOptions mo = with_numerics(GetParam().numerics);
    mo.device = Device::kCuda;
    mo.tokenizer_json = DI_TOKENIZER_JSON;  // the Engram token map
    mo.v41_bounded_replay = true;
    auto one = cuda::load_cuda_v41_model(dir, mo, {});
    auto ep = cuda::load_cuda_ep_model(
        [&](const cuda::CudaModelOptions& co) {
            auto m = cuda::load_cuda_v41_model(dir, mo, co);
            const int64_t len = cuda::cuda_v41_model_max_len(*m);
            return cuda::CudaRank{std::move(m), len};
        },
        {}, {0});
    expect_script_equal(*one, *ep, std::string(GetParam().model) + " replay, 1 rank", replay_script, 11);
}

// Two GPUs with bounded replay against one: ranks whose chunks replay beside ranks whose chunks do not (and idle ranks)
// switch to the tail counts at the same layer.
TEST_P(CudaEpV41, TwoGpuBoundedReplayEqualsOneGpu) {
    if (auto why = skip_reason(2); !why.empty()) GTEST_SKIP() << why;
    const std::string dir = test::data_path(std::string("v41/") + GetParam().model);
    ModelOptions mo = with_numerics(GetParam().numerics);
    mo.device = Device::kCuda;
    mo.tokenizer_json = DI_TOKENIZER_JSON;
    mo.v41_bounded_replay = true;
    auto one = Model::load(dir, mo);
    mo.gpus = 2;
    auto ep = Model::load(dir, mo);
    ASSERT_EQ(cuda::cuda_ep_ranks(*ep).size(), 2u);
    expect_script_equal(*one, *ep, std::string(GetParam().model) + " replay, 2 GPUs", replay_script, 11);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEpV41,
                         ::testing::Values(Case{"v41_tiny_a", Numerics::kExact}, Case{"v41_tiny_b", Numerics::kExact},
                                           Case{"v41_tiny_a", Numerics::kOfficial}, Case{"v41_tiny_b", Numerics::kOfficial}),
                         [](const auto& p) {
                             return std::string(p.param.model) + "_" + std::string(numerics_name(p.param.numerics));
                         });

// Real V4-Flash widths, 16 FP4 experts (8 per GPU), a CSA, an HCA and a hash-routed layer.
std::string flash_width_config() {
    return v4_flash_config({.compress_ratios = {4, 128}, .num_hash_layers = 1, .n_routed_experts = 16, .vocab_size = 1024});
}

struct FlashCase {
    cuda::GemmMode gemm;
    cuda::EpDispatch dispatch;
};
void PrintTo(const FlashCase& c, std::ostream* os) { *os << int(c.gemm) << "/" << cuda::ep_dispatch_name(c.dispatch); }

class CudaEpFlashWidth : public ::testing::TestWithParam<FlashCase> {
protected:
    static void SetUpTestSuite() {
        if (!skip_reason(2).empty()) return;  // every test of the suite skips
        dir_ = (std::filesystem::temp_directory_path() / "deepinfer-cuda-ep-flash-width").string();
        std::filesystem::create_directories(dir_);
        write_synthetic_checkpoint(dir_, flash_width_config(), {.seed = 13, .residual_damping = 0.25});
    }
    static void TearDownTestSuite() {
        if (!dir_.empty()) std::filesystem::remove_all(dir_);
    }
    static std::string dir_;
};
std::string CudaEpFlashWidth::dir_;

TEST_P(CudaEpFlashWidth, TwoGpuLogitsEqualOneGpu) {
    if (auto why = skip_reason(2); !why.empty()) GTEST_SKIP() << why;
    const bool fast = GetParam().gemm == cuda::GemmMode::kFast;
    if (fast && !cuda::fast_fp8_available()) GTEST_SKIP() << "no FP8 tensor cores";
    cuda::CudaModelOptions co;
    co.max_model_len = 1024;
    co.gemm = GetParam().gemm;
    auto one = cuda::load_cuda_model(dir_, {}, co);
    co.ep_dispatch = GetParam().dispatch;
    co.ep_routed_min_rows = 64;  // auto: the script's prefills routed, its decodes all-gathered
    auto ep = cuda::load_cuda_ep_model(dir_, {}, co, first_devices(2));
    ASSERT_EQ(ep->numerics(), Numerics::kOfficial);
    expect_script_equal(*one, *ep, std::string(fast ? "flash-width fast " : "flash-width reference ") +
                                       cuda::ep_dispatch_name(GetParam().dispatch));
    const cuda::EpExchangeStats st = cuda::cuda_ep_exchange_stats(*ep);
    EXPECT_GT(st.layers_routed, 0);
    EXPECT_EQ(st.layers_all_gather > 0, GetParam().dispatch == cuda::EpDispatch::kAuto);
}

INSTANTIATE_TEST_SUITE_P(Gemm, CudaEpFlashWidth,
                         ::testing::Values(FlashCase{cuda::GemmMode::kReference, cuda::EpDispatch::kAuto},
                                           FlashCase{cuda::GemmMode::kFast, cuda::EpDispatch::kAuto},
                                           FlashCase{cuda::GemmMode::kFast, cuda::EpDispatch::kRouted}),
                         [](const auto& p) {
                             return std::string(p.param.gemm == cuda::GemmMode::kFast ? "fast_" : "reference_") +
                                    cuda::ep_dispatch_name(p.param.dispatch);
                         });

// The offline engine over the two-GPU model: the same completions as over one GPU, with greedy and
// seeded sampling on the device, n > 1 siblings (forks) and prefix sharing.
TEST(CudaEpEngine, CompletionsEqualOneGpu) {
    if (auto why = skip_reason(2); !why.empty()) GTEST_SKIP() << why;
    const std::string dir = test::data_path("models/v4_tiny_a");
    ModelOptions mo = with_numerics(Numerics::kOfficial);
    mo.device = Device::kCuda;
    std::shared_ptr<const Model> one = Model::load(dir, mo);
    mo.gpus = 2;
    std::shared_ptr<const Model> two = Model::load(dir, mo);
    ASSERT_EQ(cuda::cuda_ep_ranks(*two).size(), 2u);
    std::mt19937 rng(21);
    const int64_t V = one->info().vocab_size;
    std::vector<int32_t> prefix(48);
    for (int32_t& t : prefix) t = int32_t(rng() % uint32_t(V));
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 9; ++i) {
        std::vector<int32_t> p = i % 2 ? prefix : std::vector<int32_t>{};
        for (int64_t k = 0, n = 1 + rng() % 60; k < n; ++k) p.push_back(int32_t(rng() % uint32_t(V)));
        prompts.push_back(p);
    }
    auto run = [&](std::shared_ptr<const Model> m) {
        EngineConfig cfg;
        cfg.max_num_batched_tokens = 80;
        cfg.max_prefill_chunk = 32;
        cfg.prefix_block = 16;
        cfg.device_sampling = true;
        Engine engine(std::move(m), nullptr, cfg);
        for (size_t i = 0; i < prompts.size(); ++i) {
            SamplingParams sp;
            sp.max_tokens = 10;
            sp.ignore_eos = true;
            sp.temperature = i % 3 == 0 ? 0.0 : 0.8;
            sp.top_k = i % 3 == 2 ? 16 : 0;
            sp.n = i % 4 == 1 ? 2 : 1;
            sp.seed = 300 + i;
            std::string id = std::to_string(i);
            id.insert(0, 1, 'r');  // (not "r" + ...: GCC 12's -Wrestrict false positive at -O3)
            engine.add_request(id, prompts[i], sp);
        }
        std::map<std::string, std::vector<std::vector<int32_t>>> out;
        engine.run_until_done([&](RequestOutput&& r) {
            for (const auto& c : r.completions) out[r.request_id].push_back(c.token_ids);
        });
        return out;
    };
    const auto a = run(one), b = run(two);
    ASSERT_EQ(a.size(), prompts.size());
    EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace deepinfer
