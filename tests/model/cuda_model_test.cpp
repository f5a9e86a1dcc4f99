// SPDX-License-Identifier: Apache-2.0
// CudaModel against the CPU reference (CpuModel): the tiny fixture models (exact and official
// numerics) at every position of the reference prompts, greedy continuations, chunked prefill and
// decode equal to one forward, batch invariance (a request's logits bit-identical alone and inside
// batches of other sizes and neighbours), and one model at the real V4-Flash attention widths with
// FP8 linears and FP4 experts. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/synthetic.h"
#include "model/forward.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using nlohmann::json;

std::vector<std::vector<int32_t>> prompts_of(const std::string& dir) {
    std::ifstream in(dir + "/ref.json");
    json j = json::parse(in);
    std::vector<std::vector<int32_t>> out;
    for (const auto& p : j["prompts"]) out.push_back(p.get<std::vector<int32_t>>());
    return out;
}

ModelOptions numerics(Numerics n) {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = n;
    return o;
}

struct Diff {
    double max_abs = 0, max_ref = 0;
    int64_t argmax_mismatch = 0, rows = 0;
    int64_t first_diff_row = -1;  // first position whose logits are not bit-identical
};

Diff compare(const std::vector<float>& ref, const std::vector<float>& got, int64_t V) {
    EXPECT_EQ(ref.size(), got.size());
    Diff d;
    d.rows = static_cast<int64_t>(ref.size()) / V;
    for (int64_t r = 0; r < d.rows; ++r) {
        const float* a = ref.data() + r * V;
        const float* b = got.data() + r * V;
        for (int64_t v = 0; v < V; ++v) {
            EXPECT_TRUE(std::isfinite(b[v])) << "row " << r << " vocab " << v;
            d.max_abs = std::max(d.max_abs, std::fabs(double(a[v]) - double(b[v])));
            if (a[v] != b[v] && d.first_diff_row < 0) d.first_diff_row = r;
            d.max_ref = std::max(d.max_ref, std::fabs(double(a[v])));
        }
        if (std::max_element(a, a + V) - a != std::max_element(b, b + V) - b) ++d.argmax_mismatch;
    }
    return d;
}

std::vector<int32_t> greedy(const Model& m, const std::vector<int32_t>& prompt, int n) {
    Sequence seq = m.new_sequence();
    std::vector<float> l = m.forward(seq, prompt, false);
    std::vector<int32_t> out;
    const int64_t V = m.info().vocab_size;
    for (int i = 0; i < n; ++i) {
        const int32_t t = static_cast<int32_t>(std::max_element(l.begin(), l.begin() + V) - l.begin());
        out.push_back(t);
        l = m.forward(seq, std::span<const int32_t>(&t, 1), false);
    }
    return out;
}

struct Case {
    const char* model;
    Numerics numerics;
    double tolerance;  // max |gpu - cpu| / max |cpu logit|
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << numerics_name(c.numerics); }

class CudaTinyModel : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        dir_ = test::data_path(std::string("models/") + GetParam().model);
        cpu_ = load_v4_model(dir_, numerics(GetParam().numerics));
        gpu_ = cuda::load_cuda_model(dir_, numerics(GetParam().numerics));
    }
    std::string dir_;
    std::unique_ptr<Model> cpu_, gpu_;
};

TEST_P(CudaTinyModel, LogitsMatchCpuAtEveryPosition) {
    const int64_t V = cpu_->info().vocab_size;
    for (const auto& prompt : prompts_of(dir_)) {
        Sequence cs = cpu_->new_sequence(), gs = gpu_->new_sequence();
        const std::vector<float> ref = cpu_->forward(cs, prompt, true);
        const std::vector<float> got = gpu_->forward(gs, prompt, true);
        const Diff d = compare(ref, got, V);
        std::printf("[cuda-vs-cpu] %s %s prompt %zu tokens: max|diff| %.3g, max|logit| %.3g (rel %.3g), argmax mismatches %lld/%lld, first differing position %lld\n",
                    GetParam().model, std::string(numerics_name(GetParam().numerics)).c_str(), prompt.size(), d.max_abs,
                    d.max_ref, d.max_abs / d.max_ref, static_cast<long long>(d.argmax_mismatch), static_cast<long long>(d.rows),
                    static_cast<long long>(d.first_diff_row));
        EXPECT_LE(d.max_abs, GetParam().tolerance * d.max_ref) << prompt.size() << " tokens";
        EXPECT_EQ(d.argmax_mismatch, 0);
    }
}

TEST_P(CudaTinyModel, GreedyContinuationsEqualCpu) {
    for (const auto& prompt : prompts_of(dir_)) {
        const std::vector<int32_t> a = greedy(*cpu_, prompt, 16), b = greedy(*gpu_, prompt, 16);
        EXPECT_EQ(a, b) << prompt.size() << "-token prompt";
    }
}

