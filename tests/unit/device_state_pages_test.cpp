// SPDX-License-Identifier: Apache-2.0
// The GPU models' device page pool and state layout, on the host (no device memory: the bookkeeping
// only, so this runs without a GPU): reference counts, copy-on-write of shared pages, all-or-nothing
// growth when the pool runs out, the exhausted error; the V4 layout's rings and entry blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/model/device_page_pool.h"
#include "backends/cuda/model/device_state_layout.h"
#include "deepinfer/check.h"
#include "deepinfer/model_config.h"
#include "deepinfer/synthetic.h"

namespace deepinfer::cuda {
namespace {

TEST(DevicePagePool, CopiesShareAndWritesCopyOnlyTheSharedPages) {
    auto pool = std::make_shared<DevicePagePool>(10, 1024, /*on_device=*/false);
    PageList a(pool);
    std::vector<float*> fresh;
    std::vector<PageCopy> copies;
    a.make_writable(0, 3, fresh, copies);  // three new pages
    EXPECT_EQ(fresh.size(), 3u);
    EXPECT_TRUE(copies.empty());
    EXPECT_EQ(pool->pages_in_use(), 3);
    PageList b = a;  // shares all three
    EXPECT_EQ(pool->pages_in_use(), 3);
    EXPECT_EQ(a.unshared_pages(), 0);
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(pool->references(a.id(i)), 2);
    // b writes its last page and grows by one: one copy (page 2), one new page.
    fresh.clear();
    b.make_writable(2, 4, fresh, copies);
    EXPECT_EQ(copies.size(), 1u);
    EXPECT_EQ(fresh.size(), 1u);
    EXPECT_EQ(pool->pages_in_use(), 5);
    EXPECT_EQ(b.id(0), a.id(0));
    EXPECT_EQ(b.id(1), a.id(1));
    EXPECT_NE(b.id(2), a.id(2));
    EXPECT_EQ(pool->references(a.id(2)), 1);  // the original keeps its page, now its own
    EXPECT_EQ(a.unshared_pages(), 1);
    EXPECT_EQ(b.unshared_pages(), 2);
    // a writes the same page: no copy (it is its own now).
    copies.clear();
    fresh.clear();
    a.make_writable(2, 3, fresh, copies);
    EXPECT_TRUE(copies.empty());
    EXPECT_TRUE(fresh.empty());
    // Shrinking and dropping return every page.
    b.shrink(1);
    EXPECT_EQ(pool->pages_in_use(), 3);
    { PageList c = std::move(b); }
    EXPECT_EQ(pool->pages_in_use(), 3);
    a.clear();
    EXPECT_EQ(pool->pages_in_use(), 0);
    EXPECT_EQ(pool->peak_pages(), 5);
}

TEST(DevicePagePool, ExhaustionThrowsAndChangesNothing) {
    auto pool = std::make_shared<DevicePagePool>(4, 256, false);
    PageList a(pool);
    std::vector<float*> fresh;
    std::vector<PageCopy> copies;
    a.make_writable(0, 2, fresh, copies);
    PageList b = a;
    // b needs 2 copies + 2 new pages = 4 > 2 free: nothing changes.
    try {
        b.make_writable(0, 4, fresh, copies);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("device state pool exhausted"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("--device-state-gib"), std::string::npos) << e.what();
    }
    EXPECT_EQ(b.size(), 2);
    EXPECT_EQ(b.id(0), a.id(0));
    EXPECT_EQ(pool->pages_in_use(), 2);
    EXPECT_EQ(copies.size(), 0u);
    // Within the pool it succeeds.
    b.make_writable(1, 3, fresh, copies);
    EXPECT_EQ(pool->pages_in_use(), 4);
    EXPECT_EQ(copies.size(), 1u);
}

TEST(DeviceStateLayout, FlashPagesHoldEveryLayerWithoutOverlap) {
    const ModelConfig c = parse_model_config(v4_flash_config({.compress_ratios = {0, 4, 128, 4, 128}}));
    const v4::DeviceStateLayout L = v4::DeviceStateLayout::plan(c, 0, 16, 32);
    EXPECT_EQ(L.page_tokens, 256);  // the smallest multiple of 4 and 128 >= 256
    EXPECT_EQ(L.page_bytes % 256, 0u);
    // Entry blocks: each layer's [T/m, width] block inside the page, disjoint, in layer order.
    int64_t end = 0;
    for (size_t l = 0; l < L.layers.size(); ++l) {
        const v4::LayerStateLayout& y = L.layers[l];
        const int64_t m = c.compress_ratio(int64_t(l));
        EXPECT_EQ(y.ratio, m);
        if (m == 0) continue;
        EXPECT_EQ(y.entries_per_page, 256 / m);
        EXPECT_GE(y.comp_offset, end);
        end = y.comp_offset + y.entries_per_page * c.head_dim;
        if (y.idx_offset >= 0) {
            EXPECT_GE(y.idx_offset, end);
            end = y.idx_offset + y.entries_per_page * c.index_head_dim;
        }
    }
    EXPECT_LE(uint64_t(end) * 4, L.entry_bytes);
    EXPECT_LE(L.entry_bytes, L.page_bytes);
    // Rings: inside their page, disjoint within a page.
    std::vector<const v4::RingSlot*> slots;
    for (const auto& y : L.layers)
        for (const v4::RingSlot* s : {&y.window, &y.comp_kv, &y.comp_gate, &y.idx_kv, &y.idx_gate})
            if (s->page >= 0) slots.push_back(s);
    EXPECT_EQ(slots.size(), 5u + 2 * 4 + 2 * 2);
    for (const v4::RingSlot* s : slots) {
        EXPECT_LT(s->page, L.ring_pages);
        EXPECT_LE(s->offset + s->bytes, L.page_bytes);
        for (const v4::RingSlot* o : slots) {
            if (o != s && o->page == s->page) {
                EXPECT_TRUE(o->offset >= s->offset + s->bytes || s->offset >= o->offset + o->bytes);
            }
        }
    }
    EXPECT_EQ(L.layers[0].window.bytes, uint64_t(128 + 16) * 512 * 4);
    // MTP: the window and 32 tap rows of 4 x 4096 floats, in groups that fit a page.
    EXPECT_EQ(L.mtp_tap_group_rows * int64_t(L.mtp_tap_groups.size()) >= 32, true);
    int64_t tap_rows = 0;
    for (const v4::RingSlot& g : L.mtp_tap_groups) {
        EXPECT_LT(g.page, L.mtp_pages);
        EXPECT_LE(g.offset + g.bytes, L.page_bytes);
        tap_rows += int64_t(g.bytes / (4 * 4096 * 4));
    }
    EXPECT_EQ(tap_rows, 32);
    EXPECT_EQ(L.mtp_window.bytes, uint64_t(128 + 16) * 512 * 4);
    // A sequence: its ring pages plus one entry page per 256 positions.
    EXPECT_EQ(L.sequence_bytes(0), uint64_t(L.ring_pages) * L.page_bytes);
    EXPECT_EQ(L.sequence_bytes(256), uint64_t(L.ring_pages + 1) * L.page_bytes);
    EXPECT_EQ(L.sequence_bytes(257), uint64_t(L.ring_pages + 2) * L.page_bytes);
    EXPECT_THROW(v4::DeviceStateLayout::plan(c, 200, 16, 0), Error);  // not a multiple of 128
    EXPECT_EQ(v4::DeviceStateLayout::plan(c, 128, 16, 0).layers[1].entries_per_page, 32);
}

}  // namespace
}  // namespace deepinfer::cuda
