// SPDX-License-Identifier: Apache-2.0
// CPU linear layer. Work is split over panels of kPanelRows output features (threads never share
// an output element); inside a panel, a 4-row x 1-token micro-kernel of 8-lane f32 vectors.
#include "backends/cpu/linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "deepinfer/check.h"
#include "deepinfer/dequant.h"
#include "deepinfer/float_formats.h"

namespace deepinfer::cpu {
namespace {

constexpr int64_t kPanelRows = 16;
using v8f = float __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
    v8f v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
inline float hsum(v8f v) {
    // Fixed pairwise order.
    float a = (v[0] + v[4]) + (v[2] + v[6]);
    float b = (v[1] + v[5]) + (v[3] + v[7]);
    return a + b;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Decode tables (immutable after first use): every e4m3 byte and every packed fp4 byte (two values).
struct DecodeTables {
    float e4m3[256];
    float fp4_pair[256][2];
    DecodeTables() {
        for (int c = 0; c < 256; ++c) {
            e4m3[c] = e4m3_to_f32(static_cast<uint8_t>(c));
            fp4_pair[c][0] = e2m1_to_f32(static_cast<uint8_t>(c & 0xF));
            fp4_pair[c][1] = e2m1_to_f32(static_cast<uint8_t>(c >> 4));
        }
    }
};
const DecodeTables& tables() {
    static const DecodeTables t;
    return t;
}

float read_scale(const TensorView& s, int64_t i) {
    DI_CHECK(s.dtype() == DType::kF32 || s.dtype() == DType::kBF16 || s.dtype() == DType::kF8E8M0,
             "unsupported scale dtype ", s.describe());
    return load_float(s.data(), s.dtype(), i);
}

// 4 dot products sharing x.
inline void dot4(const float* x, const float* w0, const float* w1, const float* w2, const float* w3, int64_t n,
                 float* out) {
    v8f a0 = {}, a1 = {}, a2 = {}, a3 = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        v8f xv = load8(x + k);
        a0 += xv * load8(w0 + k);
        a1 += xv * load8(w1 + k);
        a2 += xv * load8(w2 + k);
        a3 += xv * load8(w3 + k);
    }
    float t0 = hsum(a0), t1 = hsum(a1), t2 = hsum(a2), t3 = hsum(a3);
    for (; k < n; ++k) {
        t0 += x[k] * w0[k];
        t1 += x[k] * w1[k];
        t2 += x[k] * w2[k];
        t3 += x[k] * w3[k];
    }
    out[0] = t0;
    out[1] = t1;
    out[2] = t2;
    out[3] = t3;
}

// One panel: y[t, n0 + r] for every token t and panel row r. Cloned for AVX2 (and a baseline);
// both clones perform the same 8-lane arithmetic in the same order (no FP contraction), so the
// results are identical whichever runs.
__attribute__((target_clones("avx2", "default"))) void panel_product(const float* x, int64_t T, int64_t K,
                                                                     const float* panel, int64_t rows, float* y,
                                                                     int64_t N) {
    for (int64_t t = 0; t < T; ++t) {
        const float* xr = x + t * K;
        float* yr = y + t * N;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {
            const float* w0 = panel + r * K;
            dot4(xr, w0, w0 + K, w0 + 2 * K, w0 + 3 * K, K, yr + r);
        }
        for (; r < rows; ++r) {
            v8f acc = {};
            const float* w = panel + r * K;
            int64_t k = 0;
            for (; k + 8 <= K; k += 8) acc += load8(xr + k) * load8(w + k);
            float v = hsum(acc);
            for (; k < K; ++k) v += xr[k] * w[k];
            yr[r] = v;
        }
    }
}

}  // namespace

void linear_rows(const LinearWeight& w, const float* x, int64_t rows, float* y) {
    linear({.x = TensorView(const_cast<float*>(x), DType::kF32, {rows, w.in_features}),
            .weight = &w,
            .y = TensorView(y, DType::kF32, {rows, w.out_features})});
}

float dot(const float* a, const float* b, int64_t n) {
    v8f acc = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) acc += load8(a + k) * load8(b + k);
    float t = hsum(acc);
    for (; k < n; ++k) t += a[k] * b[k];
    return t;
}

