// SPDX-License-Identifier: Apache-2.0
// Fake quantization of V4.1's cached vectors. Matches transformers' torch code operation for
// operation: amax, clamp_min, scale, x / scale, clamp, cast, * scale (all f32).
#include "model/v41/qat.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "deepinfer/float_formats.h"

namespace deepinfer::v41 {

float pow2_ceil(float t) {
    const uint32_t bits = std::bit_cast<uint32_t>(t);
    const int k = int((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
    return std::ldexp(1.0f, k);
}

namespace {

float block_amax(const float* x, int64_t block) {
    float amax = 0.0f;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[i]));
    return amax;
}

float fp8_scale(const float* x, int64_t block) {
    return pow2_ceil(std::max(block_amax(x, block), 1e-4f) * (1.0f / 448.0f));
}

// The scale and its stored byte (e4m3 or ue8m0).
float fp4_scale(const float* x, int64_t block, bool e4m3_scale, uint8_t* byte) {
    const float amax = block_amax(x, block);
    if (e4m3_scale) {
        const uint8_t code = f32_to_e4m3(std::max(amax, 6.0f * 0x1p-9f) / 6.0f);
        if (byte) *byte = code;
        return e4m3_to_f32(code);
    }
    const float s = pow2_ceil(std::max(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
    if (byte) *byte = e8m0_from_exponent(std::ilogb(s));
    return s;
}

// e2m1 code of x / scale; both zero codes become +0 (transformers' table maps them to +0).
uint8_t fp4_code(float x, float scale) {
    const uint8_t code = f32_to_e2m1(std::clamp(x / scale, -6.0f, 6.0f));
    return (code & 7) == 0 ? uint8_t{0} : code;
}

}  // namespace

void fake_quant_fp8(float* x, int64_t n, int64_t block) {
    if (n % block != 0) return;
    for (int64_t b = 0; b < n; b += block) {
        const float scale = fp8_scale(x + b, block);
        for (int64_t i = 0; i < block; ++i) {
            const float q = std::clamp(x[b + i] / scale, -448.0f, 448.0f);
            x[b + i] = e4m3_to_f32(f32_to_e4m3(q)) * scale;
        }
    }
}

void fake_quant_fp4(float* x, int64_t n, int64_t block, bool e4m3_scale) {
    if (n % block != 0) return;
    for (int64_t b = 0; b < n; b += block) {
        const float scale = fp4_scale(x + b, block, e4m3_scale, nullptr);
        for (int64_t i = 0; i < block; ++i) x[b + i] = e2m1_to_f32(fp4_code(x[b + i], scale)) * scale;
    }
}

void encode_fp8(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales) {
    for (int64_t b = 0; b < n; b += block) {
        const float scale = fp8_scale(x + b, block);
        scales[b / block] = e8m0_from_exponent(std::ilogb(scale));
        for (int64_t i = 0; i < block; ++i) codes[b + i] = f32_to_e4m3(std::clamp(x[b + i] / scale, -448.0f, 448.0f));
    }
}

void decode_fp8(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* out) {
    for (int64_t b = 0; b < n; b += block) {
        const float scale = e8m0_to_f32(scales[b / block]);
        for (int64_t i = 0; i < block; ++i) out[b + i] = e4m3_to_f32(codes[b + i]) * scale;
    }
}

void encode_fp4(const float* x, int64_t n, int64_t block, bool e4m3_scale, uint8_t* packed, uint8_t* scales) {
    for (int64_t b = 0; b < n; b += block) {
        const float scale = fp4_scale(x + b, block, e4m3_scale, &scales[b / block]);
        for (int64_t i = 0; i < block; i += 2)
            packed[(b + i) / 2] = uint8_t(fp4_code(x[b + i], scale) | (fp4_code(x[b + i + 1], scale) << 4));
    }
}

void decode_fp4(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t block, bool e4m3_scale, float* out) {
    for (int64_t b = 0; b < n; b += block) {
        const float scale = e4m3_scale ? e4m3_to_f32(scales[b / block]) : e8m0_to_f32(scales[b / block]);
        for (int64_t i = 0; i < block; ++i) {
            const uint8_t byte = packed[(b + i) / 2];
            out[b + i] = e2m1_to_f32(uint8_t(i % 2 == 0 ? byte & 0xF : byte >> 4)) * scale;
        }
    }
}

}  // namespace deepinfer::v41
