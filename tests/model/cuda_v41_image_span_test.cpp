// SPDX-License-Identifier: Apache-2.0
// Image spans (SequenceChunk::image_span, the vision seam; spec deepseek-v41-model.md §5, §6.2, §9) on
// the CUDA DeepSeek-V4.1 model against the CPU reference (V41Model) from the same checkpoint: spans
// inside one chunk, across a chunk boundary, at a sequence's start, a one-row span in a step of short
// chunks, sequences batched with and without spans (empty and all-zero flags); logits bit-identical at
// every position (the reference GEMMs, as cuda_v41_model_test.cpp), greedy continuations identical,
// a row's logits independent of its neighbours, steps with span rows eager and the decode steps after
// them replaying their CUDA graphs. The fixtures' ffn.gate.bias_vl differs from bias; turning the spans
// off changes the GPU logits from the first span row on (and not before); a copy of the checkpoint
// whose bias_vl equals bias gives other logits with spans (the router reads bias_vl) and the same
// without. Bounded replay with spans equals the CPU's replay; the expert-parallel model with one rank
// equals the plain model. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ep/cuda_ep_model.h"
#include "backends/cuda/ep/nccl_exchange.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "deepinfer/check.h"
#include "deepinfer/model.h"
#include "deepinfer/model_v41.h"
#include "model/safetensors_patcher.h"
#include "model/v41_test_options.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

struct Case {
    const char* model;  // a tests/data/v41 fixture (its bias_vl differs from bias)
    Numerics numerics;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << numerics_name(c.numerics); }

// Flags of n rows, 1 in [begin, end).
std::vector<uint8_t> span(int64_t n, int64_t begin, int64_t end) {
    std::vector<uint8_t> f(static_cast<size_t>(n), 0);
    for (int64_t t = begin; t < end; ++t) f[size_t(t)] = 1;
    return f;
}

// One chunk of the script: sequence, its token range [from, to), the flags (empty: text).
struct Part {
    size_t seq;
    int64_t from, to;
    std::vector<uint8_t> flags;
    bool all_logits;
};

// The script's prefill steps over 4 sequences of 64 tokens each.
std::vector<std::vector<Part>> span_steps() {
    return {
        // Sequences with and without spans in one batch: a span inside the chunk (10..14), a span up to
        // the chunk's end (15..19, continued in the next step), all-zero flags (text), a span at the start.
        {{0, 0, 24, span(24, 10, 15), true},
         {1, 0, 20, span(20, 15, 20), true},
         {2, 0, 33, span(33, 0, 0), true},
         {3, 0, 12, span(12, 0, 4), true}},
        // Text after a span; the span continued across the chunk boundary (positions 20..26); a one-row span.
        {{0, 24, 40, {}, true}, {1, 20, 30, span(10, 0, 7), true}, {3, 12, 13, span(1, 0, 1), false}},
        // Short chunks only (a graph step without the spans): a span of two rows, a text decode row.
        {{3, 13, 16, span(3, 0, 2), true}, {2, 33, 34, {}, false}},
    };
}

struct ScriptRun {
    std::vector<std::vector<float>> logits;  // every chunk's, in order
    std::vector<std::vector<int32_t>> greedy;  // per sequence
    int64_t span_replays = -1, decode_replays = -1;  // graph replays of the span steps / the decode steps (GPU)
};

constexpr int kDecodeSteps = 8;

