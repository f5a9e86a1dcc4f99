// SPDX-License-Identifier: Apache-2.0
// The lightning indexer at prefill shapes on tensor cores: the GEMM kernel (kernels/indexer_tc_gemm.cuh,
// 8 rows per block, the launch default at prefill) and the grouped kernel (kernels/indexer_tc_rows.cuh,
// 2 or 4 rows per block sharing each key tile, and the one-row form decode takes) against the per-row
// reference kernel (indexer_tc.cuh) and the CPU.
// Three segments with different visible counts (512..4175 keys; contiguous keys, paged keys at an
// aligned and at a misaligned page offset) and a row count that is not a multiple of 4, so some blocks
// hold rows of two segments. Scores (every visible one) and the top-512 picks must be bit-identical
// between the kernels, and a run of rows alone must give the bits it gives in the whole batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "backends/cuda/cuda_backend.h"
#include "model/attention_block.h"
#include "model/compressor.h"
#include "ops/cuda_test_util.h"

namespace deepinfer {
namespace {

using cuda::Stream;
using test::Dev;
using test::PagedRowsCopy;
using test::randn;

class CudaIndexerPrefill : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

// Number of bit differences between a and b over each row's first visible[r] entries (row pitch ld).
int64_t differing(const std::vector<float>& a, const std::vector<float>& b, const std::vector<int64_t>& visible, int64_t ld,
                  int64_t row_offset_b = 0) {
    int64_t bad = 0;
    for (size_t r = 0; r < visible.size(); ++r)
        for (int64_t j = 0; j < visible[r]; ++j)
            bad += std::memcmp(&a[r * size_t(ld) + size_t(j)], &b[(r + size_t(row_offset_b)) * size_t(ld) + size_t(j)], 4) != 0;
    return bad;
}

TEST_F(CudaIndexerPrefill, GroupedRowsBitIdenticalToPerRowKernel) {
    const int64_t IH = 64, ID = 128, m = 4, topk = 512;
    struct Seg {
        int64_t rows, first_position, per_page, offset;  // per_page 0: contiguous keys
    };
    const std::vector<Seg> segs = {{1201, 2048, 37, 96}, {700, 16000, 0, 0}, {150, 6001, 29, 2}};
    std::vector<int32_t> pos, row_seg;
    std::vector<int64_t> visible;
    for (size_t s = 0; s < segs.size(); ++s)
        for (int64_t t = 0; t < segs[s].rows; ++t) {
            pos.push_back(int32_t(segs[s].first_position + t));
            row_seg.push_back(int32_t(s));
            visible.push_back((segs[s].first_position + t + 1) / m);
        }
    const int64_t rows = int64_t(pos.size()), max_visible = *std::max_element(visible.begin(), visible.end());
    // Keys and queries as the model holds them: Hadamard+FP4 values (bf16-exact); bf16 head weights.
    std::vector<std::vector<float>> keys;
    std::vector<std::unique_ptr<Dev<float>>> dkeys;
    std::vector<std::unique_ptr<PagedRowsCopy>> paged;
    std::vector<cuda::DeviceSegment> dsegs;
    for (size_t s = 0; s < segs.size(); ++s) {
        const int64_t n = (segs[s].first_position + segs[s].rows) / m;
        auto k = randn(size_t(n * ID), uint32_t(71 + s));
        for (int64_t i = 0; i < n; ++i) hadamard_fp4_simulate(k.data() + i * ID, ID);
        cuda::DeviceSegment d;
        if (segs[s].per_page == 0) {
            dkeys.push_back(std::make_unique<Dev<float>>(k));
            d.idx_entries = dkeys.back()->ptr();
        } else {
            paged.push_back(std::make_unique<PagedRowsCopy>(k, ID, segs[s].per_page, segs[s].offset));
            d.pages = paged.back()->table.ptr();
            d.entries_per_page = paged.back()->per_page;
            d.idx_offset = paged.back()->offset;
        }
        keys.push_back(std::move(k));
        dsegs.push_back(d);
    }
    auto q = randn(size_t(rows * IH * ID), 81);
    for (int64_t i = 0; i < rows * IH; ++i) hadamard_fp4_simulate(q.data() + i * ID, ID);
    auto hw = randn(size_t(rows * IH), 82);
    for (float& x : hw) x = cpu::round_bf16(x);
    Dev<float> dq(q), dhw(hw);
    Dev<int32_t> dpos(pos), drs(row_seg), dcnt(static_cast<size_t>(rows));
    Dev<cuda::DeviceSegment> dseg(dsegs);

    struct Result {
        std::vector<float> scores;
        std::vector<int32_t> selected;
    };
    // Rows [r0, r0 + n) alone, with `per_block` rows per block (-1: the per-row reference kernel, 0: the
    // launch default).
    auto run = [&](int64_t r0, int64_t n, int64_t per_block, int reps = 1, double* ms = nullptr) {
        Dev<float> dsc(size_t(n * max_visible));
        Dev<int32_t> dsel(size_t(n * topk));
        const cuda::IndexerParams p{.segments = dseg.ptr(), .row_segment = drs.ptr() + r0, .positions = dpos.ptr() + r0,
                                    .rows = n, .q = dq.ptr() + r0 * IH * ID, .weights = dhw.ptr() + r0 * IH,
                                    .heads = IH, .head_dim = ID, .ratio = m, .topk = topk, .max_visible = max_visible,
                                    .scores = dsc.ptr(), .selected = dsel.ptr(), .num_selected = dcnt.ptr(),
                                    .official = true, .tensor_cores = true, .max_segment_rows = 1201,
                                    .tc_rows_per_block = per_block};
        cuda::indexer_topk(p, Stream{});
        cuda::synchronize();
        if (ms) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < reps; ++i) cuda::indexer_topk(p, Stream{});
            cuda::synchronize();
            *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
        }
        return Result{dsc.host(size_t(n * max_visible)), dsel.host(size_t(n * topk))};
    };
    double ms_row = 0, ms_grouped = 0;
    double ms_one = 0;
    double ms_four = 0;
    const Result per_row = run(0, rows, -1, 5, &ms_row);
    const Result grouped = run(0, rows, 0, 5, &ms_grouped);  // the GEMM kernel (8 rows per block)
    const Result one = run(0, rows, 1, 5, &ms_one);
    const Result four = run(0, rows, 4, 5, &ms_four);
    std::printf("indexer + top-512, %lld rows (3 segments, up to %lld keys): per-row kernel %.3f ms, GEMM (8 rows) %.3f ms, "
                "4 rows per block %.3f ms, one row per block (decode's) %.3f ms\n",
                static_cast<long long>(rows), static_cast<long long>(max_visible), ms_row, ms_grouped, ms_four, ms_one);

