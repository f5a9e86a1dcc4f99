// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4.1 forward on the CUDA backend (CudaV41Model) against the CPU reference (V41Model),
// in exact and official numerics, on the transformers-made fixtures v41_tiny_a / v41_tiny_b and the
// embedded default model (embedded:v41): logits bit-identical at every position of the prompts (and,
// in exact numerics, within the CPU tests' 1e-4 x max|logit| of transformers' ref_logits), greedy
// continuations identical (and equal to transformers' for the fixtures in exact numerics), chunked
// prefill and decode equal to one forward, batch invariance, sequence copies and truncation, the
// offline engine on CUDA giving the CPU engine's tokens; and a model at the real V4.1-Flash width
// (hidden 5120, 64 heads x 512, FP8 linears, MXFP4 experts, Engram) bit-identical to the CPU.
// Skips without a GPU.
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
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_v41_impl.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "deepinfer/embedded.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/model_v41.h"
#include "deepinfer/synthetic_v41.h"
#include "model/v41_flash_fixture.h"
#include "model/v41_test_options.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    EXPECT_TRUE(in.good()) << path;
    std::vector<float> v(static_cast<size_t>(in.tellg()) / 4);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// First row (of `V` columns) where two logit arrays differ, -1 if none; also the max |diff|.
int64_t first_diff_row(const std::vector<float>& a, const std::vector<float>& b, int64_t V, double* max_abs) {
    int64_t first = -1;
    *max_abs = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        *max_abs = std::max(*max_abs, std::fabs(double(a[i]) - double(b[i])));
        if (first < 0 && std::memcmp(&a[i], &b[i], 4) != 0) first = int64_t(i) / V;
    }
    return first;
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
    const char* model;  // a tests/data/v41 fixture or "embedded"
    Numerics numerics;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << numerics_name(c.numerics); }

class CudaV41Tiny : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        fixture_ = std::string(GetParam().model) != "embedded";
        if (fixture_) {
            dir_ = test::data_path(std::string("v41/") + GetParam().model);
            std::ifstream in(dir_ + "/ref.json");
            ref_ = json::parse(in);
            for (const auto& p : ref_["prompts"]) prompts_.push_back(p.get<std::vector<int32_t>>());
        } else {
            dir_ = ensure_embedded_model((fs::temp_directory_path() / "deepinfer-cuda-v41-embedded").string(),
                                         kEmbeddedDefault);
            std::mt19937 rng(5);
            for (int64_t len : {37, 150, 61}) {
                std::vector<int32_t> p(static_cast<size_t>(len));
                for (int32_t& t : p) t = static_cast<int32_t>(rng() % 129280u);
                prompts_.push_back(p);
            }
        }
        cpu_ = V41Model::load(dir_, test::v41_options(GetParam().numerics));
        gpu_ = cuda::load_cuda_v41_model(dir_, test::v41_options(GetParam().numerics));
        ASSERT_EQ(gpu_->numerics(), GetParam().numerics);
        ASSERT_EQ(gpu_->info().vocab_size, cpu_->info().vocab_size);
    }
    std::string name() const { return std::string(GetParam().model) + "/" + std::string(numerics_name(GetParam().numerics)); }
    bool fixture_ = false;
    std::string dir_;
    json ref_;
    std::vector<std::vector<int32_t>> prompts_;
    std::unique_ptr<Model> cpu_, gpu_;
};

