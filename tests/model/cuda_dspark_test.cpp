// SPDX-License-Identifier: Apache-2.0
// The DSpark drafters on the GPU against the CPU drafters: DeepSeek-V4.1's (CudaV41Model::drafter() vs
// V41Model's DSparkDrafter, tiny V4.1 checkpoints with every layer kind, Engram, window 8) and
// DeepSeek-V4-Flash-0731's (CudaModel::drafter() vs CpuModel's V4DSparkDrafter, the v4_tiny_a shape
// with sliding/CSA/HCA and hash-routed layers, window 16), each with a 3-stage drafter, in exact (bf16)
// and official (FP8/FP4) numerics with the reference GEMMs:
//   * the ops: tap_mean, dspark_attention (both softmax forms) and dspark_markov_step against the CPU
//     formulas (tap means, dspark_common.cpp dspark_attention_core + the output rounding and inverse
//     RoPE, the Markov step's logits and confidence);
//   * lockstep: the same sequences on both models through chunked prefill (a chunk longer than the
//     ring), rounds of draft -> verify pass -> truncate (none / some / all accepted) and a fork: the
//     logits of every verify row, the drafts, the sampled drafts' distributions and the confidences
//     bit-identical (memcmp);
//   * attach adds the rings' bytes, only before the first forward; drafting and verify passes allocate
//     no device memory and the workspace (sized for a forward or a draft of every sequence) holds;
//   * the engine on the GPU: greedy output token-identical to no speculation (k = 1, 3, 5, scheduler
//     on/off, async on/off, batch 1 and 6), and sampled output equal to the CPU engine's speculative
//     run with the same seeds. Skips without a GPU.
#include <gtest/gtest.h>

// GCC 12 reports false -Wrestrict warnings on inlined std::string assignments and concatenations
// (GCC bug 105329) in this file's fixtures.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "backends/cpu/primitives.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "backends/cuda/model/dspark_markov.h"
#include "backends/cuda/model/rope_tables.h"
#include "backends/cuda/ops.h"
#include "deepinfer/check.h"
#include "deepinfer/drafter.h"
#include "deepinfer/engine.h"
#include "deepinfer/float_formats.h"
#include "deepinfer/model_v41.h"
#include "deepinfer/synthetic.h"
#include "deepinfer/synthetic_v41.h"
#include "engine/spec_test_util.h"
#include "model/draft_device_probs.h"
#include "model/dspark_common.h"
#include "model/paged_rows.h"
#include "model/state.h"
#include "unit/fixtures.h"
#include "v41/tiny_published_config.h"

namespace deepinfer {
namespace {

ModelOptions options(int64_t max_seqs = 256, int64_t max_tokens = 2048) {
    ModelOptions o;
    o.tokenizer_json = DI_TOKENIZER_JSON;
    o.max_num_seqs = max_seqs;
    o.max_batch_tokens = max_tokens;
    return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Where two drafts' distributions ([drafts, V] f32) first differ, with each row's sum and extremes.
std::string first_difference(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
    if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], 4) == 0) continue;
        const size_t row = i / size_t(V), at = row * size_t(V);
        double sa = 0, sb = 0;
        for (int64_t v = 0; v < V; ++v) sa += a[at + size_t(v)], sb += b[at + size_t(v)];
        return "draft " + std::to_string(row) + " id " + std::to_string(i - at) + ": " + std::to_string(a[i]) + " vs " +
               std::to_string(b[i]) + "; row sums " + std::to_string(sa) + " vs " + std::to_string(sb) + "; id 0 " +
               std::to_string(a[at]) + " vs " + std::to_string(b[at]) + "; last id " + std::to_string(a[at + size_t(V) - 1]) +
               " vs " + std::to_string(b[at + size_t(V) - 1]);
    }
    return "equal";
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % uint32_t(vocab - 1));  // never the noise id
    return t;
}

// A tiny V4.1 checkpoint with the drafter, written once per process: official = FP8 linears and FP4
// experts, else bf16; `agree`: markov rank = hidden size, rewritten so the drafter agrees with the target.
std::string fixture(bool official, bool agree) {
    static std::map<std::pair<bool, bool>, std::string> dirs;
    std::string& dir = dirs[{official, agree}];
    if (dir.empty()) {
        dir = (std::filesystem::temp_directory_path() /
               ("deepinfer_cuda_dspark_" + std::to_string(official) + std::to_string(agree) + "_" + std::to_string(::getpid())))
                  .string();
        nlohmann::ordered_json j = tiny_published_config();
        j.erase("vision_config");
        if (agree) j["text_config"]["dspark_markov_rank"] = j["text_config"]["hidden_size"];
        SyntheticCheckpointOptions o;
        o.seed = agree ? 23 : 17;
        o.fp8_linears = o.fp4_experts = official;
        if (!agree) o.residual_damping = 0.5;
        write_synthetic_v41_checkpoint(dir, j.dump(2), o);
        if (agree) make_dspark_agree_with_target(dir);
    }
    return dir;
}

// A tiny DeepSeek-V4 checkpoint with a V4-Flash-0731 DSpark drafter (the v4_tiny_a shape: sliding, CSA
// and HCA layers, hash-routed layers, window 16; tests/engine/dspark_v4_fixtures.h), written once per
// process: official = FP8 linears and FP4 experts (widths multiples of 128), else bf16; `agree`: the
// drafter rewritten to agree with the target.
std::string v4_fixture(bool official, bool agree) {
    static std::map<std::pair<bool, bool>, std::string> dirs;
    std::string& dir = dirs[{official, agree}];
    if (dir.empty()) {
        dir = (std::filesystem::temp_directory_path() /
               ("deepinfer_cuda_dspark_v4_" + std::to_string(official) + std::to_string(agree) + "_" + std::to_string(::getpid())))
                  .string();
        std::ifstream in(test::data_path("models/v4_tiny_a_mtp/config.json"));
        nlohmann::json j = nlohmann::json::parse(in);
        j["num_nextn_predict_layers"] = 1;  // vestigial in the 0731 HF config: 3 stages are stored
        j["dspark_block_size"] = 5;
        j["dspark_noise_token_id"] = int64_t(j["vocab_size"]) - 1;
        j["dspark_markov_rank"] = agree ? j["hidden_size"] : nlohmann::json(16);
        j["dspark_n_routed_experts"] = 4;
        j["dspark_num_experts_per_tok"] = 2;
        if (official) j["hidden_size"] = j["q_lora_rank"] = j["o_lora_rank"] = j["moe_intermediate_size"] = 128;
        SyntheticCheckpointOptions o;
        o.seed = agree ? 23 : 17;
        o.fp8_linears = o.fp4_experts = official;
        o.residual_damping = 0.5;
        o.dspark_stages = 3;
        write_synthetic_checkpoint(dir, j.dump(2), o);
        if (agree) make_v4_dspark_agree_with_target(dir);
    }
    return dir;
}