// The span steps (flags cleared unless `spans`), then kDecodeSteps greedy decode steps of all four.
ScriptRun run_script(const Model& m, bool spans, bool gpu) {
    const int64_t V = m.info().vocab_size;
    std::mt19937 rng(23);
    std::vector<std::vector<int32_t>> tokens(4, std::vector<int32_t>(64));
    for (auto& t : tokens)
        for (int32_t& x : t) x = static_cast<int32_t>(rng() % uint32_t(V));
    std::vector<Sequence> seqs;
    for (int i = 0; i < 4; ++i) seqs.push_back(m.new_sequence());
    std::vector<int32_t> next(4, 0);
    ScriptRun run;
    auto replays = [&] { return gpu ? cuda::cuda_model_stats(m).graph_replays : 0; };
    const int64_t r0 = replays();
    for (const std::vector<Part>& step : span_steps()) {
        std::vector<SequenceChunk> chunks;
        for (const Part& p : step)
            chunks.push_back({&seqs[p.seq], std::span<const int32_t>(tokens[p.seq].data() + p.from, size_t(p.to - p.from)),
                              p.all_logits, spans ? std::span<const uint8_t>(p.flags) : std::span<const uint8_t>()});
        std::vector<std::vector<float>> out = m.forward_batch(chunks);
        for (size_t k = 0; k < step.size(); ++k) {
            const std::vector<float>& l = out[k];
            next[step[k].seq] = static_cast<int32_t>(std::max_element(l.end() - V, l.end()) - (l.end() - V));
            run.logits.push_back(std::move(out[k]));
        }
    }
    const int64_t r1 = replays();
    run.greedy.assign(4, {});
    for (int step = 0; step < kDecodeSteps; ++step) {
        std::vector<SequenceChunk> chunks;
        for (size_t i = 0; i < 4; ++i) {
            run.greedy[i].push_back(next[i]);
            chunks.push_back({&seqs[i], std::span<const int32_t>(&next[i], 1), false, {}});
        }
        std::vector<std::vector<float>> out = m.forward_batch(chunks);
        for (size_t i = 0; i < 4; ++i) {
            next[i] = static_cast<int32_t>(std::max_element(out[i].begin(), out[i].end()) - out[i].begin());
            run.logits.push_back(std::move(out[i]));
        }
    }
    run.span_replays = r1 - r0;
    run.decode_replays = replays() - r1;
    return run;
}

// First row (of V columns) where two logit blocks differ, -1 if none; also the max |diff|.
int64_t first_diff_row(const std::vector<float>& a, const std::vector<float>& b, int64_t V, double* max_abs) {
    int64_t first = -1;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        *max_abs = std::max(*max_abs, std::fabs(double(a[i]) - double(b[i])));
        if (first < 0 && std::memcmp(&a[i], &b[i], 4) != 0) first = int64_t(i) / V;
    }
    return first;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class CudaV41ImageSpan : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        dir_ = test::data_path(std::string("v41/") + GetParam().model);
        cpu_ = V41Model::load(dir_, test::v41_options(GetParam().numerics));
        gpu_ = cuda::load_cuda_v41_model(dir_, test::v41_options(GetParam().numerics));
        ASSERT_EQ(gpu_->numerics(), GetParam().numerics);
    }
    std::string name() const { return std::string(GetParam().model) + "/" + std::string(numerics_name(GetParam().numerics)); }
    void expect_equal_runs(const ScriptRun& want, const ScriptRun& got, const std::string& what) const {
        const int64_t V = cpu_->info().vocab_size;
        ASSERT_EQ(want.logits.size(), got.logits.size()) << what;
        double max_abs = 0;
        int64_t blocks_differing = 0;
        for (size_t k = 0; k < want.logits.size(); ++k) {
            ASSERT_EQ(want.logits[k].size(), got.logits[k].size()) << what << " block " << k;
            const int64_t first = first_diff_row(want.logits[k], got.logits[k], V, &max_abs);
            EXPECT_EQ(first, -1) << what << " block " << k;
            blocks_differing += first >= 0;
        }
        EXPECT_EQ(want.greedy, got.greedy) << what;
        std::printf("[cuda-v41-image-spans] %s: %zu logit blocks, %lld differing, max|diff| %.3g; greedy %s\n",
                    what.c_str(), want.logits.size(), static_cast<long long>(blocks_differing), max_abs,
                    want.greedy == got.greedy ? "identical" : "DIFFERENT");
    }
    std::string dir_;
    std::unique_ptr<Model> cpu_, gpu_;
};