    // The per-row kernel against the CPU on one row of each segment (tolerance of the fast mode; the
    // exact-order CPU test is ops_cuda_test's IndexerScoresAndTop512BitIdentical).
    const float ss = 1.0f / std::sqrt(float(ID)), ws = 1.0f / std::sqrt(float(IH));
    for (int64_t r : {int64_t(1200), int64_t(1201 + 699), rows - 1}) {
        const auto& k = keys[size_t(row_seg[size_t(r)])];
        int64_t equal = 0;
        std::vector<float> sc(size_t(visible[size_t(r)]));
        for (int64_t j = 0; j < visible[size_t(r)]; ++j) {
            float s = 0;
            for (int64_t h = 0; h < IH; ++h) {
                const float dp = cpu::dot(q.data() + (r * IH + h) * ID, k.data() + j * ID, ID);
                const float wgt = cpu::round_bf16(hw[size_t(r * IH + h)] * ss * ws);
                s = cpu::round_bf16(s + cpu::round_bf16(std::max(cpu::round_bf16(dp), 0.0f) * wgt));
            }
            sc[size_t(j)] = s;
        }
        float top = 0;
        for (float v : sc) top = std::max(top, std::fabs(v));
        for (int64_t j = 0; j < visible[size_t(r)]; ++j) {
            const float got = per_row.scores[size_t(r * max_visible + j)];
            equal += got == sc[size_t(j)];
            ASSERT_LE(std::fabs(got - sc[size_t(j)]), 0.03f * top) << "row " << r << " key " << j;
        }
        EXPECT_GE(double(equal), 0.9 * double(visible[size_t(r)])) << "row " << r;
        const auto want = topk_lowest_index(per_row.scores.data() + r * max_visible, visible[size_t(r)], topk);
        EXPECT_EQ(std::vector<int32_t>(per_row.selected.begin() + r * topk, per_row.selected.begin() + (r + 1) * topk), want)
            << "row " << r << ": picks of the GPU's own scores";
    }

