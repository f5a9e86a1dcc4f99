// SPDX-License-Identifier: Apache-2.0
// DeepSeek-V4.1's cache QAT formats as fake quantization on f32 (spec §3.6; transformers'
// _fake_quant_fp8_block / _fake_quant_fp4_block): the values are quantized then dequantized in place,
// exactly as the reference does even in its unquantized (fp32) runs. A vector whose length is not a
// multiple of the block is left unchanged (the reference does the same for tiny test shapes).
#pragma once

#include <cstdint>

namespace deepinfer::v41 {

// 2^ceil(log2(t)) for a positive normal f32 t, from its bits (the ue8m0 scale rounding).
float pow2_ceil(float t);

// Window K=V: e4m3 with a ue8m0 scale per `block` values (amax floored at 1e-4).
void fake_quant_fp8(float* x, int64_t n, int64_t block = 32);

// e2m1 values. `e4m3_scale`: one e4m3 scale per block (compressed KV, block 16, amax floored at
// 6*2^-9); otherwise a ue8m0 scale (index keys/queries, block 32, amax floored at 6*2^-126).
void fake_quant_fp4(float* x, int64_t n, int64_t block, bool e4m3_scale);

// The compact storage of the same formats (spec §3.6: the codes produced at quantization time keep
// the fake-quantized values exactly). `n` must be a multiple of `block`.
// (a) e4m3 codes [n] + ue8m0 scale bytes [n / block]: 512 + 16 = 528 B per 512-d window row.
void encode_fp8(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales);
void decode_fp8(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* out);
// (b)/(c) packed e2m1 nibbles [n / 2] (element 2k in the low nibble, -0 stored as +0) + one scale byte
// per block: e4m3 (`e4m3_scale`) or ue8m0. 256 + 32 = 288 B per compressed entry; 64 + 4 = 68 B per key.
void encode_fp4(const float* x, int64_t n, int64_t block, bool e4m3_scale, uint8_t* packed, uint8_t* scales);
void decode_fp4(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t block, bool e4m3_scale, float* out);

}  // namespace deepinfer::v41
