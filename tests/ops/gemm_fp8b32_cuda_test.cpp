// SPDX-License-Identifier: Apache-2.0
// The fast GEMM for FP8 weights with 32x32 block scales (DeepSeek-V4.1's dense linears; native wgmma
// kernel on Hopper, gemm_wgmma_fp8b32.cuh) against the CPU reference of the same linear (act_quant per
// 32, e4m3 x e4m3 products, per-32 scales): relative error norm below 5e-4 at V4.1's real shapes
// (hidden 5120, q_lora 1280, 64x512 heads, o_groups 8 x 1024, shared expert 2304), with ue8m0 and f32
// scales spread over 16 binades between blocks and activations whose 32-blocks differ by up to 2^12 (a
// block scale applied to the wrong rows, columns or k-blocks fails by orders of magnitude); act_quant
// per 32 bit for bit; batch invariance bit for bit (a row alone, in small and in large batches, both
// tile widths). Skips without a GPU, and off Hopper (there the V4.1 fast mode runs those weights as
// bf16; fast_linear_supported says so, checked on every device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/bf16_weights.h"
#include "backends/cuda/model/cuda_weights.h"
#include "deepinfer/float_formats.h"
#include "ops/cuda_test_util.h"

namespace deepinfer {
namespace {

using cuda::DeviceBuffer;
using cuda::Stream;
using test::Dev;

// bf16 values with a random power-of-two factor per 32-block (2^-6 .. 2^6) and a few zero blocks.
std::vector<float> activations(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(size_t(rows * cols));
    for (int64_t b = 0; b < rows * cols / 32; ++b) {
        const uint32_t r = rng();
        const float f = r % 97 == 0 ? 0.0f : std::ldexp(1.0f, int(r % 13) - 6);
        for (int64_t i = 0; i < 32; ++i) v[size_t(b * 32 + i)] = cpu::round_bf16(nd(rng) * f);
    }
    return v;
}

// A random FP8 e4m3 weight [out, in] with 32x32 block scales (ue8m0, or f32 powers of two), host + device.
struct Fp8B32Weight {
    std::vector<uint8_t> w, s;
    cpu::LinearWeight host;
    std::unique_ptr<DeviceBuffer> dw, ds;
    cuda::DeviceLinear dev;
    // f32 scales: 2^(f32_exp_base .. f32_exp_base + 15), or (f32_any) such times 1 + j/256 (no powers of two).
    Fp8B32Weight(int64_t out, int64_t in, uint32_t seed, bool f32_scales = false, int f32_exp_base = -14, bool f32_any = false) {
        std::mt19937 rng(seed);
        w.resize(size_t(out * in));
        for (uint8_t& b : w) {
            b = uint8_t(rng());
            if ((b & 0x7F) == 0x7F) b = 0x3E;  // no NaN codes
        }
        const Shape sshape{(out + 31) / 32, (in + 31) / 32};
        const size_t ns = size_t(sshape.numel());
        if (f32_scales) {
            s.resize(ns * 4);
            for (size_t i = 0; i < ns; ++i) {
                float f = std::ldexp(1.0f, int(rng() % 16) + f32_exp_base);
                if (f32_any) f *= 1.0f + float(1 + rng() % 255) / 256.0f;
                std::memcpy(s.data() + 4 * i, &f, 4);
            }
        } else {
            s.resize(ns);
            for (uint8_t& b : s) b = uint8_t(112 + rng() % 16);  // 2^-15 .. 2^0
        }
        host = cpu::make_linear_weight(TensorView(w.data(), DType::kF8E4M3, {out, in}),
                                       TensorView(s.data(), f32_scales ? DType::kF32 : DType::kF8E8M0, sshape), out, in, 32, 32);
        dw = std::make_unique<DeviceBuffer>(w.size());
        dw->copy_from_host(w.data(), w.size());
        ds = std::make_unique<DeviceBuffer>(s.size());
        ds->copy_from_host(s.data(), s.size());
        dev = cuda::device_linear_like(host, dw->data(), ds->data());
    }
};

double rel_err(const std::vector<float>& ref, const std::vector<float>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        const double d = double(got[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

std::vector<float> cpu_reference(const Fp8B32Weight& w, const std::vector<float>& x, int64_t rows) {
    std::vector<float> y(size_t(rows * w.dev.out_features));
    cpu::linear({.x = TensorView(const_cast<float*>(x.data()), DType::kF32, {rows, w.dev.in_features}),
                 .weight = &w.host,
                 .y = TensorView(y.data(), DType::kF32, {rows, w.dev.out_features}),
                 .quantize_activations = true,
                 .activation_block = 32});
    return y;
}

// act_quant_fp8 per 32 then the fast GEMM; y [rows, N] f32 (bf16 values with `round`).
std::vector<float> run_fast(const Fp8B32Weight& w, const std::vector<float>& x, int64_t rows, bool round = false) {
    const int64_t K = w.dev.in_features, N = w.dev.out_features;
    Dev<float> dx(x), dy(size_t(rows * N)), ds(size_t(rows * K / 32));
    Dev<uint8_t> dq(size_t(rows * K));
    cuda::act_quant_fp8({.x = dx.ptr(), .x_ld = K, .rows = rows, .cols = K, .q = dq.ptr(), .scale = ds.ptr(), .block = 32}, Stream{});
    cuda::fast_linear({.a = dq.ptr(), .a_scale = ds.ptr(), .weight = w.dev, .y = dy.ptr(), .y_ld = N, .rows = rows,
                       .round_output_bf16 = round},
                      Stream{});
    return dy.host(size_t(rows * N));
}

class CudaGemmFp8B32 : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

TEST_F(CudaGemmFp8B32, SupportedExactlyWhereTheNativeKernelRuns) {
    Fp8B32Weight w(96, 256, 1);
    EXPECT_EQ(cuda::fast_linear_supported(w.dev), cuda::fast_fp8_b32_available());
    cuda::DeviceLinear odd = w.dev;
    odd.in_features = 224;  // not a multiple of 128: never
    EXPECT_FALSE(cuda::fast_linear_supported(odd));
}

TEST_F(CudaGemmFp8B32, ActQuantPer32EqualsActQuantDequant) {
    const int64_t rows = 5, cols = 1280;
    auto x = activations(rows, cols, 3);
    for (int64_t i = 0; i < 32; ++i) x[size_t(64 + i)] = 1e-7f * float(i);  // a tiny block: amax floor 1e-4
    Dev<float> dx(x), dref(x.size());
    cuda::act_quant_dequant({.x = dx.ptr(), .out = dref.ptr(), .rows = rows, .cols = cols, .block = 32}, Stream{});
    const std::vector<int32_t> src = {4, 0, 2, 2, 1};
    Dev<int32_t> dsrc(src);
    Dev<uint8_t> q(size_t(rows * cols));
    Dev<float> s(size_t(rows * cols / 32));
    cuda::act_quant_fp8({.x = dx.ptr(), .x_ld = cols, .row_src = dsrc.ptr(), .rows = rows, .cols = cols, .q = q.ptr(),
                         .scale = s.ptr(), .block = 32},
                        Stream{});
    const auto ref = dref.host(x.size());
    const auto hq = q.host(size_t(rows * cols));
    const auto hs = s.host(size_t(rows * cols / 32));
    size_t bad = 0, scales_differ = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const float got = e4m3_to_f32(hq[size_t(r * cols + c)]) * hs[size_t(r * (cols / 32) + c / 32)];
            const float want = ref[size_t(src[size_t(r)] * cols + c)];
            if (std::memcmp(&got, &want, 4) != 0) ++bad;
            if (c % 32 == 0 && c > 0 && hs[size_t(r * (cols / 32) + c / 32)] != hs[size_t(r * (cols / 32) + c / 32 - 1)])
                ++scales_differ;
        }
    EXPECT_EQ(bad, 0u);
    EXPECT_GT(scales_differ, size_t(rows * cols / 64)) << "the per-32 scales vary";
}

struct Case {
    const char* name;
    int64_t rows, out, in;
    bool f32_scales = false;
};

TEST_F(CudaGemmFp8B32, MatchesCpuReferenceAtV41Shapes) {
    if (!cuda::fast_fp8_b32_available()) GTEST_SKIP() << "the native FP8 32x32 kernel needs sm_90";
    const Case cases[] = {
        {"wq_a decode", 1, 1280, 5120},
        {"wq_b", 33, 32768, 1280},
        {"wkv", 5, 512, 5120},
        {"wo_b prefill", 130, 5120, 8192},
        {"shared w1", 70, 2304, 5120},
        {"shared w2", 3, 5120, 2304},
        {"f32 scales, N not a multiple of 32 or of the tile", 100, 1000, 1024, true},
        {"f32 scales, wide tile, partial N", 65, 2100, 384, true},
    };
    uint32_t seed = 10;
    for (const Case& c : cases) {
        Fp8B32Weight w(c.out, c.in, seed++, c.f32_scales, /*f32_exp_base=*/4);
        const auto x = activations(c.rows, c.in, seed++);
        const auto ref = cpu_reference(w, x, c.rows);
        const auto got = run_fast(w, x, c.rows);
        const double err = rel_err(ref, got);
        std::printf("[fp8b32-vs-cpu] %s: %lld rows x %lldx%lld rel err %.3g\n", c.name, (long long)c.rows, (long long)c.out,
                    (long long)c.in, err);
        EXPECT_LT(err, 5e-4) << c.name;
        const auto rounded = run_fast(w, x, c.rows, true);
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i)
            if (rounded[i] != cpu::round_bf16(got[i])) ++bad;
        EXPECT_EQ(bad, 0u) << c.name << ": bf16 output rounding";
    }
}

TEST_F(CudaGemmFp8B32, BatchInvariantBitForBit) {
    if (!cuda::fast_fp8_b32_available()) GTEST_SKIP() << "the native FP8 32x32 kernel needs sm_90";
    for (const int64_t N : {int64_t(1280), int64_t(2304)}) {  // BN 64 and BN 128
        const int64_t K = 1024, R = 300;
        Fp8B32Weight w(N, K, 40 + uint32_t(N));
        const auto x = activations(R, K, 41);
        const auto full = run_fast(w, x, R);
        // (first row, count): alone, one warpgroup per block (<= 64 rows), two (above).
        const std::pair<int64_t, int64_t> subsets[] = {{0, 1}, {299, 1}, {17, 5}, {100, 64}, {5, 65}, {31, 200}};
        for (const auto& [r0, n] : subsets) {
            const std::vector<float> xs(x.begin() + r0 * K, x.begin() + (r0 + n) * K);
            const auto part = run_fast(w, xs, n);
            EXPECT_EQ(0, std::memcmp(part.data(), full.data() + r0 * N, size_t(n * N) * 4))
                << "N " << N << ": rows [" << r0 << ", " << r0 + n << ") differ from the 300-row batch";
        }
    }
}

// How an fp8_as_bf16 launch runs (run_as_bf16).
struct AsBf16Form {
    const char* name;
    bool as_bf16;  // false: the bf16 weight
    bool split_scratch = true;
};

// bf16 activations (x holds bf16 values) times `w` (the FP8 weight with fp8_as_bf16, or its bf16 upload).
std::vector<float> run_as_bf16(const cuda::DeviceLinear& w, const std::vector<float>& x, int64_t rows, const AsBf16Form& f,
                               bool round) {
    const int64_t K = w.in_features, N = w.out_features;
    Dev<float> dx(x), dy(size_t(rows * N));
    Dev<uint16_t> xb(size_t(rows * K));
    cuda::to_bf16({.x = dx.ptr(), .x_ld = K, .rows = rows, .cols = K, .out = xb.ptr()}, Stream{});
    const int64_t split = cuda::fast_linear_split_floats(f.as_bf16 ? cuda::fp8_as_bf16_shape(w) : w, rows);
    Dev<float> ds(size_t(std::max<int64_t>(split, 1)));
    cuda::FastLinearParams p{.a = xb.ptr(), .weight = w, .y = dy.ptr(), .y_ld = N, .rows = rows, .round_output_bf16 = round};
    if (f.split_scratch && split > 0) p.split_scratch = ds.ptr();
    p.fp8_as_bf16 = f.as_bf16;
    cuda::fast_linear(p, Stream{});
    return dy.host(size_t(rows * N));
}

// FastLinearParams::fp8_as_bf16 (V4.1's dense FP8 linears kept FP8 on the device, multiplied as bf16) against
// the same weight uploaded as bf16 (upload_fp8_as_bf16: the bf16 form), bit for bit: every wgmma width (8,
// 16, 32, 64, 128 rows) and several token tiles, with split-K partials and unsplit; ue8m0 and f32 scales
// (one and two bf16 multiplies per pair); bf16 output rounding. The bf16 upload's results against the CPU's
// (tolerance: summation order), so the bits compared are the reference's.
TEST_F(CudaGemmFp8B32, Fp8AsBf16BitIdenticalToTheBf16Upload) {
    if (!cuda::fast_fp8_b32_available()) GTEST_SKIP() << "fp8_as_bf16 needs sm_90";
    struct Shape3 {
        int64_t out, in;
        bool f32_scales;
    };
    // (the f32 scales of {1024, 1024} reach 2^19: past the kernel's one-multiply range, 2^7)
    const Shape3 shapes[] = {{1280, 5120, false}, {2304, 1024, false}, {1024, 1024, true}, {5120, 2304, false}, {512, 8192, false}};
    const AsBf16Form forms[] = {
        {"split-K partials", true, true},
        {"unsplit (the chunks summed in the kernel)", true, false},
    };
    std::vector<std::unique_ptr<DeviceBuffer>> storage;
    uint32_t seed = 90;
    size_t compared = 0;
    for (const Shape3& c : shapes) {
        Fp8B32Weight w(c.out, c.in, seed++, c.f32_scales, /*f32_exp_base=*/4);
        const cuda::DeviceLinear wb = cuda::upload_fp8_as_bf16(w.host, storage);
        ASSERT_EQ(wb.kind, cuda::WeightKind::kBF16);
        for (const int64_t rows : {int64_t(1), int64_t(9), int64_t(17), int64_t(33), int64_t(64), int64_t(65), int64_t(300), int64_t(2100)}) {
            if (rows == 2100 && c.out * c.in > 1280 * 5120) continue;  // (time)
            const auto x = activations(rows, c.in, seed++);
            for (const bool round : {false, true}) {
                if (round && rows != 65) continue;
                const auto ref = run_as_bf16(wb, x, rows, {"bf16 upload", false}, round);
                // The CPU reference (the FP8 weight dequantized, the bf16-valued rows unquantized): only the f32
                // summation order differs (the products are exact), and the bf16 rounding of the outputs.
                std::vector<float> cpu(size_t(rows * c.out));
                cpu::linear({.x = TensorView(const_cast<float*>(x.data()), DType::kF32, {rows, c.in}),
                             .weight = &w.host,
                             .y = TensorView(cpu.data(), DType::kF32, {rows, c.out}),
                             .round_output_bf16 = round});
                EXPECT_LT(rel_err(cpu, ref), round ? 4e-3 : 1e-4) << rows << " x " << c.out << "x" << c.in;
                for (const AsBf16Form& f : forms) {
                    const auto got = run_as_bf16(w.dev, x, rows, f, round);
                    size_t bad = 0;
                    for (size_t i = 0; i < got.size(); ++i)
                        if (std::memcmp(&got[i], &ref[i], 4) != 0) ++bad;
                    EXPECT_EQ(bad, 0u) << f.name << ": " << rows << " x " << c.out << "x" << c.in << (round ? " rounded" : "");
                    ++compared;
                }
            }
        }
    }
    EXPECT_GT(compared, 80u);  // (88: 44 launches of the bf16 upload, two forms each)
}

// Block scales that are no powers of two (which upload_fp8_as_bf16 refuses): fp8_as_bf16 multiplies the
// weight values each rounded to bf16 from their f32 product, e4m3 value x scale, as a bf16 weight built so
// on the host gives (bit for bit through the bf16 kernel; that kernel's results within tolerance of the CPU's).
TEST_F(CudaGemmFp8B32, Fp8AsBf16AnyScalesMatchTheHostsBf16Rounding) {
    if (!cuda::fast_fp8_b32_available()) GTEST_SKIP() << "fp8_as_bf16 needs sm_90";
    const int64_t N = 1024, K = 2048;
    Fp8B32Weight w(N, K, 77, /*f32_scales=*/true, /*f32_exp_base=*/-14, /*f32_any=*/true);
    std::vector<uint16_t> host(size_t(N * K));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
            float sc;
            std::memcpy(&sc, w.s.data() + 4 * size_t((n / 32) * (K / 32) + k / 32), 4);
            host[size_t(n * K + k)] = f32_to_bf16(e4m3_to_f32(w.w[size_t(n * K + k)]) * sc);
        }
    Dev<uint16_t> dw(host);
    const cpu::LinearWeight host_weight = cpu::make_linear_weight(TensorView(host.data(), DType::kBF16, {N, K}), TensorView(), N, K);
    cuda::DeviceLinear wb;
    wb.weight = dw.ptr();
    wb.kind = cuda::WeightKind::kBF16;
    wb.out_features = N;
    wb.in_features = K;
    for (const int64_t rows : {int64_t(1), int64_t(12), int64_t(40), int64_t(130)}) {
        const auto x = activations(rows, K, uint32_t(500 + rows));
        const auto ref = run_as_bf16(wb, x, rows, {"host bf16", false}, false);
        const auto got = run_as_bf16(w.dev, x, rows, {"fp8_as_bf16", true}, false);
        std::vector<float> cpu(size_t(rows * N));  // the CPU on the same bf16 weight (tolerance: summation order)
        cpu::linear({.x = TensorView(const_cast<float*>(x.data()), DType::kF32, {rows, K}), .weight = &host_weight,
                     .y = TensorView(cpu.data(), DType::kF32, {rows, N})});
        EXPECT_LT(rel_err(cpu, ref), 1e-4) << rows << " rows";
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i)
            if (std::memcmp(&got[i], &ref[i], 4) != 0) ++bad;
        EXPECT_EQ(bad, 0u) << rows << " rows";
    }
}

}  // namespace
}  // namespace deepinfer
