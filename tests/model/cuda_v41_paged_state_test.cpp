// SPDX-License-Identifier: Apache-2.0
// CudaV41Model's paged device state (cuda_v41_state.h) on the v41 tiny fixtures, with entry pages of
// 16 positions so the prompts span several: a fork shares every page (the pool's counters do not
// move), the first forward of each branch copies only what it writes (the ring pages and the partly
// filled entry page), both branches (prefill chunk and decode steps replayed from graphs, whose page
// tables span several pages) equal independent runs and the CPU bit for bit, freeing returns every
// page, and nothing allocates device memory. A rollback across a page boundary and the snapshot taken
// before it continue like fresh runs; an exhausted pool is a clear error that leaves states usable;
// the engine admits within the pool and gives the CPU engine's tokens. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "deepinfer/check.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/model_v41.h"
#include "model/pool_engine_mix.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

ModelOptions paged_options(Numerics n, uint64_t state_bytes = 0) {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = n;
    o.tokenizer_json = DI_TOKENIZER_JSON;
    o.device_page_tokens = 16;
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

class CudaV41PagedState : public ::testing::TestWithParam<Param> {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        dir_ = test::data_path(std::string("v41/") + GetParam().model);
    }
    std::unique_ptr<Model> gpu(uint64_t state_bytes = 0) const {
        return cuda::load_cuda_v41_model(dir_, paged_options(GetParam().numerics, state_bytes));
    }
    std::string dir_;
};

TEST_P(CudaV41PagedState, ForkSharesPagesAndBranchesCopyOnlyWhatTheyWrite) {
    const Numerics n = GetParam().numerics;
    auto g = gpu();
    auto cpu = V41Model::load(dir_, paged_options(n));
    const int64_t V = g->info().vocab_size;
    const auto st0 = cuda::cuda_model_stats(*g);
    ASSERT_EQ(st0.state_page_tokens, 16);
    const int64_t R = st0.state_ring_pages, base = st0.state_pages_in_use;  // base: the padding sequence
    ASSERT_GT(R, 0);
    const uint64_t P = st0.state_page_bytes;
    auto in_use = [&] { return cuda::cuda_model_stats(*g).state_pages_in_use; };
    // 40 + 12 crosses the entry page at 48.
    const std::vector<int32_t> prefix = random_tokens(40, 1, V), ta = random_tokens(12, 2, V), tb = random_tokens(12, 3, V);
    const uint64_t allocations = cuda::device_allocation_count();
    Sequence a = g->new_sequence();
    EXPECT_EQ(in_use(), base + R);
    g->forward(a, prefix, false);
    EXPECT_EQ(in_use(), base + R + 3);  // entry pages of positions 0..15, 16..31, 32..47
    EXPECT_EQ(a.state_bytes(), (R + 3) * P);
    EXPECT_EQ(g->estimate_state_bytes(40, 0), (R + 3) * P);
    Sequence b = a.fork();
    EXPECT_EQ(in_use(), base + R + 3) << "a fork takes no page";
    EXPECT_EQ(b.state_bytes(), a.state_bytes());
    EXPECT_EQ(b.state().unshared_bytes(), 0u);
    // b's first forward copies the rings and the partly filled entry page (32..47) and adds 48..63.
    const std::vector<float> lb = g->forward(b, tb, true);
    EXPECT_EQ(in_use(), base + 2 * R + 3 + 1 + 1);
    EXPECT_EQ(b.state().unshared_bytes(), (R + 2) * P);  // entry pages 0 and 1 still shared with a
    // a's pages but 0 and 1 are its own now: it writes in place and adds its own page 48..63.
    const std::vector<float> la = g->forward(a, ta, true);
    EXPECT_EQ(in_use(), base + 2 * R + 3 + 1 + 2);
    EXPECT_EQ(a.state().unshared_bytes(), (R + 2) * P);
    // Decode steps (graph replays; the page tables hold 4 pages) on both branches, together and alone.
    std::vector<float> da, db;
    for (int32_t t : {5, 77, 301, 9, 12}) {
        const int32_t u = (t + 1) % int32_t(V);
        std::vector<float> x, y;
        if (t % 2) {
            x = g->forward(a, std::span<const int32_t>(&t, 1), false);
            y = g->forward(b, std::span<const int32_t>(&u, 1), false);
        } else {
            const SequenceChunk chunks[2] = {{&a, std::span<const int32_t>(&t, 1), false, {}},
                                             {&b, std::span<const int32_t>(&u, 1), false, {}}};
            auto both = g->forward_batch(chunks);
            x = both[0];
            y = both[1];
        }
        da.insert(da.end(), x.begin(), x.end());
        db.insert(db.end(), y.begin(), y.end());
    }
    EXPECT_EQ(cuda::device_allocation_count(), allocations) << "creation, fork, forwards and decode steps allocate nothing";
    EXPECT_GT(cuda::cuda_model_stats(*g).graph_replays, 0);
    // Each branch equals an independent run, on the GPU and on the CPU.
    for (const Model* m : {static_cast<const Model*>(g.get()), static_cast<const Model*>(cpu.get())}) {
        for (int branch = 0; branch < 2; ++branch) {
            Sequence s = m->new_sequence();
            m->forward(s, prefix, false);
            const std::vector<float> l = m->forward(s, branch ? tb : ta, true);
            std::vector<float> d;
            for (int32_t t : {5, 77, 301, 9, 12}) {
                const int32_t u = branch ? (t + 1) % int32_t(V) : t;
                const auto x = m->forward(s, std::span<const int32_t>(&u, 1), false);
                d.insert(d.end(), x.begin(), x.end());
            }
            const char* who = m == g.get() ? "independent GPU run" : "CPU";
            EXPECT_TRUE(same_bits(l, branch ? lb : la)) << who << ", branch " << branch;
            EXPECT_TRUE(same_bits(d, branch ? db : da)) << who << ", branch " << branch << " decode";
        }
    }
    // Truncating drops the entry pages past the new length; dropping the sequences returns every page.
    a.truncate(50);  // 57 -> 50 (within the rings' headroom): positions 48..49 keep their page
    EXPECT_EQ(a.state_bytes(), (R + 4) * P);
    { Sequence gone = std::move(a); }
    { Sequence gone = std::move(b); }
    EXPECT_EQ(in_use(), base);
    EXPECT_GE(cuda::cuda_model_stats(*g).state_pages_peak, base + 2 * R + 6);
}

