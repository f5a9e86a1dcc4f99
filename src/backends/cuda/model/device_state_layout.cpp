// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/device_state_layout.h"

#include <algorithm>
#include <numeric>

#include "deepinfer/check.h"

namespace deepinfer::cuda::v4 {

DeviceStateLayout DeviceStateLayout::plan(const ModelConfig& c, int64_t page_tokens, int64_t headroom, int64_t tap_rows,
                                          int64_t dspark_stages, int64_t dspark_ring_rows) {
    DeviceStateLayout L;
    int64_t lcm = 1;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        if (c.compress_ratio(l) > 0) lcm = std::lcm(lcm, c.compress_ratio(l));
    if (page_tokens == 0) {
        page_tokens = lcm;
        while (page_tokens < 256) page_tokens += lcm;
    }
    DI_CHECK(page_tokens > 0 && page_tokens % lcm == 0, "device state: page_tokens ", page_tokens,
             " must be a positive multiple of every compression ratio (", lcm, ")");
    L.page_tokens = page_tokens;
    const auto f = [](int64_t rows, int64_t width) { return static_cast<uint64_t>(rows * width) * sizeof(float); };
    std::vector<RingSlot*> rings;
    uint64_t largest = 0;
    L.layers.resize(static_cast<size_t>(c.num_hidden_layers));
    int64_t floats = 0;  // entry page fill
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        LayerStateLayout& y = L.layers[size_t(l)];
        y.window.bytes = f(c.sliding_window + headroom, c.head_dim);
        rings.push_back(&y.window);
        const AttentionType t = c.layer_types[size_t(l)];
        if (t == AttentionType::kSliding) continue;
        const int64_t m = c.compress_ratio(l);
        const bool csa = t == AttentionType::kCsa;
        const int64_t ring = (csa ? 2 : 1) * m + headroom;
        y.comp_kv.bytes = y.comp_gate.bytes = f(ring, (csa ? 2 : 1) * c.head_dim);
        rings.push_back(&y.comp_kv);
        rings.push_back(&y.comp_gate);
        y.ratio = m;
        y.entries_per_page = page_tokens / m;
        y.comp_offset = floats;
        floats += (y.entries_per_page * c.head_dim + 63) / 64 * 64;  // 256-byte aligned blocks
        if (csa) {
            y.idx_kv.bytes = y.idx_gate.bytes = f(ring, 2 * c.index_head_dim);
            rings.push_back(&y.idx_kv);
            rings.push_back(&y.idx_gate);
            y.idx_offset = floats;
            floats += (y.entries_per_page * c.index_head_dim + 63) / 64 * 64;
        }
    }
    const uint64_t tap_row = f(1, c.hc_mult * c.hidden_size);
    if (tap_rows > 0) {
        L.mtp_window.bytes = f(c.sliding_window + headroom, c.head_dim);
        largest = std::max({largest, L.mtp_window.bytes, tap_row});
    }
    for (RingSlot* s : rings) largest = std::max(largest, s->bytes);
    L.dspark_rings.resize(static_cast<size_t>(dspark_stages));
    for (RingSlot& s : L.dspark_rings) largest = std::max(largest, s.bytes = f(dspark_ring_rows, c.head_dim));
    L.entry_bytes = static_cast<uint64_t>(floats) * sizeof(float);
    L.page_bytes = align256(std::max(L.entry_bytes, largest));
    L.ring_pages = pack_ring_slots(rings, L.page_bytes);
    if (tap_rows > 0) {
        L.mtp_tap_group_rows = std::min<int64_t>(tap_rows, static_cast<int64_t>(L.page_bytes / tap_row));
        const int64_t groups = (tap_rows + L.mtp_tap_group_rows - 1) / L.mtp_tap_group_rows;
        L.mtp_tap_groups.resize(static_cast<size_t>(groups));
        std::vector<RingSlot*> mtp = {&L.mtp_window};
        for (int64_t g = 0; g < groups; ++g) {
            L.mtp_tap_groups[size_t(g)].bytes = tap_row * uint64_t(std::min(L.mtp_tap_group_rows, tap_rows - g * L.mtp_tap_group_rows));
            mtp.push_back(&L.mtp_tap_groups[size_t(g)]);
        }
        L.mtp_pages = pack_ring_slots(mtp, L.page_bytes);
    }
    std::vector<RingSlot*> dspark;
    for (RingSlot& s : L.dspark_rings) dspark.push_back(&s);
    L.dspark_pages = dspark.empty() ? 0 : pack_ring_slots(dspark, L.page_bytes);
    return L;
}

}  // namespace deepinfer::cuda::v4
