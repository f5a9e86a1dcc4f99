// SPDX-License-Identifier: Apache-2.0
// Tables of element types: sizes, display names and the safetensors vocabulary.
#include "deepinfer/dtype.h"

#include <array>

namespace deepinfer {
namespace {
struct DTypeInfo {
    DType dtype;
    int bits;
    std::string_view name;
    std::string_view safetensors;
    bool is_float;
};

constexpr std::array<DTypeInfo, 17> kInfo = {{
    {DType::kF32, 32, "f32", "F32", true},
    {DType::kF64, 64, "f64", "F64", true},
    {DType::kF16, 16, "f16", "F16", true},
    {DType::kBF16, 16, "bf16", "BF16", true},
    {DType::kF8E4M3, 8, "fp8_e4m3", "F8_E4M3", true},
    {DType::kF8E5M2, 8, "fp8_e5m2", "F8_E5M2", true},
    {DType::kF8E8M0, 8, "ue8m0", "F8_E8M0", true},
    {DType::kF4E2M1, 4, "fp4_e2m1", "F4", true},
    {DType::kBool, 8, "bool", "BOOL", false},
    {DType::kU8, 8, "u8", "U8", false},
    {DType::kI8, 8, "i8", "I8", false},
    {DType::kI16, 16, "i16", "I16", false},
    {DType::kU16, 16, "u16", "U16", false},
    {DType::kI32, 32, "i32", "I32", false},
    {DType::kU32, 32, "u32", "U32", false},
    {DType::kI64, 64, "i64", "I64", false},
    {DType::kU64, 64, "u64", "U64", false},
}};

const DTypeInfo& info(DType dtype) {
    for (const DTypeInfo& i : kInfo)
        if (i.dtype == dtype) return i;
    return kInfo[0];  // unreachable: every enumerator is in the table (checked by a unit test)
}
}  // namespace

int dtype_bits(DType dtype) { return info(dtype).bits; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::string_view dtype_safetensors_name(DType dtype) { return info(dtype).safetensors; }
bool dtype_is_float(DType dtype) { return info(dtype).is_float; }

std::optional<DType> dtype_from_safetensors(std::string_view name) {
    for (const DTypeInfo& i : kInfo)
        if (i.safetensors == name) return i.dtype;
    return std::nullopt;
}

std::optional<uint64_t> dtype_storage_bytes(DType dtype, uint64_t num_elements) {
    uint64_t bits = static_cast<uint64_t>(dtype_bits(dtype));
    if (num_elements > UINT64_MAX / bits) return std::nullopt;
    uint64_t total_bits = num_elements * bits;
    if (total_bits % 8 != 0) return std::nullopt;
    return total_bits / 8;
}

}  // namespace deepinfer