// A speculative rollback (at most the rings' 16 rows of headroom) across an entry page boundary: the
// page past the new length goes back to the pool, the branch writes the page it shares with a snapshot
// taken before the rollback (copy-on-write), and both continue like fresh runs (GPU and CPU).
TEST_P(CudaV41PagedState, RolledBackBranchAndItsSnapshotContinueLikeFreshRuns) {
    auto g = gpu();
    auto cpu = V41Model::load(dir_, paged_options(GetParam().numerics));
    const int64_t V = g->info().vocab_size;
    const auto st = cuda::cuda_model_stats(*g);
    const std::vector<int32_t> prompt = random_tokens(35, 7, V), tail = random_tokens(10, 8, V);
    Sequence s = g->new_sequence();
    g->forward(s, prompt, false);
    EXPECT_EQ(s.state_bytes(), uint64_t(st.state_ring_pages + 3) * st.state_page_bytes);
    Sequence snap = s.fork();
    s.truncate(29);  // 6 rows rolled back: positions 32..34 and their page are gone; 29 is odd (a ratio-2 group open)
    EXPECT_EQ(s.state_bytes(), uint64_t(st.state_ring_pages + 2) * st.state_page_bytes);
    const std::vector<float> got = g->forward(s, tail, true);
    for (const Model* m : {static_cast<const Model*>(g.get()), static_cast<const Model*>(cpu.get())}) {
        Sequence fresh = m->new_sequence();
        m->forward(fresh, std::span<const int32_t>(prompt.data(), 29), false);
        EXPECT_TRUE(same_bits(got, m->forward(fresh, tail, true))) << (m == g.get() ? "GPU" : "CPU");
    }
    // The snapshot was not disturbed by the branch's writes into the pages they shared.
    const std::vector<float> cont = g->forward(snap, tail, true);
    Sequence whole = cpu->new_sequence();
    cpu->forward(whole, prompt, false);
    EXPECT_TRUE(same_bits(cont, cpu->forward(whole, tail, true)));
}