// CPU and GPU: the same logits bit for bit, the same greedy tokens; the span steps ran eagerly and
// every decode step after them replayed a graph.
TEST_P(CudaV41ImageSpan, LogitsAndGreedyEqualCpu) {
    const ScriptRun want = run_script(*cpu_, true, false), got = run_script(*gpu_, true, true);
    expect_equal_runs(want, got, name() + " with spans");
    EXPECT_EQ(got.span_replays, 0) << name() << ": a step with image-span rows replayed a graph";
    EXPECT_EQ(got.decode_replays, kDecodeSteps) << name();
    std::printf("[cuda-v41-image-spans] %s: graph replays: span steps %lld, decode steps %lld of %d\n", name().c_str(),
                static_cast<long long>(got.span_replays), static_cast<long long>(got.decode_replays), kDecodeSteps);
    // A chunk of the wrong number of flags is refused.
    Sequence s = gpu_->new_sequence();
    const std::vector<int32_t> t = {1, 2, 3};
    const std::vector<uint8_t> f = {1, 0};
    SequenceChunk bad{&s, t, true, f};
    EXPECT_THROW(gpu_->forward_batch(std::span<const SequenceChunk>(&bad, 1)), Error);
}

// A chunk with a span alone gives the logits it gets in the first step's batch of four.
TEST_P(CudaV41ImageSpan, BatchInvariantWithSpans) {
    const ScriptRun batched = run_script(*gpu_, true, true);
    std::mt19937 rng(23);
    const int64_t V = gpu_->info().vocab_size;
    std::vector<std::vector<int32_t>> tokens(4, std::vector<int32_t>(64));
    for (auto& tk : tokens)
        for (int32_t& x : tk) x = static_cast<int32_t>(rng() % uint32_t(V));
    const std::vector<std::vector<Part>> steps = span_steps();
    const std::vector<Part>& first = steps[0];
    for (size_t k = 0; k < first.size(); ++k) {
        const Part& p = first[k];
        Sequence s = gpu_->new_sequence();
        SequenceChunk c{&s, std::span<const int32_t>(tokens[p.seq].data() + p.from, size_t(p.to - p.from)), true, p.flags};
        EXPECT_TRUE(same_bits(gpu_->forward_batch(std::span<const SequenceChunk>(&c, 1))[0], batched.logits[k]))
            << name() << " chunk " << k;
    }
}

// Turning the spans off changes the GPU logits of every chunk with a span from its first span row on,
// and leaves the rows before it alone.
TEST_P(CudaV41ImageSpan, SpansChangeTheGpuLogits) {
    const ScriptRun with = run_script(*gpu_, true, true), without = run_script(*gpu_, false, true);
    const int64_t V = gpu_->info().vocab_size;
    const std::vector<std::vector<Part>> steps = span_steps();
    const std::vector<Part>& first = steps[0];
    for (size_t k = 0; k < first.size(); ++k) {
        const auto it = std::find(first[k].flags.begin(), first[k].flags.end(), uint8_t(1));
        const int64_t at = it - first[k].flags.begin();
        const std::vector<float>& a = with.logits[k];
        const std::vector<float>& b = without.logits[k];
        if (it == first[k].flags.end()) {  // all-zero flags: text
            EXPECT_TRUE(same_bits(a, b)) << name() << " chunk " << k;
            continue;
        }
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), size_t(at * V) * 4)) << name() << " chunk " << k << " before its span";
        EXPECT_NE(0, std::memcmp(a.data() + at * V, b.data() + at * V, size_t(V) * 4))
            << name() << " chunk " << k << " at its first span row " << at;
    }
    double max_abs = 0;
    int64_t differing = 0;
    for (size_t k = 0; k < with.logits.size(); ++k) differing += first_diff_row(with.logits[k], without.logits[k], V, &max_abs) >= 0;
    std::printf("[cuda-v41-image-spans] %s: spans off: %lld of %zu logit blocks differ (max|diff| %.3g)\n", name().c_str(),
                static_cast<long long>(differing), with.logits.size(), max_abs);
    EXPECT_GE(differing, 5);
}

