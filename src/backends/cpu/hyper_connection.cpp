// SPDX-License-Identifier: Apache-2.0
// mHC on the CPU. Mixing logits use the official order ((x·fn)·r with r = rsqrt(mean x² + eps));
// Sinkhorn: row softmax + eps, column normalize, then (iters-1) x (row, column) normalizations.
#include "backends/cpu/hyper_connection.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"

namespace deepinfer::cpu {
namespace {
// mix[j] = (x · fn[j]) · rsqrt(mean(x²) + eps) over the flattened hc*D values.
void mix_logits(const float* x, const float* fn, int64_t outputs, int64_t flat, float eps, float* mix) {
    const float r = 1.0f / std::sqrt(dot(x, x, flat) / static_cast<float>(flat) + eps);
    for (int64_t j = 0; j < outputs; ++j) mix[j] = dot(x, fn + j * flat, flat) * r;
}
}  // namespace

void hc_pre(const HcPreParams& p) {
    const int64_t hc = p.hc, D = p.hidden, flat = hc * D, outputs = (2 + hc) * hc;
#pragma omp parallel for schedule(static) if (p.num_tokens * flat * outputs > (1 << 20))
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        std::vector<float> mix(static_cast<size_t>(outputs));
        const float* x = p.x + t * flat;
        mix_logits(x, p.fn, outputs, flat, p.norm_eps, mix.data());
        std::vector<float> pre(static_cast<size_t>(hc));
        float* post = p.post + t * hc;
        float* C = p.comb + t * hc * hc;
        for (int64_t j = 0; j < hc; ++j) {
            pre[size_t(j)] = sigmoid(mix[size_t(j)] * p.scale[0] + p.base[j]) + p.hc_eps;
            post[j] = 2.0f * sigmoid(mix[size_t(hc + j)] * p.scale[1] + p.base[hc + j]);
        }
        for (int64_t i = 0; i < hc * hc; ++i) C[i] = mix[size_t(2 * hc + i)] * p.scale[2] + p.base[2 * hc + i];
        // Row softmax + eps.
        for (int64_t j = 0; j < hc; ++j) {
            float* row = C + j * hc;
            float m = *std::max_element(row, row + hc);
            float s = 0;
            for (int64_t k = 0; k < hc; ++k) s += (row[k] = exp_f32(row[k] - m));
            for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / s + p.hc_eps;
        }
        auto col_norm = [&] {
            for (int64_t k = 0; k < hc; ++k) {
                float s = 0;
                for (int64_t j = 0; j < hc; ++j) s += C[j * hc + k];
                for (int64_t j = 0; j < hc; ++j) C[j * hc + k] /= (s + p.hc_eps);
            }
        };
        auto row_norm = [&] {
            for (int64_t j = 0; j < hc; ++j) {
                float s = 0;
                for (int64_t k = 0; k < hc; ++k) s += C[j * hc + k];
                for (int64_t k = 0; k < hc; ++k) C[j * hc + k] /= (s + p.hc_eps);
            }
        };
        col_norm();
        for (int64_t it = 1; it < p.sinkhorn_iters; ++it) {
            row_norm();
            col_norm();
        }
        float* a = p.collapsed + t * D;
        for (int64_t d = 0; d < D; ++d) {
            float s = 0;
            for (int64_t j = 0; j < hc; ++j) s += pre[size_t(j)] * x[j * D + d];
            a[d] = p.round_bf16 ? round_bf16(s) : s;
        }
    }
}

void hc_post(const HcPostParams& p) {
    const int64_t hc = p.hc, D = p.hidden;
#pragma omp parallel for schedule(static) if (p.num_tokens * hc * hc * D > (1 << 20))
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        const float* o = p.out + t * D;
        const float* x = p.x + t * hc * D;
        const float* post = p.post + t * hc;
        const float* C = p.comb + t * hc * hc;
        float* y = p.y + t * hc * D;
        for (int64_t k = 0; k < hc; ++k) {
            for (int64_t d = 0; d < D; ++d) {
                float s = post[k] * o[d];
                for (int64_t j = 0; j < hc; ++j) s += C[j * hc + k] * x[j * D + d];
                y[k * D + d] = p.round_bf16 ? round_bf16(s) : s;
            }
        }
    }
}

void hc_head(const HcHeadParams& p) {
    const int64_t hc = p.hc, D = p.hidden, flat = hc * D;
#pragma omp parallel for schedule(static) if (p.num_tokens * flat * hc > (1 << 20))
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        std::vector<float> mix(static_cast<size_t>(hc));
        const float* x = p.x + t * flat;
        mix_logits(x, p.fn, hc, flat, p.norm_eps, mix.data());
        for (int64_t j = 0; j < hc; ++j) mix[size_t(j)] = sigmoid(mix[size_t(j)] * p.scale[0] + p.base[j]) + p.hc_eps;
        float* y = p.y + t * D;
        for (int64_t d = 0; d < D; ++d) {
            float s = 0;
            for (int64_t j = 0; j < hc; ++j) s += mix[size_t(j)] * x[j * D + d];
            y[d] = p.round_bf16 ? round_bf16(s) : s;
        }
    }
}

}  // namespace deepinfer::cpu
