// SPDX-License-Identifier: Apache-2.0
// The CUDA ops added for DeepSeek-V4.1 against the CPU reference (src/model/v41) at the real
// V4.1-Flash shapes (hidden 5120, HC 4 x 5120, 64 heads x 512, window 128, indexer 32 x 128 top-512,
// candidate blocks of 8, Engram 24 columns x 256) and tiny ones: act_quant per 32 through the FP8 GEMM,
// single-pass mHC, the cache QAT formats (values and compact codes), compressor pooling, indexer
// scores + candidate blocks + top-k, sink attention over compact caches, Engram gather + fusion and
// the router's gate_temp / selection-order sum. Everything must be bit-identical (exp/log1p are
// rounded once from double on both sides). Where the CPU op is a loop inside a model file's
// anonymous namespace (pooling, indexer, attention, routing), the reference below repeats that loop
// statement by statement. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm_fast.h"
#include "ops/cuda_test_util.h"
#include "backends/cuda/model/cuda_weights.h"
#include "deepinfer/float_formats.h"
#include "model/v41/ffn.h"
#include "model/v41/mhc.h"
#include "model/v41/qat.h"

namespace deepinfer {
namespace {

using cuda::CacheFormat;
using cuda::DeviceBuffer;
using cuda::Stream;
using test::Dev;
using test::randn;

class CudaV41Ops : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};


std::vector<float> bf16_values(std::vector<float> v) {
    for (float& x : v) x = cpu::round_bf16(x);
    return v;
}

template <class T>
void expect_equal(const std::vector<T>& ref, const std::vector<T>& got, const std::string& what) {
    ASSERT_EQ(ref.size(), got.size()) << what;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ref.size(); ++i)
        if (std::memcmp(&ref[i], &got[i], sizeof(T)) != 0) {
            if (bad++ == 0) first = i;
        }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size() << " differ; first at " << first << ": "
                       << +ref[first] << " vs " << +got[first];
}

// An FP8 e4m3 weight with ue8m0 scales in 32 x 32 blocks (V4.1's layout), or f32; host and device.
struct Weight {
    std::vector<uint8_t> w, s;
    cpu::LinearWeight host;
    std::unique_ptr<DeviceBuffer> dw, ds;
    cuda::DeviceLinear dev;
    Weight(bool fp8, int64_t out, int64_t in, uint32_t seed) {
        std::mt19937 rng(seed);
        TensorView wv, sv;
        if (fp8) {
            w.resize(size_t(out * in));
            for (uint8_t& b : w) {
                b = uint8_t(rng());
                if ((b & 0x7F) == 0x7F) b = 0x3F;  // no NaN codes
            }
            s.resize(size_t(((out + 31) / 32) * ((in + 31) / 32)));
            for (uint8_t& b : s) b = uint8_t(118 + rng() % 6);
            wv = TensorView(w.data(), DType::kF8E4M3, {out, in});
            sv = TensorView(s.data(), DType::kF8E8M0, {(out + 31) / 32, (in + 31) / 32});
        } else {
            const std::vector<float> v = randn(size_t(out * in), seed, 1.0f / std::sqrt(float(in)));
            w.resize(v.size() * 4);
            std::memcpy(w.data(), v.data(), w.size());
            wv = TensorView(w.data(), DType::kF32, {out, in});
        }
        host = cpu::make_linear_weight(wv, sv, out, in, 32, 32);
        dw = std::make_unique<DeviceBuffer>(w.size());
        dw->copy_from_host(w.data(), w.size());
        if (!s.empty()) {
            ds = std::make_unique<DeviceBuffer>(s.size());
            ds->copy_from_host(s.data(), s.size());
        }
        dev = cuda::device_linear_like(host, dw->data(), ds ? ds->data() : nullptr);
    }
};

TEST_F(CudaV41Ops, ActQuantPer32ThroughTheFp8GemmBitIdentical) {
    for (auto [rows, out, in] : {std::tuple<int64_t, int64_t, int64_t>{7, 96, 64}, {5, 1280, 5120}, {3, 5120, 1024}}) {
        Weight w(true, out, in, uint32_t(out + in));
        std::vector<float> x = bf16_values(randn(size_t(rows * in), 5, 2.0f)), ref(size_t(rows * out));
        for (int64_t i = 0; i < 32; ++i) x[size_t(i)] = 1e-7f * float(i);  // a block below the 1e-4 floor
        cpu::linear({.x = TensorView(x.data(), DType::kF32, {rows, in}), .weight = &w.host,
                     .y = TensorView(ref.data(), DType::kF32, {rows, out}), .quantize_activations = true,
                     .activation_block = 32, .round_output_bf16 = true});
        Dev<float> dx(x), dq(x.size()), dy(ref.size());
        cuda::act_quant_dequant({.x = dx.ptr(), .out = dq.ptr(), .rows = rows, .cols = in, .block = 32}, Stream{});
        cuda::linear({.x = dq.ptr(), .x_ld = in, .weight = w.dev, .y = dy.ptr(), .y_ld = out, .rows = rows,
                      .round_output_bf16 = true},
                     Stream{});
        expect_equal(ref, dy.host(ref.size()), "fp8 linear " + std::to_string(out) + "x" + std::to_string(in));
    }
}

TEST_F(CudaV41Ops, SinglePassHcBitIdentical) {
    for (auto [hc, D] : {std::pair<int64_t, int64_t>{4, 5120}, {2, 64}, {4, 64}, {6, 64}}) {  // 6: two comb slots per lane
        const int64_t rows = 5, n_mix = (2 + hc) * hc;
        for (bool round : {false, true}) {
            const std::vector<float> x = bf16_values(randn(size_t(rows * hc * D), 1, 1.5f));
            const std::vector<float> fn = randn(size_t(n_mix * hc * D), 2, 0.02f), base = randn(size_t(n_mix), 3, 0.5f);
            const std::vector<float> scale = {0.8f, 1.1f, 0.6f};
            std::vector<float> cpre = randn(size_t(rows * hc), 4, 0.3f);
            for (float& v : cpre) v = std::fabs(v) + 0.1f;
            std::vector<float> pre(size_t(rows * hc)), post(pre.size()), comb(size_t(rows * hc * hc)), a(size_t(rows * D));
            const v41::HcMixParams mp{fn.data(), base.data(), scale.data(), hc, D, 20, 1e-20f, 1e-6f};
            for (int64_t t = 0; t < rows; ++t) {
                v41::hc_mixes(mp, x.data() + t * hc * D, pre.data() + t * hc, post.data() + t * hc, comb.data() + t * hc * hc);
                v41::hc_collapse(x.data() + t * hc * D, cpre.data() + t * hc, hc, D, a.data() + t * D);
                if (round) cpu::round_bf16_inplace(a.data() + t * D, D);
            }
            Dev<float> dx(x), dfn(fn), dbase(base), dscale(scale), dcpre(cpre), dpre(pre.size()), dpost(post.size()),
                dcomb(comb.size()), da(a.size());
            cuda::hc_mixes({.x = dx.ptr(), .fn = dfn.ptr(), .base = dbase.ptr(), .scale = dscale.ptr(), .rows = rows, .hc = hc,
                            .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-20f, .hc_eps = 1e-6f, .pre = dpre.ptr(),
                            .post = dpost.ptr(), .comb = dcomb.ptr(), .collapse_pre = dcpre.ptr(), .collapsed = da.ptr(),
                            .round_bf16 = round},
                           Stream{});
            const std::string what = "hc " + std::to_string(hc) + " x " + std::to_string(D);
            expect_equal(pre, dpre.host(pre.size()), what + " pre");
            expect_equal(post, dpost.host(post.size()), what + " post");
            expect_equal(comb, dcomb.host(comb.size()), what + " comb");
            expect_equal(a, da.host(a.size()), what + " collapse");
            // Expansion (V4.1's order) and the plain collapse.
            const std::vector<float> o = bf16_values(randn(size_t(rows * D), 6));
            std::vector<float> y(x.size()), c2(size_t(rows * D));
            for (int64_t t = 0; t < rows; ++t) {
                v41::hc_expand(o.data() + t * D, x.data() + t * hc * D, post.data() + t * hc, comb.data() + t * hc * hc, hc, D,
                               y.data() + t * hc * D);
                if (round) cpu::round_bf16_inplace(y.data() + t * hc * D, hc * D);
                v41::hc_collapse(x.data() + t * hc * D, pre.data() + t * hc, hc, D, c2.data() + t * D);
                if (round) cpu::round_bf16_inplace(c2.data() + t * D, D);
            }
            Dev<float> dout(o), dy(y.size()), dc2(c2.size());
            cuda::hc_post({.out = dout.ptr(), .x = dx.ptr(), .post = dpost.ptr(), .comb = dcomb.ptr(), .y = dy.ptr(), .rows = rows,
                           .hc = hc, .hidden = D, .round_bf16 = round, .mix_first = true},
                          Stream{});
            cuda::hc_collapse({.x = dx.ptr(), .pre = dpre.ptr(), .out = dc2.ptr(), .rows = rows, .hc = hc, .hidden = D,
                               .round_bf16 = round},
                              Stream{});
            expect_equal(y, dy.host(y.size()), what + " expand");
            expect_equal(c2, dc2.host(c2.size()), what + " plain collapse");
        }
    }
}

