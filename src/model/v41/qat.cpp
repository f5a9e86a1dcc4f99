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

void fake_quant_fp8(float* x, int64_t n, int64_t block) {
    if (n % block != 0) return;
    for (int64_t b = 0; b < n; b += block) {
        float amax = 0.0f;
        for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b + i]));
        amax = std::max(amax, 1e-4f);
        const float scale = pow2_ceil(amax * (1.0f / 448.0f));
        for (int64_t i = 0; i < block; ++i) {
            const float q = std::clamp(x[b + i] / scale, -448.0f, 448.0f);
            x[b + i] = e4m3_to_f32(f32_to_e4m3(q)) * scale;
        }
    }
}

void fake_quant_fp4(float* x, int64_t n, int64_t block, bool e4m3_scale) {
    if (n % block != 0) return;
    for (int64_t b = 0; b < n; b += block) {
        float amax = 0.0f;
        for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[b + i]));
        const float scale = e4m3_scale ? e4m3_to_f32(f32_to_e4m3(std::max(amax, 6.0f * 0x1p-9f) / 6.0f))
                                       : pow2_ceil(std::max(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
        for (int64_t i = 0; i < block; ++i) {
            const float q = std::clamp(x[b + i] / scale, -6.0f, 6.0f);
            const uint8_t code = f32_to_e2m1(q);
            // transformers' table maps both zero codes to +0.
            const float v = (code & 7) == 0 ? 0.0f : e2m1_to_f32(code);
            x[b + i] = v * scale;
        }
    }
}

}  // namespace deepinfer::v41