template <class T>
std::unique_ptr<cuda::DeviceBuffer> upload(const std::vector<T>& v) {
    auto b = std::make_unique<cuda::DeviceBuffer>(std::max<size_t>(v.size() * sizeof(T), 1));
    if (!v.empty()) b->copy_from_host(v.data(), v.size() * sizeof(T));
    return b;
}
template <class T>
std::vector<T> download(const cuda::DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    b.copy_to_host(v.data(), n * sizeof(T));
    return v;
}

// ---- The ops against the CPU formulas --------------------------------------------------------------

TEST(CudaDSparkOps, TapMeanEqualsTheCpuMean) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int64_t rows = 5, hc = 4, D = 40, T = 3, num = 3;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 2.f);
    std::vector<float> x(size_t(rows * hc * D));
    for (float& v : x) v = nd(rng);
    const std::vector<int32_t> src = {4, 0, 2};
    for (bool round : {false, true}) {
        auto dx = upload(x), ds = upload(src);
        cuda::DeviceBuffer out(size_t(num * T * D) * 4);
        cuda::fill_zero(out.data(), out.nbytes(), cuda::Stream{});
        cuda::tap_mean({.x = static_cast<const float*>(dx->data()), .src_row = static_cast<const int32_t*>(ds->data()),
                        .num = num, .hc = hc, .hidden = D, .out = static_cast<float*>(out.data()) + D, .ld = T * D,
                        .round_bf16 = round},
                       cuda::Stream{});
        const auto got = download<float>(out, size_t(num * T * D));
        for (int64_t m = 0; m < num; ++m)
            for (int64_t d = 0; d < D; ++d) {
                float s = 0.0f;
                for (int64_t j = 0; j < hc; ++j) s += x[size_t((src[size_t(m)] * hc + j) * D + d)];
                float want = s / float(hc);
                if (round) want = cpu::round_bf16(want);
                ASSERT_EQ(got[size_t(m * T * D + D + d)], want) << m << " " << d;
                ASSERT_EQ(got[size_t(m * T * D + d)], 0.0f);  // other column blocks untouched
            }
    }
}

// dspark_attention against dspark_attention_core (+ the output rounding and inverse RoPE of
// model/v41/dspark.cpp) with rings holding FP8-QAT rows (f32 on the CPU, compact codes on the GPU),
// anchors before, at and past the window, and a request whose ring has wrapped.
TEST(CudaDSparkOps, AttentionEqualsTheCpuCore) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int64_t H = 3, hd = 64, G = 5, W = 8, rows = W + kRingHeadroom, rope = 16;
    const std::vector<int64_t> anchors = {1, 8, 30};
    const int64_t N = static_cast<int64_t>(anchors.size()), S = N * G;
    std::mt19937 rng(2);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto pool = std::make_shared<StatePool>(size_t(1) << 20, 4096);
    std::vector<DSparkRings> cpu_rings(static_cast<size_t>(N));
    std::vector<std::unique_ptr<cuda::DeviceBuffer>> rings;
    const cpu::RopeTable table(RopeParams{}, rope);
    const int64_t row_bytes = cuda::cache_row_bytes(cuda::CacheFormat::kFp8Ue8m0, hd, 32);
    for (int64_t i = 0; i < N; ++i) {
        attach_dspark_rings(cpu_rings[size_t(i)], 1, W, hd, pool);
        // Context rows of the positions a ring of `rows` holds before the anchor (the last request's has wrapped).
        const int64_t lo = std::max<int64_t>(0, anchors[size_t(i)] - rows), n = anchors[size_t(i)] - lo;
        std::vector<float> kv(size_t(n * hd));
        for (float& v : kv) v = nd(rng);
        auto dkv = upload(kv);
        auto ring = std::make_unique<cuda::DeviceBuffer>(size_t(rows * row_bytes));
        std::vector<uint8_t*> dst;
        for (int64_t p = lo; p < anchors[size_t(i)]; ++p)
            dst.push_back(static_cast<uint8_t*>(ring->data()) + (p % rows) * row_bytes);
        auto ddst = upload(dst);
        cuda::qat_rows({.x = static_cast<float*>(dkv->data()), .rows = n, .n = hd, .block = 32,
                        .format = cuda::CacheFormat::kFp8Ue8m0, .fake_quant = true,
                        .dst = static_cast<uint8_t* const*>(ddst->data())},
                       cuda::Stream{});
        kv = download<float>(*dkv, kv.size());  // the QAT values, as the CPU ring keeps them
        write_dspark_ring_rows(cpu_rings[size_t(i)], 0, lo, n, kv.data(), hd);
        rings.push_back(std::move(ring));
    }
    std::vector<float> q(size_t(S * H * hd)), bkv(size_t(S * hd)), sink(static_cast<size_t>(H));
    for (float& v : q) v = nd(rng);
    for (float& v : bkv) v = cpu::round_bf16(nd(rng));
    for (float& v : sink) v = nd(rng);
    const std::vector<float> cos_sin = cuda::rope_cos_sin(table, 64);
    std::vector<const uint8_t*> ring_ptrs;
    for (const auto& r : rings) ring_ptrs.push_back(static_cast<const uint8_t*>(r->data()));
    std::vector<int32_t> apos(anchors.begin(), anchors.end());
    auto dq = upload(q), dbkv = upload(bkv), dsink = upload(sink), dcs = upload(cos_sin), dr = upload(ring_ptrs),
         dap = upload(apos);
    for (int variant = 0; variant < 4; ++variant) {
        const bool official = variant % 2 == 1, sum_then_divide = variant >= 2;  // V4.1's form, then V4's
        cuda::DeviceBuffer scratch(size_t(S * H * (W + G)) * 4), out(size_t(S * H * hd) * 4);
        cuda::dspark_attention({.q = static_cast<const float*>(dq->data()), .block_kv = static_cast<const float*>(dbkv->data()),
                                .rings = static_cast<const uint8_t* const*>(dr->data()),
                                .anchor_positions = static_cast<const int32_t*>(dap->data()), .requests = N, .block = G,
                                .heads = H, .head_dim = hd, .window = W, .window_rows = rows,
                                .ring_format = cuda::CacheFormat::kFp8Ue8m0, .ring_block = 32,
                                .sink = static_cast<const float*>(dsink->data()), .scratch = static_cast<float*>(scratch.data()),
                                .cos_sin = static_cast<const float*>(dcs->data()), .rope_dim = rope,
                                .softmax_scale = 1.0f / std::sqrt(float(hd)), .official = official,
                                .sum_then_divide = sum_then_divide, .out = static_cast<float*>(out.data())},
                               cuda::Stream{});
        const auto got = download<float>(out, size_t(S * H * hd));
        std::vector<const DSparkRings*> rp;
        for (const auto& r : cpu_rings) rp.push_back(&r);
        std::vector<float> want(size_t(S * H * hd));
        dspark_attention_core({.q = q.data(), .block_kv = bkv.data(), .rings = rp, .anchor_positions = anchors, .stage = 0,
                               .block = G, .heads = H, .head_dim = hd, .window = W, .sink = sink.data(),
                               .form = sum_then_divide ? DSparkSoftmaxForm::kSumThenDivide : DSparkSoftmaxForm::kProbsThenSum,
                               .round_bf16 = official, .o = want.data()});
        for (int64_t t = 0; t < S * H; ++t) {
            float* o = want.data() + t * hd;
            if (official)
                for (int64_t d = 0; d < hd; ++d) o[d] = cpu::round_bf16(o[d]);
            // inverse RoPE at the row's position (model/v41/dspark.cpp rope_row), rope dims rounded (official)
            const int64_t pos = anchors[size_t(t / H / G)] + (t / H) % G;
            table.apply(o, hd, pos, /*inverse=*/true);
            if (official)
                for (int64_t d = hd - rope; d < hd; ++d) o[d] = cpu::round_bf16(o[d]);
        }
        EXPECT_TRUE(same_bits(got, want)) << "official " << official << " sum_then_divide " << sum_then_divide;
    }
}