// The fast mode's single-pass mHC site (CudaV41Model::hc_site): the split-K tensor-core mixing logits, then
// hc_pre writing this site's pre (pre_out) and collapsing with the previous site's (collapse_pre). Against
// the reference kernel (the CPU's bits): pre, post and comb within f32 rounding of the logits (x · fn then
// times the norm's factor, not dot(x · r, fn)), the collapse bit for bit (the same pre, the same order);
// rows alone equal rows in a batch.
TEST_F(CudaV41Ops, SinglePassHcFastModeNearReference) {
    const int64_t hc = 4, D = 5120, n_mix = (2 + hc) * hc, flat = hc * D;
    for (int64_t rows : {int64_t(1), int64_t(37)}) {
        const std::vector<float> x = bf16_values(randn(size_t(rows * flat), 51, 1.5f));
        const std::vector<float> fn = randn(size_t(n_mix * flat), 52, 0.02f), base = randn(size_t(n_mix), 53, 0.5f);
        const std::vector<float> scale = {0.8f, 1.1f, 0.6f};
        std::vector<float> cpre = randn(size_t(rows * hc), 54, 0.3f);
        for (float& v : cpre) v = std::fabs(v) + 0.1f;
        Dev<float> dx(x), dfn(fn), dbase(base), dscale(scale), dcpre(cpre);
        Dev<float> rpre(size_t(rows * hc)), rpost(size_t(rows * hc)), rcomb(size_t(rows * hc * hc)), ra(size_t(rows * D));
        cuda::hc_mixes({.x = dx.ptr(), .fn = dfn.ptr(), .base = dbase.ptr(), .scale = dscale.ptr(), .rows = rows, .hc = hc,
                        .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-20f, .hc_eps = 1e-6f, .pre = rpre.ptr(),
                        .post = rpost.ptr(), .comb = rcomb.ptr(), .collapse_pre = dcpre.ptr(), .collapsed = ra.ptr(),
                        .round_bf16 = true},
                       Stream{});
        const int64_t splits = cuda::hc_mix_splits(flat);
        Dev<float> partial(size_t(splits * rows * (n_mix + 1))), mix(size_t(rows * (n_mix + 1)));
        Dev<float> fpre(size_t(rows * hc)), fpost(size_t(rows * hc)), fcomb(size_t(rows * hc * hc)), fa(size_t(rows * D));
        cuda::hc_mix_splitk({.x = dx.ptr(), .fn = dfn.ptr(), .rows = rows, .outputs = n_mix, .flat = flat, .partial = partial.ptr(),
                             .partials_only = true},
                            Stream{});
        cuda::hc_pre({.x = dx.ptr(), .fn = dfn.ptr(), .base = dbase.ptr(), .scale = dscale.ptr(), .rows = rows, .hc = hc,
                      .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-20f, .hc_eps = 1e-6f, .post = fpost.ptr(),
                      .comb = fcomb.ptr(), .collapsed = fa.ptr(), .round_bf16 = true, .mix = mix.ptr(), .mix_given = true,
                      .mix_partial = partial.ptr(), .mix_splits = splits, .pre_out = fpre.ptr(), .collapse_pre = dcpre.ptr()},
                     Stream{});
        auto near = [&](const std::vector<float>& ref, const std::vector<float>& got, double tol, const char* what) {
            ASSERT_EQ(ref.size(), got.size());
            double worst = 0;
            for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(ref[i]) - double(got[i])));
            EXPECT_LE(worst, tol) << what << ", " << rows << " rows";
        };
        near(rpre.host(size_t(rows * hc)), fpre.host(size_t(rows * hc)), 1e-5, "pre");
        near(rpost.host(size_t(rows * hc)), fpost.host(size_t(rows * hc)), 1e-5, "post");
        near(rcomb.host(size_t(rows * hc * hc)), fcomb.host(size_t(rows * hc * hc)), 1e-4, "comb");
        expect_equal(ra.host(size_t(rows * D)), fa.host(size_t(rows * D)), "collapse with the given pre");
        // The pre it computed, its own: one row alone equals row 0 of the batch.
        if (rows > 1) {
            const size_t nh = static_cast<size_t>(hc);
            Dev<float> p1(static_cast<size_t>(splits * (n_mix + 1))), m1(static_cast<size_t>(n_mix + 1)), pre1(nh), post1(nh),
                comb1(nh * nh), a1(static_cast<size_t>(D));
            cuda::hc_mix_splitk({.x = dx.ptr(), .fn = dfn.ptr(), .rows = 1, .outputs = n_mix, .flat = flat, .partial = p1.ptr(),
                                 .partials_only = true},
                                Stream{});
            cuda::hc_pre({.x = dx.ptr(), .fn = dfn.ptr(), .base = dbase.ptr(), .scale = dscale.ptr(), .rows = 1, .hc = hc,
                          .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-20f, .hc_eps = 1e-6f, .post = post1.ptr(),
                          .comb = comb1.ptr(), .collapsed = a1.ptr(), .round_bf16 = true, .mix = m1.ptr(), .mix_given = true,
                          .mix_partial = p1.ptr(), .mix_splits = splits, .pre_out = pre1.ptr(), .collapse_pre = dcpre.ptr()},
                         Stream{});
            std::vector<float> b0 = fpre.host(size_t(rows * hc)), c0 = fcomb.host(size_t(rows * hc * hc));
            b0.resize(size_t(hc));
            c0.resize(size_t(hc * hc));
            expect_equal(b0, pre1.host(size_t(hc)), "pre: row alone");
            expect_equal(c0, comb1.host(size_t(hc * hc)), "comb: row alone");
        }
    }
}

// hc_post writing the next site's collapse (HcPostParams::collapse_pre: the fast mode's V4.1 forward) against
// the pass it replaces, hc_pre collapsing the written streams with that collapse_pre, and against the CPU's
// collapse, bit for bit, both roundings; hc_pre without the collapse (collapsed = null) still gives the same
// pre, post and comb.
TEST_F(CudaV41Ops, HcPostCollapsesTheNextSiteBitForBit) {
    for (auto [hc, D] : {std::pair<int64_t, int64_t>{4, 5120}, {2, 64}, {4, 64}}) {
        const int64_t rows = 7, n_mix = (2 + hc) * hc, flat = hc * D;
        for (bool round : {false, true}) {
            const std::vector<float> x = bf16_values(randn(size_t(rows * flat), 61, 1.5f));
            const std::vector<float> o = bf16_values(randn(size_t(rows * D), 62));
            std::vector<float> post = randn(size_t(rows * hc), 63, 0.5f), comb = randn(size_t(rows * hc * hc), 64, 0.4f);
            std::vector<float> cpre = randn(size_t(rows * hc), 65, 0.3f);
            for (float& v : cpre) v = std::fabs(v) + 0.1f;
            const std::vector<float> fn = randn(size_t(n_mix * flat), 66, 0.02f), base = randn(size_t(n_mix), 67, 0.5f);
            const std::vector<float> scale = {0.8f, 1.1f, 0.6f};
            Dev<float> dx(x), dout(o), dpost(post), dcomb(comb), dcpre(cpre), dfn(fn), dbase(base), dscale(scale);
            Dev<float> y1(x.size()), y2(x.size()), fused(size_t(rows * D));
            cuda::hc_post({.out = dout.ptr(), .x = dx.ptr(), .post = dpost.ptr(), .comb = dcomb.ptr(), .y = y1.ptr(), .rows = rows,
                           .hc = hc, .hidden = D, .round_bf16 = round, .mix_first = true},
                          Stream{});
            cuda::hc_post({.out = dout.ptr(), .x = dx.ptr(), .post = dpost.ptr(), .comb = dcomb.ptr(), .y = y2.ptr(), .rows = rows,
                           .hc = hc, .hidden = D, .round_bf16 = round, .mix_first = true, .collapse_pre = dcpre.ptr(),
                           .collapsed = fused.ptr()},
                          Stream{});
            const std::string what = "hc " + std::to_string(hc) + " x " + std::to_string(D) + (round ? " rounded" : "");
            const std::vector<float> y = y1.host(x.size());
            expect_equal(y, y2.host(x.size()), what + ": the streams");
            // The pass it replaces: the next site's hc_pre over y, collapsing with cpre; and the same without it.
            const int64_t splits = cuda::hc_mix_splits(flat);
            Dev<float> partial(size_t(splits * rows * (n_mix + 1))), mix(size_t(rows * (n_mix + 1)));
            Dev<float> pre_a(size_t(rows * hc)), post_a(size_t(rows * hc)), comb_a(size_t(rows * hc * hc)), ref(size_t(rows * D));
            Dev<float> pre_b(size_t(rows * hc)), post_b(size_t(rows * hc)), comb_b(size_t(rows * hc * hc));
            cuda::hc_mix_splitk({.x = y1.ptr(), .fn = dfn.ptr(), .rows = rows, .outputs = n_mix, .flat = flat, .partial = partial.ptr(),
                                 .partials_only = true},
                                Stream{});
            for (const bool collapse : {true, false})
                cuda::hc_pre({.x = y1.ptr(), .fn = dfn.ptr(), .base = dbase.ptr(), .scale = dscale.ptr(), .rows = rows, .hc = hc,
                              .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-20f, .hc_eps = 1e-6f,
                              .post = collapse ? post_a.ptr() : post_b.ptr(), .comb = collapse ? comb_a.ptr() : comb_b.ptr(),
                              .collapsed = collapse ? ref.ptr() : nullptr, .round_bf16 = round, .mix = mix.ptr(), .mix_given = true,
                              .mix_partial = partial.ptr(), .mix_splits = splits, .pre_out = collapse ? pre_a.ptr() : pre_b.ptr(),
                              .collapse_pre = dcpre.ptr()},
                             Stream{});
            const std::vector<float> got = fused.host(size_t(rows * D));
            expect_equal(ref.host(size_t(rows * D)), got, what + ": collapse vs hc_pre's");
            expect_equal(pre_a.host(size_t(rows * hc)), pre_b.host(size_t(rows * hc)), what + ": pre without the collapse");
            expect_equal(post_a.host(size_t(rows * hc)), post_b.host(size_t(rows * hc)), what + ": post without the collapse");
            expect_equal(comb_a.host(size_t(rows * hc * hc)), comb_b.host(size_t(rows * hc * hc)), what + ": comb without the collapse");
            std::vector<float> cpu_a(size_t(rows * D));
            for (int64_t t = 0; t < rows; ++t) {
                v41::hc_collapse(y.data() + t * flat, cpre.data() + t * hc, hc, D, cpu_a.data() + t * D);
                if (round) cpu::round_bf16_inplace(cpu_a.data() + t * D, D);
            }
            expect_equal(cpu_a, got, what + ": collapse vs the CPU's");
        }
    }
}