LinearWeight LinearWeight::rows(int64_t begin, int64_t end) const {
    DI_CHECK(begin >= 0 && begin <= end && end <= out_features, "linear weight row slice [", begin, ", ", end,
             ") of ", out_features);
    LinearWeight w = *this;
    w.weight = weight.slice_rows(begin, end);
    w.out_features = end - begin;
    if (format == WeightFormat::kFp4) w.scale = scale.slice_rows(begin, end);
    if (format == WeightFormat::kFp8Block) {
        DI_CHECK(begin % block_rows == 0, "fp8 weight row slice must start on a block boundary");
        w.scale = scale.slice_rows(begin / block_rows, ceil_div(end, block_rows));
    }
    return w;
}

LinearWeight make_linear_weight(const TensorView& weight, const TensorView& scale, int64_t out_features,
                                int64_t in_features, int64_t block_rows, int64_t block_cols) {
    LinearWeight w;
    w.weight = weight;
    w.scale = scale;
    w.out_features = out_features;
    w.in_features = in_features;
    w.block_rows = block_rows;
    w.block_cols = block_cols;
    switch (weight.dtype()) {
        case DType::kF32: w.format = WeightFormat::kF32; break;
        case DType::kBF16: w.format = WeightFormat::kBF16; break;
        case DType::kF16: w.format = WeightFormat::kF16; break;
        case DType::kF8E4M3: w.format = WeightFormat::kFp8Block; break;
        case DType::kI8:
        case DType::kU8: w.format = WeightFormat::kFp4; break;
        default: DI_THROW("unsupported linear weight ", weight.describe());
    }
    const bool packed = w.format == WeightFormat::kFp4;
    const Shape want = packed ? Shape{out_features, in_features / 2} : Shape{out_features, in_features};
    DI_CHECK(weight.shape() == want, "linear weight is ", weight.describe(), ", expected ", want.str());
    if (w.format == WeightFormat::kFp8Block) {
        const Shape ws{ceil_div(out_features, block_rows), ceil_div(in_features, block_cols)};
        DI_CHECK(!scale.empty() && scale.shape() == ws, "fp8 weight ", weight.describe(), " needs a scale ", ws.str(),
                 ", got ", scale.empty() ? std::string("none") : scale.describe());
    } else if (packed) {
        DI_CHECK(in_features % 32 == 0 && !scale.empty() && scale.dtype() == DType::kF8E8M0 &&
                     scale.shape() == Shape({out_features, in_features / 32}),
                 "fp4 weight ", weight.describe(), " needs a ue8m0 scale [", out_features, ", ", in_features / 32, "]");
    }
    return w;
}