TEST(CudaDSparkOps, MarkovStepEqualsTheCpuFormulas) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int64_t N = 4, G = 5, V = 300, D = 36, r = 13, rows = 3, k = 2;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto randv = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = nd(rng);
        return v;
    };
    const auto U = randv(N * G * V), y = randv(N * G * D), bias = randv(rows * V), e = randv(rows * r), w = randv(D + r);
    auto dU = upload(U), dy = upload(y), db = upload(bias), de = upload(e), dw = upload(w);
    cuda::DeviceBuffer logits(size_t(rows * V) * 4), conf(size_t(rows) * 4);
    cuda::dspark_markov_step({.U = static_cast<const float*>(dU->data()), .y = static_cast<const float*>(dy->data()),
                              .bias = static_cast<const float*>(db->data()), .e = static_cast<const float*>(de->data()),
                              .weight = static_cast<const float*>(dw->data()), .rows = rows, .block = G, .step = k,
                              .vocab = V, .hidden = D, .rank = r, .logits = static_cast<float*>(logits.data()),
                              .confidence = static_cast<float*>(conf.data())},
                             cuda::Stream{});
    const auto gl = download<float>(logits, size_t(rows * V)), gc = download<float>(conf, size_t(rows));
    for (int64_t a = 0; a < rows; ++a) {
        const int64_t row = a * G + k;
        for (int64_t v = 0; v < V; ++v) ASSERT_EQ(gl[size_t(a * V + v)], U[size_t(row * V + v)] + bias[size_t(a * V + v)]);
        std::vector<float> cat(y.begin() + row * D, y.begin() + (row + 1) * D);
        cat.insert(cat.end(), e.begin() + a * r, e.begin() + (a + 1) * r);
        EXPECT_EQ(gc[size_t(a)], cpu::sigmoid(cpu::dot(w.data(), cat.data(), D + r))) << a;
    }
}

// The Markov loop with fast GEMMs (the bias β = W1[x]·W2ᵀ on tensor cores, BF16 W2) against the exact loop
// (the f32 reference kernel in the CPU's order) on the same inputs: 24 requests (5, 5, 4, 2, 1 still
// drafting per step), greedy and sampled rows. W1's rows are bf16, so only the order of β's sum differs:
// the drafts and confidences are equal, the sampled distributions within 2e-6 of each other.
TEST(CudaDSparkOps, FastMarkovDraftFollowsTheExactDraft) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const int64_t R = 24, G = 5, V = 4099, D = 32, r = 64;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto bf16_table = [&](int64_t n, float scale) {
        std::vector<uint16_t> v(static_cast<size_t>(n));
        for (uint16_t& x : v) x = f32_to_bf16(scale * nd(rng));
        return v;
    };
    auto randv = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = nd(rng);
        return v;
    };
    const auto w1 = bf16_table(V * r, 0.5f), w2 = bf16_table(V * r, 0.25f);
    const auto U = randv(R * G * V), y = randv(R * G * D), conf_w = randv(D + r);
    std::vector<int32_t> anchors(size_t(R), 0), sampled(size_t(R), 0);
    std::vector<double> temps(size_t(R), 0.0), unif(size_t(R * G), 0.0);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    for (int64_t a = 0; a < R; ++a) {
        anchors[size_t(a)] = static_cast<int32_t>(rng() % uint32_t(V));
        sampled[size_t(a)] = a % 3 != 0;
        temps[size_t(a)] = a % 3 == 0 ? 0.0 : a % 3 == 1 ? 0.8 : 1.3;
        for (int64_t k = 0; k < G; ++k) unif[size_t(a * G + k)] = u01(rng);
    }
    auto dw1 = upload(w1), dw2 = upload(w2), dU = upload(U), dy = upload(y), dc = upload(conf_w);
    auto da = upload(anchors), ds = upload(sampled), dt = upload(temps), du = upload(unif);
    cuda::DeviceLinear embed{.weight = dw1->data(), .kind = cuda::WeightKind::kBF16, .out_features = V, .in_features = r};
    cuda::DeviceLinear head = embed;
    head.weight = dw2->data();
    ASSERT_TRUE(cuda::dspark_markov_fast_bias(head, true));
    ASSERT_FALSE(cuda::dspark_markov_fast_bias(head, false));
    const std::vector<int64_t> active = {24, 24, 20, 12, 3};
    struct Out {
        std::vector<int32_t> drafts;
        std::vector<float> conf, probs;
    };
    auto run = [&](bool fast) {
        cuda::DeviceArena arena(cuda::dspark_markov_workspace(R, G, V, r, cuda::dspark_markov_fast_bias(head, fast)));
        cuda::PinnedBuffer out(size_t(2 * G * R) * 4);
        cuda::DeviceBuffer probs(size_t(G * R * V) * 4);
        cuda::dspark_markov_draft({.embed = &embed, .head = &head, .confidence = static_cast<const float*>(dc->data()),
                                   .U = static_cast<const float*>(dU->data()), .y = static_cast<const float*>(dy->data()),
                                   .anchors = static_cast<const int32_t*>(da->data()),
                                   .temperature = static_cast<const double*>(dt->data()),
                                   .sampled = static_cast<const int32_t*>(ds->data()),
                                   .uniforms = static_cast<const double*>(du->data()), .active = active, .requests = R,
                                   .block = G, .vocab = V, .hidden = D, .rank = r,
                                   .host_out = static_cast<uint8_t*>(out.host()),
                                   .device_probs = static_cast<float*>(probs.data()), .fast = fast},
                                  arena, cuda::Stream{});
        cuda::synchronize();
        Out o;
        o.drafts.resize(size_t(G * R));
        o.conf.resize(size_t(G * R));
        std::memcpy(o.drafts.data(), out.host(), o.drafts.size() * 4);
        std::memcpy(o.conf.data(), static_cast<const uint8_t*>(out.host()) + G * R * 4, o.conf.size() * 4);
        o.probs = download<float>(probs, size_t(G * R * V));
        return o;
    };
    const Out exact = run(false), fast = run(true);
    int64_t sampled_rows = 0;
    for (int64_t k = 0; k < G; ++k)
        for (int64_t a = 0; a < active[size_t(k)]; ++a) {
            const size_t i = size_t(k * R + a);
            EXPECT_EQ(fast.drafts[i], exact.drafts[i]) << "step " << k << " request " << a;
            EXPECT_EQ(fast.conf[i], exact.conf[i]) << "step " << k << " request " << a;
            if (!sampled[size_t(a)]) continue;
            ++sampled_rows;
            double worst = 0, sum = 0;
            for (int64_t v = 0; v < V; ++v) {
                worst = std::max(worst, double(std::fabs(fast.probs[i * V + size_t(v)] - exact.probs[i * V + size_t(v)])));
                sum += exact.probs[i * V + size_t(v)];
            }
            EXPECT_LE(worst, 2e-6) << "step " << k << " request " << a;
            EXPECT_NEAR(sum, 1.0, 1e-4);
        }
    EXPECT_GT(sampled_rows, 40);
    EXPECT_NE(fast.probs, exact.probs) << "the fast loop summed β in the reference order: did it run?";
}

