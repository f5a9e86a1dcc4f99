// SPDX-License-Identifier: Apache-2.0
// transformers' DeepseekV41SparseMoeBlock / DeepseekV41Engram in f32.
#include "model/v41/ffn.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "deepinfer/check.h"
#include "model/v41/numerics.h"

namespace deepinfer::v41 {
namespace {


// SwiGLU expert on `rows` gathered rows; weight[r] multiplies row r's activation before w2 (null: 1,
// the shared expert). x: [rows, D]; y: [rows, D].
void expert(const V41TextConfig& c, Numerics nm, const ExpertWeights& e, const float* x, int64_t rows,
            const float* weight, float* y) {
    const int64_t I = c.moe_intermediate_size;
    std::vector<float> g(static_cast<size_t>(rows * I)), u(static_cast<size_t>(rows * I));
    project(nm, e.w1, x, rows, g.data());
    project(nm, e.w3, x, rows, u.data());
    const float limit = float(c.swiglu_limit);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < I; ++i) {
            const size_t k = size_t(r * I + i);
            float gi = g[k], ui = u[k];
            if (limit > 0) {
                ui = std::clamp(ui, -limit, limit);
                gi = std::min(gi, limit);
            }
            g[k] = (weight ? weight[r] : 1.0f) * (cpu::silu(gi) * ui);
        }
    round_activations(nm, g.data(), rows * I);  // bf16 before w2 (official)
    project(nm, e.w2, g.data(), rows, y);
}

float score_fn(const std::string& fn, float logit) {
    if (fn == "sqrtsoftplus") return std::sqrt(cpu::softplus(logit));
    if (fn == "sigmoid") return cpu::sigmoid(logit);
    DI_THROW("scoring_func ", fn, " is not supported by the V4.1 CPU forward");
}

}  // namespace

void moe_forward(const V41TextConfig& c, const MoeParams& p) {
    const MoeWeights& w = *p.weights;
    const int64_t S = p.num_tokens, D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
    std::vector<float> logits(size_t(S * E));
    cpu::linear_rows(w.gate, p.x, S, logits.data());
    // Routing of every token: chosen[t*K + k] (selection order) and its weight.
    std::vector<int64_t> chosen(static_cast<size_t>(S * K));
    std::vector<float> weight(static_cast<size_t>(S * K));
    std::vector<float> scores(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t t = 0; t < S; ++t) {
        const Vec& bias = p.image_mask && p.image_mask[t] ? w.bias_vl : w.bias;
        for (int64_t e = 0; e < E; ++e) {
            scores[size_t(e)] = score_fn(c.scoring_func, logits[size_t(t * E + e)] / float(c.gate_temp));
            biased[size_t(e)] = scores[size_t(e)] + bias[size_t(e)];
        }
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int64_t a, int64_t b) {
            return biased[size_t(a)] > biased[size_t(b)] || (biased[size_t(a)] == biased[size_t(b)] && a < b);
        });
        float sum = 0.0f;
        for (int64_t k = 0; k < K; ++k) sum += scores[size_t(order[size_t(k)])];
        for (int64_t k = 0; k < K; ++k) {
            float wk = scores[size_t(order[size_t(k)])];
            if (c.norm_topk_prob && K > 1) wk = wk / (sum + 1e-20f);
            chosen[size_t(t * K + k)] = order[size_t(k)];
            weight[size_t(t * K + k)] = wk * float(c.routed_scaling_factor);
        }
    }
    // Each expert once over every (token, k) routed to it (the GEMMs see all rows of the batch; each
    // row's result does not depend on the others), outputs kept per (token, k).
    std::vector<std::vector<int64_t>> routed(static_cast<size_t>(E));
    for (int64_t i = 0; i < S * K; ++i) routed[size_t(chosen[size_t(i)])].push_back(i);
    std::vector<float> y(static_cast<size_t>(S * K * D)), xs, ws, ys;
    for (int64_t e = 0; e < E; ++e) {
        const std::vector<int64_t>& rows = routed[size_t(e)];
        if (rows.empty()) continue;
        const int64_t m = int64_t(rows.size());
        xs.resize(size_t(m * D));
        ws.resize(size_t(m));
        ys.resize(size_t(m * D));
        for (int64_t r = 0; r < m; ++r) {
            std::copy_n(p.x + (rows[size_t(r)] / K) * D, D, xs.begin() + r * D);
            ws[size_t(r)] = weight[size_t(rows[size_t(r)])];
        }
        expert(c, p.numerics, w.experts[size_t(e)], xs.data(), m, ws.data(), ys.data());
        for (int64_t r = 0; r < m; ++r) std::copy_n(ys.begin() + r * D, D, y.begin() + rows[size_t(r)] * D);
    }
    std::vector<float> shared(static_cast<size_t>(S * D));
    expert(c, p.numerics, w.shared, p.x, S, nullptr, shared.data());
    // Combine: ascending expert id, then the shared expert.
    std::vector<float> acc(static_cast<size_t>(D));
    std::vector<int64_t> by_id(static_cast<size_t>(K));
    for (int64_t t = 0; t < S; ++t) {
        std::iota(by_id.begin(), by_id.end(), 0);
        std::sort(by_id.begin(), by_id.end(),
                  [&](int64_t a, int64_t b) { return chosen[size_t(t * K + a)] < chosen[size_t(t * K + b)]; });
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t k : by_id)
            for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += y[size_t((t * K + k) * D + d)];
        for (int64_t d = 0; d < D; ++d) p.out[t * D + d] = acc[size_t(d)] + shared[size_t(t * D + d)];
    }
    round_activations(p.numerics, p.out, S * D);  // fp32 combine, one bf16 rounding (official)
}

