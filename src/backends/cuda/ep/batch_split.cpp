// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/ep/batch_split.h"

#include "deepinfer/check.h"

namespace deepinfer::cuda {

EpSplit split_ep_batch(int ranks, std::span<const int> chunk_rank, std::span<const int64_t> chunk_rows,
                       std::span<const int32_t> draw_chunk) {
    DI_CHECK(ranks > 0, "expert parallelism over ", ranks, " ranks");
    DI_CHECK(chunk_rank.size() == chunk_rows.size(), "split_ep_batch: ", chunk_rank.size(), " ranks for ",
             chunk_rows.size(), " chunks");
    EpSplit s;
    const size_t G = static_cast<size_t>(ranks);
    s.chunks.resize(G);
    s.draws.resize(G);
    s.rows.assign(G, 0);
    s.idle.assign(G, 0);
    s.chunk.resize(chunk_rank.size());
    for (size_t i = 0; i < chunk_rank.size(); ++i) {
        const int r = chunk_rank[i];
        DI_CHECK(r >= 0 && r < ranks, "split_ep_batch: chunk ", i, " on rank ", r, " of ", ranks);
        s.chunk[i] = {r, static_cast<int64_t>(s.chunks[size_t(r)].size())};
        s.chunks[size_t(r)].push_back(i);
        s.rows[size_t(r)] += chunk_rows[i];
    }
    for (size_t k = 0; k < draw_chunk.size(); ++k) {
        const int32_t c = draw_chunk[k];
        DI_CHECK(c >= 0 && size_t(c) < chunk_rank.size(), "forward_sampled: draw of chunk ", c, " of ",
                 chunk_rank.size());
        s.draws[size_t(s.chunk[size_t(c)].rank)].push_back(k);
    }
    for (size_t r = 0; r < G; ++r)
        if (s.chunks[r].empty()) {
            s.idle[r] = 1;
            s.rows[r] = 1;
        }
    return s;
}

int least_loaded_rank(std::span<const int64_t> live) {
    DI_CHECK(!live.empty(), "least_loaded_rank: no ranks");
    int best = 0;
    for (int r = 1; r < static_cast<int>(live.size()); ++r)
        if (live[size_t(r)] < live[size_t(best)]) best = r;
    return best;
}

}  // namespace deepinfer::cuda