// ---- The drafter against the CPU drafter ------------------------------------------------------------

struct Pair {
    std::vector<Sequence> cpu, gpu;
};

struct Case {
    bool v4;        // DeepSeek-V4 with the 0731 drafter, else V4.1
    bool official;  // numerics
};

class CudaDSpark : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        const bool v4 = GetParam().v4, official = GetParam().official;
        const std::string dir = v4 ? v4_fixture(official, false) : fixture(official, false);
        cpu_ = Model::load(dir, options());
        gpu_ = v4 ? cuda::load_cuda_model(dir, options(8, 256)) : cuda::load_cuda_v41_model(dir, options(8, 256), {});
        ASSERT_NE(cpu_->drafter(), nullptr);
        ASSERT_NE(gpu_->drafter(), nullptr);
        EXPECT_EQ(gpu_->drafter()->method(), "dspark");
        EXPECT_EQ(gpu_->drafter()->max_drafts(), cpu_->drafter()->max_drafts());
        EXPECT_EQ(gpu_->numerics(), official ? Numerics::kOfficial : Numerics::kExact);
        EXPECT_EQ(cpu_->numerics(), gpu_->numerics());
    }
    // The same GPU model without CUDA graphs (the eager path the graph tests compare with).
    std::unique_ptr<Model> eager_model() const {
        const bool v4 = GetParam().v4, official = GetParam().official;
        const std::string dir = v4 ? v4_fixture(official, false) : fixture(official, false);
        ModelOptions no_graphs = options(8, 256);
        no_graphs.cuda_graphs = false;
        return v4 ? cuda::load_cuda_model(dir, no_graphs) : cuda::load_cuda_v41_model(dir, no_graphs, {});
    }
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

TEST_P(CudaDSpark, DraftsEqualTheCpuDrafterThroughPrefillVerifyAndRollback) {
    const int64_t V = cpu_->info().vocab_size;
    std::mt19937 rng(7);
    Pair p;
    for (int i = 0; i < 3; ++i) {
        p.cpu.push_back(cpu_->new_sequence());
        p.gpu.push_back(gpu_->new_sequence());
        cpu_->drafter()->attach(p.cpu.back());
        gpu_->drafter()->attach(p.gpu.back());
    }
    // Prompts of 5, 23 and 70 tokens (the last in chunks of 9, 40 and 21: 40 rows > the 24-row ring).
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
    const uint64_t allocations = cuda::device_allocation_count();
    std::vector<int32_t> anchors = random_tokens(rng, 3, V);
    for (int round = 0; round < 5; ++round) {
        const std::vector<int64_t> counts = {1 + round % 5, 5, 5 - round % 3};
        const std::vector<double> temps = {0.0, 0.8, 1.3};
        const std::vector<std::vector<double>> u = {{}, uniforms(counts[1]), uniforms(counts[2])};
        const std::vector<Draft> d = draft(p, anchors, counts, temps, u, "round " + std::to_string(round));
        std::vector<std::vector<int32_t>> verify;
        for (size_t i = 0; i < 3; ++i) {
            std::vector<int32_t> rows = {anchors[i]};
            rows.insert(rows.end(), d[i].tokens.begin(), d[i].tokens.end());
            verify.push_back(rows);
        }
        forward(p, verify, true);  // the verify rows' logits bit-identical too
        for (size_t i = 0; i < 3; ++i) {  // accept none, some, all (rotating), then a new anchor
            const int64_t n = static_cast<int64_t>(verify[i].size()), before = p.cpu[i].num_tokens() - n;
            const int64_t accepted = (int64_t(i) + round) % 3 == 0 ? 0 : (int64_t(i) + round) % 3 == 1 ? n / 2 : n - 1;
            p.cpu[i].truncate(before + 1 + accepted);
            p.gpu[i].truncate(before + 1 + accepted);
            anchors[i] = static_cast<int32_t>(rng() % uint32_t(V - 1));
        }
    }
    EXPECT_EQ(cuda::device_allocation_count(), allocations) << "drafting or verify passes allocated device memory";
    // A fork drafts as its original.
    Pair f;
    f.cpu.push_back(p.cpu[1].fork());
    f.gpu.push_back(p.gpu[1].fork());
    draft(f, {anchors[1]}, {4}, {0.9}, {uniforms(4)}, "fork");
    const auto st = cuda::cuda_model_stats(*gpu_);
    EXPECT_LE(st.workspace_high_water, st.workspace_bytes);
    EXPECT_EQ(st.workspace_bytes, st.workspace_need_max);
}

