// SPDX-License-Identifier: Apache-2.0
// One DeepSeek-V4.1 sequence's state on the GPU (the device form of model/v41/state.h), every device
// byte in pages of the model's DevicePagePool (device_page_pool.h), placed by the model's
// V41StateLayout:
// - ring pages: per layer the sliding-window K=V ring in its compact FP8 form and, per KV source of
//   ratio > 1, the f32 compressor projections of the open group (kv and gate rings), packed so a ring
//   never straddles a page; with the DSpark drafter attached, its per-stage context rings in pages of
//   their own;
// - entry pages: entry page k holds, for every KV source, the compressed entries (compact FP4 + e4m3
//   scales) and index keys (compact MXFP4) of the groups starting in positions [k*T, (k+1)*T)
//   (T = page_tokens, a multiple of every ratio): entry g of a source of ratio r is row g % (T/r) of
//   that source's block in page g / (T/r). One page table per sequence serves every source.
// The Engram history stays on the host. clone() shares every page (no device work); the next forward
// of either copy gives it its own copy of each shared page it writes (prepare_writes). Position-keyed
// like the CPU state, so truncate() only drops the entry pages past the new length: entries of groups
// ending at or after the new length are no longer visible, ring rows are rewritten before they are read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/device_page_pool.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer::cuda {

// Row formats of the V4.1 caches for a config (kF32 where a length is not a multiple of the block).
struct V41CacheFormats {
    CacheFormat window = CacheFormat::kFp8Ue8m0;  // head_dim values, block 32
    CacheFormat entry = CacheFormat::kFp4E4m3;    // head_dim values, block 16
    CacheFormat key = CacheFormat::kFp4Ue8m0;     // index_head_dim values, block 32 (also the queries)
    static constexpr int64_t kWindowBlock = 32, kEntryBlock = 16, kKeyBlock = 32;
    int64_t window_bytes = 0, entry_bytes = 0, key_bytes = 0;
    static V41CacheFormats of(const V41TextConfig& config);
};

struct V41LayerLayout {
    RingSlot window;                    // [sliding_window + kRingHeadroom, window row bytes]
    RingSlot pending_kv, pending_gate;  // KV sources of ratio > 1: [ratio + kRingHeadroom, head_dim] f32
    int64_t ratio = 0;                  // KV sources: the compression ratio; 0: no entries
    int64_t entries_per_page = 0;       // page_tokens / ratio
    int64_t entry_offset = -1;          // bytes into an entry page: [entries_per_page, entry row bytes]
    int64_t key_offset = -1;            // bytes into an entry page: [entries_per_page, key row bytes]
};

struct V41StateLayout {
    int64_t page_tokens = 0;
    uint64_t page_bytes = 0;
    int64_t ring_pages = 0;              // per sequence
    int64_t dspark_pages = 0;            // per DSpark-attached sequence
    std::vector<RingSlot> dspark_rings;  // per drafter stage: its context ring, in the DSpark pages
    uint64_t entry_bytes = 0;            // bytes of an entry page in use (<= page_bytes)
    V41CacheFormats formats;
    std::vector<V41LayerLayout> layers;

    // `page_tokens` 0: the smallest multiple of every KV source's ratio that is >= 256. `dspark_stages`
    // context rings of `dspark_ring_rows` window rows (0: no drafter).
    static V41StateLayout plan(const V41TextConfig& config, int64_t page_tokens, int64_t dspark_stages = 0,
                               int64_t dspark_ring_rows = 0);
    int64_t entry_pages(int64_t tokens) const {
        return entry_bytes == 0 ? 0 : (tokens + page_tokens - 1) / page_tokens;
    }
    // Bytes of the pages a sequence of `tokens` tokens holds (what SequenceState::bytes() reports).
    uint64_t sequence_bytes(int64_t tokens) const {
        return static_cast<uint64_t>(ring_pages + entry_pages(tokens)) * page_bytes;
    }
};

class V41DeviceState final : public SequenceState {
public:
    V41DeviceState(std::shared_ptr<const V41StateLayout> y, std::shared_ptr<DevicePagePool> pool)
        : layout(std::move(y)), rings(pool), entries(std::move(pool)) {}

    std::shared_ptr<const V41StateLayout> layout;
    PageList rings;    // layout->ring_pages pages
    PageList entries;  // entry page k: positions [k*T, (k+1)*T)
    // Attached to the DSpark drafter (cuda_v41_dspark.cpp): per stage the context ring, [window_rows,
    // window row bytes] in the window's compact format, position p in slot p % window_rows.
    std::optional<PageList> dspark;
    std::vector<int64_t> engram_history;  // compressed id of position p in slot p % size (host)
    int64_t length = 0;
    int device = 0;

    // A ring's device address, null when the layer has none.
    uint8_t* ring(const RingSlot& s) const { return s.page < 0 ? nullptr : at(rings, s); }
    uint8_t* dspark_ring(int64_t stage) const { return at(*dspark, layout->dspark_rings[size_t(stage)]); }
    // Entry g of KV source `layer` and its index key (their entry page must exist).
    uint8_t* entry(int64_t layer, int64_t g) const { return cache_row(layer, g, false); }
    uint8_t* index_key(int64_t layer, int64_t g) const { return cache_row(layer, g, true); }

    // Before a forward of `rows` rows from position `length`: every page it writes is this state's own
    // (shared ones replaced by copies, listed in `copies`) and the entry pages of its positions exist
    // (new ones listed in `fresh`, to be zeroed). All or nothing per PageList; throws when the pool is
    // exhausted.
    void prepare_writes(int64_t rows, std::vector<float*>& fresh, std::vector<PageCopy>& copies) {
        rings.make_writable(0, layout->ring_pages, fresh, copies);
        entries.make_writable(length / layout->page_tokens, layout->entry_pages(length + rows), fresh, copies);
        if (dspark) dspark->make_writable(0, layout->dspark_pages, fresh, copies);
    }

    int64_t num_tokens() const override { return length; }
    void truncate(int64_t n) override;
    std::unique_ptr<SequenceState> clone() const override { return std::make_unique<V41DeviceState>(*this); }
    // The pool pages held (the Engram history's few host bytes are not counted: admission is by pages).
    size_t bytes() const override { return pages(false) * layout->page_bytes; }
    size_t unshared_bytes() const override { return pages(true) * layout->page_bytes; }

private:
    static uint8_t* at(const PageList& l, const RingSlot& s) { return reinterpret_cast<uint8_t*>(l.page(s.page)) + s.offset; }
    uint8_t* cache_row(int64_t layer, int64_t g, bool key) const;
    size_t pages(bool unshared) const;
};

}  // namespace deepinfer::cuda
