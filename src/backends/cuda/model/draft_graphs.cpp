// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/draft_graphs.h"

#include <algorithm>

#include "deepinfer/check.h"

namespace deepinfer::cuda {

std::vector<int64_t> DraftGraphShape::active(std::span<const DraftRequest> requests, std::span<const int64_t> order,
                                             int64_t steps) const {
    std::vector<int64_t> n(static_cast<size_t>(steps), slots);
    if (graph) return n;
    const int64_t R = static_cast<int64_t>(order.size());
    for (int64_t k = 0; k < steps; ++k) {
        int64_t a = 0;
        while (a < R && requests[size_t(order[size_t(a)])].num_drafts > k) ++a;
        n[size_t(k)] = a;
    }
    return n;
}

DraftGraphShape draft_graph_shape(bool graphs, int64_t requests, int64_t max_seqs) {
    const int64_t bucket = graphs ? graph_bucket(requests) : 0;
    if (bucket > 0 && bucket <= max_seqs) return {.graph = true, .slots = bucket};
    return {.graph = false, .slots = requests};
}

DraftProbs draft_probs_mode(std::span<const DraftRequest> requests) {
    bool sampled = false, host = false;
    for (const DraftRequest& r : requests) {
        if (r.uniforms.empty() || r.temperature <= 0) continue;
        sampled = true;
        host = host || r.host_probs;
    }
    return !sampled ? DraftProbs::kNone : host ? DraftProbs::kHost : DraftProbs::kDevice;
}

uint8_t* DraftGraphs::host_out(size_t capacity) {
    if (!out_ || out_->nbytes() < capacity) {
        if (out_) graphs_.clear();  // they copy to the old buffer
        out_ = std::make_unique<PinnedBuffer>(capacity);
    }
    return static_cast<uint8_t*>(out_->host());
}

float* DraftGraphs::host_probs(size_t capacity) {
    if (!probs_ || probs_->nbytes() < capacity) {
        if (probs_) graphs_.clear();  // (the sampled ones copy to the old buffer)
        probs_ = std::make_unique<PinnedBuffer>(capacity);
    }
    return static_cast<float*>(probs_->host());
}

float* DraftGraphs::device_probs(size_t capacity) {
    if (!device_probs_ || device_probs_->nbytes() < capacity) {
        if (device_probs_) graphs_.clear();  // (the sampled ones write to the old buffer)
        device_probs_.reset();               // (freed first: the old and the new need not fit together)
        device_probs_ = std::make_unique<DeviceBuffer>(capacity);
    }
    return static_cast<float*>(device_probs_->data());
}

DraftBuffers DraftGraphs::buffers(const DraftGraphShape& shape, DraftProbs probs, int64_t steps, int64_t vocab,
                                  int64_t max_slots, std::unique_ptr<PinnedBuffer>& staging_out,
                                  std::unique_ptr<PinnedBuffer>& staging_probs) {
    DraftBuffers b;
    if (probs != DraftProbs::kNone)
        b.device_probs = device_probs(size_t(steps * std::max(max_slots, shape.slots) * vocab) * sizeof(float));
    const bool copy = probs == DraftProbs::kHost;
    if (shape.graph) {
        b.out = host_out(size_t(2 * steps * max_slots) * 4);
        if (copy) b.host_probs = host_probs(size_t(steps * max_slots * vocab) * sizeof(float));
        return b;
    }
    const size_t out_bytes = size_t(2 * steps * shape.slots) * 4;
    if (!staging_out || staging_out->nbytes() < out_bytes) staging_out = std::make_unique<PinnedBuffer>(out_bytes * 2);
    b.out = static_cast<uint8_t*>(staging_out->host());
    if (copy) {
        const size_t probs_bytes = size_t(steps * shape.slots * vocab) * sizeof(float);
        if (!staging_probs || staging_probs->nbytes() < probs_bytes)
            staging_probs = std::make_unique<PinnedBuffer>(probs_bytes);
        b.host_probs = static_cast<float*>(staging_probs->host());
    }
    return b;
}

void DraftGraphs::run(int64_t slots, int64_t steps, DraftProbs probs, DeviceArena& arena, Stream s,
                      const std::function<void()>& compute, int64_t& captures, int64_t& replays) {
    graphs_.run({slots, steps, static_cast<int64_t>(probs)}, arena, s, [&]() -> float* {
        compute();
        return nullptr;
    }, captures, replays);
}

}  // namespace deepinfer::cuda