TEST_P(CudaDSpark, AttachAddsTheRingBytesAndOnlyBeforeTheFirstForward) {
    Sequence s = gpu_->new_sequence();
    const size_t plain = s.state_bytes();
    gpu_->drafter()->attach(s);
    const uint64_t extra = gpu_->drafter()->state_bytes(16 << 10);
    if (GetParam().v4) {  // 3 stages x 32 rows x 64 f32, in whole pages of the device pool (device_sequence_state.h)
        const uint64_t page = cuda::cuda_model_stats(*gpu_).state_page_bytes;
        const uint64_t ring = (16 + kRingHeadroom) * 64 * 4, per_page = page / ring;  // (a ring never straddles pages)
        EXPECT_EQ(extra, (3 + per_page - 1) / per_page * page);
    } else {  // 3 stages x 24 rows x 66 B (FP8 + ue8m0), in whole pages of the device pool (cuda_v41_state.h;
              // rings at 256-byte aligned offsets, never straddling pages)
        const uint64_t page = cuda::cuda_model_stats(*gpu_).state_page_bytes;
        const uint64_t ring = (8 + kRingHeadroom) * (64 + 64 / 32), slot = (ring + 255) / 256 * 256;
        const uint64_t per_page = (page - ring) / slot + 1;
        EXPECT_EQ(extra, (3 + per_page - 1) / per_page * page);
    }
    EXPECT_EQ(s.state_bytes(), plain + extra);
    EXPECT_EQ(s.fork().state_bytes(), plain + extra);
    const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
    gpu_->forward(s, prompt, false);
    Sequence late = gpu_->new_sequence();
    gpu_->forward(late, prompt, false);
    EXPECT_THROW(gpu_->drafter()->attach(late), Error);
    const DraftRequest r{&late, 2, 3, 0.0, {}};
    EXPECT_THROW(gpu_->drafter()->draft(std::span<const DraftRequest>(&r, 1)), Error);
    const DraftRequest too_many{&s, 2, 6, 0.0, {}};  // beyond the block
    EXPECT_THROW(gpu_->drafter()->draft(std::span<const DraftRequest>(&too_many, 1)), Error);
}

// Draft calls replay a CUDA graph per request bucket and sampling (draft_graphs.h): their drafts,
// confidences and sampled distributions equal a model's without graphs and the CPU drafter's bit for
// bit, through replays whose inputs moved (positions after verify passes and rollbacks, other requests
// and rings, other draft counts, other uniforms; 1..6 requests in buckets 1, 2, 4, 8; two calls with a
// sampled request, in one bucket: a capture and a replay).
TEST_P(CudaDSpark, DraftGraphsEqualEagerDrafts) {
    const std::unique_ptr<Model> eager = eager_model();
    const Model* models[3] = {cpu_.get(), gpu_.get(), eager.get()};
    const int64_t V = cpu_->info().vocab_size, N = 6;
    std::mt19937 rng(11);
    std::vector<Sequence> seqs[3];
    for (int64_t i = 0; i < N; ++i) {
        const std::vector<int32_t> prompt = random_tokens(rng, 3 + 9 * i, V);  // up to 48 rows (> the ring)
        for (int m = 0; m < 3; ++m) {
            seqs[m].push_back(models[m]->new_sequence());
            models[m]->drafter()->attach(seqs[m].back());
            models[m]->forward(seqs[m].back(), prompt, false);
        }
    }
    std::vector<int32_t> anchors = random_tokens(rng, N, V);
    const int64_t sizes[] = {1, 2, 3, 5, 6, 4, 1, 6, 5};
    for (int round = 0; round < 9; ++round) {
        const bool sampled = round == 4 || round == 7;  // the sampled variant of bucket 8: captured, replayed
        const auto before = cuda::cuda_model_stats(*gpu_);
        std::vector<int64_t> ids;
        for (int64_t j = 0; j < sizes[round]; ++j) ids.push_back((round + j) % N);
        std::vector<Draft> d[3];
        // The sampled request's uniforms (DraftRequest holds a span: they outlive the calls).
        std::vector<double> u;
        for (int64_t k = 0; sampled && k < 1 + (ids.front() + round) % 5; ++k)
            u.push_back(round == 4 ? 0.37 : 0.05 + 0.2 * double(k));
        for (int m = 0; m < 3; ++m) {
            std::vector<DraftRequest> reqs;
            for (int64_t i : ids) {
                const bool smp = sampled && i == ids.front();
                reqs.push_back({&seqs[m][size_t(i)], anchors[size_t(i)], 1 + (i + round) % 5, smp ? 0.9 : 0.0,
                                smp ? std::span<const double>(u) : std::span<const double>()});
            }
            d[m] = models[m]->drafter()->draft(reqs);
        }
        const auto after = cuda::cuda_model_stats(*gpu_);
        const std::string what = "round " + std::to_string(round);
        EXPECT_EQ(after.draft_graph_replays, before.draft_graph_replays + 1) << what;
        for (size_t k = 0; k < ids.size(); ++k) {
            EXPECT_EQ(int64_t(d[1][k].tokens.size()), 1 + (ids[k] + round) % 5) << what;
            EXPECT_EQ(d[1][k].tokens, d[2][k].tokens) << what << " request " << ids[k];
            EXPECT_TRUE(same_bits(d[1][k].confidence, d[2][k].confidence)) << what << " request " << ids[k];
            EXPECT_EQ(d[1][k].tokens, d[0][k].tokens) << what << " request " << ids[k];
            EXPECT_TRUE(same_bits(d[1][k].confidence, d[0][k].confidence)) << what << " request " << ids[k];
            EXPECT_TRUE(same_bits(d[1][k].probs, d[2][k].probs)) << what << " request " << ids[k];
            EXPECT_TRUE(same_bits(d[1][k].probs, d[0][k].probs))
                << what << " request " << ids[k] << ": " << first_difference(d[1][k].probs, d[0][k].probs, V);
        }
        // Verify passes, then keep none, some or all of each request's drafts (rotating), new anchors.
        for (size_t k = 0; k < ids.size(); ++k) {
            const size_t i = size_t(ids[k]);
            std::vector<int32_t> rows = {anchors[i]};
            rows.insert(rows.end(), d[0][k].tokens.begin(), d[0][k].tokens.end());
            const int64_t n = static_cast<int64_t>(rows.size());
            const int64_t keep = (int64_t(i) + round) % 3 == 0 ? 0 : (int64_t(i) + round) % 3 == 1 ? n / 2 : n - 1;
            for (int m = 0; m < 3; ++m) {
                const int64_t at = seqs[m][i].num_tokens();
                models[m]->forward(seqs[m][i], rows, true);
                seqs[m][i].truncate(at + 1 + keep);
            }
            anchors[i] = static_cast<int32_t>(rng() % uint32_t(V - 1));
        }
    }
    const auto st = cuda::cuda_model_stats(*gpu_);
    EXPECT_EQ(st.draft_graph_captures, 5);  // buckets 1, 2, 4, 8, each captured once, and 8's sampled variant
    EXPECT_EQ(st.draft_graph_replays, 9);   // every call
    EXPECT_EQ(cuda::cuda_model_stats(*eager).draft_graph_captures + cuda::cuda_model_stats(*eager).draft_graph_replays, 0);
    EXPECT_LE(st.workspace_high_water, st.workspace_bytes);
}

