// SPDX-License-Identifier: Apache-2.0
// Scalar float formats, bit-exact against tests/data/formats/formats.safetensors, which
// tools/reference/make_format_fixtures.py writes with PyTorch and ml_dtypes (provenance in
// tests/data/README.md). Every conversion is checked on ~20k inputs including every special case.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "deepinfer/dequant.h"
#include "deepinfer/float_formats.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using test::fixture_values;
using test::same_float;

class FloatFormats : public ::testing::Test {
protected:
    SafetensorsFile fx{test::data_path("formats/formats.safetensors")};
    std::vector<float> inputs = fixture_values<float>(fx, "f32_inputs", DType::kF32);
};

TEST_F(FloatFormats, InputsCoverSpecialValues) {
    ASSERT_GT(inputs.size(), 10000u);
    int nan = 0, inf = 0, neg_zero = 0, denorm = 0;
    for (float x : inputs) {
        nan += std::isnan(x);
        inf += std::isinf(x);
        neg_zero += x == 0 && std::signbit(x);
        denorm += std::fpclassify(x) == FP_SUBNORMAL;
    }
    EXPECT_GT(nan, 0);
    EXPECT_GT(inf, 1);
    EXPECT_GT(neg_zero, 0);
    EXPECT_GT(denorm, 0);
}

TEST_F(FloatFormats, F32ToBf16MatchesTorch) {
    auto want = fixture_values<uint16_t>(fx, "bf16_from_f32", DType::kBF16);
    ASSERT_EQ(want.size(), inputs.size());
    int bad = 0;
    for (size_t i = 0; i < inputs.size(); ++i)
        if (f32_to_bf16(inputs[i]) != want[i] && bad++ < 10)
            ADD_FAILURE() << "x=" << inputs[i] << " bits=0x" << std::hex << std::bit_cast<uint32_t>(inputs[i])
                          << " got 0x" << f32_to_bf16(inputs[i]) << " want 0x" << want[i];
    EXPECT_EQ(bad, 0);
}

TEST_F(FloatFormats, F32ToF16MatchesTorch) {
    auto want = fixture_values<uint16_t>(fx, "f16_from_f32", DType::kF16);
    int bad = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        uint16_t got = f32_to_f16(inputs[i]);
        bool ok = got == want[i] || (std::isnan(inputs[i]) && std::isnan(f16_to_f32(got)) && std::isnan(f16_to_f32(want[i])));
        if (!ok && bad++ < 10)
            ADD_FAILURE() << "x=" << inputs[i] << " got 0x" << std::hex << got << " want 0x" << want[i];
    }
    EXPECT_EQ(bad, 0);
}

TEST_F(FloatFormats, F32ToE4m3MatchesTorch) {
    auto want = fixture_values<uint8_t>(fx, "e4m3_from_f32", DType::kF8E4M3);
    auto want_sat = fixture_values<uint8_t>(fx, "e4m3_from_f32_satfinite", DType::kF8E4M3);
    // NaN outputs compare by NaN-ness: the fixture stores the canonical NaN code 0x7F, while the
    // conversion keeps the input's sign (0xFF for negative overflow), as PyTorch's scalar path does.
    auto same = [](uint8_t a, uint8_t b) { return a == b || ((a & 0x7F) == 0x7F && (b & 0x7F) == 0x7F); };
    int bad = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        if (!same(f32_to_e4m3(inputs[i]), want[i]) && bad++ < 10)
            ADD_FAILURE() << "x=" << inputs[i] << " got 0x" << std::hex << int(f32_to_e4m3(inputs[i])) << " want 0x"
                          << int(want[i]);
        if (!same(f32_to_e4m3_satfinite(inputs[i]), want_sat[i]) && bad++ < 10)
            ADD_FAILURE() << "satfinite x=" << inputs[i] << " got 0x" << std::hex
                          << int(f32_to_e4m3_satfinite(inputs[i])) << " want 0x" << int(want_sat[i]);
    }
    EXPECT_EQ(bad, 0);
}

TEST_F(FloatFormats, F32ToE2m1MatchesMlDtypes) {
    auto want = fixture_values<uint8_t>(fx, "e2m1_codes_from_f32", DType::kU8);
    auto want_sat = fixture_values<uint8_t>(fx, "e2m1_codes_from_f32_satfinite", DType::kU8);
    int bad = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        if (std::isnan(inputs[i])) continue;  // e2m1 has no NaN; ml_dtypes' choice is checked below
        if (f32_to_e2m1(inputs[i]) != want[i] && bad++ < 10)
            ADD_FAILURE() << "x=" << inputs[i] << " got " << int(f32_to_e2m1(inputs[i])) << " want " << int(want[i]);
        if (f32_to_e2m1(inputs[i]) != want_sat[i] && bad++ < 10)
            ADD_FAILURE() << "satfinite x=" << inputs[i] << " got " << int(f32_to_e2m1(inputs[i])) << " want "
                          << int(want_sat[i]);
    }
    EXPECT_EQ(bad, 0);
}

