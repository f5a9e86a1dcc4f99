// SPDX-License-Identifier: Apache-2.0
// V4.1's lightning indexer at prefill shapes on tensor cores: the tiled GEMM kernel
// (kernels/v41_indexer_tc_gemm.cuh, 8 index rows per block sharing each decoded key tile, the launch
// default when a segment has 8 rows or more) against the per-row kernel (v41_indexer_tc.cuh, which
// tests/ops/ops_cuda_v41_test.cpp checks against the CPU). Segments of a prefill chunk at ratio 1 and 2,
// single-row (decode) segments between them, a short segment with fewer keys than a tile, and row
// counts that are not multiples of 8, so blocks hold rows of several segments; keys contiguous, paged
// at an aligned offset and paged at a misaligned one (the codes' vector loads fall back to bytes); the
// release's 32 x 128 heads in MXFP4 and other head counts, dims and key formats. Every score of
// [0, num_entries) must be bit-identical (-inf beyond the visible keys), in step and staggered, and
// a run of rows alone must give the bits it gives in the whole batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "model/v41/qat.h"
#include "ops/cuda_test_util.h"

namespace deepinfer {
namespace {

using cuda::CacheFormat;
using cuda::Stream;
using test::Dev;
using test::randn;

class CudaV41IndexerPrefill : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

struct Seg {
    int64_t rows, first_position, ratio, entries;
};

// A segment's keys [entries, row bytes] in `format` (block 32), from N(0, 1) values.
std::vector<uint8_t> compact_keys(int64_t entries, int64_t dim, CacheFormat format, uint32_t seed) {
    const int64_t bytes = cuda::cache_row_bytes(format, dim, 32);
    std::vector<float> v = randn(size_t(entries * dim), seed);
    std::vector<uint8_t> out(size_t(entries * bytes));
    for (int64_t j = 0; j < entries; ++j) {
        float* x = v.data() + j * dim;
        uint8_t* row = out.data() + j * bytes;
        switch (format) {
            case CacheFormat::kFp4Ue8m0: v41::encode_fp4(x, dim, 32, false, row, row + dim / 2); break;
            case CacheFormat::kFp8Ue8m0: v41::encode_fp8(x, dim, 32, row, row + dim); break;
            default: std::memcpy(row, x, size_t(dim) * 4); break;
        }
    }
    if (entries > 60)  // duplicate keys: tied scores
        for (int64_t j = 40; j < 60; ++j) std::copy_n(out.data() + 7 * bytes, bytes, out.data() + j * bytes);
    return out;
}

struct Case {
    int64_t heads, dim;
    CacheFormat format;
};

TEST_F(CudaV41IndexerPrefill, TiledGemmBitIdenticalToPerRowKernel) {
    const std::vector<Seg> segs = {{203, 300, 2, 252},  {1, 5000, 2, 2500},  {1100, 2900, 1, 4000}, {1, 777, 1, 778},
                                   {1, 64, 2, 32},      {97, 0, 1, 97},      {13, 9000, 2, 4507}};
    const Case cases[] = {{32, 128, CacheFormat::kFp4Ue8m0}, {64, 64, CacheFormat::kFp8Ue8m0}, {20, 128, CacheFormat::kF32},
                          {4, 32, CacheFormat::kFp4Ue8m0}};
    for (const Case& c : cases) {
        // Page layouts of the keys: contiguous (per_page 0), aligned pages, pages off the codes' vector alignment (2
        // bytes; f32 rows 4: a float's own alignment, which real caches keep).
        const int64_t layouts[][2] = {{0, 0}, {37, 96}, {29, c.format == CacheFormat::kF32 ? 4 : 2}};
        const int64_t bytes = cuda::cache_row_bytes(c.format, c.dim, 32);
        std::vector<std::vector<uint8_t>> keys;
        int64_t rows = 0, max_entries = 0, max_seg_rows = 0;
        for (size_t i = 0; i < segs.size(); ++i) {
            keys.push_back(compact_keys(segs[i].entries, c.dim, c.format, 100 + uint32_t(i)));
            rows += segs[i].rows;
            max_entries = std::max(max_entries, segs[i].entries);
            max_seg_rows = std::max(max_seg_rows, segs[i].rows);
        }
        std::vector<float> q = randn(size_t(rows * c.heads * c.dim), 7);
        for (int64_t r = 0; r < rows * c.heads; ++r) v41::fake_quant_fp4(q.data() + r * c.dim, c.dim, 32, false);
        std::vector<float> hw = randn(size_t(rows * c.heads), 8);
        Dev<float> dq(q), dhw(hw);
        for (const auto& layout : layouts) {
            const int64_t per_page = layout[0], offset = layout[1];
            // The keys' memory: each segment contiguous, or in pages of per_page rows `offset` bytes in, the
            // logical pages in reverse order, every other byte 0xFF (NaN codes: a wrong read shows).
            std::vector<uint8_t> mem;
            std::vector<size_t> base(segs.size()), page_at;
            int64_t table_len = 0;
            const int64_t page_bytes = per_page > 0 ? offset + per_page * bytes : 0;
            for (size_t i = 0; i < segs.size(); ++i)
                if (per_page > 0) table_len = std::max(table_len, (segs[i].entries + per_page - 1) / per_page);
            for (size_t i = 0; i < segs.size(); ++i) {
                const int64_t n = segs[i].entries;
                if (per_page == 0) {
                    base[i] = mem.size();
                    mem.insert(mem.end(), keys[i].begin(), keys[i].end());
                    continue;
                }
                const int64_t pages = (n + per_page - 1) / per_page;
                const size_t first = mem.size();
                mem.resize(first + size_t(table_len * page_bytes), 0xFF);
                for (int64_t j = 0; j < n; ++j)
                    std::copy_n(keys[i].begin() + j * bytes, bytes,
                                mem.begin() + std::ptrdiff_t(first + size_t((pages - 1 - j / per_page) * page_bytes + offset +
                                                                            (j % per_page) * bytes)));
                for (int64_t k = 0; k < table_len; ++k)
                    page_at.push_back(first + size_t((k < pages ? pages - 1 - k : k) * page_bytes));
            }
            Dev<uint8_t> dmem(mem);
            std::vector<const uint8_t*> table;
            for (size_t at : page_at) table.push_back(dmem.ptr() + at);
            Dev<const uint8_t*> dtable(table);
            const cuda::PagedCacheRows paged = per_page > 0 ? cuda::PagedCacheRows{dtable.ptr(), table_len, per_page, offset}
                                                            : cuda::PagedCacheRows{};
            std::vector<cuda::IndexRow> ir;
            std::vector<int64_t> entries_of;
            int64_t row = 0;
            for (size_t i = 0; i < segs.size(); ++i)
                for (int64_t t = 0; t < segs[i].rows; ++t, ++row) {
                    const int64_t pos = segs[i].first_position + t;
                    const int64_t visible = std::min(segs[i].entries, (pos + 1) / segs[i].ratio);
                    ir.push_back({int32_t(row), int32_t(segs[i].entries), int32_t(visible), -1,
                                  per_page > 0 ? nullptr : dmem.ptr() + base[i], int32_t(i)});
                    entries_of.push_back(segs[i].entries);
                }
            Dev<cuda::IndexRow> dir(ir);
            const std::string what = "heads " + std::to_string(c.heads) + " dim " + std::to_string(c.dim) + " format " +
                                     std::to_string(int(c.format)) + " pages " + std::to_string(per_page) + "+" +
                                     std::to_string(offset);
            // Scores of index rows [first, first + count) by the kernel `per_block` picks (0: by max_segment_rows).
            auto run = [&](int64_t first, int64_t count, int64_t per_block, bool lockstep, int64_t seg_rows) {
                Dev<float> scores(std::vector<float>(size_t(count * max_entries), 12345.0f));
                cuda::index_scores({.rows = dir.ptr() + first, .num_rows = count, .max_entries = max_entries, .q = dq.ptr(),
                                    .weights = dhw.ptr(), .heads = c.heads, .head_dim = c.dim, .key_format = c.format,
                                    .key_block = 32, .official = true, .tensor_cores = true, .paged_keys = paged,
                                    .max_segment_rows = seg_rows, .tc_rows_per_block = per_block, .gemm_lockstep = lockstep,
                                    .scores = scores.ptr()},
                                   Stream{});
                return scores.host(size_t(count * max_entries));
            };
            const std::vector<float> ref = run(0, rows, 1, false, max_seg_rows);
            // The reference's facts: -inf exactly beyond the visible keys, finite scores before them.
            int64_t finite = 0;
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < entries_of[size_t(r)]; ++j) {
                    const float s = ref[size_t(r * max_entries + j)];
                    if (j >= ir[size_t(r)].visible) ASSERT_TRUE(std::isinf(s) && s < 0) << what << " row " << r << " key " << j;
                    else ASSERT_TRUE(std::isfinite(s)) << what << " row " << r << " key " << j << ": " << s;
                    finite += j < ir[size_t(r)].visible;
                }
            ASSERT_GT(finite, 1000000) << what;
            auto differing = [&](const std::vector<float>& got, int64_t first, int64_t count) {
                int64_t bad = 0;
                for (int64_t r = 0; r < count; ++r)
                    for (int64_t j = 0; j < entries_of[size_t(first + r)]; ++j)
                        bad += std::memcmp(&ref[size_t((first + r) * max_entries + j)], &got[size_t(r * max_entries + j)], 4) != 0;
                return bad;
            };
            EXPECT_EQ(differing(run(0, rows, 8, false, max_seg_rows), 0, rows), 0) << what << ": tiled, staggered";
            EXPECT_EQ(differing(run(0, rows, 8, true, max_seg_rows), 0, rows), 0) << what << ": tiled, in step";
            EXPECT_EQ(differing(run(0, rows, 0, false, max_seg_rows), 0, rows), 0) << what << ": the launch default";
            // Rows alone: a run of the long segment from its 5th row (other block boundaries), a decode row.
            EXPECT_EQ(differing(run(209, 301, 0, false, 301), 209, 301), 0) << what << ": rows alone";
            EXPECT_EQ(differing(run(203, 1, 0, false, 1), 203, 1), 0) << what << ": a decode row alone";
        }
    }
}

}  // namespace
}  // namespace deepinfer
