// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/ep/dispatch_plan.h"

#include "deepinfer/check.h"

namespace deepinfer::cuda {

EpRoutePlan ep_route_plan_host(std::span<const int32_t> ids, int64_t rows, int64_t top_k, int64_t experts_per_rank,
                               int ranks) {
    DI_CHECK(ranks >= 1 && ranks <= kMaxEpRanks && experts_per_rank > 0 && top_k > 0, "ep_route_plan: ", ranks,
             " ranks of ", experts_per_rank, " experts, top ", top_k);
    DI_CHECK(int64_t(ids.size()) == rows * top_k, "ep_route_plan: ", ids.size(), " ids for ", rows, " rows");
    const size_t G = size_t(ranks);
    EpRoutePlan p;
    p.send_rows.assign(G * size_t(rows), -1);
    p.pair_slot.assign(ids.size(), -1);
    std::vector<int32_t> rows_to(G, 0), pairs_on(G, 0);
    for (int64_t i = 0; i < rows; ++i) {
        std::vector<bool> needs(G, false);
        for (int64_t k = 0; k < top_k; ++k) {
            const int32_t e = ids[size_t(i * top_k + k)];
            DI_CHECK(e >= 0 && e < experts_per_rank * ranks, "ep_route_plan: expert ", e);
            const size_t r = size_t(e / experts_per_rank);
            p.pair_slot[size_t(i * top_k + k)] = pairs_on[r]++;  // position among this rank's pairs on r
            needs[r] = true;
        }
        for (size_t r = 0; r < G; ++r)
            if (needs[r]) p.send_rows[r * size_t(rows) + size_t(rows_to[r]++)] = int32_t(i);
    }
    std::vector<int32_t> base(G, 0);
    for (size_t r = 1; r < G; ++r) base[r] = base[r - 1] + pairs_on[r - 1];
    for (size_t j = 0; j < ids.size(); ++j) p.pair_slot[j] += base[size_t(ids[j] / experts_per_rank)];
    p.counts = rows_to;
    p.counts.insert(p.counts.end(), pairs_on.begin(), pairs_on.end());
    return p;
}

std::vector<int32_t> ep_local_slots_host(std::span<const int32_t> ids, int32_t first_expert, int32_t experts_per_rank) {
    std::vector<int32_t> out(ids.size(), -1);
    int32_t next = 0;
    for (size_t j = 0; j < ids.size(); ++j)
        if (ids[j] >= first_expert && ids[j] < first_expert + experts_per_rank) out[j] = next++;
    return out;
}

EpRankPlan make_ep_rank_plan(int ranks, int rank, std::span<const int32_t> counts) {
    DI_CHECK(ranks >= 1 && ranks <= kMaxEpRanks && rank >= 0 && rank < ranks, "ep plan: rank ", rank, " of ", ranks);
    const size_t G = size_t(ranks), me = size_t(rank);
    DI_CHECK(counts.size() == G * 2 * G, "ep plan: ", counts.size(), " counts for ", ranks, " ranks");
    for (int32_t c : counts) DI_CHECK(c >= 0, "ep plan: negative count ", c);
    auto rows_to = [&](size_t q, size_t r) { return int64_t(counts[q * 2 * G + r]); };
    auto pairs_on = [&](size_t q, size_t r) { return int64_t(counts[q * 2 * G + G + r]); };
    EpRankPlan p;
    p.ranks = ranks;
    p.rank = rank;
    p.send_rows.resize(G);
    p.recv_rows.resize(G);
    p.recv_at.resize(G);
    p.ret_send_pairs.resize(G);
    p.ret_send_at.resize(G);
    p.ret_recv_pairs.resize(G);
    p.ret_recv_at.resize(G);
    for (size_t q = 0; q < G; ++q) {
        p.send_rows[q] = rows_to(me, q);
        p.recv_rows[q] = rows_to(q, me);
        p.recv_at[q] = p.recv_total;
        p.recv_total += p.recv_rows[q];
        p.ret_send_pairs[q] = pairs_on(q, me);
        p.ret_send_at[q] = p.computed_pairs;
        p.computed_pairs += p.ret_send_pairs[q];
        p.ret_recv_pairs[q] = pairs_on(me, q);
        p.ret_recv_at[q] = p.returned_pairs;
        p.returned_pairs += p.ret_recv_pairs[q];
    }
    return p;
}

}  // namespace deepinfer::cuda
