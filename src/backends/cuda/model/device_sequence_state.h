// SPDX-License-Identifier: Apache-2.0
// One DeepSeek-V4 sequence's state on the device (CudaModel): every byte in pages of the model's
// DevicePagePool, placed by the model's DeviceStateLayout. Ring pages hold every layer's rings;
// entry pages hold the compressed KV entries and indexer keys of every compressed layer, one page
// per page_tokens positions (one page table per sequence). clone() shares every page (no device
// work); the next forward of either copy gives it its own copy of each shared page it writes
// (prepare_writes). Position-keyed like the CPU state, so truncate() only drops whole entry pages
// past the new length and moves the length.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backends/cuda/model/device_page_pool.h"
#include "backends/cuda/model/device_state_layout.h"
#include "deepinfer/check.h"
#include "deepinfer/model.h"

namespace deepinfer::cuda::v4 {

// What an MTP-attached sequence keeps (cuda_mtp.cpp, speculative-decoding.md §5, §7.3): the MTP
// block's sliding-window ring (position p in slot p % (sliding_window + kRingHeadroom)) and the final
// HC streams of the target's last rows (position p in slot p % kMtpTapRows), in layout.mtp_pages pages.
// Rows written for positions later rolled back are overwritten before any read: nothing is undone.
struct DeviceMtpState {
    PageList pages;
    int64_t taps_first = 0, taps_end = 0;  // positions [taps_first, taps_end) whose streams the ring holds
};

class DeviceSequenceState final : public SequenceState {
public:
    DeviceSequenceState(std::shared_ptr<const DeviceStateLayout> y, std::shared_ptr<DevicePagePool> pool)
        : layout(std::move(y)), rings(pool), entries(std::move(pool)) {}

    std::shared_ptr<const DeviceStateLayout> layout;
    PageList rings;    // layout->ring_pages pages
    PageList entries;  // entry page k: positions [k*T, (k+1)*T)
    std::optional<DeviceMtpState> mtp;  // attached to the MTP drafter
    // Attached to the 0731 DSpark drafter (cuda_dspark_v4.cpp): per stage the context ring,
    // [sliding_window + kRingHeadroom, head_dim] f32, position p in slot p % rows (layout->dspark_pages pages).
    std::optional<PageList> dspark;
    int64_t length = 0;  // tokens consumed
    int device = 0;

    // A ring buffer's device address (f32 rows), null when the layer has none.
    float* ring(const RingSlot& s) const { return s.page < 0 ? nullptr : at(rings, s); }
    float* mtp_window() const { return at(mtp->pages, layout->mtp_window); }
    float* dspark_ring(int64_t stage) const { return at(*dspark, layout->dspark_rings[size_t(stage)]); }
    // Row `slot` of the MTP tap ring ([hc * hidden] f32).
    float* mtp_tap_row(int64_t slot, int64_t row_floats) const {
        const int64_t g = slot / layout->mtp_tap_group_rows;
        return at(mtp->pages, layout->mtp_tap_groups[size_t(g)]) + (slot % layout->mtp_tap_group_rows) * row_floats;
    }

    // Before a forward of `rows` rows from position `length`: every page it writes is this state's own
    // (shared ones replaced by copies, listed in `copies`) and the entry pages of its positions exist
    // (new ones listed in `fresh`, to be zeroed). All or nothing per PageList; throws when the pool is
    // exhausted.
    void prepare_writes(int64_t rows, std::vector<float*>& fresh, std::vector<PageCopy>& copies) {
        rings.make_writable(0, layout->ring_pages, fresh, copies);
        entries.make_writable(length / layout->page_tokens, layout->entry_pages(length + rows), fresh, copies);
        if (mtp) mtp->pages.make_writable(0, layout->mtp_pages, fresh, copies);
        if (dspark) dspark->make_writable(0, layout->dspark_pages, fresh, copies);
    }

    int64_t num_tokens() const override { return length; }
    void truncate(int64_t n) override {
        DI_CHECK(n >= 0 && n <= length, "truncate to ", n, " tokens of a sequence of ", length);
        length = n;
        entries.shrink(layout->entry_pages(n));
        if (mtp) mtp->taps_end = std::min(mtp->taps_end, n);  // rolled-back rows' streams are stale
    }
    std::unique_ptr<SequenceState> clone() const override { return std::make_unique<DeviceSequenceState>(*this); }
    size_t bytes() const override { return pages(false) * layout->page_bytes; }
    size_t unshared_bytes() const override { return pages(true) * layout->page_bytes; }

private:
    static float* at(const PageList& l, const RingSlot& s) {
        return reinterpret_cast<float*>(reinterpret_cast<char*>(l.page(s.page)) + s.offset);
    }
    size_t pages(bool unshared) const {
        auto n = [&](const PageList& l) { return size_t(unshared ? l.unshared_pages() : l.size()); };
        return n(rings) + n(entries) + (mtp ? n(mtp->pages) : 0) + (dspark ? n(*dspark) : 0);
    }
};

}  // namespace deepinfer::cuda::v4