    EXPECT_EQ(differing(per_row.scores, grouped.scores, visible, max_visible), 0) << "GEMM (8 rows) vs per-row scores";
    EXPECT_EQ(grouped.selected, per_row.selected) << "GEMM (8 rows) vs per-row picks";
    EXPECT_EQ(differing(per_row.scores, four.scores, visible, max_visible), 0) << "4 rows per block vs per-row scores";
    EXPECT_EQ(four.selected, per_row.selected) << "4 rows per block vs per-row picks";
    EXPECT_EQ(differing(per_row.scores, one.scores, visible, max_visible), 0) << "1 row per block vs per-row scores";
    EXPECT_EQ(one.selected, per_row.selected) << "1 row per block vs per-row picks";
    const Result pairs = run(0, rows, 2);
    EXPECT_EQ(differing(per_row.scores, pairs.scores, visible, max_visible), 0) << "2 rows per block vs per-row scores";
    EXPECT_EQ(pairs.selected, per_row.selected) << "2 rows per block vs per-row picks";

    // Rows alone (a block's group shifted; a run across the segment boundary; single rows) give the
    // bits they give in the batch.
    const std::vector<std::pair<int64_t, int64_t>> alone_runs = {{1198, 7}, {1, 1}, {rows - 1, 1}, {1901, 150}, {3, 517}};
    for (const auto& [r0, n] : alone_runs) {
        const Result alone = run(r0, n, 8);
        const std::vector<int64_t> vis(visible.begin() + r0, visible.begin() + r0 + n);
        std::vector<float> batch_scores(grouped.scores.begin() + r0 * max_visible, grouped.scores.begin() + (r0 + n) * max_visible);
        EXPECT_EQ(differing(batch_scores, alone.scores, vis, max_visible), 0) << "rows " << r0 << "+" << n << " alone";
        EXPECT_EQ(alone.selected, std::vector<int32_t>(grouped.selected.begin() + r0 * topk, grouped.selected.begin() + (r0 + n) * topk))
            << "rows " << r0 << "+" << n << " alone: picks";
        const Result alone4 = run(r0, n, 4);
        EXPECT_EQ(differing(batch_scores, alone4.scores, vis, max_visible), 0) << "rows " << r0 << "+" << n << " alone, 4 per block";
        if (n > 7) continue;
        const Result alone_one = run(r0, n, 1);  // decode's form: a short batch of rows of any segments
        EXPECT_EQ(differing(batch_scores, alone_one.scores, vis, max_visible), 0) << "rows " << r0 << "+" << n << " alone, 1 per block";
    }
}