// Rows at nine magnitudes plus hostile ones: zeros, signed zeros, all-equal, powers of two, grid ties.
std::vector<float> qat_rows_input(int64_t rows, int64_t n) {
    std::vector<float> x = randn(size_t(rows * n), 9);
    for (int64_t r = 0; r < rows; ++r) {
        float* row = x.data() + r * n;
        const float mag = std::ldexp(1.0f, int(r % 9) * 4 - 20);
        for (int64_t i = 0; i < n; ++i) row[i] *= mag;
        switch (r % 7) {
            case 0: std::fill(row, row + n, 0.0f); break;
            case 1:
                for (int64_t i = 0; i < n; i += 2) row[i] = -0.0f;
                break;
            case 2:
                for (int64_t i = 0; i < n; ++i) row[i] = std::ldexp(1.0f, int(i % 24) - 12) * (i % 3 ? 1.0f : -1.0f);
                break;
            case 3:
                for (int64_t i = 0; i < n; ++i) row[i] = 0.25f + 0.5f * float(i % 12);  // e2m1 and e4m3 ties
                break;
            default: break;
        }
    }
    return x;
}

TEST_F(CudaV41Ops, CacheQatValuesAndCompactCodesEqualCpu) {
    struct Case {
        CacheFormat format;
        int64_t n, block;
    };
    // (Blocks of 16 and 32: the four-values-per-thread kernel; 6 and 10: the one-thread-per-block kernel.)
    for (const Case& k : {Case{CacheFormat::kFp8Ue8m0, 512, 32}, Case{CacheFormat::kFp4E4m3, 512, 16},
                          Case{CacheFormat::kFp4Ue8m0, 128, 32}, Case{CacheFormat::kFp8Ue8m0, 64, 32},
                          Case{CacheFormat::kFp4E4m3, 32, 16}, Case{CacheFormat::kFp4E4m3, 36, 6},
                          Case{CacheFormat::kFp8Ue8m0, 60, 10}}) {
        const int64_t rows = 63, bytes = cuda::cache_row_bytes(k.format, k.n, k.block);
        const std::vector<float> x = qat_rows_input(rows, k.n);
        std::vector<float> ref = x;
        std::vector<uint8_t> codes(size_t(rows * bytes));
        for (int64_t r = 0; r < rows; ++r) {
            float* v = ref.data() + r * k.n;
            uint8_t* c = codes.data() + r * bytes;
            if (k.format == CacheFormat::kFp8Ue8m0) {
                v41::encode_fp8(x.data() + r * k.n, k.n, k.block, c, c + k.n);
                v41::fake_quant_fp8(v, k.n, k.block);
            } else {
                const bool e4m3 = k.format == CacheFormat::kFp4E4m3;
                v41::encode_fp4(x.data() + r * k.n, k.n, k.block, e4m3, c, c + k.n / 2);
                v41::fake_quant_fp4(v, k.n, k.block, e4m3);
            }
        }
        // qat_rows on a device copy of x: x as it leaves, and the codes written.
        auto qat = [&](bool fake_quant) {
            Dev<float> dx(x);
            Dev<uint8_t> dcodes(codes.size());
            std::vector<uint8_t*> dst;
            for (int64_t r = 0; r < rows; ++r) dst.push_back(dcodes.ptr() + r * bytes);
            Dev<uint8_t*> ddst(dst);
            cuda::qat_rows({.x = dx.ptr(), .rows = rows, .n = k.n, .block = k.block, .format = k.format,
                            .fake_quant = fake_quant, .dst = ddst.ptr()},
                           Stream{});
            return std::pair{dx.host(x.size()), dcodes.host(codes.size())};
        };
        const std::string what = "format " + std::to_string(int(k.format)) + " n " + std::to_string(k.n) + " block " +
                                 std::to_string(k.block);
        const auto [values, got_codes] = qat(true);
        expect_equal(ref, values, what + " values");
        expect_equal(codes, got_codes, what + " codes");
        const auto [x_after, codes_only] = qat(false);  // codes only: the same codes, x as it was
        expect_equal(x, x_after, what + " x unchanged without fake_quant");
        expect_equal(codes, codes_only, what + " codes without fake_quant");
        Dev<uint8_t> dcodes(codes);
        // copy_rows moves the codes into scattered slots (null: skipped).
        Dev<uint8_t> ring(size_t(rows * bytes));
        cuda::fill_zero(ring.ptr(), size_t(rows * bytes), Stream{});
        std::vector<void*> slots;
        std::vector<uint8_t> want(size_t(rows * bytes), 0);
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t slot = (r * 5) % rows;
            slots.push_back(r % 4 == 3 ? nullptr : ring.ptr() + slot * bytes);
            if (r % 4 != 3) std::memcpy(want.data() + slot * bytes, codes.data() + r * bytes, size_t(bytes));
        }
        Dev<void*> dslots(slots);
        cuda::copy_rows({.src = dcodes.ptr(), .dst = dslots.ptr(), .rows = rows, .row_bytes = bytes}, Stream{});
        expect_equal(want, ring.host(want.size()), what + " copy_rows");
    }
}

// The attention kernels' decoders of the compact rows, one value per read, 16 per read (cache_values16) and
// 16 in two steps (cache_codes16 + cache_decode16, which the tensor-core attention stages keys with), against
// the CPU's decoders: every code byte and scale
// byte (NaN codes and scales: NaN on both sides; the rest bit for bit).
TEST_F(CudaV41Ops, CompactRowDecodersEqualCpu) {
    struct Case {
        CacheFormat format;
        int64_t n, block;
    };
    for (const Case& k : {Case{CacheFormat::kFp8Ue8m0, 512, 32}, Case{CacheFormat::kFp4E4m3, 512, 16},
                          Case{CacheFormat::kFp4Ue8m0, 128, 32}, Case{CacheFormat::kF32, 64, 1}}) {
        const int64_t rows = 64, bytes = cuda::cache_row_bytes(k.format, k.n, k.block);
        std::vector<uint8_t> codes(size_t(rows * bytes));
        std::mt19937 rng(41);
        for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 7 + rng() % 3);  // every byte value
        std::vector<float> ref(size_t(rows * k.n));
        for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* c = codes.data() + r * bytes;
            float* v = ref.data() + r * k.n;
            if (k.format == CacheFormat::kF32) {
                std::memcpy(v, c, size_t(k.n) * 4);
            } else if (k.format == CacheFormat::kFp8Ue8m0) {
                v41::decode_fp8(c, c + k.n, k.n, k.block, v);
            } else {
                v41::decode_fp4(c, c + k.n / 2, k.n, k.block, k.format == CacheFormat::kFp4E4m3, v);
            }
        }
        Dev<uint8_t> dcodes(codes);
        for (int path = 0; path < 3; ++path) {  // by one, cache_values16, cache_codes16 + cache_decode16
            const bool by16 = path > 0;
            Dev<float> out(ref.size());
            cuda::decode_rows({.src = dcodes.ptr(), .rows = rows, .n = k.n, .block = k.block, .format = k.format,
                               .by16 = by16, .two_step = path == 2, .out = out.ptr()},
                              Stream{});
            const std::vector<float> got = out.host(ref.size());
            size_t bad = 0, nans = 0;
            for (size_t i = 0; i < ref.size(); ++i) {
                if (std::isnan(ref[i]) || std::isnan(got[i])) {
                    nans += std::isnan(ref[i]) ? 1 : 0;
                    bad += std::isnan(ref[i]) != std::isnan(got[i]) ? 1 : 0;
                } else {
                    bad += std::memcmp(&ref[i], &got[i], 4) != 0 ? 1 : 0;
                }
            }
            EXPECT_EQ(bad, 0u) << "format " << int(k.format) << (path == 2 ? " two steps" : by16 ? " by 16" : " by 1");
            if (k.format != CacheFormat::kF32) {
                EXPECT_GT(nans, 0u) << "NaN codes covered";
            }
        }
    }
}

// model/v41/attention.cpp pool_groups' per-channel pooling of one group.
void pool_reference(const std::vector<const float*>& kv, const std::vector<const float*>& gate, int64_t width, float* out) {
    const size_t R = kv.size();
    for (int64_t ch = 0; ch < width; ++ch) {
        float mx = -INFINITY;
        for (size_t r = 0; r < R; ++r) mx = std::max(mx, gate[r][ch]);
        float sum = 0.0f;
        for (size_t r = 0; r < R; ++r) sum += cpu::exp_f32(gate[r][ch] - mx);
        float acc = 0.0f;
        for (size_t r = 0; r < R; ++r) acc += kv[r][ch] * (cpu::exp_f32(gate[r][ch] - mx) / sum);
        out[ch] = acc;
    }
}

