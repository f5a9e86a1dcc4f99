// SPDX-License-Identifier: Apache-2.0
// Scalar conversions between f32 and the narrow float formats of DeepSeek checkpoints:
// bf16, f16, fp8 e4m3fn, fp4 e2m1 and ue8m0 scales. Every f32 -> narrow conversion rounds to
// nearest, ties to even, and follows PyTorch's (bf16, f16, e4m3) or ml_dtypes' (e2m1) rules for
// overflow and NaN; tests/unit/float_formats_test.cpp checks them bit-exact against fixtures made
// with those libraries.
#pragma once

#include <cstdint>

namespace deepinfer {

// bf16. NaN -> 0x7FC0 (PyTorch's canonical NaN, sign dropped); overflow -> +-inf.
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t bits);

// IEEE binary16. Subnormals kept; overflow -> +-inf; NaN -> sign | 0x7E00.
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t bits);

// OCP fp8 e4m3fn (max 448, no inf). As PyTorch's cast: a value that rounds past 448
// (|x| > 464, or inf) becomes NaN (sign | 0x7F); NaN -> sign | 0x7F.
uint8_t f32_to_e4m3(float x);
// Saturating variant: finite values past 448 and +-inf clamp to +-448; NaN -> sign | 0x7F.
uint8_t f32_to_e4m3_satfinite(float x);
float e4m3_to_f32(uint8_t bits);

// fp4 e2m1 (values 0, 0.5, 1, 1.5, 2, 3, 4, 6; no inf, no NaN), returned as a 4-bit code.
// As ml_dtypes' cast: finite overflow and +-inf saturate to +-6; NaN -> see the .cpp note.
uint8_t f32_to_e2m1(float x);
float e2m1_to_f32(uint8_t code);

// ue8m0: 2^(e - 127) for e in 0..254; 255 = NaN.
float e8m0_to_f32(uint8_t bits);
// The e8m0 code of 2^k (k in -127..127).
uint8_t e8m0_from_exponent(int k);

// ceil(log2(t)) for a positive, finite, normal f32 t, computed from its bit pattern as DeepSeek's
// act_quant does: (biased exponent - 127) + (mantissa != 0).
int ceil_log2_bits(float t);

}  // namespace deepinfer
