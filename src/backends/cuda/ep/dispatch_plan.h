// SPDX-License-Identifier: Apache-2.0
// The routed dispatch of expert parallelism (expert_exchange.h), host side: no CUDA here, so the
// index scheme is tested without a GPU (tests/model/cuda_ep_test.cpp simulates G ranks with it).
//
// Rank q has S rows with top-k expert ids (global); rank r holds experts [r·El, (r+1)·El).
//  - q sends rank r the rows that have at least one expert on r, ascending (rows_to[r] of them), and
//    its expert ids and routing weights with them; r receives the blocks of every q in rank order, so
//    its received rows are T = Σ_q rows_from[q] in (q, row) order.
//  - r runs its experts on the pairs (received row, k) whose expert is local, and writes each output at
//    its compact index: the pair's position among the local pairs of all received rows in row-major
//    order. The pairs of q's block are then contiguous, pairs_on[q→r] of them, in q's row-major order.
//  - r returns each q its block; q stores the blocks of every r in rank order in a [S·K] return
//    buffer, so pair (i, k) with expert on r sits at Σ_{r'<r} pairs_on[r'] + (its position among q's
//    pairs on r, row-major) — pair_slot, computed on the device before any transfer.
// The per-peer counts (rows_to[r], pairs_on[r]: 2G ints per rank) are the only sizes the host needs;
// the ranks share them (ExpertExchange::share_counts_*) and each derives its EpRankPlan.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::cuda {

// The ranks the routed dispatch handles (fixed-size arrays in the device kernels' parameters).
inline constexpr int kMaxEpRanks = 16;

// What the device plans for a rank's own rows (ep_route_plan in ep_dispatch_ops.h; this is its
// host reference).
struct EpRoutePlan {
    std::vector<int32_t> send_rows;  // [G · S]: send_rows[r·S + j], j < rows_to[r]: the j-th row with an expert on r
    std::vector<int32_t> pair_slot;  // [S · K]: the pair's row in this rank's return buffer
    std::vector<int32_t> counts;     // [2G]: rows_to[r] (r < G), then pairs_on[r]
};
EpRoutePlan ep_route_plan_host(std::span<const int32_t> ids, int64_t rows, int64_t top_k, int64_t experts_per_rank,
                               int ranks);

// The receiving side's compact index of each received slot: its position among the slots whose expert
// is in [first_expert, first_expert + experts_per_rank), row-major; -1 for another rank's expert.
std::vector<int32_t> ep_local_slots_host(std::span<const int32_t> ids, int32_t first_expert, int32_t experts_per_rank);

// One rank's sizes and offsets for a layer, from every rank's counts ([G · 2G], rank q's 2G counts at q · 2G).
struct EpRankPlan {
    int ranks = 0, rank = 0;
    std::vector<int64_t> send_rows;                   // [G] rows this rank sends to r (r = rank: kept here)
    std::vector<int64_t> recv_rows, recv_at;          // [G] rows from q, and where q's block starts
    int64_t recv_total = 0;                           // T: the rows this rank's experts see
    std::vector<int64_t> ret_send_pairs, ret_send_at; // [G] outputs computed here for q, where they start
    int64_t computed_pairs = 0;                       // Σ_q ret_send_pairs[q]
    std::vector<int64_t> ret_recv_pairs, ret_recv_at; // [G] outputs from r, where they go in the return buffer
    int64_t returned_pairs = 0;                       // Σ_r ret_recv_pairs[r] = this rank's rows · top_k
};
EpRankPlan make_ep_rank_plan(int ranks, int rank, std::span<const int32_t> counts);

}  // namespace deepinfer::cuda
