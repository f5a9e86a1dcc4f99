// SPDX-License-Identifier: Apache-2.0
// The V4.1 device state's layout in pool pages, its entry addresses and truncation.
#include "backends/cuda/model/cuda_v41_state.h"

#include <algorithm>
#include <numeric>

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

V41StateLayout V41StateLayout::plan(const V41TextConfig& c, int64_t page_tokens, int64_t dspark_stages,
                                    int64_t dspark_ring_rows) {
    V41StateLayout L;
    L.formats = V41CacheFormats::of(c);
    const V41CacheFormats& f = L.formats;
    int64_t lcm = 1;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        if (c.is_kv_source(l) && c.compress_ratio(l) > 0) lcm = std::lcm(lcm, c.compress_ratio(l));
    if (page_tokens == 0) {
        page_tokens = lcm;
        while (page_tokens < 256) page_tokens += lcm;
    }
    DI_CHECK(page_tokens > 0 && page_tokens % lcm == 0, "device state: page_tokens ", page_tokens,
             " must be a positive multiple of every compression ratio (", lcm, ")");
    L.page_tokens = page_tokens;
    std::vector<RingSlot*> rings;
    L.layers.resize(static_cast<size_t>(c.num_hidden_layers));
    uint64_t used = 0;  // entry page fill
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        V41LayerLayout& y = L.layers[size_t(l)];
        y.window.bytes = uint64_t((c.sliding_window + kRingHeadroom) * f.window_bytes);
        rings.push_back(&y.window);
        const int64_t r = c.compress_ratio(l);
        if (!c.is_kv_source(l) || r <= 0) continue;
        if (r > 1) {
            y.pending_kv.bytes = y.pending_gate.bytes = uint64_t((r + kRingHeadroom) * c.head_dim) * sizeof(float);
            rings.push_back(&y.pending_kv);
            rings.push_back(&y.pending_gate);
        }
        y.ratio = r;
        y.entries_per_page = page_tokens / r;
        y.entry_offset = static_cast<int64_t>(used);
        used = align256(used + uint64_t(y.entries_per_page * f.entry_bytes));
        y.key_offset = static_cast<int64_t>(used);
        used = align256(used + uint64_t(y.entries_per_page * f.key_bytes));
    }
    uint64_t largest = 0;
    for (RingSlot* s : rings) largest = std::max(largest, s->bytes);
    L.dspark_rings.resize(static_cast<size_t>(dspark_stages));
    for (RingSlot& s : L.dspark_rings) largest = std::max(largest, s.bytes = uint64_t(dspark_ring_rows * f.window_bytes));
    L.entry_bytes = used;
    // The page size: at least an entry page and the largest ring. Among the sizes that hold k of the
    // largest rings (k = 1..8), the one that makes a sequence of 16 entry pages smallest: at the release
    // config an entry page is a hair under 3 window rings, so 256 bytes more per page (0.1%) put 3
    // rings in a page instead of 2 and save a third of the ring pages.
    uint64_t best_cost = ~uint64_t(0);
    for (uint64_t k = 1; k <= 8; ++k) {
        const uint64_t P = align256(std::max(L.entry_bytes, k * align256(largest)));
        const uint64_t cost = uint64_t(pack_ring_slots(rings, P) + 16) * P;
        if (cost < best_cost) {
            best_cost = cost;
            L.page_bytes = P;
        }
    }
    L.ring_pages = pack_ring_slots(rings, L.page_bytes);
    std::vector<RingSlot*> dspark;
    for (RingSlot& s : L.dspark_rings) dspark.push_back(&s);
    L.dspark_pages = dspark.empty() ? 0 : pack_ring_slots(dspark, L.page_bytes);
    return L;
}

uint8_t* V41DeviceState::cache_row(int64_t layer, int64_t g, bool key) const {
    const V41LayerLayout& y = layout->layers[size_t(layer)];
    DI_ICHECK(y.ratio > 0 && g >= 0 && g / y.entries_per_page < entries.size());
    const int64_t off = key ? y.key_offset : y.entry_offset;
    const int64_t row = key ? layout->formats.key_bytes : layout->formats.entry_bytes;
    return reinterpret_cast<uint8_t*>(entries.page(g / y.entries_per_page)) + off + (g % y.entries_per_page) * row;
}

size_t V41DeviceState::pages(bool unshared) const {
    auto n = [&](const PageList& l) { return size_t(unshared ? l.unshared_pages() : l.size()); };
    return n(rings) + n(entries) + (dspark ? n(*dspark) : 0);
}

void V41DeviceState::truncate(int64_t n) {
    DI_CHECK(n >= 0 && n <= length, "truncate to ", n, " tokens of a sequence of ", length);
    length = n;
    entries.shrink(layout->entry_pages(n));
}

}  // namespace deepinfer::cuda
