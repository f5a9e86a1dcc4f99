// SPDX-License-Identifier: Apache-2.0
// FP8 block and FP4 dequantization, bit-exact against PyTorch/ml_dtypes fixtures
// (tests/data/formats/formats.safetensors), plus shape checks.
#include <gtest/gtest.h>

#include <cstring>

#include "deepinfer/check.h"
#include "deepinfer/dequant.h"
#include "deepinfer/float_formats.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using test::fixture_tensor;

void expect_same_bytes(const Buffer& got, const TensorView& want, const std::string& what) {
    ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
    size_t mismatches = 0, first = 0;
    const auto* a = static_cast<const uint8_t*>(got.data());
    const auto* b = static_cast<const uint8_t*>(want.data());
    for (size_t i = 0; i < got.nbytes(); ++i)
        if (a[i] != b[i] && mismatches++ == 0) first = i;
    EXPECT_EQ(mismatches, 0u) << what << ": first differing byte " << first;
}

class Dequant : public ::testing::Test {
protected:
    SafetensorsFile fx{test::data_path("formats/formats.safetensors")};
};

TEST_F(Dequant, Fp8BlockF32ScaleMatchesTorch) {
    TensorView w = fixture_tensor(fx, "fp8w_weight", DType::kF8E4M3);
    TensorView s = fixture_tensor(fx, "fp8w_scale_f32", DType::kF32);
    Buffer out(DType::kF32, w.shape());
    dequant_fp8_block({.weight = w, .scale = s, .out = out.view()});
    expect_same_bytes(out, fixture_tensor(fx, "fp8w_dequant_f32_scale", DType::kF32), "f32 scale");
}

TEST_F(Dequant, Fp8BlockE8m0ScaleMatchesTorch) {
    TensorView w = fixture_tensor(fx, "fp8w_weight", DType::kF8E4M3);
    TensorView s = fixture_tensor(fx, "fp8w_scale_e8m0", DType::kF8E8M0);
    Buffer out(DType::kF32, w.shape()), out_bf16(DType::kBF16, w.shape());
    dequant_fp8_block({.weight = w, .scale = s, .out = out.view()});
    expect_same_bytes(out, fixture_tensor(fx, "fp8w_dequant_e8m0_scale", DType::kF32), "e8m0 scale");
    dequant_fp8_block({.weight = w, .scale = s, .out = out_bf16.view()});
    expect_same_bytes(out_bf16, fixture_tensor(fx, "fp8w_dequant_e8m0_scale_bf16", DType::kBF16), "bf16 out");
}

TEST_F(Dequant, Fp8BlockExactMultiples) {
    TensorView w = fixture_tensor(fx, "fp8w2_weight", DType::kF8E4M3);
    TensorView s = fixture_tensor(fx, "fp8w2_scale_e8m0", DType::kF8E8M0);
    TensorView sf = fixture_tensor(fx, "fp8w2_scale_f32", DType::kF32);
    Buffer out(DType::kF32, w.shape()), outf(DType::kF32, w.shape()), out16(DType::kBF16, w.shape());
    dequant_fp8_block({.weight = w, .scale = s, .out = out.view()});
    expect_same_bytes(out, fixture_tensor(fx, "fp8w2_dequant_e8m0_scale", DType::kF32), "256x384 e8m0");
    dequant_fp8_block({.weight = w, .scale = s, .out = out16.view()});
    expect_same_bytes(out16, fixture_tensor(fx, "fp8w2_dequant_e8m0_scale_bf16", DType::kBF16), "256x384 bf16");
    dequant_fp8_block({.weight = w, .scale = sf, .out = outf.view()});
    expect_same_bytes(outf, fixture_tensor(fx, "fp8w2_dequant_f32_scale", DType::kF32), "256x384 f32 scale");
}

TEST_F(Dequant, Fp4MatchesReference) {
    TensorView w = fixture_tensor(fx, "fp4w_packed", DType::kI8);
    TensorView s = fixture_tensor(fx, "fp4w_scale", DType::kF8E8M0);
    TensorView want = fixture_tensor(fx, "fp4w_dequant_f32", DType::kF32);
    Buffer out(DType::kF32, want.shape());
    dequant_fp4({.weight = w, .scale = s, .out = out.view()});
    expect_same_bytes(out, want, "fp4");
}

TEST(DequantShapes, BadShapesThrow) {
    Buffer w(DType::kF8E4M3, {256, 256}), s(DType::kF32, {2, 3}), o(DType::kF32, {256, 256});
    EXPECT_THROW(dequant_fp8_block({.weight = w.view(), .scale = s.view(), .out = o.view()}), Error);
    Buffer p(DType::kU8, {4, 16}), ps(DType::kF8E8M0, {4, 2}), po(DType::kF32, {4, 30});
    EXPECT_THROW(dequant_fp4({.weight = p.view(), .scale = ps.view(), .out = po.view()}), Error);
}

TEST(DequantSelf, Fp4NibbleOrderLowFirst) {
    // byte 0x21: element 0 = code 1 (0.5), element 1 = code 2 (1.0); scale 2^1.
    Buffer p(DType::kU8, {1, 16}), s(DType::kF8E8M0, {1, 1}), o(DType::kF32, {1, 32});
    static_cast<uint8_t*>(p.data())[0] = 0x21;
    static_cast<uint8_t*>(s.data())[0] = e8m0_from_exponent(1);
    dequant_fp4({.weight = p.view(), .scale = s.view(), .out = o.view()});
    EXPECT_EQ(o.view().data_as<float>()[0], 1.0f);
    EXPECT_EQ(o.view().data_as<float>()[1], 2.0f);
}

}  // namespace
}  // namespace deepinfer
