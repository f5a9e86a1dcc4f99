// SPDX-License-Identifier: Apache-2.0
// CudaModel's paged device state (device_sequence_state.h) on the tiny fixture models, with entry
// pages of 128 positions so the prompts span several: a fork shares every page (the pool's counters do
// not move), the first forward of each branch copies only what it writes (the rings and the partly
// filled entry page), both branches equal independent runs and the CPU bit for bit, freeing returns
// every page, and nothing allocates device memory (creation, forks, prefill, decode graphs). An
// exhausted pool is a clear error that leaves states usable; the engine admits within the pool
// (preempting) and gives the CPU engine's tokens. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/check.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "model/forward.h"
#include "model/pool_engine_mix.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

ModelOptions options(Numerics n, uint64_t state_bytes = 0) {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = n;
    o.device_page_tokens = 128;
    o.device_state_bytes = state_bytes;
    return o;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int64_t vocab) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = int32_t(rng() % uint32_t(vocab));
    return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Param {
    const char* model;
    Numerics numerics;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.model << "/" << numerics_name(p.numerics); }

class CudaPagedState : public ::testing::TestWithParam<Param> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        dir_ = test::data_path(std::string("models/") + GetParam().model);
    }
    std::string dir_;
};

TEST_P(CudaPagedState, ForkSharesPagesAndBranchesCopyOnlyWhatTheyWrite) {
    const Numerics n = GetParam().numerics;
    auto gpu = cuda::load_cuda_model(dir_, options(n));
    auto cpu = load_v4_model(dir_, options(n));
    const int64_t V = gpu->info().vocab_size;
    const auto st0 = cuda::cuda_model_stats(*gpu);
    ASSERT_EQ(st0.state_page_tokens, 128);
    const int64_t R = st0.state_ring_pages, base = st0.state_pages_in_use;  // base: the padding sequence
    const uint64_t P = st0.state_page_bytes;
    auto in_use = [&] { return cuda::cuda_model_stats(*gpu).state_pages_in_use; };
    const std::vector<int32_t> prefix = random_tokens(200, 1, V), ta = random_tokens(60, 2, V),
                               tb = random_tokens(60, 3, V);  // 200 + 60 crosses the entry page at 256
    const uint64_t allocations = cuda::device_allocation_count();
    Sequence a = gpu->new_sequence();
    EXPECT_EQ(in_use(), base + R);
    gpu->forward(a, prefix, false);
    EXPECT_EQ(in_use(), base + R + 2);  // entry pages of positions 0..127 and 128..255
    EXPECT_EQ(a.state_bytes(), (R + 2) * P);
    Sequence b = a.fork();
    EXPECT_EQ(in_use(), base + R + 2) << "a fork allocates nothing";
    EXPECT_EQ(b.state_bytes(), a.state_bytes());
    EXPECT_EQ(b.state().unshared_bytes(), 0u);
    // b's first forward copies the rings and the partly filled entry page (128..255) and adds 256..383.
    const std::vector<float> lb = gpu->forward(b, tb, true);
    EXPECT_EQ(in_use(), base + 2 * R + 2 + 1 + 1);
    EXPECT_EQ(b.state().unshared_bytes(), (R + 2) * P);  // entry page 0 still shared with a
    // a's pages but page 0 are its own now: it writes in place and adds its own page 256..383.
    const std::vector<float> la = gpu->forward(a, ta, true);
    EXPECT_EQ(in_use(), base + 2 * R + 2 + 1 + 2);
    EXPECT_EQ(a.state().unshared_bytes(), (R + 2) * P);
    // Decode steps (graph replays) on both branches.
    std::vector<float> da, db;
    for (int32_t t : {5, 77, 301}) {
        const auto x = gpu->forward(a, std::span<const int32_t>(&t, 1), false);
        const int32_t u = t + 1;
        const auto y = gpu->forward(b, std::span<const int32_t>(&u, 1), false);
        da.insert(da.end(), x.begin(), x.end());
        db.insert(db.end(), y.begin(), y.end());
    }
    EXPECT_EQ(cuda::device_allocation_count(), allocations) << "creation, fork, forwards and decode steps allocate nothing";
    // Each branch equals an independent run, on the GPU and on the CPU.
    for (const Model* m : {static_cast<const Model*>(gpu.get()), static_cast<const Model*>(cpu.get())}) {
        for (int branch = 0; branch < 2; ++branch) {
            Sequence s = m->new_sequence();
            m->forward(s, prefix, false);
            const std::vector<float> l = m->forward(s, branch ? tb : ta, true);
            std::vector<float> d;
            for (int32_t t : {5, 77, 301}) {
                const int32_t u = branch ? t + 1 : t;
                const auto x = m->forward(s, std::span<const int32_t>(&u, 1), false);
                d.insert(d.end(), x.begin(), x.end());
            }
            const char* who = m == gpu.get() ? "independent GPU run" : "CPU";
            EXPECT_TRUE(same_bits(l, branch ? lb : la)) << who << ", branch " << branch;
            EXPECT_TRUE(same_bits(d, branch ? db : da)) << who << ", branch " << branch << " decode";
        }
    }
    // Truncating drops the entry pages past the new length; dropping the sequences returns every page.
    a.truncate(100);
    EXPECT_EQ(a.state_bytes(), (R + 1) * P);
    { Sequence gone = std::move(a); }
    { Sequence gone = std::move(b); }
    EXPECT_EQ(in_use(), base);
    EXPECT_GE(cuda::cuda_model_stats(*gpu).state_pages_peak, base + 2 * R + 5);
}