TEST_P(CudaV41Tiny, LogitsBitIdenticalToCpuAtEveryPosition) {
    const int64_t V = cpu_->info().vocab_size;
    for (size_t i = 0; i < prompts_.size(); ++i) {
        Sequence cs = cpu_->new_sequence(), gs = gpu_->new_sequence();
        const std::vector<float> want = cpu_->forward(cs, prompts_[i], true), got = gpu_->forward(gs, prompts_[i], true);
        double max_abs = 0;
        const int64_t first = first_diff_row(want, got, V, &max_abs);
        double ref_err = -1, ref_max = 0;
        if (fixture_ && GetParam().numerics == Numerics::kExact) {
            const std::vector<float> ref = read_f32(dir_ + "/ref_logits_" + std::to_string(i) + ".f32");
            ASSERT_EQ(ref.size(), got.size());
            ref_err = 0;
            for (size_t k = 0; k < ref.size(); ++k) {
                ref_err = std::max(ref_err, std::fabs(double(got[k]) - double(ref[k])));
                ref_max = std::max(ref_max, std::fabs(double(ref[k])));
            }
            EXPECT_LE(ref_err, 1e-4 * ref_max) << name() << " prompt " << i << " vs transformers";
        }
        std::printf("[cuda-v41-vs-cpu] %s prompt %zu (%zu tokens): first differing position %lld, max|diff| %.3g; vs transformers max|err| %.3g of max|logit| %.3g\n",
                    name().c_str(), i, prompts_[i].size(), static_cast<long long>(first), max_abs, ref_err, ref_max);
        EXPECT_EQ(first, -1) << name() << " prompt " << i;
        EXPECT_EQ(cs.num_tokens(), gs.num_tokens());
    }
}

TEST_P(CudaV41Tiny, GreedyContinuationsEqualCpu) {
    for (size_t i = 0; i < prompts_.size(); ++i) {
        const std::vector<int32_t> a = greedy(*cpu_, prompts_[i], 16), b = greedy(*gpu_, prompts_[i], 16);
        EXPECT_EQ(a, b) << name() << " prompt " << i;
        if (fixture_ && GetParam().numerics == Numerics::kExact) {
            EXPECT_EQ(b, ref_["greedy"][i].get<std::vector<int32_t>>()) << name() << " prompt " << i << " vs transformers";
        }
    }
}

TEST_P(CudaV41Tiny, ChunkedPrefillAndDecodeEqualOneForward) {
    const std::vector<int32_t>& prompt = prompts_[1];
    Sequence whole = gpu_->new_sequence();
    const std::vector<float> ref = gpu_->forward(whole, prompt, true);
    for (size_t chunk : {size_t(1), size_t(5), size_t(16), size_t(64)}) {
        Sequence seq = gpu_->new_sequence();
        std::vector<float> got;
        for (size_t i = 0; i < prompt.size(); i += chunk) {
            std::span<const int32_t> part(prompt.data() + i, std::min(chunk, prompt.size() - i));
            const std::vector<float> l = gpu_->forward(seq, part, true);
            got.insert(got.end(), l.begin(), l.end());
        }
        EXPECT_TRUE(same_bits(got, ref)) << name() << " chunk " << chunk;
    }
}