// Decode steps whose rows tap for the drafter replay CUDA graphs too (a variant per bucket: every row
// taps, the rows that skip the drafter and the padding write to a sink row): logits equal the eager
// model's and the CPU model's bit for bit, and the context rows they write give the same drafts as the
// eager model's (steps with all, some, one or no rows tapping; buckets 4 and 8).
TEST_P(CudaDSpark, TappedDecodeGraphsEqualEagerSteps) {
    const std::unique_ptr<Model> eager = eager_model();
    const Model* models[3] = {cpu_.get(), gpu_.get(), eager.get()};
    const int64_t V = cpu_->info().vocab_size, N = 5;
    std::mt19937 rng(13);
    std::vector<Sequence> seqs[3];
    for (int64_t i = 0; i < N; ++i) {
        const std::vector<int32_t> prompt = random_tokens(rng, 4 + 8 * i, V);
        for (int m = 0; m < 3; ++m) {
            seqs[m].push_back(models[m]->new_sequence());
            models[m]->drafter()->attach(seqs[m].back());
            models[m]->forward(seqs[m].back(), prompt, false);
        }
    }
    const auto before = cuda::cuda_model_stats(*gpu_);
    // Per step the sequences that run and which of them tap.
    const std::vector<std::vector<int64_t>> runs = {{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4},
                                                    {0, 1, 2, 3, 4}, {1, 2, 4},       {0, 1, 2, 3, 4}};
    const std::vector<std::vector<int>> taps = {{1, 1, 1, 1, 1}, {0, 0, 0, 0, 0}, {1, 0, 1, 0, 1},
                                                {0, 0, 1, 0, 0}, {1, 1, 1},       {1, 1, 1, 1, 1}};
    for (size_t step = 0; step < runs.size(); ++step) {
        const std::vector<int32_t> toks = random_tokens(rng, int64_t(runs[step].size()), V);
        std::vector<float> logits[3];
        for (int m = 0; m < 3; ++m) {
            std::vector<SequenceChunk> chunks;
            for (size_t k = 0; k < runs[step].size(); ++k) {
                chunks.push_back({&seqs[m][size_t(runs[step][k])], std::span<const int32_t>(&toks[k], 1), false, {}});
                chunks.back().drafter_taps = taps[step][k] != 0;
            }
            for (const auto& l : models[m]->forward_batch(chunks)) logits[m].insert(logits[m].end(), l.begin(), l.end());
        }
        EXPECT_TRUE(same_bits(logits[1], logits[2])) << "step " << step;
        EXPECT_TRUE(same_bits(logits[1], logits[0])) << "step " << step;
    }
    const auto after = cuda::cuda_model_stats(*gpu_);
    EXPECT_EQ(after.graph_replays - before.graph_replays, int64_t(runs.size()));  // every step, tapped or not
    EXPECT_EQ(cuda::cuda_model_stats(*eager).graph_replays, 0);
    // The rings: greedy drafts from every sequence equal the eager model's.
    std::vector<int32_t> anchors = random_tokens(rng, N, V);
    std::vector<Draft> d[3];
    for (int m = 1; m < 3; ++m) {
        std::vector<DraftRequest> reqs;
        for (int64_t i = 0; i < N; ++i) reqs.push_back({&seqs[m][size_t(i)], anchors[size_t(i)], 5, 0.0, {}});
        d[m] = models[m]->drafter()->draft(reqs);
    }
    for (int64_t i = 0; i < N; ++i) {
        EXPECT_EQ(d[1][size_t(i)].tokens, d[2][size_t(i)].tokens) << "request " << i;
        EXPECT_TRUE(same_bits(d[1][size_t(i)].confidence, d[2][size_t(i)].confidence)) << "request " << i;
    }
}

// Steps of short chunks (verify rows: an anchor and 0..5 drafts, some rows tapping and some not, a
// prompt's tail) replay the graph of their rows' bucket (ModelOptions::cuda_verify_graphs; V4.1: the decode
// steps' graph, V4: its short-chunk variant): every row's logits equal the eager model's and the CPU model's
// bit for bit through rollbacks, and the context rows they write give the eager model's drafts.
TEST_P(CudaDSpark, VerifyStepGraphsEqualEagerSteps) {
    const std::unique_ptr<Model> eager = eager_model();
    const Model* models[3] = {cpu_.get(), gpu_.get(), eager.get()};
    const int64_t V = cpu_->info().vocab_size, N = 5;
    std::mt19937 rng(17);
    std::vector<Sequence> seqs[3];
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < N; ++i) {
        prompts.push_back(random_tokens(rng, 6 + 7 * i, V));
        for (int m = 0; m < 3; ++m) {
            seqs[m].push_back(models[m]->new_sequence());
            models[m]->drafter()->attach(seqs[m].back());
        }
    }
    for (int64_t i = 0; i + 1 < N; ++i)  // the last sequence's prompt runs in the graph steps below
        for (int m = 0; m < 3; ++m) models[m]->forward(seqs[m][size_t(i)], prompts[size_t(i)], false);
    const auto before = cuda::cuda_model_stats(*gpu_);
    int64_t steps = 0, prompt_done = 0;
    for (int round = 0; round < 6; ++round) {
        // Chunks: sequences 0..3 verify 0..5 drafts (an anchor and random tokens), tapping or not; sequence
        // 4 runs its prompt 8 tokens a step (its last chunk shorter).
        std::vector<std::vector<int32_t>> rows(static_cast<size_t>(N));
        std::vector<int> taps(size_t(N), 1);
        for (int64_t i = 0; i + 1 < N; ++i) {
            rows[size_t(i)] = random_tokens(rng, 1 + (i + round) % 6, V);
            taps[size_t(i)] = (i + round) % 4 != 1;
        }
        const int64_t take = std::min<int64_t>(8, int64_t(prompts[N - 1].size()) - prompt_done);
        if (take > 0)
            rows[N - 1].assign(prompts[N - 1].begin() + prompt_done, prompts[N - 1].begin() + prompt_done + take);
        std::vector<float> logits[3];
        for (int m = 0; m < 3; ++m) {
            std::vector<SequenceChunk> chunks;
            for (int64_t i = 0; i < N; ++i) {
                if (rows[size_t(i)].empty()) continue;
                const bool prompt = i == N - 1;
                chunks.push_back({&seqs[m][size_t(i)], rows[size_t(i)], !prompt, {}});
                chunks.back().drafter_taps = taps[size_t(i)] != 0;
            }
            for (const auto& l : models[m]->forward_batch(chunks)) logits[m].insert(logits[m].end(), l.begin(), l.end());
        }
        ++steps;
        prompt_done += std::max<int64_t>(take, 0);
        const std::string what = "round " + std::to_string(round);
        EXPECT_TRUE(same_bits(logits[1], logits[2])) << what;
        EXPECT_TRUE(same_bits(logits[1], logits[0])) << what;
        for (int64_t i = 0; i + 1 < N; ++i) {  // keep none, some or all of the verified rows
            const int64_t n = int64_t(rows[size_t(i)].size()), keep = (i + round) % 3 == 0 ? 1 : (i + round) % 3 == 1 ? (n + 1) / 2 : n;
            for (int m = 0; m < 3; ++m) seqs[m][size_t(i)].truncate(seqs[m][size_t(i)].num_tokens() - n + keep);
        }
    }
    const auto after = cuda::cuda_model_stats(*gpu_);
    EXPECT_EQ(after.graph_replays - before.graph_replays, steps);  // every step: short chunks
    EXPECT_EQ(cuda::cuda_model_stats(*eager).graph_replays, 0);
    std::vector<int32_t> anchors = random_tokens(rng, N, V);
    std::vector<Draft> d[3];
    for (int m = 1; m < 3; ++m) {
        std::vector<DraftRequest> reqs;
        for (int64_t i = 0; i < N; ++i) reqs.push_back({&seqs[m][size_t(i)], anchors[size_t(i)], 5, 0.0, {}});
        d[m] = models[m]->drafter()->draft(reqs);
    }
    for (int64_t i = 0; i < N; ++i) {
        EXPECT_EQ(d[1][size_t(i)].tokens, d[2][size_t(i)].tokens) << "request " << i;
        EXPECT_TRUE(same_bits(d[1][size_t(i)].confidence, d[2][size_t(i)].confidence)) << "request " << i;
    }
}

