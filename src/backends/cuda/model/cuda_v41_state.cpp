// SPDX-License-Identifier: Apache-2.0
// Construction, copy and truncation of the V4.1 device state.
#include "backends/cuda/model/cuda_v41_state.h"

#include "deepinfer/check.h"
#include "model/state.h"

namespace deepinfer::cuda {

V41CacheFormats V41CacheFormats::of(const V41TextConfig& c) {
    V41CacheFormats f;
    if (c.head_dim % kWindowBlock != 0) f.window = CacheFormat::kF32;
    if (c.head_dim % kEntryBlock != 0) f.entry = CacheFormat::kF32;
    if (c.index_head_dim % kKeyBlock != 0) f.key = CacheFormat::kF32;
    f.window_bytes = cache_row_bytes(f.window, c.head_dim, kWindowBlock);
    f.entry_bytes = cache_row_bytes(f.entry, c.head_dim, kEntryBlock);
    f.key_bytes = cache_row_bytes(f.key, c.index_head_dim, kKeyBlock);
    return f;
}

std::unique_ptr<V41DeviceState> make_v41_device_state(const V41TextConfig& c, int64_t max_len) {
    auto st = std::make_unique<V41DeviceState>();
    st->device = current_device();
    const V41CacheFormats f = V41CacheFormats::of(c);
    auto make = [&](int64_t rows, int64_t row_bytes) {
        auto b = std::make_unique<DeviceBuffer>(static_cast<size_t>(rows * row_bytes));
        fill_zero(b->data(), b->nbytes(), Stream{});
        st->nbytes += b->nbytes();
        return b;
    };
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        V41LayerBuffers lb;
        lb.window = make(c.sliding_window + kRingHeadroom, f.window_bytes);
        if (c.is_kv_source(l)) {
            const int64_t r = c.compress_ratio(l);
            lb.entries = make(max_len / r + 1, f.entry_bytes);
            lb.index_keys = make(max_len / r + 1, f.key_bytes);
            if (r > 1) {
                lb.pending_kv = make(r + kRingHeadroom, c.head_dim * 4);
                lb.pending_gate = make(r + kRingHeadroom, c.head_dim * 4);
            }
        }
        st->layers.push_back(std::move(lb));
    }
    if (!c.engram_layer_ids.empty())
        st->engram_history.assign(static_cast<size_t>(c.engram_max_ngram_size - 1 + kRingHeadroom), 0);
    st->nbytes += st->engram_history.size() * sizeof(int64_t);
    synchronize();
    return st;
}

void V41DeviceState::truncate(int64_t n) {
    DI_CHECK(n >= 0 && n <= length, "truncate to ", n, " tokens of a sequence of ", length);
    length = n;
}

std::unique_ptr<SequenceState> V41DeviceState::clone() const {
    set_current_device(device);
    auto c = std::make_unique<V41DeviceState>();
    c->device = device;
    auto dup = [](const std::unique_ptr<DeviceBuffer>& b) -> std::unique_ptr<DeviceBuffer> {
        if (!b) return nullptr;
        auto n = std::make_unique<DeviceBuffer>(b->nbytes());
        copy_on_device(n->data(), b->data(), b->nbytes(), Stream{});
        return n;
    };
    for (const V41LayerBuffers& l : layers)
        c->layers.push_back({dup(l.window), dup(l.entries), dup(l.index_keys), dup(l.pending_kv), dup(l.pending_gate)});
    for (const auto& r : dspark_rings) c->dspark_rings.push_back(dup(r));
    c->engram_history = engram_history;
    c->length = length;
    c->nbytes = nbytes;
    synchronize();
    return c;
}

}  // namespace deepinfer::cuda
