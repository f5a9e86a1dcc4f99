// SPDX-License-Identifier: Apache-2.0
// CUDA graphs of decode steps, shared by the V4 and V4.1 CUDA models: the padded batch-size and
// context buckets a pure decode step runs in, and the cache of graphs captured per (rows, context)
// bucket. A step's work is enqueued by a `compute` callback that reads its inputs from a block at a
// fixed arena offset and allocates the same arena ranges every step of its bucket, so replaying the
// graph captured on the bucket's first step is the eager path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "backends/cuda/cuda_backend.h"
#include "deepinfer/model.h"

namespace deepinfer::cuda {

// Padded batch sizes of decode steps that replay a CUDA graph (a step of S sequences runs the graph
// of the smallest bucket >= S; padding rows decode token 0 at position 0 of a scratch sequence).
inline constexpr int64_t kGraphBuckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512};
// The longest chunk a graph step holds besides decode rows (CudaV41Model: an anchor and up to 7 drafts, a
// prompt's tail): a step of such chunks has at most as many segments as rows, so tables sized per row of
// the bucket fit every composition.
inline constexpr int64_t kGraphChunkRows = 8;
// The smallest bucket >= rows; 0 above the largest.
int64_t graph_bucket(int64_t rows);
// Context bucket of a graph: the sizes that depend on the longest sequence (indexer scores,
// attention candidates) are taken for the next power of two of (largest position + 1), at least
// 256, at most max_len.
int64_t context_bucket(int64_t positions, int64_t max_len);

// The largest forward the engine's limits allow (ModelOptions::max_batch_tokens, max_num_seqs),
// which the workspace is sized for: rows cover a padded graph step of max_num_seqs decode rows too.
struct ForwardLimits {
    int64_t max_rows = 1, max_seqs = 1;
    static ForwardLimits of(const ModelOptions& options);
};

// A graph's key: (rows, context, variant); the variant tells apart graphs of one bucket with different
// work (+1: the step's rows tap for the DSpark drafter, cuda_v41_dspark.cpp / cuda_dspark_v4.cpp; +2: a
// V4 step of short chunks, whose segments are sized for kGraphChunkRows rows, cuda_model.cpp; +4: a V4
// step that also runs the MTP block over its rows, cuda_mtp.cpp).
using GraphKey = std::tuple<int64_t, int64_t, int64_t>;

class DecodeGraphs {
public:
    explicit DecodeGraphs(bool enabled) : enabled_(enabled) {}
    bool enabled() const { return enabled_; }
    // Runs the step of bucket `key`: replays its graph, capturing it first on the bucket's first
    // step. `compute` enqueues the step on `s` from the arena's current mark (the end of the inputs
    // block) and returns the logits (arena memory). A capture that fails turns graphs off for good
    // (a warning) and this step runs `compute` directly. Counts captures and replays.
    float* run(GraphKey key, DeviceArena& arena, Stream s, const std::function<float*()>& compute,
               int64_t& captures, int64_t& replays);
    // Drops every captured graph (the next step of each bucket captures again): after a change to
    // what a step enqueues.
    void clear() { graphs_.clear(); }

private:
    struct Entry {
        std::unique_ptr<CudaGraph> graph;
        float* logits = nullptr;    // where the replay leaves the logits
        size_t start = 0, end = 0;  // the arena range the captured work uses
    };
    bool enabled_;
    std::map<GraphKey, Entry> graphs_;
};

}  // namespace deepinfer::cuda