TEST_P(CudaV41PagedState, ExhaustedPoolIsAClearErrorAndLeavesStatesUsable) {
    const auto probe = cuda::cuda_model_stats(*gpu());
    const int64_t R = probe.state_ring_pages;
    const uint64_t P = probe.state_page_bytes;
    auto g = gpu(uint64_t(R + 1) * P);  // one sequence of <= 16 tokens
    EXPECT_EQ(g->state_capacity_bytes(), uint64_t(R + 1) * P);
    const int64_t V = g->info().vocab_size;
    const std::vector<int32_t> prompt = random_tokens(10, 4, V), more = random_tokens(12, 5, V);
    Sequence a = g->new_sequence();
    g->forward(a, prompt, false);
    auto expect_exhausted = [](auto&& f, const char* what) {
        try {
            f();
            ADD_FAILURE() << what << ": no error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("device state pool exhausted"), std::string::npos) << e.what();
        }
    };
    expect_exhausted([&] { g->new_sequence(); }, "a second sequence");
    expect_exhausted([&] { g->forward(a, more, false); }, "a second entry page");
    EXPECT_EQ(a.num_tokens(), 10);
    Sequence c = a.fork();
    expect_exhausted([&] { g->forward(c, more, false); }, "the fork's copies");
    { Sequence gone = std::move(c); }
    // a goes on within its page and equals a roomy model's run.
    const std::vector<int32_t> fit(more.begin(), more.begin() + 6);
    const std::vector<float> got = g->forward(a, fit, true);
    auto roomy = gpu();
    Sequence r = roomy->new_sequence();
    roomy->forward(r, prompt, false);
    EXPECT_TRUE(same_bits(got, roomy->forward(r, fit, true)));
}

// The engine admits within the device pool, with prefix-cache hits and n > 1 siblings (a pool for about
// eight requests), and when it runs short (about three): the CPU engine's tokens either way, the pool's
// peak within its capacity.
TEST_P(CudaV41PagedState, EngineWithinTheDevicePoolEqualsCpuEngine) {
    const Numerics n = GetParam().numerics;
    const auto probe = cuda::cuda_model_stats(*gpu());
    std::shared_ptr<const Model> cpu = V41Model::load(dir_, paged_options(n));
    const test::PoolMix mix{.prefix = 70, .extra = 60, .batch_tokens = 80, .chunk = 30, .max_tokens = 10};
    auto run = [&](std::shared_ptr<const Model> m, EngineMetrics* metrics) { return test::run_pool_mix(std::move(m), mix, metrics); };
    const auto want = run(cpu, nullptr);
    ASSERT_EQ(want.size(), 10u);
    for (const int64_t sequences : {8, 3}) {
        // A request holds at most 70 + 60 + 10 positions: 9 entry pages of 16.
        const uint64_t pool = uint64_t(sequences * (probe.state_ring_pages + 9)) * probe.state_page_bytes;
        std::shared_ptr<const Model> g = gpu(pool);
        EngineMetrics gm;
        EXPECT_EQ(run(g, &gm), want) << "pool of " << sequences << " sequences";
        const auto st = cuda::cuda_model_stats(*g);
        const int64_t pad = probe.state_ring_pages + 1;  // the padding sequence's pages, outside the capacity
        std::printf("[v41-paged-state] %s: pool %llu bytes (%lld pages), peak pages %lld, preemptions %lld, prefix hit tokens %lld\n",
                    GetParam().model, (unsigned long long)pool, (long long)st.state_pages, (long long)st.state_pages_peak,
                    (long long)gm.preemptions, (long long)gm.prefix_cache_hit_tokens);
        EXPECT_EQ(st.state_pages, int64_t(pool / probe.state_page_bytes) + pad);
        EXPECT_GE(st.state_pages_peak, pad + 2 * probe.state_ring_pages) << "requests ran side by side in the pool";
        if (sequences == 8) {
            EXPECT_GT(gm.prefix_cache_hit_tokens, 0);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaV41PagedState,
                         ::testing::Values(Param{"v41_tiny_a", Numerics::kExact}, Param{"v41_tiny_b", Numerics::kOfficial}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.model) + "_" + std::string(numerics_name(param_info.param.numerics));
                         });

}  // namespace
}  // namespace deepinfer
