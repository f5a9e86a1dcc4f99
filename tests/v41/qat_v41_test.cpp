// SPDX-License-Identifier: Apache-2.0
// V4.1's cache-format rounding (spec §3.6) bit for bit against tests/data/v41/qat_ops.safetensors,
// whose outputs transformers' DeepseekV41 quantizers and an independent ml_dtypes formulation agree
// on (tools/reference/make_v41_qat_ops.py): random rows at nine magnitudes and hostile rows (ties of
// the e4m3/e2m1 grids, amax floors, powers of two, signed zeros). Also the compact storage codes
// (e4m3 bytes + ue8m0, packed e2m1 nibbles + e4m3/ue8m0 scale bytes) and their decoding.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "deepinfer/dequant.h"
#include "deepinfer/safetensors.h"
#include "deepinfer/tensor.h"
#include "model/v41/qat.h"

namespace deepinfer::v41 {
namespace {

struct Case {
    const char* name;
    int64_t block;
    int kind;  // 0: fp8 window, 1: fp4 e4m3-scaled (compressed KV), 2: fp4 ue8m0-scaled (index keys)
};

class QatV41 : public ::testing::TestWithParam<Case> {};

template <typename T>
std::vector<T> read(const SafetensorsFile& f, const std::string& name, int64_t* rows = nullptr,
                    int64_t* cols = nullptr) {
    const SafetensorsTensorInfo* info = f.find(name);
    EXPECT_NE(info, nullptr) << name;
    if (!info) return {};
    const TensorView v = f.view(*info);
    if (rows) *rows = v.shape()[0];
    if (cols) *cols = v.shape()[1];
    std::vector<T> out(size_t(v.numel()));
    std::memcpy(out.data(), v.data_as<const T>(), out.size() * sizeof(T));
    return out;
}

TEST_P(QatV41, FakeQuantAndCodesAreBitExact) {
    const Case c = GetParam();
    const SafetensorsFile f(std::string(DI_V41_DATA_DIR) + "/qat_ops.safetensors");
    int64_t rows = 0, n = 0;
    const std::string p = c.name;
    std::vector<float> x = read<float>(f, p + ".x", &rows, &n);
    const std::vector<float> want = read<float>(f, p + ".out");
    const std::vector<uint8_t> want_codes = read<uint8_t>(f, p + ".codes");
    const std::vector<uint8_t> want_scales = read<uint8_t>(f, p + ".scales");
    ASSERT_GT(rows, 50);
    const int64_t code_bytes = c.kind == 0 ? n : n / 2, nblocks = n / c.block;
    ASSERT_EQ(int64_t(want_codes.size()), rows * code_bytes);
    ASSERT_EQ(int64_t(want_scales.size()), rows * nblocks);
    int64_t bad = 0, bad_codes = 0, bad_decode = 0;
    std::vector<uint8_t> codes(static_cast<size_t>(code_bytes)), scales(static_cast<size_t>(nblocks));
    std::vector<float> decoded(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
        const float* in = x.data() + r * n;
        if (c.kind == 0) encode_fp8(in, n, c.block, codes.data(), scales.data());
        else encode_fp4(in, n, c.block, c.kind == 1, codes.data(), scales.data());
        bad_codes += std::memcmp(codes.data(), want_codes.data() + r * code_bytes, size_t(code_bytes)) != 0 ||
                     std::memcmp(scales.data(), want_scales.data() + r * nblocks, size_t(nblocks)) != 0;
        if (c.kind == 0) decode_fp8(codes.data(), scales.data(), n, c.block, decoded.data());
        else decode_fp4(codes.data(), scales.data(), n, c.block, c.kind == 1, decoded.data());
        float* row = x.data() + r * n;
        if (c.kind == 0) fake_quant_fp8(row, n, c.block);
        else fake_quant_fp4(row, n, c.block, c.kind == 1);
        for (int64_t i = 0; i < n; ++i) {
            const uint32_t got = std::bit_cast<uint32_t>(row[i]), exp = std::bit_cast<uint32_t>(want[size_t(r * n + i)]);
            bad += got != exp;
            bad_decode += std::bit_cast<uint32_t>(decoded[size_t(i)]) != exp;
        }
    }
    EXPECT_EQ(bad, 0) << p << ": fake-quantized values differing from the references";
    EXPECT_EQ(bad_codes, 0) << p << ": rows whose storage codes differ from ml_dtypes'";
    EXPECT_EQ(bad_decode, 0) << p << ": decoded storage differing from the fake-quantized values";
}

INSTANTIATE_TEST_SUITE_P(Formats, QatV41,
                         ::testing::Values(Case{"fp8_window", 32, 0}, Case{"fp4_kv", 16, 1}, Case{"fp4_index", 32, 2}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace deepinfer::v41

namespace deepinfer::v41 {
namespace {

// The official FP8 GEMMs' activation quantization with V4.1's 32-wide blocks (spec §6.3).
TEST(ActQuantV41, Block32CodesAndScalesAreBitExact) {
    const SafetensorsFile f(std::string(DI_V41_DATA_DIR) + "/qat_ops.safetensors");
    int64_t rows = 0, n = 0;
    const std::vector<float> x = read<float>(f, "act_quant32.x", &rows, &n);
    const std::vector<uint8_t> want_codes = read<uint8_t>(f, "act_quant32.codes");
    const std::vector<uint8_t> want_scales = read<uint8_t>(f, "act_quant32.scales");
    Buffer q(DType::kF8E4M3, {rows, n}), s(DType::kF8E8M0, {rows, n / 32});
    act_quant({.x = TensorView(const_cast<float*>(x.data()), DType::kF32, {rows, n}), .q = q.view(), .scale = s.view(),
               .block = 32});
    EXPECT_EQ(std::memcmp(q.data(), want_codes.data(), want_codes.size()), 0);
    EXPECT_EQ(std::memcmp(s.data(), want_scales.data(), want_scales.size()), 0);
}

}  // namespace
}  // namespace deepinfer::v41
