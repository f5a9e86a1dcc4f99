// SPDX-License-Identifier: Apache-2.0
// Compressor: per-channel softmax pooling over a window (with the previous window's first halves
// for the overlapping CSA compressor), RMSNorm, RoPE at the window's first position, QAT.
#include "model/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/linear.h"
#include "deepinfer/check.h"
#include "deepinfer/float_formats.h"

namespace deepinfer {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Scale exponent for a block with max |x| = amax and format max `fmt_max`: 2^ceil(log2(amax / fmt_max)).
float pow2_scale(float amax, float inv_fmt_max) { return std::ldexp(1.0f, ceil_log2_bits(amax * inv_fmt_max)); }
}  // namespace

void fp8_simulate_nope(float* x, int64_t nope_dims) {
    for (int64_t b = 0; b < nope_dims; b += 64) {
        const int64_t e = std::min(nope_dims, b + 64);
        float amax = 0;
        for (int64_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float s = pow2_scale(std::max(amax, 1e-4f), 1.0f / 448.0f);
        for (int64_t i = b; i < e; ++i)
            x[i] = cpu::round_bf16(e4m3_to_f32(f32_to_e4m3(std::clamp(x[i] / s, -448.0f, 448.0f))) * s);
    }
}

void walsh_hadamard(float* x, int64_t dim) {
    for (int64_t h = 1; h < dim; h *= 2)
        for (int64_t i = 0; i < dim; i += 2 * h)
            for (int64_t j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
    for (int64_t i = 0; i < dim; ++i) x[i] *= scale;
}

void fp4_simulate(float* x, int64_t dim) {
    for (int64_t b = 0; b < dim; b += 32) {
        const int64_t e = std::min(dim, b + 32);
        float amax = 0;
        for (int64_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float s = pow2_scale(std::max(amax, 6.0f * std::ldexp(1.0f, -126)), 1.0f / 6.0f);
        for (int64_t i = b; i < e; ++i)
            x[i] = cpu::round_bf16(e2m1_to_f32(f32_to_e2m1(std::clamp(x[i] / s, -6.0f, 6.0f))) * s);
    }
}

void hadamard_fp4_simulate(float* x, int64_t dim) {
    walsh_hadamard(x, dim);
    cpu::round_bf16_inplace(x, dim);
    fp4_simulate(x, dim);
}

void compressor_update(const BlockContext& ctx, const CompressorUpdateParams& p) {
    const CompressorWeights& w = *p.weights;
    CompressorState& st = *p.state;
    const int64_t S = p.num_tokens, D = ctx.config.hidden_size, m = w.ratio, d = w.head_dim;
    const int64_t width = st.width;
    DI_ICHECK(width == (w.overlap ? 2 * d : d));
    std::vector<float> c(static_cast<size_t>(S * width)), z(static_cast<size_t>(S * width));
    cpu::linear({.x = TensorView(const_cast<float*>(p.a), DType::kF32, {S, D}), .weight = &w.wkv,
                 .y = TensorView(c.data(), DType::kF32, {S, width})});
    cpu::linear({.x = TensorView(const_cast<float*>(p.a), DType::kF32, {S, D}), .weight = &w.wgate,
                 .y = TensorView(z.data(), DType::kF32, {S, width})});
    std::vector<float> slot_kv, slot_gate, entry(static_cast<size_t>(d));
    for (int64_t t = 0; t < S; ++t) {
        const int64_t pos = p.first_position + t;
        const float* ape = w.ape.ptr() + (pos % m) * width;
        for (int64_t i = 0; i < width; ++i) z[size_t(t * width + i)] += ape[i];
        const int64_t slot = pos % st.ring_rows;
        std::copy_n(c.begin() + t * width, width, st.ring_kv.mutable_row(slot));
        std::copy_n(z.begin() + t * width, width, st.ring_gate.mutable_row(slot));
        if ((pos + 1) % m != 0) continue;
        const int64_t window = (pos + 1) / m - 1;  // entry index; its rows are positions window*m .. pos
        DI_ICHECK(st.entries.size() == window);
        // Slots: overlap -> [previous window's first halves (m rows) | this window's second halves (m rows)];
        // window 0 has no previous window (weight 0). Rows are read by position from the ring.
        const int64_t slots = w.overlap ? 2 * m : m;
        slot_kv.assign(static_cast<size_t>(slots * d), 0.0f);
        slot_gate.assign(static_cast<size_t>(slots * d), kNegInf);
        for (int64_t r = 0; r < m; ++r) {
            const int64_t dst = w.overlap ? m + r : r;
            const int64_t off = w.overlap ? d : 0;
            const int64_t cur = (window * m + r) % st.ring_rows;
            std::copy_n(st.ring_kv.row(cur) + off, d, slot_kv.begin() + dst * d);
            std::copy_n(st.ring_gate.row(cur) + off, d, slot_gate.begin() + dst * d);
            if (w.overlap && window > 0) {
                const int64_t prev = ((window - 1) * m + r) % st.ring_rows;
                std::copy_n(st.ring_kv.row(prev), d, slot_kv.begin() + r * d);
                std::copy_n(st.ring_gate.row(prev), d, slot_gate.begin() + r * d);
            }
        }
        // Per-channel softmax over the slots, then the weighted sum (slot order).
        for (int64_t ch = 0; ch < d; ++ch) {
            float mx = kNegInf;
            for (int64_t s = 0; s < slots; ++s) mx = std::max(mx, slot_gate[size_t(s * d + ch)]);
            float den = 0;
            for (int64_t s = 0; s < slots; ++s) den += cpu::exp_f32(slot_gate[size_t(s * d + ch)] - mx);
            float acc = 0;
            for (int64_t s = 0; s < slots; ++s)
                acc += slot_kv[size_t(s * d + ch)] * (cpu::exp_f32(slot_gate[size_t(s * d + ch)] - mx) / den);
            entry[size_t(ch)] = acc;
        }
        if (ctx.official()) cpu::round_bf16_inplace(entry.data(), d);
        cpu::rms_norm(entry.data(), w.norm.ptr(), static_cast<float>(ctx.config.rms_norm_eps), d, entry.data());
        if (ctx.official()) cpu::round_bf16_inplace(entry.data(), d);
        ctx.rope_compress.apply(entry.data(), d, st.num_entries() * m);
        if (ctx.official()) {
            cpu::round_bf16_inplace(entry.data(), d);
            if (p.qat == CompressorQat::kFp8Kv) fp8_simulate_nope(entry.data(), d - ctx.rope_compress.rope_dim());
            if (p.qat == CompressorQat::kHadamardFp4) hadamard_fp4_simulate(entry.data(), d);
        }
        st.entries.append(entry.data());
    }
}

}  // namespace deepinfer