void dequantize_rows(const LinearWeight& w, int64_t r0, int64_t r1, float* out) {
    const int64_t K = w.in_features;
    const auto* base = static_cast<const uint8_t*>(w.weight.data());
    switch (w.format) {
        case WeightFormat::kF32: std::memcpy(out, base + r0 * K * 4, static_cast<size_t>((r1 - r0) * K * 4)); return;
        case WeightFormat::kBF16:
            for (int64_t i = 0; i < (r1 - r0) * K; ++i) {
                uint16_t v;
                std::memcpy(&v, base + (r0 * K + i) * 2, 2);
                out[i] = bf16_to_f32(v);
            }
            return;
        case WeightFormat::kF16:
            for (int64_t i = 0; i < (r1 - r0) * K; ++i) {
                uint16_t v;
                std::memcpy(&v, base + (r0 * K + i) * 2, 2);
                out[i] = f16_to_f32(v);
            }
            return;
        case WeightFormat::kFp8Block: {
            const int64_t scale_cols = ceil_div(K, w.block_cols);
            for (int64_t r = r0; r < r1; ++r) {
                const uint8_t* row = base + r * K;
                float* o = out + (r - r0) * K;
                const float* lut = tables().e4m3;
                for (int64_t kb = 0; kb < scale_cols; ++kb) {
                    const float s = read_scale(w.scale, (r / w.block_rows) * scale_cols + kb);
                    const int64_t k_end = std::min(K, (kb + 1) * w.block_cols);
                    for (int64_t k = kb * w.block_cols; k < k_end; ++k) o[k] = lut[row[k]] * s;
                }
            }
            return;
        }
        case WeightFormat::kFp4: {
            const auto* sc = static_cast<const uint8_t*>(w.scale.data());
            const auto& pair = tables().fp4_pair;
            for (int64_t r = r0; r < r1; ++r) {
                const uint8_t* row = base + r * (K / 2);
                float* o = out + (r - r0) * K;
                for (int64_t kb = 0; kb < K; kb += 32) {
                    const float s = e8m0_to_f32(sc[r * (K / 32) + kb / 32]);
                    for (int64_t k = kb; k < kb + 32; k += 2) {
                        o[k] = pair[row[k / 2]][0] * s;
                        o[k + 1] = pair[row[k / 2]][1] * s;
                    }
                }
            }
            return;
        }
    }
}

void linear(const LinearParams& p) {
    DI_ICHECK(p.weight != nullptr);
    const LinearWeight& w = *p.weight;
    const int64_t T = p.x.dim(0), K = w.in_features, N = w.out_features;
    DI_CHECK(p.x.dtype() == DType::kF32 && p.x.ndim() == 2 && p.x.dim(1) == K, "linear: x is ", p.x.describe(),
             ", weight in_features ", K);
    DI_CHECK(p.y.dtype() == DType::kF32 && p.y.ndim() == 2 && p.y.dim(0) == T && p.y.dim(1) == N, "linear: y is ",
             p.y.describe(), ", expected [", T, ", ", N, "]");
    const float* x = p.x.data_as<const float>();
    float* y = p.y.data_as<float>();
    Buffer xq_buf;
    if (p.quantize_activations) {
        // act_quant then dequantize: x' = e4m3(x/s)·s is exact in f32, and the per-block scaling of the
        // official GEMM equals the product with x' up to the order of the fp32 additions.
        const int64_t B = p.activation_block;
        DI_CHECK(B > 0 && K % B == 0, "linear: activation quantization needs in_features % ", B, " == 0, got ", K);
        Buffer q(DType::kF8E4M3, {T, K}), s(DType::kF32, {T, K / B});
        act_quant({.x = p.x, .q = q.view(), .scale = s.view(), .block = B});
        xq_buf = Buffer(DType::kF32, {T, K});
        TensorView xq = xq_buf.view();
        const auto* qp = static_cast<const uint8_t*>(q.data());
        const float* sp = s.view().data_as<const float>();
        float* xo = xq.data_as<float>();
        for (int64_t i = 0; i < T * K; ++i) xo[i] = e4m3_to_f32(qp[i]) * sp[(i / K) * (K / B) + (i % K) / B];
        x = xo;
    }
    const int64_t num_panels = ceil_div(N, kPanelRows);
#pragma omp parallel if (T * N * K > (1 << 20) && num_panels > 1)
    {
        std::vector<float> panel(static_cast<size_t>(kPanelRows * K));
#pragma omp for schedule(static)
        for (int64_t pi = 0; pi < num_panels; ++pi) {
            const int64_t n0 = pi * kPanelRows, n1 = std::min(N, n0 + kPanelRows);
            dequantize_rows(w, n0, n1, panel.data());
            panel_product(x, T, K, panel.data(), n1 - n0, y + n0, N);
        }
    }
    if (p.round_output_bf16)
        for (int64_t i = 0; i < T * N; ++i) y[i] = bf16_to_f32(f32_to_bf16(y[i]));
}

}  // namespace deepinfer::cpu
