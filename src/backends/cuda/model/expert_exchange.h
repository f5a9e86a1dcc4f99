// SPDX-License-Identifier: Apache-2.0
// ExpertExchange: the row transfers of expert parallelism between the G GPUs of one replica (one
// rank per GPU, all in one process, one host thread per rank). Rank r holds the routed experts
// [r·E/G, (r+1)·E/G) of every layer and its own sequences (attention is data-parallel). In each MoE
// layer (routed_experts.cpp) the transfers run on the rank's side stream (comm_stream), forked from
// and joined back into the rank's compute stream by events, so the shared expert runs meanwhile.
// Two dispatch forms, the same results (every pair's expert output equals the single-GPU one):
//  - all-gather (sizes known on the host before the forward, set_rows): every rank's rows go to every
//    rank (one send_recv group), experts run on the pairs of all rows that chose one of theirs, and
//    each rank gets back the outputs of all its rows' slots from every rank (return_rows);
//  - routed (ep/dispatch_plan.h): a row goes to rank r only when one of its top-k experts lives on r,
//    and only the pairs r computed come back. The sizes depend on the routing, so each rank stages
//    its per-peer counts to the host and the ranks' host threads share them (share_counts_*: one
//    small device-to-host copy and a barrier per layer, no NCCL call) before the transfers
//    (send_recv) are enqueued.
// No CUDA or NCCL types here; the NCCL implementation is ep/nccl_exchange.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

// Which dispatch form the MoE layers use (CudaModelOptions::ep_dispatch).
enum class EpDispatch : uint8_t {
    kAuto,       // routed when the forward's rows (all ranks) reach CudaModelOptions::ep_routed_min_rows
    kAllGather,  // every row to every rank: no host round trip per layer (small batches)
    kRouted,     // rows only to the ranks of their experts, compact returns
};
const char* ep_dispatch_name(EpDispatch d);  // "auto" | "all_gather" | "routed"
EpDispatch parse_ep_dispatch(const char* name);  // throws on an unknown name

// One transfer of send_recv: `bytes` at `data` to (send) or from (receive) rank `peer`.
struct EpTransfer {
    int peer = 0;
    void* data = nullptr;
    size_t bytes = 0;
};

// What the exchange moved since construction (or reset_stats), summed over ranks.
struct EpExchangeStats {
    int64_t layers_routed = 0, layers_all_gather = 0;
    int64_t rows_sent = 0;         // rows sent to peers by the routed dispatch
    int64_t rows_broadcast = 0;    // what the all-gather would have sent for the same layers: rows · (G - 1)
    int64_t pairs_returned = 0;    // expert outputs sent back to peers by the routed dispatch
    int64_t slots_all_gather = 0;  // what the all-gather's return would have sent: rows · top_k · (G - 1)
};

class ExpertExchange {
public:
    virtual ~ExpertExchange() = default;
    virtual int ranks() const = 0;
    // The CUDA device of each rank.
    virtual int device(int rank) const = 0;
    // The rows each rank runs in the next forward (called by the driver before it starts the ranks), and with
    // V4.1's bounded replay the rows each rank's layers run from the replay cut on (`tail`: empty = the same rows;
    // every rank reaches the cut at the same layer). The queries below take `tail`: the cut's counts.
    virtual void set_rows(std::span<const int64_t> rows, std::span<const int64_t> tail) = 0;
    virtual int64_t rows(int rank, bool tail) const = 0;
    virtual int64_t first_row(int rank, bool tail) const = 0;  // Σ rows of the ranks before it
    virtual int64_t total_rows(bool tail) const = 0;
    // Whether this forward's MoE layers use the routed dispatch (the same answer on every rank).
    virtual bool routed() const = 0;

    // The rank's side stream for transfers (created on first use, on the rank's thread).
    virtual Stream comm_stream(int rank) = 0;
    // Later work on the side stream waits for the work queued on s so far.
    virtual void fork(int rank, Stream s) = 0;
    // Later work on s waits for the work queued on the side stream so far.
    virtual void join(int rank, Stream s) = 0;

    // Enqueues on s: src holds [total_rows · per_row, row_bytes] (every rank's rows, per_row rows each);
    // rank q receives the block of its own rows from every rank p at dst + p · rows(q) · per_row rows (the
    // counts of `tail` as above). Every rank must call it, in the same order of calls.
    virtual void return_rows(int rank, const void* src, void* dst, size_t row_bytes, int64_t per_row, Stream s, bool tail) = 0;

    // The routed dispatch's count exchange: share_counts_begin enqueues on s the copy of the rank's
    // `n` device counts to the host; share_counts_end waits for them, waits until every rank has
    // shared its own, and returns all of them, [ranks · n] in rank order (valid until the rank's
    // next share_counts_end). Every rank calls both once per layer, in the same order.
    virtual void share_counts_begin(int rank, const int32_t* counts, int n, Stream s) = 0;
    virtual std::span<const int32_t> share_counts_end(int rank) = 0;
    // Enqueues on s one group of sends and receives between this rank and its peers (sizes in
    // bytes, known on the host; each send matched by the peer's receive of the same size).
    virtual void send_recv(int rank, std::span<const EpTransfer> sends, std::span<const EpTransfer> recvs, Stream s) = 0;

    // Accounting (the rank's own counters; stats() sums them; call between forwards).
    virtual void add_stats(int rank, const EpExchangeStats& s) = 0;
    virtual EpExchangeStats stats() const = 0;
    virtual void reset_stats() = 0;
};

}  // namespace deepinfer::cuda
