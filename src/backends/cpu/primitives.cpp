// SPDX-License-Identifier: Apache-2.0
// RMS norm, RoPE tables (default and YaRN, as transformers builds them), bf16 rounding.
#include "backends/cpu/primitives.h"

#include <algorithm>

#include "backends/cpu/linear.h"

namespace deepinfer::cpu {

void rms_norm(const float* x, const float* weight, float eps, int64_t n, float* out) {
    const float mean_sq = dot(x, x, n) / static_cast<float>(n);
    const float r = 1.0f / std::sqrt(mean_sq + eps);
    if (weight) {
        for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * r);
    } else {
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r;
    }
}

void rms_norm_bf16_arith(float* x, float eps, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += round_bf16(x[i] * x[i]);
    const float mean = round_bf16(sum / static_cast<float>(n));
    const float r = round_bf16(1.0f / std::sqrt(round_bf16(mean + eps)));
    for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i] * r);
}

void round_bf16_inplace(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

RopeTable::RopeTable(const RopeParams& p, int64_t rope_dim) : rope_dim_(rope_dim) {
    const int64_t half = rope_dim / 2;
    inv_freq_.resize(static_cast<size_t>(half));
    const float base = static_cast<float>(p.rope_theta);
    std::vector<float> pos_freqs(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i)
        pos_freqs[size_t(i)] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
    if (!p.is_yarn()) {
        for (int64_t i = 0; i < half; ++i) inv_freq_[size_t(i)] = 1.0f / pos_freqs[size_t(i)];
        return;
    }
    // YaRN (transformers' _compute_yarn_parameters with truncate=True; attention factor forced to 1).
    const double dim = static_cast<double>(rope_dim);
    auto correction_dim = [&](double rotations) {
        return dim * std::log(static_cast<double>(p.original_max_position_embeddings) / (rotations * 2.0 * M_PI)) /
               (2.0 * std::log(p.rope_theta));
    };
    double low = std::floor(correction_dim(p.beta_fast));
    double high = std::ceil(correction_dim(p.beta_slow));
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    float lo = static_cast<float>(low), hi = static_cast<float>(high);
    if (lo == hi) hi += 0.001f;
    const float factor = static_cast<float>(p.factor);
    for (int64_t i = 0; i < half; ++i) {
        const float ramp = std::clamp((static_cast<float>(i) - lo) / (hi - lo), 0.0f, 1.0f);
        const float extrapolation_factor = 1.0f - ramp;
        const float extrapolation = 1.0f / pos_freqs[size_t(i)];
        const float interpolation = 1.0f / (factor * pos_freqs[size_t(i)]);
        inv_freq_[size_t(i)] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
}

void RopeTable::apply(float* x, int64_t dim, int64_t position, bool inverse) const {
    float* r = x + (dim - rope_dim_);
    const float pos = static_cast<float>(position);
    for (int64_t i = 0; i < rope_dim_ / 2; ++i) {
        const float angle = pos * inv_freq_[size_t(i)];
        const float c = std::cos(angle);
        const float s = inverse ? -std::sin(angle) : std::sin(angle);
        const float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * c - b * s;
        r[2 * i + 1] = b * c + a * s;
    }
}

}  // namespace deepinfer::cpu
