// SPDX-License-Identifier: Apache-2.0
// Paged state: page accounting, sharing between copies, copy-on-write of a shared partial page,
// pages returned to the pool, exhaustion as an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "deepinfer/check.h"
#include "model/paged_rows.h"

namespace deepinfer {
namespace {

std::vector<float> row(int64_t width, float v) { return std::vector<float>(static_cast<size_t>(width), v); }

TEST(PagedRows, SharesWholePagesAndCopiesOnWrite) {
    auto pool = std::make_shared<StatePool>(64 * 256, 256);  // 64 pages of 256 bytes = 16 rows of 4 floats
    PagedRows a(16, pool);                                     // 16 floats = 64 bytes: 4 rows per page
    for (int i = 0; i < 6; ++i) a.append(row(16, float(i)).data());
    EXPECT_EQ(a.size(), 6);
    EXPECT_EQ(pool->pages_in_use(), 2u);
    PagedRows b = a;  // a snapshot: shares both pages
    EXPECT_EQ(pool->pages_in_use(), 2u);
    EXPECT_EQ(a.unshared_bytes(), 0u);
    b.append(row(16, 100.0f).data());  // b's last page is shared and partial: copied first
    EXPECT_EQ(pool->pages_in_use(), 3u);
    a.append(row(16, 200.0f).data());  // a now owns the old partial page alone: no copy
    EXPECT_EQ(pool->pages_in_use(), 3u);
    for (int i = 0; i < 6; ++i) {
        EXPECT_EQ(a.row(i)[0], float(i));
        EXPECT_EQ(b.row(i)[15], float(i));
    }
    EXPECT_EQ(a.row(6)[0], 200.0f);
    EXPECT_EQ(b.row(6)[0], 100.0f);
    {
        PagedRows c = b;
        c.append(row(16, 1.0f).data());
        EXPECT_EQ(pool->pages_in_use(), 4u);
    }
    EXPECT_EQ(pool->pages_in_use(), 3u);  // c's own page went back
    a = PagedRows();
    b = PagedRows();
    EXPECT_EQ(pool->pages_in_use(), 0u);
    EXPECT_EQ(pool->peak_pages(), 4u);
}

TEST(PagedRows, ExhaustionIsAnError) {
    auto pool = std::make_shared<StatePool>(2 * 256, 256);
    PagedRows a(64, pool);  // one row per page
    a.append(row(64, 1).data());
    a.append(row(64, 2).data());
    EXPECT_THROW(a.append(row(64, 3).data()), Error);
    EXPECT_EQ(paged_bytes(5, 64, 256), 5u * 256);
    EXPECT_EQ(paged_bytes(5, 16, 256), 2u * 256);
    EXPECT_EQ(paged_bytes(0, 16, 256), 0u);
}

TEST(PagedRows, HeapPagesWithoutPool) {
    PagedRows a(8, nullptr, 64);  // 2 rows per heap page
    for (int i = 0; i < 5; ++i) a.append(row(8, float(i)).data());
    EXPECT_EQ(a.bytes(), 3u * 64);
    EXPECT_EQ(a.row(4)[7], 4.0f);
}

TEST(PagedRing, SharedUntilWrittenThenCopied) {
    auto pool = std::make_shared<StatePool>(16 * 256, 256);
    PagedRing a(10, 16, pool);  // 4 rows per page: 3 pages
    EXPECT_EQ(pool->pages_in_use(), 3u);
    for (int64_t s = 0; s < 10; ++s) std::fill_n(a.mutable_row(s), 16, float(s));
    EXPECT_EQ(pool->pages_in_use(), 3u);
    PagedRing b = a;  // snapshot
    EXPECT_EQ(pool->pages_in_use(), 3u);
    std::fill_n(b.mutable_row(5), 16, 50.0f);  // page 1 is copied for b
    EXPECT_EQ(pool->pages_in_use(), 4u);
    EXPECT_EQ(a.row(5)[0], 5.0f);
    EXPECT_EQ(b.row(5)[0], 50.0f);
    EXPECT_EQ(b.row(4)[0], 4.0f);  // the copied page kept its other rows
    EXPECT_EQ(b.row(9)[3], 9.0f);  // untouched pages still shared
    EXPECT_EQ(a.unshared_bytes(), 256u);
    b = PagedRing();
    EXPECT_EQ(pool->pages_in_use(), 3u);
}

}  // namespace
}  // namespace deepinfer
