// SPDX-License-Identifier: Apache-2.0
// Construction, truncation and accounting of the V4.1 per-sequence state.
#include "model/v41/state.h"

#include "deepinfer/check.h"

namespace deepinfer::v41 {

SequenceState make_sequence_state(const V41TextConfig& c, std::shared_ptr<StatePool> pool) {
    SequenceState s;
    s.pool = pool;
    s.layers.resize(static_cast<size_t>(c.num_hidden_layers));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        LayerState& ls = s.layers[size_t(l)];
        ls.window_rows = c.sliding_window + kRingHeadroom;
        ls.window = PagedRing(ls.window_rows, c.head_dim, pool);
        if (!c.is_kv_source(l)) continue;
        ls.ratio = c.compress_ratio(l);
        ls.compressed = PagedRows(c.head_dim, pool);
        ls.index_keys = PagedRows(c.index_head_dim, pool);
        if (ls.ratio > 1) {
            ls.pending_rows = ls.ratio + kRingHeadroom;
            ls.pending_kv = PagedRing(ls.pending_rows, c.head_dim, pool);
            ls.pending_gate = PagedRing(ls.pending_rows, c.head_dim, pool);
        }
    }
    if (!c.engram_layer_ids.empty()) s.engram_history.assign(size_t(c.engram_max_ngram_size - 1 + kRingHeadroom), 0);
    return s;
}

void SequenceState::truncate(int64_t n) {
    DI_CHECK(n >= 0 && n <= length, "truncate to ", n, " tokens of a sequence of ", length);
    length = n;
    for (LayerState& l : layers) {
        if (l.ratio == 0 || l.compressed.size() <= n / l.ratio) continue;
        l.compressed.truncate(n / l.ratio);
        l.index_keys.truncate(n / l.ratio);
    }
}

size_t SequenceState::bytes() const {
    size_t total = engram_history.size() * sizeof(int64_t);
    for (const PagedRing& r : dspark.stages) total += r.bytes();
    for (const LayerState& l : layers)
        total += l.window.bytes() + l.compressed.bytes() + l.index_keys.bytes() + l.pending_kv.bytes() +
                 l.pending_gate.bytes();
    return total;
}

size_t SequenceState::unshared_bytes() const {
    size_t total = engram_history.size() * sizeof(int64_t);
    for (const PagedRing& r : dspark.stages) total += r.unshared_bytes();
    for (const LayerState& l : layers)
        total += l.window.unshared_bytes() + l.compressed.unshared_bytes() + l.index_keys.unshared_bytes() +
                 l.pending_kv.unshared_bytes() + l.pending_gate.unshared_bytes();
    return total;
}

uint64_t estimate_state_bytes(const V41TextConfig& c, int64_t n, uint64_t page_bytes) {
    uint64_t total = c.engram_layer_ids.empty() ? 0 : uint64_t(c.engram_max_ngram_size - 1 + kRingHeadroom) * 8;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        total += paged_bytes(c.sliding_window + kRingHeadroom, c.head_dim, page_bytes);
        if (!c.is_kv_source(l)) continue;
        const int64_t r = c.compress_ratio(l);
        total += paged_bytes(n / r, c.head_dim, page_bytes) + paged_bytes(n / r, c.index_head_dim, page_bytes);
        if (r > 1) total += 2 * paged_bytes(r + kRingHeadroom, c.head_dim, page_bytes);
    }
    return total;
}

}  // namespace deepinfer::v41
