// SPDX-License-Identifier: Apache-2.0
// The routed expert-parallel dispatch's index scheme (src/backends/cuda/ep/dispatch_plan.h): G ranks
// simulated on the host — plans, count sharing, packing, the experts' compact outputs, the returns and
// the final gather — deliver every pair exactly its own expert output, for G = 1..8, uneven and empty
// ranks and routing that sends rows to one rank only; the rank plan rejects bad counts. On a GPU the
// planning kernels equal their host references (ep_dispatch_ops.h). No NCCL needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ep/dispatch_plan.h"
#include "backends/cuda/ep/ep_dispatch_ops.h"
#include "deepinfer/check.h"

namespace deepinfer {
namespace {

using cuda::EpRankPlan;
using cuda::EpRoutePlan;

// Top-k distinct experts per row out of ranks · per_rank. `home` >= 0: every other row takes all its
// experts from rank `home` (rows that need one rank only).
std::vector<int32_t> random_ids(std::mt19937& rng, int64_t rows, int64_t k, int ranks, int64_t per_rank, int home) {
    const int64_t E = ranks * per_rank;
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < rows; ++i) {
        const bool local = home >= 0 && i % 2 == 0 && k <= per_rank;
        std::vector<int32_t> pool(size_t(local ? per_rank : E));
        std::iota(pool.begin(), pool.end(), local ? int32_t(home * per_rank) : 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        ids.insert(ids.end(), pool.begin(), pool.begin() + k);
    }
    return ids;
}

// The value the simulated expert computes for pair (rank q, row i, slot k).
int64_t pair_value(int q, int64_t i, int64_t k) { return (int64_t(q) << 40) | (i << 8) | k; }

struct SimResult {
    int64_t rows_sent = 0, rows_all = 0;
};

// (void: gtest's ASSERTs return; the tallies go to `res`)
void simulate(const std::vector<int64_t>& rows, int64_t K, int64_t per_rank, const std::vector<std::vector<int32_t>>& ids,
              SimResult& res) {
    const int G = int(rows.size());
    std::vector<EpRoutePlan> plan;
    std::vector<int32_t> table;
    for (int q = 0; q < G; ++q) {
        plan.push_back(cuda::ep_route_plan_host(ids[size_t(q)], rows[size_t(q)], K, per_rank, G));
        EXPECT_EQ(plan.back().counts.size(), size_t(2 * G));
        table.insert(table.end(), plan.back().counts.begin(), plan.back().counts.end());
    }
    std::vector<EpRankPlan> rp;
    for (int r = 0; r < G; ++r) rp.push_back(cuda::make_ep_rank_plan(G, r, table));
    // Each rank's received rows (sender, row), the experts' outputs at their compact index.
    std::vector<std::vector<int64_t>> computed(static_cast<size_t>(G));
    for (int r = 0; r < G; ++r) {
        const EpRankPlan& p = rp[size_t(r)];
        std::vector<std::pair<int, int64_t>> got(size_t(p.recv_total), {-1, -1});
        std::vector<int32_t> recv_ids(size_t(p.recv_total * K), -1);
        for (int q = 0; q < G; ++q) {
            const int64_t S = rows[size_t(q)], n = plan[size_t(q)].counts[size_t(r)];
            EXPECT_EQ(p.recv_rows[size_t(q)], n);
            EXPECT_EQ(rp[size_t(q)].send_rows[size_t(r)], n);
            // Exactly the rows of q with an expert on r, ascending.
            std::vector<int32_t> want;
            for (int64_t i = 0; i < S; ++i)
                for (int64_t k = 0; k < K; ++k)
                    if (ids[size_t(q)][size_t(i * K + k)] / per_rank == r) {
                        want.push_back(int32_t(i));
                        break;
                    }
            ASSERT_EQ(int64_t(want.size()), n);
            if (q != r) res.rows_sent += n, res.rows_all += S;
            for (int64_t j = 0; j < n; ++j) {
                const int32_t i = plan[size_t(q)].send_rows[size_t(r * S + j)];
                EXPECT_EQ(i, want[size_t(j)]);
                got[size_t(p.recv_at[size_t(q)] + j)] = {q, i};
                for (int64_t k = 0; k < K; ++k)
                    recv_ids[size_t((p.recv_at[size_t(q)] + j) * K + k)] = ids[size_t(q)][size_t(i * K + k)];
            }
        }
        const std::vector<int32_t> compact = cuda::ep_local_slots_host(recv_ids, int32_t(r * per_rank), int32_t(per_rank));
        std::vector<int64_t>& y = computed[size_t(r)];
        y.assign(size_t(p.computed_pairs), -1);
        for (int64_t t = 0; t < p.recv_total; ++t)
            for (int64_t k = 0; k < K; ++k) {
                const int32_t c = compact[size_t(t * K + k)];
                const bool local = recv_ids[size_t(t * K + k)] / per_rank == r;
                ASSERT_EQ(c >= 0, local);
                if (!local) continue;
                ASSERT_LT(c, p.computed_pairs);
                EXPECT_EQ(y[size_t(c)], -1) << "two pairs at one output row";
                y[size_t(c)] = pair_value(got[size_t(t)].first, got[size_t(t)].second, k);
            }
        for (int64_t v : y) EXPECT_NE(v, -1) << "an output row no pair wrote";
    }
    // Returns, then each rank's gather by pair_slot.
    for (int q = 0; q < G; ++q) {
        const EpRankPlan& p = rp[size_t(q)];
        const int64_t S = rows[size_t(q)];
        ASSERT_EQ(p.returned_pairs, S * K);
        std::vector<int64_t> back(size_t(S * K), -1);
        for (int r = 0; r < G; ++r) {
            const EpRankPlan& from = rp[size_t(r)];
            ASSERT_EQ(from.ret_send_pairs[size_t(q)], p.ret_recv_pairs[size_t(r)]);
            for (int64_t j = 0; j < p.ret_recv_pairs[size_t(r)]; ++j)
                back[size_t(p.ret_recv_at[size_t(r)] + j)] = computed[size_t(r)][size_t(from.ret_send_at[size_t(q)] + j)];
        }
        for (int64_t i = 0; i < S; ++i)
            for (int64_t k = 0; k < K; ++k) {
                const int32_t slot = plan[size_t(q)].pair_slot[size_t(i * K + k)];
                ASSERT_GE(slot, 0);
                ASSERT_LT(slot, S * K);
                EXPECT_EQ(back[size_t(slot)], pair_value(q, i, k)) << "rank " << q << " row " << i << " slot " << k;
            }
    }
}

TEST(CudaEpDispatchPlan, EveryPairGetsItsOwnExpertOutput) {
    std::mt19937 rng(7);
    struct Shape {
        std::vector<int64_t> rows;
        int64_t k, per_rank;
    };
    const std::vector<Shape> shapes = {{{5}, 3, 8},          {{1, 1}, 6, 128},        {{37, 70}, 3, 4},
                                       {{9, 0, 13}, 2, 3},    {{64, 1, 17, 30}, 6, 64}, {{3, 5, 7, 9, 11, 13, 15, 17}, 6, 32},
                                       {{200, 150}, 8, 8}};
    for (const Shape& s : shapes)
        for (int home : {-1, 0, 1}) {  // every other row on: -, the own rank, the next rank
            const int G = int(s.rows.size());
            std::vector<std::vector<int32_t>> ids;
            for (int q = 0; q < G; ++q)
                ids.push_back(random_ids(rng, s.rows[size_t(q)], s.k, G, s.per_rank, home >= 0 ? (q + home) % G : -1));
            SimResult r;
            simulate(s.rows, s.k, s.per_rank, ids, r);
            if (HasFatalFailure()) return;
            if (home >= 0 && s.k <= s.per_rank && (home == 0 ? G > 1 : G > 2)) {
                // Half the rows need one rank only: they reach one peer of G - 1 (none if it is their own).
                EXPECT_LT(r.rows_sent, r.rows_all) << G << " ranks";
            }
        }
}

TEST(CudaEpDispatchPlan, RankPlanOffsetsAndBadCounts) {
    // Two ranks. Rank 0: 3 rows to itself, 2 to rank 1; pairs 4 on itself, 2 on rank 1.
    // Rank 1: 1 row to rank 0, 4 to itself; pairs 1 on rank 0, 7 on itself.
    const std::vector<int32_t> counts = {3, 2, 4, 2, 1, 4, 1, 7};
    const EpRankPlan p1 = cuda::make_ep_rank_plan(2, 1, counts);
    EXPECT_EQ(p1.send_rows, (std::vector<int64_t>{1, 4}));
    EXPECT_EQ(p1.recv_rows, (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(p1.recv_at, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(p1.recv_total, 6);
    EXPECT_EQ(p1.ret_send_pairs, (std::vector<int64_t>{2, 7}));  // rank 0's pairs on 1, then its own
    EXPECT_EQ(p1.ret_send_at, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(p1.computed_pairs, 9);
    EXPECT_EQ(p1.ret_recv_pairs, (std::vector<int64_t>{1, 7}));
    EXPECT_EQ(p1.ret_recv_at, (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(p1.returned_pairs, 8);
    EXPECT_THROW(cuda::make_ep_rank_plan(2, 2, counts), Error);
    EXPECT_THROW(cuda::make_ep_rank_plan(3, 0, counts), Error);
    std::vector<int32_t> bad = counts;
    bad[5] = -1;
    EXPECT_THROW(cuda::make_ep_rank_plan(2, 0, bad), Error);
    EXPECT_THROW(cuda::ep_route_plan_host(std::vector<int32_t>{0, 9}, 1, 2, 4, 2), Error);  // expert 9 of 8
}

// The device planning kernels equal the host references, across chunk boundaries of the one-block scan.
TEST(CudaEpDispatchPlan, DeviceKernelsEqualHostReference) {
    if (cuda::device_count() < 1) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(11);
    struct Shape {
        int64_t rows, k;
        int ranks;
        int64_t per_rank;
        int home;
    };
    for (const Shape& s : {Shape{1, 6, 2, 128, -1}, Shape{5, 3, 2, 4, 0}, Shape{1500, 6, 2, 128, 1},
                           Shape{3000, 6, 8, 32, 3}, Shape{2049, 1, 3, 5, -1}, Shape{700, 16, 16, 4, -1}}) {
        const std::vector<int32_t> ids = random_ids(rng, s.rows, s.k, s.ranks, s.per_rank, s.home);
        const EpRoutePlan want = cuda::ep_route_plan_host(ids, s.rows, s.k, s.per_rank, s.ranks);
        const size_t n = ids.size(), G = size_t(s.ranks);
        cuda::DeviceBuffer d_ids(n * 4), d_send(G * size_t(s.rows) * 4), d_slot(n * 4), d_counts(2 * G * 4), d_compact(n * 4);
        d_ids.copy_from_host(ids.data(), n * 4);
        const cuda::Stream st{};
        cuda::ep_route_plan({.ids = static_cast<const int32_t*>(d_ids.data()), .rows = s.rows, .top_k = s.k,
                             .experts_per_rank = int32_t(s.per_rank), .ranks = s.ranks,
                             .send_rows = static_cast<int32_t*>(d_send.data()), .pair_slot = static_cast<int32_t*>(d_slot.data()),
                             .counts = static_cast<int32_t*>(d_counts.data())},
                            st);
        const int32_t me = s.ranks - 1;
        cuda::ep_local_slots({.ids = static_cast<const int32_t*>(d_ids.data()), .n = int64_t(n),
                              .first_expert = int32_t(me * s.per_rank), .experts_per_rank = int32_t(s.per_rank),
                              .compact = static_cast<int32_t*>(d_compact.data())},
                             st);
        cuda::synchronize();
        std::vector<int32_t> send(G * size_t(s.rows)), slot(n), counts(2 * G), compact(n);
        d_send.copy_to_host(send.data(), send.size() * 4);
        d_slot.copy_to_host(slot.data(), n * 4);
        d_counts.copy_to_host(counts.data(), counts.size() * 4);
        d_compact.copy_to_host(compact.data(), n * 4);
        const std::string what = std::to_string(s.rows) + " rows, top " + std::to_string(s.k) + ", " +
                                 std::to_string(s.ranks) + " ranks";
        EXPECT_EQ(counts, want.counts) << what;
        EXPECT_EQ(slot, want.pair_slot) << what;
        for (size_t r = 0; r < G; ++r)
            for (int64_t j = 0; j < want.counts[r]; ++j)
                ASSERT_EQ(send[r * size_t(s.rows) + size_t(j)], want.send_rows[r * size_t(s.rows) + size_t(j)]) << what;
        EXPECT_EQ(compact, cuda::ep_local_slots_host(ids, int32_t(me * s.per_rank), int32_t(s.per_rank))) << what;
    }
}

}  // namespace
}  // namespace deepinfer
