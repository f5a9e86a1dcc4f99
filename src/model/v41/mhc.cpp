// SPDX-License-Identifier: Apache-2.0
// transformers' DeepseekV41DecoderLayer.hc_mixes / hc_collapse / hc_expand, per token.
#include "model/v41/mhc.h"

#include <cmath>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"

namespace deepinfer::v41 {

void hc_mixes(const HcMixParams& p, const float* x, float* pre, float* post, float* comb) {
    const int64_t hc = p.hc, flat = p.hc * p.hidden, n_mix = (2 + hc) * hc;
    std::vector<float> normed(static_cast<size_t>(flat));
    cpu::rms_norm(x, nullptr, p.norm_eps, flat, normed.data());
    std::vector<float> mix(static_cast<size_t>(n_mix));
    for (int64_t m = 0; m < n_mix; ++m) mix[size_t(m)] = cpu::dot(normed.data(), p.fn + m * flat, flat);
    for (int64_t j = 0; j < hc; ++j) {
        pre[j] = cpu::sigmoid(mix[size_t(j)] * p.scale[0] + p.base[j]) + p.hc_eps;
        post[j] = 2.0f * cpu::sigmoid(mix[size_t(hc + j)] * p.scale[1] + p.base[hc + j]);
    }
    // comb logits, row softmax + eps, column normalization, then (iters - 1) row/column rounds.
    for (int64_t j = 0; j < hc; ++j) {
        float* row = comb + j * hc;
        float mx = -INFINITY;
        for (int64_t k = 0; k < hc; ++k) {
            row[k] = mix[size_t(2 * hc + j * hc + k)] * p.scale[2] + p.base[2 * hc + j * hc + k];
            mx = std::max(mx, row[k]);
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < hc; ++k) sum += (row[k] = cpu::exp_f32(row[k] - mx));
        for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + p.hc_eps;
    }
    auto normalize_columns = [&] {
        for (int64_t k = 0; k < hc; ++k) {
            float sum = 0.0f;
            for (int64_t j = 0; j < hc; ++j) sum += comb[j * hc + k];
            for (int64_t j = 0; j < hc; ++j) comb[j * hc + k] /= sum + p.hc_eps;
        }
    };
    normalize_columns();
    for (int64_t it = 1; it < p.sinkhorn_iters; ++it) {
        for (int64_t j = 0; j < hc; ++j) {
            float sum = 0.0f;
            for (int64_t k = 0; k < hc; ++k) sum += comb[j * hc + k];
            for (int64_t k = 0; k < hc; ++k) comb[j * hc + k] /= sum + p.hc_eps;
        }
        normalize_columns();
    }
}

void hc_collapse(const float* x, const float* pre, int64_t hc, int64_t hidden, float* out) {
    for (int64_t d = 0; d < hidden; ++d) {
        float acc = 0.0f;
        for (int64_t j = 0; j < hc; ++j) acc += pre[j] * x[j * hidden + d];
        out[d] = acc;
    }
}

void hc_expand(const float* o, const float* x, const float* post, const float* comb, int64_t hc, int64_t hidden,
               float* y) {
    for (int64_t k = 0; k < hc; ++k) {
        for (int64_t d = 0; d < hidden; ++d) {
            float mixed = 0.0f;
            for (int64_t j = 0; j < hc; ++j) mixed += comb[j * hc + k] * x[j * hidden + d];
            y[k * hidden + d] = post[k] * o[d] + mixed;
        }
    }
}

}  // namespace deepinfer::v41