// A V4-Flash prefill (64 heads x 128, top-512, ratio 4) of 8,192 tokens from position 0 over paged keys
// (64 per page, as the device state holds them), after 24 decode rows of other sequences: the batch at
// once with the GEMM kernel (staggered and in step) against the per-row reference kernel, and
// the prompt prefilled in chunks of several lengths (each chunk a batch of its own, with the launch
// choice the engine's forward makes for it) against the batch at once, bit for bit.
TEST_F(CudaIndexerPrefill, GemmKernelBitIdenticalOverChunkings) {
    const int64_t IH = 64, ID = 128, m = 4, topk = 512, T = 8192, decode_rows = 24;
    const int64_t nkeys = T / m;
    auto keys = randn(size_t(nkeys * ID), 91);
    for (int64_t i = 0; i < nkeys; ++i) hadamard_fp4_simulate(keys.data() + i * ID, ID);
    PagedRowsCopy paged(keys, ID, 64, 4096);
    std::vector<int32_t> pos, row_seg;
    std::vector<int64_t> visible;
    std::vector<cuda::DeviceSegment> dsegs;
    cuda::DeviceSegment d;
    d.pages = paged.table.ptr();
    d.entries_per_page = paged.per_page;
    d.idx_offset = paged.offset;
    for (int64_t i = 0; i < decode_rows; ++i) {  // other sequences' decode rows (their keys: the same pages)
        pos.push_back(int32_t(600 + (i * 2753) % (T - 600)));
        row_seg.push_back(int32_t(i));
        dsegs.push_back(d);
    }
    for (int64_t t = 0; t < T; ++t) {
        pos.push_back(int32_t(t));
        row_seg.push_back(int32_t(decode_rows));
    }
    dsegs.push_back(d);
    for (int32_t x : pos) visible.push_back((x + 1) / m);
    const int64_t rows = int64_t(pos.size()), max_visible = nkeys;
    auto q = randn(size_t(rows * IH * ID), 92);
    for (int64_t i = 0; i < rows * IH; ++i) hadamard_fp4_simulate(q.data() + i * ID, ID);
    auto hw = randn(size_t(rows * IH), 93);
    for (float& x : hw) x = cpu::round_bf16(x);
    Dev<float> dq(q), dhw(hw);
    Dev<int32_t> dpos(pos), drs(row_seg), dcnt(static_cast<size_t>(rows));
    Dev<cuda::DeviceSegment> dseg(dsegs);
    struct Result {
        std::vector<float> scores;
        std::vector<int32_t> selected;
    };
    // Rows [r0, r0 + n) as a batch whose largest segment holds seg_rows rows.
    auto run = [&](int64_t r0, int64_t n, int64_t seg_rows, int64_t per_block, bool lockstep = false) {
        Dev<float> dsc(size_t(n * max_visible));
        Dev<int32_t> dsel(size_t(n * topk));
        cuda::indexer_topk({.segments = dseg.ptr(), .row_segment = drs.ptr() + r0, .positions = dpos.ptr() + r0, .rows = n,
                            .q = dq.ptr() + r0 * IH * ID, .weights = dhw.ptr() + r0 * IH, .heads = IH, .head_dim = ID,
                            .ratio = m, .topk = topk, .max_visible = max_visible, .scores = dsc.ptr(),
                            .selected = dsel.ptr(), .num_selected = dcnt.ptr(), .official = true, .tensor_cores = true,
                            .max_segment_rows = seg_rows, .tc_rows_per_block = per_block, .gemm_lockstep = lockstep},
                           Stream{});
        cuda::synchronize();
        return Result{dsc.host(size_t(n * max_visible)), dsel.host(size_t(n * topk))};
    };
    const Result ref = run(0, rows, T, -1);  // per-row kernel
    const Result all = run(0, rows, T, 0);   // launch default: the GEMM kernel
    EXPECT_EQ(differing(ref.scores, all.scores, visible, max_visible), 0) << "GEMM vs per-row scores";
    EXPECT_EQ(all.selected, ref.selected) << "GEMM vs per-row picks";
    const Result lockstep = run(0, rows, T, 8, true);
    EXPECT_EQ(differing(ref.scores, lockstep.scores, visible, max_visible), 0) << "GEMM (warps in step) vs per-row scores";
    EXPECT_EQ(lockstep.selected, ref.selected) << "GEMM (warps in step) picks";
    int64_t some_below = 0;  // rows with more visible keys than picks (the top-k really selects)
    for (int64_t v : visible) some_below += v > topk;
    EXPECT_GT(some_below, T / 2);

    // The prompt in chunks (the decode rows alone too), each as its own batch.
    const std::vector<std::vector<int64_t>> chunkings = {{1, 7, 64, 517, 1000, 2048, 4555}, {4096, 4096}, {3000, 5192}};
    for (const auto& chunks : chunkings) {
        int64_t off = 0;
        for (int64_t n : chunks) {
            const int64_t r0 = decode_rows + off;
            const Result c = run(r0, n, n, 0);
            const std::vector<int64_t> vis(visible.begin() + r0, visible.begin() + r0 + n);
            std::vector<float> want(all.scores.begin() + r0 * max_visible, all.scores.begin() + (r0 + n) * max_visible);
            EXPECT_EQ(differing(want, c.scores, vis, max_visible), 0) << "chunk at " << off << " of " << n << " rows";
            EXPECT_EQ(c.selected, std::vector<int32_t>(all.selected.begin() + r0 * topk, all.selected.begin() + (r0 + n) * topk))
                << "chunk at " << off << " of " << n << " rows: picks";
            off += n;
        }
        ASSERT_EQ(off, T);
    }
    // The decode rows alone (decode's launch form) and with the first 1000 prompt rows (a mixed batch).
    const Result dec = run(0, decode_rows, 1, 0);
    const std::vector<int64_t> dvis(visible.begin(), visible.begin() + decode_rows);
    EXPECT_EQ(differing(all.scores, dec.scores, dvis, max_visible), 0) << "decode rows alone";
    EXPECT_EQ(dec.selected, std::vector<int32_t>(all.selected.begin(), all.selected.begin() + decode_rows * topk));
    const Result mixed = run(0, decode_rows + 1000, 1000, 0);
    const std::vector<int64_t> mvis(visible.begin(), visible.begin() + decode_rows + 1000);
    EXPECT_EQ(differing(all.scores, mixed.scores, mvis, max_visible), 0) << "decode rows + a chunk";
    EXPECT_EQ(mixed.selected, std::vector<int32_t>(all.selected.begin(), all.selected.begin() + (decode_rows + 1000) * topk));
}

}  // namespace
}  // namespace deepinfer
