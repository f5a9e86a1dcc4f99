// SPDX-License-Identifier: Apache-2.0
// ExpertExchange: the row transfers of expert parallelism between the G GPUs of one replica (one
// rank per GPU, all in one process, one host thread per rank). Rank r holds the routed experts
// [r·E/G, (r+1)·E/G) of every layer and its own sequences (attention is data-parallel); in each MoE
// layer every rank
//   1. gathers the MoE inputs of every rank's rows (all_gather_rows: its own rows go to every peer),
//   2. runs its experts on the pairs of all those rows that chose one of them,
//   3. returns each peer the expert outputs of that peer's pairs (return_rows), and
//   4. takes each of its pairs' output from the rank holding the pair's expert, then combines as on
//      one GPU (same order, same rounding: results equal the single-GPU model's).
// The sizes are known on the host before a forward (set_rows), so no step waits on the device.
// No CUDA or NCCL types here; the NCCL implementation is nccl_exchange.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

class ExpertExchange {
public:
    virtual ~ExpertExchange() = default;
    virtual int ranks() const = 0;
    // The CUDA device of each rank.
    virtual int device(int rank) const = 0;
    // The rows each rank runs in the next forward (called by the driver before it starts the ranks).
    virtual void set_rows(std::span<const int64_t> rows) = 0;
    virtual int64_t rows(int rank) const = 0;
    virtual int64_t first_row(int rank) const = 0;  // Σ rows of the ranks before it
    virtual int64_t total_rows() const = 0;
    // Enqueues on s (rank's stream): dst [total_rows, row_bytes] ← every rank's src [rows(q), row_bytes]
    // at first_row(q). Every rank must call it, in the same order of calls.
    virtual void all_gather_rows(int rank, const void* src, void* dst, size_t row_bytes, Stream s) = 0;
    // Enqueues on s: src holds [total_rows · per_row, row_bytes] (every rank's rows, per_row rows each);
    // rank q receives the block of its own rows from every rank p at dst + p · rows(q) · per_row rows.
    virtual void return_rows(int rank, const void* src, void* dst, size_t row_bytes, int64_t per_row, Stream s) = 0;
};

}  // namespace deepinfer::cuda