// A speculative rollback (at most the rings' 16 rows of headroom) across an entry page boundary: the
// page past the new length goes back to the pool, the branch writes the page it shares with a snapshot
// taken before the rollback (copy-on-write), and both continue like fresh runs.
TEST_P(CudaPagedState, RolledBackBranchAndItsSnapshotContinueLikeFreshRuns) {
    auto gpu = cuda::load_cuda_model(dir_, options(GetParam().numerics));
    const int64_t V = gpu->info().vocab_size;
    const auto st = cuda::cuda_model_stats(*gpu);
    const std::vector<int32_t> prompt = random_tokens(261, 7, V), tail = random_tokens(40, 8, V);
    Sequence s = gpu->new_sequence();
    gpu->forward(s, prompt, false);
    EXPECT_EQ(s.state_bytes(), uint64_t(st.state_ring_pages + 3) * st.state_page_bytes);
    Sequence snap = s.fork();
    s.truncate(250);  // 11 rows rolled back: positions 256..260 and their page are gone
    EXPECT_EQ(s.state_bytes(), uint64_t(st.state_ring_pages + 2) * st.state_page_bytes);
    const std::vector<float> got = gpu->forward(s, tail, true);
    Sequence fresh = gpu->new_sequence();
    gpu->forward(fresh, std::span<const int32_t>(prompt.data(), 250), false);
    EXPECT_TRUE(same_bits(got, gpu->forward(fresh, tail, true)));
    // The snapshot was not disturbed by the branch's writes into the pages they shared.
    const std::vector<float> cont = gpu->forward(snap, tail, true);
    Sequence whole = gpu->new_sequence();
    gpu->forward(whole, prompt, false);
    EXPECT_TRUE(same_bits(cont, gpu->forward(whole, tail, true)));
}

TEST_P(CudaPagedState, ExhaustedPoolIsAClearErrorAndLeavesStatesUsable) {
    const Numerics n = GetParam().numerics;
    const auto probe = cuda::cuda_model_stats(*cuda::load_cuda_model(dir_, options(n)));
    const int64_t R = probe.state_ring_pages;
    const uint64_t P = probe.state_page_bytes;
    auto gpu = cuda::load_cuda_model(dir_, options(n, uint64_t(R + 1) * P));  // one sequence of <= 128 tokens
    EXPECT_EQ(gpu->state_capacity_bytes(), uint64_t(R + 1) * P);
    const int64_t V = gpu->info().vocab_size;
    const std::vector<int32_t> prompt = random_tokens(100, 4, V), more = random_tokens(60, 5, V);
    Sequence a = gpu->new_sequence();
    gpu->forward(a, prompt, false);
    auto expect_exhausted = [](auto&& f, const char* what) {
        try {
            f();
            ADD_FAILURE() << what << ": no error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("device state pool exhausted"), std::string::npos) << e.what();
        }
    };
    expect_exhausted([&] { gpu->new_sequence(); }, "a second sequence");
    expect_exhausted([&] { gpu->forward(a, more, false); }, "a second entry page");
    EXPECT_EQ(a.num_tokens(), 100);
    Sequence c = a.fork();
    expect_exhausted([&] { gpu->forward(c, more, false); }, "the fork's copies");
    { Sequence gone = std::move(c); }
    // a goes on within its page and equals a roomy model's run.
    const std::vector<int32_t> fit(more.begin(), more.begin() + 28);
    const std::vector<float> got = gpu->forward(a, fit, true);
    auto roomy = cuda::load_cuda_model(dir_, options(n));
    Sequence r = roomy->new_sequence();
    roomy->forward(r, prompt, false);
    EXPECT_TRUE(same_bits(got, roomy->forward(r, fit, true)));
}

// The engine admits within the device pool, with prefix-cache hits and n > 1 siblings (a pool for about
// eight requests), and preempting and recomputing when it runs short (about three): the CPU engine's
// tokens either way.
TEST_P(CudaPagedState, EngineWithinTheDevicePoolEqualsCpuEngine) {
    const Numerics n = GetParam().numerics;
    const auto probe = cuda::cuda_model_stats(*cuda::load_cuda_model(dir_, options(n)));
    std::shared_ptr<const Model> cpu = load_v4_model(dir_, options(n));
    const test::PoolMix mix{.prefix = 150, .extra = 90, .batch_tokens = 96, .chunk = 40, .max_tokens = 12};
    auto run = [&](std::shared_ptr<const Model> m, EngineMetrics* metrics) { return test::run_pool_mix(std::move(m), mix, metrics); };
    const auto want = run(cpu, nullptr);
    ASSERT_EQ(want.size(), 10u);
    for (const int64_t sequences : {8, 3}) {
        const uint64_t pool = uint64_t(sequences * (probe.state_ring_pages + 2)) * probe.state_page_bytes;
        std::shared_ptr<const Model> gpu = cuda::load_cuda_model(dir_, options(n, pool));
        EngineMetrics gm;
        EXPECT_EQ(run(gpu, &gm), want) << "pool of " << sequences << " sequences";
        const auto st = cuda::cuda_model_stats(*gpu);
        std::printf("[paged-state] %s: pool %llu bytes (%lld pages), peak pages %lld, preemptions %lld, prefix hit tokens %lld\n",
                    GetParam().model, (unsigned long long)pool, (long long)st.state_pages, (long long)st.state_pages_peak,
                    (long long)gm.preemptions, (long long)gm.prefix_cache_hit_tokens);
        if (sequences == 8) {
            EXPECT_GT(gm.prefix_cache_hit_tokens, 0);
        } else {
            EXPECT_GT(gm.preemptions, 0);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaPagedState,
                         ::testing::Values(Param{"v4_tiny_a", Numerics::kExact}, Param{"v4_tiny_b", Numerics::kOfficial}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.model) + "_" + std::string(numerics_name(param_info.param.numerics));
                         });

}  // namespace
}  // namespace deepinfer
