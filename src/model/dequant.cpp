// SPDX-License-Identifier: Apache-2.0
// CPU dequantization and casts. Rows are processed in parallel (OpenMP); each element's result
// depends only on its inputs, so the output is independent of the thread count.
#include "deepinfer/dequant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "deepinfer/check.h"
#include "deepinfer/float_formats.h"

namespace deepinfer {

float load_float(const void* base_ptr, DType dtype, int64_t i) {
    const auto* base = static_cast<const uint8_t*>(base_ptr);
    switch (dtype) {
        case DType::kF32: {
            float v;
            std::memcpy(&v, base + 4 * i, 4);
            return v;
        }
        case DType::kBF16: {
            uint16_t v;
            std::memcpy(&v, base + 2 * i, 2);
            return bf16_to_f32(v);
        }
        case DType::kF16: {
            uint16_t v;
            std::memcpy(&v, base + 2 * i, 2);
            return f16_to_f32(v);
        }
        case DType::kF8E4M3: return e4m3_to_f32(base[i]);
        case DType::kF8E8M0: return e8m0_to_f32(base[i]);
        default: DI_THROW("cannot read ", dtype_name(dtype), " as a float");
    }
}

namespace {

void store_float(uint8_t* base, DType dtype, int64_t i, float v) {
    switch (dtype) {
        case DType::kF32: std::memcpy(base + 4 * i, &v, 4); return;
        case DType::kBF16: {
            uint16_t b = f32_to_bf16(v);
            std::memcpy(base + 2 * i, &b, 2);
            return;
        }
        case DType::kF16: {
            uint16_t b = f32_to_f16(v);
            std::memcpy(base + 2 * i, &b, 2);
            return;
        }
        default: DI_THROW("cannot write ", dtype_name(dtype), " from a float");
    }
}

bool is_output_dtype(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void dequant_fp8_block(const DequantFp8BlockParams& p) {
    DI_CHECK(p.weight.dtype() == DType::kF8E4M3 && p.weight.ndim() == 2, "dequant_fp8_block: weight must be ",
             "fp8_e4m3[rows, cols], got ", p.weight.describe());
    const int64_t rows = p.weight.dim(0), cols = p.weight.dim(1);
    DI_CHECK(p.block_rows > 0 && p.block_cols > 0, "dequant_fp8_block: block sizes must be positive");
    const Shape want_scale{ceil_div(rows, p.block_rows), ceil_div(cols, p.block_cols)};
    DI_CHECK(p.scale.shape() == want_scale &&
                 (p.scale.dtype() == DType::kF32 || p.scale.dtype() == DType::kBF16 ||
                  p.scale.dtype() == DType::kF8E8M0),
             "dequant_fp8_block: scale must be f32|bf16|ue8m0", want_scale.str(), " for weight ",
             p.weight.describe(), ", got ", p.scale.describe());
    DI_CHECK(p.out.shape() == p.weight.shape() && is_output_dtype(p.out.dtype()),
             "dequant_fp8_block: out must be f32|bf16|f16", p.weight.shape().str(), ", got ", p.out.describe());
    const auto* w = static_cast<const uint8_t*>(p.weight.data());
    const auto* s = static_cast<const uint8_t*>(p.scale.data());
    auto* o = static_cast<uint8_t*>(p.out.data());
    const int64_t scale_cols = want_scale[1];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t sr = r / p.block_rows;
        for (int64_t c = 0; c < cols; ++c) {
            const float scale = load_float(s, p.scale.dtype(), sr * scale_cols + c / p.block_cols);
            store_float(o, p.out.dtype(), r * cols + c, e4m3_to_f32(w[r * cols + c]) * scale);
        }
    }
}

void dequant_fp4(const DequantFp4Params& p) {
    DI_CHECK(p.weight.ndim() == 2 && p.out.ndim() == 2, "dequant_fp4: weight and out must be 2-D, got ",
             p.weight.describe(), " and ", p.out.describe());
    const int64_t rows = p.out.dim(0), cols = p.out.dim(1);
    const bool packed_bytes = p.weight.dtype() == DType::kI8 || p.weight.dtype() == DType::kU8;
    DI_CHECK(packed_bytes || p.weight.dtype() == DType::kF4E2M1, "dequant_fp4: weight must be i8|u8 (packed) or ",
             "fp4_e2m1, got ", p.weight.describe());
    const Shape want_weight = packed_bytes ? Shape{rows, cols / 2} : Shape{rows, cols};
    DI_CHECK(cols % 2 == 0 && p.weight.shape() == want_weight, "dequant_fp4: weight must be ", want_weight.str(),
             " for out ", p.out.describe(), ", got ", p.weight.describe());
    DI_CHECK(p.block > 0 && cols % p.block == 0, "dequant_fp4: cols = ", cols, " is not a multiple of block ", p.block);
    const Shape want_scale{rows, cols / p.block};
    DI_CHECK(p.scale.dtype() == DType::kF8E8M0 && p.scale.shape() == want_scale, "dequant_fp4: scale must be ue8m0",
             want_scale.str(), ", got ", p.scale.describe());
    DI_CHECK(is_output_dtype(p.out.dtype()), "dequant_fp4: out must be f32|bf16|f16, got ", p.out.describe());
    const auto* w = static_cast<const uint8_t*>(p.weight.data());
    const auto* s = static_cast<const uint8_t*>(p.scale.data());
    auto* o = static_cast<uint8_t*>(p.out.data());
    const int64_t blocks = cols / p.block;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const uint8_t byte = w[(r * cols + c) / 2];
            const uint8_t code = (c % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
            const float scale = e8m0_to_f32(s[r * blocks + c / p.block]);
            store_float(o, p.out.dtype(), r * cols + c, e2m1_to_f32(code) * scale);
        }
    }
}

void convert_float(const TensorView& src, const TensorView& dst) {
    DI_CHECK(src.numel() == dst.numel(), "convert_float: ", src.describe(), " and ", dst.describe(),
             " differ in size");
    DI_CHECK(src.dtype() == DType::kF32 || src.dtype() == DType::kBF16 || src.dtype() == DType::kF16 ||
                 src.dtype() == DType::kF8E4M3,
             "convert_float: unsupported source ", src.describe());
    DI_CHECK(is_output_dtype(dst.dtype()), "convert_float: unsupported destination ", dst.describe());
    const auto* s = static_cast<const uint8_t*>(src.data());
    auto* d = static_cast<uint8_t*>(dst.data());
    const int64_t n = src.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) store_float(d, dst.dtype(), i, load_float(s, src.dtype(), i));
}