// A copy of the checkpoint with bias_vl := bias: the same logits without spans, other logits with them
// (the GPU router reads bias_vl for span rows), and still the CPU's.
TEST_P(CudaV41ImageSpan, RouterSelectsWithBiasVl) {
    const std::string dir = (fs::temp_directory_path() / ("deepinfer-v41-span-" + std::string(GetParam().model) + "-" +
                                                           std::to_string(::getpid())))
                                .string();
    fs::create_directories(dir);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
        if (fs::exists(dir_ + "/" + f)) fs::copy_file(dir_ + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
    int layers = 0;
    {
        SafetensorsPatcher patch(dir + "/model.safetensors");
        for (int l = 0;; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".ffn.gate.";
            if (!patch.has(p + "bias_vl")) break;
            patch.copy(p + "bias", p + "bias_vl");
            ++layers;
        }
    }
    ASSERT_GT(layers, 0) << "the fixture has no ffn.gate.bias_vl";
    const auto cpu_same = V41Model::load(dir, test::v41_options(GetParam().numerics));
    ModelOptions eager = test::v41_options(GetParam().numerics);
    eager.cuda_graphs = false;  // (one graph-capturing model per process: gpu_; graphs give the same bits)
    const auto gpu_same = cuda::load_cuda_v41_model(dir, eager);
    const ScriptRun orig = run_script(*gpu_, true, true), same = run_script(*gpu_same, true, true);
    expect_equal_runs(run_script(*cpu_same, true, false), same, name() + " bias_vl := bias, with spans");
    const int64_t V = gpu_->info().vocab_size;
    double max_abs = 0;
    int64_t differing = 0;
    for (size_t k = 0; k < orig.logits.size(); ++k) differing += first_diff_row(orig.logits[k], same.logits[k], V, &max_abs) >= 0;
    EXPECT_GT(differing, 0) << name() << ": bias_vl := bias changed no logits";
    std::printf("[cuda-v41-image-spans] %s: bias_vl := bias: %lld of %zu logit blocks differ (max|diff| %.3g)\n",
                name().c_str(), static_cast<long long>(differing), orig.logits.size(), max_abs);
    const ScriptRun text = run_script(*gpu_, false, true), text_same = run_script(*gpu_same, false, true);
    for (size_t k = 0; k < text.logits.size(); ++k) EXPECT_TRUE(same_bits(text.logits[k], text_same.logits[k])) << k;
    fs::remove_all(dir);
}

// Bounded replay (ModelOptions::v41_bounded_replay) with spans in the rows the decoder drops and in the
// rows it keeps, a replayed text chunk and a short chunk with a span beside them, then greedy decode:
// the CPU's replay bit for bit (the tail batch carries the kept rows' flags to the decoder's routers).
TEST_P(CudaV41ImageSpan, BoundedReplayWithSpansEqualsCpuReplay) {
    ModelOptions o = test::v41_options(GetParam().numerics);
    o.v41_bounded_replay = true;
    const auto cpu = V41Model::load(dir_, o);
    o.cuda_graphs = false;  // (one graph-capturing model per process: gpu_)
    const auto gpu = cuda::load_cuda_v41_model(dir_, o);
    const int64_t V = cpu->info().vocab_size, W = dynamic_cast<const V41Model&>(*cpu).config().text.sliding_window;
    auto run = [&](const Model& m, bool spans) {
        std::mt19937 rng(31);
        const int64_t na = 4 * W + 8, nb = 2 * W + 3, nc = 6;
        std::vector<std::vector<int32_t>> tokens = {std::vector<int32_t>(size_t(na)), std::vector<int32_t>(size_t(nb)),
                                                    std::vector<int32_t>(size_t(nc))};
        for (auto& t : tokens)
            for (int32_t& x : t) x = static_cast<int32_t>(rng() % uint32_t(V));
        std::vector<uint8_t> fa = span(na, 5, 12), fc = span(nc, 2, 4);
        for (int64_t t = na - 6; t < na - 2; ++t) fa[size_t(t)] = 1;  // in the kept tail too
        if (!spans) fa.assign(fa.size(), 0), fc.assign(fc.size(), 0);
        std::vector<Sequence> seqs;
        for (int i = 0; i < 3; ++i) seqs.push_back(m.new_sequence());
        std::vector<SequenceChunk> chunks = {{&seqs[0], tokens[0], false, fa},
                                             {&seqs[1], tokens[1], false, {}},
                                             {&seqs[2], tokens[2], true, fc}};
        std::vector<std::vector<float>> out = m.forward_batch(chunks);
        for (int step = 0; step < 4; ++step) {
            std::vector<int32_t> next(3);
            std::vector<SequenceChunk> dec;
            for (size_t i = 0; i < 3; ++i) {
                const std::vector<float>& l = out[out.size() - 3 + i];
                next[i] = static_cast<int32_t>(std::max_element(l.end() - V, l.end()) - (l.end() - V));
            }
            for (size_t i = 0; i < 3; ++i) dec.push_back({&seqs[i], std::span<const int32_t>(&next[i], 1), false, {}});
            for (auto& l : m.forward_batch(dec)) out.push_back(std::move(l));
        }
        return out;
    };
    const std::vector<std::vector<float>> want = run(*cpu, true), got = run(*gpu, true), off = run(*gpu, false);
    ASSERT_EQ(want.size(), got.size());
    double max_abs = 0;
    int64_t differing = 0;
    for (size_t k = 0; k < want.size(); ++k) {
        const int64_t first = first_diff_row(want[k], got[k], V, &max_abs);
        EXPECT_EQ(first, -1) << name() << " replay block " << k;
        differing += first >= 0;
    }
    EXPECT_FALSE(same_bits(got[0], off[0])) << name() << ": the replayed chunk's spans changed nothing";
    std::printf("[cuda-v41-image-spans] %s bounded replay: %zu logit blocks, %lld differing from the CPU's replay, max|diff| %.3g\n",
                name().c_str(), want.size(), static_cast<long long>(differing), max_abs);
}

// The expert-parallel model (one rank) passes the spans to its rank: the plain model's logits.
TEST_P(CudaV41ImageSpan, ExpertParallelOneRankEqualsPlainModel) {
    if (!cuda::nccl_available()) GTEST_SKIP() << "this build has no NCCL";
    const ModelOptions o = test::v41_options(GetParam().numerics);
    const std::string dir = dir_;
    const auto ep = cuda::load_cuda_ep_model(
        [&](const cuda::CudaModelOptions& co) {
            auto m = cuda::load_cuda_v41_model(dir, o, co);
            const int64_t len = cuda::cuda_v41_model_max_len(*m);
            return cuda::CudaRank{std::move(m), len};
        },
        {}, {0});
    const ScriptRun want = run_script(*gpu_, true, false), got = run_script(*ep, true, false);
    expect_equal_runs(want, got, name() + " expert-parallel 1 rank");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaV41ImageSpan,
                         ::testing::Values(Case{"v41_tiny_a", Numerics::kExact}, Case{"v41_tiny_b", Numerics::kExact},
                                           Case{"v41_tiny_a", Numerics::kOfficial}, Case{"v41_tiny_b", Numerics::kOfficial}),
                         [](const auto& p) {
                             return std::string(p.param.model) + "_" + std::string(numerics_name(p.param.numerics));
                         });

}  // namespace
}  // namespace deepinfer
