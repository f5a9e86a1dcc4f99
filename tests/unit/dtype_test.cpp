// SPDX-License-Identifier: Apache-2.0
// DType tables, Shape/TensorView/Buffer basics.
#include <gtest/gtest.h>

#include "deepinfer/check.h"
#include "deepinfer/dtype.h"
#include "deepinfer/tensor.h"

namespace deepinfer {
namespace {

TEST(DType, SafetensorsNamesRoundTrip) {
    for (const char* name : {"F32", "F64", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "BOOL", "U8", "I8",
                             "I16", "U16", "I32", "U32", "I64", "U64"}) {
        auto dt = dtype_from_safetensors(name);
        ASSERT_TRUE(dt.has_value()) << name;
        EXPECT_EQ(dtype_safetensors_name(*dt), name);
    }
    EXPECT_FALSE(dtype_from_safetensors("F128").has_value());
    EXPECT_FALSE(dtype_from_safetensors("f32").has_value());
}

TEST(DType, StorageBytes) {
    EXPECT_EQ(dtype_storage_bytes(DType::kBF16, 10), 20u);
    EXPECT_EQ(dtype_storage_bytes(DType::kF4E2M1, 10), 5u);
    EXPECT_FALSE(dtype_storage_bytes(DType::kF4E2M1, 3).has_value());
    EXPECT_FALSE(dtype_storage_bytes(DType::kF64, UINT64_MAX / 2).has_value());
    EXPECT_EQ(dtype_bits(DType::kF8E8M0), 8);
    EXPECT_EQ(dtype_name(DType::kF8E4M3), "fp8_e4m3");
}

TEST(Tensor, ViewsAndBuffers) {
    Buffer b(DType::kF32, {3, 4});
    EXPECT_EQ(b.nbytes(), 48u);
    TensorView v = b.view();
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_EQ(v.stride(0), 4);
    EXPECT_EQ(v.describe(), "f32[3, 4]");
    TensorView rows = v.slice_rows(1, 3);
    EXPECT_EQ(rows.dim(0), 2);
    EXPECT_EQ(rows.data_as<float>(), v.data_as<float>() + 4);
    EXPECT_THROW(v.slice_rows(2, 5), Error);
    EXPECT_THROW(b.view(DType::kF32, {4, 4}), Error);
    Buffer moved = std::move(b);
    EXPECT_EQ(moved.nbytes(), 48u);
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_THROW(Shape({1, 2, 3, 4, 5, 6, 7, 8, 9}), Error);
}

TEST(Check, MessageCarriesLocation) {
    try {
        DI_CHECK(1 == 2, "value ", 42, " is bad");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.message(), "value 42 is bad");
        EXPECT_NE(std::string(e.what()).find("dtype_test.cpp:"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deepinfer
