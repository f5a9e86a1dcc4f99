// SPDX-License-Identifier: Apache-2.0
// CudaModel with the fast (tensor-core) GEMM mode against the CPU reference at the real V4-Flash
// widths (FP8 linears, FP4 experts, official numerics): logits within a tolerance (the linears differ
// from the CPU by ~2e-4 relative, amplified where a bf16 rounding point flips), the same greedy
// argmax at most positions, and batch invariance bit for bit: a sequence's logits alone equal its
// logits inside batches of other sizes and neighbours (other tile configurations and expert tiles).
// Skips without a GPU with FP8 tensor cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/model.h"
#include "deepinfer/synthetic.h"
#include "model/forward.h"

namespace deepinfer {
namespace {

using nlohmann::json;

// V4-Flash widths (hidden 4096, 64 heads x 512, q_lora 1024, 8 output groups, moe width 2048 top-6 of
// 16 FP4 experts, a CSA and an HCA layer), vocabulary 2048.
std::string flash_width_config() {
    return v4_flash_config({.compress_ratios = {4, 128}, .num_hash_layers = 0, .n_routed_experts = 16, .vocab_size = 2048});
}

class CudaFastModel : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (cuda::device_count() == 0 || !cuda::fast_fp8_available()) return;
        dir_ = (std::filesystem::temp_directory_path() / "deepinfer-cuda-fast-model").string();
        std::filesystem::create_directories(dir_);
        write_synthetic_checkpoint(dir_, flash_width_config(), {.seed = 11, .residual_damping = 0.25});
    }
    static void TearDownTestSuite() {
        if (!dir_.empty()) std::filesystem::remove_all(dir_);
    }
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        if (!cuda::fast_fp8_available()) GTEST_SKIP() << "FP8 tensor cores need compute capability 8.9+";
    }
    static std::unique_ptr<Model> fast_model() {
        cuda::CudaModelOptions co;
        co.max_model_len = 4096;
        co.workspace_bytes = size_t(4) << 30;
        co.gemm = cuda::GemmMode::kFast;
        return cuda::load_cuda_model(dir_, {}, co);
    }
    static std::string dir_;
};
std::string CudaFastModel::dir_;

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % 2048);
    return t;
}

TEST_F(CudaFastModel, LogitsWithinToleranceOfCpu) {
    auto cpu = load_v4_model(dir_, {});
    auto gpu = fast_model();
    ASSERT_EQ(gpu->numerics(), Numerics::kOfficial);
    const int64_t V = 2048;
    const auto prompt = random_tokens(160, 3);
    Sequence cs = cpu->new_sequence(), gs = gpu->new_sequence();
    std::vector<float> ref = cpu->forward(cs, prompt, true), got = gpu->forward(gs, prompt, true);
    for (int32_t t : {17, 400, 3, 999}) {  // decode steps
        const auto a = cpu->forward(cs, std::span<const int32_t>(&t, 1), false);
        const auto b = gpu->forward(gs, std::span<const int32_t>(&t, 1), false);
        ref.insert(ref.end(), a.begin(), a.end());
        got.insert(got.end(), b.begin(), b.end());
    }
    ASSERT_EQ(ref.size(), got.size());
    double max_abs = 0, max_ref = 0, sum_abs = 0, sum_ref = 0;
    int64_t argmax_same = 0;
    const int64_t rows = int64_t(ref.size()) / V;
    for (int64_t r = 0; r < rows; ++r) {
        const float* a = ref.data() + r * V;
        const float* b = got.data() + r * V;
        for (int64_t v = 0; v < V; ++v) {
            ASSERT_TRUE(std::isfinite(b[v]));
            const double d = std::fabs(double(a[v]) - double(b[v]));
            max_abs = std::max(max_abs, d);
            max_ref = std::max(max_ref, std::fabs(double(a[v])));
            sum_abs += d;
            sum_ref += std::fabs(double(a[v]));
        }
        argmax_same += (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b);
    }
    std::printf("[fast-vs-cpu] flash-width official, 160-token prefill + 4 decode steps: max|diff| %.3g (max|logit| %.3g, "
                "rel %.3g), mean|diff|/mean|logit| %.3g, argmax agreement %lld/%lld\n",
                max_abs, max_ref, max_abs / max_ref, sum_abs / sum_ref, (long long)argmax_same, (long long)rows);
    EXPECT_LE(max_abs, 5e-2 * max_ref);
    EXPECT_LE(sum_abs, 1e-2 * sum_ref);
    EXPECT_GE(argmax_same, rows * 9 / 10);
}

TEST_F(CudaFastModel, BatchInvariantBitForBit) {
    auto gpu = fast_model();
    const auto a = random_tokens(50, 5), b = random_tokens(300, 6), c = random_tokens(7, 7);
    // Alone: prefill, then two decode steps.
    Sequence s1 = gpu->new_sequence();
    const auto alone = gpu->forward(s1, a, true);
    const int32_t t1 = 11, t2 = 1500;
    const auto alone_d1 = gpu->forward(s1, std::span<const int32_t>(&t1, 1), false);
    const auto alone_d2 = gpu->forward(s1, std::span<const int32_t>(&t2, 1), false);
    // Inside a batch with a long and a short neighbour, then decode beside them.
    Sequence sa = gpu->new_sequence(), sb = gpu->new_sequence(), sc = gpu->new_sequence();
    {
        const SequenceChunk chunks[] = {{&sb, b, false}, {&sa, a, true}, {&sc, c, true}};
        const auto out = gpu->forward_batch(chunks);
        ASSERT_EQ(out[1].size(), alone.size());
        EXPECT_EQ(0, std::memcmp(out[1].data(), alone.data(), alone.size() * 4)) << "prefill beside 307 other rows";
    }
    {
        // Beside a 2100-token prompt (>= 2048 rows: the output projection's dense launch per group, whose bf16
        // input the attention kernel writes group after group) the prompt's logits are those alone (< 2048
        // rows: the grouped launch over [rows, heads x 512]).
        Sequence sa2 = gpu->new_sequence(), sd = gpu->new_sequence();
        const auto d = random_tokens(2100, 8);
        const SequenceChunk chunks[] = {{&sd, d, false}, {&sa2, a, true}};
        const auto out = gpu->forward_batch(chunks);
        ASSERT_EQ(out[1].size(), alone.size());
        EXPECT_EQ(0, std::memcmp(out[1].data(), alone.data(), alone.size() * 4)) << "prefill beside 2100 other rows";
    }
    {
        const int32_t tb = 5, tc = 6;
        const SequenceChunk chunks[] = {{&sa, std::span<const int32_t>(&t1, 1), false},
                                        {&sb, std::span<const int32_t>(&tb, 1), false},
                                        {&sc, std::span<const int32_t>(&tc, 1), false}};
        const auto out = gpu->forward_batch(chunks);
        EXPECT_EQ(0, std::memcmp(out[0].data(), alone_d1.data(), alone_d1.size() * 4)) << "decode in a batch of 3";
    }
    {
        const auto d = gpu->forward(sa, std::span<const int32_t>(&t2, 1), false);
        EXPECT_EQ(0, std::memcmp(d.data(), alone_d2.data(), alone_d2.size() * 4)) << "decode alone after a batch";
    }
}

}  // namespace
}  // namespace deepinfer
