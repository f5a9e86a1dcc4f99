// SPDX-License-Identifier: Apache-2.0
// Element types of tensors and checkpoints. Sub-byte types (FP4 e2m1) are packed two per byte,
// element 2k in the low nibble and 2k+1 in the high nibble (PyTorch float4_e2m1fn_x2 order).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace deepinfer {

enum class DType : uint8_t {
    kF32,
    kF64,
    kF16,
    kBF16,
    kF8E4M3,   // OCP e4m3fn: bias 7, no inf, 0x7F/0xFF = NaN, max 448
    kF8E5M2,   // OCP e5m2 (IEEE-like, with inf)
    kF8E8M0,   // ue8m0: unsigned exponent only, value 2^(e-127), 0xFF = NaN
    kF4E2M1,   // e2m1, packed two per byte (low nibble first)
    kBool,
    kU8,
    kI8,
    kI16,
    kU16,
    kI32,
    kU32,
    kI64,
    kU64,
};

// Bits per element (4 for kF4E2M1).
int dtype_bits(DType dtype);
// Name used in messages and `inspect` output ("bf16", "fp8_e4m3", ...).
std::string_view dtype_name(DType dtype);
// The safetensors header string ("BF16", "F8_E4M3", ...).
std::string_view dtype_safetensors_name(DType dtype);
// Parses a safetensors dtype string; nullopt when unknown.
std::optional<DType> dtype_from_safetensors(std::string_view name);
bool dtype_is_float(DType dtype);

// Bytes taken by `num_elements` elements; nullopt on overflow or when a packed type would end
// in the middle of a byte.
std::optional<uint64_t> dtype_storage_bytes(DType dtype, uint64_t num_elements);

}  // namespace deepinfer