void act_quant(const ActQuantParams& p) {
    DI_CHECK(p.x.ndim() == 2 && (p.x.dtype() == DType::kF32 || p.x.dtype() == DType::kBF16),
             "act_quant: x must be f32|bf16[rows, cols], got ", p.x.describe());
    const int64_t rows = p.x.dim(0), cols = p.x.dim(1);
    DI_CHECK(p.block > 0 && cols % p.block == 0, "act_quant: cols = ", cols, " is not a multiple of ", p.block);
    DI_CHECK(p.q.dtype() == DType::kF8E4M3 && p.q.shape() == p.x.shape(), "act_quant: q must be fp8_e4m3",
             p.x.shape().str(), ", got ", p.q.describe());
    const Shape want_scale{rows, cols / p.block};
    DI_CHECK((p.scale.dtype() == DType::kF32 || p.scale.dtype() == DType::kF8E8M0) && p.scale.shape() == want_scale,
             "act_quant: scale must be f32|ue8m0", want_scale.str(), ", got ", p.scale.describe());
    const auto* x = static_cast<const uint8_t*>(p.x.data());
    auto* q = static_cast<uint8_t*>(p.q.data());
    auto* sc = static_cast<uint8_t*>(p.scale.data());
    const int64_t blocks = cols / p.block;
    constexpr float kInvE4m3Max = 1.0f / 448.0f;  // fp32 constant, multiplied (not divided) as the reference does
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
            const int64_t base = r * cols + b * p.block;
            float amax = 0.0f;
            for (int64_t i = 0; i < p.block; ++i) amax = std::max(amax, std::fabs(load_float(x, p.x.dtype(), base + i)));
            amax = std::max(amax, 1e-4f);
            const int k = ceil_log2_bits(amax * kInvE4m3Max);
            const float s = std::ldexp(1.0f, k);
            for (int64_t i = 0; i < p.block; ++i) {
                const float v = std::clamp(load_float(x, p.x.dtype(), base + i) / s, -448.0f, 448.0f);
                q[base + i] = f32_to_e4m3(v);
            }
            if (p.scale.dtype() == DType::kF32) store_float(sc, DType::kF32, r * blocks + b, s);
            else sc[r * blocks + b] = e8m0_from_exponent(k);
        }
    }
}

}  // namespace deepinfer