TEST_P(CudaV41Tiny, BatchInvariant) {
    std::vector<std::vector<float>> alone;
    for (const auto& p : prompts_) {
        Sequence s = gpu_->new_sequence();
        alone.push_back(gpu_->forward(s, p, true));
    }
    for (int order = 0; order < 2; ++order) {
        std::vector<Sequence> seqs;
        for (size_t i = 0; i < prompts_.size(); ++i) seqs.push_back(gpu_->new_sequence());
        std::vector<SequenceChunk> chunks;
        for (size_t k = 0; k < prompts_.size(); ++k) {
            const size_t i = order == 0 ? k : prompts_.size() - 1 - k;
            chunks.push_back({&seqs[i], prompts_[i], true, {}});
        }
        const auto out = gpu_->forward_batch(chunks);
        for (size_t k = 0; k < prompts_.size(); ++k) {
            const size_t i = order == 0 ? k : prompts_.size() - 1 - k;
            EXPECT_TRUE(same_bits(out[k], alone[i])) << name() << " prompt " << i << " order " << order;
        }
    }
    // A prompt in the middle of 7 and 20 random neighbours (last logits only for them).
    std::mt19937 rng(7);
    const int64_t V = gpu_->info().vocab_size;
    for (int neighbours : {7, 20}) {
        std::vector<std::vector<int32_t>> others;
        for (int i = 0; i < neighbours; ++i) {
            std::vector<int32_t> p(1 + rng() % 40);
            for (int32_t& t : p) t = static_cast<int32_t>(rng() % uint32_t(V));
            others.push_back(p);
        }
        std::vector<Sequence> seqs;
        for (int i = 0; i <= neighbours; ++i) seqs.push_back(gpu_->new_sequence());
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i <= neighbours; ++i) {
            const bool target = i == neighbours / 2;
            chunks.push_back({&seqs[size_t(i)], target ? prompts_[2] : others[size_t(i < neighbours / 2 ? i : i - 1)], target, {}});
        }
        const auto out = gpu_->forward_batch(chunks);
        EXPECT_TRUE(same_bits(out[size_t(neighbours / 2)], alone[2])) << name() << " " << neighbours << " neighbours";
    }
    // Decode steps of one sequence alone vs inside a batch of 3.
    Sequence a = gpu_->new_sequence(), b = gpu_->new_sequence(), n1 = gpu_->new_sequence(), n2 = gpu_->new_sequence();
    gpu_->forward(a, prompts_[0], false);
    gpu_->forward(b, prompts_[0], false);
    gpu_->forward(n1, prompts_[1], false);
    gpu_->forward(n2, prompts_[2], false);
    for (int32_t t : {5, 9, 11, 200}) {
        const std::vector<float> solo = gpu_->forward(a, std::span<const int32_t>(&t, 1), false);
        const int32_t other = t + 1;
        SequenceChunk chunks[] = {{&n1, std::span<const int32_t>(&other, 1), false, {}},
                                  {&b, std::span<const int32_t>(&t, 1), false, {}},
                                  {&n2, std::span<const int32_t>(&other, 1), true, {}}};
        const auto out = gpu_->forward_batch(chunks);
        EXPECT_TRUE(same_bits(out[1], solo)) << name() << " decode token " << t;
    }
}

TEST_P(CudaV41Tiny, CopiesAndTruncationMatchCpu) {
    // A sequence copied after its prompt decodes differently from the original; a sequence that ran
    // 5 speculative rows is truncated back by 3 and continues: both equal the CPU doing the same.
    const std::vector<int32_t>& prompt = prompts_[1];
    auto run = [&](const Model& m) {
        std::vector<float> out;
        auto add = [&](const std::vector<float>& v) { out.insert(out.end(), v.begin(), v.end()); };
        Sequence s = m.new_sequence();
        add(m.forward(s, prompt, false));
        Sequence f = s.fork();
        const std::vector<int32_t> x = {3, 4, 5}, y = {7, 8};
        add(m.forward(s, x, true));
        add(m.forward(f, y, true));
        const std::vector<int32_t> spec = {10, 11, 12, 13, 14};
        add(m.forward(s, spec, true));
        s.truncate(s.num_tokens() - 3);
        const std::vector<int32_t> next = {20, 21};
        add(m.forward(s, next, true));
        add(m.forward(f, next, true));
        return out;
    };
    const std::vector<float> want = run(*cpu_), got = run(*gpu_);
    double max_abs = 0;
    EXPECT_EQ(first_diff_row(want, got, cpu_->info().vocab_size, &max_abs), -1) << name() << " max|diff| " << max_abs;
}