TEST_F(FloatFormats, DecodersMatchEveryCode) {
    auto e4m3 = fixture_values<float>(fx, "e4m3_all_f32", DType::kF32);
    auto e2m1 = fixture_values<float>(fx, "e2m1_all_f32", DType::kF32);
    auto e8m0 = fixture_values<float>(fx, "e8m0_all_f32", DType::kF32);
    auto bf16 = fixture_values<float>(fx, "bf16_all_f32", DType::kF32);
    auto f16 = fixture_values<float>(fx, "f16_all_f32", DType::kF32);
    ASSERT_EQ(e4m3.size(), 256u);
    ASSERT_EQ(e2m1.size(), 16u);
    ASSERT_EQ(e8m0.size(), 256u);
    ASSERT_EQ(bf16.size(), 65536u);
    ASSERT_EQ(f16.size(), 65536u);
    for (int c = 0; c < 256; ++c) {
        EXPECT_TRUE(same_float(e4m3_to_f32(uint8_t(c)), e4m3[size_t(c)])) << "e4m3 code " << c;
        EXPECT_TRUE(same_float(e8m0_to_f32(uint8_t(c)), e8m0[size_t(c)])) << "e8m0 code " << c;
    }
    for (int c = 0; c < 16; ++c) EXPECT_TRUE(same_float(e2m1_to_f32(uint8_t(c)), e2m1[size_t(c)])) << "e2m1 " << c;
    int bad = 0;
    for (uint32_t c = 0; c < 65536; ++c) {
        bad += !same_float(bf16_to_f32(uint16_t(c)), bf16[c]);
        bad += !same_float(f16_to_f32(uint16_t(c)), f16[c]);
    }
    EXPECT_EQ(bad, 0);
}

TEST(FloatFormatsSelf, RoundTripsEveryCode) {
    // Decoding then encoding every code returns it (NaN codes excepted).
    for (int c = 0; c < 256; ++c) {
        float v = e4m3_to_f32(uint8_t(c));
        if (!std::isnan(v)) {
            EXPECT_EQ(f32_to_e4m3(v), c) << c;
        }
    }
    for (int c = 0; c < 16; ++c) EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(uint8_t(c))), c) << c;
    for (uint32_t c = 0; c < 65536; ++c) {
        float b = bf16_to_f32(uint16_t(c)), h = f16_to_f32(uint16_t(c));
        if (!std::isnan(b)) {
            EXPECT_EQ(f32_to_bf16(b), c);
        }
        if (!std::isnan(h)) {
            EXPECT_EQ(f32_to_f16(h), c);
        }
    }
    EXPECT_EQ(ceil_log2_bits(1.0f), 0);
    EXPECT_EQ(ceil_log2_bits(1.5f), 1);
    EXPECT_EQ(ceil_log2_bits(0.25f), -2);
    EXPECT_EQ(ceil_log2_bits(0.3f), -1);
}

TEST(ActQuant, MatchesReference) {
    SafetensorsFile fx(test::data_path("formats/formats.safetensors"));
    TensorView x = test::fixture_tensor(fx, "actq_x", DType::kF32);
    TensorView want_q = test::fixture_tensor(fx, "actq_q", DType::kF8E4M3);
    TensorView want_s = test::fixture_tensor(fx, "actq_scale", DType::kF32);
    Buffer q(DType::kF8E4M3, x.shape()), s(DType::kF32, want_s.shape());
    act_quant({.x = x, .q = q.view(), .scale = s.view()});
    EXPECT_EQ(std::memcmp(q.data(), want_q.data(), q.nbytes()), 0);
    EXPECT_EQ(std::memcmp(s.data(), want_s.data(), s.nbytes()), 0);
    // The ue8m0 form of the scales encodes the same powers of two.
    Buffer s8(DType::kF8E8M0, want_s.shape());
    act_quant({.x = x, .q = q.view(), .scale = s8.view()});
    for (int64_t i = 0; i < want_s.numel(); ++i)
        EXPECT_EQ(e8m0_to_f32(static_cast<uint8_t*>(s8.data())[i]), s.view().data_as<float>()[i]);
}

}  // namespace
}  // namespace deepinfer
