// SPDX-License-Identifier: Apache-2.0
// The benchmark-only MoE ops (ops.h): the expert-load counters a benchmark reads to see how evenly a
// model's routing spreads its rows, and the even routing that stands in for a trained model's
// balanced router. Both against host computations of their definitions. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ops.h"
#include "ops/cuda_test_util.h"

namespace deepinfer {
namespace {

using cuda::Stream;
using test::Dev;

class CudaMoeBenchOps : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

TEST_F(CudaMoeBenchOps, ExpertLoadCountsTouchedExpertsLargestShareAndPairs) {
    // Two layers' permutations accumulate into the same counters: a skewed prefill (a quarter of the
    // picks on 3 experts) and a decode batch touching a few experts; under expert parallelism the
    // offsets hold one extra bucket (other ranks' pairs), which must not count.
    struct Case { int64_t rows, k, experts; bool extra_bucket; };
    const Case cases[] = {{4096, 6, 256, false}, {3, 6, 128, true}};
    Dev<unsigned long long> acc(std::vector<unsigned long long>(4, 0));
    unsigned long long want[4] = {};
    for (const Case c : cases) {
        std::mt19937 rng(uint32_t(c.rows * 7 + c.experts));
        const int64_t buckets = c.experts + (c.extra_bucket ? 1 : 0);
        std::vector<int32_t> ids(size_t(c.rows * c.k));
        for (auto& e : ids) e = rng() % 4 == 0 ? int32_t(rng() % 3) : int32_t(rng() % uint32_t(buckets));
        Dev<int32_t> dids(ids), dsrc(ids.size()), dslot(ids.size()), dexp(ids.size()), doff(size_t(buckets + 1));
        cuda::permute({.ids = dids.ptr(), .rows = c.rows, .top_k = c.k, .experts = buckets, .perm_src = dsrc.ptr(),
                       .perm_slot = dslot.ptr(), .perm_expert = dexp.ptr(), .expert_offsets = doff.ptr()},
                      Stream{});
        cuda::expert_load_accumulate({.expert_offsets = doff.ptr(), .experts = c.experts, .acc = acc.ptr()}, Stream{});
        std::vector<int64_t> count(size_t(c.experts), 0);
        for (int32_t e : ids)
            if (e < c.experts) ++count[size_t(e)];
        for (int64_t n : count) {
            want[0] += n > 0 ? 1 : 0;
            want[2] += static_cast<unsigned long long>(n);
        }
        want[1] += static_cast<unsigned long long>(*std::max_element(count.begin(), count.end()));
        want[3] += 1;
    }
    const auto got = acc.host(4);
    EXPECT_EQ(got[0], want[0]) << "experts touched";
    EXPECT_EQ(got[1], want[1]) << "largest share";
    EXPECT_EQ(got[2], want[2]) << "pairs";
    EXPECT_EQ(got[3], 2u) << "layer forwards";
}

TEST_F(CudaMoeBenchOps, EvenRoutingSpreadsPairsEvenlyWithDistinctExpertsPerRow) {
    // 37 rows x top-6 of 256 experts from global row 5 (a rank's rows under expert parallelism), and
    // top-8 of 24 experts (a stride that must skip 3's multiples); the other arrays stay untouched.
    struct Case { int64_t rows, k, experts, first_row; };
    for (const Case c : {Case{37, 6, 256, 5}, Case{100, 8, 24, 0}}) {
        const int64_t stride = cuda::even_routing_stride(c.experts);
        EXPECT_EQ(std::gcd(stride, c.experts), 1) << stride;
        Dev<int32_t> ids(std::vector<int32_t>(size_t(c.rows * c.k), -1));
        cuda::even_routing({.ids = ids.ptr(), .rows = c.rows, .top_k = c.k, .experts = c.experts,
                            .first_row = c.first_row, .stride = stride},
                           Stream{});
        const auto got = ids.host(size_t(c.rows * c.k));
        std::vector<int64_t> count(size_t(c.experts), 0);
        for (int64_t r = 0; r < c.rows; ++r) {
            std::set<int32_t> row;
            for (int64_t k = 0; k < c.k; ++k) {
                const int32_t e = got[size_t(r * c.k + k)];
                ASSERT_GE(e, 0);
                ASSERT_LT(e, c.experts);
                EXPECT_EQ(e, ((c.first_row + r) * c.k + k) % c.experts * stride % c.experts) << r << " " << k;
                row.insert(e);
                ++count[size_t(e)];
            }
            EXPECT_EQ(int64_t(row.size()), c.k) << "row " << r << ": experts repeat";
        }
        const auto [lo, hi] = std::minmax_element(count.begin(), count.end());
        EXPECT_LE(*hi - *lo, 1) << c.experts << " experts";
    }
}

}  // namespace
}  // namespace deepinfer
