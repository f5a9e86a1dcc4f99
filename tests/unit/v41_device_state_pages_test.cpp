// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4.1 device state layout (cuda_v41_state.h) and its sequence state's page bookkeeping on
// the host (a pool without device memory, so this runs without a GPU): on the release config, rings
// inside their pages and disjoint, each KV source's entry and key blocks disjoint inside the entry page,
// the bytes per token equal to the compact caches' (spec §10.1), and a state's pages through a fork,
// copy-on-write, growth, truncation and exhaustion.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/model/cuda_v41_state.h"
#include "deepinfer/check.h"
#include "deepinfer/model_config_v41.h"
#include "deepinfer/synthetic_v41.h"

namespace deepinfer::cuda {
namespace {

V41TextConfig flash() { return parse_v41_model_config(v41_flash_config().dump()).text; }

bool disjoint(const RingSlot& a, const RingSlot& b) {
    return a.page != b.page || a.offset >= b.offset + b.bytes || b.offset >= a.offset + a.bytes;
}

TEST(V41StateLayout, FlashPagesHoldEveryCacheWithoutOverlap) {
    const V41TextConfig c = flash();
    const V41StateLayout L = V41StateLayout::plan(c, 0, /*dspark_stages=*/3, /*dspark_ring_rows=*/128 + 16);
    EXPECT_EQ(L.page_tokens, 256);  // the smallest multiple of 2 and 1 >= 256
    EXPECT_EQ(L.page_bytes % 256, 0u);
    EXPECT_EQ(L.formats.window_bytes, 528);
    EXPECT_EQ(L.formats.entry_bytes, 288);
    EXPECT_EQ(L.formats.key_bytes, 68);
    // Entry blocks of the four KV sources (2, 8, 14 at ratio 2; 20 at ratio 1), disjoint, in order.
    int64_t end = 0, sources = 0;
    uint64_t per_token = 0;  // compact bytes per position
    for (size_t l = 0; l < L.layers.size(); ++l) {
        const V41LayerLayout& y = L.layers[l];
        if (!c.is_kv_source(int64_t(l))) {
            EXPECT_EQ(y.ratio, 0);
            EXPECT_LT(y.pending_kv.page, 0);
            continue;
        }
        ++sources;
        const int64_t r = c.compress_ratio(int64_t(l));
        EXPECT_EQ(y.ratio, r);
        EXPECT_EQ(y.entries_per_page, 256 / r);
        EXPECT_GE(y.entry_offset, end);
        end = y.entry_offset + y.entries_per_page * 288;
        EXPECT_GE(y.key_offset, end);
        end = y.key_offset + y.entries_per_page * 68;
        per_token += uint64_t((288 + 68) / r);
        EXPECT_EQ(y.pending_kv.page >= 0, r > 1);
    }
    EXPECT_EQ(sources, 4);
    EXPECT_EQ(per_token, 890u);  // spec §10.1: 890 B per token of context
    EXPECT_LE(uint64_t(end), L.entry_bytes);
    EXPECT_LE(L.entry_bytes, L.page_bytes);
    EXPECT_LT(L.entry_bytes, uint64_t(256) * 890 + 8 * 256);  // only alignment beyond the compact bytes
    // Rings: inside their page and disjoint: 40 windows, 3 x 2 pending rings.
    std::vector<const RingSlot*> slots;
    for (const V41LayerLayout& y : L.layers)
        for (const RingSlot* s : {&y.window, &y.pending_kv, &y.pending_gate})
            if (s->page >= 0) slots.push_back(s);
    EXPECT_EQ(slots.size(), 40u + 6);
    for (const RingSlot* s : slots) {
        EXPECT_LT(s->page, L.ring_pages);
        EXPECT_LE(s->offset + s->bytes, L.page_bytes);
        for (const RingSlot* o : slots) {
            if (o != s) { EXPECT_TRUE(disjoint(*s, *o)); }
        }
    }
    EXPECT_EQ(L.layers[0].window.bytes, uint64_t(128 + 16) * 528);
    EXPECT_EQ(L.layers[2].pending_kv.bytes, uint64_t(2 + 16) * 512 * 4);
    // The drafter's three context rings, in pages of their own.
    ASSERT_EQ(L.dspark_rings.size(), 3u);
    for (const RingSlot& s : L.dspark_rings) {
        EXPECT_EQ(s.bytes, uint64_t(144) * 528);
        EXPECT_LT(s.page, L.dspark_pages);
        EXPECT_LE(s.offset + s.bytes, L.page_bytes);
        for (const RingSlot& o : L.dspark_rings) {
            if (&o != &s) { EXPECT_TRUE(disjoint(s, o)); }
        }
    }
    // The window rings waste little: their pages hold at most one ring's worth of padding each.
    EXPECT_LE(uint64_t(L.ring_pages) * L.page_bytes, uint64_t(40 * 144 * 528 + 6 * 18 * 2048) + uint64_t(L.ring_pages) * 76288);
    // The page size chosen so three window rings share a page: 228,096 bytes (an entry page is 227,840),
    // 15 ring pages (40 windows, 6 pending rings), the drafter's three rings in one page.
    EXPECT_EQ(L.page_bytes, 228096u);
    EXPECT_EQ(L.ring_pages, 15);
    EXPECT_EQ(L.dspark_pages, 1);
    EXPECT_EQ(L.sequence_bytes(0), uint64_t(L.ring_pages) * L.page_bytes);
    EXPECT_EQ(L.sequence_bytes(256), uint64_t(L.ring_pages + 1) * L.page_bytes);
    EXPECT_EQ(L.sequence_bytes(257), uint64_t(L.ring_pages + 2) * L.page_bytes);
    EXPECT_EQ(V41StateLayout::plan(c, 128).layers[2].entries_per_page, 64);
    EXPECT_THROW(V41StateLayout::plan(c, 255), Error);  // not a multiple of 2
}

TEST(V41DeviceState, ForkSharesPagesAndWritesCopyOnlyWhatTheyTouch) {
    const V41TextConfig c = flash();
    auto L = std::make_shared<const V41StateLayout>(V41StateLayout::plan(c, 0));
    const int64_t R = L->ring_pages;
    auto pool = std::make_shared<DevicePagePool>(2 * R + 6, L->page_bytes, /*on_device=*/false);
    V41DeviceState a(L, pool);
    std::vector<float*> fresh;
    std::vector<PageCopy> copies;
    a.prepare_writes(300, fresh, copies);  // rings + entry pages of 0..255 and 256..511
    EXPECT_EQ(fresh.size(), size_t(R + 2));
    EXPECT_TRUE(copies.empty());
    a.length = 300;
    EXPECT_EQ(a.bytes(), (R + 2) * L->page_bytes);
    auto b = a.clone();
    auto& bs = static_cast<V41DeviceState&>(*b);
    EXPECT_EQ(pool->pages_in_use(), R + 2) << "a fork takes no page";
    EXPECT_EQ(bs.unshared_bytes(), 0u);
    // The fork's next forward writes its rings and the partly filled page 1 (copies) and adds page 2.
    fresh.clear();
    bs.prepare_writes(250, fresh, copies);
    EXPECT_EQ(copies.size(), size_t(R + 1));
    EXPECT_EQ(fresh.size(), 1u);
    EXPECT_EQ(bs.entries.id(0), a.entries.id(0));  // page 0 (positions before 256) still shared
    EXPECT_NE(bs.entries.id(1), a.entries.id(1));
    EXPECT_EQ(bs.unshared_bytes(), (R + 2) * L->page_bytes);
    // Truncation drops the pages past the length; the pool refuses what it cannot hold, all or nothing.
    bs.length = 550;
    bs.truncate(256);
    EXPECT_EQ(bs.entries.size(), 1);
    const int64_t used = pool->pages_in_use();
    auto c2 = a.clone();
    auto& cs = static_cast<V41DeviceState&>(*c2);
    fresh.clear();
    copies.clear();
    EXPECT_THROW(cs.prepare_writes(2000, fresh, copies), Error);
    EXPECT_GE(pool->pages_in_use(), used);
    EXPECT_LE(pool->pages_in_use(), used + R + 1);  // the rings were made writable; the entries not at all
    EXPECT_EQ(cs.entries.size(), 2);
}

}  // namespace
}  // namespace deepinfer::cuda
