// SPDX-License-Identifier: Apache-2.0
// How one forward of an expert-parallel model (cuda_ep_model.h) splits over its ranks, and where a new
// sequence goes: pure host logic (no CUDA), unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::cuda {

struct EpSplit {
    struct Place {
        int rank = 0;
        int64_t index = 0;  // among the rank's chunks
    };
    std::vector<Place> chunk;                 // per input chunk
    std::vector<std::vector<size_t>> chunks;  // per rank: its input chunks, in input order
    std::vector<std::vector<size_t>> draws;   // per rank: its input draws, in input order
    std::vector<int64_t> rows;                // per rank: the rows it runs (1 for an idle rank)
    std::vector<uint8_t> idle;                // per rank: 1 when it has no chunk and runs one idle row
};

// chunk_rank[i] and chunk_rows[i]: the rank of input chunk i's sequence and its tokens; draw_chunk[k]:
// the input chunk of draw k. Every rank takes part in every forward (it serves its experts): a rank
// without chunks runs one idle row. Throws for a rank or chunk index out of range.
EpSplit split_ep_batch(int ranks, std::span<const int> chunk_rank, std::span<const int64_t> chunk_rows,
                       std::span<const int32_t> draw_chunk);

// The rank a new sequence goes to: the fewest live sequences, the lowest rank on a tie.
int least_loaded_rank(std::span<const int64_t> live);

}  // namespace deepinfer::cuda