TEST_P(CudaTinyModel, ChunkedPrefillAndDecodeEqualOneForward) {
    const std::vector<int32_t> prompt = prompts_of(dir_)[1];
    const int64_t V = gpu_->info().vocab_size;
    Sequence whole = gpu_->new_sequence();
    const std::vector<float> ref = gpu_->forward(whole, prompt, true);
    for (size_t chunk : {size_t(1), size_t(7), size_t(64)}) {
        Sequence seq = gpu_->new_sequence();
        std::vector<float> got;
        for (size_t i = 0; i < prompt.size(); i += chunk) {
            std::span<const int32_t> part(prompt.data() + i, std::min(chunk, prompt.size() - i));
            std::vector<float> l = gpu_->forward(seq, part, true);
            got.insert(got.end(), l.begin(), l.end());
        }
        ASSERT_EQ(got.size(), ref.size());
        EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0) << "chunk " << chunk << ", V " << V;
    }
}

TEST_P(CudaTinyModel, BatchInvariant) {
    // Each prompt alone, then all together with different neighbours and chunk splits: bit-identical.
    auto prompts = prompts_of(dir_);
    std::vector<std::vector<float>> alone;
    for (const auto& p : prompts) {
        Sequence s = gpu_->new_sequence();
        alone.push_back(gpu_->forward(s, p, true));
    }
    for (int order = 0; order < 2; ++order) {
        std::vector<Sequence> seqs;
        for (size_t i = 0; i < prompts.size(); ++i) seqs.push_back(gpu_->new_sequence());
        std::vector<SequenceChunk> chunks;
        for (size_t k = 0; k < prompts.size(); ++k) {
            const size_t i = order == 0 ? k : prompts.size() - 1 - k;
            chunks.push_back({&seqs[i], prompts[i], true});
        }
        auto out = gpu_->forward_batch(chunks);
        for (size_t k = 0; k < prompts.size(); ++k) {
            const size_t i = order == 0 ? k : prompts.size() - 1 - k;
            ASSERT_EQ(out[k].size(), alone[i].size());
            EXPECT_EQ(std::memcmp(out[k].data(), alone[i].data(), alone[i].size() * 4), 0) << "prompt " << i;
        }
    }
    // Decode steps of one sequence alone vs inside a batch of 3 with other sequences.
    const auto& p = prompts[0];
    Sequence a = gpu_->new_sequence(), b = gpu_->new_sequence(), n1 = gpu_->new_sequence(), n2 = gpu_->new_sequence();
    gpu_->forward(a, p, false);
    gpu_->forward(b, p, false);
    gpu_->forward(n1, prompts[1], false);
    gpu_->forward(n2, prompts[2], false);
    for (int32_t t : {5, 9, 11}) {
        const std::vector<float> solo = gpu_->forward(a, std::span<const int32_t>(&t, 1), false);
        const int32_t other = t + 1;
        SequenceChunk chunks[] = {{&n1, std::span<const int32_t>(&other, 1), false},
                                  {&b, std::span<const int32_t>(&t, 1), false},
                                  {&n2, std::span<const int32_t>(&other, 1), false}};
        auto out = gpu_->forward_batch(chunks);
        EXPECT_EQ(std::memcmp(out[1].data(), solo.data(), solo.size() * 4), 0) << "decode token " << t;
    }
}


// Batch invariance with many neighbours: a 150-token prompt alone, then in the middle of batches of 8
// and 65 chunks of random lengths.
TEST_P(CudaTinyModel, BatchInvariantWith7And64Neighbours) {
    const int64_t V = gpu_->info().vocab_size;
    std::mt19937 rng(7);
    auto random_prompt = [&](int64_t len) {
        std::vector<int32_t> p(static_cast<size_t>(len));
        for (int32_t& t : p) t = static_cast<int32_t>(rng() % uint32_t(V));
        return p;
    };
    const std::vector<int32_t> target = random_prompt(150);
    Sequence alone = gpu_->new_sequence();
    const std::vector<float> want = gpu_->forward(alone, target, true);
    for (int neighbours : {7, 64}) {
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < neighbours; ++i) prompts.push_back(random_prompt(1 + rng() % 40));
        std::vector<Sequence> seqs;
        for (int i = 0; i <= neighbours; ++i) seqs.push_back(gpu_->new_sequence());
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i <= neighbours; ++i) {
            if (i == neighbours / 2) chunks.push_back({&seqs[size_t(i)], target, true});
            else chunks.push_back({&seqs[size_t(i)], prompts[size_t(i < neighbours / 2 ? i : i - 1)], true});
        }
        const auto got = gpu_->forward_batch(chunks);
        ASSERT_EQ(got[size_t(neighbours / 2)].size(), want.size());
        EXPECT_EQ(std::memcmp(got[size_t(neighbours / 2)].data(), want.data(), want.size() * 4), 0)
            << neighbours << " neighbours";
    }
}

