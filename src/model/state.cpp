// SPDX-License-Identifier: Apache-2.0
// Construction and accounting of per-sequence state.
#include "model/state.h"

#include "deepinfer/check.h"

namespace deepinfer {
namespace {
CompressorState make_compressor(int64_t ratio, int64_t d, bool overlap, const std::shared_ptr<StatePool>& pool) {
    CompressorState s;
    s.ratio = ratio;
    s.head_dim = d;
    s.overlap = overlap;
    s.width = overlap ? 2 * d : d;
    s.ring_rows = (overlap ? 2 : 1) * ratio + kRingHeadroom;
    s.ring_kv = PagedRing(s.ring_rows, s.width, pool);
    s.ring_gate = PagedRing(s.ring_rows, s.width, pool);
    s.entries = PagedRows(d, pool);
    return s;
}

LayerState make_layer(const ModelConfig& c, AttentionType type, int64_t ratio, const std::shared_ptr<StatePool>& pool) {
    LayerState s;
    s.window_rows = c.sliding_window + kRingHeadroom;
    s.window = PagedRing(s.window_rows, c.head_dim, pool);
    if (type != AttentionType::kSliding) {
        const bool csa = type == AttentionType::kCsa;
        s.compressor = make_compressor(ratio, c.head_dim, csa, pool);
        if (csa) s.indexer = make_compressor(ratio, c.index_head_dim, true, pool);
    }
    return s;
}

size_t compressor_ring_bytes(const CompressorState& s) { return s.ring_kv.bytes() + s.ring_gate.bytes(); }
size_t compressor_ring_unshared(const CompressorState& s) {
    return s.ring_kv.unshared_bytes() + s.ring_gate.unshared_bytes();
}
}  // namespace

V4SequenceState make_sequence_state(const ModelConfig& c, int64_t num_mtp_layers, std::shared_ptr<StatePool> pool) {
    V4SequenceState s;
    s.pool = pool;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        s.layers.push_back(make_layer(c, c.layer_types[size_t(l)], c.compress_ratio(l), pool));
    for (int64_t m = 0; m < num_mtp_layers; ++m) s.mtp_layers.push_back(make_layer(c, AttentionType::kSliding, 0, pool));
    return s;
}

size_t V4SequenceState::bytes() const {
    size_t total = 0;
    for (const auto* group : {&layers, &mtp_layers})
        for (const LayerState& l : *group)
            total += l.window.bytes() + compressor_ring_bytes(l.compressor) + compressor_ring_bytes(l.indexer) +
                     l.compressor.entries.bytes() + l.indexer.entries.bytes();
    for (const PagedRing& r : dspark.stages) total += r.bytes();
    return total;
}

void V4SequenceState::truncate(int64_t n) {
    DI_CHECK(n >= 0 && n <= length, "truncate to ", n, " tokens of a sequence of ", length);
    length = n;
    for (auto* group : {&layers, &mtp_layers})
        for (LayerState& l : *group)
            for (CompressorState* c : {&l.compressor, &l.indexer})
                if (c->ratio > 0 && c->entries.size() > n / c->ratio) c->entries.truncate(n / c->ratio);
}

size_t V4SequenceState::unshared_bytes() const {
    size_t total = 0;
    for (const auto* group : {&layers, &mtp_layers})
        for (const LayerState& l : *group)
            total += l.window.unshared_bytes() + compressor_ring_unshared(l.compressor) +
                     compressor_ring_unshared(l.indexer) + l.compressor.entries.unshared_bytes() +
                     l.indexer.entries.unshared_bytes();
    for (const PagedRing& r : dspark.stages) total += r.unshared_bytes();
    return total;
}

}  // namespace deepinfer

namespace deepinfer {
uint64_t estimate_state_bytes(const ModelConfig& c, int64_t n, uint64_t page_bytes, int64_t num_mtp_layers) {
    uint64_t total = uint64_t(num_mtp_layers) * paged_bytes(c.sliding_window + kRingHeadroom, c.head_dim, page_bytes);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        total += paged_bytes(c.sliding_window + kRingHeadroom, c.head_dim, page_bytes);
        const int64_t m = c.compress_ratio(l);
        if (m == 0) continue;
        const bool csa = c.layer_types[size_t(l)] == AttentionType::kCsa;
        const int64_t width = csa ? 2 * c.head_dim : c.head_dim;
        total += 2 * paged_bytes((csa ? 2 : 1) * m + kRingHeadroom, width, page_bytes);  // compressor rows
        total += paged_bytes(n / m, c.head_dim, page_bytes);
        if (csa)
            total += 2 * paged_bytes(2 * m + kRingHeadroom, 2 * c.index_head_dim, page_bytes) +
                     paged_bytes(n / m, c.index_head_dim, page_bytes);
    }
    return total;
}
}  // namespace deepinfer
