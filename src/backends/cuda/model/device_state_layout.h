// SPDX-License-Identifier: Apache-2.0
// Where a DeepSeek-V4 sequence's device state lies in the pages of the model's DevicePagePool.
// Two kinds of pages, both of the pool's one page size:
// - ring pages: every layer's fixed-size rings (sliding-window K=V rows, the compressor's and the
//   indexer compressor's kv/gate rows), and with an MTP drafter the MTP block's window and the tap
//   ring, packed into a few pages per sequence (a ring never straddles a page);
// - entry pages: the growing rows. Entry page k holds, for every compressed layer, the compressed KV
//   entries and indexer keys of the windows starting in positions [k*T, (k+1)*T) (T = page_tokens, a
//   multiple of every compression ratio): entry i of a layer of ratio m is row i % (T/m) of that
//   layer's block in page i / (T/m). So one page table per sequence serves every layer, and a
//   sequence of n tokens holds ceil(n / T) entry pages.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/model/device_page_pool.h"
#include "deepinfer/model_config.h"

namespace deepinfer::cuda::v4 {

using cuda::RingSlot;  // (device_page_pool.h, shared with the V4.1 layout)

struct LayerStateLayout {
    RingSlot window, comp_kv, comp_gate, idx_kv, idx_gate;
    int64_t ratio = 0;               // 0: sliding (no entries)
    int64_t entries_per_page = 0;    // page_tokens / ratio
    int64_t comp_offset = -1;        // floats into an entry page: this layer's [entries_per_page, head_dim] block
    int64_t idx_offset = -1;         // floats into an entry page: [entries_per_page, index_head_dim] indexer keys
};

struct DeviceStateLayout {
    int64_t page_tokens = 0;
    uint64_t page_bytes = 0;
    int64_t ring_pages = 0;       // per sequence
    int64_t mtp_pages = 0;        // per MTP-attached sequence (window + tap ring)
    RingSlot mtp_window;          // in the MTP pages
    // The tap ring in groups of mtp_tap_group_rows rows (a page need not hold all of it).
    std::vector<RingSlot> mtp_tap_groups;
    int64_t mtp_tap_group_rows = 0;
    int64_t dspark_pages = 0;            // per DSpark-attached sequence (V4-Flash-0731)
    std::vector<RingSlot> dspark_rings;  // per drafter stage: its context ring, in the DSpark pages
    uint64_t entry_bytes = 0;     // bytes of an entry page in use (<= page_bytes)
    std::vector<LayerStateLayout> layers;

    // `page_tokens` 0: the smallest multiple of every compression ratio that is >= 256. `mtp_tap_rows`
    // rows of hc*hidden floats in the tap ring (0: no MTP block); `dspark_stages` context rings of
    // `dspark_ring_rows` x head_dim floats (0: no DSpark drafter).
    static DeviceStateLayout plan(const ModelConfig& config, int64_t page_tokens, int64_t ring_headroom,
                                  int64_t mtp_tap_rows, int64_t dspark_stages = 0, int64_t dspark_ring_rows = 0);
    int64_t entry_pages(int64_t tokens) const {
        return entry_bytes == 0 ? 0 : (tokens + page_tokens - 1) / page_tokens;
    }
    // Bytes of the pages a sequence of `tokens` tokens holds (what SequenceState::bytes() reports).
    uint64_t sequence_bytes(int64_t tokens) const {
        return static_cast<uint64_t>(ring_pages + entry_pages(tokens)) * page_bytes;
    }
};

}  // namespace deepinfer::cuda::v4