// The sampled drafts' distributions the drafter keeps on the device (Draft::device_probs, draft_device_probs.h):
// in graph calls (buckets 1, 2, 4, 8: padding slots) and eager calls, with host_probs on, off and mixed,
// the device rows equal the host probs bit for bit and the drafts do not change; the buffer was reserved
// at load (no device allocation while drafting).
TEST_P(CudaDSpark, DeviceProbsEqualTheHostProbs) {
    const std::unique_ptr<Model> eager = eager_model();
    const Model* models[2] = {gpu_.get(), eager.get()};
    const int64_t V = cpu_->info().vocab_size, N = 6;
    std::mt19937 rng(31);
    std::vector<Sequence> seqs[2];
    for (int64_t i = 0; i < N; ++i) {
        const std::vector<int32_t> prompt = random_tokens(rng, 3 + 9 * i, V);
        for (int m = 0; m < 2; ++m) {
            seqs[m].push_back(models[m]->new_sequence());
            models[m]->drafter()->attach(seqs[m].back());
            models[m]->forward(seqs[m].back(), prompt, false);
        }
    }
    const uint64_t allocations = cuda::device_allocation_count();
    test::check_device_probs(*gpu_, seqs[0], true, 5, "graphs");
    test::check_device_probs(*eager, seqs[1], false, 5, "eager");
    EXPECT_EQ(cuda::device_allocation_count(), allocations) << "drafting allocated device memory";
    const auto st = cuda::cuda_model_stats(*gpu_);
    EXPECT_LE(st.workspace_high_water, st.workspace_bytes);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    if (info.param.v4) return info.param.official ? "v4_0731_official" : "v4_0731_exact";
    return info.param.official ? "v41_official" : "v41_exact";
}

// V4.1's bounded replay (ModelOptions::v41_bounded_replay, docs/v41-bounded-replay.md) of an attached
// sequence's prompt: the decoder keeps the prompt's last W rows, so the rows before them (the drafter taps
// W + headroom rows) write no context rows, as on the CPU. The replayed prefill's logits (beside a short
// prompt on the exact path in the same batch), the drafts after it and a verify pass equal the CPU's.
TEST_P(CudaDSpark, BoundedReplayDraftsEqualTheCpuDrafter) {
    if (GetParam().v4) GTEST_SKIP() << "bounded replay is DeepSeek-V4.1's";
    ModelOptions o = options(8, 256);
    o.v41_bounded_replay = true;
    const std::string dir = fixture(GetParam().official, false);
    cpu_ = Model::load(dir, o);
    gpu_ = cuda::load_cuda_v41_model(dir, o, {});
    const int64_t V = cpu_->info().vocab_size;
    std::mt19937 rng(19);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    Pair p;
    for (int i = 0; i < 2; ++i) {
        p.cpu.push_back(cpu_->new_sequence());
        p.gpu.push_back(gpu_->new_sequence());
        cpu_->drafter()->attach(p.cpu.back());
        gpu_->drafter()->attach(p.gpu.back());
    }
    forward(p, {random_tokens(rng, 70, V), random_tokens(rng, 5, V)}, false);  // 70 > W = 8: replayed
    std::vector<int32_t> anchors = random_tokens(rng, 2, V);
    for (int round = 0; round < 2; ++round) {
        std::vector<double> u(3);
        for (double& x : u) x = u01(rng);
        const std::vector<Draft> d = draft(p, anchors, {5, 3}, {0.0, 0.9}, {{}, u}, "round " + std::to_string(round));
        std::vector<std::vector<int32_t>> verify;
        for (size_t i = 0; i < 2; ++i) {
            std::vector<int32_t> rows = {anchors[i]};
            rows.insert(rows.end(), d[i].tokens.begin(), d[i].tokens.end());
            verify.push_back(rows);
        }
        forward(p, verify, true);
        anchors = random_tokens(rng, 2, V);
    }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaDSpark,
                         ::testing::Values(Case{false, false}, Case{false, true}, Case{true, false}, Case{true, true}),
                         case_name);

// ---- The engine on the GPU with DSpark speculation ------------------------------------------------

EngineConfig spec(int64_t k, bool scheduler, bool async) {
    EngineConfig c;
    c.speculative_method = "dspark";
    c.num_speculative_tokens = k;
    c.speculative_scheduler = scheduler;
    c.async_scheduling = async;
    c.max_prefill_chunk = 16;
    return c;
}

class CudaDSparkEngine : public ::testing::TestWithParam<bool> {  // V4 with the 0731 drafter, else V4.1
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
    static std::shared_ptr<const Model> gpu_model(const std::string& dir) {
        if (GetParam()) return std::shared_ptr<const Model>(cuda::load_cuda_model(dir, options()));
        return std::shared_ptr<const Model>(cuda::load_cuda_v41_model(dir, options(), {}));
    }
    static std::string dir(bool official, bool agree) { return GetParam() ? v4_fixture(official, agree) : fixture(official, agree); }
};

