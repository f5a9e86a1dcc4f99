// SPDX-License-Identifier: Apache-2.0
// CUDA graphs of DSpark draft calls, shared by the V4 (0731) and V4.1 CUDA drafters: a call of R
// requests runs in the request bucket of graph_bucket(R) (decode_graphs.h): the slots past the
// requests draft token 0 at position 0 from the first request's rings, and every Markov step runs
// every slot. Rows compute alone, so the requests' drafts are the eager call's bit for bit; the
// captured call copies its results to pinned buffers that never move (a graph holds their addresses).
// Three graphs per bucket and draft count (DSpark: its block; MTP: the call's longest chain): argmax
// drafts only; calls where some request samples its drafts (which sample per slot from the call's
// temperatures and uniforms, device inputs, into the persistent device distributions buffer) and some
// sampled request reads the distributions on the host (DraftRequest::host_probs: every step's copied to
// pinned memory too); and sampled calls whose distributions stay on the device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backends/cuda/model/decode_graphs.h"
#include "deepinfer/drafter.h"

namespace deepinfer::cuda {

struct DraftGraphShape {
    bool graph = false;
    int64_t slots = 0;  // request slots the call computes: R eagerly, the bucket in a graph
    // Per Markov step the slots that run: eagerly the requests still drafting (a prefix of `order`, sorted
    // by draft count, descending), in a graph every slot.
    std::vector<int64_t> active(std::span<const DraftRequest> requests, std::span<const int64_t> order,
                                int64_t steps) const;
};
// `graphs`: graphs are on. A bucket above `max_seqs` (the workspace's bound) runs eagerly.
DraftGraphShape draft_graph_shape(bool graphs, int64_t requests, int64_t max_seqs);

// What a draft call does with the distributions of its sampled drafts.
enum class DraftProbs : int64_t {
    kNone = 0,    // argmax drafts only: none
    kHost = 1,    // some request samples and some sampled request wants them on the host: device buffer + copy
    kDevice = 2,  // requests sample, none wants them on the host: the device buffer only
};
// `requests`' mode (sampled: uniforms given and temperature > 0).
DraftProbs draft_probs_mode(std::span<const DraftRequest> requests);

// Where a draft call's results land. out (pinned) = [steps, slots] int32 drafts then [steps, slots] f32
// confidences; device_probs = [steps, slots, vocab] f32 on the device, the sampled slots' distributions
// (null for kNone); host_probs (pinned) = their copy, only for kHost (else null).
struct DraftBuffers {
    uint8_t* out = nullptr;
    float* device_probs = nullptr;
    float* host_probs = nullptr;
};

class DraftGraphs {
public:
    explicit DraftGraphs(bool enabled) : graphs_(enabled) {}
    bool enabled() const { return graphs_.enabled(); }
    // The pinned results buffer of graph calls, at least `capacity` bytes: the same pointer from call to
    // call; a call that needs more replaces it and drops the captured graphs (they copy to the old one).
    // DSpark asks for the largest bucket's size on its first call, so its buffer never moves.
    uint8_t* host_out(size_t capacity);
    // The pinned distributions buffer of graph calls that copy them ([steps, slots, vocab] f32), likewise.
    float* host_probs(size_t capacity);
    // The device distributions buffer of sampled calls, graph or eager ([steps, slots, vocab] f32), at least
    // `capacity` bytes: the same pointer from call to call (not the arena: Draft::device_probs outlives the
    // call); a call that needs more replaces it and drops the captured graphs (they write to the old one).
    // The DSpark models reserve the largest call's size at load (no allocation while drafting).
    float* device_probs(size_t capacity);
    // The call's buffers: a graph's (host_out / host_probs, sized for `max_slots` slots), else the caller's
    // staging buffers, grown to the call's slots when short; device_probs for max(max_slots, the call's
    // slots) slots.
    DraftBuffers buffers(const DraftGraphShape& shape, DraftProbs probs, int64_t steps, int64_t vocab, int64_t max_slots,
                         std::unique_ptr<PinnedBuffer>& staging_out, std::unique_ptr<PinnedBuffer>& staging_probs);
    // Replays the graph of `slots`, `steps` (drafts per slot) and `probs`, capturing it on the first such
    // call (DecodeGraphs::run).
    void run(int64_t slots, int64_t steps, DraftProbs probs, DeviceArena& arena, Stream s,
             const std::function<void()>& compute, int64_t& captures, int64_t& replays);
    void clear() { graphs_.clear(); }  // DecodeGraphs::clear

private:
    DecodeGraphs graphs_;
    std::unique_ptr<PinnedBuffer> out_, probs_;
    std::unique_ptr<DeviceBuffer> device_probs_;
};

}  // namespace deepinfer::cuda
