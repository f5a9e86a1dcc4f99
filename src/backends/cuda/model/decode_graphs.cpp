// SPDX-License-Identifier: Apache-2.0
// Decode-step buckets and the capture/replay of their CUDA graphs.
#include "backends/cuda/model/decode_graphs.h"

#include <algorithm>
#include <exception>

#include "deepinfer/check.h"
#include "deepinfer/log.h"

namespace deepinfer::cuda {

int64_t graph_bucket(int64_t rows) {
    for (int64_t b : kGraphBuckets)
        if (b >= rows) return b;
    return 0;
}

int64_t context_bucket(int64_t positions, int64_t max_len) {
    int64_t b = 256;
    while (b < positions) b *= 2;
    return std::min(b, max_len);
}

ForwardLimits ForwardLimits::of(const ModelOptions& o) {
    ForwardLimits l;
    l.max_seqs = std::max<int64_t>(1, o.max_num_seqs);
    l.max_rows = std::max({int64_t{1}, o.max_batch_tokens, graph_bucket(l.max_seqs)});
    return l;
}

float* DecodeGraphs::run(GraphKey key, DeviceArena& arena, Stream s,
                         const std::function<float*()>& compute, int64_t& captures, int64_t& replays) {
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
        const size_t start = arena.mark();
        auto graph = std::make_unique<CudaGraph>();
        float* logits = nullptr;
        CudaGraph::begin_capture(s);
        try {
            logits = compute();
            graph->end_capture(s);
        } catch (const std::exception& e) {
            CudaGraph::abort_capture(s);
            DI_LOG_WARN("CUDA graph capture failed ({}); decode steps launch their kernels directly from now on", e.what());
            enabled_ = false;
            arena.reset(start);
            return compute();
        }
        const size_t end = arena.mark();
        arena.reset(start);  // the capture ran nothing: the replay below computes
        it = graphs_.emplace(key, Entry{std::move(graph), logits, start, end}).first;
        ++captures;
    }
    const Entry& g = it->second;
    DI_ICHECK(arena.mark() == g.start);  // the inputs of a bucket sit at one arena offset
    g.graph->launch(s);
    arena.reset(g.end);
    ++replays;
    return g.logits;
}

}  // namespace deepinfer::cuda