TEST_P(CudaDSparkEngine, GreedyIsTokenIdenticalToNoSpeculation) {
    std::shared_ptr<const Model> gpu = gpu_model(dir(false, true));
    const int64_t V = gpu->info().vocab_size;
    std::mt19937 rng(21);
    test::Requests reqs;
    for (int i = 0; i < 5; ++i) {
        SamplingParams sp = test::greedy(12 + 3 * i);
        if (i == 2) sp.repetition_penalty = 1.3;  // penalties count the accepted drafts of a step
        reqs.emplace_back("g" + std::to_string(i), random_tokens(rng, 3 + int64_t(rng() % 40), V), sp);
    }
    SamplingParams hot;  // a sampled neighbour
    hot.temperature = 1.0;
    hot.max_tokens = 9;
    hot.ignore_eos = true;
    hot.seed = 3;
    reqs.emplace_back("hot", random_tokens(rng, 17, V), hot);
    const test::RunResult plain = test::run(gpu, {}, reqs);
    int64_t accepted = 0;
    for (int64_t k : {1, 3, 5}) {
        for (bool sched : {false, true}) {
            for (bool async : {false, true}) {
                for (size_t batch : {size_t{1}, reqs.size()}) {
                    const test::Requests sub(reqs.begin(), reqs.begin() + std::ptrdiff_t(batch));
                    const test::RunResult r = test::run(gpu, spec(k, sched, async), sub);
                    const std::string what = "k=" + std::to_string(k) + " scheduler=" + std::to_string(sched) +
                                             " async=" + std::to_string(async) + " batch=" + std::to_string(batch);
                    for (const auto& [id, prompt, sp] : sub) {
                        if (sp.temperature > 0) continue;
                        EXPECT_EQ(plain.outputs.at(id).completions.at(0).token_ids, r.outputs.at(id).completions.at(0).token_ids)
                            << what << " " << id;
                    }
                    if (!sched) {
                        EXPECT_GT(r.metrics.spec_draft_tokens, 0) << what;
                    }
                    accepted += r.metrics.spec_accepted_tokens;
                }
            }
        }
    }
    EXPECT_GT(accepted, 0) << "the agreeing drafter's drafts were never accepted";
}

TEST_P(CudaDSparkEngine, SampledOutputEqualsTheCpuEnginesSpeculativeRun) {
    for (bool official : {false, true}) {
        const std::string d = dir(official, false);
        std::shared_ptr<const Model> cpu = Model::load(d, options());
        std::shared_ptr<const Model> gpu = gpu_model(d);
        const int64_t V = gpu->info().vocab_size;
        std::mt19937 rng(9);
        test::Requests reqs;
        for (int i = 0; i < 6; ++i) {
            SamplingParams sp;
            sp.temperature = i % 2 ? 0.7 : 1.2;
            if (i == 3) sp.top_k = 20;
            if (i == 5) sp.top_p = 0.9;
            if (i == 1) sp.min_p = 0.05;  // (min-p alone, and with top-p below: verified on the device too)
            if (i == 4) {
                sp.top_p = 0.8;
                sp.min_p = 0.02;
            }
            sp.max_tokens = 10 + i;
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
                    EngineConfig c = spec(k, false, async);
                    c.speculative_sample_drafts = sample_drafts;
                    const std::string what = "official " + std::to_string(official) + " sampled drafts " +
                                             std::to_string(sample_drafts) + " k=" + std::to_string(k) +
                                             " async=" + std::to_string(async);
                    test::expect_same_run_verified_on_device(test::run(cpu, c, reqs), test::run(gpu, c, reqs), reqs, what);
                }
            }
        }
    }
}

// Speculation paused by the confidence scheduler (injected step costs where it loses): the plain
// steps' passes keep nothing for the drafter, so they replay CUDA graphs; the periodic probes draft
// again from rings that missed the paused rows (valid drafts, the agreeing drafter's still accepted);
// greedy output equals no speculation. Where speculation pays, no decode step is plain. Exploring with a
// subset, steps mix rows that verify drafts and tap with rows that do neither.
TEST_P(CudaDSparkEngine, PausedSpeculationReplaysGraphsAndStaysTokenIdentical) {
    std::shared_ptr<const Model> gpu = gpu_model(dir(false, true));
    std::shared_ptr<const Model> cpu = Model::load(dir(false, true), options());
    const int64_t V = gpu->info().vocab_size;
    std::mt19937 rng(4);
    test::Requests reqs;
    for (int i = 0; i < 4; ++i)
        reqs.emplace_back("p" + std::to_string(i), random_tokens(rng, 5 + 9 * int64_t(i), V), test::greedy(90));
    const test::RunResult plain = test::run(gpu, {}, reqs);
    for (bool async : {false, true}) {
        for (int arm : {0, 1, 2}) {  // loses; pays; loses, exploring with a subset (one request of four)
            const bool loses = arm != 1;
            EngineConfig c = spec(5, true, async);
            if (arm == 2) c.speculative_subset_from = 2;
            c.speculative_step_cost = [loses](const SpeculativeStepShape& s) {
                const double per_row = s.drafter_taps && loses ? 1e-3 : 1e-5;
                return SpeculativeStepCost{.step_seconds = 1e-3 + per_row * double(s.tokens),
                                           .draft_seconds = loses ? 1e-3 : 1e-5};
            };
            const cuda::CudaModelStats before = cuda::cuda_model_stats(*gpu);
            const test::RunResult r = test::run(gpu, c, reqs);
            const cuda::CudaModelStats after = cuda::cuda_model_stats(*gpu);
            const std::string what = "async=" + std::to_string(async) + " arm=" + std::to_string(arm);
            for (const auto& [id, prompt, sp] : reqs)
                EXPECT_EQ(plain.outputs.at(id).completions.at(0).token_ids, r.outputs.at(id).completions.at(0).token_ids)
                    << what << " " << id;
            const EngineMetrics& m = r.metrics;
            // The CPU engine (its model taps every pass) takes the same decisions: the agreeing
            // drafter's drafts and confidences do not depend on the rows the GPU's paused passes missed.
            const test::RunResult cpu_run = test::run(cpu, c, reqs);
            EXPECT_EQ(cpu_run.metrics.spec_plain_steps, m.spec_plain_steps) << what;
            EXPECT_EQ(cpu_run.metrics.spec_draft_tokens, m.spec_draft_tokens) << what;
            EXPECT_EQ(cpu_run.metrics.spec_accepted_tokens, m.spec_accepted_tokens) << what;
            const int64_t graph_steps = (after.graph_replays + after.graph_captures) - (before.graph_replays + before.graph_captures);
            EXPECT_GT(m.spec_accepted_tokens, 0) << what;
            if (loses) {
                EXPECT_GT(m.spec_plain_steps, m.steps / 2) << what;
                EXPECT_GE(graph_steps, m.spec_plain_steps - 2) << what;  // every plain decode step (probes aside)
            } else {
                EXPECT_EQ(m.spec_plain_steps, 0) << what;
                // Steps of verify rows replay graphs too (V4.1: the decode graphs, V4: their short-chunk
                // variant; only the prompts' 16-row chunks do not).
                EXPECT_GT(graph_steps, m.steps / 2) << what;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaDSparkEngine, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "v4_0731" : "v41"; });

}  // namespace
}  // namespace deepinfer