void engram_forward(const V41TextConfig& c, const EngramParams& p) {
    const EngramWeights& w = *p.weights;
    const int64_t S = p.num_tokens, D = c.hidden_size, hc = c.hc_mult, cols = c.engram_num_hash_cols();
    const int64_t ehd = c.engram_head_dim, in = cols * ehd, out = (hc + 1) * D;
    const float eps = float(c.rms_norm_eps), inv_sqrt_d = 1.0f / std::sqrt(float(D));
    std::vector<float> e(size_t(S * in)), kv(size_t(S * out));
    for (int64_t t = 0; t < S; ++t)
        for (int64_t col = 0; col < cols; ++col) {
            const int64_t row = p.rows[t * cols + col];
            DI_CHECK(row >= 0 && row < w.table.out_features, "engram row ", row, " out of range");
            cpu::dequantize_rows(w.table, row, row + 1, e.data() + t * in + col * ehd);
        }
    project(p.numerics, w.wkv, e.data(), S, kv.data());
    for (int64_t t = 0; t < S; ++t) {
        const float* value = kv.data() + t * out + hc * D;
        for (int64_t j = 0; j < hc; ++j) {
            float* h = p.streams + (t * hc + j) * D;
            const float* key = kv.data() + t * out + j * D;
            const float* gw = w.gate_weight.data() + j * D;
            float hh = 0.0f, kk = 0.0f, dot = 0.0f;
            for (int64_t d = 0; d < D; ++d) {
                hh += h[d] * h[d];
                kk += key[d] * key[d];
                dot += h[d] * gw[d] * key[d];
            }
            const float rstd = (1.0f / std::sqrt(hh / float(D) + eps)) * (1.0f / std::sqrt(kk / float(D) + eps));
            const float dd = dot * rstd * inv_sqrt_d;
            float gate = cpu::sigmoid(std::copysign(std::sqrt(std::max(std::fabs(dd), 1e-6f)), dd));
            if (p.gate_off && p.gate_off[t]) gate = 0.0f;
            for (int64_t d = 0; d < D; ++d) h[d] += gate * value[d];
            round_activations(p.numerics, h, D);
        }
    }
}

}  // namespace deepinfer::v41