TEST_F(CudaV41Ops, CompressorPoolingBitIdentical) {
    const int64_t width = 512, chunk = 9, groups = 5, ratio = 2;
    const std::vector<float> kv = randn(size_t((chunk + 1) * width), 11), gate = randn(size_t((chunk + 1) * width), 12, 3.0f);
    Dev<float> dkv(kv), dgate(gate);
    // Group g reads rows g*2 and g*2+1 (the last row of the "pending ring" is row chunk).
    std::vector<const float*> hk, hg, dk, dg;
    std::vector<float> ref(size_t(groups * width));
    for (int64_t g = 0; g < groups; ++g) {
        std::vector<const float*> rk, rg;
        for (int64_t r = 0; r < ratio; ++r) {
            const int64_t row = g == 0 && r == 0 ? chunk : g * ratio + r - 1;
            rk.push_back(kv.data() + row * width);
            rg.push_back(gate.data() + row * width);
            dk.push_back(dkv.ptr() + row * width);
            dg.push_back(dgate.ptr() + row * width);
        }
        pool_reference(rk, rg, width, ref.data() + g * width);
    }
    for (bool round : {false, true}) {
        std::vector<float> want = ref;
        if (round) cpu::round_bf16_inplace(want.data(), int64_t(want.size()));
        Dev<const float*> ddk(dk), ddg(dg);
        Dev<float> out(want.size());
        cuda::compress_pool({.kv_rows = ddk.ptr(), .gate_rows = ddg.ptr(), .groups = groups, .ratio = ratio, .width = width,
                             .out = out.ptr(), .round_bf16 = round},
                            Stream{});
        expect_equal(want, out.host(want.size()), round ? "pool bf16" : "pool f32");
    }
    // Ratio 1: the row itself.
    std::vector<const float*> d1;
    for (int64_t g = 0; g < groups; ++g) d1.push_back(dkv.ptr() + g * width);
    Dev<const float*> dd1(d1);
    Dev<float> out1(size_t(groups * width));
    cuda::compress_pool({.kv_rows = dd1.ptr(), .groups = groups, .ratio = 1, .width = width, .out = out1.ptr()}, Stream{});
    expect_equal(std::vector<float>(kv.begin(), kv.begin() + groups * width), out1.host(size_t(groups * width)), "ratio 1");
}

// model/v41/attention.cpp index_segment for one query row (scores of n keys, visibility, candidate
// stage as source or user, then topk_ascending). Returns the published top-k.
struct IndexRef {
    std::vector<int32_t> topk;
    std::vector<uint8_t> mask;  // built by a candidate source
};
IndexRef index_reference(const float* q, const float* hw, const std::vector<float>& keys, int64_t n, int64_t visible,
                         int64_t IH, int64_t ID, bool official, int mode, const std::vector<uint8_t>& user_mask,
                         int64_t cn, int64_t bs, int64_t keep_blocks, int64_t k) {
    const float softmax_scale = 1.0f / std::sqrt(float(ID)), heads_scale = 1.0f / std::sqrt(float(IH));
    std::vector<float> scores(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
        if (j >= visible) {
            scores[size_t(j)] = -INFINITY;
            continue;
        }
        float acc = 0.0f;
        for (int64_t h = 0; h < IH; ++h) {
            const float d = cpu::dot(q + h * ID, keys.data() + j * ID, ID);
            if (official) {
                const float wgt = cpu::round_bf16(hw[h] * softmax_scale * heads_scale);
                acc = cpu::round_bf16(acc + cpu::round_bf16(std::max(cpu::round_bf16(d), 0.0f) * wgt));
            } else {
                acc += (std::max(d, 0.0f) * softmax_scale) * (hw[h] * heads_scale);
            }
        }
        scores[size_t(j)] = acc;
    }
    IndexRef out;
    if (mode == 1) {  // candidate source
        out.mask.assign(size_t(n), 0);
        const int64_t num_blocks = (n + bs - 1) / bs;
        std::vector<float> block(size_t(num_blocks), -INFINITY);
        for (int64_t j = 0; j < n; ++j) block[size_t(j / bs)] = std::max(block[size_t(j / bs)], scores[size_t(j)]);
        if (visible > 0) block[size_t((visible - 1) / bs)] = INFINITY;
        std::vector<int64_t> border(static_cast<size_t>(num_blocks));
        std::iota(border.begin(), border.end(), 0);
        std::stable_sort(border.begin(), border.end(), [&](int64_t a, int64_t b) { return block[size_t(a)] > block[size_t(b)]; });
        for (int64_t kk = 0; kk < std::min(keep_blocks, num_blocks); ++kk) {
            const int64_t b = border[size_t(kk)];
            if (!(block[size_t(b)] > -INFINITY)) continue;
            for (int64_t j = b * bs; j < std::min(n, (b + 1) * bs); ++j) out.mask[size_t(j)] = 1;
        }
    } else if (mode == 2) {  // candidate user
        for (int64_t j = 0; j < n; ++j)
            if (j >= cn || !user_mask[size_t(j)]) scores[size_t(j)] = -INFINITY;
    }
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    const int64_t kk = std::min(k, n);
    std::partial_sort(order.begin(), order.begin() + kk, order.end(), [&](int64_t a, int64_t b) {
        return scores[size_t(a)] > scores[size_t(b)] || (scores[size_t(a)] == scores[size_t(b)] && a < b);
    });
    for (int64_t i = 0; i < kk; ++i)
        if (scores[size_t(order[size_t(i)])] > -INFINITY) out.topk.push_back(int32_t(order[size_t(i)]));
    std::sort(out.topk.begin(), out.topk.end());
    out.topk.resize(size_t(k), -1);
    return out;
}

TEST_F(CudaV41Ops, IndexerCandidateBlocksAndTopkEqualCpu) {
    for (bool official : {false, true}) {
        // Real shape: 32 heads x 128, 2000 entries, top-512; candidate blocks of 8, keep 64 (of 250).
        const int64_t IH = 32, ID = 128, n = 2000, K = 512, bs = 8, keep = 64, rows = 4, bytes = ID / 2 + ID / 32;
        std::vector<float> keys = randn(size_t(n * ID), 21);
        std::vector<uint8_t> codes(size_t(n * bytes));
        for (int64_t j = 0; j < n; ++j) {
            v41::encode_fp4(keys.data() + j * ID, ID, 32, false, codes.data() + j * bytes, codes.data() + j * bytes + ID / 2);
            v41::fake_quant_fp4(keys.data() + j * ID, ID, 32, false);
        }
        for (int64_t j = 100; j < 140; ++j)  // duplicate keys: tied scores
            std::copy_n(codes.data() + 50 * bytes, bytes, codes.data() + j * bytes),
                std::copy_n(keys.data() + 50 * ID, ID, keys.data() + j * ID);
        std::vector<float> q = randn(size_t(rows * IH * ID), 22);
        for (int64_t r = 0; r < rows * IH; ++r) v41::fake_quant_fp4(q.data() + r * ID, ID, 32, false);
        const std::vector<float> hw = bf16_values(randn(size_t(rows * IH), 23));
        const int64_t visible[rows] = {2000, 1500, 7, 0};
        Dev<uint8_t> dcodes(codes);
        Dev<float> dq(q), dhw(hw);
        Dev<uint8_t> mask(size_t(rows * n));
        Dev<int32_t> out(size_t(rows * K));
        // Pass 1: candidate source; pass 2: a user of that mask (row 1 without a mask).
        std::vector<std::vector<uint8_t>> ref_mask(rows);
        for (int pass = 1; pass <= 2; ++pass) {
            std::vector<cuda::IndexRow> ir;
            std::vector<int32_t> lengths;
            for (int64_t r = 0; r < rows; ++r) {
                const bool masked = pass == 2 && r != 1;
                ir.push_back({int32_t(r), int32_t(n), int32_t(visible[r]), masked ? int32_t(n - 3) : -1, dcodes.ptr()});
                lengths.push_back(int32_t(n));
            }
            Dev<cuda::IndexRow> dir(ir);
            Dev<int32_t> dlen(lengths);
            Dev<float> scores(size_t(rows * n)), block_scores(size_t(rows * n / bs + rows));
            Dev<int32_t> block_picked(size_t(rows * keep)), picked(size_t(rows * K));
            cuda::index_scores({.rows = dir.ptr(), .num_rows = rows, .max_entries = n, .q = dq.ptr(), .weights = dhw.ptr(),
                                .heads = IH, .head_dim = ID, .key_format = CacheFormat::kFp4Ue8m0, .key_block = 32,
                                .official = official, .scores = scores.ptr()},
                               Stream{});
            cuda::candidate_blocks({.rows = dir.ptr(), .num_rows = rows, .scores = scores.ptr(), .ld = n, .mask = mask.ptr(),
                                    .mask_ld = n, .block_size = bs, .keep_blocks = keep, .build = pass == 1,
                                    .block_scores = block_scores.ptr(), .block_picked = block_picked.ptr()},
                                   Stream{});
            cuda::topk({.scores = scores.ptr(), .ld = n, .lengths = dlen.ptr(), .n = n, .rows = rows, .k = K, .out = picked.ptr()},
                       Stream{});
            cuda::topk_publish({.rows = dir.ptr(), .num_rows = rows, .picked = picked.ptr(), .scores = scores.ptr(), .ld = n,
                                .k = K, .out = out.ptr()},
                               Stream{});
            const std::vector<int32_t> got = out.host(size_t(rows * K));
            const std::vector<uint8_t> got_mask = mask.host(size_t(rows * n));
            for (int64_t r = 0; r < rows; ++r) {
                const int mode = pass == 1 ? 1 : (r != 1 ? 2 : 0);
                const IndexRef ref = index_reference(q.data() + r * IH * ID, hw.data() + r * IH, keys, n, visible[r], IH, ID,
                                                     official, mode, ref_mask[size_t(r)], n - 3, bs, keep, K);
                const std::string what = std::string(official ? "official" : "exact") + " pass " + std::to_string(pass) +
                                         " row " + std::to_string(r);
                expect_equal(ref.topk, std::vector<int32_t>(got.begin() + r * K, got.begin() + (r + 1) * K), what + " top-k");
                if (pass == 1) {
                    expect_equal(ref.mask, std::vector<uint8_t>(got_mask.begin() + r * n, got_mask.begin() + (r + 1) * n),
                                 what + " mask");
                    ref_mask[size_t(r)] = ref.mask;
                }
            }
        }
        if (!official) continue;
        // Tensor cores (fast mode): the reference kernel's scores (bit-identical to the CPU above) against
        // the MMA ones: -inf where it is -inf, nearly all finite scores equal, the rest within a few bf16
        // steps; the first row alone equals the first row among four.
        std::vector<cuda::IndexRow> ir;
        for (int64_t r = 0; r < rows; ++r) ir.push_back({int32_t(r), int32_t(n), int32_t(visible[r]), -1, dcodes.ptr()});
        Dev<cuda::IndexRow> dir(ir);
        Dev<float> ref_scores(size_t(rows * n));
        cuda::index_scores({.rows = dir.ptr(), .num_rows = rows, .max_entries = n, .q = dq.ptr(), .weights = dhw.ptr(),
                            .heads = IH, .head_dim = ID, .key_format = CacheFormat::kFp4Ue8m0, .key_block = 32,
                            .official = true, .scores = ref_scores.ptr()},
                           Stream{});
        const std::vector<float> want = ref_scores.host(size_t(rows * n));
        std::vector<float> first;
        for (int64_t nr : {rows, int64_t(1)}) {
            Dev<float> tc(size_t(rows * n));
            cuda::index_scores({.rows = dir.ptr(), .num_rows = nr, .max_entries = n, .q = dq.ptr(), .weights = dhw.ptr(),
                                .heads = IH, .head_dim = ID, .key_format = CacheFormat::kFp4Ue8m0, .key_block = 32,
                                .official = true, .tensor_cores = true, .scores = tc.ptr()},
                               Stream{});
            const std::vector<float> got = tc.host(size_t(nr * n));
            int64_t finite = 0, equal = 0;
            for (int64_t r = 0; r < nr; ++r) {
                float top = 0;
                for (int64_t j = 0; j < n; ++j)
                    if (std::isfinite(want[size_t(r * n + j)])) top = std::max(top, std::fabs(want[size_t(r * n + j)]));
                for (int64_t j = 0; j < n; ++j) {
                    const float w = want[size_t(r * n + j)], g = got[size_t(r * n + j)];
                    if (!std::isfinite(w)) {
                        ASSERT_EQ(w, g) << "row " << r << " key " << j;
                        continue;
                    }
                    ++finite;
                    equal += w == g;
                    ASSERT_LE(std::fabs(w - g), 0.03f * top) << "row " << r << " key " << j;
                }
            }
            EXPECT_GE(double(equal), 0.9 * double(finite)) << nr << " rows";
            if (first.empty()) first.assign(got.begin(), got.begin() + n);
            else expect_equal(first, got, "tensor-core index scores: row alone");
        }
    }
}

TEST_F(CudaV41Ops, SinkAttentionOverCompactCachesBitIdentical) {
    // Real shape: 64 heads x 512 (rope 64), window 128 (ring 144), top-512 entries; a chunk of 3 rows at 300.
    const int64_t H = 64, Dh = 512, R = 64, W = 128, ring = W + 16, P0 = 300, S = 3, E = 700, K = 512;
    const int64_t wbytes = Dh + Dh / 32, ebytes = Dh / 2 + Dh / 16;
    std::vector<float> window(size_t(ring * Dh)), entries(size_t(E * Dh));
    std::vector<uint8_t> wcodes(size_t(ring * wbytes)), ecodes(size_t(E * ebytes));
    {
        const std::vector<float> wv = randn(window.size(), 31), ev = randn(entries.size(), 32);
        for (int64_t i = 0; i < ring; ++i) {
            v41::encode_fp8(wv.data() + i * Dh, Dh, 32, wcodes.data() + i * wbytes, wcodes.data() + i * wbytes + Dh);
            v41::decode_fp8(wcodes.data() + i * wbytes, wcodes.data() + i * wbytes + Dh, Dh, 32, window.data() + i * Dh);
        }
        for (int64_t i = 0; i < E; ++i) {
            v41::encode_fp4(ev.data() + i * Dh, Dh, 16, true, ecodes.data() + i * ebytes, ecodes.data() + i * ebytes + Dh / 2);
            v41::decode_fp4(ecodes.data() + i * ebytes, ecodes.data() + i * ebytes + Dh / 2, Dh, 16, true, entries.data() + i * Dh);
        }
    }
    std::vector<float> kv = randn(size_t(S * Dh), 33);
    for (int64_t t = 0; t < S; ++t) v41::fake_quant_fp8(kv.data() + t * Dh, Dh, 32);
    const std::vector<float> q = bf16_values(randn(size_t(S * H * Dh), 34, 0.05f)), sink = randn(size_t(H), 35);
    std::vector<int32_t> selected(size_t(S * K), -1);
    std::mt19937 rng(36);
    for (int64_t t = 0; t < S; ++t) {  // 512, 300 and 0 picks, ascending
        const int64_t m = t == 0 ? K : t == 1 ? 300 : 0;
        std::vector<int32_t> all(static_cast<size_t>(E));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::sort(all.begin(), all.begin() + m);
        std::copy_n(all.begin(), m, selected.begin() + t * K);
    }
    const cpu::RopeTable rope(RopeParams{}, R);
    std::vector<float> cs(size_t((P0 + S) * R));
    for (int64_t p = 0; p < P0 + S; ++p)
        for (int64_t i = 0; i < R / 2; ++i) {
            const float angle = float(p) * rope.inv_freq()[size_t(i)];
            cs[size_t(p * R + 2 * i)] = std::cos(angle);
            cs[size_t(p * R + 2 * i + 1)] = std::sin(angle);
        }
    // floor: SinkSegment::window_begin (bounded replay's truncated window; 0: the full window), here
    // inside the ring's rows so both sources of window keys are cut.
    for (int64_t floor : {int64_t{0}, P0 - 5})
    for (bool official : {false, true}) {
        SCOPED_TRACE("window_begin " + std::to_string(floor));
        // The reference: model/v41/attention.cpp's loop.
        std::vector<float> ref(size_t(S * H * Dh), 0.0f);
        const float scale = 1.0f / std::sqrt(float(Dh));
        for (int64_t t = 0; t < S; ++t) {
            const int64_t P = P0 + t;
            std::vector<const float*> keys;
            for (int64_t s = std::max<int64_t>({0, P - W + 1, floor}); s <= P; ++s)
                keys.push_back(s >= P0 ? kv.data() + (s - P0) * Dh : window.data() + (s % ring) * Dh);
            for (int64_t k = 0; k < K; ++k)
                if (selected[size_t(t * K + k)] >= 0) keys.push_back(entries.data() + selected[size_t(t * K + k)] * Dh);
            std::vector<float> logits(keys.size());
            for (int64_t h = 0; h < H; ++h) {
                const float* qh = q.data() + (t * H + h) * Dh;
                float mx = sink[size_t(h)];
                for (size_t k = 0; k < keys.size(); ++k) mx = std::max(mx, logits[k] = cpu::dot(qh, keys[k], Dh) * scale);
                float den = cpu::exp_f32(sink[size_t(h)] - mx);
                for (size_t k = 0; k < keys.size(); ++k) den += (logits[k] = cpu::exp_f32(logits[k] - mx));
                float* oh = ref.data() + (t * H + h) * Dh;
                for (size_t k = 0; k < keys.size(); ++k) {
                    const float pr = official ? cpu::round_bf16(logits[k] / den) : logits[k] / den;
                    for (int64_t d = 0; d < Dh; ++d) oh[d] += pr * keys[k][d];
                }
                if (official) cpu::round_bf16_inplace(oh, Dh);
                rope.apply(oh, Dh, P, true);
                if (official) cpu::round_bf16_inplace(oh + Dh - R, R);
            }
        }
        Dev<uint8_t> dw(wcodes), de(ecodes);
        const std::vector<cuda::SinkSegment> segs = {{0, S, P0, dw.ptr(), de.ptr(), floor}};
        Dev<cuda::SinkSegment> dsegs(segs);
        Dev<int32_t> rowseg(std::vector<int32_t>(size_t(S), 0)), pos(std::vector<int32_t>{int32_t(P0), int32_t(P0 + 1), int32_t(P0 + 2)}),
            dsel(selected);
        Dev<float> dq(q), dkv(kv), dsink(sink), dcs(cs), scratch(size_t(S * H * (W + K))), out(ref.size());
        cuda::sink_attention({.segments = dsegs.ptr(), .row_segment = rowseg.ptr(), .positions = pos.ptr(), .rows = S, .heads = H,
                              .head_dim = Dh, .q = dq.ptr(), .kv = dkv.ptr(), .sink = dsink.ptr(), .window = W,
                              .window_rows = ring, .selected = dsel.ptr(), .topk = K, .max_candidates = W + K,
                              .scratch = scratch.ptr(), .cos_sin = dcs.ptr(), .rope_dim = R,
                              .softmax_scale = 1.0f / std::sqrt(float(Dh)), .official = official, .out = out.ptr()},
                             Stream{});
        expect_equal(ref, out.host(ref.size()), official ? "attention official" : "attention exact");
        if (!official) continue;
        // Tensor cores (fast mode): within bf16 rounding of the reference; the first row alone equals
        // the first row of the batch bit for bit; 16 heads per CTA (the few-rows kernel) equals 64 bit for bit, and
        // so do pairs of CTAs per 16 heads ("8", Hopper) and the split form (v = 3).
        std::vector<float> first;
        const bool pairs = cuda::compute_capability() >= 90;
        for (int64_t n : {S, int64_t(1)}) {
            std::vector<float> by_heads[4];
            for (int v = 0; v < 4; ++v) {
                if (v == 2 && !pairs) continue;
                Dev<float> tc(ref.size());
                cuda::sink_attention({.segments = dsegs.ptr(), .row_segment = rowseg.ptr(), .positions = pos.ptr(), .rows = n,
                                      .heads = H, .head_dim = Dh, .q = dq.ptr(), .kv = dkv.ptr(), .sink = dsink.ptr(), .window = W,
                                      .window_rows = ring, .selected = dsel.ptr(), .topk = K, .max_candidates = W + K,
                                      .scratch = scratch.ptr(), .cos_sin = dcs.ptr(), .rope_dim = R,
                                      .softmax_scale = 1.0f / std::sqrt(float(Dh)), .official = true, .tensor_cores = true,
                                      .tc_heads_per_cta = v == 0 ? 64 : v == 1 ? 16 : v == 2 ? 8 : 0,
                                      .tc_split_rows = v == 3 ? n : 0, .out = tc.ptr()},
                                     Stream{});
                by_heads[v] = tc.host(size_t(n * H * Dh));
            }
            expect_equal(by_heads[0], by_heads[1], "tensor-core sink attention: 16 heads per CTA = 64");
            {
                // The fast mode's prefill form (bf16 I/O): q read as bf16, the output's bf16 bits written in wo_a's
                // groups of 8 heads ([H / 8][n, 8 Dh]), no f32 output: the 64-head kernel's values bit for bit.
                std::vector<uint16_t> q16(q.size());
                for (size_t i = 0; i < q.size(); ++i) {
                    uint32_t u;
                    std::memcpy(&u, &q[i], 4);
                    q16[i] = static_cast<uint16_t>(u >> 16);
                }
                const int64_t gh = 8;
                Dev<uint16_t> dq16(q16), out16(size_t(n * H * Dh));
                cuda::SinkAttentionParams bp{.segments = dsegs.ptr(), .row_segment = rowseg.ptr(), .positions = pos.ptr(), .rows = n,
                                             .heads = H, .head_dim = Dh, .kv = dkv.ptr(), .sink = dsink.ptr(), .window = W,
                                             .window_rows = ring, .selected = dsel.ptr(), .topk = K, .max_candidates = W + K,
                                             .scratch = scratch.ptr(), .cos_sin = dcs.ptr(), .rope_dim = R,
                                             .softmax_scale = 1.0f / std::sqrt(float(Dh)), .official = true, .tensor_cores = true,
                                             .tc_heads_per_cta = 64};
                bp.q_bf16 = dq16.ptr();
                bp.out_bf16 = out16.ptr();
                bp.bf16_group_heads = gh;
                bp.bf16_group_stride = n * gh * Dh;
                ASSERT_TRUE(cuda::sink_attention_bf16_io(bp));
                cuda::sink_attention(bp, Stream{});
                const std::vector<uint16_t> got16 = out16.host(size_t(n * H * Dh));
                size_t wrong = 0, not_bf16 = 0;
                for (int64_t t = 0; t < n; ++t)
                    for (int64_t h = 0; h < H; ++h)
                        for (int64_t d = 0; d < Dh; ++d) {
                            uint32_t u;
                            std::memcpy(&u, &by_heads[0][size_t((t * H + h) * Dh + d)], 4);
                            not_bf16 += (u & 0xFFFFu) != 0;
                            wrong += got16[size_t((h / gh) * n * gh * Dh + (t * gh + h % gh) * Dh + d)] != static_cast<uint16_t>(u >> 16);
                        }
                EXPECT_EQ(not_bf16, 0u) << "the f32 outputs hold bf16 values";
                EXPECT_EQ(wrong, 0u) << n << " rows: bf16 I/O = the f32 launch's bits";
                bp.tc_heads_per_cta = 16;  // the few-rows kernel takes neither
                EXPECT_FALSE(cuda::sink_attention_bf16_io(bp));
            }
            if (pairs) expect_equal(by_heads[0], by_heads[2], "tensor-core sink attention: CTA pairs per 16 heads = 64");
            expect_equal(by_heads[0], by_heads[3], "tensor-core sink attention: the split form = 64");
            {
                // Keys pre-decoded to bf16 rows (ops.h SinkBf16Keys): the chunk's rows (to_bf16), the ring's rows below
                // P0 that the window reads and every entry (key_rows_bf16), checked against the CPU's decoded values
                // rounded to bf16; then every kernel reading them (the 64-head one synchronous and pipelined, 16 heads,
                // pairs, the split form) gives the bits of the 64-head kernel decoding in place.
                const int64_t lo = std::max<int64_t>({0, P0 - W + 1, floor}), ring_n = P0 - lo, key_rows = S + ring_n + E;
                std::vector<uint16_t> want(size_t(key_rows * Dh));
                auto put = [&](int64_t kr, const float* v) {
                    for (int64_t d = 0; d < Dh; ++d) {
                        const float x = cpu::round_bf16(v[d]);
                        uint32_t u;
                        std::memcpy(&u, &x, 4);
                        want[size_t(kr * Dh + d)] = static_cast<uint16_t>(u >> 16);
                    }
                };
                for (int64_t t = 0; t < S; ++t) put(t, kv.data() + t * Dh);
                for (int64_t j = 0; j < ring_n; ++j) put(S + j, window.data() + ((lo + j) % ring) * Dh);
                for (int64_t e = 0; e < E; ++e) put(S + ring_n + e, entries.data() + e * Dh);
                Dev<uint16_t> keys16(want.size());
                cuda::to_bf16({.x = dkv.ptr(), .x_ld = Dh, .rows = S, .cols = Dh, .out = keys16.ptr()}, Stream{});
                const std::vector<cuda::SinkBf16Keys> bk = {{.ring_row = S, .ring_lo = lo, .ring_n = ring_n, .entry_row = S + ring_n, .entries = E}};
                Dev<cuda::SinkBf16Keys> dbk(bk);
                cuda::key_rows_bf16({.segments = dsegs.ptr(), .keys = dbk.ptr(), .num_segments = 1, .max_rows = ring_n + E, .head_dim = Dh,
                                     .window_rows = ring, .out = keys16.ptr()},
                                    Stream{});
                expect_equal(want, keys16.host(want.size()), "key_rows_bf16 = the CPU's decoded keys in bf16");
                const cuda::SinkAttentionParams base{.segments = dsegs.ptr(), .row_segment = rowseg.ptr(), .positions = pos.ptr(),
                                                     .rows = n, .heads = H, .head_dim = Dh, .q = dq.ptr(), .kv = dkv.ptr(),
                                                     .sink = dsink.ptr(), .window = W, .window_rows = ring, .selected = dsel.ptr(),
                                                     .topk = K, .max_candidates = W + K, .scratch = scratch.ptr(),
                                                     .cos_sin = dcs.ptr(), .rope_dim = R, .softmax_scale = 1.0f / std::sqrt(float(Dh)),
                                                     .official = true, .tensor_cores = true};
                for (int v = 0; v < 5; ++v) {
                    if (v == 3 && !pairs) continue;
                    Dev<float> tc(ref.size());
                    cuda::SinkAttentionParams a = base;
                    a.tc_heads_per_cta = v <= 1 ? 64 : v == 2 ? 16 : v == 3 ? 8 : 0;
                    a.tc_split_rows = v == 4 ? n : 0;
                    a.out = tc.ptr();
                    a.keys_bf16 = keys16.ptr();
                    a.bf16_keys = dbk.ptr();
                    a.keys_bf16_all = v == 0;  // (v = 1: the decoding form launched too, its CTAs leaving)
                    cuda::sink_attention(a, Stream{});
                    const char* what[5] = {"64 heads", "64 heads, both forms launched", "16 heads", "CTA pairs", "split form"};
                    expect_equal(by_heads[0], tc.host(size_t(n * H * Dh)), std::string("pre-decoded keys: ") + what[v]);
                }
                if (n == S) {
                    // A launch mixing a segment with pre-decoded keys (rows 0-1) and one without (row 2, its own segment
                    // from P0 + 2): both forms run, each on its rows; the bits of the same launch without them.
                    const std::vector<cuda::SinkSegment> two = {{0, 2, P0, dw.ptr(), de.ptr(), floor}, {2, 1, P0 + 2, dw.ptr(), de.ptr(), floor}};
                    Dev<cuda::SinkSegment> dtwo(two);
                    Dev<int32_t> rowseg2(std::vector<int32_t>{0, 0, 1});
                    const std::vector<cuda::SinkBf16Keys> bk2 = {bk[0], cuda::SinkBf16Keys{}};
                    Dev<cuda::SinkBf16Keys> dbk2(bk2);
                    Dev<float> plain(ref.size()), mixed(ref.size());
                    cuda::SinkAttentionParams a = base;
                    a.segments = dtwo.ptr();
                    a.row_segment = rowseg2.ptr();
                    a.tc_heads_per_cta = 64;
                    a.out = plain.ptr();
                    cuda::sink_attention(a, Stream{});
                    a.out = mixed.ptr();
                    a.keys_bf16 = keys16.ptr();
                    a.bf16_keys = dbk2.ptr();
                    cuda::sink_attention(a, Stream{});
                    const std::vector<float> want2 = plain.host(ref.size());
                    expect_equal(want2, mixed.host(ref.size()), "pre-decoded keys: a launch of both forms");
                    expect_equal(std::vector<float>(by_heads[0].begin(), by_heads[0].begin() + 2 * H * Dh),
                                 std::vector<float>(want2.begin(), want2.begin() + 2 * H * Dh), "rows 0-1: their segment's bits");
                }
            }
            const std::vector<float>& got = by_heads[0];
            double max_ref = 0, max_err = 0, sum_ref = 0, sum_err = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                const double e = std::fabs(double(got[i]) - double(ref[i]));
                max_ref = std::max(max_ref, std::fabs(double(ref[i])));
                max_err = std::max(max_err, e);
                sum_ref += std::fabs(double(ref[i]));
                sum_err += e;
            }
            EXPECT_LE(max_err, 2e-2 * max_ref) << n << " rows";
            EXPECT_LE(sum_err, 4e-3 * sum_ref) << n << " rows";
            EXPECT_GT(max_err, 0.0) << "the tensor-core path ran";
            if (first.empty()) first.assign(got.begin(), got.begin() + H * Dh);
            else expect_equal(first, got, "tensor-core sink attention: row alone");
        }
    }
}

// Compact cache rows in pool pages, as the models' paged state keeps them (ops.h PagedCacheRows): per
// segment its own copy of the rows, pages in reverse order, the rows' block at `offset` bytes into each
// page, every other byte 0xFF (a NaN scale in every format: a misplaced read shows).
struct PagedCodes {
    int64_t per_page, offset, page_bytes, pages, segments;
    Dev<uint8_t> memory;
    Dev<const uint8_t*> tables;
    PagedCodes(const std::vector<uint8_t>& rows, int64_t row_bytes, int64_t per_page_, int64_t offset_, int64_t segments_)
        : per_page(per_page_),
          offset(offset_),
          page_bytes((offset_ + per_page_ * row_bytes + 255) / 256 * 256),
          pages((int64_t(rows.size()) / row_bytes + per_page_ - 1) / per_page_),
          segments(segments_),
          memory(scatter(rows, row_bytes)),
          tables(addresses()) {}
    cuda::PagedCacheRows paged() const {
        return {.tables = tables.ptr(), .table_len = pages, .per_page = per_page, .offset = offset};
    }

private:
    int64_t slot(int64_t segment, int64_t page) const { return segments * pages - 1 - (segment * pages + page); }
    std::vector<uint8_t> scatter(const std::vector<uint8_t>& rows, int64_t row_bytes) const {
        std::vector<uint8_t> m(size_t(segments * pages * page_bytes), 0xFF);
        const int64_t n = int64_t(rows.size()) / row_bytes;
        for (int64_t sg = 0; sg < segments; ++sg)
            for (int64_t i = 0; i < n; ++i)
                std::copy_n(rows.begin() + i * row_bytes, row_bytes,
                            m.begin() + slot(sg, i / per_page) * page_bytes + offset + (i % per_page) * row_bytes);
        return m;
    }
    std::vector<const uint8_t*> addresses() const {
        std::vector<const uint8_t*> t(size_t(segments * pages));
        for (int64_t sg = 0; sg < segments; ++sg)
            for (int64_t k = 0; k < pages; ++k) t[size_t(sg * pages + k)] = memory.ptr() + slot(sg, k) * page_bytes;
        return t;
    }
};

// The indexer (reference and tensor-core kernels) and the sink attention (both kernels) read the index
// keys and the compressed entries from pool pages, two segments with page tables of their own, and give
// the contiguous caches' results bit for bit.
TEST_F(CudaV41Ops, PagedCachesEqualContiguous) {
    const int64_t H = 64, Dh = 512, R = 64, W = 128, ring = W + 16, P0 = 1500, S = 3, E = 700, K = 512;
    const int64_t IH = 32, ID = 128, wbytes = Dh + Dh / 32, ebytes = Dh / 2 + Dh / 16, kbytes = ID / 2 + ID / 32;
    std::vector<uint8_t> wcodes(size_t(ring * wbytes)), ecodes(size_t(E * ebytes)), kcodes(size_t(E * kbytes));
    {
        const std::vector<float> wv = randn(size_t(ring * Dh), 41), ev = randn(size_t(E * Dh), 42), kv = randn(size_t(E * ID), 43);
        for (int64_t i = 0; i < ring; ++i)
            v41::encode_fp8(wv.data() + i * Dh, Dh, 32, wcodes.data() + i * wbytes, wcodes.data() + i * wbytes + Dh);
        for (int64_t i = 0; i < E; ++i) {
            v41::encode_fp4(ev.data() + i * Dh, Dh, 16, true, ecodes.data() + i * ebytes, ecodes.data() + i * ebytes + Dh / 2);
            v41::encode_fp4(kv.data() + i * ID, ID, 32, false, kcodes.data() + i * kbytes, kcodes.data() + i * kbytes + ID / 2);
        }
    }
    Dev<uint8_t> dw(wcodes), de(ecodes), dk(kcodes);
    const PagedCodes pe(ecodes, ebytes, 64, 768, 2), pk(kcodes, kbytes, 64, 256, 2);
    // Indexer: 3 rows (the last in segment 1), visible 700 / 433 / 9.
    std::vector<float> q = randn(size_t(S * IH * ID), 44);
    for (int64_t r = 0; r < S * IH; ++r) v41::fake_quant_fp4(q.data() + r * ID, ID, 32, false);
    const std::vector<float> hw = bf16_values(randn(size_t(S * IH), 45));
    Dev<float> dq(q), dhw(hw);
    const int32_t visible[S] = {700, 433, 9};
    for (bool tc : {false, true}) {
        std::vector<float> got[2];
        for (int paged = 0; paged < 2; ++paged) {
            std::vector<cuda::IndexRow> ir;
            for (int64_t r = 0; r < S; ++r)
                ir.push_back({int32_t(r), int32_t(E), visible[r], -1, paged ? pk.memory.ptr() : dk.ptr(), r == 2 ? 1 : 0});
            Dev<cuda::IndexRow> dir(ir);
            Dev<float> scores(size_t(S * E));
            cuda::index_scores({.rows = dir.ptr(), .num_rows = S, .max_entries = E, .q = dq.ptr(), .weights = dhw.ptr(),
                                .heads = IH, .head_dim = ID, .key_format = CacheFormat::kFp4Ue8m0, .key_block = 32,
                                .official = true, .tensor_cores = tc,
                                .paged_keys = paged ? pk.paged() : cuda::PagedCacheRows{}, .scores = scores.ptr()},
                               Stream{});
            got[paged] = scores.host(size_t(S * E));
        }
        expect_equal(got[0], got[1], tc ? "paged index keys, tensor cores" : "paged index keys");
    }
    // Sink attention: segment 0 = rows 0-1 at 1500, segment 1 = row 2 at 1502; 512 / 300 / 0 picks.
    std::vector<float> kv = randn(size_t(S * Dh), 46);
    for (int64_t t = 0; t < S; ++t) v41::fake_quant_fp8(kv.data() + t * Dh, Dh, 32);
    const std::vector<float> qa = bf16_values(randn(size_t(S * H * Dh), 47, 0.05f)), sink = randn(size_t(H), 48);
    std::vector<int32_t> selected(size_t(S * K), -1);
    std::mt19937 rng(49);
    for (int64_t t = 0; t < S; ++t) {
        const int64_t m = t == 0 ? K : t == 1 ? 300 : 0;
        std::vector<int32_t> all(static_cast<size_t>(E));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::sort(all.begin(), all.begin() + m);
        std::copy_n(all.begin(), m, selected.begin() + t * K);
    }
    const cpu::RopeTable rope(RopeParams{}, R);
    std::vector<float> cs(size_t((P0 + S) * R));
    for (int64_t p = 0; p < P0 + S; ++p)
        for (int64_t i = 0; i < R / 2; ++i) {
            const float angle = float(p) * rope.inv_freq()[size_t(i)];
            cs[size_t(p * R + 2 * i)] = std::cos(angle);
            cs[size_t(p * R + 2 * i + 1)] = std::sin(angle);
        }
    Dev<int32_t> rowseg(std::vector<int32_t>{0, 0, 1}), pos(std::vector<int32_t>{int32_t(P0), int32_t(P0 + 1), int32_t(P0 + 2)}),
        dsel(selected);
    Dev<float> dqa(qa), dkv(kv), dsink(sink), dcs(cs), scratch(size_t(S * H * (W + K)));
    // (tensor cores: the 64-head kernel and, as `heads16`, the 16-heads-per-CTA one, which must equal it)
    std::vector<float> tc64;
    const bool pairs = cuda::compute_capability() >= 90;
    for (int variant : {0, 1, 2, 3, 4}) {
        if (variant == 3 && !pairs) continue;
        const bool tc = variant > 0;
        std::vector<float> got[2];
        for (int paged = 0; paged < 2; ++paged) {
            const uint8_t* entries = paged ? pe.memory.ptr() : de.ptr();
            const std::vector<cuda::SinkSegment> segs = {{0, 2, P0, dw.ptr(), entries, 0}, {2, 1, P0 + 2, dw.ptr(), entries, 0}};
            Dev<cuda::SinkSegment> dsegs(segs);
            Dev<float> out(size_t(S * H * Dh));
            cuda::sink_attention({.segments = dsegs.ptr(), .row_segment = rowseg.ptr(), .positions = pos.ptr(), .rows = S,
                                  .heads = H, .head_dim = Dh, .q = dqa.ptr(), .kv = dkv.ptr(), .sink = dsink.ptr(), .window = W,
                                  .window_rows = ring, .selected = dsel.ptr(), .topk = K, .max_candidates = W + K,
                                  .scratch = scratch.ptr(), .cos_sin = dcs.ptr(), .rope_dim = R,
                                  .softmax_scale = 1.0f / std::sqrt(float(Dh)), .official = true, .tensor_cores = tc,
                                  .tc_heads_per_cta = variant == 2 ? 16 : variant == 3 ? 8 : variant == 4 ? 0 : 64,
                                  .tc_split_rows = variant == 4 ? S : 0, .paged_entries = paged ? pe.paged() : cuda::PagedCacheRows{}, .out = out.ptr()},
                                 Stream{});
            got[paged] = out.host(size_t(S * H * Dh));
        }
        for (float v : got[0]) ASSERT_TRUE(std::isfinite(v));
        expect_equal(got[0], got[1], !tc ? "paged entries" : variant == 1 ? "paged entries, tensor cores" : variant == 4 ? "paged entries, split" : "paged entries, heads16");
        if (variant == 1) tc64 = got[0];
        if (variant == 2) expect_equal(tc64, got[0], "tensor cores, 16 heads per CTA = 64");
        if (variant == 3) expect_equal(tc64, got[0], "tensor cores, CTA pairs per 16 heads = 64");
        if (variant == 4) expect_equal(tc64, got[0], "tensor cores, the split form = 64");
    }
}

TEST_F(CudaV41Ops, EngramGatherAndFusionEqualCpu) {
    // Real width: hidden 5120, hc 4, 24 columns of 256 (n-grams 2..4 x 8 heads); tiny: hidden 64, hc 2.
    for (auto [D, hc, cols, ehd] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{5120, 4, 24, 256}, {64, 2, 6, 32}}) {
        const int64_t T = 5, table_rows = 3000;
        std::mt19937 rng(41);
        std::vector<uint8_t> table(size_t(table_rows * ehd)), tscale(size_t(table_rows * ehd / 32));
        for (uint8_t& b : table) {
            b = uint8_t(rng());
            if ((b & 0x7F) == 0x7F) b = 0x3E;
        }
        for (uint8_t& b : tscale) b = uint8_t(117 + rng() % 4);
        v41::EngramWeights w;
        w.table = cpu::make_linear_weight(TensorView(table.data(), DType::kF8E4M3, {table_rows, ehd}),
                                          TensorView(tscale.data(), DType::kF8E8M0, {table_rows, ehd / 32}), table_rows, ehd, 1, 32);
        Weight wkv(true, (hc + 1) * D, cols * ehd, 42);
        w.wkv = wkv.host;
        w.gate_weight = randn(size_t(hc * D), 43, 0.5f);
        std::vector<int64_t> rows(size_t(T * cols));
        for (int64_t& r : rows) r = int64_t(rng() % uint32_t(table_rows));
        cuda::PinnedBuffer ptable(table.size()), pscale(tscale.size());
        std::memcpy(ptable.host(), table.data(), table.size());
        std::memcpy(pscale.host(), tscale.data(), tscale.size());
        const cuda::DeviceLinear dtable = cuda::device_linear_like(w.table, ptable.device_pointer(), pscale.device_pointer());
        for (Numerics nm : {Numerics::kExact, Numerics::kOfficial}) {
            const bool off = nm == Numerics::kOfficial;
            const std::vector<float> streams = bf16_values(randn(size_t(T * hc * D), 44));
            std::vector<float> ref = streams;
            const uint8_t gate_off[T] = {0, 0, 1, 0, 0};
            V41TextConfig c;
            c.hidden_size = D;
            c.hc_mult = hc;
            c.engram_max_ngram_size = 1 + cols / (cols == 24 ? 8 : 3);
            c.engram_n_heads = cols == 24 ? 8 : 3;
            c.engram_head_dim = ehd;
            v41::engram_forward(c, {.weights = &w, .rows = rows.data(), .gate_off = gate_off, .num_tokens = T,
                                    .streams = ref.data(), .numerics = nm});
            Dev<int64_t> drows(rows);
            Dev<uint8_t> doff(std::vector<uint8_t>(gate_off, gate_off + T));
            Dev<float> emb(size_t(T * cols * ehd)), q(size_t(T * cols * ehd)), kv(size_t(T * (hc + 1) * D)), dstreams(streams),
                dgate(w.gate_weight);
            cuda::engram_gather({.table = dtable, .rows = drows.ptr(), .tokens = T, .cols = cols, .out = emb.ptr()}, Stream{});
            const float* x = emb.ptr();
            if (off) {
                cuda::act_quant_dequant({.x = emb.ptr(), .out = q.ptr(), .rows = T, .cols = cols * ehd, .block = 32}, Stream{});
                x = q.ptr();
            }
            cuda::linear({.x = x, .x_ld = cols * ehd, .weight = wkv.dev, .y = kv.ptr(), .y_ld = (hc + 1) * D, .rows = T,
                          .round_output_bf16 = off},
                         Stream{});
            cuda::engram_fuse({.kv = kv.ptr(), .gate_weight = dgate.ptr(), .gate_off = doff.ptr(),
                               .streams = dstreams.ptr(), .tokens = T, .hc = hc, .hidden = D, .eps = float(c.rms_norm_eps),
                               .round_bf16 = off},
                              Stream{});
            expect_equal(ref, dstreams.host(ref.size()), "engram D " + std::to_string(D) + (off ? " official" : " exact"));
            // Fast mode's gate sums (tree_sum): within a bf16 step of the CPU's sequential sums' result, and each token's
            // bits alone equal to its bits in the batch.
            Dev<float> tstreams(streams);
            cuda::engram_fuse({.kv = kv.ptr(), .gate_weight = dgate.ptr(), .gate_off = doff.ptr(), .streams = tstreams.ptr(),
                               .tokens = T, .hc = hc, .hidden = D, .eps = float(c.rms_norm_eps), .round_bf16 = off,
                               .tree_sum = true},
                              Stream{});
            const std::vector<float> tree = tstreams.host(ref.size());
            size_t same = 0, far = 0;
            for (size_t i = 0; i < ref.size(); ++i) {
                same += std::memcmp(&tree[i], &ref[i], 4) == 0;
                far += !(std::fabs(tree[i] - ref[i]) <= 1e-2f * std::fabs(ref[i]) + 1e-6f);
            }
            // A gate that moves by one f32 step changes every value of its (token, stream) row: in exact mode (f32
            // streams) most values differ in their last bits (the H200: 21% equal at D 5120, 78% at D 64), so closeness
            // is checked; official mode rounds the streams to bf16, where nearly all keep their bits (there: 99.99%, 100%).
            EXPECT_EQ(far, 0u) << "engram tree sums, D " << D;
            if (off) {
                EXPECT_GE(double(same), 0.9 * double(ref.size())) << "engram tree sums, official, D " << D;
            }
            std::printf("[engram-tree] D %lld %s: %zu of %zu values bit-equal to the sequential sums, none beyond 1%%\n",
                        static_cast<long long>(D), off ? "official" : "exact", same, ref.size());
            for (int64_t t = 0; t < T; ++t) {
                Dev<float> one(std::vector<float>(streams.begin() + t * hc * D, streams.begin() + (t + 1) * hc * D));
                cuda::engram_fuse({.kv = kv.ptr() + t * (hc + 1) * D, .gate_weight = dgate.ptr(), .gate_off = doff.ptr() + t,
                                   .streams = one.ptr(), .tokens = 1, .hc = hc, .hidden = D, .eps = float(c.rms_norm_eps),
                                   .round_bf16 = off, .tree_sum = true},
                                  Stream{});
                expect_equal(std::vector<float>(tree.begin() + t * hc * D, tree.begin() + (t + 1) * hc * D), one.host(size_t(hc * D)),
                             "engram tree sums, token " + std::to_string(t) + " alone");
            }
        }
    }
}

TEST_F(CudaV41Ops, RouterGateTempAndSelectionOrderSumEqualCpu) {
    // model/v41/ffn.cpp's routing: score(logit / gate_temp), bias-only selection, sum in selection order;
    // with image-span rows (vl): rows 2, 3 and 7 select with bias_vl.
    for (auto [E, K, temp, vl] : {std::tuple<int64_t, int64_t, float, bool>{384, 6, 1.0f, false}, {384, 6, 0.7f, false},
                                  {8, 2, 1.3f, false}, {384, 6, 1.0f, true}, {8, 2, 1.3f, true}}) {
        const int64_t T = 9;
        std::vector<float> logits = randn(size_t(T * E), 51, 2.0f), bias = randn(size_t(E), 52, 0.1f);
        const std::vector<float> bias_vl = randn(size_t(E), 53, 0.5f);
        const std::vector<uint8_t> vl_rows = {0, 0, 1, 1, 0, 0, 0, 1, 0};
        for (int64_t e = 0; e < 20; ++e) logits[size_t(e)] = 0.5f;  // ties
        std::vector<int32_t> ids_ref;
        std::vector<float> w_ref;
        for (int64_t t = 0; t < T; ++t) {
            const std::vector<float>& sel = vl && vl_rows[size_t(t)] ? bias_vl : bias;
            std::vector<float> scores(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
            for (int64_t e = 0; e < E; ++e) {
                scores[size_t(e)] = std::sqrt(cpu::softplus(logits[size_t(t * E + e)] / temp));
                biased[size_t(e)] = scores[size_t(e)] + sel[size_t(e)];
            }
            std::vector<int64_t> order(static_cast<size_t>(E));
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int64_t a, int64_t b) {
                return biased[size_t(a)] > biased[size_t(b)] || (biased[size_t(a)] == biased[size_t(b)] && a < b);
            });
            float sum = 0.0f;
            for (int64_t k = 0; k < K; ++k) sum += scores[size_t(order[size_t(k)])];
            std::vector<std::pair<int32_t, float>> picks;
            for (int64_t k = 0; k < K; ++k)
                picks.emplace_back(int32_t(order[size_t(k)]), scores[size_t(order[size_t(k)])] / (sum + 1e-20f) * 1.5f);
            std::sort(picks.begin(), picks.end());  // the GPU returns ids ascending
            for (auto [id, wk] : picks) ids_ref.push_back(id), w_ref.push_back(wk);
        }
        Dev<float> dl(logits), dbias(bias), dbias_vl(bias_vl), dbiased(size_t(T * E)), dw(size_t(T * K));
        Dev<int32_t> dids(size_t(T * K));
        Dev<uint8_t> dvl(vl_rows);
        cuda::route({.logits = dl.ptr(), .bias = dbias.ptr(), .bias_vl = vl ? dbias_vl.ptr() : nullptr,
                     .vl_rows = vl ? dvl.ptr() : nullptr, .rows = T, .experts = E, .top_k = K,
                     .scoring = cuda::ScoringFunc::kSqrtSoftplus, .norm_topk_prob = true, .routed_scaling_factor = 1.5f,
                     .official = false, .temperature = temp, .sum_in_selection_order = true, .biased = dbiased.ptr(),
                     .ids = dids.ptr(), .weights = dw.ptr()},
                    Stream{});
        const std::string what = "E " + std::to_string(E) + (vl ? " with bias_vl rows" : "");
        expect_equal(ids_ref, dids.host(ids_ref.size()), "router ids " + what);
        expect_equal(w_ref, dw.host(w_ref.size()), "router weights " + what);
    }
}

}  // namespace
}  // namespace deepinfer
