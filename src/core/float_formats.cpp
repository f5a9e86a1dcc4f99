// SPDX-License-Identifier: Apache-2.0
// Scalar float-format conversions. One generic round-to-nearest-even encoder serves every narrow
// format (f16, e4m3, e2m1); bf16 uses the usual bit trick. Decoders are closed-form.
#include "deepinfer/float_formats.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace deepinfer {
namespace {

enum class Overflow { kInf, kNaN, kSaturate };

// A narrow binary float format: `exp_bits` exponent bits with `bias`, `man_bits` mantissa bits.
struct Format {
    int exp_bits;
    int man_bits;
    int bias;
    double max_finite;
    Overflow overflow;     // what a finite value that rounds past max_finite becomes
    Overflow inf_input;    // what +-inf becomes
    uint32_t nan_code;     // code (without sign) produced for NaN input
    bool nan_keeps_sign;
};

constexpr Format kF16{5, 10, 15, 65504.0, Overflow::kInf, Overflow::kInf, 0x200u | (0x1Fu << 10), true};
constexpr Format kE4M3{4, 3, 7, 448.0, Overflow::kNaN, Overflow::kNaN, 0x7Fu, true};
constexpr Format kE4M3Sat{4, 3, 7, 448.0, Overflow::kSaturate, Overflow::kSaturate, 0x7Fu, true};
// NOTE: e2m1 has no NaN; ml_dtypes maps NaN input to code 0x7 (6.0) with the sign bit kept?
// The fixture decides: see tests/unit/float_formats_test.cpp (e2m1 NaN behaviour is asserted there).
constexpr Format kE2M1{2, 1, 1, 6.0, Overflow::kSaturate, Overflow::kSaturate, 0x7u, true};

uint32_t code_of_max(const Format& f) {
    // The largest finite value's code: exponent and mantissa of max_finite.
    int e = 0;
    double m = std::frexp(f.max_finite, &e);  // max = m * 2^e, m in [0.5, 1)
    int exp_field = (e - 1) + f.bias;
    uint32_t man = static_cast<uint32_t>(std::ldexp(m * 2.0 - 1.0, f.man_bits));
    return (static_cast<uint32_t>(exp_field) << f.man_bits) | man;
}

uint32_t inf_code(const Format& f) { return ((1u << f.exp_bits) - 1u) << f.man_bits; }

uint32_t encode(float x, const Format& f) {
    const uint32_t sign = std::signbit(x) ? (1u << (f.exp_bits + f.man_bits)) : 0u;
    auto special = [&](Overflow mode) -> uint32_t {
        switch (mode) {
            case Overflow::kInf: return sign | inf_code(f);
            case Overflow::kNaN: return sign | f.nan_code;
            case Overflow::kSaturate: return sign | code_of_max(f);
        }
        return 0;
    };
    if (std::isnan(x)) return (f.nan_keeps_sign ? sign : 0u) | f.nan_code;
    if (std::isinf(x)) return special(f.inf_input);
    double a = std::fabs(static_cast<double>(x));
    if (a == 0.0) return sign;
    const int emin = 1 - f.bias;  // exponent of the smallest normal
    int e = 0;
    std::frexp(a, &e);
    e -= 1;  // a = 1.m * 2^e
    if (e < emin) e = emin;
    // Quantum at this exponent; a / quantum is exact (power-of-two scaling of a double).
    double quantum = std::ldexp(1.0, e - f.man_bits);
    double steps = std::nearbyint(a / quantum);  // default rounding mode: ties to even
    double r = steps * quantum;
    if (r > f.max_finite) return special(f.overflow);
    if (r == 0.0) return sign;
    std::frexp(r, &e);
    e -= 1;
    if (e < emin) {  // subnormal: exponent field 0
        uint32_t man = static_cast<uint32_t>(std::ldexp(r, f.man_bits - emin));
        return sign | man;
    }
    uint32_t exp_field = static_cast<uint32_t>(e + f.bias);
    uint32_t man = static_cast<uint32_t>(std::ldexp(r, f.man_bits - e)) - (1u << f.man_bits);
    return sign | (exp_field << f.man_bits) | man;
}

float decode(uint32_t code, int exp_bits, int man_bits, int bias) {
    const uint32_t sign = (code >> (exp_bits + man_bits)) & 1u;
    const uint32_t exp_field = (code >> man_bits) & ((1u << exp_bits) - 1u);
    const uint32_t man = code & ((1u << man_bits) - 1u);
    double v = exp_field == 0 ? std::ldexp(static_cast<double>(man), 1 - bias - man_bits)
                              : std::ldexp(static_cast<double>(man | (1u << man_bits)),
                                           static_cast<int>(exp_field) - bias - man_bits);
    return static_cast<float>(sign ? -v : v);
}

}  // namespace

uint16_t f32_to_bf16(float x) {
    uint32_t bits = std::bit_cast<uint32_t>(x);
    if (std::isnan(x)) return 0x7FC0;
    uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_f16(float x) { return static_cast<uint16_t>(encode(x, kF16)); }

float f16_to_f32(uint16_t bits) {
    const uint32_t exp_field = (bits >> 10) & 0x1Fu;
    if (exp_field == 0x1F) {
        const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
        const uint32_t man = static_cast<uint32_t>(bits & 0x3FFu) << 13;
        return std::bit_cast<float>(sign | 0x7F800000u | man);
    }
    return decode(bits, 5, 10, 15);
}

uint8_t f32_to_e4m3(float x) { return static_cast<uint8_t>(encode(x, kE4M3)); }
uint8_t f32_to_e4m3_satfinite(float x) { return static_cast<uint8_t>(encode(x, kE4M3Sat)); }

float e4m3_to_f32(uint8_t bits) {
    if ((bits & 0x7Fu) == 0x7Fu) return std::numeric_limits<float>::quiet_NaN();
    return decode(bits, 4, 3, 7);
}

uint8_t f32_to_e2m1(float x) { return static_cast<uint8_t>(encode(x, kE2M1)); }
float e2m1_to_f32(uint8_t code) { return decode(code & 0xFu, 2, 1, 1); }

float e8m0_to_f32(uint8_t bits) {
    if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
    return std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

uint8_t e8m0_from_exponent(int k) { return static_cast<uint8_t>(k + 127); }

int ceil_log2_bits(float t) {
    uint32_t bits = std::bit_cast<uint32_t>(t);
    int biased = static_cast<int>((bits >> 23) & 0xFFu);
    return (biased - 127) + ((bits & 0x7FFFFFu) != 0 ? 1 : 0);
}

}  // namespace deepinfer