TEST_P(CudaV41Tiny, EngineOnCudaEqualsEngineOnCpu) {
    std::shared_ptr<const Model> gpu = std::move(gpu_), cpu = std::move(cpu_);
    std::mt19937 rng(11);
    const int64_t V = cpu->info().vocab_size;
    std::vector<int32_t> shared_prefix(70);
    for (int32_t& t : shared_prefix) t = int32_t(rng() % uint32_t(V));
    std::vector<std::pair<std::string, std::vector<int32_t>>> reqs;
    for (int i = 0; i < 8; ++i) {
        std::vector<int32_t> p = i % 2 ? shared_prefix : std::vector<int32_t>{};
        const int64_t extra = 1 + rng() % 60;
        for (int64_t k = 0; k < extra; ++k) p.push_back(int32_t(rng() % uint32_t(V)));
        std::string id = std::to_string(i);
        id.insert(0, 1, 'r');
        reqs.emplace_back(std::move(id), p);
    }
    auto run = [&](std::shared_ptr<const Model> m) {
        EngineConfig cfg;
        cfg.max_num_batched_tokens = 80;
        cfg.max_prefill_chunk = 30;
        cfg.prefix_block = 16;
        Engine engine(std::move(m), nullptr, cfg);
        for (size_t i = 0; i < reqs.size(); ++i) {
            SamplingParams sp;
            sp.max_tokens = 10;
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
    EXPECT_EQ(a, b) << name();
}

INSTANTIATE_TEST_SUITE_P(Models, CudaV41Tiny,
                         ::testing::Values(Case{"v41_tiny_a", Numerics::kExact}, Case{"v41_tiny_b", Numerics::kExact},
                                           Case{"embedded", Numerics::kExact}, Case{"v41_tiny_a", Numerics::kOfficial},
                                           Case{"v41_tiny_b", Numerics::kOfficial}, Case{"embedded", Numerics::kOfficial}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.model) + "_" +
                                    std::string(numerics_name(param_info.param.numerics));
                         });

TEST(CudaV41Load, ModelLoadDispatchesV41ToCuda) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ModelOptions o = test::v41_options(Numerics::kExact);
    o.device = Device::kCuda;
    const auto m = Model::load(test::data_path("v41/v41_tiny_a"), o);
    EXPECT_EQ(m->info().family, "deepseek_v41");
    EXPECT_EQ(dynamic_cast<const V41Model*>(m.get()), nullptr) << "Model::load returned the CPU model for --device cuda";
    o.v41_bounded_replay = true;  // (runs on the GPU too: cuda_v41_replay_test.cpp)
    EXPECT_EQ(dynamic_cast<const V41Model*>(Model::load(test::data_path("v41/v41_tiny_a"), o).get()), nullptr);
    o.v41_bounded_replay = false;
    o.device_fast_gemm = true;  // the tensor-core GEMM mode (cuda_v41_fast_test.cpp)
    if (cuda::fast_fp8_available()) {
        EXPECT_EQ(Model::load(test::data_path("v41/v41_tiny_a"), o)->info().family, "deepseek_v41");
    } else {
        EXPECT_THROW(Model::load(test::data_path("v41/v41_tiny_a"), o), Error);
    }
}

// Engram tables are not copied per process: they are page-locked where they lie in the checkpoint's
// read-only mapping, so every process on the host shares the page cache's one copy (issue 12 item 3).
TEST(CudaV41Engram, TablesReadInPlaceFromTheCheckpointMapping) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    if (!cuda::HostRegistration::read_only_supported()) GTEST_SKIP() << "device cannot map read-only host memory";
    ModelOptions o = test::v41_options(Numerics::kExact);
    o.device = Device::kCuda;
    const auto a = Model::load(test::data_path("v41/v41_tiny_a"), o);
    const auto b = Model::load(test::data_path("v41/v41_tiny_a"), o);  // a second replica of the same file
    for (const auto* m : {a.get(), b.get()}) {
        const auto* c = dynamic_cast<const cuda::CudaV41Model*>(m);
        ASSERT_NE(c, nullptr);
        EXPECT_GT(c->engram_shared_bytes(), 0u);
        EXPECT_EQ(c->engram_copied_bytes(), 0u);
    }
    // Each load maps the file anew (distinct ranges, each registered once); both compute the CPU's logits.
    ModelOptions cpu_o = test::v41_options(Numerics::kExact);
    const auto cpu = Model::load(test::data_path("v41/v41_tiny_a"), cpu_o);
    const std::vector<int32_t> prompt = {5, 17, 99, 123, 42, 7, 7, 7, 300, 12};  // the fixture's vocabulary is 512
    Sequence sc = cpu->new_sequence(), sa = a->new_sequence(), sb = b->new_sequence();
    const auto lc = cpu->forward(sc, prompt, true);
    EXPECT_TRUE(same_bits(a->forward(sa, prompt, true), lc));
    EXPECT_TRUE(same_bits(b->forward(sb, prompt, true), lc));
}