// The offline engine on the CUDA model produces the CPU engine's tokens:
// continuous batching, chunked prefill, prefix-cache snapshots (device state copies), n > 1 siblings,
// seeded sampling.
TEST_P(CudaTinyModel, EngineOnCudaEqualsEngineOnCpu) {
    // (The V4 loaders directly, not Model::load: its V4.1 branch would tie this binary to ICU, which the
    // GPU machine lacks; tests/python/test_device_cli.py covers the --device dispatch.)
    std::shared_ptr<const Model> gpu = cuda::load_cuda_model(dir_, numerics(GetParam().numerics));
    std::shared_ptr<const Model> cpu = load_v4_model(dir_, numerics(GetParam().numerics));
    std::mt19937 rng(11);
    const int64_t V = cpu->info().vocab_size;
    std::vector<int32_t> shared_prefix(100);
    for (int32_t& t : shared_prefix) t = int32_t(rng() % uint32_t(V));
    std::vector<std::pair<std::string, std::vector<int32_t>>> reqs;
    for (int i = 0; i < 10; ++i) {
        std::vector<int32_t> p = i % 2 ? shared_prefix : std::vector<int32_t>{};
        const int64_t extra = 1 + rng() % 90;
        for (int64_t k = 0; k < extra; ++k) p.push_back(int32_t(rng() % uint32_t(V)));
        std::string id = std::to_string(i);
        id.insert(0, 1, 'r');  // (not "r" + ...: GCC 12's -Wrestrict false positive at -O3)
        reqs.emplace_back(std::move(id), p);
    }
    auto run = [&](std::shared_ptr<const Model> m) {
        EngineConfig cfg;
        cfg.max_num_batched_tokens = 96;
        cfg.max_prefill_chunk = 40;
        cfg.prefix_block = 16;
        Engine engine(std::move(m), nullptr, cfg);
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
        return out;
    };
    const auto a = run(cpu), b = run(gpu);
    ASSERT_EQ(a.size(), reqs.size());
    EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTinyModel,
                         ::testing::Values(Case{"v4_tiny_a", Numerics::kExact, 1e-4},
                                           Case{"v4_tiny_b", Numerics::kExact, 1e-4},
                                           Case{"v4_tiny_a", Numerics::kOfficial, 1e-2},
                                           Case{"v4_tiny_b", Numerics::kOfficial, 1e-2}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.model) + "_" +
                                    std::string(numerics_name(param_info.param.numerics));
                         });

// Real V4-Flash attention widths (hidden 4096, 64 heads x 512, q_lora 1024, 8 output groups,
// window 128, indexer 64 x 128 top-512, HC 4 x 4096, moe width 2048 top-6) with FP8 linears and FP4
// experts in DeepSeek's layout; a CSA and an HCA layer; 16 experts and a 1024 vocabulary keep it small.
std::string flash_width_config() {
    return v4_flash_config({.compress_ratios = {4, 128}, .num_hash_layers = 1, .n_routed_experts = 16, .vocab_size = 1024});
}

TEST(CudaFlashWidth, OfficialLogitsMatchCpu) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string dir = (std::filesystem::temp_directory_path() / "deepinfer-cuda-flash-width").string();
    std::filesystem::create_directories(dir);
    write_synthetic_checkpoint(dir, flash_width_config(), {.seed = 7, .residual_damping = 0.25});
    auto cpu = load_v4_model(dir, {});
    cuda::CudaModelOptions co;
    co.max_model_len = 4096;
    auto gpu = cuda::load_cuda_model(dir, {}, co);
    ASSERT_EQ(gpu->numerics(), Numerics::kOfficial);
    std::mt19937 rng(3);
    std::vector<int32_t> prompt(200);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 1024);
    Sequence cs = cpu->new_sequence(), gs = gpu->new_sequence();
    const std::vector<float> ref = cpu->forward(cs, prompt, true), got = gpu->forward(gs, prompt, true);
    const Diff d = compare(ref, got, 1024);
    std::printf("[cuda-vs-cpu] flash-width official 200 tokens: max|diff| %.3g, max|logit| %.3g (rel %.3g), argmax mismatches %lld/%lld, first differing position %lld\n",
                d.max_abs, d.max_ref, d.max_abs / d.max_ref, static_cast<long long>(d.argmax_mismatch),
                static_cast<long long>(d.rows), static_cast<long long>(d.first_diff_row));
    EXPECT_LE(d.max_abs, 1e-2 * d.max_ref);
    // Decode 4 tokens on both.
    for (int32_t t : {17, 400, 3, 999}) {
        const auto a = cpu->forward(cs, std::span<const int32_t>(&t, 1), false);
        const auto b = gpu->forward(gs, std::span<const int32_t>(&t, 1), false);
        const Diff dd = compare(a, b, 1024);
        EXPECT_LE(dd.max_abs, 1e-2 * dd.max_ref) << "decode " << t;
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer
