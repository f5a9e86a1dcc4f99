// SPDX-License-Identifier: Apache-2.0
// The fast (tensor-core) GEMM mode against the CPU reference, with per-dtype tolerances on the
// relative error norm ‖fast − ref‖ / ‖ref‖ (the products are exact in both; only the summation order
// and the tensor cores' internal accumulation differ): FP8 and FP4 (scales within 8 binades of the
// block's largest) 5e-4, BF16 1e-5; FP4 with scales spread over 18 binades 5e-3 (the documented
// rounding of the smallest subblocks). Batch invariance bit for bit: a row's result alone, in small
// batches and in large ones (every tile configuration) is the same; likewise a token's routed-expert
// rows in the grouped form. Split-K (Hopper): at the V4-Flash and V4.1 shapes, the split form (chunks on
// separate blocks + ordered sum), the unsplit form (all chunks in one block) and every row count from 1 to
// prefill sizes give a row the same bits. Skips without a GPU (or below compute capability 8.9 for FP8/FP4).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "backends/cuda/cuda_backend.h"
#include "ops/cuda_test_util.h"
#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/cuda_weights.h"
#include "deepinfer/dequant.h"
#include "deepinfer/float_formats.h"

namespace deepinfer {
namespace {

using cuda::DeviceBuffer;
using cuda::Stream;
using test::Dev;

class CudaGemmFast : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
        if (!cuda::fast_fp8_available()) GTEST_SKIP() << "FP8 tensor cores need compute capability 8.9+";
    }
};


std::vector<float> bf16_randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = cpu::round_bf16(nd(rng));
    return v;
}

// A random weight in a stored format: FP8 (ue8m0 128x128 block scales), FP4 (ue8m0 per-32 scales in
// [scale_lo, scale_lo + scale_span)), or BF16; on host and device.
struct Weight {
    std::vector<uint8_t> w, s;
    cpu::LinearWeight host;
    std::unique_ptr<DeviceBuffer> dw, ds;
    cuda::DeviceLinear dev;
    Weight(cpu::WeightFormat f, int64_t out, int64_t in, uint32_t seed, int scale_lo = 122, int scale_span = 4) {
        std::mt19937 rng(seed);
        DType wt = DType::kU8;
        Shape wshape{out, in}, sshape;
        if (f == cpu::WeightFormat::kBF16) {
            const auto v = bf16_randn(size_t(out * in), seed, 1.0f / std::sqrt(float(in)));
            w.resize(v.size() * 2);
            for (size_t i = 0; i < v.size(); ++i) {
                const uint16_t b = f32_to_bf16(v[i]);
                std::memcpy(w.data() + 2 * i, &b, 2);
            }
            wt = DType::kBF16;
        } else if (f == cpu::WeightFormat::kFp8Block) {
            w.resize(size_t(out * in));
            for (uint8_t& b : w) {
                b = uint8_t(rng());
                if ((b & 0x7F) == 0x7F) b = 0x3F;
            }
            sshape = Shape{(out + 127) / 128, (in + 127) / 128};
            s.resize(size_t(sshape.numel()));
            for (uint8_t& b : s) b = uint8_t(118 + rng() % 8);
            wt = DType::kF8E4M3;
        } else {
            w.resize(size_t(out * in / 2));
            for (uint8_t& b : w) b = uint8_t(rng());
            wshape = Shape{out, in / 2};
            sshape = Shape{out, in / 32};
            s.resize(size_t(sshape.numel()));
            for (uint8_t& b : s) b = uint8_t(scale_lo + int(rng() % uint32_t(scale_span)));
        }
        TensorView wv(w.data(), wt, wshape), sv = s.empty() ? TensorView() : TensorView(s.data(), DType::kF8E8M0, sshape);
        host = cpu::make_linear_weight(wv, sv, out, in);
        dw = std::make_unique<DeviceBuffer>(w.size());
        dw->copy_from_host(w.data(), w.size());
        if (!s.empty()) {
            ds = std::make_unique<DeviceBuffer>(s.size());
            ds->copy_from_host(s.data(), s.size());
        }
        dev = cuda::device_linear_like(host, dw->data(), ds ? ds->data() : nullptr);
    }
};

double rel_err(const std::vector<float>& ref, const std::vector<float>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = double(got[i]) - double(ref[i]);
        if (!std::isfinite(got[i])) return INFINITY;
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

// The fast path's activations for rows of x (f32 holding bf16 values): e4m3 + scales, or bf16.
struct FastInput {
    std::unique_ptr<Dev<uint8_t>> q;
    std::unique_ptr<Dev<float>> s;
    FastInput(const Dev<float>& x, int64_t rows, int64_t cols, bool bf16) {
        q = std::make_unique<Dev<uint8_t>>(size_t(rows * cols * (bf16 ? 2 : 1)));
        s = std::make_unique<Dev<float>>(size_t(rows * cols / 128 + 1));
        if (bf16)
            cuda::to_bf16({.x = x.ptr(), .x_ld = cols, .rows = rows, .cols = cols, .out = reinterpret_cast<uint16_t*>(q->ptr())},
                          Stream{});
        else
            cuda::act_quant_fp8({.x = x.ptr(), .x_ld = cols, .rows = rows, .cols = cols, .q = q->ptr(), .scale = s->ptr()},
                                Stream{});
    }
};

// y = x · Wᵀ on the fast path (split-K as the model runs it: scratch for the split form when
// fast_linear_split_floats asks for it under `split`), written at row stride y_ld (>= N; the columns
// past N are checked untouched) and returned as [rows, N].
std::vector<float> run_fast(const Weight& w, const std::vector<float>& x, int64_t rows, bool round = false,
                            cuda::Fp4Path path = cuda::Fp4Path::kAuto, int fp4_rs_variant = -1,
                            cuda::SplitK split = cuda::SplitK::kAuto, int64_t y_ld = 0,
                            cuda::DensePath dense = cuda::DensePath::kAuto) {
    const int64_t K = w.dev.in_features, N = w.dev.out_features;
    if (y_ld == 0) y_ld = N;
    const bool bf16 = w.dev.kind == cuda::WeightKind::kBF16;
    const float kUntouched = 1234.5f;
    Dev<float> dx(x), dy(std::vector<float>(size_t(rows * y_ld), kUntouched));
    FastInput in(dx, rows, K, bf16);
    const int64_t scratch = cuda::fast_linear_split_floats(w.dev, rows, split);
    Dev<float> dscratch(size_t(std::max<int64_t>(scratch, 1)));
    cuda::fast_linear({.a = in.q->ptr(), .a_scale = bf16 ? nullptr : in.s->ptr(), .weight = w.dev, .y = dy.ptr(), .y_ld = y_ld,
                       .rows = rows, .round_output_bf16 = round, .fp4_path = path,
                       .fp4_rs_variant = fp4_rs_variant, .split_scratch = scratch > 0 ? dscratch.ptr() : nullptr, .split = split,
                       .dense_path = dense},
                      Stream{});
    const auto all = dy.host(size_t(rows * y_ld));
    std::vector<float> out(size_t(rows * N));
    size_t touched = 0;
    for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(all.begin() + r * y_ld, N, out.begin() + r * N);
        for (int64_t n = N; n < y_ld; ++n) touched += all[size_t(r * y_ld + n)] != kUntouched;
    }
    EXPECT_EQ(touched, 0u) << "columns past N written";
    return out;
}

size_t differing_words(const std::vector<float>& a, const std::vector<float>& b) {
    size_t bad = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        if (std::memcmp(&a[i], &b[i], 4) != 0) ++bad;
    return bad;
}

TEST_F(CudaGemmFast, ActQuantFp8EqualsActQuantDequant) {
    // 7 rows of 32 (row, 128-column) pairs, and 7 rows of 3.
    for (const int64_t cols : {int64_t(4096), int64_t(384)}) {
        const int64_t rows = 7;
        auto x = bf16_randn(size_t(rows * cols), 3, 3.0f);
        for (int64_t i = 0; i < 128; ++i) x[size_t(128 + i)] = 1e-7f * float(i);  // a tiny block: amax floor 1e-4
        Dev<float> dx(x), dref(x.size());
        cuda::act_quant_dequant({.x = dx.ptr(), .out = dref.ptr(), .rows = rows, .cols = cols}, Stream{});
        const std::vector<int32_t> src = {6, 0, 3, 3, 1, 5, 2};  // gathered rows
        Dev<int32_t> dsrc(src);
        Dev<uint8_t> q(size_t(rows * cols));
        Dev<float> s(size_t(rows * cols / 128));
        cuda::act_quant_fp8({.x = dx.ptr(), .x_ld = cols, .row_src = dsrc.ptr(), .rows = rows, .cols = cols, .q = q.ptr(), .scale = s.ptr()},
                            Stream{});
        const auto ref = dref.host(x.size());
        const auto hq = q.host(size_t(rows * cols));
        const auto hs = s.host(size_t(rows * cols / 128));
        size_t bad = 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                const float got = e4m3_to_f32(hq[size_t(r * cols + c)]) * hs[size_t(r * (cols / 128) + c / 128)];
                const float want = ref[size_t(src[size_t(r)] * cols + c)];
                if (std::memcmp(&got, &want, 4) != 0) ++bad;
            }
        EXPECT_EQ(bad, 0u) << cols << " columns";
    }
}

// The CPU's act_quant per `block` of x [rows, cols]: codes, f32 scales, and the dequantized values.
struct CpuActQuant {
    std::vector<uint8_t> q;
    std::vector<float> s, qd;
};
CpuActQuant cpu_act_quant(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t block) {
    CpuActQuant r{std::vector<uint8_t>(x.size()), std::vector<float>(x.size() / size_t(block)), std::vector<float>(x.size())};
    act_quant({.x = TensorView(const_cast<float*>(x.data()), DType::kF32, {rows, cols}),
               .q = TensorView(r.q.data(), DType::kF8E4M3, {rows, cols}),
               .scale = TensorView(r.s.data(), DType::kF32, {rows, cols / block}),
               .block = block});
    for (size_t i = 0; i < x.size(); ++i) r.qd[i] = e4m3_to_f32(r.q[i]) * r.s[i / size_t(block)];
    return r;
}

// The fused QAT passes against the two launches they replace and against the CPU's act_quant, bit for bit: act_quant_fp8 with pre_block
// (V4.1's experts' input: act_quant_dequant per 32, then the FP8 quantization per 128; both activation
// blocks) and to_bf16 with quant_block (V4.1's bf16 linears: act_quant_dequant per 32, then bf16), on rows
// whose 32-blocks span 2^-7 .. 2^5 in magnitude (each block's own scale matters), a tiny block (the amax
// floor), zeros, a padded row stride (to_bf16) and gathered rows (act_quant_fp8).
TEST_F(CudaGemmFast, FusedQatPassesEqualTheirTwoLaunches) {
    for (const int64_t cols : {int64_t(5120), int64_t(384)}) {
        const int64_t rows = 9, ld = cols + 64;
        auto x = bf16_randn(size_t(rows * ld), 11, 2.0f);
        for (int64_t b = 0; b < rows * ld / 32; ++b)
            for (int64_t i = 0; i < 32; ++i) x[size_t(b * 32 + i)] *= std::ldexp(1.0f, int(b % 13) - 7);
        for (int64_t i = 0; i < 32; ++i) x[size_t(ld + 64 + i)] = 1e-7f * float(i);  // the amax floor 1e-4
        for (int64_t i = 0; i < 32; ++i) x[size_t(2 * ld + 96 + i)] = 0.0f;
        Dev<float> dx(x);
        for (const int64_t qb : {int64_t(32), int64_t(128), int64_t(8)}) {
            // to_bf16, quant_block qb, rows ld apart, against act_quant_dequant (dense copy) then to_bf16.
            std::vector<float> dense(size_t(rows * cols));
            for (int64_t r = 0; r < rows; ++r)
                std::copy(x.begin() + r * ld, x.begin() + r * ld + cols, dense.begin() + r * cols);
            Dev<float> dd(dense), dq(dense.size());
            cuda::act_quant_dequant({.x = dd.ptr(), .out = dq.ptr(), .rows = rows, .cols = cols, .block = qb}, Stream{});
            Dev<uint16_t> ref(dense.size()), got(dense.size());
            cuda::to_bf16({.x = dq.ptr(), .x_ld = cols, .rows = rows, .cols = cols, .out = ref.ptr()}, Stream{});
            cuda::to_bf16({.x = dx.ptr(), .x_ld = ld, .rows = rows, .cols = cols, .out = got.ptr(), .quant_block = qb}, Stream{});
            const auto hr = ref.host(dense.size()), hg = got.host(dense.size());
            size_t bad = 0, quantized = 0;
            for (size_t i = 0; i < hr.size(); ++i) {
                bad += hr[i] != hg[i];
                quantized += hg[i] != (std::bit_cast<uint32_t>(cpu::round_bf16(dense[i])) >> 16);
            }
            EXPECT_EQ(bad, 0u) << "to_bf16 quant_block " << qb << ", " << cols << " columns";
            EXPECT_GT(quantized, hr.size() / 4) << "the QAT changes values";
            const CpuActQuant cq = cpu_act_quant(dense, rows, cols, qb);  // the CPU reference of the QAT step
            size_t bad_cpu = 0;
            for (size_t i = 0; i < hg.size(); ++i) bad_cpu += hg[i] != (std::bit_cast<uint32_t>(cpu::round_bf16(cq.qd[i])) >> 16);
            EXPECT_EQ(bad_cpu, 0u) << "to_bf16 quant_block " << qb << " against the CPU, " << cols << " columns";
            // act_quant_fp8 (block 128 and 32) with pre_block qb, gathered rows, against act_quant_dequant then it.
            const std::vector<int32_t> src = {8, 0, 3, 3, 1, 5, 2, 7, 6};
            Dev<int32_t> dsrc(src);
            for (const int64_t block : {int64_t(128), int64_t(32)}) {
                Dev<uint8_t> q0(dense.size()), q1(dense.size());
                Dev<float> s0(dense.size() / size_t(block)), s1(dense.size() / size_t(block));
                cuda::act_quant_fp8({.x = dq.ptr(), .x_ld = cols, .row_src = dsrc.ptr(), .rows = rows, .cols = cols, .q = q0.ptr(),
                                     .scale = s0.ptr(), .block = block},
                                    Stream{});
                cuda::act_quant_fp8({.x = dd.ptr(), .x_ld = cols, .row_src = dsrc.ptr(), .rows = rows, .cols = cols, .q = q1.ptr(),
                                     .scale = s1.ptr(), .block = block, .pre_block = qb},
                                    Stream{});
                EXPECT_EQ(q0.host(dense.size()), q1.host(dense.size())) << "codes: pre_block " << qb << ", block " << block;
                const auto h1 = s1.host(dense.size() / size_t(block));
                EXPECT_EQ(0, std::memcmp(s0.host(dense.size() / size_t(block)).data(), h1.data(), dense.size() / size_t(block) * 4))
                    << "scales: pre_block " << qb << ", block " << block;
                // The CPU: act_quant per qb, dequantized, then act_quant per block, of each gathered source row.
                const CpuActQuant c2 = cpu_act_quant(cq.qd, rows, cols, block);
                const auto hq1 = q1.host(dense.size());
                size_t bad_codes = 0, bad_scales = 0;
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t sr = src[size_t(r)];
                    for (int64_t c = 0; c < cols; ++c) bad_codes += hq1[size_t(r * cols + c)] != c2.q[size_t(sr * cols + c)];
                    for (int64_t b = 0; b < cols / block; ++b)
                        bad_scales += h1[size_t(r * (cols / block) + b)] != c2.s[size_t(sr * (cols / block) + b)];
                }
                EXPECT_EQ(bad_codes, 0u) << "codes against the CPU: pre_block " << qb << ", block " << block;
                EXPECT_EQ(bad_scales, 0u) << "scales against the CPU: pre_block " << qb << ", block " << block;
            }
        }
    }
}

// The quantizer's rounding, code by code: every finite e4m3 magnitude, each midpoint between neighbours (a
// tie: to the even code), the floats just below and above it, and values under the smallest subnormal,
// both signs, through act_quant_fp8 with each 128-block's scale pinned to 1 (its first value 448), at
// blocks % 4 != 0 (a partial group of blocks per warp). Reference: a brute-force nearest-even search.
TEST_F(CudaGemmFast, ActQuantFp8RoundsToNearestEven) {
    std::vector<float> code_value(127);  // codes 0x00 .. 0x7E (0x7F is NaN)
    for (int c = 0; c < 127; ++c) code_value[size_t(c)] = e4m3_to_f32(uint8_t(c));
    std::vector<float> mags;
    for (int c = 0; c < 127; ++c) {
        mags.push_back(code_value[size_t(c)]);
        if (c + 1 < 127) {
            const float mid = 0.5f * (code_value[size_t(c)] + code_value[size_t(c + 1)]);  // exact in f32
            mags.push_back(mid);
            mags.push_back(std::nextafter(mid, 0.0f));
            mags.push_back(std::nextafter(mid, 1e9f));
        }
    }
    for (float v : {std::ldexp(1.0f, -10), std::ldexp(1.0f, -11), std::ldexp(1.5f, -10), 1e-30f, 0.0f}) mags.push_back(v);
    std::vector<float> x;
    size_t next = 0;
    while (next < mags.size()) {  // blocks of 128: 448 first, then up to 127 test values (alternating signs)
        x.push_back(448.0f);
        for (int i = 1; i < 128; ++i, ++next) x.push_back(next < mags.size() ? (next % 2 ? -mags[next] : mags[next]) : 0.0f);
    }
    const int64_t cols = int64_t(x.size());
    ASSERT_NE((cols / 128) % 4, 0);
    Dev<float> dx(x);
    Dev<uint8_t> q(static_cast<size_t>(cols));
    Dev<float> sc(size_t(cols / 128));
    cuda::act_quant_fp8({.x = dx.ptr(), .x_ld = cols, .rows = 1, .cols = cols, .q = q.ptr(), .scale = sc.ptr()}, Stream{});
    const auto hq = q.host(size_t(cols));
    for (float v : sc.host(size_t(cols / 128))) ASSERT_EQ(v, 1.0f);
    for (int64_t i = 0; i < cols; ++i) {
        const float a = std::fabs(x[size_t(i)]);
        int best = 0;
        for (int c = 1; c < 127; ++c) {
            const float d = std::fabs(code_value[size_t(c)] - a), db = std::fabs(code_value[size_t(best)] - a);
            if (d < db || (d == db && c % 2 == 0 && best % 2 == 1)) best = c;
        }
        const uint8_t want = uint8_t(best | (std::signbit(x[size_t(i)]) ? 0x80 : 0));
        ASSERT_EQ(int(hq[size_t(i)]), int(want)) << "x = " << x[size_t(i)] << " (column " << i << ")";
    }
}

TEST_F(CudaGemmFast, SwigluQuantizedEqualsSwigluThenActQuant) {
    // The routed experts' fused SwiGLU + FP8 quantization (SwigluParams::q) against swiglu then
    // act_quant_fp8, bit for bit: codes and scales, with and without the clamp, the row weights (by index)
    // and bf16 rounding; a block of tiny values (the amax floor) and one of large ones (clamped). With
    // fine_block 32 (V4.1) against swiglu, act_quant_dequant per 32, act_quant_fp8; at V4's expert width and
    // V4.1's (2304: 18 blocks of 128, a warp's last group of blocks partial).
    for (const int64_t width : {int64_t(2048), int64_t(2304)}) {
        std::vector<uint8_t> codes_without_fine;  // (the fine = 0 pass's, for the fine = 32 pass)
        for (const int64_t fine : {int64_t(0), int64_t(32)}) {
            const int64_t rows = 37;
            auto g = bf16_randn(size_t(rows * width), 21, 4.0f), u = bf16_randn(size_t(rows * width), 22, 4.0f);
            for (int64_t i = 0; i < 128; ++i) g[size_t(3 * width + i)] = 1e-6f * float(i), u[size_t(3 * width + i)] = 1e-3f;
            for (int64_t i = 0; i < 128; ++i) g[size_t(5 * width + 256 + i)] = 40.0f + float(i), u[size_t(5 * width + 256 + i)] = -30.0f;
            // One 32-column block 1000x smaller than the rest of its 128 block: a fine scale of its own.
            for (int64_t i = 0; i < 32; ++i) g[size_t(7 * width + 512 + 64 + i)] *= 1e-3f;
            std::vector<float> weights(static_cast<size_t>(rows));
            std::vector<int32_t> index(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) weights[size_t(r)] = 0.05f * float(r + 1), index[size_t(r)] = int32_t((r * 7) % rows);
            Dev<float> dw(weights);
            Dev<int32_t> di(index);
            for (const float limit : {0.0f, 7.0f})
                for (const bool weighted : {false, true})
                    for (const bool round : {false, true}) {
                        Dev<float> g1(g), u1(u), g2(g), u2(u);
                        Dev<uint8_t> q1(size_t(rows * width)), q2(size_t(rows * width));
                        Dev<float> s1(size_t(rows * width / 128)), s2(size_t(rows * width / 128));
                        const cuda::SwigluParams base{.g = g1.ptr(), .u = u1.ptr(), .row_weight = weighted ? dw.ptr() : nullptr,
                                                      .row_weight_index = weighted ? di.ptr() : nullptr, .rows = rows,
                                                      .width = width, .limit = limit, .round_bf16 = round};
                        cuda::swiglu(base, Stream{});
                        if (fine) cuda::act_quant_dequant({.x = g1.ptr(), .out = g1.ptr(), .rows = rows, .cols = width, .block = fine}, Stream{});
                        cuda::act_quant_fp8({.x = g1.ptr(), .x_ld = width, .rows = rows, .cols = width, .q = q1.ptr(), .scale = s1.ptr()},
                                            Stream{});
                        cuda::SwigluParams fused = base;
                        fused.g = g2.ptr();
                        fused.u = u2.ptr();
                        fused.q = q2.ptr();
                        fused.q_scale = s2.ptr();
                        fused.fine_block = fine;
                        cuda::swiglu(fused, Stream{});
                        const std::string what = "width " + std::to_string(width) + ", fine " + std::to_string(fine) + ", limit " +
                                                 std::to_string(limit) + ", weighted " + std::to_string(weighted) + ", bf16 " +
                                                 std::to_string(round);
                        const auto codes = q2.host(size_t(rows * width));
                        EXPECT_EQ(q1.host(size_t(rows * width)), codes) << what;
                        const auto a = s1.host(size_t(rows * width / 128)), b = s2.host(size_t(rows * width / 128));
                        EXPECT_EQ(differing_words(a, b), 0u) << what;
                        EXPECT_EQ(differing_words(g2.host(g.size()), g), 0u) << "the fused form leaves g as it was: " << what;
                        if (limit == 0.0f && !weighted && !round) {
                            if (!fine) codes_without_fine = codes;
                            else EXPECT_NE(codes_without_fine, codes) << "the per-32 step changed some codes: " << what;
                        }
                    }
        }
    }
}

TEST_F(CudaGemmFast, RmsNormFormsEqualNormThenActQuantAndToBf16) {
    // The norm kernel's FP8 and bf16 forms of its output (RmsNormParams::q, out_bf16, out_bf16_qat) against
    // rms_norm then act_quant_fp8 (per 128 and per 32 columns), to_bf16, and act_quant_dequant per 32 then to_bf16,
    // bit for bit; the f32 output unchanged by
    // the extra forms; in place and apart, weighted and not, with and without the bf16 rounding, at
    // V4-Flash's widths (hidden 4096, q_lora 1024) and 128; a block of tiny values (the amax floor) and a
    // row of huge ones (the clamp) included.
    for (const int64_t n : {int64_t(4096), int64_t(1024), int64_t(128)})
        for (const int64_t block : {int64_t(128), int64_t(32)})
            for (int variant = 0; variant < 3; ++variant) {
                const int64_t rows = 9;
                const bool round = variant != 1, weighted = variant != 2, in_place = variant == 0;
                auto x = bf16_randn(size_t(rows * n), uint32_t(n + block), 2.0f);
                for (int64_t i = 0; i < 64; ++i) x[size_t(2 * n + i)] = 1e-30f * float(i + 1);
                for (int64_t i = 0; i < n; ++i) x[size_t(4 * n + i)] *= 1e30f;
                auto w = bf16_randn(size_t(n), 5, 0.2f);
                for (float& v : w) v += 1.0f;
                Dev<float> dw(w), x1(x), x2(x), o1(x.size()), o2(x.size());
                Dev<uint8_t> q1(x.size()), q2(x.size());
                Dev<float> s1(size_t(rows * n / block)), s2(size_t(rows * n / block));
                Dev<uint16_t> b1(x.size()), b2(x.size());
                cuda::RmsNormParams p{.x = x1.ptr(), .weight = weighted ? dw.ptr() : nullptr, .out = in_place ? x1.ptr() : o1.ptr(),
                                      .rows = rows, .n = n, .eps = 1e-6f, .round_bf16 = round};
                cuda::rms_norm(p, Stream{});
                cuda::act_quant_fp8({.x = p.out, .x_ld = n, .rows = rows, .cols = n, .q = q1.ptr(), .scale = s1.ptr(), .block = block},
                                    Stream{});
                cuda::to_bf16({.x = p.out, .x_ld = n, .rows = rows, .cols = n, .out = b1.ptr()}, Stream{});
                cuda::RmsNormParams f = p;
                f.x = x2.ptr();
                f.out = in_place ? x2.ptr() : o2.ptr();
                f.q = q2.ptr();
                f.q_scale = s2.ptr();
                f.q_block = block;
                f.out_bf16 = b2.ptr();
                Dev<uint16_t> qb1(x.size()), qb2(x.size());  // the QAT form: act_quant_dequant per 32, then to_bf16
                Dev<float> deq(x.size());
                cuda::act_quant_dequant({.x = p.out, .out = deq.ptr(), .rows = rows, .cols = n, .block = 32}, Stream{});
                cuda::to_bf16({.x = deq.ptr(), .x_ld = n, .rows = rows, .cols = n, .out = qb1.ptr()}, Stream{});
                f.out_bf16_qat = qb2.ptr();
                cuda::rms_norm(f, Stream{});
                const std::string what = "n " + std::to_string(n) + ", block " + std::to_string(block) + ", variant " + std::to_string(variant);
                EXPECT_EQ(differing_words((in_place ? x1 : o1).host(x.size()), (in_place ? x2 : o2).host(x.size())), 0u) << what;
                EXPECT_EQ(q1.host(x.size()), q2.host(x.size())) << what;
                EXPECT_EQ(differing_words(s1.host(size_t(rows * n / block)), s2.host(size_t(rows * n / block))), 0u) << what;
                EXPECT_EQ(b1.host(x.size()), b2.host(x.size())) << what;
                const auto qat = qb2.host(x.size());
                EXPECT_EQ(qb1.host(x.size()), qat) << what << ": the QAT form";
                EXPECT_NE(b2.host(x.size()), qat) << what << ": the QAT form is not the plain bf16 form";
            }
    // The forms need whole 128-column blocks: a clear error otherwise.
    Dev<float> x(size_t(2 * 96)), s(size_t(8));
    Dev<uint8_t> q(size_t(2 * 96));
    EXPECT_THROW(cuda::rms_norm({.x = x.ptr(), .out = x.ptr(), .rows = 2, .n = 96, .q = q.ptr(), .q_scale = s.ptr()}, Stream{}),
                 std::exception);
}

TEST_F(CudaGemmFast, SharedExpertW1W3AsOneGemmEqualTwoGemms) {
    // The shared expert's w1 and w3 as one GEMM over their joined rows (DeviceLayer::shared_w13, V4-Flash's
    // 2 x 2048 x 4096 FP8) against the two row slices as their own GEMMs, bit for bit, at decode and prefill
    // row counts (split-K, unsplit, the warp-specialized dense kernel); then the SwiGLU + FP8 quantization
    // of the joined rows (SwigluParams::ld = 2 x 2048) against the same on the two compact outputs.
    const int64_t I = 2048, D = 4096;
    Weight w13(cpu::WeightFormat::kFp8Block, 2 * I, D, 31);
    const cuda::DeviceLinear w1 = w13.dev.rows(0, I), w3 = w13.dev.rows(I, 2 * I);
    ASSERT_EQ(cuda::fast_linear_k_chunks(w13.dev), cuda::fast_linear_k_chunks(w1));
    for (const int64_t rows : {int64_t(1), int64_t(5), int64_t(64), int64_t(200), int64_t(300), int64_t(600)}) {
        const auto x = bf16_randn(size_t(rows * D), uint32_t(rows), 2.0f);
        Dev<float> dx(x);
        FastInput in(dx, rows, D, false);
        auto gemm = [&](const cuda::DeviceLinear& w, float* y, int64_t y_ld) {
            const int64_t n = cuda::fast_linear_split_floats(w, rows);
            Dev<float> scratch(size_t(std::max<int64_t>(n, 1)));
            cuda::fast_linear({.a = in.q->ptr(), .a_scale = in.s->ptr(), .weight = w, .y = y, .y_ld = y_ld, .rows = rows,
                               .split_scratch = n > 0 ? scratch.ptr() : nullptr},
                              Stream{});
        };
        Dev<float> y13(size_t(rows * 2 * I)), y1(size_t(rows * I)), y3(size_t(rows * I));
        gemm(w13.dev, y13.ptr(), 2 * I);
        gemm(w1, y1.ptr(), I);
        gemm(w3, y3.ptr(), I);
        const auto j = y13.host(size_t(rows * 2 * I)), a = y1.host(size_t(rows * I)), b = y3.host(size_t(rows * I));
        std::vector<float> ja(a.size()), jb(b.size());
        for (int64_t r = 0; r < rows; ++r) {
            std::copy_n(j.begin() + r * 2 * I, I, ja.begin() + r * I);
            std::copy_n(j.begin() + r * 2 * I + I, I, jb.begin() + r * I);
        }
        EXPECT_EQ(differing_words(ja, a), 0u) << "w1 rows, " << rows << " rows";
        EXPECT_EQ(differing_words(jb, b), 0u) << "w3 rows, " << rows << " rows";
        Dev<uint8_t> q1(size_t(rows * I)), q2(size_t(rows * I));
        Dev<float> s1(size_t(rows * I / 128)), s2(size_t(rows * I / 128));
        cuda::swiglu({.g = y13.ptr(), .u = y13.ptr() + I, .rows = rows, .width = I, .limit = 7.0f, .round_bf16 = true, .ld = 2 * I,
                      .q = q1.ptr(), .q_scale = s1.ptr()},
                     Stream{});
        cuda::swiglu({.g = y1.ptr(), .u = y3.ptr(), .rows = rows, .width = I, .limit = 7.0f, .round_bf16 = true, .q = q2.ptr(),
                      .q_scale = s2.ptr()},
                     Stream{});
        EXPECT_EQ(q1.host(size_t(rows * I)), q2.host(size_t(rows * I))) << rows << " rows";
        EXPECT_EQ(differing_words(s1.host(size_t(rows * I / 128)), s2.host(size_t(rows * I / 128))), 0u) << rows << " rows";
        // The f32 form with a row stride: g's first I columns of each row, u untouched.
        cuda::swiglu({.g = y13.ptr(), .u = y13.ptr() + I, .rows = rows, .width = I, .limit = 7.0f, .round_bf16 = true, .ld = 2 * I},
                     Stream{});
        cuda::swiglu({.g = y1.ptr(), .u = y3.ptr(), .rows = rows, .width = I, .limit = 7.0f, .round_bf16 = true}, Stream{});
        const auto j2 = y13.host(size_t(rows * 2 * I)), g2 = y1.host(size_t(rows * I));
        for (int64_t r = 0; r < rows; ++r) {
            std::copy_n(j2.begin() + r * 2 * I, I, ja.begin() + r * I);
            std::copy_n(j2.begin() + r * 2 * I + I, I, jb.begin() + r * I);
        }
        EXPECT_EQ(differing_words(ja, g2), 0u) << "swiglu f32 with a row stride, " << rows << " rows";
        EXPECT_EQ(differing_words(jb, b), 0u) << "u left as it was, " << rows << " rows";
    }
}

TEST_F(CudaGemmFast, JoinedBf16WeightWithThePartsChunksEqualsThePartsGemms) {
    // A compressor's wkv and wgate as one bf16 GEMM over their joined rows (DeviceCompressor::wkv_gate) with
    // the parts' split-K chunks (FastLinearParams::k_chunks) against each part as its own GEMM, bit for bit,
    // at V4-Flash's compressor shapes (CSA 2 x 1024, HCA 2 x 512, the indexer's 2 x 256; K = 4096) and decode
    // to prefill row counts; then add_ape on the joined rows' gate half (AddApeParams::ld) against the compact.
    for (const int64_t W : {int64_t(1024), int64_t(512), int64_t(256)}) {
        const int64_t D = 4096;
        Weight wj(cpu::WeightFormat::kBF16, 2 * W, D, uint32_t(W));
        const cuda::DeviceLinear wkv = wj.dev.rows(0, W), wgate = wj.dev.rows(W, 2 * W);
        const int S = cuda::fast_linear_k_chunks(wkv);
        for (const int64_t rows : {int64_t(1), int64_t(7), int64_t(64), int64_t(300)}) {
            const auto x = bf16_randn(size_t(rows * D), uint32_t(rows + W), 1.0f);
            Dev<float> dx(x);
            FastInput in(dx, rows, D, true);
            auto gemm = [&](const cuda::DeviceLinear& w, float* y, int64_t y_ld, int k_chunks) {
                const int64_t n = cuda::fast_linear_split_floats(w, rows, cuda::SplitK::kAuto, k_chunks);
                Dev<float> scratch(size_t(std::max<int64_t>(n, 1)));
                cuda::fast_linear({.a = in.q->ptr(), .weight = w, .y = y, .y_ld = y_ld, .rows = rows, .split_scratch = n > 0 ? scratch.ptr() : nullptr,
                                   .k_chunks = k_chunks},
                                  Stream{});
            };
            Dev<float> yj(size_t(rows * 2 * W)), yk(size_t(rows * W)), yg(size_t(rows * W));
            gemm(wj.dev, yj.ptr(), 2 * W, S);
            gemm(wkv, yk.ptr(), W, 0);
            gemm(wgate, yg.ptr(), W, 0);
            auto halves = [&](const std::vector<float>& j, std::vector<float>& a, std::vector<float>& b) {
                a.resize(size_t(rows * W));
                b.resize(size_t(rows * W));
                for (int64_t r = 0; r < rows; ++r) {
                    std::copy_n(j.begin() + r * 2 * W, W, a.begin() + r * W);
                    std::copy_n(j.begin() + r * 2 * W + W, W, b.begin() + r * W);
                }
            };
            std::vector<float> a, b;
            halves(yj.host(size_t(rows * 2 * W)), a, b);
            const std::string what = std::to_string(W) + " x 2, " + std::to_string(rows) + " rows, " + std::to_string(S) + " chunks";
            EXPECT_EQ(differing_words(a, yk.host(size_t(rows * W))), 0u) << "wkv rows, " << what;
            EXPECT_EQ(differing_words(b, yg.host(size_t(rows * W))), 0u) << "wgate rows, " << what;
            const int64_t ratio = 4;
            const auto ape = bf16_randn(size_t(ratio * W), 3, 0.5f);
            std::vector<int32_t> pos(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) pos[size_t(r)] = int32_t(3 * r + 1);
            Dev<float> dape(ape);
            Dev<int32_t> dpos(pos);
            cuda::add_ape({.gate = yj.ptr() + W, .ape = dape.ptr(), .positions = dpos.ptr(), .rows = rows, .width = W, .ratio = ratio, .ld = 2 * W},
                          Stream{});
            cuda::add_ape({.gate = yg.ptr(), .ape = dape.ptr(), .positions = dpos.ptr(), .rows = rows, .width = W, .ratio = ratio}, Stream{});
            std::vector<float> a2, b2;
            halves(yj.host(size_t(rows * 2 * W)), a2, b2);
            EXPECT_EQ(differing_words(b2, yg.host(size_t(rows * W))), 0u) << "add_ape with a row stride, " << what;
            EXPECT_EQ(differing_words(a2, a), 0u) << "the kv half untouched, " << what;
        }
    }
}

struct Case {
    cpu::WeightFormat format;
    int64_t rows, out, in;
    double tol;
    int scale_lo = 122, scale_span = 4;
};

TEST_F(CudaGemmFast, MatchesCpuReferenceWithinTolerance) {
    const Case cases[] = {
        {cpu::WeightFormat::kFp8Block, 1, 1024, 4096, 5e-4},     // wq_a decode (16x32 tiles)
        {cpu::WeightFormat::kFp8Block, 40, 4096, 2048, 5e-4},    // 64x64 tiles
        {cpu::WeightFormat::kFp8Block, 300, 1000, 1024, 5e-4},   // 128x128 tiles, N not a multiple of the tile
        {cpu::WeightFormat::kFp4, 3, 2048, 4096, 5e-4},          // expert w1
        {cpu::WeightFormat::kFp4, 200, 1024, 2048, 5e-4},
        {cpu::WeightFormat::kFp4, 70, 512, 1024, 5e-3, 110, 18},  // scales spread over 18 binades
        {cpu::WeightFormat::kBF16, 2, 1280, 4096, 1e-5},          // LM head slice
        {cpu::WeightFormat::kBF16, 150, 1024, 4096, 1e-5},
    };
    uint32_t seed = 50;
    for (const Case& c : cases) {
        Weight w(c.format, c.out, c.in, seed++, c.scale_lo, c.scale_span);
        const auto x = bf16_randn(size_t(c.rows * c.in), seed++);
        const bool bf16 = c.format == cpu::WeightFormat::kBF16;
        std::vector<float> ref(size_t(c.rows * c.out));
        cpu::linear({.x = TensorView(const_cast<float*>(x.data()), DType::kF32, {c.rows, c.in}), .weight = &w.host,
                     .y = TensorView(ref.data(), DType::kF32, {c.rows, c.out}), .quantize_activations = !bf16});
        const auto got = run_fast(w, x, c.rows);
        const double err = rel_err(ref, got);
        EXPECT_LT(err, c.tol) << "format " << int(c.format) << " " << c.rows << "x" << c.out << "x" << c.in;
        std::printf("fast vs CPU: format %d rows %lld %lldx%lld rel err %.3g (tol %.0e)\n", int(c.format),
                    (long long)c.rows, (long long)c.out, (long long)c.in, err, c.tol);
        // Output rounding to bf16 applies to the same values.
        const auto rounded = run_fast(w, x, c.rows, true);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i)
            if (rounded[i] != cpu::round_bf16(got[i])) ++bad;
        EXPECT_EQ(bad, 0u) << "bf16 output rounding";
    }
}

TEST_F(CudaGemmFast, BatchInvariantAcrossBatchSizesAndTileShapes) {
    for (cpu::WeightFormat f : {cpu::WeightFormat::kFp8Block, cpu::WeightFormat::kFp4, cpu::WeightFormat::kBF16}) {
        const int64_t N = 1024, K = 2048, R = 300;
        Weight w(f, N, K, 77);
        const auto x = bf16_randn(size_t(R * K), 78);
        const auto full = run_fast(w, x, R);
        // (first row, count): alone, small batches (16x32 tiles), medium (64x64), another large one.
        const std::pair<int64_t, int64_t> subsets[] = {{0, 1}, {299, 1}, {17, 5}, {100, 16}, {5, 40}, {31, 200}};
        for (const auto& [r0, n] : subsets) {
            const std::vector<float> xs(x.begin() + r0 * K, x.begin() + (r0 + n) * K);
            const auto part = run_fast(w, xs, n);
            EXPECT_EQ(0, std::memcmp(part.data(), full.data() + r0 * N, size_t(n * N) * 4))
                << "format " << int(f) << ": rows [" << r0 << ", " << r0 + n << ") differ from the 300-row batch";
        }
    }
}

// Split-K at the real shapes: every FP8 128x128 and BF16 linear of V4-Flash / V4.1 whose output tiles do not
// fill the GPU. A row's bits are one function of the weight: in 520 rows with all chunks in one block (the
// unsplit form), alone (split form, one warpgroup), in batches of 8 to 128 rows (split form where the
// partials fit), 520 rows forced split (two warpgroups per block) and as the model runs them, 4096 rows
// (prefill), and with the split form turned off at one row. Against the CPU within the fast mode's tolerance; bf16 output rounding and a row
// stride past N (V4.1's wo_a groups) through the ordered-sum kernel.
TEST_F(CudaGemmFast, SplitKIsBatchInvariantAtModelShapes) {
    struct Shape {
        const char* name;
        cpu::WeightFormat f;
        int64_t N, K;
    };
    const Shape shapes[] = {
        {"wq_a", cpu::WeightFormat::kFp8Block, 1024, 4096},        {"wkv", cpu::WeightFormat::kFp8Block, 512, 4096},
        {"shared_w1", cpu::WeightFormat::kFp8Block, 2048, 4096},   {"shared_w2", cpu::WeightFormat::kFp8Block, 4096, 2048},
        {"wo_b", cpu::WeightFormat::kFp8Block, 4096, 8192},        {"indexer_wq_b", cpu::WeightFormat::kFp8Block, 8192, 1024},
        {"wo_a_group", cpu::WeightFormat::kBF16, 1024, 4096},      {"indexer_weights", cpu::WeightFormat::kBF16, 64, 4096},
        {"v41_wq_a", cpu::WeightFormat::kBF16, 1280, 5120},        {"v41_wkv", cpu::WeightFormat::kBF16, 512, 5120},
        {"v41_shared_w1", cpu::WeightFormat::kBF16, 2304, 5120},   {"v41_shared_w2", cpu::WeightFormat::kBF16, 5120, 2304},
        {"v41_wo_b", cpu::WeightFormat::kBF16, 5120, 8192},        {"odd_fp8", cpu::WeightFormat::kFp8Block, 1000, 2048},
        {"odd_bf16", cpu::WeightFormat::kBF16, 300, 1024},
    };
    const bool hopper = cuda::fast_fp8_b32_available();  // sm_90: the wgmma kernel, where K is chunked
    const int64_t R = 520, kPrefill = 4096;
    uint32_t seed = 1500;
    for (const Shape& sh : shapes) {
        const bool bf16 = sh.f == cpu::WeightFormat::kBF16;
        Weight w(sh.f, sh.N, sh.K, seed++);
        const int chunks = cuda::fast_linear_k_chunks(w.dev);
        if (hopper) {  // (indexer_wq_b: 64 output tiles, one chunk)
            EXPECT_EQ(chunks > 1, std::string(sh.name) != "indexer_wq_b") << sh.name;
        }
        const auto x = bf16_randn(size_t(R * sh.K), seed++);
        const auto full = run_fast(w, x, R, false, cuda::Fp4Path::kAuto, -1, cuda::SplitK::kOff);  // all chunks in one block
        const std::string what = std::string(sh.name) + " (" + std::to_string(chunks) + " K chunks)";
        auto rows_of = [&](int64_t r0, int64_t n) { return std::vector<float>(full.begin() + r0 * sh.N, full.begin() + (r0 + n) * sh.N); };
        auto sub = [&](int64_t r0, int64_t n, cuda::SplitK split = cuda::SplitK::kAuto, bool round = false, int64_t y_ld = 0) {
            const std::vector<float> xs(x.begin() + r0 * sh.K, x.begin() + (r0 + n) * sh.K);
            return run_fast(w, xs, n, round, cuda::Fp4Path::kAuto, -1, split, y_ld);
        };
        for (const auto& [r0, n] : {std::pair<int64_t, int64_t>{0, 1}, {519, 1}, {3, 8}, {40, 33}, {100, 64}, {200, 65}, {256, 128}})
            EXPECT_EQ(differing_words(sub(r0, n), rows_of(r0, n)), 0u) << what << ": rows [" << r0 << ", " << r0 + n << ")";
        EXPECT_EQ(differing_words(sub(0, R, cuda::SplitK::kForce), full), 0u) << what << ": forced split, " << R << " rows";
        EXPECT_EQ(differing_words(sub(0, R), full), 0u) << what << ": " << R << " rows as the model runs them";
        EXPECT_EQ(differing_words(sub(7, 1, cuda::SplitK::kOff), rows_of(7, 1)), 0u) << what << ": unsplit, one row";
        // bf16 rounding and a row stride past N, split (5 rows) and unsplit (forced off).
        for (cuda::SplitK split : {cuda::SplitK::kAuto, cuda::SplitK::kOff}) {
            const auto rounded = sub(11, 5, split, true, sh.N + 36);
            size_t bad = 0;
            for (size_t i = 0; i < rounded.size(); ++i) bad += rounded[i] != cpu::round_bf16(full[size_t(11 * sh.N) + i]);
            EXPECT_EQ(bad, 0u) << what << ": bf16 output rounding at a wider row stride";
        }
        // Against the CPU (8 rows).
        const int64_t C = 8;
        std::vector<float> ref(size_t(C * sh.N));
        cpu::linear({.x = TensorView(const_cast<float*>(x.data()), DType::kF32, {C, sh.K}), .weight = &w.host,
                     .y = TensorView(ref.data(), DType::kF32, {C, sh.N}), .quantize_activations = !bf16});
        const double err = rel_err(ref, rows_of(0, C));
        EXPECT_LT(err, bf16 ? 1e-5 : 5e-4) << what;
        std::printf("split-K %s %lldx%lld: %d K chunks, rel err vs CPU %.3g\n", sh.name, (long long)sh.N, (long long)sh.K, chunks, err);
    }
    // Prefill sizes: a 4096-row launch (two warpgroups, every chunk in one block) against rows alone / few.
    for (const Shape& sh : {shapes[1], shapes[6]}) {
        Weight w(sh.f, sh.N, sh.K, seed++);
        const auto x = bf16_randn(size_t(kPrefill * sh.K), seed++);
        const auto big = run_fast(w, x, kPrefill);
        for (const auto& [r0, n] : {std::pair<int64_t, int64_t>{4095, 1}, {1000, 3}, {2048, 100}}) {
            const std::vector<float> xs(x.begin() + r0 * sh.K, x.begin() + (r0 + n) * sh.K);
            EXPECT_EQ(differing_words(run_fast(w, xs, n), std::vector<float>(big.begin() + r0 * sh.N, big.begin() + (r0 + n) * sh.N)), 0u)
                << sh.name << " prefill: rows [" << r0 << ", " << r0 + n << ")";
        }
    }
}

// The warp-specialized dense kernel (Hopper, > 64 rows: gemm_wgmma_dense_ws.cuh) in every form (DensePath:
// clusters of two with weight multicast or one block per tile; the classic wgmma width or 128 for every N)
// against the classic cp.async kernel (DensePath::kClassic) bit for bit, at the V4-Flash / V4.1 dense
// shapes (FP8 128x128 and BF16, both instruction widths, K chunked or not) and odd ones (N not a multiple
// of the tile), at row counts from 65 (one partial row tile; an odd number of row tiles leaves a cluster's
// second block without rows) to prefill chunks (many tiles per block: the persistent schedule, its stage
// ring across tiles), with bf16 output rounding and a row stride past N; and a row's bits in a 4096-row
// launch equal the same row alone (the one-warpgroup kernel).
TEST_F(CudaGemmFast, DenseWsKernelEqualsClassicKernel) {
    if (!cuda::fast_fp8_b32_available()) GTEST_SKIP() << "the warp-specialized dense kernel is Hopper's (sm_90)";
    EXPECT_TRUE(cuda::fast_dense_ws_available()) << "TMA tensor maps unavailable: the dense kernel never runs";
    struct Shape {
        const char* name;
        cpu::WeightFormat f;
        int64_t N, K;
    };
    const Shape shapes[] = {
        {"wq_a", cpu::WeightFormat::kFp8Block, 1024, 4096},       {"wkv", cpu::WeightFormat::kFp8Block, 512, 4096},
        {"shared_w1", cpu::WeightFormat::kFp8Block, 2048, 4096},  {"shared_w2", cpu::WeightFormat::kFp8Block, 4096, 2048},
        {"wo_b", cpu::WeightFormat::kFp8Block, 4096, 8192},       {"indexer_wq_b", cpu::WeightFormat::kFp8Block, 8192, 1024},
        {"wo_a_group", cpu::WeightFormat::kBF16, 1024, 4096},     {"v41_shared_w2", cpu::WeightFormat::kBF16, 5120, 2304},
        {"odd_fp8", cpu::WeightFormat::kFp8Block, 1000, 2048},    {"odd_bf16", cpu::WeightFormat::kBF16, 300, 1024},
        {"wide_fp8", cpu::WeightFormat::kFp8Block, 2176, 1024},
    };
    uint32_t seed = 2500;
    for (const Shape& sh : shapes) {
        Weight w(sh.f, sh.N, sh.K, seed++);
        for (int64_t rows : {int64_t(65), int64_t(300), int64_t(1000), int64_t(4096)}) {
            if (rows == 4096 && sh.N * sh.K > (int64_t(16) << 20)) continue;  // keep the test short
            const auto x = bf16_randn(size_t(rows * sh.K), seed++);
            const auto ws = run_fast(w, x, rows, false, cuda::Fp4Path::kAuto, -1, cuda::SplitK::kOff);
            const auto classic = run_fast(w, x, rows, false, cuda::Fp4Path::kAuto, -1, cuda::SplitK::kOff, 0, cuda::DensePath::kClassic);
            EXPECT_EQ(differing_words(ws, classic), 0u) << sh.name << ", " << rows << " rows";
            // The pinned forms (kAuto: one block per tile, the 128-wide wgmma for every N): the classic width,
            // and clusters of two with either width.
            for (const auto& [path, name] : {std::pair{cuda::DensePath::kWs, "ws"}, std::pair{cuda::DensePath::kWsCluster, "ws_cluster"},
                                             std::pair{cuda::DensePath::kWsClusterWide, "ws_cluster_wide"}}) {
                const auto got = run_fast(w, x, rows, false, cuda::Fp4Path::kAuto, -1, cuda::SplitK::kOff, 0, path);
                EXPECT_EQ(differing_words(got, classic), 0u) << sh.name << ", " << rows << " rows, form " << name;
            }
            size_t nonzero = 0;
            for (float v : ws) nonzero += v != 0.0f;
            EXPECT_GT(nonzero, ws.size() / 2) << sh.name << ", " << rows << " rows";
            if (rows == 300) {
                const auto rounded = run_fast(w, x, rows, true, cuda::Fp4Path::kAuto, -1, cuda::SplitK::kOff, sh.N + 36);
                size_t bad = 0;
                for (size_t i = 0; i < rounded.size(); ++i) bad += rounded[i] != cpu::round_bf16(ws[i]);
                EXPECT_EQ(bad, 0u) << sh.name << ": bf16 output rounding at a wider row stride";
            }
            if (rows == 4096 || rows == 1000) {  // a row alone (one warpgroup, split form where it splits)
                const int64_t r = rows - 1;
                const std::vector<float> xs(x.begin() + r * sh.K, x.begin() + (r + 1) * sh.K);
                EXPECT_EQ(differing_words(run_fast(w, xs, 1), std::vector<float>(ws.begin() + r * sh.N, ws.begin() + (r + 1) * sh.N)), 0u)
                    << sh.name << ": row " << r << " of " << rows << " alone";
            }
        }
    }
}

// The attention's grouped output projection (V4's wo_a: G groups of [N, K] bf16 weights, row s of group g
// is row s·G + g of the input and of the output) two ways, as CudaModel runs it: one grouped launch (decode
// sizes), or each group's rows gathered in bf16 and one dense launch per group (prefill sizes; the
// warp-specialized kernel or the classic one). Every form gives every element the same bits.
TEST_F(CudaGemmFast, GroupedWoAEqualsDenseLaunchPerGroup) {
    const int64_t G = 8, N = 1024, K = 4096;
    Weight w(cpu::WeightFormat::kBF16, G * N, K, 2700);
    std::vector<cuda::DeviceLinear> groups;
    for (int64_t g = 0; g < G; ++g) groups.push_back(w.dev.rows(g * N, (g + 1) * N));
    Dev<cuda::DeviceLinear> dgroups(groups);
    for (int64_t S : {int64_t(1), int64_t(5), int64_t(16), int64_t(130), int64_t(2048)}) {
        const auto x = bf16_randn(size_t(S * G * K), uint32_t(2701 + S));  // [S, G·K] f32 (bf16 values)
        Dev<float> dx(x);
        // One grouped launch over the interleaved rows.
        Dev<uint16_t> xb(size_t(S * G * K));
        Dev<int32_t> offsets(size_t(G + 1)), rows_of(size_t(G * S)), tiles(size_t(G + 1));
        Dev<float> grouped(size_t(S * G * N));
        cuda::to_bf16({.x = dx.ptr(), .x_ld = K, .rows = S * G, .cols = K, .out = xb.ptr()}, Stream{});
        cuda::group_row_tables({.groups = G, .rows = S, .offsets = offsets.ptr(), .rows_of = rows_of.ptr()}, Stream{});
        cuda::fast_linear({.a = xb.ptr(), .a_row_src = rows_of.ptr(), .weight = groups[0], .experts = dgroups.ptr(),
                           .expert_offsets = offsets.ptr(), .num_experts = G, .tile_scratch = tiles.ptr(), .y_row = rows_of.ptr(),
                           .y = grouped.ptr(), .y_ld = N, .rows = G * S},
                          Stream{});
        const std::vector<float> want = grouped.host(size_t(S * G * N));
        // The split form of the grouped launch (decode sizes: K chunks on separate blocks, grouped_wo_a's form): the
        // same bits. On an H200 (132 SMs) the 16 output tiles of a group give 8 chunks, and up to 64 rows per group
        // the grid leaves SMs idle, so the split applies.
        const int64_t split = cuda::fast_grouped_split_floats(groups[0], G * S, G);
        if (cuda::compute_capability() == 90 && S <= 16) {
            EXPECT_GT(split, 0) << S << " rows: the split form applies";
        }
        if (split > 0) {
            Dev<float> part(static_cast<size_t>(split)), ysplit(static_cast<size_t>(S * G * N));
            cuda::fast_linear({.a = xb.ptr(), .a_row_src = rows_of.ptr(), .weight = groups[0], .experts = dgroups.ptr(),
                               .expert_offsets = offsets.ptr(), .num_experts = G, .tile_scratch = tiles.ptr(), .y_row = rows_of.ptr(),
                               .y = ysplit.ptr(), .y_ld = N, .rows = G * S, .split_scratch = part.ptr()},
                              Stream{});
            EXPECT_EQ(differing_words(ysplit.host(size_t(S * G * N)), want), 0u) << S << " rows: grouped split form";
        }
        // One dense launch per group over its rows in bf16 (group after group).
        for (cuda::DensePath path : {cuda::DensePath::kAuto, cuda::DensePath::kClassic}) {
            Dev<uint16_t> gb(size_t(S * G * K));
            Dev<float> dense(size_t(S * G * N));
            for (int64_t g = 0; g < G; ++g) {
                cuda::to_bf16({.x = dx.ptr() + g * K, .x_ld = G * K, .rows = S, .cols = K, .out = gb.ptr() + g * S * K}, Stream{});
                cuda::fast_linear({.a = gb.ptr() + g * S * K, .weight = groups[size_t(g)], .y = dense.ptr() + g * N, .y_ld = G * N,
                                   .rows = S, .dense_path = path},
                                  Stream{});
            }
            const std::vector<float> got = dense.host(size_t(S * G * N));
            EXPECT_EQ(differing_words(got, want), 0u) << S << " rows, dense path " << int(path);
        }
        // Against a double-precision reference: 8 rows of group 3 (bf16 products exact, f32 sums in another order).
        const int64_t g = 3;
        const uint16_t* wb = reinterpret_cast<const uint16_t*>(w.w.data());
        std::vector<float> ref, gotg;
        std::vector<int64_t> check_rows = {0, S / 3, S / 2, S - 1};
        if (S >= 16) check_rows.insert(check_rows.end(), {1, 7, S - 9, S - 2});
        for (int64_t r : check_rows)
            for (int64_t n = 0; n < N; ++n) {
                double acc = 0;
                for (int64_t k = 0; k < K; ++k)
                    acc += double(x[size_t((r * G + g) * K + k)]) * double(bf16_to_f32(wb[size_t((g * N + n) * K + k)]));
                ref.push_back(float(acc));
                gotg.push_back(want[size_t((r * G + g) * N + n)]);
            }
        EXPECT_LT(rel_err(ref, gotg), 1e-5) << S << " rows";
    }
}

// Routed experts: T tokens, top-k of E FP4 experts, grouped by expert like permute().
struct Routing {
    std::vector<int32_t> src, slot, offsets;  // per pair (grouped order): token, slot t*k+j; expert offsets
};
Routing route_tokens(const std::vector<std::vector<int32_t>>& ids, int64_t E) {
    Routing r;
    r.offsets.push_back(0);
    for (int64_t e = 0; e < E; ++e) {
        for (size_t t = 0; t < ids.size(); ++t)
            for (size_t j = 0; j < ids[t].size(); ++j)
                if (ids[t][j] == e) {
                    r.src.push_back(int32_t(t));
                    r.slot.push_back(int32_t(t * ids[t].size() + j));
                }
        r.offsets.push_back(int32_t(r.src.size()));
    }
    return r;
}

// Output [T*top, N] in slot order.
std::vector<float> run_grouped(const std::vector<std::unique_ptr<Weight>>& ws, const std::vector<float>& x,
                               const std::vector<std::vector<int32_t>>& ids) {
    const int64_t E = int64_t(ws.size()), T = int64_t(ids.size()), top = int64_t(ids[0].size());
    const int64_t N = ws[0]->dev.out_features, K = ws[0]->dev.in_features;
    std::vector<cuda::DeviceLinear> descs;
    for (const auto& w : ws) descs.push_back(w->dev);
    const Routing r = route_tokens(ids, E);
    Dev<float> dx(x), dy(size_t(T * top * N));
    Dev<cuda::DeviceLinear> dd(descs);
    Dev<int32_t> dsrc(r.src), dslot(r.slot), doff(r.offsets), tiles(size_t(E + 1));
    FastInput in(dx, T, K, false);
    cuda::fast_linear({.a = in.q->ptr(), .a_scale = in.s->ptr(), .a_row_src = dsrc.ptr(), .weight = descs[0], .experts = dd.ptr(),
                       .expert_offsets = doff.ptr(), .num_experts = E, .tile_scratch = tiles.ptr(), .y_row = dslot.ptr(),
                       .y = dy.ptr(), .y_ld = N, .rows = T * top},
                      Stream{});
    return dy.host(size_t(T * top * N));
}

TEST_F(CudaGemmFast, GroupedExpertsMatchCpuAndAreBatchInvariant) {
    const int64_t E = 16, top = 6, N = 512, K = 1024, T = 70;
    std::vector<std::unique_ptr<Weight>> ws;
    for (int64_t e = 0; e < E; ++e) ws.push_back(std::make_unique<Weight>(cpu::WeightFormat::kFp4, N, K, 200 + uint32_t(e)));
    const auto x = bf16_randn(size_t(T * K), 201);
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(T));
    for (auto& v : ids)
        while (int64_t(v.size()) < top) {
            const int32_t e = int32_t(rng() % uint32_t(E));
            if (std::find(v.begin(), v.end(), e) == v.end()) v.push_back(e);
        }
    const auto full = run_grouped(ws, x, ids);
    // Against the CPU, expert by expert.
    std::vector<float> ref(full.size());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < top; ++j)
            cpu::linear({.x = TensorView(const_cast<float*>(x.data()) + t * K, DType::kF32, {1, K}),
                         .weight = &ws[size_t(ids[size_t(t)][size_t(j)])]->host,
                         .y = TensorView(ref.data() + (t * top + j) * N, DType::kF32, {1, N}), .quantize_activations = true});
    const double err = rel_err(ref, full);
    EXPECT_LT(err, 5e-4);
    std::printf("grouped fast vs CPU: rel err %.3g\n", err);
    // A token alone, and 3 tokens, give the same rows as inside the 70-token batch (other tile shapes).
    for (const auto& [t0, n] : {std::pair<int64_t, int64_t>{0, 1}, {33, 3}, {10, 60}}) {
        const std::vector<std::vector<int32_t>> sub(ids.begin() + t0, ids.begin() + t0 + n);
        const std::vector<float> xs(x.begin() + t0 * K, x.begin() + (t0 + n) * K);
        const auto part = run_grouped(ws, xs, sub);
        EXPECT_EQ(0, std::memcmp(part.data(), full.data() + t0 * top * N, size_t(n * top * N) * 4))
            << "tokens [" << t0 << ", " << t0 + n << ")";
    }
}

// Hopper's two FP4 kernels (registers vs shared-memory conversion, gemm_fast.h Fp4Path): the same
// per-element arithmetic, so the same bits, at every tile shape the register kernel picks (TN 8..128).
TEST_F(CudaGemmFast, Fp4RegisterKernelEqualsSharedConvertKernel) {
    const std::pair<int64_t, int64_t> shapes[] = {{2048, 4096}, {4096, 2048}, {256, 1024}};
    const int64_t rows_list[] = {1, 3, 9, 40, 100, 300};
    uint32_t seed = 900;
    for (const auto& [N, K] : shapes) {
        Weight w(cpu::WeightFormat::kFp4, N, K, seed++, 110, 18);  // scales over 18 binades: shifts up to 15
        for (int64_t rows : rows_list) {
            const auto x = bf16_randn(size_t(rows * K), seed++);
            const auto rs = run_fast(w, x, rows, false, cuda::Fp4Path::kAuto);
            const auto sm = run_fast(w, x, rows, false, cuda::Fp4Path::kSharedConvert);
            EXPECT_EQ(differing_words(rs, sm), 0u) << N << "x" << K << ", " << rows << " rows";
            const auto rs_round = run_fast(w, x, rows, true, cuda::Fp4Path::kAuto);
            size_t bad = 0;
            for (size_t i = 0; i < rs.size(); ++i)
                if (rs_round[i] != cpu::round_bf16(rs[i])) ++bad;
            EXPECT_EQ(bad, 0u) << "bf16 output rounding";
        }
    }
    // Every tile configuration of the register kernel pinned: the same bits.
    Weight w(cpu::WeightFormat::kFp4, 512, 2048, seed++, 110, 18);
    const int64_t rows = 150;
    const auto x = bf16_randn(size_t(rows * 2048), seed++);
    const auto sm = run_fast(w, x, rows, false, cuda::Fp4Path::kSharedConvert);
    for (int v = 0; v < cuda::kFp4RsVariants; ++v)
        EXPECT_EQ(differing_words(run_fast(w, x, rows, false, cuda::Fp4Path::kAuto, v), sm), 0u)
            << "configuration " << cuda::fp4_rs_variant_name(v);
}

// Grouped FP4 experts with given row counts (0, 1, 7, 64, 300, ...): pairs (expert, token) in expert
// order; output [pairs, N] in that order, or scattered through y_row when `scatter`.
struct Groups {
    std::vector<int32_t> src, offsets;
};
Groups make_groups(const std::vector<std::vector<int32_t>>& tokens_of_expert) {
    Groups g;
    g.offsets.push_back(0);
    for (const auto& t : tokens_of_expert) {
        g.src.insert(g.src.end(), t.begin(), t.end());
        g.offsets.push_back(int32_t(g.src.size()));
    }
    return g;
}
std::vector<float> run_groups(const std::vector<std::unique_ptr<Weight>>& ws, const Dev<uint8_t>& xq, const Dev<float>& xs,
                              const Groups& g, cuda::Fp4Path path, bool scatter = false, int variant = -1) {
    const int64_t E = int64_t(ws.size()), NP = int64_t(g.src.size());
    const int64_t N = ws[0]->dev.out_features;
    std::vector<cuda::DeviceLinear> descs;
    for (const auto& w : ws) descs.push_back(w->dev);
    std::vector<int32_t> yrow(static_cast<size_t>(NP));  // reversed order: exercises y_row
    for (int64_t i = 0; i < NP; ++i) yrow[size_t(i)] = int32_t(NP - 1 - i);
    Dev<cuda::DeviceLinear> dd(descs);
    Dev<int32_t> dsrc(g.src.empty() ? std::vector<int32_t>{0} : g.src), doff(g.offsets), tiles(size_t(E + 1)), dyrow(yrow.empty() ? std::vector<int32_t>{0} : yrow);
    Dev<float> dy(size_t(std::max<int64_t>(NP, 1) * N));
    cuda::fast_linear({.a = xq.ptr(), .a_scale = xs.ptr(), .a_row_src = dsrc.ptr(), .weight = descs[0], .experts = dd.ptr(),
                       .expert_offsets = doff.ptr(), .num_experts = E, .tile_scratch = tiles.ptr(),
                       .y_row = scatter ? dyrow.ptr() : nullptr, .y = dy.ptr(), .y_ld = N, .rows = NP, .fp4_path = path,
                       .fp4_rs_variant = variant},
                      Stream{});
    auto out = dy.host(size_t(NP * N));
    if (!scatter) return out;
    std::vector<float> ordered(out.size());
    for (int64_t i = 0; i < NP; ++i)
        std::copy_n(out.begin() + (NP - 1 - i) * N, N, ordered.begin() + i * N);
    return ordered;
}

TEST_F(CudaGemmFast, GroupedFp4ExpertsOfManySizes) {
    const int64_t N = 256, K = 1024, T = 420;
    const std::vector<int64_t> counts = {0, 1, 7, 64, 300, 0, 13};
    const int64_t E = int64_t(counts.size());
    std::vector<std::unique_ptr<Weight>> ws;
    for (int64_t e = 0; e < E; ++e)
        ws.push_back(std::make_unique<Weight>(cpu::WeightFormat::kFp4, N, K, 300 + uint32_t(e), e % 2 ? 110 : 122, e % 2 ? 18 : 4));
    const auto x = bf16_randn(size_t(T * K), 301);
    Dev<float> dx(x);
    FastInput in(dx, T, K, false);
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> tok(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
        for (int64_t i = 0; i < counts[size_t(e)]; ++i) tok[size_t(e)].push_back(int32_t(rng() % uint32_t(T)));
    const Groups all = make_groups(tok);
    const auto rs = run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kAuto);
    const auto sm = run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kSharedConvert);
    EXPECT_EQ(differing_words(rs, sm), 0u) << "register vs shared-memory conversion kernel";
    EXPECT_EQ(differing_words(rs, run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kAuto, true)), 0u) << "y_row scatter";
    for (int v = 0; v < cuda::kFp4RsVariants; ++v)
        EXPECT_EQ(differing_words(rs, run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kAuto, false, v)), 0u)
            << "configuration " << cuda::fp4_rs_variant_name(v);
    // Against the CPU, pair by pair.
    std::vector<float> ref(rs.size());
    for (int64_t e = 0, p = 0; e < E; ++e)
        for (int32_t t : tok[size_t(e)]) {
            cpu::linear({.x = TensorView(const_cast<float*>(x.data()) + int64_t(t) * K, DType::kF32, {1, K}),
                         .weight = &ws[size_t(e)]->host, .y = TensorView(ref.data() + p * N, DType::kF32, {1, N}),
                         .quantize_activations = true});
            ++p;
        }
    const double err = rel_err(ref, rs);
    EXPECT_LT(err, 5e-3);  // half the experts with scales over 18 binades (the documented rounding)
    std::printf("grouped FP4, experts of 0..300 rows, fast vs CPU: rel err %.3g\n", err);
    // Batch invariance: the 300-row expert's rows alone, among a few other rows, and next to a large
    // other expert (128-token tiles) equal their rows in the full launch (64-token tiles) bit for bit.
    const int64_t first4 = all.offsets[4];
    auto rows_of = [&](const std::vector<float>& out, int64_t p0, int64_t n) {
        return std::vector<float>(out.begin() + p0 * N, out.begin() + (p0 + n) * N);
    };
    const auto want = [&](int64_t i0, int64_t n) { return rows_of(rs, first4 + i0, n); };
    {
        std::vector<std::vector<int32_t>> t(static_cast<size_t>(E));
        t[4] = {tok[4][123]};
        EXPECT_EQ(differing_words(run_groups(ws, *in.q, *in.s, make_groups(t), cuda::Fp4Path::kAuto), want(123, 1)), 0u)
            << "a row alone";
    }
    {
        std::vector<std::vector<int32_t>> t(static_cast<size_t>(E));
        t[2] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        t[4].assign(tok[4].begin() + 40, tok[4].begin() + 150);
        const Groups g = make_groups(t);
        EXPECT_EQ(differing_words(rows_of(run_groups(ws, *in.q, *in.s, g, cuda::Fp4Path::kAuto), g.offsets[4], 110), want(40, 110)), 0u)
            << "rows 40..150 among other neighbours";
    }
    {
        std::vector<std::vector<int32_t>> t(static_cast<size_t>(E));
        for (int32_t i = 0; i < 400; ++i) t[1].push_back(i);
        t[4] = tok[4];
        const Groups g = make_groups(t);
        EXPECT_EQ(differing_words(rows_of(run_groups(ws, *in.q, *in.s, g, cuda::Fp4Path::kAuto), g.offsets[4], 300), want(0, 300)), 0u)
            << "all 300 rows next to a 400-row expert";
    }
}

// The warp-specialized FP4 kernel (gemm_wgmma_fp4ws.cuh) picks its wgmma width per block from the
// tile's rows (32, 64, 96, 128): experts whose row counts straddle every width, and one longer than a
// tile, equal the shared-memory kernel bit for bit (each pipeline depth pinned, K tiles wrapping the
// stage ring several times), match the CPU, and a row alone (a 32-wide block) equals its row inside a
// full 128-row tile.
TEST_F(CudaGemmFast, Fp4WarpSpecializedKernelEveryTileWidth) {
    const int64_t N = 256, K = 2048, T = 300;
    const std::vector<int64_t> counts = {1, 31, 33, 64, 65, 96, 97, 128, 129, 300};
    const int64_t E = int64_t(counts.size());
    std::vector<std::unique_ptr<Weight>> ws;
    for (int64_t e = 0; e < E; ++e)
        ws.push_back(std::make_unique<Weight>(cpu::WeightFormat::kFp4, N, K, 500 + uint32_t(e), e % 2 ? 110 : 122, e % 2 ? 18 : 4));
    const auto x = bf16_randn(size_t(T * K), 501);
    Dev<float> dx(x);
    FastInput in(dx, T, K, false);
    std::mt19937 rng(11);
    std::vector<std::vector<int32_t>> tok(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
        for (int64_t i = 0; i < counts[size_t(e)]; ++i) tok[size_t(e)].push_back(int32_t(rng() % uint32_t(T)));
    const Groups all = make_groups(tok);
    const auto sm = run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kSharedConvert);
    int tested = 0;
    for (int v = 0; v < cuda::kFp4RsVariants; ++v) {
        if (std::string(cuda::fp4_rs_variant_name(v)).rfind("ws", 0) != 0) continue;
        ++tested;
        const auto got = run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kAuto, true, v);
        EXPECT_EQ(differing_words(got, sm), 0u) << "configuration " << cuda::fp4_rs_variant_name(v);
        // A row alone: one 32-wide block; in the full launch it sits in a 128-row tile.
        std::vector<std::vector<int32_t>> t(static_cast<size_t>(E));
        t[9] = {tok[9][77]};
        const auto alone = run_groups(ws, *in.q, *in.s, make_groups(t), cuda::Fp4Path::kAuto, false, v);
        const int64_t p77 = all.offsets[9] + 77;
        EXPECT_EQ(differing_words(alone, std::vector<float>(sm.begin() + p77 * N, sm.begin() + (p77 + 1) * N)), 0u)
            << "a row alone, configuration " << cuda::fp4_rs_variant_name(v);
    }
    EXPECT_GE(tested, 1) << "no warp-specialized configuration";
    // The default choice (about 100 rows per expert: this kernel) against the CPU: the experts of 33 and
    // 97 rows (partial 64- and 128-wide blocks).
    const auto ws_default = run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kAuto);
    EXPECT_EQ(differing_words(ws_default, sm), 0u) << "default configuration";
    std::vector<float> ref, got;
    for (int64_t e : {2, 6}) {
        for (size_t i = 0; i < tok[size_t(e)].size(); ++i) {
            std::vector<float> y(static_cast<size_t>(N));
            cpu::linear({.x = TensorView(const_cast<float*>(x.data()) + int64_t(tok[size_t(e)][i]) * K, DType::kF32, {1, K}),
                         .weight = &ws[size_t(e)]->host, .y = TensorView(y.data(), DType::kF32, {1, N}),
                         .quantize_activations = true});
            ref.insert(ref.end(), y.begin(), y.end());
            const int64_t p = all.offsets[size_t(e)] + int64_t(i);
            got.insert(got.end(), ws_default.begin() + p * N, ws_default.begin() + (p + 1) * N);
        }
    }
    const double err = rel_err(ref, got);
    EXPECT_LT(err, 5e-3);  // half the experts with scales over 18 binades
    std::printf("warp-specialized FP4 kernel, experts of 1..300 rows: bit-identical to the shared-memory kernel; vs CPU rel err %.3g\n",
                err);
}

// The warp-specialized FP4 kernel with one or two producer warpgroups (two: producer p converts the K
// tiles kt = p mod 2) and its tile-to-expert lookup (each lane counts a strided share of the experts):
// 70 experts (more than two warps' width, so the count wraps), empty ones among them, K tiles few (2:
// one per producer) and not a multiple of either stage ring (10), and half the experts with ue8m0 scales
// of 0 and 1 (128-blocks whose largest scale is 2^-127: the subnormal promotion scale), and some experts'
// scales at an address 8 bytes past a 16-byte boundary equal the shared-memory kernel bit for bit in every
// warp-specialized configuration.
TEST_F(CudaGemmFast, Fp4WarpSpecializedProducersManyExpertsAndTinyScales) {
    const int64_t N = 256, T = 200, E = 70;
    for (const int64_t K : {int64_t(256), int64_t(1280)}) {
        std::vector<std::unique_ptr<Weight>> ws;
        std::vector<std::unique_ptr<DeviceBuffer>> shifted;
        for (int64_t e = 0; e < E; ++e) {
            ws.push_back(std::make_unique<Weight>(cpu::WeightFormat::kFp4, N, K, 700 + uint32_t(e), e % 2 ? 0 : 120, e % 2 ? 2 : 6));
            if (e % 5 == 2) {
                // Scales 8 bytes past a 16-byte boundary: the warp-specialized kernel copies them 4 bytes per
                // K tile instead of 16 per 4 K tiles.
                std::vector<uint8_t> h(ws.back()->s.size() + 16, 0);
                std::copy(ws.back()->s.begin(), ws.back()->s.end(), h.begin() + 8);
                shifted.push_back(std::make_unique<DeviceBuffer>(h.size()));
                shifted.back()->copy_from_host(h.data(), h.size());
                ws.back()->dev.scale = static_cast<uint8_t*>(shifted.back()->data()) + 8;
            }
        }
        const auto x = bf16_randn(size_t(T * K), 701);
        Dev<float> dx(x);
        FastInput in(dx, T, K, false);
        std::mt19937 rng(13);
        std::vector<std::vector<int32_t>> tok(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) {
            const uint32_t n = e % 7 == 3 ? 0u : rng() % 150u;
            for (uint32_t i = 0; i < n; ++i) tok[size_t(e)].push_back(int32_t(rng() % uint32_t(T)));
        }
        const Groups all = make_groups(tok);
        const auto sm = run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kSharedConvert);
        int tested = 0;
        for (int v = 0; v < cuda::kFp4RsVariants; ++v) {
            if (std::string(cuda::fp4_rs_variant_name(v)).rfind("ws", 0) != 0) continue;
            ++tested;
            EXPECT_EQ(differing_words(run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kAuto, true, v), sm), 0u)
                << "K " << K << ", configuration " << cuda::fp4_rs_variant_name(v);
        }
        EXPECT_GE(tested, 3) << "the warp-specialized configurations (one and two producer warpgroups)";
        EXPECT_EQ(differing_words(run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kAuto), sm), 0u) << "K " << K << ", default";
    }
}

// The decode FP4 kernel (gemm_wgmma_fp4dec.cuh) picks its wgmma width per block from the tile's rows
// (8, 16, 32, 64) inside tiles of up to 16/32/64 rows: experts whose row counts straddle every width,
// empty ones, and ones longer than a tile equal the shared-memory kernel bit for bit in every decode
// configuration (K = 2048: the stage ring wraps; 1 and 2 K tiles per stage), and a row alone (an 8-wide
// block) equals its row inside a full tile; the default choice at decode-sized averages too.
TEST_F(CudaGemmFast, Fp4DecodeKernelEveryWidth) {
    const int64_t N = 256, K = 2048, T = 200;
    const std::vector<int64_t> counts = {1, 7, 8, 9, 0, 16, 17, 31, 32, 33, 63, 64, 65, 130, 2};
    const int64_t E = int64_t(counts.size());
    std::vector<std::unique_ptr<Weight>> ws;
    for (int64_t e = 0; e < E; ++e)
        ws.push_back(std::make_unique<Weight>(cpu::WeightFormat::kFp4, N, K, 700 + uint32_t(e), e % 2 ? 110 : 122, e % 2 ? 18 : 4));
    const auto x = bf16_randn(size_t(T * K), 701);
    Dev<float> dx(x);
    FastInput in(dx, T, K, false);
    std::mt19937 rng(13);
    std::vector<std::vector<int32_t>> tok(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
        for (int64_t i = 0; i < counts[size_t(e)]; ++i) tok[size_t(e)].push_back(int32_t(rng() % uint32_t(T)));
    const Groups all = make_groups(tok);
    const auto sm = run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kSharedConvert);
    const int64_t e_big = 13, r_big = 100;  // a row of the 130-row expert: in a full tile of every configuration
    const int64_t p_big = all.offsets[size_t(e_big)] + r_big;
    int tested = 0;
    for (int v = 0; v < cuda::kFp4RsVariants; ++v) {
        if (std::string(cuda::fp4_rs_variant_name(v)).rfind("dec", 0) != 0) continue;
        ++tested;
        EXPECT_EQ(differing_words(run_groups(ws, *in.q, *in.s, all, cuda::Fp4Path::kAuto, true, v), sm), 0u)
            << "configuration " << cuda::fp4_rs_variant_name(v);
        std::vector<std::vector<int32_t>> t(static_cast<size_t>(E));
        t[size_t(e_big)] = {tok[size_t(e_big)][size_t(r_big)]};
        const auto alone = run_groups(ws, *in.q, *in.s, make_groups(t), cuda::Fp4Path::kAuto, false, v);
        EXPECT_EQ(differing_words(alone, std::vector<float>(sm.begin() + p_big * N, sm.begin() + (p_big + 1) * N)), 0u)
            << "a row alone, configuration " << cuda::fp4_rs_variant_name(v);
    }
    EXPECT_GE(tested, 1) << "no decode configuration";
    // The default choice at a decode-sized average (one row for each of 200 experts).
    std::vector<std::unique_ptr<Weight>> many;
    const int64_t E2 = 200;
    for (int64_t e = 0; e < E2; ++e)
        many.push_back(std::make_unique<Weight>(cpu::WeightFormat::kFp4, N, K, 800 + uint32_t(e), e % 2 ? 110 : 122, e % 2 ? 18 : 4));
    std::vector<std::vector<int32_t>> t1(static_cast<size_t>(E2));
    for (int64_t e = 0; e < E2; ++e) t1[size_t(e)] = {int32_t((e * 7) % T)};
    t1[5].push_back(3);  // one expert with two rows
    const Groups g1 = make_groups(t1);
    const auto def = run_groups(many, *in.q, *in.s, g1, cuda::Fp4Path::kAuto, true);
    EXPECT_EQ(differing_words(def, run_groups(many, *in.q, *in.s, g1, cuda::Fp4Path::kSharedConvert)), 0u) << "default choice";
    std::vector<float> ref;
    for (int64_t e = 0; e < 4; ++e)
        for (int32_t tk : t1[size_t(e)]) {
            std::vector<float> y(static_cast<size_t>(N));
            cpu::linear({.x = TensorView(const_cast<float*>(x.data()) + int64_t(tk) * K, DType::kF32, {1, K}),
                         .weight = &many[size_t(e)]->host, .y = TensorView(y.data(), DType::kF32, {1, N}),
                         .quantize_activations = true});
            ref.insert(ref.end(), y.begin(), y.end());
        }
    const double err = rel_err(ref, std::vector<float>(def.begin(), def.begin() + int64_t(ref.size())));
    EXPECT_LT(err, 5e-3);
    std::printf("decode FP4 kernel, experts of 0..130 rows: bit-identical to the shared-memory kernel; vs CPU rel err %.3g\n", err);
}

// FastLinearParams::experts2: two weight sets over the same grouped rows (w1 and w3 of the experts),
// in one launch (the FP4 decode kernel: the second set's blocks after the first's) or two (every other
// configuration), equal two separate launches bit for bit, scattered through y_row, and the tile table
// the call leaves behind serves a later launch (tile_rows_out -> tile_rows_given).
TEST_F(CudaGemmFast, Fp4TwoWeightSetsEqualTwoLaunches) {
    const int64_t N = 256, K = 2048, T = 80;
    const std::vector<int64_t> counts = {1, 0, 9, 33, 2, 64, 1, 70};
    const int64_t E = int64_t(counts.size());
    std::vector<std::unique_ptr<Weight>> w1, w3;
    for (int64_t e = 0; e < E; ++e) {
        w1.push_back(std::make_unique<Weight>(cpu::WeightFormat::kFp4, N, K, 900 + uint32_t(e), e % 2 ? 110 : 122, e % 2 ? 18 : 4));
        w3.push_back(std::make_unique<Weight>(cpu::WeightFormat::kFp4, N, K, 950 + uint32_t(e), e % 2 ? 122 : 110, e % 2 ? 4 : 18));
    }
    const auto x = bf16_randn(size_t(T * K), 901);
    Dev<float> dx(x);
    FastInput in(dx, T, K, false);
    std::mt19937 rng(17);
    std::vector<std::vector<int32_t>> tok(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
        for (int64_t i = 0; i < counts[size_t(e)]; ++i) tok[size_t(e)].push_back(int32_t(rng() % uint32_t(T)));
    const Groups g = make_groups(tok);
    const int64_t NP = int64_t(g.src.size());
    std::vector<cuda::DeviceLinear> d1, d3;
    for (int64_t e = 0; e < E; ++e) {
        d1.push_back(w1[size_t(e)]->dev);
        d3.push_back(w3[size_t(e)]->dev);
    }
    std::vector<int32_t> yrow(static_cast<size_t>(NP));
    for (int64_t i = 0; i < NP; ++i) yrow[size_t(i)] = int32_t(NP - 1 - i);
    Dev<cuda::DeviceLinear> dd1(d1), dd3(d3);
    Dev<int32_t> dsrc(g.src), doff(g.offsets), tiles(size_t(E + 1)), dyrow(yrow);
    auto unscatter = [&](const std::vector<float>& out) {
        std::vector<float> ordered(out.size());
        for (int64_t i = 0; i < NP; ++i) std::copy_n(out.begin() + (NP - 1 - i) * N, N, ordered.begin() + i * N);
        return ordered;
    };
    std::vector<int> variants = {-1};
    for (int v = 0; v < cuda::kFp4RsVariants; ++v)
        if (std::string(cuda::fp4_rs_variant_name(v)).rfind("dec", 0) == 0 || v == 5) variants.push_back(v);
    for (const cuda::Fp4Path path : {cuda::Fp4Path::kAuto, cuda::Fp4Path::kSharedConvert})
        for (const int v : variants) {
            if (path == cuda::Fp4Path::kSharedConvert && v != -1) continue;
            Dev<float> y(size_t(NP * N)), y2(size_t(NP * N));
            int tile_rows = 0;
            cuda::FastLinearParams f{.a = in.q->ptr(), .a_scale = in.s->ptr(), .a_row_src = dsrc.ptr(), .weight = d1[0],
                                     .experts = dd1.ptr(), .expert_offsets = doff.ptr(), .num_experts = E,
                                     .tile_scratch = tiles.ptr(), .y_row = dyrow.ptr(), .y = y.ptr(), .y_ld = N, .rows = NP,
                                     .fp4_path = path, .fp4_rs_variant = v};
            f.tile_rows_out = &tile_rows;
            f.experts2 = dd3.ptr();
            f.y2 = y2.ptr();
            cuda::fast_linear(f, Stream{});
            const std::string what = std::string(path == cuda::Fp4Path::kAuto ? "" : "shared-convert ") + cuda::fp4_rs_variant_name(v);
            EXPECT_EQ(differing_words(unscatter(y.host(size_t(NP * N))), run_groups(w1, *in.q, *in.s, g, path, false, v)), 0u)
                << "first set, " << what;
            const auto second = run_groups(w3, *in.q, *in.s, g, path, false, v);
            EXPECT_EQ(differing_words(unscatter(y2.host(size_t(NP * N))), second), 0u) << "second set, " << what;
            EXPECT_GT(tile_rows, 0) << what;
            // The table left in `tiles` serves another launch of the same tiles without being rebuilt.
            Dev<float> y3(size_t(NP * N));
            cuda::FastLinearParams f3 = f;
            f3.experts = dd3.ptr();
            f3.experts2 = nullptr;
            f3.y2 = nullptr;
            f3.y = y3.ptr();
            f3.tile_rows_out = nullptr;
            f3.tile_rows_given = tile_rows;
            cuda::fast_linear(f3, Stream{});
            EXPECT_EQ(differing_words(unscatter(y3.host(size_t(NP * N))), second), 0u) << "kept tile table, " << what;
        }
}

}  // namespace
}  // namespace deepinfer