// A read-only file mapping registered in place is readable by the device, byte for byte.
TEST(CudaHostRegistration, ReadOnlyFileMappingIsReadableFromTheDevice) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    if (!cuda::HostRegistration::read_only_supported()) GTEST_SKIP() << "device cannot map read-only host memory";
    const std::string path = (fs::temp_directory_path() / ("deepinfer-hostreg-" + std::to_string(::getpid()))).string();
    std::vector<uint8_t> bytes(3 * 4096 + 123);
    std::mt19937 rng(7);
    for (auto& x : bytes) x = static_cast<uint8_t>(rng());
    { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size())); }
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    void* map = ::mmap(nullptr, bytes.size(), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(map, MAP_FAILED);
    {
        const char* sub = static_cast<const char*>(map) + 1000;  // unaligned start: the range is widened to pages
        const size_t n = bytes.size() - 1000;
        cuda::HostRegistration reg(sub, n);
        EXPECT_TRUE(reg.contains(sub, n));
        cuda::DeviceBuffer dev(n);
        dev.copy_from_device(reg.device_pointer(sub), n);
        std::vector<uint8_t> back(n);
        dev.copy_to_host(back.data(), n);
        EXPECT_EQ(0, std::memcmp(back.data(), bytes.data() + 1000, n));
    }
    ::munmap(map, bytes.size());
    fs::remove(path);
}

// The release's widths (hidden 5120, 64 heads x 512 with rope 64, q_lora 1280, 8 output groups x 1024,
// window 128, indexer 32 x 128 top-512, HC 4, experts 2304 wide top-6 of 16 MXFP4, Engram 8 heads x 256
// with n-grams up to 4) with FP8 32x32-block linears: a window-only layer with Engram, a ratio-2 Full
// layer and a ratio-1 Full layer (candidate source), official numerics; prompt past the window + decode.
TEST(CudaV41FlashWidth, OfficialLogitsBitIdenticalToCpu) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string dir = (fs::temp_directory_path() / ("deepinfer-cuda-v41-flash-" + std::to_string(::getpid()))).string();
    test::write_v41_flash_width_checkpoint(dir);
    ModelOptions o;
    o.tokenizer_json = DI_TOKENIZER_JSON;
    o.max_model_len = 1024;
    const auto cpu = V41Model::load(dir, o);
    cuda::CudaModelOptions co;
    co.max_model_len = 1024;
    const auto gpu = cuda::load_cuda_v41_model(dir, o, co);
    ASSERT_EQ(gpu->numerics(), Numerics::kOfficial);
    std::mt19937 rng(3);
    std::vector<int32_t> prompt(160);
    for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % 1024);
    Sequence cs = cpu->new_sequence(), gs = gpu->new_sequence();
    std::vector<float> want = cpu->forward(cs, prompt, true), got = gpu->forward(gs, prompt, true);
    for (int32_t id : {17, 400, 3, 999}) {
        const auto a = cpu->forward(cs, std::span<const int32_t>(&id, 1), false);
        const auto b = gpu->forward(gs, std::span<const int32_t>(&id, 1), false);
        want.insert(want.end(), a.begin(), a.end());
        got.insert(got.end(), b.begin(), b.end());
    }
    double max_abs = 0, max_logit = 0;
    const int64_t first = first_diff_row(want, got, 1024, &max_abs);
    for (float v : want) max_logit = std::max(max_logit, std::fabs(double(v)));
    std::printf("[cuda-v41-vs-cpu] flash width, official, 160-token prefill + 4 decode steps: first differing row %lld, max|diff| %.3g, max|logit| %.3g\n",
                static_cast<long long>(first), max_abs, max_logit);
    EXPECT_EQ(first, -1);
    EXPECT_GT(max_logit, 0.0);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer
